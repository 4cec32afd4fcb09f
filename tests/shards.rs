//! One transfer sharded over several sessions (`send --shard`): a real
//! one-node Slurm cluster (scripts/slurm-one-node.sh) runs the shipped
//! array script (dist/slurm/urmove-array.sbatch) against two receivers in
//! their own network namespaces sharing one root, and `urmove report`
//! merges the tasks' reports. Also the Kubernetes variables by hand.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::{have, is_root, json, keygen, noise, stderr, stdout, urmove};

const BIG: u64 = 2 << 30;
const FILES: usize = 2000;

/// Two namespaces, each joined to this one by a veth pair: the
/// receivers' hosts (10.243.K.2), reached from here (10.243.K.1).
struct Hosts {
    names: Vec<String>,
    addrs: Vec<String>,
}

fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .status()
        .is_ok_and(|s| s.success())
}

impl Hosts {
    fn new() -> Option<Hosts> {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tag = (std::process::id() + 7 * n) % 10_000;
        let mut h = Hosts {
            names: Vec::new(),
            addrs: Vec::new(),
        };
        for k in 1..=2u32 {
            let (ns, here, there) = (
                format!("ursh{k}-{tag}"),
                format!("urh{k}-{tag}"),
                format!("urn{k}-{tag}"),
            );
            let net = format!("10.243.{}", k + 10 * (tag % 20));
            h.names.push(ns.clone());
            let ok = ip(&["netns", "add", &ns])
                && ip(&["link", "add", &here, "type", "veth", "peer", "name", &there])
                && ip(&["link", "set", &there, "netns", &ns])
                && ip(&["addr", "add", &format!("{net}.1/30"), "dev", &here])
                && ip(&["link", "set", &here, "up"])
                && ip(&[
                    "-n",
                    &ns,
                    "addr",
                    "add",
                    &format!("{net}.2/30"),
                    "dev",
                    &there,
                ])
                && ip(&["-n", &ns, "link", "set", &there, "up"])
                && ip(&["-n", &ns, "link", "set", "lo", "up"]);
            if !ok {
                return None;
            }
            h.addrs.push(format!("{net}.2"));
        }
        Some(h)
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in &self.names {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// The receivers: one daemon in each namespace, one root and one state
/// directory (one secret) between them, as DTNs in front of one
/// parallel filesystem.
struct Receivers {
    children: Vec<Child>,
    root: tempfile::TempDir,
    key: PathBuf,
    _state: tempfile::TempDir,
    logs: Vec<PathBuf>,
}

impl Receivers {
    fn start(hosts: &Hosts, work: &Path) -> Receivers {
        let root = tempfile::tempdir_in("/var/tmp").unwrap();
        let state = tempfile::tempdir_in("/var/tmp").unwrap();
        let key = work.join("key");
        keygen(&key);
        let mut r = Receivers {
            children: Vec::new(),
            root,
            key,
            _state: state,
            logs: Vec::new(),
        };
        for (ns, addr) in hosts.names.iter().zip(&hosts.addrs) {
            let log = work.join(format!("{ns}.log"));
            let child = Command::new("ip")
                .args(["netns", "exec", ns])
                .arg(env!("CARGO_BIN_EXE_urmove"))
                .args(["recv", "--listen", &format!("{addr}:7878"), "--root"])
                .arg(r.root.path())
                .arg("--key-file")
                .arg(&r.key)
                .arg("--state-dir")
                .arg(r._state.path())
                .stdout(std::fs::File::create(&log).unwrap())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap();
            r.children.push(child);
            r.logs.push(log);
        }
        for ns in &hosts.names {
            let up = Instant::now();
            while !Command::new("ip")
                .args(["netns", "exec", ns, "ss", "-ltn", "sport = :7878"])
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("7878"))
            {
                assert!(
                    up.elapsed() < Duration::from_secs(10),
                    "receiver in {ns} never listened"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        r
    }

    fn log(&self) -> String {
        self.logs
            .iter()
            .map(|l| std::fs::read_to_string(l).unwrap_or_default())
            .collect()
    }
}

impl Drop for Receivers {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A one-node Slurm cluster of its own, stopped when dropped.
struct Slurm {
    dir: tempfile::TempDir,
    conf: String,
}

impl Slurm {
    fn start() -> Slurm {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let o = Command::new(script("scripts/slurm-one-node.sh"))
            .arg("start")
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(o.status.success(), "slurm: {}{}", stdout(&o), stderr(&o));
        let conf = stdout(&o)
            .trim()
            .trim_start_matches("SLURM_CONF=")
            .to_string();
        Slurm { dir, conf }
    }

    fn cmd(&self, tool: &str) -> Command {
        let mut c = Command::new(tool);
        c.env("SLURM_CONF", &self.conf);
        c
    }

    /// Whether any task of job `id` is still queued or running.
    fn running(&self, id: &str) -> bool {
        let o = self.cmd("squeue").args(["-h", "-j", id]).output().unwrap();
        !stdout(&o).trim().is_empty()
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        let _ = Command::new(script("scripts/slurm-one-node.sh"))
            .arg("stop")
            .arg(self.dir.path())
            .status();
    }
}

fn script(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// One 2 GiB file and a tree of 2,000 small ones.
fn sources(dir: &Path) -> PathBuf {
    let top = dir.join("run42");
    std::fs::create_dir_all(top.join("frames")).unwrap();
    let chunk = noise(64 << 20, 42);
    let mut big = std::fs::File::create(top.join("big.dat")).unwrap();
    for i in 0..BIG / chunk.len() as u64 {
        use std::io::Write;
        let mut c = chunk.clone();
        c[..8].copy_from_slice(&i.to_le_bytes());
        big.write_all(&c).unwrap();
    }
    for i in 0..FILES {
        let bytes = noise(100 + (i * 733) % 20_000, i as u64);
        std::fs::write(top.join(format!("frames/f{i:04}")), bytes).unwrap();
    }
    top
}

/// The array script's environment, as a user exports it before sbatch.
fn submit(
    slurm: &Slurm,
    r: &Receivers,
    hosts: &Hosts,
    (src, reports): (&Path, &Path),
    wait: bool,
    extra: &str,
) -> String {
    let to = format!("{}:ingest", hosts.addrs.join(","));
    std::fs::create_dir_all(reports).unwrap();
    let mut c = slurm.cmd("sbatch");
    c.args(["--array=0-3", "--parsable", "-o"])
        .arg(reports.join("task-%a.out"))
        .env("URMOVE", env!("CARGO_BIN_EXE_urmove"))
        .env("URMOVE_SOURCES", src)
        .env("URMOVE_TO", &to)
        .env("URMOVE_KEY", &r.key)
        .env("URMOVE_REPORTS", reports)
        .env(
            "URMOVE_ARGS",
            format!("-P 2 --block 1M --split-over 64M {extra}"),
        );
    if wait {
        c.arg("--wait");
    }
    let o = c
        .arg(script("dist/slurm/urmove-array.sbatch"))
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(wait || o.status.success(), "sbatch: {out}{}", stderr(&o));
    out.trim().split(';').next().unwrap_or_default().to_string()
}

fn report(reports: &Path) -> (bool, serde_json::Value) {
    let mut files: Vec<PathBuf> = std::fs::read_dir(reports)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let o = urmove()
        .arg("report")
        .arg("--json")
        .args(&files)
        .output()
        .unwrap();
    (o.status.success(), json(&o))
}

fn same_tree(src: &Path, dst: &Path) {
    let o = Command::new("diff")
        .arg("-rq")
        .arg(src)
        .arg(dst)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "trees differ: {}{}",
        stdout(&o),
        stderr(&o)
    );
}

fn slurm_ready() -> bool {
    is_root()
        && have("ip")
        && have("sbatch")
        && (have("slurmctld") || Path::new("/usr/sbin/slurmctld").exists())
}

/// One Slurm cluster at a time (its ports are fixed), whatever the threads.
fn one_cluster() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Slurm is here, or (skipped) not; under CI (`URMOVE_REQUIRE_SLURM`,
/// which installs it) a missing Slurm fails.
fn slurm_or_skip() -> bool {
    if slurm_ready() {
        return true;
    }
    let why = "needs root, iproute2 and Slurm (slurmctld, slurmd, sbatch, munge)";
    assert!(std::env::var_os("URMOVE_REQUIRE_SLURM").is_none(), "{why}");
    eprintln!("skipped: {why}");
    false
}

/// What the Slurm tests run on: the receivers, the cluster, the sources.
/// (Dropped in this order: the daemons before their namespaces.)
struct Cluster {
    slurm: Slurm,
    r: Receivers,
    hosts: Hosts,
    src: PathBuf,
    reports: PathBuf,
    _work: tempfile::TempDir,
    /// One cluster at a time (its ports are fixed), whatever the threads.
    _alone: std::sync::MutexGuard<'static, ()>,
}

impl Cluster {
    /// Everything up, or `None` (skipped) where Slurm is missing; under CI
    /// (`URMOVE_REQUIRE_SLURM`, which installs it) a missing Slurm fails.
    fn up() -> Option<Cluster> {
        if !slurm_or_skip() {
            return None;
        }
        let alone = one_cluster();
        let work = tempfile::tempdir_in("/var/tmp").unwrap();
        let hosts = Hosts::new().expect("cannot create network namespaces");
        let r = Receivers::start(&hosts, work.path());
        let slurm = Slurm::start();
        let src = sources(work.path());
        let reports = work.path().join("reports");
        Some(Cluster {
            slurm,
            r,
            hosts,
            src,
            reports,
            _work: work,
            _alone: alone,
        })
    }
}

#[test]
#[ignore = "heavy: a Slurm cluster, 2 GiB over two namespaces (CI runs it alone)"]
fn a_slurm_array_moves_one_transfer_over_two_receivers_sharing_a_root() {
    let Some(c) = Cluster::up() else { return };
    let (slurm, r, hosts, src, reports) = (&c.slurm, &c.r, &c.hosts, &c.src, &c.reports);
    submit(slurm, r, hosts, (src, reports), true, "");
    let (ok, m) = report(reports);
    let tasks: String = (0..4)
        .map(|k| std::fs::read_to_string(reports.join(format!("task-{k}.out"))).unwrap_or_default())
        .collect();
    assert!(ok, "{m:#}\n{tasks}\n{}", r.log());
    assert_eq!(m["complete"], true);
    assert_eq!(m["files"], FILES as u64 + 1);
    assert_eq!(m["files_verified"], FILES as u64 + 1);
    assert_eq!(m["per_shard"].as_array().unwrap().len(), 4);
    assert!(m["bytes"].as_u64().unwrap() >= BIG, "{m:#}");
    // Every shard sent to its receiver: K mod 2.
    for s in m["per_shard"].as_array().unwrap() {
        let k = s["index"].as_u64().unwrap() as usize;
        assert_eq!(s["receiver"], format!("{}:7878", hosts.addrs[k % 2]));
    }
    same_tree(src, &r.root.path().join("ingest/run42"));
    // Nothing of urmove's own is left beside the files.
    let left = Command::new("find")
        .arg(r.root.path())
        .args(["-name", "*.urmove.*"])
        .output()
        .unwrap();
    assert_eq!(stdout(&left), "", "part files or journals left");
}

#[test]
#[ignore = "heavy: a Slurm cluster, 2 GiB over two namespaces (CI runs it alone)"]
fn a_killed_task_is_run_again_and_sends_less_than_the_whole() {
    let Some(c) = Cluster::up() else { return };
    let (slurm, r, hosts, src, reports) = (&c.slurm, &c.r, &c.hosts, &c.src, &c.reports);
    // Slow enough that task 2 is killed with its piece part journaled.
    let job = submit(slurm, r, hosts, (src, reports), false, "--rate-limit 60MB");
    let journal = r.root.path().join("ingest/run42/big.dat.2.urmove.piece");
    let t = Instant::now();
    while !journal.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "piece 2 never journaled\n{}",
            r.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let o = slurm
        .cmd("scancel")
        .args(["-s", "KILL", &format!("{job}_2")])
        .output()
        .unwrap();
    assert!(o.status.success(), "scancel: {}", stderr(&o));
    while slurm.running(&job) {
        assert!(
            t.elapsed() < Duration::from_secs(300),
            "the first array never ended"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let (ok, first) = report(reports);
    assert!(!ok && first["complete"] == false, "{first:#}");
    assert!(
        first["missing_shards"]
            .as_array()
            .unwrap()
            .contains(&2.into()),
        "{first:#}"
    );
    // The whole array again, at full speed.
    submit(slurm, r, hosts, (src, reports), true, "");
    let (ok, again) = report(reports);
    assert!(ok, "{again:#}\n{}", r.log());
    let total = again["bytes_total"].as_u64().unwrap();
    let crossed = again["bytes"].as_u64().unwrap();
    assert!(
        crossed < total / 2,
        "the re-run sent {crossed} of {total} bytes"
    );
    same_tree(src, &r.root.path().join("ingest/run42"));
}

/// Kubernetes' Indexed Job variables, set by hand: each pod's shard, on
/// loopback, one receiver; the merged report is whole only with every
/// index, and a shard of another transfer is refused.
#[test]
fn job_completion_index_picks_the_shard_and_the_report_needs_every_one() {
    let d = crate::transfer::Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = src.path().join("set");
    std::fs::create_dir_all(&top).unwrap();
    std::fs::write(top.join("large"), noise(9 << 20, 7)).unwrap();
    for i in 0..40 {
        std::fs::write(top.join(format!("s{i}")), noise(1000 + i * 100, i as u64)).unwrap();
    }
    let out = tempfile::tempdir().unwrap();
    let send = |index: u32| {
        let o = urmove()
            .args([
                "send",
                "--shard",
                "auto",
                "--split-over",
                "4M",
                "--block",
                "1M",
                "--json",
            ])
            .args(["-p", &d.port.to_string(), "--key-file"])
            .arg(&d.key)
            .arg(&top)
            .arg("127.0.0.1:k8s")
            .env_remove("SLURM_ARRAY_TASK_ID")
            .env("JOB_COMPLETION_INDEX", index.to_string())
            .env("JOB_COMPLETIONS", "3")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let path = out.path().join(format!("shard-{index}.json"));
        std::fs::write(&path, &o.stdout).unwrap();
        let v = json(&o);
        assert_eq!(v["shard"]["index"], index);
        assert_eq!(v["shard"]["count"], 3);
        path
    };
    let (a, b) = (send(0), send(2));
    let partial = urmove().args(["report"]).arg(&a).arg(&b).output().unwrap();
    assert_eq!(partial.status.code(), Some(1), "{}", stdout(&partial));
    assert!(
        stdout(&partial).contains("no report of shard 1"),
        "{}",
        stdout(&partial)
    );
    assert!(
        !d.root.path().join("k8s/set/large").exists(),
        "a split file committed with a piece missing"
    );
    let c = send(1);
    let whole = urmove()
        .args(["report", "--json"])
        .args([&a, &b, &c])
        .output()
        .unwrap();
    assert!(whole.status.success(), "{}", stdout(&whole));
    assert_eq!(json(&whole)["files_verified"], 41);
    assert_eq!(
        std::fs::read(top.join("large")).unwrap(),
        std::fs::read(d.root.path().join("k8s/set/large")).unwrap()
    );
    // Without the variables, auto says what it looks for.
    let none = urmove()
        .args(["send", "--shard", "auto", "--key-file"])
        .arg(&d.key)
        .arg(&top)
        .arg("127.0.0.1:k8s")
        .env_remove("JOB_COMPLETION_INDEX")
        .env_remove("SLURM_ARRAY_TASK_ID")
        .output()
        .unwrap();
    assert_eq!(none.status.code(), Some(2));
    assert!(
        stderr(&none).contains("JOB_COMPLETION_INDEX"),
        "{}",
        stderr(&none)
    );
}

/// `pull --shard`: three clients fetch their shares of one tree into one
/// local directory (the large file split over them), each told the whole
/// manifest by the daemon; the merged report is whole and the bytes equal.
#[test]
fn three_sharded_pulls_fill_one_directory_and_report_one_transfer() {
    let d = crate::transfer::Daemon::start();
    let top = d.root.path().join("pool/set");
    std::fs::create_dir_all(top.join("sub")).unwrap();
    std::fs::write(top.join("large"), noise(13 << 20, 3)).unwrap();
    for i in 0..60 {
        std::fs::write(
            top.join(format!("sub/f{i}")),
            noise(500 + i * 321, i as u64),
        )
        .unwrap();
    }
    let local = tempfile::tempdir_in("/var/tmp").unwrap();
    let state = tempfile::tempdir().unwrap();
    let reports = tempfile::tempdir().unwrap();
    let pulls: Vec<_> = (0..3)
        .map(|k| {
            urmove()
                .args([
                    "pull",
                    "--shard",
                    &format!("{k}/3"),
                    "--split-over",
                    "8M",
                    "--block",
                    "1M",
                ])
                .args(["--json", "-P", "2", "-p", &d.port.to_string(), "--key-file"])
                .arg(&d.key)
                .arg("--state-dir")
                .arg(state.path())
                .arg("127.0.0.1:pool/set")
                .arg(local.path())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut files = Vec::new();
    for (k, p) in pulls.into_iter().enumerate() {
        let o = p.wait_with_output().unwrap();
        assert!(o.status.success(), "pull {k}: {}", stderr(&o));
        let v = json(&o);
        assert_eq!(
            v["shard"]["manifest"]["files"], 61,
            "the daemon told the whole manifest"
        );
        let f = reports.path().join(format!("pull-{k}.json"));
        std::fs::write(&f, &o.stdout).unwrap();
        files.push(f);
    }
    let m = urmove()
        .args(["report", "--json"])
        .args(&files)
        .output()
        .unwrap();
    assert!(m.status.success(), "{}", stdout(&m));
    assert_eq!(json(&m)["files_verified"], 61);
    same_tree(&top, &local.path().join("set"));
    // Two shards of three are not the transfer.
    let two = urmove().arg("report").args(&files[..2]).output().unwrap();
    assert_eq!(two.status.code(), Some(1), "{}", stdout(&two));
}

/// `urmove send --shard K/N --json` with `d`'s key to `port` on loopback,
/// and `opts`: its state directory, sources and target are the caller's.
fn shard_cmd(
    d: &crate::transfer::Daemon,
    port: u16,
    (k, n): (u32, u32),
    opts: &[&str],
) -> std::process::Command {
    let mut c = urmove();
    c.args(["send", "--shard", &format!("{k}/{n}"), "--json"])
        .args(["-p", &port.to_string()])
        .args(opts)
        .arg("--key-file")
        .arg(&d.key);
    c
}

/// A shard on loopback into `d` (`SRC` as `dest`), with its own state
/// directory (its own owner): its JSON report, written to `out`.
fn shard_into(
    d: &crate::transfer::Daemon,
    (k, n): (u32, u32),
    (src, dest): (&Path, &str),
    state: &Path,
    out: &Path,
) -> std::process::Output {
    let opts = ["--split-over", "8M", "--block", "1M", "-P", "2"];
    let o = shard_cmd(d, d.port, (k, n), &opts)
        .arg("--state-dir")
        .arg(state)
        .arg(src)
        .arg(format!("127.0.0.1:{dest}"))
        .output()
        .unwrap();
    std::fs::write(out, &o.stdout).unwrap();
    o
}

/// Give the file at `path` the modification time `t`.
fn date(path: &Path, t: std::time::SystemTime) {
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(t).unwrap();
}

fn mtime_of(path: &Path) -> std::time::SystemTime {
    std::fs::metadata(path).unwrap().modified().unwrap()
}

/// A source's modification time well in the past (November 2023).
fn long_ago() -> std::time::SystemTime {
    std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

/// The reports `s0.json` and `s1.json` in `dir` merge complete, and
/// `landed` holds `want`.
fn two_shards_land(dir: &Path, landed: &Path, want: &[u8]) {
    let (code, text) = report_of(&[&dir.join("s0.json"), &dir.join("s1.json")]);
    assert_eq!(code, Some(0), "{text}");
    assert!(std::fs::read(landed).unwrap() == want);
}

fn report_of(files: &[&Path]) -> (Option<i32>, String) {
    let o = urmove().arg("report").args(files).output().unwrap();
    (o.status.code(), stdout(&o))
}

/// Second key holders against a split file: another version of it (other
/// size or mtime) never joins the victim's part, and the same version
/// with other bytes in one piece is committed (its own journals agree)
/// but the merged report names the digest that is not the victim's sum,
/// and the run again reads it by content and sends it right.
#[test]
fn another_key_holders_piece_is_never_reported_as_the_victims() {
    let d = crate::transfer::Daemon::start();
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let (victim, attacker) = (dir.path().join("v"), dir.path().join("a"));
    let (vs, atk) = (dir.path().join("vs"), dir.path().join("as"));
    let big = noise(16 << 20, 11);
    for (top, bytes) in [(&victim, big.clone()), (&attacker, noise(24 << 20, 12))] {
        std::fs::create_dir_all(top.join("set")).unwrap();
        std::fs::write(top.join("set/big"), bytes).unwrap();
    }
    let r = |name: &str| dir.path().join(name);
    let landed = d.root.path().join("x/set/big");
    // Another size: its piece 0 would overlap the victim's piece 1.
    let s1 = shard_into(&d, (1, 2), (&victim.join("set"), "x"), &vs, &r("s1.json"));
    assert!(s1.status.success(), "{}", stderr(&s1));
    let a0 = shard_into(
        &d,
        (0, 2),
        (&attacker.join("set"), "x"),
        &atk,
        &r("a0.json"),
    );
    assert!(a0.status.success(), "{}", stderr(&a0));
    let s0 = shard_into(&d, (0, 2), (&victim.join("set"), "x"), &vs, &r("s0.json"));
    assert!(s0.status.success(), "{}", stderr(&s0));
    let (code, text) = report_of(&[&r("s0.json"), &r("s1.json")]);
    assert_eq!(code, Some(1), "{text}");
    assert!(!landed.exists(), "a file of two versions committed");
    // The victim's shard 1 again: whole, and the victim's bytes.
    shard_into(&d, (1, 2), (&victim.join("set"), "x"), &vs, &r("s1.json"));
    two_shards_land(dir.path(), &landed, &big);

    // The same version (size, mtime) with a MiB of other bytes in piece 1.
    let mut other = big.clone();
    other[12 << 20..13 << 20].fill(0x5a);
    std::fs::write(attacker.join("set/big"), &other).unwrap();
    date(&attacker.join("set/big"), mtime_of(&victim.join("set/big")));
    let a1 = shard_into(
        &d,
        (1, 2),
        (&attacker.join("set"), "y"),
        &atk,
        &r("a1.json"),
    );
    assert!(a1.status.success(), "{}", stderr(&a1));
    shard_into(&d, (0, 2), (&victim.join("set"), "y"), &vs, &r("t0.json"));
    shard_into(&d, (1, 2), (&victim.join("set"), "y"), &vs, &r("t1.json"));
    let (code, text) = report_of(&[&r("t0.json"), &r("t1.json")]);
    assert_eq!(code, Some(1), "{text}");
    // Run again, as the report says: read by content (the commit of
    // pieces of several sessions names no owner), sent again, right.
    shard_into(&d, (0, 2), (&victim.join("set"), "y"), &vs, &r("t0.json"));
    shard_into(&d, (1, 2), (&victim.join("set"), "y"), &vs, &r("t1.json"));
    let (code, text) = report_of(&[&r("t0.json"), &r("t1.json")]);
    assert_eq!(code, Some(0), "{text}");
    assert!(std::fs::read(d.root.path().join("y/set/big")).unwrap() == big);
    // Shards of transfers to two destinations are not one transfer.
    let (code, text) = report_of(&[&r("s0.json"), &r("t1.json")]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("not this one's"), "{text}");
    // No mark nor tag of a part is left on a committed file (its stamp,
    // user.urmove, is).
    let marks = Command::new("getfattr")
        .args(["-d", "-m", "^user\\.urmove"])
        .arg(&landed)
        .output()
        .unwrap();
    let marks = stdout(&marks);
    assert!(marks.contains("user.urmove="), "{marks}");
    assert!(!marks.contains("user.urmove."), "{marks}");
}

/// What the Indexed Job of dist/k8s runs: the container's shell command,
/// its environment, its completions and the paths it mounts.
struct IndexedJob {
    completions: u32,
    script: String,
    env: Vec<(String, String)>,
    mounts: Vec<String>,
}

impl IndexedJob {
    fn read() -> IndexedJob {
        let text = std::fs::read_to_string(script("dist/k8s/urmove-indexed-job.yaml")).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let value = |key: &str| {
            lines
                .iter()
                .find_map(|l| l.trim().strip_prefix(key))
                .map(|v| v.trim().trim_matches('"').to_string())
        };
        // The folded block after `args:` (`- >-`): its lines joined by spaces.
        let at = lines.iter().position(|l| l.trim() == "- >-").unwrap();
        let indent = |l: &str| l.len() - l.trim_start().len();
        let script = lines[at + 1..]
            .iter()
            .take_while(|l| indent(l) > indent(lines[at]))
            .map(|l| l.trim())
            .collect::<Vec<_>>()
            .join(" ");
        let env = lines
            .windows(2)
            .filter_map(|w| {
                let name = w[0].trim().strip_prefix("- name: ")?;
                let v = w[1].trim().strip_prefix("value: ")?;
                Some((name.to_string(), v.trim_matches('"').to_string()))
            })
            .collect();
        let mounts = lines
            .iter()
            .filter_map(|l| l.split("mountPath: ").nth(1))
            .map(|m| m.split([',', ' ', '}']).next().unwrap().to_string())
            .collect();
        IndexedJob {
            completions: value("completions:").unwrap().parse().unwrap(),
            script,
            env,
            mounts,
        }
    }
}

/// The Indexed Job manifest as its pods run it: each index's container
/// command with the manifest's environment, its mounts mapped onto
/// directories here, its receivers (the two names of `URMOVE_TO`) two
/// daemons on the default port in a network namespace of the test's own,
/// sharing one root; then `urmove report` over the reports volume is
/// whole, and the bytes equal (a 300 MiB sparse file is split over the
/// pods by the default `--split-over`).
#[test]
fn the_indexed_job_manifest_runs_as_its_pods_would() {
    if !is_root() || !have("ip") {
        eprintln!("skipped: needs root and iproute2 (a network namespace)");
        return;
    }
    let job = IndexedJob::read();
    let count = |name: &str| job.env.iter().find(|(n, _)| n == name).map(|(_, v)| v);
    assert_eq!(
        count("JOB_COMPLETIONS").map(String::as_str),
        Some(job.completions.to_string().as_str()),
        "JOB_COMPLETIONS must say the Job's completions"
    );
    assert_eq!(job.mounts, ["/data", "/reports", "/etc/urmove"]);
    let ns = format!("urk8s-{}", std::process::id());
    assert!(ip(&["netns", "add", &ns]) && ip(&["-n", &ns, "link", "set", "lo", "up"]));
    struct Gone(String, Vec<Child>);
    impl Drop for Gone {
        fn drop(&mut self) {
            for c in &mut self.1 {
                let _ = c.kill();
                let _ = c.wait();
            }
            let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
        }
    }
    let mut gone = Gone(ns.clone(), Vec::new());
    let work = tempfile::tempdir_in("/var/tmp").unwrap();
    let at = |p: &str| work.path().join(p.trim_start_matches('/'));
    for d in ["data/run42/sub", "reports", "etc/urmove", "root", "state"] {
        std::fs::create_dir_all(at(d)).unwrap();
    }
    keygen(&at("etc/urmove/key"));
    let big = std::fs::File::create(at("data/run42/big.img")).unwrap();
    big.set_len(300 << 20).unwrap();
    for k in 0..6u64 {
        use std::os::unix::fs::FileExt;
        big.write_all_at(&noise(1 << 20, k), k * (50 << 20) + 4097)
            .unwrap();
    }
    for i in 0..50 {
        std::fs::write(
            at(&format!("data/run42/sub/f{i}")),
            noise(3000 + i * 77, i as u64),
        )
        .unwrap();
    }
    // The receivers' names, in order, as two addresses of the namespace.
    let to = count("URMOVE_TO").unwrap().clone();
    let (hosts, dest) = to.split_once(':').unwrap();
    let mut mapped_to = String::new();
    for (k, host) in hosts.split(',').enumerate() {
        let addr = format!("127.0.0.{}", k + 1);
        mapped_to += &format!("{}{addr}", if k > 0 { "," } else { "" });
        let child = Command::new("ip")
            .args(["netns", "exec", &ns])
            .arg(env!("CARGO_BIN_EXE_urmove"))
            .args(["recv", "--listen", &format!("{addr}:7878"), "--root"])
            .arg(at("root"))
            .arg("--key-file")
            .arg(at("etc/urmove/key"))
            .arg("--state-dir")
            .arg(at("state"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        gone.1.push(child);
        let up = Instant::now();
        while !Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns,
                "ss",
                "-ltnH",
                &format!("src {addr}:7878"),
            ])
            .output()
            .is_ok_and(|o| !o.stdout.is_empty())
        {
            assert!(
                up.elapsed() < Duration::from_secs(10),
                "{host}'s receiver never listened"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // The mounts, here; the image's urmove, this build's.
    let mut script = job.script.clone();
    for m in &job.mounts {
        script = script.replace(&format!("{m}/"), &format!("{}/", at(m).display()));
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_urmove")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let pods: Vec<Child> = (0..job.completions)
        .map(|k| {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", &ns, "sh", "-c", &script]);
            for (n, v) in &job.env {
                c.env(n, v);
            }
            c.env("URMOVE_TO", format!("{mapped_to}:{dest}"))
                .env("JOB_COMPLETION_INDEX", k.to_string())
                .env("PATH", &path)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for (k, pod) in pods.into_iter().enumerate() {
        let o = pod.wait_with_output().unwrap();
        assert!(o.status.success(), "pod {k}: {}{}", stdout(&o), stderr(&o));
    }
    let (ok, m) = report(&at("reports"));
    assert!(ok, "{m:#}");
    assert_eq!(m["shards"], job.completions);
    assert_eq!(m["files_verified"], 51);
    same_tree(&at("data/run42"), &at(&format!("root/{dest}/run42")));
    // Pod K sent to receiver K mod 2, and the large file went in pieces.
    for s in m["per_shard"].as_array().unwrap() {
        let k = s["index"].as_u64().unwrap();
        assert_eq!(
            s["receiver"],
            format!("127.0.0.{}:7878", k % 2 + 1),
            "{m:#}"
        );
        let own: serde_json::Value =
            serde_json::from_slice(&std::fs::read(s["file"].as_str().unwrap()).unwrap()).unwrap();
        let pieces = own["shard"]["pieces"].as_array().unwrap();
        assert_eq!(pieces.len(), 1, "{own:#}");
        assert_eq!(pieces[0]["path"], "run42/big.img");
    }
}

/// Shards that split the manifest otherwise (another `--split-over`, or
/// `--block`) are not one transfer: however their counts add up, the
/// report names the difference and is not complete, and the coverage of
/// the manifest is checked file by file count.
#[test]
fn shards_split_otherwise_are_never_reported_complete() {
    let d = crate::transfer::Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = src.path().join("data");
    std::fs::create_dir_all(&top).unwrap();
    for i in 0..30u64 {
        let len = 200_000 + (i as usize * 7919) % 200_000;
        std::fs::write(top.join(format!("f{i}")), noise(len, i)).unwrap();
    }
    std::fs::write(top.join("big"), noise(2 << 20, 99)).unwrap();
    let reports = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let shard = |k: u32, extra: &[&str]| {
        let out = reports.path().join(format!("shard-{k}.json"));
        let opts = [&["--block", "1M"], extra].concat();
        let o = shard_cmd(&d, d.port, (k, 2), &opts)
            .arg("--state-dir")
            .arg(state.path())
            .arg(&top)
            .arg("127.0.0.1:dest")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        std::fs::write(&out, &o.stdout).unwrap();
        out
    };
    let (a, b) = (shard(0, &["--split-over", "1M"]), shard(1, &[]));
    let (code, text) = report_of(&[&a, &b]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("--split-over"), "{text}");
    // Alike, the same shards are one transfer.
    let a = shard(0, &[]);
    let (code, text) = report_of(&[&a, &b]);
    assert_eq!(code, Some(0), "{text}");
    same_tree(&top, &d.root.path().join("dest/data"));
}

/// A shard's send into `d` as `shard_into` makes it, with `extra` options
/// (`-I`, `--rate-limit`), started and not waited for.
fn shard_child(
    d: &crate::transfer::Daemon,
    (k, n): (u32, u32),
    (src, dest): (&Path, &str),
    state: &Path,
    extra: &[&str],
) -> Child {
    urmove()
        .args(["send", "--shard", &format!("{k}/{n}"), "--split-over", "8M"])
        .args([
            "--block",
            "1M",
            "--json",
            "-P",
            "2",
            "-p",
            &d.port.to_string(),
        ])
        .args(extra)
        .arg("--key-file")
        .arg(&d.key)
        .arg("--state-dir")
        .arg(state)
        .arg(src)
        .arg(format!("127.0.0.1:{dest}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Two trees of `set/big` (16 MiB, the same size and mtime): the victim's,
/// and another key holder's, its MiB at 12 MiB (piece 1 of 2) `other`.
fn two_versions(dir: &Path, other: Option<u8>) -> (PathBuf, PathBuf, Vec<u8>) {
    let (victim, attacker) = (dir.join("v"), dir.join("a"));
    let big = noise(16 << 20, 21);
    let mut theirs = big.clone();
    if let Some(b) = other {
        theirs[12 << 20..13 << 20].fill(b);
    }
    for (top, bytes) in [(&victim, &big), (&attacker, &theirs)] {
        std::fs::create_dir_all(top.join("set")).unwrap();
        std::fs::write(top.join("set/big"), bytes).unwrap();
    }
    date(&attacker.join("set/big"), mtime_of(&victim.join("set/big")));
    (victim.join("set"), attacker.join("set"), big)
}

/// Two receivers of one root that keep secrets of their own (each DTN's
/// package made its own): neither trusts the other's journals, so the split
/// file is never committed. The shard whose receiver finds the other's
/// journal says why, and so does the merged report (running the shards
/// again would not help); once both run with one secret, the shards run
/// again finish it.
#[test]
fn receivers_with_two_secrets_say_why_a_split_file_is_never_committed() {
    let d = crate::transfer::Daemon::start();
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let (src, _, big) = two_versions(dir.path(), None);
    let own = dir.path().join("other-state");
    let other = d.twin_with(&["--state-dir", own.to_str().unwrap()]);
    let r = |name: &str| dir.path().join(name);
    let send = |k: u32, port: u16| {
        let opts = ["--split-over", "8M", "--block", "1M", "-P", "2"];
        let o = shard_cmd(&d, port, (k, 2), &opts)
            .arg("--state-dir")
            .arg(r("vs"))
            .arg(&src)
            .arg("127.0.0.1:x")
            .output()
            .unwrap();
        std::fs::write(r(&format!("s{k}.json")), &o.stdout).unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        stderr(&o)
    };
    let landed = d.root.path().join("x/set/big");
    send(0, d.port);
    let said = send(1, other.port);
    assert!(
        said.contains("piece 0's journal made with another secret"),
        "{said}"
    );
    let log = other.log_until("made with another secret");
    assert!(log.contains("cannot commit the file"), "{log}");
    assert!(!landed.exists(), "committed with an untrusted journal");
    let (code, text) = report_of(&[&r("s0.json"), &r("s1.json")]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("made with another secret"), "{text}");
    assert!(text.contains("must run with one secret"), "{text}");
    // One secret: the piece journaled under the other is sent again.
    drop(other);
    let other = d.twin();
    send(0, d.port);
    send(1, other.port);
    two_shards_land(dir.path(), &landed, &big);
}

/// Another key holder writes piece 1 again after the victim's shard 1
/// journaled it (`-I`: from nothing), with other bytes of the same
/// unkeyed digest (Wagner's k-tree, as tests/attack2.rs forges them) and
/// the same size and mtime: the victim's shard 0 then commits the file
/// with the other bytes, and the digests the shards were told sum alike,
/// but the receipts of the pieces committed are not the ones the victim's
/// shards were given: the merged report is not complete. Both shards run
/// again land the victim's bytes.
#[test]
fn a_piece_forged_to_the_same_digest_by_another_session_is_never_the_shards() {
    let d = crate::transfer::Daemon::start();
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let (victim, attacker) = (dir.path().join("v/set"), dir.path().join("a/set"));
    let big = noise(512 << 10, 31);
    let mut forged = big[..256 << 10].to_vec();
    forged.extend(crate::attack2::forge_same_digest_at(
        &big[256 << 10..],
        256 << 10,
    ));
    assert_ne!(forged, big);
    for (top, bytes) in [(&victim, &big), (&attacker, &forged)] {
        std::fs::create_dir_all(top).unwrap();
        std::fs::write(top.join("big"), bytes).unwrap();
        date(&top.join("big"), long_ago());
    }
    let (vs, atk) = (dir.path().join("vs"), dir.path().join("as"));
    let r = |name: &str| dir.path().join(name);
    let shard = |k: u32, src: &Path, state: &Path, extra: &[&str], out: &str| {
        let opts = [&["--split-over", "256K", "--block", "256K"], extra].concat();
        let o = shard_cmd(&d, d.port, (k, 2), &opts)
            .arg("--state-dir")
            .arg(state)
            .arg(src)
            .arg("127.0.0.1:x")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        std::fs::write(r(out), &o.stdout).unwrap();
    };
    shard(1, &victim, &vs, &[], "s1.json");
    shard(1, &attacker, &atk, &["-I"], "a1.json");
    shard(0, &victim, &vs, &[], "s0.json");
    let landed = d.root.path().join("x/set/big");
    assert!(
        std::fs::read(&landed).unwrap() == forged,
        "the forged piece was committed"
    );
    let (code, text) = report_of(&[&r("s0.json"), &r("s1.json")]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("other than the ones its shards verified"),
        "{text}"
    );
    // Run again as the report says: read by content, sent again, right.
    shard(1, &victim, &vs, &[], "s1.json");
    shard(0, &victim, &vs, &[], "s0.json");
    two_shards_land(dir.path(), &landed, &big);
}

/// Another key holder writes piece 1 with other bytes while the victim's
/// shard 0 finishes (slowly, so its range is locked then): the victim's
/// session cannot commit under it, the file (if the other session
/// commits it) holds the other bytes, and no report calls the victim's
/// transfer complete; the victim's shards run again land its bytes.
#[test]
fn a_piece_written_while_the_victim_commits_never_lands_under_its_report() {
    let d = crate::transfer::Daemon::start();
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let (victim, attacker, big) = two_versions(dir.path(), Some(0x5a));
    let (vs, atk) = (dir.path().join("vs"), dir.path().join("as"));
    let r = |name: &str| dir.path().join(name);
    let s1 = shard_into(&d, (1, 2), (&victim, "y"), &vs, &r("s1.json"));
    assert!(s1.status.success(), "{}", stderr(&s1));
    let journal = d.root.path().join("y/set/big.1.urmove.piece");
    let victims = std::fs::read(&journal).unwrap();
    // 8 MiB at 16 Mbit/s: four seconds with piece 1's range locked.
    let a1 = shard_child(
        &d,
        (1, 2),
        (&attacker, "y"),
        &atk,
        &["-I", "--rate-limit", "16Mbit"],
    );
    let theirs = || std::fs::read(&journal).ok().is_some_and(|j| j == victims);
    let t = Instant::now();
    while theirs() && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !theirs(),
        "joining from nothing replaces the victim's journal"
    );
    let s0 = shard_into(&d, (0, 2), (&victim, "y"), &vs, &r("s0.json"));
    assert!(s0.status.success(), "{}", stderr(&s0));
    let a1 = a1.wait_with_output().unwrap();
    assert!(a1.status.success(), "{}", stderr(&a1));
    let landed = d.root.path().join("y/set/big");
    let (code, text) = report_of(&[&r("s0.json"), &r("s1.json")]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        std::fs::read(&landed).is_ok_and(|b| b != big),
        "the other session commits its version"
    );
    let s1 = shard_into(&d, (1, 2), (&victim, "y"), &vs, &r("s1.json"));
    let s0 = shard_into(&d, (0, 2), (&victim, "y"), &vs, &r("s0.json"));
    assert!(
        s0.status.success() && s1.status.success(),
        "{}",
        stderr(&s0)
    );
    two_shards_land(dir.path(), &landed, &big);
}

/// A Slurm array with a step (`--array=10-16:2`, tasks 10, 12, 14 and 16)
/// is shards 0 to 3 of 4 under `--shard auto`: the shipped array script on
/// the one-node cluster, a small tree to a daemon on loopback, the merged
/// report whole.
#[test]
fn a_stepped_slurm_array_is_one_shard_a_task() {
    if !slurm_or_skip() {
        return;
    }
    let _alone = one_cluster();
    let slurm = Slurm::start();
    let d = crate::transfer::Daemon::start();
    let work = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = work.path().join("set");
    std::fs::create_dir_all(&top).unwrap();
    std::fs::write(top.join("large"), noise(6 << 20, 1)).unwrap();
    for i in 0..30 {
        std::fs::write(top.join(format!("f{i}")), noise(2000 + i * 50, i as u64)).unwrap();
    }
    let reports = work.path().join("reports");
    let o = slurm
        .cmd("sbatch")
        .args(["--array=10-16:2", "--wait", "-o"])
        .arg(work.path().join("task-%a.out"))
        .env("URMOVE", env!("CARGO_BIN_EXE_urmove"))
        .env("URMOVE_SOURCES", &top)
        .env("URMOVE_TO", "127.0.0.1:stepped")
        .env("URMOVE_KEY", &d.key)
        .env("URMOVE_REPORTS", &reports)
        .env(
            "URMOVE_ARGS",
            format!("-p {} --block 1M --split-over 2M", d.port),
        )
        .arg(script("dist/slurm/urmove-array.sbatch"))
        .output()
        .unwrap();
    let tasks: String = [10, 12, 14, 16]
        .iter()
        .map(|k| {
            std::fs::read_to_string(work.path().join(format!("task-{k}.out"))).unwrap_or_default()
        })
        .collect();
    assert!(
        o.status.success(),
        "sbatch: {}{}{tasks}",
        stdout(&o),
        stderr(&o)
    );
    let (ok, m) = report(&reports);
    assert!(ok, "{m:#}\n{tasks}");
    let shards: Vec<u64> = m["per_shard"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["index"].as_u64().unwrap())
        .collect();
    assert_eq!(shards, [0, 1, 2, 3], "{m:#}");
    same_tree(&top, &d.root.path().join("stepped/set"));
}

/// A proxy on 127.0.0.1 to `upstream`: its first connection (a session's
/// control) passes at once, the later ones (its data streams) only once
/// `go` is set. Returns its port.
fn holding_proxy(upstream: u16, go: std::sync::Arc<std::sync::atomic::AtomicBool>) -> u16 {
    use std::net::{TcpListener, TcpStream};
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for (n, c) in l.incoming().enumerate() {
            let Ok(c) = c else { return };
            let go = go.clone();
            std::thread::spawn(move || {
                while n > 0 && !go.load(std::sync::atomic::Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(10));
                }
                let Ok(u) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    return;
                };
                let pipe = |mut a: TcpStream, mut b: TcpStream| {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut a, &mut b);
                        let _ = b.shutdown(std::net::Shutdown::Write);
                    })
                };
                pipe(c.try_clone().unwrap(), u.try_clone().unwrap());
                pipe(u, c);
            });
        }
    });
    port
}

/// Two receivers in front of one root, and two versions of `set/big`
/// (32 MiB, the same size and mtime): the victim's, and another key
/// holder's whose last 256 KiB are forged to the victim's unkeyed digest
/// (or, not `forged`, whose last 8 MiB differ: the half of piece 1 the
/// victim writes after the other key holder's session started).
/// The victim's shard 1 sends piece 1 slowly to the first receiver; the
/// other key holder's shard 1 starts on the second while it does, so it
/// continues the victim's journal as it stood, its data (at `rate`) held
/// by a proxy until the victim's piece is whole. Returns the other key
/// holder's send, its data let go.
struct Continued {
    d: crate::transfer::Daemon,
    other: crate::transfer::Twin,
    dir: tempfile::TempDir,
    big: Vec<u8>,
}

impl Continued {
    fn send(&self, k: u32, port: u16, who: &str, extra: &[&str]) -> Child {
        let dir = self.dir.path();
        urmove()
            .args(["send", "--shard", &format!("{k}/2"), "--split-over", "8M"])
            .args([
                "--block",
                "1M",
                "-P",
                "1",
                "--json",
                "-p",
                &port.to_string(),
            ])
            .args(extra)
            .arg("--key-file")
            .arg(&self.d.key)
            .arg("--state-dir")
            .arg(dir.join(format!("{who}-state")))
            .arg(dir.join(format!("{who}/set")))
            .arg("127.0.0.1:dest")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    fn start(rate: &str, forged: bool) -> (Continued, Child) {
        let d = crate::transfer::Daemon::start();
        let other = d.twin();
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let big = noise(32 << 20, 41);
        let at = (32 << 20) - (256 << 10);
        let mut theirs = big.clone();
        match forged {
            true => theirs[at..]
                .copy_from_slice(&crate::attack2::forge_same_digest_at(&big[at..], at as u64)),
            false => theirs[24 << 20..].copy_from_slice(&noise(8 << 20, 42)),
        }
        for (who, bytes) in [("v", &big), ("a", &theirs)] {
            let top = dir.path().join(format!("{who}/set"));
            std::fs::create_dir_all(&top).unwrap();
            std::fs::write(top.join("big"), bytes).unwrap();
            date(&top.join("big"), long_ago());
        }
        let c = Continued { d, other, dir, big };
        let v1 = c.send(1, c.d.port, "v", &["--rate-limit", "40Mbit"]);
        let journal = c.d.root.path().join("dest/set/big.1.urmove.piece");
        let t = Instant::now();
        while !journal.exists() {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "piece 1 never journaled"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let go = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let proxy = holding_proxy(c.other.port, go.clone());
        let a1 = c.send(1, proxy, "a", &["--rate-limit", rate]);
        let v1 = v1.wait_with_output().unwrap();
        assert!(v1.status.success(), "{}", stderr(&v1));
        std::fs::write(c.dir.path().join("s1.json"), &v1.stdout).unwrap();
        go.store(true, std::sync::atomic::Ordering::Release);
        (c, a1)
    }

    /// The victim's shard 0 to the second receiver, then the merged
    /// report: it never calls the file complete with other bytes.
    fn finish(&self) -> Option<i32> {
        let v0 = self
            .send(0, self.other.port, "v", &[])
            .wait_with_output()
            .unwrap();
        assert!(v0.status.success(), "{}", stderr(&v0));
        let dir = self.dir.path();
        std::fs::write(dir.join("s0.json"), &v0.stdout).unwrap();
        let (code, text) = report_of(&[&dir.join("s0.json"), &dir.join("s1.json")]);
        let landed = std::fs::read(self.d.root.path().join("dest/set/big")).unwrap_or_default();
        assert!(
            code != Some(0) || landed == self.big,
            "complete with other bytes than the victim's: {text}"
        );
        code
    }
}

/// The other key holder of [`Continued`] writes the blocks its copy of the
/// journal lacks (the forged ones among them) and finishes: its journal's
/// generation is its own, so its receipts are not the victim's.
#[test]
fn a_piece_continued_from_a_journal_that_moved_on_is_never_the_victims() {
    let (c, a1) = Continued::start("1Gbit", true);
    let _ = a1.wait_with_output().unwrap();
    c.finish();
}

/// The other key holder of [`Continued`], its piece 1's last half other
/// bytes, is killed while it writes them over the victim's blocks: the
/// file is never committed with bytes nobody verified (the commit does not
/// read them again: a journal names only what its writer held before its
/// first write, `sink::incoming` tests), and the victim's shard 1 run again
/// makes it whole.
#[test]
fn a_piece_writer_killed_over_anothers_blocks_leaves_no_journal_naming_them() {
    let (c, mut a1) = Continued::start("80Mbit", false);
    std::thread::sleep(Duration::from_millis(500));
    a1.kill().unwrap();
    let _ = a1.wait();
    assert_eq!(c.finish(), Some(1));
    // Busy while the second receiver still winds the killed session down.
    let t = Instant::now();
    let v1 = loop {
        let v1 = c.send(1, c.d.port, "v", &[]).wait_with_output().unwrap();
        if v1.status.success() || !stderr(&v1).contains("(busy)") {
            break v1;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "{}", stderr(&v1));
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(v1.status.success(), "{}", stderr(&v1));
    std::fs::write(c.dir.path().join("s1.json"), &v1.stdout).unwrap();
    assert_eq!(c.finish(), Some(0));
}

/// A session that finished its piece first (and looked for the others
/// under the whole file's lock) sends on (another file, slowly): the lock
/// is let go of all the same (the finish unlocks its opening, which a
/// lane's ring may hold a while yet), so the shard finishing the last
/// piece meanwhile commits the file.
#[test]
fn a_finished_piece_lets_go_of_the_file_while_its_session_sends_on() {
    let d = crate::transfer::Daemon::start();
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = dir.path().join("set");
    std::fs::create_dir_all(&top).unwrap();
    std::fs::write(top.join("big"), noise(16 << 20, 51)).unwrap();
    for k in 0..2 {
        std::fs::write(top.join(format!("slow{k}")), noise(24 << 20, 52 + k)).unwrap();
    }
    let state = dir.path().join("state");
    let send = |k: u32, extra: &[&str]| {
        let opts = [
            "--split-over",
            "8M",
            "--block",
            "1M",
            "-P",
            "1",
            "--lanes",
            "1",
        ];
        shard_cmd(&d, d.port, (k, 2), &[&opts[..], extra].concat())
            .arg("--state-dir")
            .arg(&state)
            .arg(&top)
            .arg("127.0.0.1:dest")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    // Its piece (8 MiB) first, then its other file: two seconds more.
    let first = send(0, &["--rate-limit", "12MB"]);
    let journal = d.root.path().join("dest/set/big.0.urmove.piece");
    let t = Instant::now();
    while !journal.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "piece 0 never journaled"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let last = send(1, &[]).wait_with_output().unwrap();
    assert!(last.status.success(), "{}", stderr(&last));
    let first = first.wait_with_output().unwrap();
    assert!(first.status.success(), "{}", stderr(&first));
    let r = |name: &str, o: &std::process::Output| {
        let p = dir.path().join(name);
        std::fs::write(&p, &o.stdout).unwrap();
        p
    };
    let (a, b) = (r("s0.json", &first), r("s1.json", &last));
    let (code, text) = report_of(&[&a, &b]);
    assert_eq!(code, Some(0), "{text}");
    same_tree(&top, &d.root.path().join("dest/set"));
}

/// Another key holder leaves a whole file's part and journal at the
/// victim's path (killed), the victim's shard makes the shared part there
/// (on a quiet ext4, often on the very inode number the other part had),
/// and the other key holder resumes its whole file into it and is killed
/// again: its journal names another part's tag, and a whole file never
/// continues a part marked for pieces, so it writes nothing into the
/// victim's piece; the report never calls the file complete with other
/// bytes, and the victim's shards land its own.
#[test]
fn a_whole_files_stale_journal_never_writes_into_a_shared_part() {
    crate::require!(crate::util::can_loop("ext4"), "needs root and loop devices");
    let fs = crate::util::LoopFs::new("ext4", 400, 4096, false).unwrap();
    let d = crate::transfer::Daemon::start_full(&[], "127.0.0.1", fs.path(), &[]);
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let (victim, attacker) = (dir.path().join("v"), dir.path().join("a"));
    let big = noise(64 << 20, 61);
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::create_dir_all(&attacker).unwrap();
    std::fs::write(victim.join("big"), &big).unwrap();
    let mut theirs = vec![0u8; 16 << 20];
    theirs.extend(noise(32 << 20, 62));
    std::fs::write(attacker.join("big"), &theirs).unwrap();
    let (vs, atk) = (dir.path().join("vs"), dir.path().join("as"));
    let push = |extra: &[&str]| {
        urmove()
            .args(["send", "--block", "1M", "-P", "1", "--lanes", "1"])
            .args([
                "--rate-limit",
                "8MB",
                "-p",
                &d.port.to_string(),
                "--key-file",
            ])
            .arg(&d.key)
            .arg("--state-dir")
            .arg(&atk)
            .args(extra)
            .arg(attacker.join("big"))
            .arg("127.0.0.1:d/")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let killed = |mut c: Child, after: Duration| {
        std::thread::sleep(after);
        c.kill().unwrap();
        let _ = c.wait();
        std::thread::sleep(Duration::from_millis(500));
    };
    killed(push(&[]), Duration::from_millis(1800));
    let shard = |k: u32| {
        let opts = ["--split-over", "16M", "--block", "1M", "-P", "1"];
        let o = shard_cmd(&d, d.port, (k, 2), &opts)
            .arg("--state-dir")
            .arg(&vs)
            .arg(victim.join("big"))
            .arg("127.0.0.1:d/")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let out = dir.path().join(format!("s{k}.json"));
        std::fs::write(&out, &o.stdout).unwrap();
        out
    };
    let s1 = shard(1);
    killed(push(&["--resume"]), Duration::from_millis(4500));
    let s0 = shard(0);
    let (code, text) = report_of(&[&s0, &s1]);
    let landed = std::fs::read(d.root.path().join("d/big")).unwrap_or_default();
    assert!(
        code != Some(0) || landed == big,
        "complete with other bytes: {text}"
    );
    if code != Some(0) {
        let (s0, s1) = (shard(0), shard(1));
        let (code, text) = report_of(&[&s0, &s1]);
        assert_eq!(code, Some(0), "{text}");
    }
    assert!(std::fs::read(d.root.path().join("d/big")).unwrap() == big);
}

/// A local user who may write in the destination puts the victim's own
/// journal of piece 0 back after another key holder wrote the piece with
/// other bytes (same size and mtime): the journal is authentic, but the
/// part records the other session's generation for the piece, so the
/// victim's last shard does not commit those bytes and the report is not
/// complete; the victim's shard 0 run again lands its own.
#[test]
fn a_piece_journal_put_back_by_a_local_user_is_not_the_pieces() {
    crate::require!(
        crate::util::is_root() && have("setpriv"),
        "needs root and setpriv"
    );
    let d = crate::transfer::Daemon::start();
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let (victim, attacker, big) = two_versions(dir.path(), Some(0x45));
    // The destination, planted by nobody, writable by all.
    let planted = d.root.path().join("x");
    std::fs::create_dir(&planted).unwrap();
    std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).unwrap();
    std::fs::set_permissions(
        &planted,
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let as_nobody = |args: &[&std::ffi::OsStr]| {
        let s = Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "mv",
                "-f",
            ])
            .args(args)
            .status()
            .unwrap();
        assert!(s.success());
    };
    let (vs, atk) = (dir.path().join("vs"), dir.path().join("as"));
    let r = |name: &str| dir.path().join(name);
    let shard = |k: u32, src: &Path, state: &Path, out: &str| {
        let o = shard_into(&d, (k, 2), (&src.join("big"), "x"), state, &r(out));
        assert!(o.status.success(), "{}", stderr(&o));
    };
    shard(0, &victim, &vs, "s0.json");
    let journal = planted.join("big.0.urmove.piece");
    let aside = planted.join("saved");
    as_nobody(&[journal.as_os_str(), aside.as_os_str()]);
    shard(0, &attacker, &atk, "a0.json");
    as_nobody(&[aside.as_os_str(), journal.as_os_str()]);
    shard(1, &victim, &vs, "s1.json");
    let (code, text) = report_of(&[&r("s0.json"), &r("s1.json")]);
    let landed = planted.join("big");
    assert!(
        code != Some(0) || std::fs::read(&landed).unwrap() == big,
        "{text}"
    );
    assert_eq!(code, Some(1), "{text}");
    assert!(
        !landed.exists(),
        "committed with a piece the part does not record"
    );
    shard(0, &victim, &vs, "s0.json");
    two_shards_land(dir.path(), &landed, &big);
}

/// A piece journaled, then its source rewritten in place with its mtime
/// put back: the shard run again is told its held piece differs, starts
/// it again in the shared part, and the transfer completes at once.
#[test]
fn a_piece_held_wrong_is_sent_again_into_the_shared_part() {
    let d = crate::transfer::Daemon::start();
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let (victim, _, _) = two_versions(dir.path(), None);
    let state = dir.path().join("vs");
    let r = |name: &str| dir.path().join(name);
    let big = victim.join("big");
    let shard = |k: u32, out: &str| {
        let o = shard_into(&d, (k, 2), (&victim, "z"), &state, &r(out));
        assert!(o.status.success(), "shard {k}: {}", stderr(&o));
    };
    shard(0, "s0.json");
    let mtime = std::fs::metadata(&big).unwrap().modified().unwrap();
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::options().write(true).open(&big).unwrap();
        f.write_all_at(&noise(1 << 20, 77), 3 << 20).unwrap();
        f.set_modified(mtime).unwrap();
    }
    shard(0, "s0.json");
    shard(1, "s1.json");
    let (code, text) = report_of(&[&r("s0.json"), &r("s1.json")]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        std::fs::read(d.root.path().join("z/set/big")).unwrap() == std::fs::read(&big).unwrap()
    );
}

/// A receiver's root on a filesystem without user attributes nor O_DIRECT
/// (ramfs, as some NFS and FUSE mounts): whole files land, verified, and
/// nothing of urmove's is left beside them.
#[test]
fn a_root_without_attributes_nor_o_direct_takes_whole_files() {
    crate::require!(crate::util::is_root(), "needs root to mount a ramfs");
    let mnt = tempfile::tempdir_in("/var/tmp").unwrap();
    let ok = Command::new("mount")
        .args(["-t", "ramfs", "ramfs"])
        .arg(mnt.path())
        .status()
        .unwrap();
    assert!(ok.success());
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(mnt.path().to_path_buf());
    let d = crate::transfer::Daemon::start_full(&[], "127.0.0.1", mnt.path(), &[]);
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = src.path().join("set");
    std::fs::create_dir_all(&top).unwrap();
    for i in 0..5u64 {
        std::fs::write(
            top.join(format!("f{i}")),
            noise(300_000 + i as usize * 7, i),
        )
        .unwrap();
    }
    let o = d.send(&["--json"], &[top.to_str().unwrap(), "127.0.0.1:in"]);
    let v = json(&o);
    assert_eq!(v["status"], "ok", "{v}");
    assert_eq!(v["files_verified"], 5, "{v}");
    same_tree(&top, &d.root.path().join("in/set"));
    drop(d);
}
