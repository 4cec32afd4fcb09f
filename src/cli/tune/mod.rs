//! `urmove tune`: read the host, compare each setting with what the stated
//! link speed and RTT need, say why and where the rule comes from, and on
//! request (`--apply`, root) write and load the sysctl profile and set the
//! target disk's scheduler and read-ahead.
//!
//! The checks are read in [`net`] (buffers, TCP, the route), [`cores`]
//! (governor, NIC queues and interrupts), [`disk`] and [`uring`] (locked
//! memory, io_uring); [`apply`] makes the changes and [`report`] prints
//! them.

mod apply;
mod cores;
mod disk;
mod net;
pub mod profile;
mod report;
mod uring;

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::args::{LinkArg, TuneArgs};
use super::render::{self, Out};
use super::{Failure, EXIT_FAILED};
use crate::datapath::host::{self, Disk, HostError, Route};
use apply::apply;
use cores::{governor, irq_affinity, nic_queues};
use disk::disk_checks;
use net::{autotuning, backlog, congestion, mtu_probing, qdisc, route_mtu, socket_max};
use profile::{Link, Plan};
use report::{human, human_applied, Report, Summary};
use uring::{io_uring_disabled, memlock, ring_probe};

/// Where `--apply` writes the profile unless `--sysctl-file` says otherwise.
pub const SYSCTL_FILE: &str = "/etc/sysctl.d/90-urmove.conf";

/// Longest `--rtt` accepted: past a second a path is a satellite hop or a
/// typo, and socket buffers hit the kernel's 2 GiB cap well before it.
const RTT_MAX_S: f64 = 10.0;

/// One line of the report.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: String,
    /// What the host has; `None` when it cannot be read (`why` says why).
    pub current: Option<String>,
    pub recommended: String,
    /// `None` when there is nothing to judge (not visible, not applicable).
    pub ok: Option<bool>,
    pub why: String,
    pub source: String,
}

impl Check {
    fn new(
        name: &str,
        current: impl Into<String>,
        recommended: impl Into<String>,
        ok: bool,
        why: impl Into<String>,
        source: &str,
    ) -> Check {
        Check {
            name: name.into(),
            current: Some(current.into()),
            recommended: recommended.into(),
            ok: Some(ok),
            why: why.into(),
            source: source.into(),
        }
    }

    /// A check whose current value cannot be read here.
    fn unseen(
        name: &str,
        recommended: impl Into<String>,
        reason: impl ToString,
        source: &str,
    ) -> Check {
        Check {
            name: name.into(),
            current: None,
            recommended: recommended.into(),
            ok: None,
            why: reason.to_string(),
            source: source.into(),
        }
    }
}

fn link_of(a: LinkArg) -> Link {
    let (name, gbps) = match a {
        LinkArg::G10 => ("10G", 10),
        LinkArg::G25 => ("25G", 25),
        LinkArg::G40 => ("40G", 40),
        LinkArg::G100 => ("100G", 100),
    };
    Link { name, gbps }
}

/// What the checks look at besides the sysctls.
struct Scene<'a> {
    plan: Plan,
    route: Result<Route, HostError>,
    target: Option<&'a Path>,
    disk: Option<Result<Disk, HostError>>,
    cpus: u64,
}

/// The whole command; with `--json` even a refusal prints a document.
pub(crate) fn tune(a: TuneArgs) -> Result<u8, Failure> {
    let json = a.json;
    let result = run(a);
    if let (true, Err(Failure::Usage(e) | Failure::Run(e))) = (json, &result) {
        let doc = serde_json::json!({"schema": 1, "status": "error", "error": format!("{e:#}")});
        Out::default().line(&doc.to_string());
    }
    result
}

fn run(a: TuneArgs) -> Result<u8, Failure> {
    let usage = |m: String| Failure::Usage(anyhow::anyhow!(m));
    let rtt_s = a.rtt.as_secs_f64();
    if rtt_s <= 0.0 || rtt_s > RTT_MAX_S {
        return Err(usage(format!(
            "--rtt must be above zero and at most {RTT_MAX_S:.0}s (ping the peer to measure it)"
        )));
    }
    let plan = Plan::new(link_of(a.link), a.rtt);
    let mut out = Out::default();
    if a.print_sysctl {
        out.line(profile::default_profile(&plan).trim_end());
        return Ok(0);
    }
    if let Some(t) = &a.target {
        if let Err(e) = std::fs::metadata(t) {
            return Err(usage(format!("--target {}: {e}", t.display())));
        }
    }
    if a.apply && !host::is_root() {
        return Err(usage(format!(
            "--apply needs root: it writes {}, /proc/sys and the disk's queue settings",
            a.sysctl_file
                .as_deref()
                .unwrap_or(Path::new(SYSCTL_FILE))
                .display()
        )));
    }
    let scene = Scene {
        plan,
        route: match &a.peer {
            Some(p) => host::route_to(p),
            None => host::default_route(),
        },
        target: a.target.as_deref(),
        disk: a.target.as_deref().map(host::disk_behind),
        cpus: host::online_cpus(),
    };
    let checks = checks(&scene);
    let applied = a.apply.then(|| {
        let file = a
            .sysctl_file
            .clone()
            .unwrap_or_else(|| PathBuf::from(SYSCTL_FILE));
        apply(&scene, &file, !a.no_load)
    });
    let failed = applied.as_ref().is_some_and(|ap| ap.failed());
    if a.json {
        let count = |want: Option<bool>| checks.iter().filter(|c| c.ok == want).count();
        let doc = Report {
            schema: 1,
            status: if failed { "error" } else { "ok" },
            link: plan.link.name,
            link_bits_per_s: plan.link.gbps * 1_000_000_000,
            rtt_ms: plan.rtt.as_secs_f64() * 1e3,
            bdp_bytes: plan.bdp_bytes,
            peer: a.peer.as_deref(),
            route: scene.route.as_ref().ok(),
            target: a.target.as_deref(),
            checks: &checks,
            summary: Summary {
                ok: count(Some(true)),
                not_ok: count(Some(false)),
                unknown: count(None),
            },
            applied: applied.as_ref(),
        };
        out.line(&serde_json::to_string_pretty(&doc).expect("the report serializes"));
    } else {
        human(&mut out, &scene, &checks, a.apply);
        if let Some(ap) = &applied {
            human_applied(&mut out, ap);
        }
    }
    if failed {
        render::error("--apply could not make every change (see above)");
        return Ok(EXIT_FAILED);
    }
    Ok(0)
}

fn checks(s: &Scene) -> Vec<Check> {
    let p = &s.plan;
    let mut c = vec![
        socket_max(p, "net.core.rmem_max", "receive buffers (SO_RCVBUF)"),
        socket_max(
            p,
            "net.core.wmem_max",
            "send buffers (SO_SNDBUF, send --sock-buf)",
        ),
        autotuning(p, "net.ipv4.tcp_rmem", profile::TCP_RMEM_LOW, "receive"),
        autotuning(p, "net.ipv4.tcp_wmem", profile::TCP_WMEM_LOW, "send"),
        backlog(p),
    ];
    c.extend(congestion(p));
    c.push(qdisc());
    c.push(mtu_probing());
    c.push(route_mtu(s));
    c.push(governor(p));
    c.push(nic_queues(s));
    c.push(irq_affinity(s));
    c.extend(disk_checks(s));
    c.push(memlock());
    c.push(io_uring_disabled());
    c.push(ring_probe());
    c
}
