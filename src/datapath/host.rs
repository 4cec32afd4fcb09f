//! Host facts, read where the data path can reach them (lanes are placed
//! by them) and `urmove tune` too: sysctls under /proc/sys, routes, NIC
//! queues, IRQs and NUMA nodes, CPU frequency governors, and the block
//! device behind a path. Every reader says why when it cannot see something.

use std::collections::BTreeSet;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Why a host fact could not be seen: what was read or run, and what it said.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// A file under /proc or /sys, or a path asked about, could not be read.
    #[error("{}: {error}", path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    /// A sysctl whose value is not what it should hold (`want`: "a number").
    #[error("{key} is {value:?}, not {want}")]
    Value {
        key: String,
        value: String,
        want: &'static str,
    },
    #[error("cannot resolve {peer}: {error}")]
    Resolve { peer: String, error: std::io::Error },
    #[error("{peer} has no address")]
    NoAddress { peer: String },
    #[error("cannot run `ip route get` ({0}); install iproute2")]
    NoIpCommand(std::io::Error),
    #[error("`ip route get {addr}`: {said}")]
    RouteGet {
        addr: std::net::IpAddr,
        said: String,
    },
    #[error("no device in `ip route get {0}`")]
    NoDevice(std::net::IpAddr),
    #[error("no default route (give --peer HOST to check the route to it)")]
    NoDefaultRoute,
    #[error("{} is on device {major}:{minor}, which is not a block device (tmpfs, NFS, overlay?)", path.display())]
    NotABlockDevice {
        path: PathBuf,
        major: u32,
        minor: u32,
    },
    #[error("{} has no parent disk", .0.display())]
    NoParentDisk(PathBuf),
}

/// Reading `path` failed with `error`.
fn read_error(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> HostError {
    let path = path.into();
    move |error| HostError::Read { path, error }
}

/// `/proc/sys/...` of a dotted sysctl name.
pub fn sysctl_path(key: &str) -> PathBuf {
    Path::new("/proc/sys").join(key.replace('.', "/"))
}

/// A sysctl's value with runs of whitespace as single spaces.
pub fn sysctl(key: &str) -> Result<String, HostError> {
    let path = sysctl_path(key);
    std::fs::read_to_string(&path)
        .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
        .map_err(read_error(path))
}

/// A sysctl's value that is not `want` ("a number").
fn not(key: &str, value: String, want: &'static str) -> HostError {
    let key = key.to_owned();
    HostError::Value { key, value, want }
}

pub fn sysctl_u64(key: &str) -> Result<u64, HostError> {
    let v = sysctl(key)?;
    v.parse().map_err(|_| not(key, v, "a number"))
}

/// The three numbers of tcp_rmem / tcp_wmem.
pub fn sysctl_triple(key: &str) -> Result<[u64; 3], HostError> {
    let v = sysctl(key)?;
    let n: Vec<u64> = v.split(' ').filter_map(|x| x.parse().ok()).collect();
    n.try_into().map_err(|_| not(key, v, "three numbers"))
}

pub fn write_sysctl(key: &str, value: &str) -> std::io::Result<()> {
    std::fs::write(sysctl_path(key), format!("{value}\n"))
}

/// A sysfs attribute, trimmed.
pub fn attr(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// The interface a route leaves by, with the route's own MTU when it has one.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Route {
    pub dev: String,
    pub route_mtu: Option<u32>,
    /// "route to dtn2 (192.0.2.7)" or "default route".
    pub what: String,
}

/// The route to `peer` (a name or address), from `ip route get`.
pub fn route_to(peer: &str) -> Result<Route, HostError> {
    use std::net::ToSocketAddrs;
    let peer_owned = || peer.to_owned();
    let addr = (peer, 0)
        .to_socket_addrs()
        .map_err(|error| HostError::Resolve {
            peer: peer_owned(),
            error,
        })?
        .next()
        .ok_or_else(|| HostError::NoAddress { peer: peer_owned() })?
        .ip();
    let out = Command::new("ip")
        .args(["route", "get", &addr.to_string()])
        .output()
        .map_err(HostError::NoIpCommand)?;
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        return Err(HostError::RouteGet { addr, said });
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let words: Vec<&str> = text.split_whitespace().collect();
    let after = |key: &str| {
        words
            .iter()
            .position(|w| *w == key)
            .and_then(|i| words.get(i + 1).copied())
    };
    let dev = after("dev").ok_or(HostError::NoDevice(addr))?;
    let route_mtu = match after("mtu") {
        Some("lock") => words
            .iter()
            .position(|w| *w == "lock")
            .and_then(|i| words.get(i + 1))
            .and_then(|v| v.parse().ok()),
        Some(v) => v.parse().ok(),
        None => None,
    };
    let what = if peer == addr.to_string() {
        format!("route to {addr}")
    } else {
        format!("route to {peer} ({addr})")
    };
    Ok(Route {
        dev: dev.to_string(),
        route_mtu,
        what,
    })
}

/// The interface of the default route (IPv4, else IPv6).
pub fn default_route() -> Result<Route, HostError> {
    let v4 = std::fs::read_to_string("/proc/net/route").unwrap_or_default();
    // Iface Destination Gateway Flags ...; the default route's destination
    // and mask are 00000000.
    let dev = v4
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() > 7 && f[1] == "00000000" && f[7] == "00000000")
        .map(|f| f[0].to_string())
        .or_else(|| {
            // dest prefixlen src srcprefixlen nexthop metric refcnt use flags dev
            std::fs::read_to_string("/proc/net/ipv6_route")
                .unwrap_or_default()
                .lines()
                .map(|l| l.split_whitespace().collect::<Vec<_>>())
                .find(|f| {
                    f.len() == 10 && f[0].bytes().all(|b| b == b'0') && f[1] == "00" && f[9] != "lo"
                })
                .map(|f| f[9].to_string())
        })
        .ok_or(HostError::NoDefaultRoute)?;
    Ok(Route {
        dev,
        route_mtu: None,
        what: "default route".into(),
    })
}

