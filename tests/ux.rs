//! Terminal UX: `--progress`, `--quiet`, shell completions and man pages.
//! The tests' stdout and stderr are pipes, so `auto` means interval lines
//! here; the bar is tested by forcing it.

use std::path::Path;
use std::process::Output;

use clap::CommandFactory;

use crate::transfer::Daemon;
use crate::util::{have, json, run, stderr, stdout, urmove};

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir_in("/var/tmp").unwrap()
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// `bench --disk` of 32 MiB (write then read) in a new directory.
fn bench_disk(extra: &[&str]) -> Output {
    let dir = tmp();
    let mut args = vec!["bench", "--disk", p(dir.path()), "--size", "32M"];
    args.extend_from_slice(extra);
    let o = run(&args);
    assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
    o
}

/// Interval lines start with the wall clock (`12:28:35  ...`).
fn interval_lines(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| {
            let b = l.as_bytes();
            b.len() > 10
                && b[2] == b':'
                && b[5] == b':'
                && b[..8].iter().all(|c| *c == b':' || c.is_ascii_digit())
        })
        .collect()
}

/// What a bar leaves in its output: carriage returns or ANSI sequences.
fn has_frames(text: &str) -> bool {
    text.contains('\r') || text.contains("\x1b[")
}

/// The human summary of one `bench --disk` mode.
fn disk_summaries(text: &str) -> usize {
    text.lines()
        .filter(|l| l.starts_with("  ") && l.contains(" bytes (") && l.contains(" IOPS "))
        .count()
}

#[test]
fn bench_disk_prints_interval_lines_when_stdout_is_not_a_terminal() {
    for extra in [&[][..], &["--progress", "auto"], &["--progress", "lines"]] {
        let o = bench_disk(extra);
        let out = stdout(&o);
        let lines = interval_lines(&out);
        assert!(
            lines.iter().any(|l| l.contains("  write  "))
                && lines.iter().any(|l| l.contains("  read  ")),
            "{extra:?}: no interval line per mode:\n{out}"
        );
        assert!(
            lines
                .iter()
                .all(|l| l.contains(" of ") && l.contains("ETA ")),
            "{out}"
        );
        assert!(out.starts_with("urmove bench --disk: 1 target(s)"), "{out}");
        assert_eq!(disk_summaries(&out), 2, "{out}");
        assert!(
            !has_frames(&out) && !has_frames(&stderr(&o)),
            "no bar in a pipe"
        );
    }
}

#[test]
fn bench_disk_progress_none_and_quiet_print_only_the_summary() {
    let o = bench_disk(&["--progress", "none"]);
    let out = stdout(&o);
    assert!(interval_lines(&out).is_empty(), "{out}");
    assert!(out.starts_with("urmove bench --disk:"), "{out}");
    assert_eq!(disk_summaries(&out), 2, "{out}");

    // --quiet wins over --progress, and drops the header too.
    for extra in [&["--quiet"][..], &["-q", "--progress", "bar"]] {
        let o = bench_disk(extra);
        let out = stdout(&o);
        assert!(interval_lines(&out).is_empty(), "{extra:?}: {out}");
        assert!(out.starts_with("write "), "{extra:?}: {out}");
        assert_eq!(disk_summaries(&out), 2, "{out}");
        assert!(
            !has_frames(&out) && !has_frames(&stderr(&o)),
            "{extra:?}: a bar"
        );
    }
}

#[test]
fn bench_disk_forced_bar_draws_frames_on_stderr_only() {
    let o = bench_disk(&["--progress", "bar"]);
    let (out, err) = (stdout(&o), stderr(&o));
    assert!(has_frames(&err), "no bar frames on stderr: {err:?}");
    assert!(err.contains("write [") && err.contains("read ["), "{err:?}");
    assert!(err.contains("100%"), "{err:?}");
    // stdout keeps the summaries, with no interval line and no frame.
    assert!(interval_lines(&out).is_empty(), "{out}");
    assert!(!has_frames(&out), "{out:?}");
    assert_eq!(disk_summaries(&out), 2, "{out}");
}

