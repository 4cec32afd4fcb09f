//! rsync's and scp's path habits, held to what rsync does with the same
//! tree: `DIR/` copies the contents (without the slash, the directory
//! itself), one file given a name that is no directory takes it, two
//! sources landing on one path are refused; and where urmove differs (an
//! absolute DEST, `send HOST:path local`, `pull local HOST:path`) it says
//! what to type instead, exit 2.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Output;

use crate::transfer::Daemon;
use crate::util::{have, json, stderr, urmove};

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir_in("/var/tmp").unwrap()
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// What a tree holds beneath its top, by path: kind, mode, and the bytes
/// of a file (its mtime too) or a link's target. The top itself is left
/// out: its own mode and mtime are the destination's.
fn beneath(top: &Path) -> BTreeMap<String, (char, u32, Vec<u8>, i64)> {
    let mut found = BTreeMap::new();
    let mut stack = vec![top.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = e.path();
            let m = std::fs::symlink_metadata(&path).unwrap();
            let rel = path.strip_prefix(top).unwrap().display().to_string();
            let (kind, data, mtime) = if m.is_dir() {
                stack.push(path.clone());
                ('d', Vec::new(), 0)
            } else if m.file_type().is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                ('l', target.into_os_string().into_encoded_bytes(), 0)
            } else {
                ('f', std::fs::read(&path).unwrap(), m.mtime())
            };
            found.insert(rel, (kind, m.mode() & 0o7777, data, mtime));
        }
    }
    found
}

/// `beneath` both, equal, and not empty (a comparison of nothing with
/// nothing proves nothing).
fn assert_as_rsync(urmove_dest: &Path, rsync_dest: &Path) {
    let (ours, theirs) = (beneath(urmove_dest), beneath(rsync_dest));
    assert!(!theirs.is_empty(), "rsync left nothing in {rsync_dest:?}");
    assert_eq!(
        ours.keys().collect::<Vec<_>>(),
        theirs.keys().collect::<Vec<_>>(),
        "names beneath {urmove_dest:?} and {rsync_dest:?}"
    );
    assert_eq!(ours, theirs, "{urmove_dest:?} against {rsync_dest:?}");
}

/// `rsync -a ARGS...`, which must succeed.
fn rsync(args: &[&str]) {
    let o = std::process::Command::new("rsync")
        .arg("-a")
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "rsync {args:?}: {}", stderr(&o));
}

/// A source tree: files of several modes and times, a subdirectory, an
/// empty one and a symlink, in `parent/run`.
fn make_run(parent: &Path) -> PathBuf {
    let run = parent.join("run");
    std::fs::create_dir_all(run.join("sub/deeper")).unwrap();
    std::fs::create_dir_all(run.join("empty")).unwrap();
    for (i, (name, mode)) in [
        ("a.dat", 0o644),
        ("b.dat", 0o600),
        ("sub/c.dat", 0o640),
        ("sub/deeper/d.sh", 0o755),
    ]
    .into_iter()
    .enumerate()
    {
        let f = run.join(name);
        std::fs::write(&f, crate::util::noise(1000 * (i + 1), i as u64)).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_600_000_000 + i as u64);
        std::fs::File::options()
            .write(true)
            .open(&f)
            .unwrap()
            .set_modified(t)
            .unwrap();
    }
    std::fs::set_permissions(run.join("sub"), std::fs::Permissions::from_mode(0o750)).unwrap();
    std::os::unix::fs::symlink("sub/c.dat", run.join("link")).unwrap();
    run
}

fn pull(d: &Daemon, extra: &[&str], args: &[&str]) -> Output {
    urmove()
        .args(["pull", "-p", &d.port.to_string(), "--key-file"])
        .arg(&d.key)
        .args(extra)
        .args(args)
        .output()
        .unwrap()
}

fn ok(o: Output) -> Output {
    assert!(o.status.success(), "{}", stderr(&o));
    o
}

