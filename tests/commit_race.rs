//! Verified at the moment of commit: a second, unprivileged user races a
//! real daemon for the files it commits (as their new owner, through an
//! ACL, through a 0666 mode, under two shards on one root), edits a file
//! right after its commit and puts the mtime back, rewrites a source while
//! it is read, and swaps a directory for a link while the data comes.
//! Each test compares every byte of what arrived and checks that nothing
//! differing is reported "verified" or "unchanged".
//!
//! The racer is a thread of this test process that takes the second
//! user's credentials for itself alone (raw setresuid, not glibc's, which
//! would change every thread): it lists the destination in a tight loop
//! and opens every file or part it may for writing, writes 4 bytes at
//! offset 100 and puts its times back. A write it made while the inode was
//! not yet at its final name (before the commit) is an "early" hit.
//!
//! How often these showed the race before the fix (build 4996fbf, this
//! machine, 24 files a round): see each test's comment; every one failed
//! in its first round.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::transfer::Daemon;
use crate::util::{is_root, json, noise, output_within, stderr, stdout, urmove};
use crate::verified::{recv_cmd, spawn_daemon, Killed, UNPRIV_LOCK};

const HANG: Duration = Duration::from_secs(300);
/// Rounds of each race, and files committed in each.
const ROUNDS: usize = 5;
const FILES: usize = 24;

// ---- the second user -----------------------------------------------------

/// A user's uid and gid, by name.
fn user(name: &str) -> (u32, u32) {
    let id = |flag: &str| -> u32 {
        let o = Command::new("id").args([flag, name]).output().unwrap();
        String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
    };
    (id("-u"), id("-g"))
}

/// Make this thread alone `(uid, gid)` with no further groups.
fn become_user((uid, gid): (u32, u32)) {
    // SAFETY: the raw system calls change the calling thread's credentials
    // only (glibc's wrappers would change every thread's); their arguments
    // are plain numbers and an empty group list.
    let ok = unsafe {
        libc::syscall(libc::SYS_setgroups, 0usize, std::ptr::null::<libc::gid_t>()) == 0
            && libc::syscall(libc::SYS_setresgid, gid, gid, gid) == 0
            && libc::syscall(libc::SYS_setresuid, uid, uid, uid) == 0
    };
    assert!(ok, "setresuid: {}", std::io::Error::last_os_error());
}

/// One write the racer made: into which file, and whether its inode was
/// not yet at the file's final name when the write went in.
#[derive(Debug)]
struct Hit {
    file: String,
    early: bool,
}

/// The racing thread: the second user striking every file of `names` in
/// `dir` (and its parts) once, until stopped.
struct Racer {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<Hit>>,
}

impl Racer {
    fn start(as_user: (u32, u32), dir: PathBuf, names: Vec<String>) -> Racer {
        let stop = Arc::new(AtomicBool::new(false));
        let halt = stop.clone();
        let thread = std::thread::spawn(move || {
            become_user(as_user);
            race(&dir, &names, &halt)
        });
        Racer { stop, thread }
    }