fn net_dir(dev: &str) -> PathBuf {
    Path::new("/sys/class/net").join(dev)
}

pub fn dev_mtu(dev: &str) -> Option<u32> {
    attr(&net_dir(dev).join("mtu")).and_then(|v| v.parse().ok())
}

/// Whether `dev` is backed by hardware (or a hypervisor's virtual NIC):
/// software devices (lo, veth, bridges, tunnels) have no `device` link.
pub fn has_device(dev: &str) -> bool {
    net_dir(dev).join("device").exists()
}

/// The driver of `dev` (as `ixgbe` or `virtio_net`).
pub fn driver(dev: &str) -> Option<String> {
    std::fs::read_link(net_dir(dev).join("device/driver"))
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
}

/// (receive, transmit) queues of `dev`.
pub fn queues(dev: &str) -> Result<(u64, u64), HostError> {
    let dir = net_dir(dev).join("queues");
    let entries = std::fs::read_dir(&dir).map_err(read_error(&dir))?;
    let (mut rx, mut tx) = (0, 0);
    for e in entries.flatten() {
        let n = e.file_name();
        let n = n.to_string_lossy();
        if n.starts_with("rx-") {
            rx += 1;
        } else if n.starts_with("tx-") {
            tx += 1;
        }
    }
    Ok((rx, tx))
}

/// The NUMA node of `dev`'s PCI function, when the machine has nodes.
pub fn numa_node(dev: &str) -> Option<u32> {
    let mut p = std::fs::canonicalize(net_dir(dev).join("device")).ok()?;
    for _ in 0..3 {
        if let Some(n) = attr(&p.join("numa_node")) {
            return n.parse::<i64>().ok().and_then(|n| u32::try_from(n).ok());
        }
        p = p.parent()?.to_path_buf();
    }
    None
}

/// One interrupt line of a NIC.
#[derive(Debug, Clone)]
pub struct Irq {
    pub number: u32,
    pub name: String,
    /// CPUs the interrupt is delivered to (effective affinity when the
    /// kernel shows it, else the allowed list).
    pub cpus: Vec<u32>,
}

