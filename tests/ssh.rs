//! The ssh way (`urmove send SRC user@host:DEST` with no key file),
//! against a real OpenSSH sshd in a network namespace (tests/sshd.rs):
//! key authentication, an ordinary user account, no urmove daemon. The
//! remote side runs as that user with an ssh login's locked-memory limit.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::sshd::Sshd;
use crate::util::{json, noise, output_within, stderr, urmove};

const LIMIT: Duration = Duration::from_secs(180);

/// `urmove ARGS...` reaching `s` through its ssh, with its urmove copy.
fn via(s: &Sshd, args: &[&str]) -> Command {
    let mut c = urmove();
    c.args([args[0], "-e", &s.rsh(), "--remote-path", &s.remote_urmove()])
        .args(&args[1..])
        .stdin(Stdio::null());
    c
}

fn run(s: &Sshd, args: &[&str]) -> Output {
    output_within(via(s, args), LIMIT)
}

/// What rsync would change to make `got` match `want`, owners left out
/// (the remote side is an ordinary user); empty when equal.
fn rsync_changes(want: &Path, got: &Path) -> String {
    crate::fidelity::rsync_changes_with(&["-rlptHAX", "--specials"], want, got)
}

/// A tree with what tripped movers before: names of 255 bytes, a sparse
/// file, a file with three names, user attributes and an ACL, a FIFO, an
/// empty file, a mode not the umask's, symlinks.
fn tricky_tree(parent: &Path) -> PathBuf {
    let top = parent.join("run");
    let long = top.join("d".repeat(255));
    std::fs::create_dir_all(&long).unwrap();
    std::fs::create_dir_all(top.join("sub")).unwrap();
    std::fs::write(long.join("x".repeat(255)), noise(70_000, 5)).unwrap();
    std::fs::write(top.join("\u{e9}".repeat(127)), b"e-acute").unwrap();
    let sparse = std::fs::File::create(top.join("sparse")).unwrap();
    sparse.set_len(64 << 20).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&sparse, b"middle", 32 << 20).unwrap();
    std::fs::write(top.join("a"), noise(3 << 20, 4)).unwrap();
    std::fs::hard_link(top.join("a"), top.join("sub/a2")).unwrap();
    std::fs::hard_link(top.join("a"), top.join("z3")).unwrap();
    std::fs::write(top.join("empty"), b"").unwrap();
    std::fs::write(top.join("f"), b"data").unwrap();
    std::os::unix::fs::symlink("a", top.join("link")).unwrap();
    let sh = |args: &[&str]| {
        let o = Command::new(args[0])
            .args(&args[1..])
            .current_dir(&top)
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    };
    sh(&["mkfifo", "-m", "620", "pipe"]);
    sh(&["setfattr", "-n", "user.instrument", "-v", "ALMA-B6", "f"]);
    sh(&["setfacl", "-m", "u:nobody:r", "f"]);
    sh(&["chmod", "750", "sub"]);
    top
}

/// Blocks a sparse file takes on disk.
fn blocks(p: &Path) -> u64 {
    std::os::unix::fs::MetadataExt::blocks(&std::fs::metadata(p).unwrap())
}

/// Nothing of the run is left on the remote: no process, no port.
fn nothing_left(s: &Sshd) {
    let until = Instant::now() + Duration::from_secs(15);
    while Instant::now() < until
        && !(s.remote_processes().is_empty() && s.listening_ports().is_empty())
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(s.remote_processes(), vec![], "remote processes left");
    assert_eq!(s.listening_ports(), Vec::<u16>::new(), "ports left open");
}

