//! What a host should be set to for a link speed and a round-trip time: the
//! numbers behind `urmove tune` and the sysctl profile it writes. Pure: no
//! host is read here.
//!
//! The socket buffers follow the bandwidth-delay product (BDP): a TCP
//! connection carries at most one window per round trip, so to fill a link of
//! B bit/s over a path of RTT seconds a socket must be allowed B x RTT / 8
//! bytes. The autotuning ceiling (`tcp_rmem`/`tcp_wmem`, third value) is that
//! BDP rounded up to a power of two, so one of urmove's streams can carry the
//! whole path when the others stall; the ceiling for buffers a program sets
//! itself (`rmem_max`/`wmem_max`) is twice that, the ratio ESnet's profiles
//! use. The kernel takes at most `i32::MAX` for either, which is what ESnet
//! sets for 100G.

use std::time::Duration;

/// Where the rules come from, as printed in the `source` of a check.
pub const SRC_ESNET_LINUX: &str = "ESnet fasterdata: Linux host tuning";
pub const SRC_ESNET_100G: &str = "ESnet fasterdata: 100G host tuning";
pub const SRC_KERNEL_IP_SYSCTL: &str = "kernel docs: networking/ip-sysctl.rst";
pub const SRC_KERNEL_IO_URING: &str = "kernel docs: admin-guide/sysctl/kernel.rst";
pub const SRC_SCHEDULER: &str =
    "Red Hat: Setting the disk scheduler (RHEL 8/9); Oracle: I/O scheduler on Linux 8";
/// The pages behind the short names above, for the profile's header.
pub const SOURCE_PAGES: [&str; 2] = [
    "https://fasterdata.es.net/host-tuning/linux/",
    "https://docs.kernel.org/networking/ip-sysctl.html",
];

/// The round trip tuned for when `--rtt` is not given: ESnet's reference
/// path for its 10G profile; a US coast-to-coast path is about 70 ms and
/// most transatlantic paths 80-100 ms. Longer paths pass `--rtt`.
pub const RTT_DEFAULT: &str = "100ms";

/// The largest value the kernel takes for a socket buffer limit.
pub const SOCKET_BUF_MAX: u64 = i32::MAX as u64;

/// Packets of `netdev_max_backlog` per Gb/s of link: ESnet's 10G profile
/// sets 30000; the backlog absorbs a burst, so it grows with the packet rate.
const BACKLOG_PER_GBPS: u64 = 3000;

/// The jumbo-frame MTU ESnet recommends for 10G and faster paths.
pub const MTU_JUMBO: u32 = 9000;

/// Read-ahead that keeps a buffered sequential read one urmove block (4 MiB)
/// ahead; O_DIRECT, urmove's default, does not use it.
pub const READ_AHEAD_KB: u64 = 4096;

/// Requests a disk queue should hold: urmove's default disk queue depth.
pub const NR_REQUESTS_MIN: u64 = 32;

/// urmove's default session: 4 streams of 4 MiB blocks carry its data at
/// first (`-P auto`), and the receiver's buffers are sized for 8.
pub const SESSION_STREAMS: usize = 4;
pub const SESSION_BUFFER_STREAMS: usize = 8;
pub const SESSION_BLOCK: u32 = 4 << 20;

/// A link speed `--link` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    pub name: &'static str,
    pub gbps: u64,
}

/// The recommendations for one link and RTT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    pub link: Link,
    pub rtt: Duration,
    /// Bandwidth-delay product in bytes.
    pub bdp_bytes: u64,
    /// Third value of tcp_rmem / tcp_wmem.
    pub tcp_buf_max: u64,
    /// net.core.rmem_max / wmem_max.
    pub core_buf_max: u64,
    pub netdev_max_backlog: u64,
    /// NIC receive queues wanted: one per 12.5 Gb/s (a core's softirq load
    /// at standard frames is the limit) and at least one per default stream
    /// so RSS can spread them; never more than the CPUs.
    pub nic_queues_min: u64,
}

