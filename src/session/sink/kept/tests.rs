use super::*;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

const MTIME: Duration = Duration::new(1_700_000_000, 7);

/// A file at `dir/name` holding `data`, opened to read and write, with a
/// fixed mtime.
fn file_with(dir: &Path, name: &str, data: &[u8]) -> File {
    let p = dir.join(name);
    std::fs::write(&p, data).unwrap();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&p)
        .unwrap();
    put_mtime_back(&f);
    f
}

fn put_mtime_back(f: &File) {
    let t = SystemTime::UNIX_EPOCH + MTIME;
    f.set_times(std::fs::FileTimes::new().set_modified(t))
        .unwrap();
}

/// As a commit's settling time: a margin past the fine clock.
fn settling_time() -> i128 {
    let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH);
    now.unwrap().as_nanos() as i128 + 20_000_000
}

fn wait_past(settled: i128) {
    while sys::coarse_now_ns() <= settled + 1_000_000 {
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// As a commit does: the sums, then the stamp (digest `digest`), under
/// one settling time. `None` where the filesystem keeps no user xattrs.
fn commit(named: Named<'_>, digest: u64, secret: &Secret, sums: Option<&Sums>) -> Option<i128> {
    let settled = settling_time();
    if let Some(s) = sums {
        store(named, digest, secret, s).unwrap();
    }
    stamp::stamp(named, digest, secret, None, Some(settled)).ok()?;
    sys::get_xattr(named.file, c"user.urmove").map(|_| settled)
}

fn data(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i * 131 % 251) as u8 ^ seed).collect()
}

fn sums_of(bytes: &[u8], with_md5: bool) -> Sums {
    let mut h = Hasher::new(with_md5);
    h.update(bytes);
    h.finish()
}

#[test]
fn kept_sums_are_trusted_on_the_untouched_file_and_match_a_read() {
    let secret = Secret::ephemeral().unwrap();
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let bytes = data((9 << 20) + 5, 0);
    let a = file_with(dir.path(), "a", &bytes);
    let named = Named {
        file: &a,
        rel: "d/a",
    };
    let read = compute(&a, true).unwrap();
    assert_eq!(read, sums_of(&bytes, true));
    assert_eq!(read.adler32, crate::protocol::checksum::adler32(&bytes));
    assert_eq!(load(named, &secret), None, "nothing kept yet");
    if commit(named, 5, &secret, Some(&read)).is_none() {
        eprintln!("skipped: no user xattrs here");
        return;
    }
    assert_eq!(sys::get_xattr(&a, XATTR).unwrap().len(), RECORD_LEN_MD5);
    assert_eq!(load(named, &secret), Some(read));
    assert_eq!(sums(named, &secret, true).unwrap(), (read, Found::Kept));
    // Without md5: kept for adler32 and crc32c, md5 read when asked.
    let short = Sums { md5: None, ..read };
    commit(named, 5, &secret, Some(&short)).unwrap();
    assert_eq!(sys::get_xattr(&a, XATTR).unwrap().len(), RECORD_LEN);
    assert_eq!(load(named, &secret), Some(short));
    assert_eq!(sums(named, &secret, false).unwrap(), (short, Found::Kept));
    assert_eq!(sums(named, &secret, true).unwrap(), (read, Found::Read));
    let empty = file_with(dir.path(), "e", b"");
    assert_eq!(compute(&empty, true).unwrap(), Sums::EMPTY);
}

/// An edit after the settling time, its mtime put back (size, mtime and
/// name as committed), leaves the record where it was but untrusted.
#[test]
fn an_edit_with_its_mtime_put_back_is_not_trusted() {
    let secret = Secret::ephemeral().unwrap();
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let bytes = data(100_000, 1);
    let a = file_with(dir.path(), "a", &bytes);
    let named = Named { file: &a, rel: "a" };
    let before = sums_of(&bytes, true);
    let Some(settled) = commit(named, 5, &secret, Some(&before)) else {
        eprintln!("skipped: no user xattrs here");
        return;
    };
    assert_eq!(load(named, &secret), Some(before));
    wait_past(settled);
    a.write_all_at(b"J", 50_000).unwrap();
    put_mtime_back(&a);
    assert!(
        sys::get_xattr(&a, XATTR).is_some(),
        "the record is still there"
    );
    assert_eq!(load(named, &secret), None, "an edit went unseen");
    let mut edited = bytes.clone();
    edited[50_000] = b'J';
    let (now, found) = sums(named, &secret, true).unwrap();
    assert_eq!((now, found), (sums_of(&edited, true), Found::Read));
    assert_ne!(now.adler32, before.adler32);
}

