//! The checks of the disk behind `--target`: the device, its scheduler,
//! read-ahead and queue depths.

use std::path::{Path, PathBuf};

use super::profile;
use super::{Check, Scene};
use crate::datapath::host::{self, Disk};

/// The scheduler urmove recommends for `disk` given what it offers.
pub(super) fn scheduler_for(disk: &Disk, available: &[String]) -> String {
    let want = if disk.rotational == Some(true) {
        "mq-deadline"
    } else {
        "none"
    };
    if available.iter().any(|a| a == want) || available.is_empty() {
        want.into()
    } else {
        available.first().cloned().unwrap_or_else(|| want.into())
    }
}

const DISK_CHECKS: [&str; 5] = [
    "disk.device",
    "disk.scheduler",
    "disk.read_ahead_kb",
    "disk.nr_requests",
    "disk.queue_depth",
];

/// What one of [`DISK_CHECKS`] recommends, and where its rule comes from.
struct Rule {
    recommended: String,
    source: &'static str,
}

/// The rules of [`DISK_CHECKS`], in its order.
fn rules() -> [Rule; 5] {
    let rule = |recommended: String, source| Rule {
        recommended,
        source,
    };
    let read_ahead = format!(">= {}", profile::READ_AHEAD_KB);
    let depth = format!(">= {}", profile::NR_REQUESTS_MIN);
    [
        rule("the disk behind --target".to_string(), "urmove"),
        rule("none or mq-deadline".into(), profile::SRC_SCHEDULER),
        rule(read_ahead, "urmove"),
        rule(depth.clone(), "urmove"),
        rule(depth, "urmove"),
    ]
}

pub(super) fn disk_checks(s: &Scene) -> Vec<Check> {
    let disk = match &s.disk {
        Some(Ok(d)) => d,
        other => {
            let reason = match other {
                Some(Err(e)) => e.to_string(),
                _ => "no --target PATH given: name a file, directory or block device to check its disk".into(),
            };
            return DISK_CHECKS
                .iter()
                .zip(rules())
                .map(|(n, r)| Check::unseen(n, r.recommended, reason.clone(), r.source))
                .collect();
        }
    };
    let [device, scheduler, read_ahead, nr_requests, queue_depth] = rules();
    vec![
        device_check(s.target, disk, device),
        scheduler_check(disk, scheduler),
        queue_number(
            DISK_CHECKS[2],
            disk.queue("read_ahead_kb"),
            profile::READ_AHEAD_KB,
            &read_ahead.recommended,
            "O_DIRECT (urmove's default) bypasses read-ahead; buffered reads (--direct off, or no O_DIRECT) stream better one 4 MiB block ahead",
            format!("{} is not readable", disk.queue("read_ahead_kb").display()),
        ),
        queue_number(
            DISK_CHECKS[3],
            disk.queue("nr_requests"),
            profile::NR_REQUESTS_MIN,
            &nr_requests.recommended,
            "requests the block layer queues per hardware queue; urmove keeps 32 in flight per disk by default (--qd)",
            format!("{} is not readable", disk.queue("nr_requests").display()),
        ),
        queue_number(
            DISK_CHECKS[4],
            disk.sysfs.join("device/queue_depth"),
            profile::NR_REQUESTS_MIN,
            &queue_depth.recommended,
            "commands the SCSI/SATA device takes at once (NCQ allows 32)",
            format!(
                "no {}/device/queue_depth: not a SCSI or SATA disk (NVMe, virtio and loop queue by nr_requests)",
                disk.name
            ),
        ),
    ]
}

/// Which disk `target` is on, and where its queue's settings are read.
fn device_check(target: Option<&Path>, disk: &Disk, rule: Rule) -> Check {
    let target = target.map(|t| t.display().to_string()).unwrap_or_default();
    let mut why = format!(
        "{target} is on {}; the checks below read {}/queue",
        disk.name,
        disk.sysfs.display()
    );
    if !disk.slaves.is_empty() {
        why += &format!(
            "; its members ({}) have their own queues: check each with --target /dev/NAME",
            disk.slaves.join(", ")
        );
    }
    Check::new(
        DISK_CHECKS[0],
        disk.describe(),
        rule.recommended,
        true,
        why,
        rule.source,
    )
}

/// The disk's scheduler against the one urmove recommends for it.
fn scheduler_check(disk: &Disk, rule: Rule) -> Check {
    match host::attr(&disk.queue("scheduler")) {
        Some(line) => {
            let (active, available) = host::parse_scheduler(&line);
            let active = active.unwrap_or_else(|| line.clone());
            let rec = scheduler_for(disk, &available);
            let why = if disk.rotational == Some(true) {
                "rotational: mq-deadline sorts requests by block and bounds their wait; bfq costs CPU at high rates"
            } else {
                "non-rotational: no scheduler; urmove keeps its own queue depth and a scheduler only adds CPU per request"
            };
            let why = format!("{why} (offered: {})", available.join(" "));
            Check::new(
                DISK_CHECKS[1],
                active.clone(),
                rec.clone(),
                active == rec,
                why,
                rule.source,
            )
        }
        None => Check::unseen(
            DISK_CHECKS[1],
            rule.recommended,
            format!("{} is not readable", disk.queue("scheduler").display()),
            rule.source,
        ),
    }
}

/// A number the disk's queue (or device) holds, at least `min`; `missing`
/// says why when it cannot be read.
fn queue_number(
    name: &str,
    path: PathBuf,
    min: u64,
    rec: &str,
    why: &str,
    missing: String,
) -> Check {
    match host::attr(&path).and_then(|v| v.parse::<u64>().ok()) {
        Some(v) => Check::new(name, v.to_string(), rec, v >= min, why, "urmove"),
        None => Check::unseen(name, rec, missing, "urmove"),
    }
}