impl Plan {
    pub fn new(link: Link, rtt: Duration) -> Plan {
        let bdp_bytes = (link.gbps as f64 * 1e9 / 8.0 * rtt.as_secs_f64()).ceil() as u64;
        let tcp_buf_max = bdp_bytes.max(1).next_power_of_two().min(SOCKET_BUF_MAX);
        Plan {
            link,
            rtt,
            bdp_bytes,
            tcp_buf_max,
            core_buf_max: (tcp_buf_max * 2).min(SOCKET_BUF_MAX),
            netdev_max_backlog: link.gbps * BACKLOG_PER_GBPS,
            nic_queues_min: (link.gbps * 2).div_ceil(25).max(SESSION_STREAMS as u64),
        }
    }

    /// "10G x 100 ms", for explanations.
    pub fn path(&self) -> String {
        format!("{} x {}", self.link.name, ms(self.rtt))
    }
}

/// A duration as whole (or fractional) milliseconds.
pub fn ms(d: Duration) -> String {
    let v = d.as_secs_f64() * 1e3;
    if v.fract() == 0.0 {
        format!("{v:.0} ms")
    } else {
        format!("{v:.1} ms")
    }
}

/// Bytes as an exact power-of-1024 size when there is one ("128 MiB"), else
/// rounded ("119.2 MiB").
pub fn size(bytes: u64) -> String {
    if bytes == SOCKET_BUF_MAX {
        return "2 GiB - 1 B (the kernel's limit)".into();
    }
    const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (unit, scale) in UNITS {
        if bytes >= scale && bytes.is_multiple_of(scale) {
            return format!("{} {unit}", bytes / scale);
        }
    }
    for (unit, scale) in UNITS {
        if bytes >= scale {
            return format!("{:.1} {unit}", bytes as f64 / scale as f64);
        }
    }
    format!("{bytes} B")
}

/// The rate one window of `bytes` sustains over `rtt`, as "2.7 Gb/s".
pub fn window_rate(bytes: u64, rtt: Duration) -> String {
    let bps = bytes as f64 * 8.0 / rtt.as_secs_f64().max(1e-6);
    if bps >= 1e9 {
        format!("{:.1} Gb/s", bps / 1e9)
    } else {
        format!("{:.0} Mb/s", bps / 1e6)
    }
}

/// Why the setsockopt ceiling is what it is, for explanations.
pub fn core_reason(plan: &Plan) -> String {
    if plan.core_buf_max == SOCKET_BUF_MAX {
        format!(
            "{} is the kernel's limit (ESnet's 100G value), below 2 x the autotuning ceiling for {}",
            SOCKET_BUF_MAX,
            plan.path()
        )
    } else {
        format!(
            "{} is 2 x the autotuning ceiling for {}",
            size(plan.core_buf_max),
            plan.path()
        )
    }
}

/// One line of the sysctl profile with the comment above it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    pub key: &'static str,
    pub value: String,
    pub comment: String,
}

/// Autotuning min and default values written when the host's are unknown:
/// the kernel's own defaults for receive (since 4.20) and ESnet's for send.
pub const TCP_RMEM_LOW: [u64; 2] = [4096, 131072];
pub const TCP_WMEM_LOW: [u64; 2] = [4096, 65536];

/// An autotuning range (`tcp_rmem`/`tcp_wmem`): the profile's min, default
/// and max (`low`, `max`), never below what the host has (`cur`). The one
/// source of what `tune` recommends, `--apply` writes and `--print-sysctl`
/// prints (there with no host: `cur` is `None`).
pub fn autotuning_triple(cur: Option<[u64; 3]>, low: [u64; 2], max: u64) -> [u64; 3] {
    let want = [low[0], low[1], max];
    match cur {
        Some(c) => [c[0].max(want[0]), c[1].max(want[1]), c[2].max(want[2])],
        None => want,
    }
}