/// Under another name, copied onto another file of the same size and
/// mtime, for another stamp's digest, another secret, or one byte
/// changed: not trusted.
#[test]
fn a_record_renamed_copied_or_not_its_stamps_is_not_trusted() {
    let secret = Secret::ephemeral().unwrap();
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let bytes = data(5000, 2);
    let a = file_with(dir.path(), "a", &bytes);
    let b = file_with(dir.path(), "b", &bytes);
    let named = Named { file: &a, rel: "a" };
    let sums = sums_of(&bytes, true);
    if commit(named, 5, &secret, Some(&sums)).is_none() {
        eprintln!("skipped: no user xattrs here");
        return;
    }
    assert_eq!(load(named, &secret), Some(sums));
    // Renamed: the stamp and the record name "a".
    assert_eq!(load(Named { file: &a, rel: "b" }, &secret), None);
    // Both attributes copied onto another file (same bytes, size, mtime).
    for name in [c"user.urmove", XATTR] {
        sys::set_xattr(&b, name, &sys::get_xattr(&a, name).unwrap()).unwrap();
    }
    put_mtime_back(&b);
    assert_eq!(load(Named { file: &b, rel: "a" }, &secret), None);
    assert_eq!(load(named, &Secret::ephemeral().unwrap()), None);
    // Kept for another digest than the stamp's.
    commit(named, 5, &secret, None).unwrap();
    store(named, 6, &secret, &sums).unwrap();
    assert_eq!(load(named, &secret), None);
    store(named, 5, &secret, &sums).unwrap();
    let good = sys::get_xattr(&a, XATTR).unwrap();
    for i in 0..good.len() {
        let mut x = good.clone();
        x[i] ^= 1;
        sys::set_xattr(&a, XATTR, &x).unwrap();
        assert_eq!(load(named, &secret), None, "byte {i}");
    }
    for len in [0, 1, RECORD_LEN - 1, RECORD_LEN + 1, RECORD_LEN_MD5 + 1] {
        let mut x = good.clone();
        x.resize(len, 0);
        sys::set_xattr(&a, XATTR, &x).unwrap();
        assert_eq!(load(named, &secret), None, "{len} bytes");
    }
    sys::set_xattr(&a, XATTR, &good).unwrap();
    assert_eq!(load(named, &secret), Some(sums));
}

/// Sums read after the commit, kept under a lease: the stamp still holds
/// untouched once its new settling time is past, and the record with it;
/// with the file open elsewhere no lease is had and nothing is kept.
#[test]
fn sums_kept_after_the_commit_leave_the_stamp_untouched() {
    let secret = Secret::ephemeral().unwrap();
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let bytes = data(70_000, 3);
    let settled = {
        let a = file_with(dir.path(), "a", &bytes);
        commit(Named { file: &a, rel: "a" }, 5, &secret, None)
    };
    let Some(settled) = settled else {
        eprintln!("skipped: no user xattrs here");
        return;
    };
    // As the HTTP front has it: opened to read.
    let a = File::open(dir.path().join("a")).unwrap();
    let named = Named { file: &a, rel: "a" };
    let (read, found) = sums(named, &secret, false).unwrap();
    assert_eq!((read, found), (sums_of(&bytes, false), Found::Read));
    wait_past(settled);
    let reader = File::open(dir.path().join("a")).unwrap();
    assert!(!keep_after(named, &secret, &read), "kept with a reader");
    drop(reader);
    if !keep_after(named, &secret, &read) {
        eprintln!("skipped: no write leases here");
        return;
    }
    assert_eq!(load(named, &secret), Some(read));
    wait_past(settling_time());
    let stamped = stamp::stamped_now(named, &secret).unwrap();
    assert!(stamped.untouched && stamped.digest == 5);
    assert_eq!(sums(named, &secret, false).unwrap(), (read, Found::Kept));
    // Once the file is touched, nothing is kept after it.
    let w = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join("a"))
        .unwrap();
    w.write_all_at(b"x", 0).unwrap();
    put_mtime_back(&w);
    drop(w);
    assert!(!keep_after(named, &secret, &read));
    assert_eq!(load(named, &secret), None);
}

/// Read with O_DIRECT where the filesystem takes it (here, under
/// /var/tmp), through the cache where not: the same sums either way, for
/// sizes around the alignment and the read size.
#[test]
fn a_read_gives_the_same_sums_direct_or_through_the_cache() {
    let dirs = [
        tempfile::tempdir_in("/var/tmp").unwrap(),
        tempfile::tempdir_in("/dev/shm").unwrap(),
    ];
    for dir in &dirs {
        for (i, len) in [
            0,
            1,
            4095,
            4096,
            4097,
            READ_BYTES,
            READ_BYTES + 1,
            2 * READ_BYTES + 4099,
        ]
        .into_iter()
        .enumerate()
        {
            let bytes = data(len, i as u8);
            let f = file_with(dir.path(), &format!("f{i}"), &bytes);
            assert_eq!(compute(&f, true).unwrap(), sums_of(&bytes, true), "{len}");
            // Where the path opens with O_DIRECT, so does the file.
            use std::os::unix::fs::OpenOptionsExt;
            let mut direct = std::fs::OpenOptions::new();
            direct.read(true).custom_flags(libc::O_DIRECT);
            let takes_it = direct.open(dir.path().join(format!("f{i}"))).is_ok();
            assert_eq!(direct_reopen(&f).is_some(), takes_it, "{:?}", dir.path());
        }
    }
}
