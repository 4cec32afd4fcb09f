//! The checks of the disk behind `--target`: the device, its scheduler,
//! read-ahead and queue depths.

use std::path::PathBuf;

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

pub(super) fn disk_checks(s: &Scene) -> Vec<Check> {
    let read_ahead_rec = format!(">= {}", profile::READ_AHEAD_KB);
    let depth_rec = format!(">= {}", profile::NR_REQUESTS_MIN);
    let recs = [
        "the disk behind --target".to_string(),
        "none or mq-deadline".into(),
        read_ahead_rec.clone(),
        depth_rec.clone(),
        depth_rec.clone(),
    ];
    let srcs = [
        "urmove",
        profile::SRC_SCHEDULER,
        "urmove",
        "urmove",
        "urmove",
    ];
    let disk = match &s.disk {
        Some(Ok(d)) => d,
        other => {
            let reason = match other {
                Some(Err(e)) => e.to_string(),
                _ => "no --target PATH given: name a file, directory or block device to check its disk".into(),
            };
            return DISK_CHECKS
                .iter()
                .zip(recs)
                .zip(srcs)
                .map(|((n, r), src)| Check::unseen(n, r, reason.clone(), src))
                .collect();
        }
    };
    let target = s
        .target
        .map(|t| t.display().to_string())
        .unwrap_or_default();
    let mut out = Vec::new();
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
    out.push(Check::new(
        DISK_CHECKS[0],
        disk.describe(),
        recs[0].clone(),
        true,
        why,
        srcs[0],
    ));
    out.push(match host::attr(&disk.queue("scheduler")) {
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
                srcs[1],
            )
        }
        None => Check::unseen(
            DISK_CHECKS[1],
            recs[1].clone(),
            format!("{} is not readable", disk.queue("scheduler").display()),
            srcs[1],
        ),
    });
    let numeric = |name: &str, path: PathBuf, min: u64, rec: &str, why: &str, missing: String| {
        match host::attr(&path).and_then(|v| v.parse::<u64>().ok()) {
            Some(v) => Check::new(name, v.to_string(), rec, v >= min, why, "urmove"),
            None => Check::unseen(name, rec, missing, "urmove"),
        }
    };
    out.push(numeric(
        DISK_CHECKS[2],
        disk.queue("read_ahead_kb"),
        profile::READ_AHEAD_KB,
        &read_ahead_rec,
        "O_DIRECT (urmove's default) bypasses read-ahead; buffered reads (--direct off, or no O_DIRECT) stream better one 4 MiB block ahead",
        format!("{} is not readable", disk.queue("read_ahead_kb").display()),
    ));
    out.push(numeric(
        DISK_CHECKS[3],
        disk.queue("nr_requests"),
        profile::NR_REQUESTS_MIN,
        &depth_rec,
        "requests the block layer queues per hardware queue; urmove keeps 32 in flight per disk by default (--qd)",
        format!("{} is not readable", disk.queue("nr_requests").display()),
    ));
    out.push(numeric(
        DISK_CHECKS[4],
        disk.sysfs.join("device/queue_depth"),
        profile::NR_REQUESTS_MIN,
        &depth_rec,
        "commands the SCSI/SATA device takes at once (NCQ allows 32)",
        format!(
            "no {}/device/queue_depth: not a SCSI or SATA disk (NVMe, virtio and loop queue by nr_requests)",
            disk.name
        ),
    ));
    out
}
