//! Every command line the README and every page under docs/ show (in their
//! code blocks, and inline where a span is a whole command) and every
//! example in `--help` is run, and must exit as documented: the README's
//! examples are the first thing a newcomer types. Lines that run other
//! programs (`scripts/bench-all.sh`, `../shared/peers/setup.sh`) are not
//! urmove's and are left alone. The README's comparison table is the one
//! docs/benchmarks.md's run printed (or, while that copy is a smoke run,
//! pending).
//!
//! What is mapped, and only that: hosts (`dtn2`, `HOST`, `10.77.0.2`) to a
//! daemon on loopback (`-p PORT` added); absolute paths to a sandbox
//! (`/data/run42` is a tree there, `/raid` a directory, `/dev/sdc` a loop
//! device, `/etc/urmove/key` the daemon's key, `~/.urmove.key` and `k`
//! too); `keygen` to a fresh path each time; `recv` to a daemon on port 0
//! stopped with SIGTERM; `--time` above 5 s to 2 s, `--follow-until` to 2 s
//! and `--follow-idle` above 5 s to 1 s, `--sweep` to files of
//! 16 MiB at most and other disk runs without `--time` to 256 MiB (the
//! run's shape stays, its length does not); `tune
//! --apply` to a profile file of its own, not loaded (`--no-load`), its
//! `--target` on a loop device. `a|b|c` runs each alternative.

use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use crate::util::{stderr, stdout, urmove};

/// The commands of the README, then of every page under docs/ (its
/// folders too), in name order.
fn readme_commands() -> Vec<String> {
    let mut out = doc_commands(&doc("README.md"));
    for page in doc_pages() {
        out.extend(doc_commands(&doc(&page)));
    }
    out
}

/// Every Markdown page under docs/, by its path from the repository, in
/// name order.
fn doc_pages() -> Vec<String> {
    fn walk(dir: &Path, rel: &str, out: &mut Vec<String>) {
        let mut names: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        for n in names {
            let (path, rel) = (dir.join(&n), format!("{rel}/{n}"));
            if path.is_dir() {
                walk(&path, &rel, out);
            } else if n.ends_with(".md") {
                out.push(rel);
            }
        }
    }
    let mut out = Vec::new();
    walk(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("docs"),
        "docs",
        &mut out,
    );
    out
}

/// Every page under docs/ is reachable from the README (linked from it,
/// or from a page it links), and every relative link of the README and
/// the pages names a file that exists.
#[test]
fn every_page_is_linked_and_every_link_leads_somewhere() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut reached = std::collections::BTreeSet::new();
    let mut todo = vec!["README.md".to_string()];
    while let Some(page) = todo.pop() {
        let text = doc(&page);
        let dir = Path::new(&page).parent().unwrap().to_path_buf();
        for target in links(&text) {
            let path = normalize(&dir.join(&target));
            assert!(
                root.join(&path).exists(),
                "{page}: a link to {target}, which is not there"
            );
            if path.ends_with(".md") && reached.insert(path.clone()) {
                todo.push(path);
            }
        }
    }
    for page in doc_pages() {
        assert!(
            reached.contains(&page),
            "{page} is linked from nowhere the README leads"
        );
    }
}

/// The relative targets of Markdown links `](target)` in `text` (no
/// scheme, no anchor-only), without their `#anchor`.
fn links(text: &str) -> Vec<String> {
    text.split("](")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .map(|t| t.split('#').next().unwrap_or_default().to_string())
        .filter(|t| !t.is_empty() && !t.contains("://") && !t.starts_with("mailto:"))
        .collect()
}

/// `p` with its `.` and `..` components worked out, as a `/` path.
fn normalize(p: &Path) -> String {
    let mut out: Vec<String> = Vec::new();
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::Normal(s) => out.push(s.to_string_lossy().into_owned()),
            _ => {}
        }
    }
    out.join("/")
}

/// A file of the repository, as text.
fn doc(rel: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel))
        .unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The commands of a Markdown text: lines of its code blocks that run
