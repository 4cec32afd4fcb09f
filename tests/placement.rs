//! Placement by device: a receiver whose files go to two filesystems on two
//! loop devices drives each device from its own lane's ring, and so does a
//! sender whose sources sit on two devices (when its receiver gave no
//! placement of its own). Checked with the kernel's counters: each
//! device's sectors (`/sys/block`), and each ring's bytes
//! (`/proc/PID/task/TID/io` of the lane thread that made the ring and of
//! its io_uring workers, which the kernel names `iou-wrk-<that thread>`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::require;
use crate::transfer::Daemon;
use crate::util::{can_loop, json, stderr, urmove, LoopFs};

const MIB: u64 = 1 << 20;
/// The two files' sizes: unequal, so a ring that wrote some of each would
/// show in its total.
const SIZES: [u64; 2] = [300, 700];

/// A filesystem's mount bound onto `at` (under a receiver's root), undone
/// on drop.
struct Bound(PathBuf);

impl Bound {
    fn new(fs: &LoopFs, at: &Path) -> Bound {
        std::fs::create_dir_all(at).unwrap();
        let ok = Command::new("mount")
            .arg("--bind")
            .arg(fs.path())
            .arg(at)
            .status()
            .unwrap();
        assert!(ok.success(), "mount --bind {}", at.display());
        Bound(at.to_path_buf())
    }
}

