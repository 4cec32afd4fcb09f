//! `--apply`: the sysctl profile for this host written and loaded, the
//! disk's scheduler and read-ahead set, and what changed.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::disk::scheduler_for;
use super::profile::{self, Plan, CONGESTION_GOOD};
use super::Scene;
use crate::datapath::host::{self, Disk};

/// One change `--apply` made (or would make with `--no-load`).
#[derive(Debug, Clone, Serialize)]
pub struct Change {
    pub name: String,
    pub old: Option<String>,
    pub new: String,
    /// Whether the host now holds `new` because of this run.
    pub changed: bool,
    pub error: Option<String>,
}

/// What `--apply` did.
#[derive(Debug, Clone, Serialize)]
pub struct Applied {
    pub sysctl_file: PathBuf,
    pub file_written: bool,
    pub loaded: bool,
    pub changes: Vec<Change>,
    pub unchanged: Vec<String>,
    pub notes: Vec<String>,
}

impl Applied {
    pub(super) fn failed(&self) -> bool {
        !self.file_written || self.changes.iter().any(|c| c.error.is_some())
    }
}

/// The profile for this host: the plan's values (the autotuning ranges
/// from [`profile::autotuning_triple`], as the checks recommend them), but
/// never below what the host already has, and a congestion control the
/// kernel offers.
fn host_settings(p: &Plan) -> Vec<profile::Setting> {
    let current_cc = host::sysctl("net.ipv4.tcp_congestion_control").unwrap_or_default();
    let available = host::sysctl("net.ipv4.tcp_available_congestion_control").unwrap_or_default();
    let cc = if CONGESTION_GOOD.contains(&current_cc.as_str()) {
        current_cc
    } else {
        CONGESTION_GOOD
            .iter()
            .find(|c| available.split(' ').any(|a| a == **c))
            // Setting it loads tcp_bbr when the module is installed.
            .unwrap_or(&CONGESTION_GOOD[0])
            .to_string()
    };
    let mut set = profile::settings(p, profile::TCP_RMEM_LOW, profile::TCP_WMEM_LOW, &cc);
    for s in &mut set {
        match s.key {
            "net.core.rmem_max"
            | "net.core.wmem_max"
            | "net.core.netdev_max_backlog"
            | "net.ipv4.tcp_mtu_probing" => {
                if let (Ok(cur), Ok(rec)) = (host::sysctl_u64(s.key), s.value.parse::<u64>()) {
                    s.value = cur.max(rec).to_string();
                }
            }
            "net.ipv4.tcp_rmem" | "net.ipv4.tcp_wmem" => {
                if let Ok(cur) = host::sysctl_triple(s.key) {
                    let low = match s.key {
                        "net.ipv4.tcp_rmem" => profile::TCP_RMEM_LOW,
                        _ => profile::TCP_WMEM_LOW,
                    };
                    let v = profile::autotuning_triple(Some(cur), low, p.tcp_buf_max);
                    s.value = format!("{} {} {}", v[0], v[1], v[2]);
                }
            }
            _ => {}
        }
    }
    set
}

fn write_file(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("urmove-tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

pub(super) fn apply(s: &Scene, file: &Path, load: bool) -> Applied {
    let p = &s.plan;
    let settings = host_settings(p);
    let hostname = host::sysctl("kernel.hostname").unwrap_or_else(|_| "this host".into());
    let text = profile::render(
        p,
        &settings,
        &format!(
            "Written by `urmove tune --apply --link {} --rtt {}` on {hostname}.\n\
             Values the host already had higher were kept; load with `sysctl -p {}`.",
            p.link.name,
            profile::ms(p.rtt).replace(' ', ""),
            file.display()
        ),
    );
    let mut ap = Applied {
        sysctl_file: file.to_path_buf(),
        file_written: false,
        loaded: load,
        changes: Vec::new(),
        unchanged: Vec::new(),
        notes: Vec::new(),
    };
    match write_file(file, &text) {
        Ok(()) => ap.file_written = true,
        Err(e) => ap.changes.push(Change {
            name: file.display().to_string(),
            old: None,
            new: format!("{} settings", settings.len()),
            changed: false,
            error: Some(format!("writing {}: {e}", file.display())),
        }),
    }
    for set in &settings {
        let old = host::sysctl(set.key).ok();
        if old.as_deref() == Some(set.value.as_str()) {
            ap.unchanged.push(format!("{} = {}", set.key, set.value));
            continue;
        }
        let mut ch = Change {
            name: set.key.into(),
            old,
            new: set.value.clone(),
            changed: false,
            error: None,
        };
        if load {
            match host::write_sysctl(set.key, &set.value) {
                Ok(()) => ch.changed = true,
                Err(e) => ch.error = Some(format!("{}: {e}", host::sysctl_path(set.key).display())),
            }
            if set.key == "net.core.default_qdisc" && ch.changed {
                let dev = s.route.as_ref().map_or("DEV", |r| r.dev.as_str());
                ap.notes.push(format!(
                    "default_qdisc applies to qdiscs created from now on; switch a running NIC with `tc qdisc replace dev {dev} root fq`"
                ));
            }
        }
        ap.changes.push(ch);
    }
    if let Some(Ok(disk)) = &s.disk {
        apply_disk(disk, &mut ap);
    }
    ap
}

fn apply_disk(disk: &Disk, ap: &mut Applied) {
    let mut rule = Vec::new();
    let mut set = |ap: &mut Applied, attr: &str, old: String, new: String| {
        let path = disk.queue(attr);
        let mut ch = Change {
            name: format!("disk.{attr} ({})", disk.name),
            old: Some(old),
            new: new.clone(),
            changed: false,
            error: None,
        };
        match std::fs::write(&path, &new) {
            Ok(()) => {
                ch.changed = true;
                rule.push(format!("ATTR{{queue/{attr}}}=\"{new}\""));
            }
            Err(e) => ch.error = Some(format!("{}: {e}", path.display())),
        }
        ap.changes.push(ch);
    };
    if let Some(line) = host::attr(&disk.queue("scheduler")) {
        let (active, available) = host::parse_scheduler(&line);
        let want = scheduler_for(disk, &available);
        match active {
            Some(a) if a != want && available.contains(&want) => set(ap, "scheduler", a, want),
            Some(a) => ap
                .unchanged
                .push(format!("disk.scheduler ({}) = {a}", disk.name)),
            None => {}
        }
    }
    if let Some(ra) = host::attr(&disk.queue("read_ahead_kb")).and_then(|v| v.parse::<u64>().ok()) {
        if ra < profile::READ_AHEAD_KB {
            set(
                ap,
                "read_ahead_kb",
                ra.to_string(),
                profile::READ_AHEAD_KB.to_string(),
            );
        } else {
            ap.unchanged
                .push(format!("disk.read_ahead_kb ({}) = {ra}", disk.name));
        }
    }
    if !rule.is_empty() {
        ap.notes.push(format!(
            "disk settings last until reboot; to keep them, a udev rule such as /etc/udev/rules.d/90-urmove.rules: \
             ACTION==\"add|change\", KERNEL==\"{}\", {}",
            disk.name,
            rule.join(", ")
        ));
    }
}