/// urmove (`$ ` and `sudo ` stripped, `\` continuations joined, `#
/// comments` and `&& other commands` cut), and inline spans that are whole
/// commands.
fn doc_commands(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_block = false;
    let mut pending = String::new();
    // Text outside code blocks, lines joined: a span may wrap.
    let mut prose = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if !in_block {
            prose += line.trim();
            prose.push(' ');
            continue;
        }
        pending += line.trim();
        if let Some(p) = pending.strip_suffix('\\') {
            pending = format!("{} ", p.trim_end());
            continue;
        }
        out.extend(command_in(&std::mem::take(&mut pending)));
    }
    out.extend(inline_spans(&prose).iter().filter_map(|s| whole_command(s)));
    out
}

/// The urmove command a code line runs, if it runs one (output lines such
/// as `urmove demo: generating ...` do not).
fn command_in(line: &str) -> Option<String> {
    let line = line.strip_prefix("$ ").unwrap_or(line);
    // A comment, a second command, a redirection: the urmove part runs.
    let line = [" #", " && ", " > ", " | "]
        .iter()
        .fold(line, |l, cut| l.split(cut).next().unwrap())
        .trim();
    let line = line.strip_prefix("sudo ").unwrap_or(line);
    let words: Vec<&str> = line.split_whitespace().collect();
    if words.first() != Some(&"urmove") || words.len() < 2 {
        return None;
    }
    // Output (`urmove demo: ...`, `urmove bench --disk: ...`) is no command.
    let output = words
        .iter()
        .take(3)
        .any(|w| w.ends_with(':') && !w.contains("::"));
    (!output).then(|| line.to_string())
}

fn inline_spans(line: &str) -> Vec<&str> {
    line.split('`').skip(1).step_by(2).collect()
}

/// An inline span that is a whole command: urmove with arguments beyond
/// its subcommand (`urmove recv`, `urmove bench --disk` name commands), no
/// elision.
fn whole_command(span: &str) -> Option<String> {
    let cmd = command_in(span)?;
    let words: Vec<&str> = cmd.split_whitespace().collect();
    let name_len = if words[1] == "bench" { 3 } else { 2 };
    // `urmove tune --rtt`, `urmove recv --config`: an option named.
    let names_an_option = words.len() == name_len + 1 && words[name_len].starts_with("--");
    (words.len() > name_len && !cmd.contains("...") && !names_an_option).then_some(cmd)
}

/// The examples of every subcommand's `--help`.
fn help_examples() -> Vec<String> {
    let mut out = Vec::new();
    for sub in [
        "bench",
        "send",
        "pull",
        "recv",
        "tune",
        "keygen",
        "demo",
        "completions",
        "man",
        "report",
    ] {
        let o = urmove().args([sub, "--help"]).output().unwrap();
        assert!(o.status.success(), "{sub} --help: {}", stderr(&o));
        let text = stdout(&o);
        let Some((_, examples)) = text.split_once("Example") else {
            continue;
        };
        for line in examples.lines().skip(1) {
            // `  urmove ...  what it does`: the command ends at the gap
            // (no command holds two spaces in a row).
            let cmd = line.trim().split("  ").next().unwrap_or("");
            out.extend(command_in(cmd));
        }
    }
    out
}

/// Split a command line into words as a shell would (single and double
/// quotes), and `a|b|c` words into one line per alternative.
fn words_of(cmd: &str) -> Vec<Vec<String>> {
    let mut words = Vec::new();
    let (mut cur, mut quote) = (String::new(), None);
    for c in cmd.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => quote = Some(c),
            (None, ' ') => words.extend((!cur.is_empty()).then(|| std::mem::take(&mut cur))),
            (None, c) => cur.push(c),
        }
    }
    words.extend((!cur.is_empty()).then_some(cur));
    let Some(alt) = words
        .iter()
        .position(|w| w.contains('|') && !w.contains('/'))
    else {
        return vec![words];
    };
    words[alt]
        .split('|')
        .map(|a| {
            let mut w = words.clone();
            w[alt] = a.to_string();
            w
        })
        .collect()
}