#[test]
fn a_tricky_tree_goes_and_comes_back_through_ssh_as_rsync_would_have_it() {
    let tools = ["rsync", "setfattr", "setfacl"];
    crate::require!(
        tools.iter().all(|t| crate::util::have(t)),
        "needs rsync, attr, acl"
    );
    let Some(s) = Sshd::start_alone() else { return };
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = tricky_tree(src.path());
    // Relative to the remote home, as scp reads it; sealed by default.
    let dest = format!("{}:{}/in", s.host(), s.home_rel());
    let o = run(
        &s,
        &["send", "-aHAX", "--json", top.to_str().unwrap(), &dest],
    );
    let v = json(&o);
    assert_eq!(v["status"], "ok", "{v}\n{}", stderr(&o));
    let landed = s.home_dir().join("in/run");
    assert_eq!(rsync_changes(&top, &landed), "", "after the push");
    assert!(
        blocks(&landed.join("sparse")) < 1024,
        "the sparse file stayed sparse"
    );
    let meta = std::fs::metadata(&landed).unwrap();
    let uid = std::os::unix::fs::MetadataExt::uid(&meta);
    assert_eq!(uid, s.uid(), "the remote side writes as the ssh user");
    nothing_left(&s);

    // The second run finds every file as it left it (the login, not the
    // session's port, names this client's files).
    let v = json(&run(
        &s,
        &["send", "-aHAX", "--json", top.to_str().unwrap(), &dest],
    ));
    assert_eq!(
        (v["bytes"].as_u64(), v["files_unchanged"].as_u64()),
        (Some(0), v["files"].as_u64()),
        "{v}"
    );

    // Pulled back by its absolute path, with user@host.
    let back = tempfile::tempdir_in("/var/tmp").unwrap();
    let from = format!("{}@{}:{}", s.user(), s.host(), landed.display());
    let o = run(
        &s,
        &[
            "pull",
            "-aHAX",
            "--json",
            &from,
            back.path().to_str().unwrap(),
        ],
    );
    assert_eq!(json(&o)["status"], "ok", "{}", stderr(&o));
    assert_eq!(
        rsync_changes(&top, &back.path().join("run")),
        "",
        "after the pull"
    );
    nothing_left(&s);
}

/// A send of `file` to `dest`, slowed so it can be cut.
fn slow_send(s: &Sshd, file: &Path, dest: &str) -> Child {
    let mut c = via(
        s,
        &[
            "send",
            "--rate-limit",
            "200M",
            "-q",
            file.to_str().unwrap(),
            dest,
        ],
    );
    c.stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Wait until the receiver under `dir` has journaled some of its part
/// (journals are written about once a second), and a second more.
fn part_grows(dir: &Path) {
    let until = Instant::now() + Duration::from_secs(60);
    let journaled = || {
        std::fs::read_dir(dir).ok().is_some_and(|mut d| {
            d.any(|e| {
                e.is_ok_and(|e| {
                    e.file_name().to_string_lossy().ends_with(".urmove.journal")
                        && e.metadata().is_ok_and(|m| m.len() > 0)
                })
            })
        })
    };
    while !journaled() {
        assert!(Instant::now() < until, "no journal in {}", dir.display());
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(1200));
}

/// Kill -9 what `victim` picks while a send runs, then the same command
/// resumes from the part and the file arrives whole.
fn cut_and_resume(s: &Sshd, name: &str, victim: &dyn Fn(&Sshd, &mut Child)) {
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let file = src.path().join("big");
    std::fs::write(&file, noise(160 << 20, 9)).unwrap();
    let dest = format!("{}:{}/{name}/", s.host(), s.home_rel());
    let mut child = slow_send(s, &file, &dest);
    part_grows(&s.home_dir().join(name));
    victim(s, &mut child);
    let _ = child.wait();
    nothing_left(s);
    let o = run(s, &["send", "--json", file.to_str().unwrap(), &dest]);
    let v = json(&o);
    assert_eq!(v["status"], "ok", "{v}\n{}", stderr(&o));
    assert_eq!(v["files_continued"], 1, "{v}");
    assert!(v["bytes"].as_u64().unwrap() < 160 << 20, "{v}");
    let got = std::fs::read(s.home_dir().join(name).join("big")).unwrap();
    assert!(got == noise(160 << 20, 9), "the resumed file differs");
    nothing_left(s);
}

/// Process `pid`'s command line, its words joined by spaces.
fn line_of(pid: i32) -> String {
    let line = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    String::from_utf8_lossy(&line).replace('\0', " ")
}

/// Pids whose command line contains `needle` (zombies left out).
fn pids_with(needle: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let line = line_of(pid);
        let state = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let zombie = state
            .rsplit(") ")
            .next()
            .is_some_and(|r| r.starts_with('Z'));
        if line.contains(needle) && !zombie && pid != std::process::id() as i32 {
            out.push(pid);
        }
    }
    out
}

fn kill9(pids: &[i32]) {
    assert!(!pids.is_empty(), "nothing to kill");
    for &p in pids {
        // SAFETY: kill(2) with a pid and a signal number.
        unsafe { libc::kill(p, libc::SIGKILL) };
    }
}