#[test]
fn json_modes_ignore_progress_and_quiet() {
    for extra in [&["--json", "--quiet"][..], &["--json", "--progress", "bar"]] {
        let o = bench_disk(extra);
        assert_eq!(json(&o)["status"], "ok", "{extra:?}");
        assert!(!has_frames(&stderr(&o)), "{extra:?}: a bar under --json");
    }
    // --json-stream still streams its intervals under --quiet.
    let o = bench_disk(&["--json-stream", "-q"]);
    let out = stdout(&o);
    assert!(
        out.lines().any(|l| l.contains(r#""type":"interval""#)),
        "{out}"
    );
    assert!(
        out.lines().last().unwrap().contains(r#""type":"summary""#),
        "{out}"
    );
}

/// A small tree of 3 files to send.
fn tree(dir: &Path) -> String {
    let top = dir.join("run7");
    std::fs::create_dir_all(&top).unwrap();
    for (i, n) in [5 << 20, 4096, 1].iter().enumerate() {
        std::fs::write(top.join(format!("f{i}")), crate::util::noise(*n, i as u64)).unwrap();
    }
    p(&top).to_string()
}

fn sent(o: &Output, extra: &[&str]) -> String {
    assert!(o.status.success(), "{extra:?}: {}", stderr(o));
    stdout(o)
}

#[test]
fn send_progress_lines_none_quiet_and_bar() {
    let d = Daemon::start();
    let src = tmp();
    let top = tree(src.path());
    let summary = "sent 3 files, ";

    // Default (stdout is a pipe): FDT-style interval lines, then the summary.
    let out = sent(&d.send(&[], &[&top, "127.0.0.1:a"]), &[]);
    let lines = interval_lines(&out);
    assert!(!lines.is_empty(), "{out}");
    assert!(
        lines
            .iter()
            .all(|l| l.contains("  Net Out: ") && l.contains("%  ETA ")),
        "{out}"
    );
    // The summary follows the interval lines (and may say, after it, where
    // a slow setup's time went).
    let after = out.lines().skip_while(|l| !l.starts_with(summary)).skip(1);
    assert!(after.clone().all(|l| l.starts_with("time: ")), "{out}");
    assert!(out.contains(&format!("\n{summary}")), "{out}");

    // None: only the summary on stdout.
    let out = sent(
        &d.send(&["--progress", "none"], &[&top, "127.0.0.1:b"]),
        &[],
    );
    assert!(out.starts_with(summary), "{out}");
    assert!(
        out.lines().skip(1).all(|l| l.starts_with("time: ")),
        "{out}"
    );

    // Quiet: only the summary, not even the note a resume prints; nothing
    // was to be sent, and it says so.
    let extra = ["--quiet", "--resume"];
    let o = d.send(&extra, &[&top, "127.0.0.1:b"]);
    let out = sent(&o, &extra);
    assert!(out.starts_with("nothing to send: 3 files"), "{out}");
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(!stderr(&o).contains("the receiver holds"), "{}", stderr(&o));
    let o = d.send(&["--resume"], &[&top, "127.0.0.1:b"]);
    assert!(
        stderr(&o).contains("the receiver holds 3 files unchanged since an earlier run"),
        "{}",
        stderr(&o)
    );

    // Forced bar: frames on stderr with the files acknowledged of all.
    let o = d.send(&["--progress", "bar"], &[&top, "127.0.0.1:c"]);
    let (out, err) = (sent(&o, &[]), stderr(&o));
    assert!(has_frames(&err), "{err:?}");
    assert!(
        err.contains("Net Out [") && err.contains("3/3 files"),
        "{err:?}"
    );
    assert!(
        interval_lines(&out).is_empty() && !has_frames(&out),
        "{out:?}"
    );
    assert!(out.starts_with(summary), "{out}");
    for dest in ["a", "b", "c"] {
        let got = d.root.path().join(dest).join("run7/f0");
        assert_eq!(std::fs::read(got).unwrap(), crate::util::noise(5 << 20, 0));
    }

    // pull counts the files it received and verified.
    let local = tmp();
    let o = urmove()
        .args(["pull", "-p", &d.port.to_string(), "--key-file"])
        .arg(&d.key)
        .args(["--progress", "bar", "127.0.0.1:a/run7", p(local.path())])
        .output()
        .unwrap();
    let (out, err) = (sent(&o, &[]), stderr(&o));
    assert!(
        err.contains("Net In [") && err.contains("3/3 files"),
        "{err:?}"
    );
    assert!(out.starts_with("pulled 3 files, "), "{out}");

    // Its interval lines say what the bar says: the data comes in.
    let again = tmp();
    let o = urmove()
        .args(["pull", "-p", &d.port.to_string(), "--key-file"])
        .arg(&d.key)
        .args(["--progress", "lines", "127.0.0.1:a/run7", p(again.path())])
        .output()
        .unwrap();
    let out = sent(&o, &[]);
    let lines = interval_lines(&out);
    assert!(
        !lines.is_empty() && lines.iter().all(|l| l.contains("  Net In: ")),
        "{out}"
    );
}

#[test]
fn bench_net_forced_bar_counts_time() {
    let d = Daemon::start();
    let o = urmove()
        .args(d.bench_net_args("127.0.0.1"))
        .args(["--time", "1s", "--bs", "1M", "--progress", "bar"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        has_frames(&err) && err.contains("Net Out [") && err.contains("100.0%"),
        "{err:?}"
    );
    assert!(stdout(&o).starts_with("bench --net: "), "{}", stdout(&o));
}

fn subcommands() -> Vec<String> {
    // `serve` is hidden: started through ssh by urmove itself, never typed.
    urmove::cli::args::Cli::command()
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .map(|c| c.get_name().to_string())
        .collect()
}

/// What bash offers after `words` (the last one being completed), with the
/// script loaded as a user's shell would load it.
fn complete(script: &Path, words: &[&str]) -> Vec<String> {
    let line = words.join(" ");
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let prog = format!(
        "source '{}'; COMP_WORDS=({}); COMP_CWORD={}; COMP_LINE='{line}'; COMP_POINT={}; \
         _urmove urmove '{}' '{}'; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        p(script),
        quoted.join(" "),
        words.len() - 1,
        line.len(),
        words[words.len() - 1],
        words[words.len() - 2],
    );
    let o = std::process::Command::new("bash")
        .args(["-c", &prog])
        .output()
        .unwrap();
    assert!(o.status.success(), "{prog}: {}", stderr(&o));
    stdout(&o).lines().map(String::from).collect()
}

#[test]
fn bash_completions_parse_and_know_every_subcommand() {
    let o = run(&["completions", "bash"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let dir = tmp();
    let file = dir.path().join("urmove.bash");
    std::fs::write(&file, stdout(&o)).unwrap();
    let check = std::process::Command::new("bash")
        .arg("-n")
        .arg(&file)
        .output()
        .unwrap();
    assert!(check.status.success(), "bash -n: {}", stderr(&check));
    let names = subcommands();
    assert!(names.len() >= 8, "{names:?}");
    let offered = complete(&file, &["urmove", ""]);
    for name in &names {
        assert!(offered.contains(name), "{name} not offered: {offered:?}");
    }
    assert_eq!(
        complete(&file, &["urmove", "send", "--pro"]),
        ["--progress"]
    );
    assert_eq!(
        complete(&file, &["urmove", "bench", "--progress", ""]),
        ["auto", "bar", "lines", "none"]
    );
    assert_eq!(complete(&file, &["urmove", "completions", "fi"]), ["fish"]);
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let o = run(&["completions", shell]);
        assert!(o.status.success() && stdout(&o).contains("send"), "{shell}");
    }
    let o = run(&["completions", "tcsh"]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
}

#[test]
fn man_pages_for_urmove_and_every_subcommand_render() {
    let o = run(&["man"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let page = stdout(&o);
    assert!(
        page.lines().any(|l| l.starts_with(".TH urmove 1")),
        "{page}"
    );

    let dir = tmp();
    let out = dir.path().join("man1");
    let o = run(&["man", "--dir", p(&out)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut pages = vec!["urmove.1".to_string()];
    pages.extend(
        subcommands()
            .iter()
            .filter(|n| *n != "help")
            .map(|n| format!("urmove-{n}.1")),
    );
    let listing = stdout(&o);
    let listed: Vec<&str> = listing.lines().collect();
    assert_eq!(listed.len(), pages.len(), "{listed:?}");
    for name in &pages {
        let file = out.join(name);
        let roff = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(listed.contains(&p(&file)), "{name} not listed");
        let title = name.trim_end_matches(".1");
        assert!(
            roff.lines()
                .any(|l| l.starts_with(&format!(".TH {title} 1"))),
            "{name}"
        );
        if have("groff") {
            let r = std::process::Command::new("groff")
                .args(["-man", "-Tutf8", "-ww", "-z"])
                .arg(&file)
                .output()
                .unwrap();
            assert!(
                r.status.success() && r.stderr.is_empty(),
                "{name}: {}",
                stderr(&r)
            );
        }
    }
    if have("man") {
        let r = std::process::Command::new("man")
            .arg("-l")
            .arg(out.join("urmove-send.1"))
            .env("MANWIDTH", "100")
            .env("MANPAGER", "cat")
            .output()
            .unwrap();
        let text = stdout(&r);
        assert!(r.status.success(), "man -l: {}", stderr(&r));
        assert!(
            text.contains("--progress") && text.contains("--key-file"),
            "{text}"
        );
    } else {
        eprintln!("skipped: man -l (no man); the pages were checked for .TH");
    }
}