/// Where the documented commands run: a tree of the paths they name, a
/// key, and a daemon whose root is `/data/ingest`.
struct Sandbox {
    dir: tempfile::TempDir,
    port: u16,
    daemon: Child,
    keygens: usize,
    /// `/dev/sdc` and the `tune --apply` target, where the machine can.
    loop_dev: Option<crate::util::LoopDev>,
    loop_fs: Option<crate::util::LoopFs>,
    /// An sshd in a namespace for the commands that go through ssh,
    /// started at the first.
    sshd: Option<crate::sshd::Sshd>,
    /// The PKI of `recv --http`'s commands, made at the first.
    pki: Option<crate::pki::Pki>,
}

impl Sandbox {
    fn new() -> Sandbox {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let fs = dir.path().join("fs");
        for d in [
            "data/ingest",
            "raid/dir",
            "raid/scratch",
            "mnt/d1",
            "mnt/d2",
            "etc/urmove",
            "cwd",
        ] {
            std::fs::create_dir_all(fs.join(d)).unwrap();
        }
        let key = fs.join("etc/urmove/key");
        crate::util::keygen(&key);
        make_run(&fs.join("data/run42"));
        make_run(&fs.join("data/run"));
        make_run(&fs.join("data/ingest/ingest/run42"));
        std::fs::write(dir.path().join("big.dat"), crate::util::noise(3 << 20, 5)).unwrap();
        let (daemon, port) = start_recv(&[
            "--root",
            fs.join("data/ingest").to_str().unwrap(),
            "--key-file",
            key.to_str().unwrap(),
            "--state-dir",
            dir.path().join("state").to_str().unwrap(),
            // The README's and --help's UDP tests.
            "--udp",
        ]);
        let root = crate::util::is_root();
        Sandbox {
            loop_dev: root
                .then(|| crate::util::LoopDev::new(64, 512).ok())
                .flatten(),
            loop_fs: (root && crate::util::can_loop("ext4"))
                .then(|| crate::util::LoopFs::new("ext4", 64, 512, false).ok())
                .flatten(),
            dir,
            port,
            daemon,
            keygens: 0,
            sshd: None,
            pki: None,
        }
    }

    fn key(&self) -> String {
        self.fs("/etc/urmove/key")
    }

    /// The test PKI of the HTTPS front's commands.
    fn https(&mut self) -> &crate::pki::Pki {
        self.pki.get_or_insert_with(crate::pki::Pki::new)
    }

    /// A token issuers file for the HTTPS front's commands.
    fn issuers(&mut self) -> String {
        let dir = self.dir.path().join("issuers");
        std::fs::create_dir_all(&dir).unwrap();
        let issuer = crate::tokens::TestIssuer::new(&dir, "docs", false).expect("an issuer");
        issuer
            .write_issuers(&dir, "/")
            .to_string_lossy()
            .into_owned()
    }