    /// Stop (after a moment for an open that waits), and what it hit.
    fn stop(self) -> Vec<Hit> {
        std::thread::sleep(Duration::from_millis(300));
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

fn race(dir: &Path, names: &[String], stop: &AtomicBool) -> Vec<Hit> {
    let mut struck: HashSet<u64> = HashSet::new();
    let mut hits = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let Ok(listing) = std::fs::read_dir(dir) else {
            continue;
        };
        for name in listing.flatten().map(|e| e.file_name()) {
            let name = name.to_string_lossy().into_owned();
            if let Some(file) = names.iter().find(|n| is_of(&name, n)) {
                hits.extend(strike(dir, &name, file, &mut struck));
            }
        }
    }
    hits
}

/// `name` is file `n`'s final name or one of its parts'.
fn is_of(name: &str, n: &str) -> bool {
    name == n || (name.starts_with(&format!("{n}.")) && name.ends_with(".urmove.part"))
}

/// Open `dir/name` to write (waiting as long as the kernel makes us);
/// once per inode: 4 bytes at offset 100, then its times put back.
fn strike(dir: &Path, name: &str, file: &str, struck: &mut HashSet<u64>) -> Option<Hit> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(dir.join(name))
        .ok()?;
    let m = f.metadata().ok()?;
    if !m.is_file() || !struck.insert(m.ino()) {
        return None;
    }
    let at_final = std::fs::symlink_metadata(dir.join(file)).is_ok_and(|fm| fm.ino() == m.ino());
    f.write_all_at(b"RACE", 100).ok()?;
    let times = std::fs::FileTimes::new()
        .set_accessed(m.accessed().ok()?)
        .set_modified(m.modified().ok()?);
    // Only an owner may put times back; the others' writes stay dated.
    let _ = f.set_times(times);
    Some(Hit {
        file: file.to_string(),
        early: !at_final,
    })
}

// ---- sources and checks ----------------------------------------------------

fn tmp() -> tempfile::TempDir {
    let t = tempfile::tempdir_in("/var/tmp").unwrap();
    chmod(t.path(), 0o755);
    t
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn run(cmd: &mut Command) {
    let st = cmd.status().unwrap();
    assert!(st.success(), "{cmd:?}");
}

fn chown(p: &Path, who: &str) {
    run(Command::new("chown").arg("-R").arg(who).arg(p));
}

/// `FILES` files of 256 KiB (their names) in `dir`, given `mode`.
fn sources(dir: &Path, seed: u64, mode: u32) -> Vec<String> {
    std::fs::create_dir_all(dir).unwrap();
    chmod(dir, 0o755);
    (0..FILES)
        .map(|i| {
            let name = format!("f{i:02}");
            std::fs::write(dir.join(&name), noise(256 << 10, seed + i as u64)).unwrap();
            chmod(&dir.join(&name), mode);
            name
        })
        .collect()
}

fn both(o: &Output) -> String {
    format!("stdout: {}\nstderr: {}", stdout(o), stderr(o))
}

fn n(v: &serde_json::Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or(0)
}

/// The files of `names` in `dst` whose bytes differ from `src`'s.
fn differing(src: &Path, dst: &Path, names: &[String]) -> Vec<String> {
    names
        .iter()
        .filter(|f| std::fs::read(src.join(f)).ok() != std::fs::read(dst.join(f)).ok())
        .cloned()
        .collect()
}

/// No write of the racer went in before its file's commit.
fn assert_none_early(hits: &[Hit], what: &str, round: usize) {
    let early: Vec<&Hit> = hits.iter().filter(|h| h.early).collect();
    assert!(
        early.is_empty(),
        "{what}, round {round}: the second user wrote into files before their commit \
         (they were reported verified): {early:?}"
    );
}

/// A run again after the racer: every file it changed is sent again (not
/// "unchanged"), every other one is unchanged, and all bytes agree.
fn assert_sent_again(o: &Output, (src, dst): (&Path, &Path), names: &[String], changed: usize) {
    assert_eq!(o.status.code(), Some(0), "{}", both(o));
    let v = json(o);
    assert_eq!(
        n(&v, "files_unchanged"),
        (names.len() - changed) as u64,
        "{v}"
    );
    assert_eq!(differing(src, dst, names), Vec::<String>::new());
}

// ---- 1. nobody writes a file between its digest and its commit -------------

/// A push into `dest` (made beforehand, the racer's to list) whose files
/// the racer strikes; then a push again. Returns the racer's hits.
struct Round<'a> {
    what: &'a str,
    port: u16,
    key: &'a Path,
    racer: (u32, u32),
    extra: &'a [&'a str],
}