/// The interrupts of `dev`: the MSI vectors of its PCI function (a virtio
/// NIC's belong to the PCI device above it) and every /proc/interrupts line
/// naming the interface (as `eth0-TxRx-0`).
pub fn irqs(dev: &str) -> Vec<Irq> {
    let mut numbers = BTreeSet::new();
    if let Ok(mut p) = std::fs::canonicalize(net_dir(dev).join("device")) {
        for _ in 0..2 {
            if let Ok(entries) = std::fs::read_dir(p.join("msi_irqs")) {
                numbers.extend(
                    entries
                        .flatten()
                        .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok()),
                );
                break;
            }
            let pci = std::fs::read_link(p.join("subsystem"))
                .is_ok_and(|s| s.ends_with("bus/pci") || s.ends_with("pci"));
            if pci {
                break;
            }
            match p.parent() {
                Some(up) => p = up.to_path_buf(),
                None => break,
            }
        }
    }
    let table = std::fs::read_to_string("/proc/interrupts").unwrap_or_default();
    let mut names = std::collections::BTreeMap::new();
    for line in table.lines().skip(1) {
        let Some((num, rest)) = line.split_once(':') else {
            continue;
        };
        let Ok(num) = num.trim().parse::<u32>() else {
            continue;
        };
        let name = rest
            .split_whitespace()
            .skip_while(|w| w.bytes().all(|b| b.is_ascii_digit()))
            .collect::<Vec<_>>();
        // Controller and trigger come first; the action names last.
        let action = name.last().copied().unwrap_or("").to_string();
        let names_dev = name.iter().any(|w| {
            *w == dev
                || w.strip_prefix(dev)
                    .is_some_and(|r| r.starts_with('-') || r.starts_with('@'))
        });
        if names_dev {
            numbers.insert(num);
        }
        names.insert(num, action);
    }
    numbers
        .into_iter()
        .map(|n| {
            let dir = Path::new("/proc/irq").join(n.to_string());
            let list = attr(&dir.join("effective_affinity_list"))
                .filter(|s| !s.is_empty())
                .or_else(|| attr(&dir.join("smp_affinity_list")))
                .unwrap_or_default();
            Irq {
                number: n,
                name: names.get(&n).cloned().unwrap_or_default(),
                cpus: cpu_list(&list),
            }
        })
        .collect()
}

/// Parse a CPU list as the kernel prints it: `0-3,8,10-11`.
pub fn cpu_list(s: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
                    out.extend(a..=b.min(a + 65_536));
                }
            }
            None => out.extend(part.parse::<u32>().ok()),
        }
    }
    out
}

/// CPUs of NUMA node `node`.
pub fn node_cpus(node: u32) -> Option<Vec<u32>> {
    attr(&Path::new("/sys/devices/system/node").join(format!("node{node}/cpulist")))
        .map(|s| cpu_list(&s))
}

/// Online CPUs.
pub fn online_cpus() -> u64 {
    attr(Path::new("/sys/devices/system/cpu/online"))
        .map(|s| cpu_list(&s).len() as u64)
        .filter(|n| *n > 0)
        .or_else(|| {
            std::thread::available_parallelism()
                .ok()
                .map(|n| n.get() as u64)
        })
        .unwrap_or(1)
}

/// The scaling governor of each CPU that shows one, as (cpu, governor).
pub fn governors() -> Vec<(u32, String)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/sys/devices/system/cpu") else {
        return out;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(n) = name
            .to_string_lossy()
            .strip_prefix("cpu")
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some(g) = attr(&e.path().join("cpufreq/scaling_governor")) {
            out.push((n, g));
        }
    }
    out.sort();
    out
}

/// The whole disk behind a path, as sysfs shows it.
#[derive(Debug, Clone)]
pub struct Disk {
    /// Kernel name of the whole disk (`nvme0n1`, `sda`, `loop3`, `dm-0`).
    pub name: String,
    /// Its sysfs directory (holds `queue/`).
    pub sysfs: PathBuf,
    /// `major:minor` of the device the path lives on.
    pub dev: (u32, u32),
    /// The partition the path lives on, when it is one.
    pub partition: Option<String>,
    /// Devices under a device-mapper or md device (their queues matter).
    pub slaves: Vec<String>,
    pub rotational: Option<bool>,
}

impl Disk {
    pub fn queue(&self, attr_name: &str) -> PathBuf {
        self.sysfs.join("queue").join(attr_name)
    }