impl Drop for Bound {
    fn drop(&mut self) {
        for _ in 0..20 {
            let ok = Command::new("umount").arg(&self.0).status();
            if ok.is_ok_and(|s| s.success()) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Two devices with a filesystem each, bound onto `root/a` and `root/b`.
struct TwoDevices {
    binds: Vec<Bound>,
    fs: Vec<LoopFs>,
}

impl TwoDevices {
    fn under(root: &Path) -> TwoDevices {
        let fs: Vec<LoopFs> = (0..2)
            .map(|_| LoopFs::new("xfs", 1200, 4096, false).expect("loop xfs"))
            .collect();
        let binds = ["a", "b"]
            .iter()
            .zip(&fs)
            .map(|(d, f)| Bound::new(f, &root.join(d)))
            .collect();
        TwoDevices { binds, fs }
    }

    /// MiB each device had written so far.
    fn written(&self) -> Vec<u64> {
        let _ = Command::new("sync").status();
        self.fs
            .iter()
            .map(|f| f.dev.sectors().1 * 512 / MIB)
            .collect()
    }

    /// MiB each device had read so far.
    fn read(&self) -> Vec<u64> {
        self.fs
            .iter()
            .map(|f| f.dev.sectors().0 * 512 / MIB)
            .collect()
    }
}

impl Drop for TwoDevices {
    fn drop(&mut self) {
        self.binds.clear();
    }
}

/// The sources: `a/f` and `b/g` of [`SIZES`] MiB of noise, under `top`.
fn sources(top: &Path) {
    for (d, (name, mib)) in ["a", "b"].iter().zip([("f", SIZES[0]), ("g", SIZES[1])]) {
        std::fs::create_dir_all(top.join(d)).unwrap();
        let data = crate::util::noise((mib * MIB) as usize, mib);
        std::fs::write(top.join(d).join(name), data).unwrap();
    }
}

/// The counters of `/proc/PID/task/TID/io` a ring is watched by.
#[derive(Clone, Copy)]
enum Io {
    Read,
    Write,
}

impl Io {
    fn field(self) -> &'static str {
        match self {
            Io::Read => "read_bytes: ",
            Io::Write => "write_bytes: ",
        }
    }
}

/// Bytes each ring of `pid` read or wrote, by the thread that made it: a
/// lane's own and its io_uring workers' (`iou-wrk-<lane>`), the most seen
/// of each thread while `child` ran (a worker's count is lost when it
/// exits: the totals may fall short, never over).
fn ring_io(pid: u32, child: &mut Child, io: Io) -> HashMap<u32, u64> {
    let mut seen: HashMap<u32, (u32, u64)> = HashMap::new();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() && start.elapsed() < Duration::from_secs(120) {
        for (tid, owner, bytes) in thread_io(pid, io) {
            let e = seen.entry(tid).or_insert((owner, 0));
            e.1 = e.1.max(bytes);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut rings = HashMap::new();
    for (owner, bytes) in seen.into_values() {
        *rings.entry(owner).or_insert(0) += bytes;
    }
    rings.retain(|_, b| *b > MIB);
    rings
}

/// (thread, the ring's maker, its `io` bytes) of the lane threads of `pid`
/// and of their io_uring workers.
fn thread_io(pid: u32, io: Io) -> Vec<(u32, u32, u64)> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        let owner = match comm.trim().strip_prefix("iou-wrk-") {
            Some(o) => o.parse().unwrap_or(tid),
            // A worker just started bears its lane's name until it names
            // itself (PF_IO_WORKER): it is looked at once it has.
            None if comm.starts_with("urmove-lane-") && !is_io_worker(&t.path()) => tid,
            None => continue,
        };
        let counts = std::fs::read_to_string(t.path().join("io")).unwrap_or_default();
        let bytes = counts
            .lines()
            .find_map(|l| l.strip_prefix(io.field()))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        out.push((tid, owner, bytes));
    }
    out
}

/// Whether the thread at `task` is an io_uring worker (PF_IO_WORKER, in
/// the flags, the 9th field of its stat).
fn is_io_worker(task: &Path) -> bool {
    const PF_IO_WORKER: u64 = 0x10;
    let stat = std::fs::read_to_string(task.join("stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map_or("", |r| r.1);
    let flags = rest
        .split_whitespace()
        .nth(6)
        .and_then(|f| f.parse::<u64>().ok());
    flags.is_none_or(|f| f & PF_IO_WORKER != 0)
}

/// Each device was read or written by one ring: two rings did, each no
/// more than the smaller or the larger device took (a ring that wrote some
/// of each file would exceed the smaller), and together nearly all of the
/// data.
fn assert_one_ring_per_device(rings: &HashMap<u32, u64>, devices: &[u64], what: &str) {
    let mut r: Vec<u64> = rings.values().map(|b| b / MIB).collect();
    r.sort_unstable();
    let mut d = devices.to_vec();
    d.sort_unstable();
    assert_eq!(r.len(), 2, "{what}: rings that wrote (MiB): {r:?}");
    assert!(
        d[0] >= SIZES[0] && d[1] >= SIZES[1],
        "{what}: the devices took {d:?} MiB"
    );
    for (ring, dev) in r.iter().zip(&d) {
        assert!(
            *ring <= dev + dev / 20,
            "{what}: a ring moved {ring} MiB, its device took {dev} (rings {r:?}, devices {d:?})"
        );
    }
    let all: u64 = r.iter().sum();
    assert!(
        all * 10 >= (SIZES[0] + SIZES[1]) * 9,
        "{what}: the rings' counts caught {all} MiB of {} ({r:?})",
        SIZES[0] + SIZES[1]
    );
}

/// Watch the receiving process `pid` while `child` (the client) runs:
/// the run verified both files, and each device took its file from one
/// ring (the devices' counts since `before`).
fn watch_receiver(
    mut child: Child,
    pid: u32,
    (devices, before): (&TwoDevices, Vec<u64>),
    (d, what): (&Daemon, &str),
) {
    let rings = ring_io(pid, &mut child, Io::Write);
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{what}: {}\n{}", stderr(&o), d.log());
    assert_eq!(json(&o)["files_verified"], 2, "{what}");
    let took: Vec<u64> = devices
        .written()
        .iter()
        .zip(&before)
        .map(|(n, b)| n - b)
        .collect();
    assert_one_ring_per_device(&rings, &took, what);
}

fn same(a: &Path, b: &Path) {
    assert!(
        std::fs::read(a).unwrap() == std::fs::read(b).unwrap(),
        "{} differs from {}",
        b.display(),
        a.display()
    );
}

#[test]
fn a_push_to_two_devices_drives_each_from_its_own_ring_on_the_receiver() {
    require!(can_loop("xfs"), "needs root, losetup and mkfs.xfs");
    let d = Daemon::start_full(&[], "127.0.0.1", Path::new("/var/tmp"), &["--lanes", "2"]);
    let devices = TwoDevices::under(d.root.path());
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    sources(src.path());
    let (a, b) = (src.path().join("a"), src.path().join("b"));
    // The sender on two lanes (each serves one device's streams) and on
    // one (it routes each frame by its file).
    for lanes in ["2", "1"] {
        let before = devices.written();
        let child = crate::faults::send_child(
            &d,
            d.port,
            &["-P", "4", "--lanes", lanes, "--json"],
            &[a.to_str().unwrap(), b.to_str().unwrap(), "127.0.0.1:"],
        );
        let what = format!("sender on {lanes} lanes");
        watch_receiver(child, d.pid(), (&devices, before), (&d, &what));
        same(&a.join("f"), &d.root.path().join("a/f"));
        same(&b.join("g"), &d.root.path().join("b/g"));
        for f in ["a/f", "b/g"] {
            std::fs::remove_file(d.root.path().join(f)).unwrap();
        }
    }
}

#[test]
fn a_pull_to_two_devices_drives_each_from_its_own_ring_on_the_client() {
    require!(can_loop("xfs"), "needs root, losetup and mkfs.xfs");
    let d = Daemon::start_full(&[], "127.0.0.1", Path::new("/var/tmp"), &["--lanes", "2"]);
    sources(d.root.path());
    let local = tempfile::tempdir_in("/var/tmp").unwrap();
    let devices = TwoDevices::under(local.path());
    let before = devices.written();
    let child = urmove()
        .args(["pull", "-p", &d.port.to_string(), "-P", "4", "--lanes", "2"])
        .args(["--json", "--key-file"])
        .arg(&d.key)
        .args(["127.0.0.1:a", "127.0.0.1:b"])
        .arg(local.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    watch_receiver(child, pid, (&devices, before), (&d, "pull"));
    same(&d.root.path().join("a/f"), &local.path().join("a/f"));
    same(&d.root.path().join("b/g"), &local.path().join("b/g"));
}

/// Watch the sending process `pid` while `child` (the client) runs: the
/// run verified both files, and each source device was read by one ring
/// (the devices' counts since `before`).
fn watch_sender(
    mut child: Child,
    pid: u32,
    (devices, before): (&TwoDevices, Vec<u64>),
    (d, what): (&Daemon, &str),
) {
    let rings = ring_io(pid, &mut child, Io::Read);
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{what}: {}\n{}", stderr(&o), d.log());
    assert_eq!(json(&o)["files_verified"], 2, "{what}");
    let took: Vec<u64> = devices
        .read()
        .iter()
        .zip(&before)
        .map(|(n, b)| n - b)
        .collect();
    assert_one_ring_per_device(&rings, &took, what);
}

/// The kernel's cached pages of every file dropped: a source is read from
/// its device.
fn drop_caches() {
    let _ = Command::new("sync").status();
    std::fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
}

#[test]
fn a_push_from_two_devices_reads_each_with_its_own_ring_on_the_sender() {
    require!(can_loop("xfs"), "needs root, losetup and mkfs.xfs");
    // One receiving lane: the receiver gives no placement, the sender
    // places by its own devices.
    let d = Daemon::start_full(&[], "127.0.0.1", Path::new("/var/tmp"), &["--lanes", "1"]);
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let devices = TwoDevices::under(src.path());
    sources(src.path());
    drop_caches();
    let (a, b) = (src.path().join("a"), src.path().join("b"));
    let before = devices.read();
    let child = crate::faults::send_child(
        &d,
        d.port,
        &["-P", "4", "--lanes", "2", "--json"],
        &[a.to_str().unwrap(), b.to_str().unwrap(), "127.0.0.1:"],
    );
    let pid = child.id();
    watch_sender(child, pid, (&devices, before), (&d, "push"));
    same(&a.join("f"), &d.root.path().join("a/f"));
    same(&b.join("g"), &d.root.path().join("b/g"));
}

#[test]
fn a_pull_from_two_devices_reads_each_with_its_own_ring_on_the_daemon() {
    require!(can_loop("xfs"), "needs root, losetup and mkfs.xfs");
    let d = Daemon::start_full(&[], "127.0.0.1", Path::new("/var/tmp"), &["--lanes", "2"]);
    let devices = TwoDevices::under(d.root.path());
    sources(d.root.path());
    drop_caches();
    let local = tempfile::tempdir_in("/var/tmp").unwrap();
    let before = devices.read();
    // One receiving lane on the client: the daemon places by its devices.
    let child = urmove()
        .args(["pull", "-p", &d.port.to_string(), "-P", "4", "--lanes", "1"])
        .args(["--json", "--key-file"])
        .arg(&d.key)
        .args(["127.0.0.1:a", "127.0.0.1:b"])
        .arg(local.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    watch_sender(child, d.pid(), (&devices, before), (&d, "pull"));
    same(&d.root.path().join("a/f"), &local.path().join("a/f"));
    same(&d.root.path().join("b/g"), &local.path().join("b/g"));
}