impl Round<'_> {
    fn push(&self, src: &Path, dest_rel: &str) -> Output {
        let mut c = urmove();
        c.args(["send", "--json", "-p", &self.port.to_string(), "--key-file"])
            .arg(self.key)
            .args(self.extra)
            .arg(src)
            .arg(format!("127.0.0.1:{dest_rel}"));
        output_within(c, HANG)
    }

    /// `ROUNDS` pushes of fresh sources under `root` (the daemon's), each
    /// struck, each checked, each pushed again.
    fn run(&self, root: &Path, make: &dyn Fn(&Path, u64) -> Vec<String>) {
        let mut struck = 0;
        for round in 0..ROUNDS {
            let src = tmp();
            let top = src.path().join("t");
            let names = make(&top, round as u64 * 100);
            let dest_rel = format!("r{round}");
            let dst = root.join(&dest_rel).join("t");
            std::fs::create_dir_all(&dst).unwrap();
            chown(&root.join(&dest_rel), "nobody:nogroup");
            let racer = Racer::start(self.racer, dst.clone(), names.clone());
            let o = self.push(&top, &dest_rel);
            let hits = racer.stop();
            assert_eq!(o.status.code(), Some(0), "{}: {}", self.what, both(&o));
            assert_eq!(n(&json(&o), "files_verified"), FILES as u64);
            assert_none_early(&hits, self.what, round);
            let changed: HashSet<&str> = hits.iter().map(|h| h.file.as_str()).collect();
            assert_eq!(differing(&top, &dst, &names).len(), changed.len());
            let again = self.push(&top, &dest_rel);
            assert_sent_again(&again, (&top, &dst), &names, changed.len());
            struck += changed.len();
        }
        eprintln!("{}: {struck} files struck after their commit", self.what);
    }
}

/// A root daemon gives each file its sender's owner (nobody); nobody, the
/// new owner, races for it. Before the fix: 14 of 24 files written early
/// in the first round.
#[test]
fn the_new_owner_cannot_write_a_file_before_its_commit() {
    crate::require!(is_root(), "needs root (owners, a second user)");
    let d = Daemon::start();
    chmod(d.root.path(), 0o755);
    let round = Round {
        what: "owner",
        port: d.port,
        key: &d.key,
        racer: user("nobody"),
        extra: &[],
    };
    round.run(d.root.path(), &|top, seed| {
        let names = sources(top, seed, 0o644);
        chown(top, "nobody:nogroup");
        names
    });
}

/// An ACL carried with -A grants another user write, to a root daemon's
/// files and to an unprivileged daemon's. Before the fix: 13 of 24 files
/// written early in the first round (the root daemon's).
#[test]
fn a_user_an_acl_lets_write_cannot_write_a_file_before_its_commit() {
    crate::require!(is_root(), "needs root (a second user)");
    crate::require!(crate::util::have("setfacl"), "needs setfacl (acl)");
    let with_acl = |grantee: &'static str| {
        move |top: &Path, seed: u64| {
            let names = sources(top, seed, 0o640);
            for f in &names {
                run(Command::new("setfacl")
                    .args(["-m", &format!("u:{grantee}:rw")])
                    .arg(top.join(f)));
            }
            names
        }
    };
    let d = Daemon::start();
    chmod(d.root.path(), 0o755);
    Round {
        what: "ACL, root daemon",
        port: d.port,
        key: &d.key,
        racer: user("nobody"),
        extra: &["-A"],
    }
    .run(d.root.path(), &with_acl("nobody"));
    let nb = crate::verified::nobody_dirs();
    let (child, port, _log) =
        spawn_daemon(recv_cmd(&UNPRIV_LOCK, &nb.root, &nb.key, &nb.state, &[]))
            .unwrap_or_else(|(code, log)| panic!("the daemon exited {code:?}: {log}"));
    let _daemon = Killed(child);
    Round {
        what: "ACL, daemon as nobody",
        port,
        key: &nb.key,
        racer: user("daemon"),
        extra: &["-A"],
    }
    .run(&nb.root, &with_acl("daemon"));
}

