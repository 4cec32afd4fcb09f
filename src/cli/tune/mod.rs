//! `urmove tune`: read the host, compare each setting with what the stated
//! link speed and RTT need, say why and where the rule comes from, and on
//! request (`--apply`, root) write and load the sysctl profile and set the
//! target disk's scheduler and read-ahead.

pub mod profile;

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::args::{LinkArg, TuneArgs};
use super::render::{self, Out};
use super::{Failure, EXIT_FAILED};
use crate::datapath::host::{self, Disk, HostError, Route};
use crate::datapath::{arena, ring, sys, Arena, Ring};
use profile::{size, Link, Plan, CONGESTION_GOOD, SRC_ESNET_100G, SRC_ESNET_LINUX};

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

/// The `--json` document (fields in this order).
#[derive(Serialize)]
struct Report<'a> {
    schema: u32,
    status: &'static str,
    link: &'static str,
    link_bits_per_s: u64,
    rtt_ms: f64,
    bdp_bytes: u64,
    peer: Option<&'a str>,
    route: Option<&'a Route>,
    target: Option<&'a Path>,
    checks: &'a [Check],
    summary: Summary,
    applied: Option<&'a Applied>,
}

#[derive(Serialize)]
struct Summary {
    ok: usize,
    not_ok: usize,
    unknown: usize,
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

fn socket_max(p: &Plan, key: &str, what: &str) -> Check {
    let rec = p.core_buf_max;
    let src = format!("{SRC_ESNET_LINUX}; urmove: 2 x BDP rounded up");
    match host::sysctl_u64(key) {
        Ok(cur) => Check::new(
            key,
            cur.to_string(),
            format!(">= {rec}"),
            cur >= rec,
            format!(
                "ceiling on {what} a program sets itself: {} now; {}",
                size(cur),
                profile::core_reason(p)
            ),
            &src,
        ),
        Err(e) => Check::unseen(key, format!(">= {rec}"), e, &src),
    }
}

fn autotuning(p: &Plan, key: &str, low: [u64; 2], side: &str) -> Check {
    let src = format!("{SRC_ESNET_LINUX}; urmove: one BDP per socket");
    match host::sysctl_triple(key) {
        Ok(cur) => {
            let rec = profile::autotuning_triple(Some(cur), low, p.tcp_buf_max);
            Check::new(
                key,
                format!("{} {} {}", cur[0], cur[1], cur[2]),
                format!("{} {} {}", rec[0], rec[1], rec[2]),
                cur == rec,
                format!(
                    "{side} autotuning stops at the 3rd value: {} lets one stream reach {} at {}; one BDP ({}) rounded up is {}",
                    size(cur[2]),
                    profile::window_rate(cur[2], p.rtt),
                    profile::ms(p.rtt),
                    size(p.bdp_bytes),
                    size(p.tcp_buf_max)
                ),
                &src,
            )
        }
        Err(e) => Check::unseen(
            key,
            format!("{} {} {}", low[0], low[1], p.tcp_buf_max),
            e,
            &src,
        ),
    }
}

fn backlog(p: &Plan) -> Check {
    let key = "net.core.netdev_max_backlog";
    let rec = p.netdev_max_backlog;
    let src = format!("{SRC_ESNET_LINUX} (30000 at 10G); urmove: scaled with link speed");
    match host::sysctl_u64(key) {
        Ok(cur) => Check::new(
            key,
            cur.to_string(),
            format!(">= {rec}"),
            cur >= rec,
            format!(
                "packets queued per CPU between the NIC and TCP; a burst at {} overflows a short queue (drops: 2nd column of /proc/net/softnet_stat)",
                p.link.name
            ),
            &src,
        ),
        Err(e) => Check::unseen(key, format!(">= {rec}"), e, &src),
    }
}

fn congestion(p: &Plan) -> [Check; 2] {
    let key = "net.ipv4.tcp_congestion_control";
    let rec = "bbr or htcp";
    let cc = match host::sysctl(key) {
        Ok(cur) => {
            let ok = CONGESTION_GOOD.contains(&cur.as_str());
            let why = if ok {
                format!("{cur} recovers from a loss on a long fast path within seconds")
            } else {
                format!(
                    "{cur} halves its window on a loss and regrows it slowly: minutes at {}; use bbr (or htcp)",
                    p.path()
                )
            };
            Check::new(key, cur, rec, ok, why, SRC_ESNET_LINUX)
        }
        Err(e) => Check::unseen(key, rec, e, SRC_ESNET_LINUX),
    };
    let key = "net.ipv4.tcp_available_congestion_control";
    let rec = "lists bbr or htcp";
    let avail = match host::sysctl(key) {
        Ok(cur) => {
            let have: Vec<&str> = cur
                .split(' ')
                .filter(|c| CONGESTION_GOOD.contains(c))
                .collect();
            let why = if have.is_empty() {
                "neither is loaded: modprobe tcp_bbr (or tcp_htcp) and list it in /etc/modules-load.d/"
                    .to_string()
            } else {
                format!("{} can be chosen", have.join(" and "))
            };
            Check::new(
                key,
                cur.clone(),
                rec,
                !have.is_empty(),
                why,
                SRC_ESNET_LINUX,
            )
        }
        Err(e) => Check::unseen(key, rec, e, SRC_ESNET_LINUX),
    };
    [cc, avail]
}

fn qdisc() -> Check {
    let key = "net.core.default_qdisc";
    match host::sysctl(key) {
        Ok(cur) => Check::new(
            key,
            cur.clone(),
            "fq",
            cur == "fq",
            "fq paces each TCP flow so parallel streams do not burst into switch buffers; only qdiscs created later pick it up",
            SRC_ESNET_LINUX,
        ),
        Err(e) => Check::unseen(key, "fq", e, SRC_ESNET_LINUX),
    }
}

fn mtu_probing() -> Check {
    let key = "net.ipv4.tcp_mtu_probing";
    let src = format!("{SRC_ESNET_LINUX}; {}", profile::SRC_KERNEL_IP_SYSCTL);
    match host::sysctl_u64(key) {
        Ok(cur) => Check::new(
            key,
            cur.to_string(),
            ">= 1",
            cur >= 1,
            "finds a working segment size when a jumbo-frame path drops ICMP 'fragmentation needed' (a black hole)",
            &src,
        ),
        Err(e) => Check::unseen(key, ">= 1", e, &src),
    }
}

fn route_mtu(s: &Scene) -> Check {
    let name = "route.mtu";
    let rec = format!(">= {}", profile::MTU_JUMBO);
    let src = format!("{SRC_ESNET_LINUX} (jumbo frames, MTU 9000)");
    let r = match &s.route {
        Ok(r) => r,
        Err(e) => return Check::unseen(name, rec, e, &src),
    };
    let Some(dev_mtu) = host::dev_mtu(&r.dev) else {
        return Check::unseen(
            name,
            rec,
            format!("/sys/class/net/{}/mtu is not readable", r.dev),
            &src,
        );
    };
    let mtu = r.route_mtu.map_or(dev_mtu, |m| m.min(dev_mtu));
    let ok = mtu >= profile::MTU_JUMBO;
    let why = if ok {
        format!(
            "jumbo frames on {}; every hop must carry them too (ping -M do -s 8972 PEER)",
            r.dev
        )
    } else {
        format!(
            "{mtu}-byte frames take about {:.0}x the packets of 9000 at {}; set mtu 9000 on {} and on every hop of the path",
            f64::from(profile::MTU_JUMBO) / f64::from(mtu.max(1)),
            s.plan.link.name,
            r.dev
        )
    };
    Check::new(
        name,
        format!("{mtu} ({}, {})", r.dev, r.what),
        rec,
        ok,
        why,
        &src,
    )
}

fn governor(p: &Plan) -> Check {
    let name = "cpu.scaling_governor";
    let src = format!("{SRC_ESNET_100G} (CPU governor)");
    let govs = host::governors();
    if govs.is_empty() {
        return Check::unseen(
            name,
            "performance",
            "not visible: no /sys/devices/system/cpu/cpu*/cpufreq (a VM, or the firmware sets the clock)",
            &src,
        );
    }
    let mut counts = std::collections::BTreeMap::new();
    for (_, g) in &govs {
        *counts.entry(g.as_str()).or_insert(0usize) += 1;
    }
    let current = counts
        .iter()
        .map(|(g, n)| format!("{g} on {n} of {} CPUs", govs.len()))
        .collect::<Vec<_>>()
        .join(", ");
    let ok = counts.len() == 1 && counts.contains_key("performance");
    Check::new(
        name,
        current,
        "performance",
        ok,
        format!(
            "a power-saving governor drops the clock between bursts and reacts late to the softirq load of {}; cpupower frequency-set -g performance",
            p.link.name
        ),
        &src,
    )
}

fn nic_queues(s: &Scene) -> Check {
    let name = "nic.queues";
    let want = s.plan.nic_queues_min.min(s.cpus).max(1);
    let rec = format!(">= {want} rx");
    let src = format!("urmove: a net worker per NIC queue; {SRC_ESNET_100G}");
    let r = match &s.route {
        Ok(r) => r,
        Err(e) => return Check::unseen(name, rec, e, &src),
    };
    if !host::has_device(&r.dev) {
        return Check {
            name: name.into(),
            current: Some(format!("{}: software device, no hardware queues", r.dev)),
            recommended: rec,
            ok: None,
            why: "the route leaves by a software device (loopback, veth, bridge); run tune with --peer set to the far data-transfer node".into(),
            source: src,
        };
    }
    match host::queues(&r.dev) {
        Ok((rx, tx)) => Check::new(
            name,
            format!(
                "{}: {rx} rx, {tx} tx ({})",
                r.dev,
                host::driver(&r.dev).unwrap_or_else(|| "driver unknown".into())
            ),
            rec,
            rx >= want,
            format!(
                "RSS spreads streams over queues and cores, one core's softirqs carry about 10-15 Gb/s; {} wants {}, capped at the {} CPUs here (ethtool -L {} combined {want})",
                s.plan.link.name, s.plan.nic_queues_min, s.cpus, r.dev
            ),
            &src,
        ),
        Err(e) => Check::unseen(name, rec, e, &src),
    }
}

/// `0-3,8` from a sorted list of CPUs.
fn cpu_ranges(cpus: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

fn irq_affinity(s: &Scene) -> Check {
    let name = "nic.irq_affinity";
    let src = format!("{SRC_ESNET_100G} (IRQ binding); kernel docs: core-api/irq/irq-affinity.rst");
    let r = match &s.route {
        Ok(r) => r,
        Err(e) => return Check::unseen(name, "spread over cores of the NIC's node", e, &src),
    };
    let node = host::numa_node(&r.dev);
    let node_cpus = node.and_then(host::node_cpus);
    let rec = match node {
        Some(n) => format!("spread over cores of node {n}"),
        None => "spread over distinct cores".into(),
    };
    let irqs = host::irqs(&r.dev);
    if irqs.is_empty() {
        return Check::unseen(
            name,
            rec,
            format!(
                "not visible: no IRQs of {} in /proc/interrupts or its PCI function's msi_irqs (a software device?)",
                r.dev
            ),
            &src,
        );
    }
    let mut all: Vec<u32> = irqs.iter().flat_map(|i| i.cpus.iter().copied()).collect();
    all.sort_unstable();
    all.dedup();
    let numbers: Vec<u32> = irqs.iter().map(|i| i.number).collect();
    let spread = irqs.len() <= 1 || all.len() > 1 || s.cpus <= 1;
    let off_node: Vec<u32> = match &node_cpus {
        Some(nc) => all.iter().copied().filter(|c| !nc.contains(c)).collect(),
        None => Vec::new(),
    };
    let ok = spread && off_node.is_empty();
    let why = if !spread {
        format!(
            "all {} IRQs land on CPU {}: one core takes every interrupt; spread them (irqbalance, or the driver's set_irq_affinity script)",
            irqs.len(),
            cpu_ranges(&all)
        )
    } else if !off_node.is_empty() {
        format!(
            "CPUs {} are off the NIC's NUMA node: packets cross the interconnect; bind IRQs and urmove to node {}",
            cpu_ranges(&off_node),
            node.unwrap_or(0)
        )
    } else {
        format!(
            "{} of {}: {}",
            irqs.len(),
            r.dev,
            irqs.iter()
                .map(|i| format!("{} {}->{}", i.number, i.name, cpu_ranges(&i.cpus)))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    Check::new(
        name,
        format!(
            "{} IRQs ({}) on CPUs {}",
            irqs.len(),
            cpu_ranges(&numbers),
            cpu_ranges(&all)
        ),
        rec,
        ok,
        why,
        &src,
    )
}

/// The scheduler urmove recommends for `disk` given what it offers.
fn scheduler_for(disk: &Disk, available: &[String]) -> String {
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

fn disk_checks(s: &Scene) -> Vec<Check> {
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

/// Locked memory a default session (buffers for 8 streams x 4 MiB blocks) registers,
/// its ring included, as the daemon checks it at start: (buffers, bytes).
fn session_memlock() -> (usize, u64) {
    let bufs = crate::session::buffer_count(
        profile::SESSION_BUFFER_STREAMS,
        profile::SESSION_BLOCK,
        4,
        4,
    );
    (
        bufs,
        crate::session::locked_bytes(bufs, profile::SESSION_BLOCK),
    )
}

fn memlock() -> Check {
    let name = "memlock";
    let (bufs, need) = session_memlock();
    let need_kib = need.div_ceil(1024);
    let rec = format!(">= {need_kib} KiB");
    let limit = sys::memlock_limit();
    let cap = sys::has_cap_ipc_lock();
    let mut current = match limit {
        Some(b) => format!("{} KiB", b / 1024),
        None => "unlimited".into(),
    };
    if cap {
        current += " (CAP_IPC_LOCK)";
    }
    let ok = cap || limit.is_none_or(|b| b >= need);
    Check::new(
        name,
        current,
        rec,
        ok,
        format!(
            "registered buffers are locked memory: 4 streams x 4 MiB blocks take {bufs} buffers ({}); unlimited or CAP_IPC_LOCK also do; this is the shell's limit, a daemon gets its unit's LimitMEMLOCK=",
            size(need)
        ),
        "urmove: session buffers (README, Requirements)",
    )
}

fn io_uring_disabled() -> Check {
    let name = "kernel.io_uring_disabled";
    let src = profile::SRC_KERNEL_IO_URING;
    match sys::io_uring_disabled() {
        Some(v) => {
            let root = host::is_root();
            let ok = v == 0 || (v == 1 && root);
            let why = match v {
                0 => "io_uring is open to every process".to_string(),
                1 if root => {
                    "only root and kernel.io_uring_group may create rings; this process is root, a daemon under another user is refused".into()
                }
                1 => "only root and kernel.io_uring_group may create rings; set 0, or add urmove's user to the group".into(),
                _ => "io_uring is disabled for everyone: set kernel.io_uring_disabled = 0".into(),
            };
            Check::new(name, v.to_string(), "0", ok, why, src)
        }
        None => Check::unseen(
            name,
            "0",
            "not present: kernels before 6.6 have no such switch (io_uring is on unless seccomp or a container forbids it)",
            src,
        ),
    }
}

fn ring_probe() -> Check {
    use ring::Needed;
    let name = "io_uring.ring";
    let rec = "works";
    let needed = [
        Needed::READ_FIXED,
        Needed::WRITE_FIXED,
        Needed::SEND,
        Needed::RECV,
        Needed::FSYNC,
        Needed::ASYNC_CANCEL,
    ];
    let make = |needed: &[Needed]| {
        Arena::new(arena::BUF_ALIGN, 1).and_then(|a| Ring::<()>::new(8, a, &[], needed))
    };
    let why = "what urmove's workers do at start: set up a ring, probe READ/WRITE_FIXED, SEND, RECV, FSYNC, ASYNC_CANCEL, register a buffer";
    match make(&needed) {
        Ok(r) => {
            let zc = make(&[Needed::SEND_ZC]).is_ok();
            Check::new(
                name,
                format!("works, send_zc {}", if zc { "yes" } else { "no" }),
                rec,
                true,
                format!("{why}; features: {}", r.features().join(" ")),
                "urmove: datapath ring probe",
            )
        }
        Err(e) => Check::new(
            name,
            format!("refused: {e}"),
            rec,
            false,
            why,
            "urmove: datapath ring probe",
        ),
    }
}

fn human(out: &mut Out, s: &Scene, checks: &[Check], applying: bool) {
    let p = &s.plan;
    out.line(&format!(
        "urmove tune: {} link, paths up to {} RTT: bandwidth-delay product {:.1} MB ({})",
        p.link.name,
        profile::ms(p.rtt),
        p.bdp_bytes as f64 / 1e6,
        size(p.bdp_bytes)
    ));
    let net = match &s.route {
        Ok(r) => format!("{} ({})", r.dev, r.what),
        Err(e) => format!("not found ({e})"),
    };
    let disk = match (&s.disk, s.target) {
        (Some(Ok(d)), Some(t)) => format!("{} behind {}", d.name, t.display()),
        (Some(Err(_)), Some(t)) => format!("not found behind {}", t.display()),
        _ => "none given (--target PATH)".into(),
    };
    out.line(&format!("network: {net}; disk: {disk}"));
    out.line("");
    // Each column as wide as its widest cell, so the OK column lines up.
    let cap = |v: usize| v;
    let name_w = checks.iter().map(|c| c.name.len()).max().unwrap_or(10);
    let cur_w = cap(checks
        .iter()
        .map(|c| c.current.as_deref().map_or(1, str::len))
        .max()
        .unwrap_or(10));
    let rec_w = cap(checks
        .iter()
        .map(|c| c.recommended.len())
        .max()
        .unwrap_or(10));
    out.line(&format!(
        "{:name_w$}  {:cur_w$}  {:rec_w$}  OK",
        "CHECK", "CURRENT", "RECOMMENDED"
    ));
    for c in checks {
        let ok = match c.ok {
            Some(true) => "ok",
            Some(false) => "NO",
            None => "?",
        };
        out.line(&format!(
            "{:name_w$}  {:cur_w$}  {:rec_w$}  {ok}",
            c.name,
            c.current.as_deref().unwrap_or("-"),
            c.recommended
        ));
        out.line(&format!("    {} [{}]", c.why, c.source));
    }
    let count = |want: Option<bool>| checks.iter().filter(|c| c.ok == want).count();
    out.line("");
    let mut end = format!(
        "{} ok, {} to change, {} not visible or not applicable.",
        count(Some(true)),
        count(Some(false)),
        count(None)
    );
    if !applying && count(Some(false)) > 0 {
        end += &format!(
            " `urmove tune --apply{}` (root) writes {SYSCTL_FILE} and loads it{}.",
            if p.link.name == "10G" {
                String::new()
            } else {
                format!(" --link {}", p.link.name)
            },
            if s.disk.is_some() {
                ", and sets the disk's scheduler and read-ahead"
            } else {
                ""
            }
        );
    }
    out.line(&end);
}

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
    fn failed(&self) -> bool {
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

fn apply(s: &Scene, file: &Path, load: bool) -> Applied {
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

fn human_applied(out: &mut Out, ap: &Applied) {
    out.line("");
    let file = ap.sysctl_file.display();
    out.line(&if !ap.file_written {
        format!("urmove tune --apply: could not write {file}")
    } else if ap.loaded {
        format!("urmove tune --apply: wrote {file} and loaded it")
    } else {
        format!("urmove tune --apply: wrote {file}; not loaded (--no-load)")
    });
    let w = ap.changes.iter().map(|c| c.name.len()).max().unwrap_or(0);
    for c in &ap.changes {
        let old = c.old.as_deref().unwrap_or("?");
        let tail = match (&c.error, c.changed) {
            (Some(e), _) => format!("  FAILED: {e}"),
            (None, true) => String::new(),
            (None, false) => "  (not loaded)".into(),
        };
        out.line(&format!("  {:w$}  {old} -> {}{tail}", c.name, c.new));
    }
    if !ap.unchanged.is_empty() {
        out.line(&format!("  unchanged: {}", ap.unchanged.join("; ")));
    }
    for n in &ap.notes {
        out.line(&format!("note: {n}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ranges_compact() {
        assert_eq!(cpu_ranges(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(cpu_ranges(&[4]), "4");
        assert_eq!(cpu_ranges(&[]), "");
    }

    #[test]
    fn the_default_session_fits_its_memlock_estimate() {
        // 36 buffers (for 8 streams) of 4 MiB frames in 2 MiB huge pages,
        // and a ring: what the daemon checks at start.
        let (bufs, bytes) = session_memlock();
        assert_eq!(bufs, 36);
        assert_eq!(bytes, crate::session::locked_bytes(36, 4 << 20));
        assert!(bytes > 145 << 20 && bytes < 148 << 20, "{bytes}");
    }
}