    /// "vda (partition vda1, 254:1, rotational)" and the like.
    pub fn describe(&self) -> String {
        let mut parts = vec![format!("{}:{}", self.dev.0, self.dev.1)];
        if let Some(p) = &self.partition {
            parts.insert(0, format!("partition {p}"));
        }
        if !self.slaves.is_empty() {
            parts.push(format!("on {}", self.slaves.join(", ")));
        }
        match self.rotational {
            Some(true) => parts.push("rotational".into()),
            Some(false) => parts.push("non-rotational".into()),
            None => {}
        }
        format!("{} ({})", self.name, parts.join(", "))
    }
}

fn split_dev(dev: u64) -> (u32, u32) {
    (
        libc::major(dev as libc::dev_t),
        libc::minor(dev as libc::dev_t),
    )
}

/// The block device a path is on (or is), walked up to the whole disk.
pub fn disk_behind(path: &Path) -> Result<Disk, HostError> {
    let meta = std::fs::metadata(path).map_err(read_error(path))?;
    let dev = if meta.file_type().is_block_device() {
        meta.rdev()
    } else {
        meta.dev()
    };
    let (major, minor) = split_dev(dev);
    let mut sys = Path::new("/sys/dev/block").join(format!("{major}:{minor}"));
    let mut shown = (major, minor);
    if !sys.exists() {
        // btrfs and others report an anonymous device; the mount table
        // names the real one.
        let source = mount_source(major, minor).ok_or_else(|| HostError::NotABlockDevice {
            path: path.to_owned(),
            major,
            minor,
        })?;
        let m = std::fs::metadata(&source).map_err(read_error(&source))?;
        shown = split_dev(m.rdev());
        sys = Path::new("/sys/dev/block").join(format!("{}:{}", shown.0, shown.1));
    }
    let real = std::fs::canonicalize(&sys).map_err(read_error(&sys))?;
    let (whole, partition) = if real.join("partition").exists() {
        let parent = real
            .parent()
            .ok_or_else(|| HostError::NoParentDisk(real.clone()))?
            .to_path_buf();
        (
            parent,
            real.file_name().map(|n| n.to_string_lossy().into_owned()),
        )
    } else {
        (real, None)
    };
    let name = whole
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut slaves: Vec<String> = std::fs::read_dir(whole.join("slaves"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    slaves.sort();
    let rotational = attr(&whole.join("queue/rotational")).map(|v| v == "1");
    Ok(Disk {
        name,
        sysfs: whole,
        dev: shown,
        partition,
        slaves,
        rotational,
    })
}

/// The `/dev/...` source of the mount on device `major:minor`.
fn mount_source(major: u32, minor: u32) -> Option<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = format!("{major}:{minor}");
    info.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let sep = f.iter().position(|w| *w == "-")?;
        (f.get(2) == Some(&want.as_str()))
            .then(|| f.get(sep + 2).map(|s| s.to_string()))
            .flatten()
            .filter(|s| s.starts_with("/dev/"))
    })
}

/// (active, available) of a `queue/scheduler` line: `none [mq-deadline] bfq`.
pub fn parse_scheduler(s: &str) -> (Option<String>, Vec<String>) {
    let mut active = None;
    let mut all = Vec::new();
    for w in s.split_whitespace() {
        if let Some(a) = w.strip_prefix('[').and_then(|w| w.strip_suffix(']')) {
            active = Some(a.to_string());
            all.push(a.to_string());
        } else {
            all.push(w.to_string());
        }
    }
    (active, all)
}

/// Whether this process runs as root (effective uid 0).
pub fn is_root() -> bool {
    super::sys::effective_uid() == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(cpu_list("0-3,8,10-11"), vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(cpu_list("5"), vec![5]);
        assert!(cpu_list("").is_empty());
    }

    #[test]
    fn schedulers() {
        let (a, all) = parse_scheduler("none [mq-deadline] kyber bfq");
        assert_eq!(a.as_deref(), Some("mq-deadline"));
        assert_eq!(all, ["none", "mq-deadline", "kyber", "bfq"]);
        assert_eq!(parse_scheduler("[none]").0.as_deref(), Some("none"));
    }
}