/// `send DIR/ HOST:x` copies DIR's contents into x, `send DIR HOST:y`
/// DIR itself into y/DIR, and `pull HOST:x/ L` and `pull HOST:x L` the
/// same way back: beneath each destination, the names, bytes, modes and
/// times rsync -a gives the same tree.
#[test]
fn a_trailing_slash_copies_the_contents_as_rsync_does() {
    crate::require!(have("rsync"), "rsync is not installed");
    let d = Daemon::start();
    let src = tmp();
    let run = make_run(src.path());
    let theirs = tmp();
    let root = d.root.path();
    let slash = format!("{}/", p(&run));
    ok(d.send(&["-q"], &[&slash, "127.0.0.1:x"]));
    rsync(&[&slash, p(&theirs.path().join("x"))]);
    assert_as_rsync(&root.join("x"), &theirs.path().join("x"));
    assert!(!root.join("x/run").exists());
    ok(d.send(&["-q"], &[p(&run), "127.0.0.1:y"]));
    rsync(&[p(&run), p(&theirs.path().join("y"))]);
    assert_as_rsync(&root.join("y"), &theirs.path().join("y"));
    assert!(root.join("y/run/sub/deeper/d.sh").is_file());
    // `DIR/.` and a second run into the same x (all of it unchanged).
    let o = ok(d.send(&["--json"], &[&format!("{}/.", p(&run)), "127.0.0.1:x"]));
    assert_eq!(json(&o)["files_unchanged"], 4, "{}", json(&o));
    assert_as_rsync(&root.join("x"), &theirs.path().join("x"));

    // The same rules for a pull, from the daemon's x.
    let local = tmp();
    let (into, into_rsync) = (local.path().join("l1"), theirs.path().join("l1"));
    ok(pull(&d, &["-q"], &["127.0.0.1:x/", p(&into)]));
    rsync(&[&format!("{}/", p(&root.join("x"))), p(&into_rsync)]);
    assert_as_rsync(&into, &into_rsync);
    assert!(into.join("sub/c.dat").is_file() && !into.join("x").exists());
    let (into, into_rsync) = (local.path().join("l2"), theirs.path().join("l2"));
    ok(pull(&d, &["-q"], &["127.0.0.1:x", p(&into)]));
    rsync(&[p(&root.join("x")), p(&into_rsync)]);
    assert_as_rsync(&into, &into_rsync);
    assert!(into.join("x/sub/c.dat").is_file());
    // `LINK/` is what the link leads to beneath the root, as rsync reads it.
    std::os::unix::fs::symlink("x", root.join("lnk")).unwrap();
    let (into, into_rsync) = (local.path().join("l3"), theirs.path().join("l3"));
    ok(pull(&d, &["-q"], &["127.0.0.1:lnk/", p(&into)]));
    rsync(&[&format!("{}/", p(&root.join("lnk"))), p(&into_rsync)]);
    assert_as_rsync(&into, &into_rsync);
}

/// One file sent or pulled to a name that is no directory takes that
/// name (rsync's and scp's rename); into a directory, or a name ending in
/// `/`, it keeps its own; a directory never renames. A second run finds
/// the renamed file unchanged.
#[test]
fn one_file_takes_the_name_it_is_given_as_rsync_renames() {
    crate::require!(have("rsync"), "rsync is not installed");
    let d = Daemon::start();
    let src = tmp();
    let run = make_run(src.path());
    let obs = run.join("a.dat");
    let (root, theirs) = (d.root.path(), tmp());
    let mirror = |name: &str| theirs.path().join(name);
    std::fs::create_dir(root.join("into")).unwrap();
    std::fs::create_dir(mirror("into")).unwrap();
    for dest in ["new.dat", "into", "made/", "deep/er/new.dat"] {
        ok(d.send(&["-q"], &[p(&obs), &format!("127.0.0.1:{dest}")]));
        if let Some(parent) = mirror(dest).parent().filter(|_| !dest.ends_with('/')) {
            std::fs::create_dir_all(parent).unwrap();
        }
        rsync(&[p(&obs), p(&mirror(dest))]);
    }
    assert_as_rsync(root, theirs.path());
    assert!(root.join("new.dat").is_file() && root.join("into/a.dat").is_file());
    assert!(root.join("made/a.dat").is_file() && root.join("deep/er/new.dat").is_file());
    let o = ok(d.send(&["--json"], &[p(&obs), "127.0.0.1:new.dat"]));
    assert_eq!(json(&o)["files_unchanged"], 1, "{}", json(&o));
    // A directory keeps its name beneath a DEST that does not exist yet.
    ok(d.send(&["-q"], &[p(&run.join("sub")), "127.0.0.1:newdir"]));
    assert!(root.join("newdir/sub/c.dat").is_file());

    // Pulled: the client is the receiver, and decides as the daemon does.
    let local = tmp();
    let l = |name: &str| local.path().join(name);
    std::fs::create_dir(l("into")).unwrap();
    for to in ["p.dat", "into", "made/"] {
        let to = format!("{}/{to}", p(local.path()));
        ok(pull(&d, &["-q"], &["127.0.0.1:new.dat", &to]));
    }
    assert!(l("p.dat").is_file() && l("into/new.dat").is_file() && l("made/new.dat").is_file());
    assert_eq!(
        std::fs::read(l("p.dat")).unwrap(),
        std::fs::read(&obs).unwrap()
    );
    let o = ok(pull(
        &d,
        &["--json"],
        &["127.0.0.1:new.dat", p(&l("p.dat"))],
    ));
    assert_eq!(json(&o)["files_unchanged"], 1, "{}", json(&o));
    ok(pull(&d, &["-q"], &["127.0.0.1:newdir", p(&l("pd"))]));
    assert!(l("pd/newdir/sub/c.dat").is_file());
}