/// A mode of 0666 lets every user write. Before the fix: 21 of 24 files
/// written early in the first round.
#[test]
fn a_user_a_0666_mode_lets_write_cannot_write_a_file_before_its_commit() {
    crate::require!(is_root(), "needs root (a second user)");
    let d = Daemon::start();
    chmod(d.root.path(), 0o755);
    Round {
        what: "mode 0666",
        port: d.port,
        key: &d.key,
        racer: user("nobody"),
        extra: &[],
    }
    .run(d.root.path(), &|top, seed| sources(top, seed, 0o666));
}

/// Two receivers share one root, each committing one shard of a push:
/// `urmove report` says complete only for bytes that were committed as
/// sent, and the new owner's edits are sent again. Before the fix: 21 of
/// 24 files written early in the first round.
#[test]
fn two_shards_on_one_root_commit_nothing_the_new_owner_wrote_into() {
    crate::require!(is_root(), "needs root (owners, a second user)");
    let base = tmp();
    let (key, root, state) = (
        base.path().join("key"),
        base.path().join("root"),
        base.path().join("state"),
    );
    crate::util::keygen(&key);
    std::fs::create_dir(&root).unwrap();
    std::fs::create_dir(&state).unwrap();
    let start = || {
        let (child, port, _log) = spawn_daemon(recv_cmd(&["env"], &root, &key, &state, &[]))
            .unwrap_or_else(|(code, log)| panic!("a receiver exited {code:?}: {log}"));
        (Killed(child), port)
    };
    let (_a, port_a) = start();
    let (_b, port_b) = start();
    for round in 0..ROUNDS {
        let src = tmp();
        let top = src.path().join("t");
        let names = sources(&top, round as u64 * 100, 0o644);
        chown(&top, "nobody:nogroup");
        let dest_rel = format!("r{round}");
        let dst = root.join(&dest_rel).join("t");
        std::fs::create_dir_all(&dst).unwrap();
        chown(&root.join(&dest_rel), "nobody:nogroup");
        let racer = Racer::start(user("nobody"), dst.clone(), names.clone());
        let reports = [(0, port_a), (1, port_b)].map(|(k, port)| {
            let o = shard(&key, port, k, (&top, &dest_rel));
            assert_eq!(o.status.code(), Some(0), "shard {k}: {}", both(&o));
            let path = src.path().join(format!("s{k}.json"));
            std::fs::write(&path, &o.stdout).unwrap();
            path
        });
        let hits = racer.stop();
        let report = urmove().arg("report").args(&reports).output().unwrap();
        assert_eq!(report.status.code(), Some(0), "{}", both(&report));
        assert_none_early(&hits, "two shards", round);
        let changed: HashSet<&str> = hits.iter().map(|h| h.file.as_str()).collect();
        assert_eq!(differing(&top, &dst, &names).len(), changed.len());
        let unchanged: u64 = [(0, port_a), (1, port_b)]
            .map(|(k, port)| {
                let o = shard(&key, port, k, (&top, &dest_rel));
                assert_eq!(o.status.code(), Some(0), "shard {k} again: {}", both(&o));
                n(&json(&o), "files_unchanged")
            })
            .iter()
            .sum();
        assert_eq!(unchanged, (FILES - changed.len()) as u64);
        assert_eq!(differing(&top, &dst, &names), Vec::<String>::new());
    }
}

/// Shard `k` of 2 of `src` into `dest_rel` on the receiver at `port`.
fn shard(key: &Path, port: u16, k: u32, (src, dest_rel): (&Path, &str)) -> Output {
    let mut c = urmove();
    c.args(["send", "--shard", &format!("{k}/2"), "--json"])
        .args(["-p", &port.to_string(), "--key-file"])
        .arg(key)
        .arg(src)
        .arg(format!("127.0.0.1:{dest_rel}"));
    output_within(c, HANG)
}

// ---- 2. any change after the commit is seen ---------------------------------

/// Run `f` on a thread of its own as `who`.
fn as_user<T: Send + 'static>(who: (u32, u32), f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        become_user(who);
        f()
    })
    .join()
    .unwrap()
}