    /// An absolute path of the docs, in the sandbox.
    fn fs(&self, p: &str) -> String {
        let to = self.dir.path().join("fs").join(p.trim_start_matches('/'));
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        to.to_string_lossy().into_owned()
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

/// A small tree: files, a subdirectory, a temporary to exclude.
fn make_run(top: &Path) {
    std::fs::create_dir_all(top.join("raw")).unwrap();
    std::fs::write(top.join("a.dat"), crate::util::noise(100_000, 1)).unwrap();
    std::fs::write(top.join("raw/big.dat"), crate::util::noise(2 << 20, 2)).unwrap();
    std::fs::write(top.join("x.tmp"), b"scratch").unwrap();
}

/// Start `urmove recv ARGS --listen 127.0.0.1:0` and learn its port.
fn start_recv(args: &[&str]) -> (Child, u16) {
    let mut child = urmove()
        .arg("recv")
        .args(args)
        .args(["--listen", "127.0.0.1:0"])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        let Ok(line) = lines.recv_timeout(Duration::from_secs(1)) else {
            continue;
        };
        let port = line
            .split("listening on 127.0.0.1:")
            .nth(1)
            .and_then(|r| r.split(',').next())
            .and_then(|p| p.parse().ok());
        if let Some(port) = port {
            return (child, port);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("urmove recv {args:?} never said where it listens");
}

/// Whether a documented command goes through ssh: a transfer or a
/// network test with no key file.
fn over_ssh(words: &[String]) -> bool {
    let sub = words[1].as_str();
    let net = sub == "send" || sub == "pull" || words.iter().any(|w| w == "--net");
    net && !words.iter().any(|w| w == "--key-file")
}

/// A documented command through ssh, mapped onto the sandbox's sshd in a
/// namespace: the host (`dtn2`, `user@dtn2`) is its alias, a remote path
/// lies in its instance directory (relative ones under the home, as
/// there), `-e` and `--remote-path` added; a pull's remote source is made
/// there first. None where this machine has no sshd to run it on.
fn ssh_mapped(sb: &mut Sandbox, words: &[String]) -> Option<Vec<String>> {
    if sb.sshd.is_none() {
        sb.sshd = Some(crate::sshd::Sshd::start_alone()?);
    }
    let (rsh, bin) = {
        let s = sb.sshd.as_ref().expect("started");
        (s.rsh(), s.remote_urmove())
    };
    let (host, home_dir, home_rel) = {
        let s = sb.sshd.as_ref().expect("started");
        (s.host().to_string(), s.home_dir(), s.home_rel())
    };
    let sub = words[1].clone();
    let mut out = vec![sub.clone(), "-e".into(), rsh, "--remote-path".into(), bin];
    if sub == "send" || sub == "pull" {
        let state = sb.dir.path().join("client-state");
        out.extend(["--state-dir".into(), state.to_string_lossy().into_owned()]);
    }
    let mut remote_sources = Vec::new();
    let mut prev = String::new();
    for w in &words[2..] {
        let named = w.split(':').next().unwrap_or("");
        let named = named.rsplit('@').next().unwrap_or("");
        let word = match (["dtn2", "HOST"].contains(&named), w.split_once(':')) {
            (true, Some((_, path))) => {
                let there = match path.strip_prefix('/') {
                    Some(abs) => home_dir.join(abs).to_string_lossy().into_owned(),
                    None => format!("{home_rel}/{path}"),
                };
                remote_sources.push(there.clone());
                format!("{host}:{there}")
            }
            (true, None) if prev == "--net" => host.clone(),
            _ => map_word(sb, &sub, &prev, w),
        };
        out.push(word);
        prev = w.clone();
    }
    let s = sb.sshd.as_ref().expect("started");
    if sub == "pull" {
        for src in remote_sources {
            let at = match src.starts_with('/') {
                true => PathBuf::from(src.trim_end_matches('/')),
                false => Path::new("/home")
                    .join(s.user())
                    .join(src.trim_end_matches('/')),
            };
            if !at.exists() {
                make_run(&at);
                s.chown_to_user(&s.home_dir());
            }
        }
    }
    Some(out)
}

/// The words of a documented command, mapped onto `sb`.
fn mapped(sb: &mut Sandbox, words: &[String]) -> Vec<String> {
    let sub = words[1].as_str();
    let mut out: Vec<String> = vec![sub.to_string()];
    let mut prev = "";
    for w in &words[2..] {
        out.push(map_word(sb, sub, prev, w));
        prev = w;
    }
    let net = sub == "send" || sub == "pull" || sub == "info" || out.iter().any(|w| w == "--net");
    if net {
        out.splice(1..1, ["-p".to_string(), sb.port.to_string()]);
    }
    if sub == "send" || sub == "pull" {
        let state = sb.dir.path().join("client-state");
        out.splice(
            1..1,
            [
                "--state-dir".to_string(),
                state.to_string_lossy().into_owned(),
            ],
        );
    }
    let has = |o: &[String], w: &str| o.iter().any(|x| x == w);
    if has(&out, "--sweep") && !has(&out, "--size") {
        out.extend(["--size".to_string(), "16M".to_string()]);
    } else if has(&out, "--disk") && !has(&out, "--size") && !has(&out, "--time") {
        out.extend(["--size".to_string(), "256M".to_string()]);
    }
    if sub == "tune" && has(&out, "--apply") && !has(&out, "--sysctl-file") {
        let conf = sb.dir.path().join("90-urmove.conf");
        out.extend([
            "--sysctl-file".into(),
            conf.to_string_lossy().into_owned(),
            "--no-load".into(),
        ]);
    }
    out
}

fn map_word(sb: &mut Sandbox, sub: &str, prev: &str, w: &str) -> String {
    match (prev, w) {
        ("--time", t) if long_time(t) => return "2s".into(),
        // A follow ends 2 s in, its files once idle for a second.
        ("--follow-until", _) => return "2s".into(),
        ("--follow-idle", t) if long_time(t) => return "1s".into(),
        (_, "RTT") => return "100ms".into(),
        ("--plot" | "--csv", f) if f.contains('/') => {
            let at = sb.dir.path().join("fs/cwd").join(f);
            std::fs::create_dir_all(at.parent().unwrap()).unwrap();
            return f.to_string();
        }
        ("--key-file", _) => return sb.key(),
        // The HTTPS front: on loopback, with the test PKI and a test issuer.
        ("--http", _) => return "127.0.0.1:0".into(),
        ("--http-cert", _) => return sb.https().cert.to_string_lossy().into_owned(),
        ("--http-key", _) => return sb.https().key.to_string_lossy().into_owned(),
        ("--http-ca", _) => return sb.https().ca_file.to_string_lossy().into_owned(),
        ("--token-issuers", _) => return sb.issuers(),
        ("--target", "/data") if sub == "tune" => return tune_target(sb),
        _ => {}
    }
    if sub == "keygen" {
        sb.keygens += 1;
        let k = sb.dir.path().join(format!("keygen-{}", sb.keygens));
        std::fs::create_dir_all(&k).unwrap();
        return k.join("key").to_string_lossy().into_owned();
    }
    for host in ["dtn2", "HOST", "10.77.0.2"] {
        if w == host {
            return "127.0.0.1".into();
        }
        if let Some(rest) = w.strip_prefix(&format!("{host}:")) {
            return format!("127.0.0.1:{rest}");
        }
    }
    match w {
        d if d == "/dev/sdc" || d.starts_with("/dev/loop") => sb
            .loop_dev
            .as_ref()
            .map_or_else(|| sb.fs(d), |l| l.dev.to_string_lossy().into_owned()),
        "big.dat" => sb.dir.path().join("big.dat").to_string_lossy().into_owned(),
        "/" => "/".into(),
        p if p.starts_with('/') => sb.fs(p),
        _ => w.to_string(),
    }
}

fn long_time(t: &str) -> bool {
    let secs = t
        .strip_suffix('m')
        .map(|m| m.parse::<u64>().unwrap_or(0) * 60)
        .or_else(|| t.strip_suffix('s').and_then(|s| s.parse().ok()));
    secs.is_some_and(|s| s > 5)
}

/// `tune --target /data`: a directory on a loop device where there is one
/// (setting its scheduler and read-ahead harms nothing), else the sandbox.
fn tune_target(sb: &Sandbox) -> String {
    sb.loop_fs.as_ref().map_or_else(
        || sb.fs("/data"),
        |f| f.path().to_string_lossy().into_owned(),
    )
}

/// Run one mapped command (a daemon for `recv`) and check how it ended.
fn run_documented(sb: &mut Sandbox, doc: &str, words: &[String]) -> Result<(), String> {
    let args = match over_ssh(words) {
        true => match ssh_mapped(sb, words) {
            Some(args) => args,
            None => return Ok(()),
        },
        false => mapped(sb, words),
    };
    if args[0] == "recv" {
        return run_daemon(sb, &args);
    }
    let cwd = sb.dir.path().join("fs/cwd");
    let args = match args[0] == "report" {
        true => with_reports(sb, &args)?,
        false => args,
    };
    let o = crate::util::output_within(
        {
            let mut c = urmove();
            c.args(&args).current_dir(&cwd);
            c
        },
        Duration::from_secs(600),
    );
    check_exit(doc, &args, &o)
}

/// A documented `report`'s files, made: `shard-K.json` (K of 0 and 1) is
/// the `--json` report of `send --shard K/2` of the sandbox's tree (its
/// 2 MiB file split), written where the command names it under the
/// working directory; a glob (`DIR/shard-*.json`) is both, as the shell
/// expands it.
fn with_reports(sb: &Sandbox, args: &[String]) -> Result<Vec<String>, String> {
    let cwd = sb.dir.path().join("fs/cwd");
    let mut out = Vec::new();
    for a in args {
        let files = match a.strip_suffix("shard-*.json") {
            Some(dir) => (0..2).map(|k| format!("{dir}shard-{k}.json")).collect(),
            None => vec![a.clone()],
        };
        for f in files {
            let shard = f
                .rsplit_once("shard-")
                .and_then(|(_, k)| k.strip_suffix(".json"))
                .and_then(|k| k.parse::<u32>().ok());
            if let Some(k) = shard {
                let o = urmove()
                    .args(["send", "--shard", &format!("{k}/2"), "--json"])
                    .args(["--block", "1M", "--split-over", "1M", "--key-file"])
                    .args([&sb.key(), "-p", &sb.port.to_string()])
                    .arg(sb.fs("/data/run42"))
                    .arg("127.0.0.1:docs-shards")
                    .output()
                    .unwrap();
                if !o.status.success() {
                    return Err(format!("shard {k} for `report`: {}", stderr(&o)));
                }
                let at = cwd.join(&f);
                std::fs::create_dir_all(at.parent().unwrap()).unwrap();
                std::fs::write(at, &o.stdout).unwrap();
            }
            out.push(f);
        }
    }
    Ok(out)
}

/// Exit 0, or for a `--min-rate` gate that this machine's disk did not
/// meet, its documented failure naming the gate.
fn check_exit(doc: &str, args: &[String], o: &Output) -> Result<(), String> {
    let gate = args.iter().any(|a| a == "--min-rate");
    match o.status.code() {
        Some(0) => Ok(()),
        Some(1) if gate && stderr(o).contains("min-rate") => Ok(()),
        code => Err(format!(
            "{doc}\n  ran as: urmove {}\n  exit {code:?}\n  stderr: {}",
            args.join(" "),
            stderr(o).trim()
        )),
    }
}

/// A documented `recv`: it starts, serves (a documented `send` of the
/// sandbox's tree into it arrives), and stops on SIGTERM with exit 0.
fn run_daemon(sb: &Sandbox, args: &[String]) -> Result<(), String> {
    let state = sb.dir.path().join("recv-state");
    let mut with: Vec<&str> = args[1..].iter().map(String::as_str).collect();
    with.extend(["--state-dir", state.to_str().unwrap()]);
    let (mut child, port) = start_recv(&with);
    let o = urmove()
        .args(["send", "-p", &port.to_string(), "--key-file", &sb.key()])
        .arg(sb.fs("/data/run42"))
        .arg("127.0.0.1:from-docs")
        .output()
        .unwrap();
    // SAFETY: kill takes no memory; the pid is our own child's.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let until = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > until {
            let _ = child.kill();
            return Err(format!("urmove {} did not stop on SIGTERM", args.join(" ")));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    match (o.status.success(), status.code()) {
        (true, Some(0)) => Ok(()),
        _ => Err(format!(
            "urmove {}: a send into it exited {:?} ({}), the daemon {:?}",
            args.join(" "),
            o.status.code(),
            stderr(&o).trim(),
            status.code()
        )),
    }
}

fn run_all(docs: Vec<String>) {
    let mut sb = Sandbox::new();
    let mut failed = Vec::new();
    let mut ran = 0;
    for doc in &docs {
        for words in words_of(doc) {
            ran += 1;
            if let Err(e) = run_documented(&mut sb, doc, &words) {
                failed.push(e);
            }
        }
    }
    assert!(ran >= docs.len(), "ran {ran} of {}", docs.len());
    assert!(
        failed.is_empty(),
        "{} of {ran} documented commands failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

/// The README's commands, in the order it shows them.
#[test]
#[ignore = "runs every README command (demos, disk runs, sweeps): minutes; CI runs it with the heavy tests"]
fn every_command_the_readme_shows_runs_as_documented() {
    let docs = readme_commands();
    assert!(
        docs.len() >= 30,
        "found only {} commands: {docs:#?}",
        docs.len()
    );
    assert!(
        docs.iter()
            .any(|d| d.contains("send --key-file /etc/urmove/key -P 8")),
        "{docs:#?}"
    );
    run_all(docs);
}

/// The rows of the comparison table (`| job | urmove | ...`) in `text`.
fn comparison_rows(text: &str) -> Vec<&str> {
    text.lines()
        .skip_while(|l| !l.starts_with("| job | urmove |"))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .collect()
}

/// docs/benchmarks.md is written by scripts/bench-all.sh, and the README's
/// comparison table is the one that run printed: equal row for row, or,
/// while the copy in the repository is from a smoke run, every row still
/// pending (a smoke run's numbers are no results).
#[test]
fn the_readme_comparison_is_the_run_docs_benchmarks_holds() {
    let readme = doc("README.md");
    let bench = doc("docs/benchmarks.md");
    assert!(
        bench.starts_with("# Benchmarks\n")
            && bench.contains("Generated by `scripts/bench-all.sh`"),
        "docs/benchmarks.md is not bench-all.sh's"
    );
    let ours = comparison_rows(&readme);
    let theirs = comparison_rows(&bench);
    assert!(ours.len() >= 10, "the README's comparison table: {ours:#?}");
    assert!(
        !theirs.is_empty(),
        "docs/benchmarks.md has no comparison table"
    );
    if bench.contains("This copy is from a short smoke run") {
        for row in &ours {
            assert!(
                row.contains("pending"),
                "docs/benchmarks.md is a smoke run, but the README quotes a number: {row}"
            );
        }
    } else {
        assert_eq!(
            ours, theirs,
            "paste the table scripts/bench-all.sh printed into the README"
        );
    }
}

#[test]
fn every_help_example_runs_as_documented() {
    let docs = help_examples();
    assert!(docs.len() >= 12, "found only {}: {docs:#?}", docs.len());
    // The heavy ones (sweeps, minute-long runs) are mapped short.
    run_all(docs);
}

#[test]
fn the_extraction_finds_commands_and_leaves_output_and_names() {
    assert_eq!(
        command_in("$ urmove demo --size 1G").as_deref(),
        Some("urmove demo --size 1G")
    );
    assert_eq!(command_in("urmove demo: generating 1 GB"), None);
    assert_eq!(
        command_in("sudo urmove keygen /k && sudo chown u /k").as_deref(),
        Some("urmove keygen /k")
    );
    assert_eq!(
        command_in("urmove tune   # 10G").as_deref(),
        Some("urmove tune")
    );
    assert_eq!(
        command_in("urmove send k a dtn2:in # creates").as_deref(),
        Some("urmove send k a dtn2:in")
    );
    assert_eq!(command_in("urmove bench --disk: 1 target(s)"), None);
    assert_eq!(
        command_in("urmove completions bash > /etc/x").as_deref(),
        Some("urmove completions bash")
    );
    assert_eq!(whole_command("urmove tune --rtt"), None);
    assert_eq!(whole_command("urmove recv"), None);
    assert_eq!(whole_command("urmove bench --disk"), None);
    assert_eq!(whole_command("urmove send ... 10.77.0.2:"), None);
    assert!(whole_command("urmove bench --disk /raid --verify").is_some());
    assert_eq!(words_of("urmove completions bash|zsh").len(), 2);
    // Other programs' lines (the benchmark scripts) are not urmove's.
    assert_eq!(command_in("sudo scripts/bench-all.sh no-wan   # x"), None);
    assert_eq!(
        doc_commands(
            "```sh\nsudo scripts/bench-all.sh\nurmove tune\n```\n`urmove tune --link 100G` runs"
        ),
        ["urmove tune", "urmove tune --link 100G"]
    );
    assert_eq!(words_of("a '*.tmp' b")[0], ["a", "*.tmp", "b"]);
}