#[test]
fn a_kill_of_either_side_or_of_ssh_leaves_nothing_and_the_next_run_resumes() {
    let Some(s) = Sshd::start_alone() else { return };
    cut_and_resume(&s, "client", &|_, child| child.kill().unwrap());
    // The ssh the client started (not the client, whose line names it).
    cut_and_resume(&s, "ssh", &|s, _| {
        let ssh = pids_with(&s.rsh());
        kill9(
            &ssh.into_iter()
                .filter(|&p| line_of(p).starts_with(&s.rsh()))
                .collect::<Vec<_>>(),
        )
    });
    cut_and_resume(&s, "remote", &|s, _| {
        let serve = s
            .remote_processes()
            .into_iter()
            .filter(|p| p.1.contains("serve --stdio"));
        kill9(&serve.map(|p| p.0 as i32).collect::<Vec<_>>())
    });
}

#[test]
fn a_changed_host_key_is_refused_as_ssh_refuses_it() {
    let Some(s) = Sshd::start_alone() else { return };
    s.known_hosts_mismatch();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::write(src.path().join("f"), b"x").unwrap();
    let dest = format!("{}:{}/in", s.host(), s.home_rel());
    let o = run(&s, &["send", src.path().join("f").to_str().unwrap(), &dest]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("srv: Host key verification failed."), "{e}");
    assert!(e.contains("ssh to srv failed (exit 255"), "{e}");
    assert!(!s.home_dir().join("in").exists(), "nothing was written");
}