/// The owner edits files at once after their commit (well inside the 5 s
/// the stamp once let pass) and puts their mtime back: the next run sends
/// them again. Before the fix: the 4 edited files of the first round all
/// "unchanged".
#[test]
fn an_edit_right_after_a_commit_with_the_mtime_put_back_is_sent_again() {
    crate::require!(is_root(), "needs root (owners, a second user)");
    let d = Daemon::start();
    chmod(d.root.path(), 0o755);
    let edited = 4;
    for round in 0..ROUNDS {
        let src = tmp();
        let top = src.path().join("t");
        let names = sources(&top, round as u64 * 100, 0o644);
        chown(&top, "nobody:nogroup");
        let dest = format!("127.0.0.1:r{round}");
        let o = d.send(&["--json"], &[top.to_str().unwrap(), &dest]);
        assert_eq!(o.status.code(), Some(0), "{}", both(&o));
        let committed = Instant::now();
        let dst = d.root.path().join(format!("r{round}/t"));
        let edit: Vec<String> = names[..edited].to_vec();
        let dir = dst.clone();
        let hits = as_user(user("nobody"), move || {
            let mut struck = HashSet::new();
            edit.iter()
                .filter_map(|f| strike(&dir, f, f, &mut struck))
                .count()
        });
        assert_eq!(hits, edited, "the owner could not edit its files");
        assert!(committed.elapsed() < Duration::from_secs(5));
        assert_eq!(differing(&top, &dst, &names).len(), edited);
        let again = d.send(&["--json"], &[top.to_str().unwrap(), &dest]);
        assert_sent_again(&again, (&top, &dst), &names, edited);
    }
}

// ---- 3. a source changed while it is read ---------------------------------

/// A client run with --json-stream, its stdout read line by line (its
/// intervals, then its summary).
struct Watched {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
    seen: Vec<String>,
    stderr: JoinHandle<Vec<u8>>,
}

impl Watched {
    fn spawn(mut c: Command) -> Watched {
        let mut child = c
            .arg("--json-stream")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let mut err = child.stderr.take().unwrap();
        let stderr = std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = std::io::Read::read_to_end(&mut err, &mut v);
            v
        });
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        Watched {
            child,
            lines,
            seen: Vec::new(),
            stderr,
        }
    }

    /// Wait until an interval says `share` of the bytes expected arrived.
    fn wait_for_share(&mut self, share: f64) {
        let until = Instant::now() + Duration::from_secs(60);
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            let Ok(line) = self.lines.recv_timeout(left) else {
                break;
            };
            let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
            let (done, all) = (v["total_bytes"].as_f64(), v["expected_bytes"].as_f64());
            self.seen.push(line);
            if done.zip(all).is_some_and(|(d, a)| d >= share * a) {
                return;
            }
        }
        panic!("never {share} of the bytes: {}", self.seen.join("\n"));
    }

    /// Wait for the end (bounded by `HANG`): its stderr, and its summary
    /// (the last line) as stdout.
    fn finish(mut self) -> Output {
        let until = Instant::now() + HANG;
        let status = loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                break st;
            }
            if Instant::now() > until {
                let _ = self.child.kill();
                panic!("the client hung");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let rest: Vec<String> = self.lines.iter().collect();
        let last = rest
            .last()
            .or(self.seen.last())
            .cloned()
            .unwrap_or_default();
        Output {
            status,
            stdout: last.into_bytes(),
            stderr: self.stderr.join().unwrap(),
        }
    }
}

/// A 48 MiB `big` and a small file in `top`, owned by nobody.
fn big_and_small(top: &Path, seed: u64) {
    std::fs::create_dir_all(top).unwrap();
    std::fs::write(top.join("big"), noise(48 << 20, seed)).unwrap();
    std::fs::write(top.join("small"), noise(64 << 10, seed + 1)).unwrap();
    chown(top, "nobody:nogroup");
}