/// The congestion controls the profile accepts, best first.
pub const CONGESTION_GOOD: [&str; 2] = ["bbr", "htcp"];

/// The profile's settings for `plan`; `rmem_low`/`wmem_low` are the min and
/// default values kept in the autotuning ranges, `cc` the congestion control.
pub fn settings(plan: &Plan, rmem_low: [u64; 2], wmem_low: [u64; 2], cc: &str) -> Vec<Setting> {
    let core = plan.core_buf_max;
    let tcp = plan.tcp_buf_max;
    vec![
        Setting {
            key: "net.core.rmem_max",
            value: core.to_string(),
            comment: format!(
                "Largest receive buffer a program may set (SO_RCVBUF): {}. [{SRC_ESNET_LINUX}; urmove: 2 x BDP rounded up]",
                core_reason(plan)
            ),
        },
        Setting {
            key: "net.core.wmem_max",
            value: core.to_string(),
            comment: format!(
                "Largest send buffer a program may set (SO_SNDBUF, urmove --sock-buf): {}. [{SRC_ESNET_LINUX}; urmove]",
                size(core)
            ),
        },
        Setting {
            key: "net.ipv4.tcp_rmem",
            value: format!("{} {} {tcp}", rmem_low[0], rmem_low[1]),
            comment: format!(
                "Receive autotuning: min, default, max. The max holds one bandwidth-delay product ({} for {}) rounded up to {}. [{SRC_ESNET_LINUX}; urmove: BDP]",
                size(plan.bdp_bytes),
                plan.path(),
                size(tcp)
            ),
        },
        Setting {
            key: "net.ipv4.tcp_wmem",
            value: format!("{} {} {tcp}", wmem_low[0], wmem_low[1]),
            comment: format!(
                "Send autotuning: unacknowledged data in flight needs the same {}. [{SRC_ESNET_LINUX}; urmove: BDP]",
                size(tcp)
            ),
        },
        Setting {
            key: "net.core.netdev_max_backlog",
            value: plan.netdev_max_backlog.to_string(),
            comment: format!(
                "Packets queued per CPU between the NIC and TCP: 30000 at 10G, scaled with the packet rate of {}. [{SRC_ESNET_LINUX}; urmove: 3000 per Gb/s]",
                plan.link.name
            ),
        },
        Setting {
            key: "net.ipv4.tcp_congestion_control",
            value: cc.to_string(),
            comment: format!(
                "bbr or htcp recover from a loss on a long fast path in seconds; cubic and reno take minutes. Use htcp where tcp_bbr is missing. [{SRC_ESNET_LINUX}]"
            ),
        },
        Setting {
            key: "net.core.default_qdisc",
            value: "fq".into(),
            comment: format!(
                "Fair queueing paces every flow; interfaces created before this keep their qdisc (tc qdisc replace dev DEV root fq). [{SRC_ESNET_LINUX}]"
            ),
        },
        Setting {
            key: "net.ipv4.tcp_mtu_probing",
            value: "1".into(),
            comment: format!(
                "Find a working segment size when a jumbo-frame path drops ICMP 'fragmentation needed'. [{SRC_ESNET_LINUX}; {SRC_KERNEL_IP_SYSCTL}]"
            ),
        },
    ]
}

/// The text of a sysctl.d file holding `settings`.
pub fn render(plan: &Plan, settings: &[Setting], header: &str) -> String {
    let mut s = String::new();
    s += &format!(
        "# urmove host profile for a {} link and paths up to {} RTT\n",
        plan.link.name,
        ms(plan.rtt)
    );
    for line in header.lines() {
        s += &format!("# {line}\n");
    }
    s += "# Check a host against it with `urmove tune`; see docs/tuning.md.\n";
    for page in SOURCE_PAGES {
        s += &format!("# Source: {page}\n");
    }
    for set in settings {
        s += "\n";
        for line in wrap(&set.comment, 76) {
            s += &format!("# {line}\n");
        }
        s += &format!("{} = {}\n", set.key, set.value);
    }
    s
}

