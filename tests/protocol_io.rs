//! Pieces of the transfer path that touch the system: paths resolved
//! beneath a receiver's root, and key files.

use std::os::unix::fs::PermissionsExt;

use urmove::datapath::beneath::Root;

use crate::util::{run, stderr};

#[test]
fn paths_resolve_beneath_the_root_and_never_out_of_it() {
    let outside = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::write(outside.path().join("secret"), b"no").unwrap();
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let root = Root::open(dir.path()).unwrap();
    std::os::unix::fs::symlink(outside.path(), dir.path().join("evil")).unwrap();
    std::os::unix::fs::symlink("/etc", dir.path().join("abs")).unwrap();
    std::fs::create_dir(dir.path().join("ok")).unwrap();
    std::os::unix::fs::symlink("ok", dir.path().join("inside")).unwrap();

    // Inside: fine, through a link that stays inside too.
    root.mkdir_all("a/b/c", 0o755).unwrap();
    let f = root
        .open_file("a/b/c/f.urmove.part", libc::O_WRONLY | libc::O_CREAT, 0o644)
        .unwrap();
    drop(f);
    root.rename("a/b/c/f.urmove.part", "a/b/c/f").unwrap();
    assert!(dir.path().join("a/b/c/f").exists());
    root.open_file("inside/new", libc::O_WRONLY | libc::O_CREAT, 0o644)
        .unwrap();
    assert!(dir.path().join("ok/new").exists());

    // Out: refused by the kernel, nothing written outside.
    for bad in [
        "evil/secret",
        "evil/new",
        "../escape",
        "a/../../escape",
        "abs/passwd",
        "/etc/passwd",
    ] {
        let e = root
            .open_file(bad, libc::O_WRONLY | libc::O_CREAT, 0o644)
            .unwrap_err();
        assert!(e.to_string().contains("refused"), "{bad}: {e}");
    }
    assert!(root.mkdir_all("evil/d", 0o755).is_err());
    assert!(root.rename("a/b/c/f", "evil/f").is_err());
    assert_eq!(std::fs::read(outside.path().join("secret")).unwrap(), b"no");
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1);
    assert!(!dir.path().parent().unwrap().join("escape").exists());
}

#[test]
fn keygen_writes_an_owner_only_key_and_never_overwrites() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let key = dir.path().join("urmove.key");
    let k = key.to_str().unwrap();
    let o = run(&["keygen", k]);
    assert!(o.status.success(), "{}", stderr(&o));
    let said = crate::util::stdout(&o);
    assert!(
        said.contains(&format!("wrote a new 256-bit key to {k} (mode 0600)")),
        "{said}"
    );
    let meta = std::fs::metadata(&key).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let text = std::fs::read_to_string(&key).unwrap();
    assert!(urmove::protocol::handshake::parse_key(&text).is_ok());

    let o = run(&["keygen", k]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("exists: urmove never overwrites a key"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        std::fs::read_to_string(&key).unwrap(),
        text,
        "the key was overwritten"
    );

    // Two keys differ.
    let other = dir.path().join("other.key");
    assert!(run(&["keygen", other.to_str().unwrap()]).status.success());
    assert_ne!(std::fs::read_to_string(&other).unwrap(), text);
}

#[test]
fn a_key_file_others_can_read_is_refused() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let key = dir.path().join("k");
    assert!(run(&["keygen", key.to_str().unwrap()]).status.success());
    assert!(urmove::cli::keys::load(&key).is_ok());
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = urmove::cli::keys::load(&key).unwrap_err().to_string();
    assert!(e.contains("chmod 600"), "{e}");
    std::fs::write(dir.path().join("bad"), "not a key").unwrap();
    std::fs::set_permissions(
        dir.path().join("bad"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    assert!(urmove::cli::keys::load(&dir.path().join("bad")).is_err());
}