/// The owner rewrites the first and last 4 bytes of `path` in place and
/// puts its times back.
fn rewrite_in_place(path: PathBuf) {
    as_user(user("nobody"), move || {
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let m = f.metadata().unwrap();
        f.write_all_at(b"EDIT", 0).unwrap();
        f.write_all_at(b"EDIT", m.len() - 4).unwrap();
        let times = std::fs::FileTimes::new()
            .set_accessed(m.accessed().unwrap())
            .set_modified(m.modified().unwrap());
        f.set_times(times).unwrap();
    });
}

/// What a run made of `big`, rewritten while it was read: skipped as
/// changed (true), or, the rewrite having come after its last read (a
/// loaded machine), verified with the bytes it read (false). Never
/// "verified" for a copy that matches neither the old bytes nor the new.
fn changed_or_read_whole(o: &Output, (top, old): (&Path, &[u8]), dst: &Path) -> bool {
    let v = json(o);
    assert_eq!(
        std::fs::read(top.join("small")).unwrap(),
        std::fs::read(dst.join("small")).unwrap()
    );
    if o.status.code() == Some(0) {
        assert_eq!(n(&v, "files_verified"), 2, "{v}");
        let got = std::fs::read(dst.join("big")).unwrap();
        let new = std::fs::read(top.join("big")).unwrap();
        assert!(
            got == old || got == new,
            "verified, but the copy is neither version"
        );
        return false;
    }
    assert_eq!(o.status.code(), Some(23), "{}", both(o));
    assert_eq!(n(&v, "files_verified"), 1, "{v}");
    let skipped = v["skipped"].as_array().cloned().unwrap_or_default();
    assert!(
        skipped.iter().any(|s| {
            s["path"].as_str().is_some_and(|p| p.ends_with("big"))
                && s["reason"].as_str().is_some_and(|r| r.contains("changed"))
        }),
        "{v}"
    );
    assert!(!dst.join("big").exists(), "a changed source was committed");
    true
}

/// A source's owner rewrites its first and last bytes while a push reads
/// it and puts its mtime back: never verified, skipped as changed (small
/// frames keep the reader from running far ahead of the network). Before
/// the fix: "2 of 2 files verified" and a copy of neither version, 3 of 3
/// rounds (size and mtime alone were compared).
#[test]
fn a_source_rewritten_during_a_push_with_its_mtime_put_back_is_not_verified() {
    crate::require!(is_root(), "needs root (a second user)");
    let d = Daemon::start();
    let mut caught = 0;
    for round in 0..3 {
        let src = tmp();
        let top = src.path().join("t");
        big_and_small(&top, round * 10);
        let mut c = urmove();
        c.args(["send", "-P", "1", "--block", "1M", "--rate-limit", "80Mbit"])
            .args(["-p", &d.port.to_string(), "--key-file"])
            .arg(&d.key)
            .arg(&top)
            .arg(format!("127.0.0.1:r{round}"));
        let old = std::fs::read(top.join("big")).unwrap();
        let mut w = Watched::spawn(c);
        w.wait_for_share(0.2);
        rewrite_in_place(top.join("big"));
        let o = w.finish();
        let dst = d.root.path().join(format!("r{round}/t"));
        caught += usize::from(changed_or_read_whole(&o, (&top, &old), &dst));
    }
    assert!(caught > 0, "no round rewrote the source while it was read");
}

/// The same under a pull: the daemon's file rewritten by its owner while
/// the daemon reads it.
#[test]
fn a_source_rewritten_during_a_pull_with_its_mtime_put_back_is_not_verified() {
    crate::require!(is_root(), "needs root (a second user)");
    let d = Daemon::start();
    chmod(d.root.path(), 0o755);
    let mut caught = 0;
    for round in 0..3 {
        let top = d.root.path().join(format!("r{round}"));
        big_and_small(&top, round * 10);
        let out = tmp();
        let mut c = urmove();
        c.args(["pull", "-P", "1", "--block", "1M", "--rate-limit", "80Mbit"])
            .args(["-p", &d.port.to_string(), "--key-file"])
            .arg(&d.key)
            .arg(format!("127.0.0.1:r{round}"))
            .arg(out.path());
        let old = std::fs::read(top.join("big")).unwrap();
        let mut w = Watched::spawn(c);
        w.wait_for_share(0.2);
        rewrite_in_place(top.join("big"));
        let o = w.finish();
        let dst = out.path().join(format!("r{round}"));
        caught += usize::from(changed_or_read_whole(&o, (&top, &old), &dst));
    }
    assert!(caught > 0, "no round rewrote the source while it was read");
}