/// Two sources whose contents would land on one path are refused before
/// anything is written, naming the path and both sources.
#[test]
fn sources_landing_on_one_path_are_refused_naming_it() {
    let d = Daemon::start();
    let src = tmp();
    let run = make_run(src.path());
    let other = src.path().join("other");
    std::fs::create_dir_all(other.join("sub")).unwrap();
    std::fs::write(other.join("sub/c.dat"), b"other").unwrap();
    let (a, b) = (format!("{}/", p(&run)), format!("{}/", p(&other)));
    let o = d.send(&[], &[&a, &b, "127.0.0.1:both"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let want = format!("two sources are named sub under the destination (from {a} and {b})");
    assert!(stderr(&o).contains(&want), "{}", stderr(&o));
    assert!(!d.root.path().join("both").exists());

    std::fs::create_dir_all(d.root.path().join("r1/sub")).unwrap();
    std::fs::create_dir_all(d.root.path().join("r2/sub")).unwrap();
    let into = tmp();
    let o = pull(&d, &[], &["127.0.0.1:r1/", "127.0.0.1:r2/", p(into.path())]);
    assert_ne!(o.status.code(), Some(0), "{}", stderr(&o));
    let want = "two paths are named sub under the destination (from r1/ and r2/)";
    assert!(stderr(&o).contains(want), "{}", stderr(&o));
}

/// Where urmove differs from rsync and scp it says what to type instead,
/// before connecting, exit 2: an absolute DEST or PATH (paths are beneath
/// the daemon's root), a send from HOST:PATH or a pull to HOST:PATH, a
/// `--follow` of `DIR/`, a `--delete` of `DIR/` into the root. A ':' after
/// a '/' is a local path's, as scp reads it.
#[test]
fn where_urmove_differs_it_says_what_to_type() {
    let d = Daemon::start();
    let src = tmp();
    let run = make_run(src.path());
    let refused = |o: &Output, want: &str| {
        assert_eq!(o.status.code(), Some(2), "{}", stderr(o));
        assert!(stderr(o).contains(want), "{}", stderr(o));
    };
    let obs = run.join("a.dat");
    refused(
        &d.send(&[], &[p(&obs), "127.0.0.1:/data/x"]),
        "127.0.0.1:/data/x: an absolute path is refused: DEST is relative to the receiver's root (its --root); give 127.0.0.1:data/x for ROOT/data/x",
    );
    refused(
        &d.send(&[], &[p(&obs), "127.0.0.1:/"]),
        "give 127.0.0.1: for the root itself",
    );
    refused(
        &pull(&d, &[], &["127.0.0.1:/data/x", "/var/tmp/never"]),
        "PATH is relative to the daemon's root (its --root); give 127.0.0.1:data/x",
    );
    refused(
        &d.send(&[], &["127.0.0.1:x", "localdir"]),
        "to fetch from it into localdir, run `urmove pull 127.0.0.1:x localdir`",
    );
    refused(
        &pull(&d, &[], &["localdir", "127.0.0.1:x"]),
        "to push localdir to it, run `urmove send localdir 127.0.0.1:x`",
    );
    let slash = format!("{}/", p(&run));
    refused(
        &d.send(&["--follow"], &[&slash, "127.0.0.1:f"]),
        "--follow takes each directory as itself",
    );
    refused(
        &d.send(&["--delete"], &[&slash, "127.0.0.1:"]),
        "into the receiver's root itself would remove everything else under the root",
    );
    assert!(std::fs::read_dir(d.root.path()).unwrap().next().is_none());

    // scp's rule: `dir/a:b` is a local name, sent and pulled as one.
    let colon = run.join("sub/a:b");
    std::fs::write(&colon, b"colon").unwrap();
    ok(d.send(&["-q"], &[p(&colon), "127.0.0.1:c/"]));
    assert_eq!(
        std::fs::read(d.root.path().join("c/a:b")).unwrap(),
        b"colon"
    );
    let local = tmp();
    ok(pull(
        &d,
        &["-q"],
        &["127.0.0.1:c/", p(&local.path().join("x:y"))],
    ));
    assert_eq!(
        std::fs::read(local.path().join("x:y/a:b")).unwrap(),
        b"colon"
    );
}

/// `send --delete DIR/ HOST:x` makes x hold what DIR holds, as rsync
/// --delete makes it: the extras directly in x go too (x stands for DIR).
#[test]
fn delete_of_a_directorys_contents_prunes_the_destination_as_rsync() {
    crate::require!(have("rsync"), "rsync is not installed");
    let d = Daemon::start();
    let src = tmp();
    let run = make_run(src.path());
    let theirs = tmp();
    let slash = format!("{}/", p(&run));
    for top in [d.root.path().join("x"), theirs.path().join("x")] {
        std::fs::create_dir_all(top.join("sub")).unwrap();
        std::fs::write(top.join("extra.dat"), b"extra").unwrap();
        std::fs::write(top.join("sub/extra.dat"), b"extra").unwrap();
    }
    let o = ok(d.send(&["--delete", "--json"], &[&slash, "127.0.0.1:x"]));
    rsync(&["--delete", &slash, p(&theirs.path().join("x"))]);
    assert_as_rsync(&d.root.path().join("x"), &theirs.path().join("x"));
    let deleted = json(&o)["deleted"].clone();
    assert_eq!(deleted, serde_json::json!(["extra.dat", "sub/extra.dat"]));
}