/// The profile `urmove tune --print-sysctl` prints (and the repository's
/// `tuning/sysctl.d/90-urmove.conf` holds for 10G): host-independent values.
pub fn default_profile(plan: &Plan) -> String {
    render(
        plan,
        &settings(plan, TCP_RMEM_LOW, TCP_WMEM_LOW, CONGESTION_GOOD[0]),
        &format!(
            "Written by `urmove tune --link {} --rtt {} --print-sysctl`.\n\
             Install as /etc/sysctl.d/90-urmove.conf and load with `sysctl -p /etc/sysctl.d/90-urmove.conf`\n\
             (or let `urmove tune --apply` do both, never lowering a value the host already has higher).",
            plan.link.name,
            ms(plan.rtt).replace(' ', "")
        ),
    )
}

/// Split `text` into lines of at most about `width` characters.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parse a sysctl.d text into (key, value) pairs; `Err` names the first line
    /// that is neither blank, a comment, nor `key = value`.
    fn parse(text: &str) -> Result<Vec<(String, String)>, String> {
        let mut out = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let l = line.trim();
            if l.is_empty() || l.starts_with('#') || l.starts_with(';') {
                continue;
            }
            let Some((k, v)) = l.split_once('=') else {
                return Err(format!("line {}: no '=' in {line:?}", i + 1));
            };
            let (k, v) = (k.trim(), v.trim());
            if k.is_empty() || k.contains(char::is_whitespace) || v.is_empty() {
                return Err(format!("line {}: not key = value: {line:?}", i + 1));
            }
            out.push((k.to_string(), v.to_string()));
        }
        Ok(out)
    }

    const L10: Link = Link {
        name: "10G",
        gbps: 10,
    };
    const L100: Link = Link {
        name: "100G",
        gbps: 100,
    };

    #[test]
    fn buffers_follow_the_bdp() {
        let p = Plan::new(L10, Duration::from_millis(100));
        assert_eq!(p.bdp_bytes, 125_000_000);
        assert_eq!(p.tcp_buf_max, 128 << 20);
        assert_eq!(p.core_buf_max, 256 << 20);
        assert_eq!(p.netdev_max_backlog, 30000);
        let p = Plan::new(L100, Duration::from_millis(100));
        assert_eq!(p.tcp_buf_max, SOCKET_BUF_MAX);
        assert_eq!(p.core_buf_max, SOCKET_BUF_MAX);
        assert_eq!(p.nic_queues_min, 8);
        let short = Plan::new(L10, Duration::from_millis(1));
        assert_eq!(short.tcp_buf_max, 2 << 20);
    }

    #[test]
    fn sizes_read_well() {
        assert_eq!(size(128 << 20), "128 MiB");
        assert_eq!(size(125_000_000), "119.2 MiB");
        assert_eq!(size(SOCKET_BUF_MAX), "2 GiB - 1 B (the kernel's limit)");
        assert_eq!(size(3 << 29), "1536 MiB");
        assert_eq!(size(1_250_000_000), "1.2 GiB");
        assert_eq!(size(4096), "4 KiB");
        assert_eq!(
            window_rate(32 << 20, Duration::from_millis(100)),
            "2.7 Gb/s"
        );
    }

    #[test]
    fn the_profile_parses_back() {
        let p = Plan::new(L10, Duration::from_millis(100));
        let text = default_profile(&p);
        let kv = parse(&text).unwrap();
        assert_eq!(kv.len(), 8);
        assert!(kv.contains(&("net.core.rmem_max".into(), "268435456".into())));
        assert!(kv.contains(&("net.ipv4.tcp_rmem".into(), "4096 131072 134217728".into())));
        assert!(text.lines().all(|l| l.len() <= 100), "{text}");
        assert!(parse("a b = 1").is_err());
        assert!(parse("just words").is_err());
    }
}