#[test]
fn a_remote_without_urmove_or_with_an_older_one_is_named() {
    let Some(s) = Sshd::start_alone() else { return };
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let f = src.path().join("f");
    std::fs::write(&f, b"x").unwrap();
    let dest = format!("{}:{}/in", s.host(), s.home_rel());
    let mut c = urmove();
    c.args(["send", "-e", &s.rsh(), f.to_str().unwrap(), &dest]);
    let o = output_within(c, LIMIT);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("srv: urmove was not found there (exit 127)"),
        "{}",
        stderr(&o)
    );
    let Some(old) = std::env::var_os("URMOVE_PREVIOUS_BIN") else {
        eprintln!("the older urmove's part skipped: URMOVE_PREVIOUS_BIN is not set");
        return;
    };
    let there = s.home_dir().join("bin/old");
    std::fs::copy(old, &there).unwrap();
    s.chown_to_user(&there);
    let mut c = urmove();
    let remote = there.to_str().unwrap();
    c.args([
        "send",
        "-e",
        &s.rsh(),
        "--remote-path",
        remote,
        f.to_str().unwrap(),
        &dest,
    ]);
    let o = output_within(c, LIMIT);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("is an older urmove (urmove 0.1.0), without the ssh way"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn through_ssh_crosses_a_host_that_admits_only_ssh() {
    let Some(s) = Sshd::start_alone() else { return };
    s.firewall_only_ssh();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::write(src.path().join("big"), noise(24 << 20, 3)).unwrap();
    std::fs::write(src.path().join("small"), b"small").unwrap();
    let from = format!("{}/", src.path().display());
    let dest = format!("{}:{}/in", s.host(), s.home_rel());
    let o = run(&s, &["send", &from, &dest]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("--through-ssh carries the session"),
        "{}",
        stderr(&o)
    );
    nothing_left(&s);
    let o = run(&s, &["send", "--through-ssh", "--json", &from, &dest]);
    assert_eq!(json(&o)["status"], "ok", "{}", stderr(&o));
    let back = tempfile::tempdir_in("/var/tmp").unwrap();
    let o = run(
        &s,
        &[
            "pull",
            "--through-ssh",
            "--json",
            &format!("{dest}/"),
            back.path().to_str().unwrap(),
        ],
    );
    assert_eq!(json(&o)["status"], "ok", "{}", stderr(&o));
    for name in ["big", "small"] {
        let want = std::fs::read(src.path().join(name)).unwrap();
        assert!(
            std::fs::read(s.home_dir().join("in").join(name)).unwrap() == want,
            "{name} pushed"
        );
        assert!(
            std::fs::read(back.path().join(name)).unwrap() == want,
            "{name} pulled"
        );
    }
    nothing_left(&s);
}

/// Any run of 64 hex digits (a key as urmove writes one) in `text`.
fn has_hex_key(text: &str) -> bool {
    text.split(|c: char| !c.is_ascii_hexdigit())
        .any(|w| w.len() >= 64)
}

#[test]
fn no_secret_is_on_a_command_line_or_in_an_environment_on_either_host() {
    let Some(s) = Sshd::start_alone() else { return };
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let file = src.path().join("big");
    std::fs::write(&file, noise(96 << 20, 2)).unwrap();
    let dest = format!("{}:{}/in/", s.host(), s.home_rel());
    let mut child = slow_send(&s, &file, &dest);
    part_grows(&s.home_dir().join("in"));
    let mut seen = 0;
    // The client, its ssh, sshd's session and the remote urmove.
    let mut pids = pids_with(&s.rsh());
    pids.extend(pids_with(&s.home_dir().display().to_string()));
    pids.extend(s.remote_processes().iter().map(|p| p.0 as i32));
    pids.sort_unstable();
    pids.dedup();
    for pid in pids {
        let read = |f: &str| std::fs::read(format!("/proc/{pid}/{f}")).unwrap_or_default();
        let (line, env) = (read("cmdline"), read("environ"));
        let text = String::from_utf8_lossy(&[line.clone(), env].concat()).into_owned();
        assert!(!has_hex_key(&text), "a key-like run in process {pid}");
        let line = String::from_utf8_lossy(&line).replace('\0', " ");
        if line.contains("serve --stdio") {
            seen += 1;
            let path = format!("{}/in", s.home_rel());
            assert!(
                !line.contains(&path),
                "a path of the run on a command line: {line}"
            );
        }
    }
    assert!(seen >= 2, "the ssh and the remote urmove serve were seen");
    child.kill().unwrap();
    let _ = child.wait();
}

#[test]
fn bench_net_starts_its_receiver_through_ssh() {
    let Some(s) = Sshd::start_alone() else { return };
    let o = run(
        &s,
        &[
            "bench",
            "--net",
            s.host(),
            "--time",
            "2",
            "-P",
            "4",
            "--json",
        ],
    );
    let v = json(&o);
    assert_eq!(v["status"], "ok", "{v}\n{}", stderr(&o));
    assert!(v["bytes"].as_u64().unwrap() > 0, "{v}");
    nothing_left(&s);
}

#[test]
fn a_dry_run_names_the_remote_paths_and_delete_and_exclude_work_through_ssh() {
    let Some(s) = Sshd::start_alone() else { return };
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let x = src.path().join("x");
    std::fs::create_dir_all(&x).unwrap();
    std::fs::write(x.join("a"), b"a").unwrap();
    std::fs::write(x.join("b.tmp"), b"b").unwrap();
    let dest = format!("{}:{}/dl", s.host(), s.home_rel());
    let o = run(&s, &["send", "-n", x.to_str().unwrap(), &dest]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let said = crate::util::stdout(&o);
    let there = s.home_dir().join("dl");
    let want = format!("would send 2 files, 2 B to srv:{}", there.display());
    assert!(said.contains(&want), "{said}");
    assert!(!there.exists(), "a dry run wrote nothing");
    assert_eq!(
        run(&s, &["send", x.to_str().unwrap(), &dest]).status.code(),
        Some(0)
    );
    std::fs::write(there.join("x/extra"), b"e").unwrap();
    let o = run(
        &s,
        &[
            "send",
            "--delete",
            "--exclude",
            "*.tmp",
            "--json",
            x.to_str().unwrap(),
            &dest,
        ],
    );
    assert_eq!(json(&o)["status"], "ok", "{}", stderr(&o));
    assert!(
        !there.join("x/extra").exists(),
        "--delete removed the extra"
    );
    assert!(there.join("x/b.tmp").exists(), "an excluded name is kept");
    nothing_left(&s);
}

/// Two runs of one user to one host at once: the kernel counts the
/// ssh login's locked memory per user, so the second finds only what the
/// first left; both arrive, the second with smaller frames.
#[test]
fn two_runs_of_one_user_at_once_share_its_locked_memory() {
    let Some(s) = Sshd::start_alone() else { return };
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let file = src.path().join("big");
    std::fs::write(&file, noise(48 << 20, 6)).unwrap();
    let runs: Vec<_> = ["one", "two"]
        .iter()
        .map(|name| {
            let dest = format!("{}:{}/{name}/", s.host(), s.home_rel());
            let mut c = via(&s, &["send", "--rate-limit", "100M", "--json"]);
            c.arg(&file)
                .arg(&dest)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let child = c.spawn().unwrap();
            std::thread::sleep(Duration::from_millis(1500));
            child
        })
        .collect();
    for (child, name) in runs.into_iter().zip(["one", "two"]) {
        let o = crate::util::wait_output_within(child, LIMIT).expect("a run hung");
        assert_eq!(json(&o)["status"], "ok", "{name}: {}", stderr(&o));
        let got = std::fs::read(s.home_dir().join(name).join("big")).unwrap();
        assert!(got == noise(48 << 20, 6), "{name} differs");
    }
    nothing_left(&s);
}