// ---- 4. one planted link is one refused entry -----------------------------

/// While a push comes, a local user who may write under the root swaps a
/// directory of the tree for a symlink to a directory of its own: the
/// entries beneath it are refused, the rest committed, exit 23, and
/// nothing lands through the link. Odd rounds swap once the first file is
/// committed, even ones as soon as the directory is made. Before the fix:
/// the session ended "goes through a symlink (io_error)", exit 1.
#[test]
fn a_directory_swapped_for_a_link_mid_push_refuses_only_what_is_beneath() {
    crate::require!(is_root(), "needs root (a second user)");
    let d = Daemon::start();
    chmod(d.root.path(), 0o755);
    for round in 0..4 {
        let src = tmp();
        let top = src.path().join("t");
        std::fs::create_dir_all(top.join("a")).unwrap();
        std::fs::create_dir_all(top.join("b")).unwrap();
        std::fs::write(top.join("a/big"), noise(24 << 20, round)).unwrap();
        std::fs::write(top.join("b/late"), noise(24 << 20, round + 1)).unwrap();
        chown(&top, "nobody:nogroup");
        let dst = d.root.path().join(format!("r{round}/t"));
        std::fs::create_dir_all(&dst).unwrap();
        chown(&d.root.path().join(format!("r{round}")), "nobody:nogroup");
        let outside = tmp();
        chown(outside.path(), "nobody:nogroup");
        let mut c = urmove();
        c.args(["send", "-P", "1", "--rate-limit", "80Mbit"])
            .args(["-p", &d.port.to_string(), "--key-file"])
            .arg(&d.key)
            .arg(&top)
            .arg(format!("127.0.0.1:r{round}"));
        let w = Watched::spawn(c);
        let first = if round % 2 == 1 { "a/big" } else { "b" };
        wait_for_path(&dst.join(first));
        let (d2, to) = (dst.clone(), outside.path().to_path_buf());
        as_user(user("nobody"), move || {
            std::fs::rename(d2.join("b"), d2.join("b.moved")).unwrap();
            std::os::unix::fs::symlink(&to, d2.join("b")).unwrap();
        });
        let o = w.finish();
        assert_only_beneath_refused(&o, &top, &dst);
        let landed: Vec<_> = std::fs::read_dir(outside.path()).unwrap().collect();
        assert!(landed.is_empty(), "written through the link: {landed:?}");
        assert!(!dst.join("b.moved/late").exists());
    }
}

fn wait_for_path(p: &Path) {
    let until = Instant::now() + Duration::from_secs(60);
    while !p.exists() {
        assert!(Instant::now() < until, "{p:?} never appeared");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Exit 23: `a/big` verified and whole, `b/late` skipped as refused.
fn assert_only_beneath_refused(o: &Output, top: &Path, dst: &Path) {
    assert_eq!(o.status.code(), Some(23), "{}", both(o));
    let v = json(o);
    assert_eq!(n(&v, "files_verified"), 1, "{v}");
    let skipped = v["skipped"].as_array().cloned().unwrap_or_default();
    assert!(
        skipped
            .iter()
            .any(|s| s["path"].as_str().is_some_and(|p| p.ends_with("b/late"))),
        "{v}"
    );
    assert_eq!(
        std::fs::read(top.join("a/big")).unwrap(),
        std::fs::read(dst.join("a/big")).unwrap()
    );
}
