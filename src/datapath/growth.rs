//! Watching files that are still being written (`send --follow`): an
//! inotify instance that wakes the follower when one is written, closed,
//! moved or removed (where the filesystem has inotify; elsewhere the
//! follower polls), and which of them some process still holds open for
//! writing (what `fuser` reads: `/proc/PID/fd` and `fdinfo`).

use std::collections::HashSet;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use super::beneath::FileId;

/// An inotify instance over the files followed.
#[derive(Debug)]
pub struct Inotify {
    fd: OwnedFd,
}

/// What wakes the follower: data written, a writer's close, the file
/// moved, removed or its attributes changed (a truncation is a write).
const FILE_EVENTS: u32 = libc::IN_MODIFY
    | libc::IN_CLOSE_WRITE
    | libc::IN_ATTRIB
    | libc::IN_MOVE_SELF
    | libc::IN_DELETE_SELF;
/// And for a directory: a name made or moved in.
const DIR_EVENTS: u32 = libc::IN_CREATE | libc::IN_MOVED_TO | libc::IN_ONLYDIR;

/// What [`Inotify::wait`] found: the watches that had news, or (the
/// kernel's queue overflowed) that any may have.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct News {
    pub watches: Vec<i32>,
    pub overflowed: bool,
}

impl News {
    pub fn any(&self) -> bool {
        self.overflowed || !self.watches.is_empty()
    }
}

impl Inotify {
    pub fn new() -> io::Result<Inotify> {
        // SAFETY: inotify_init1 takes no pointers; a new descriptor is ours.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel just returned this descriptor to us.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Inotify { fd })
    }

    /// Watch `path` (never through a final symlink), a file or (`dir`) a
    /// directory: its watch.
    pub fn watch(&self, path: &Path, dir: bool) -> io::Result<i32> {
        use std::os::unix::ffi::OsStrExt;
        let c = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let mask = if dir { DIR_EVENTS } else { FILE_EVENTS } | libc::IN_DONT_FOLLOW;
        // SAFETY: `c` is a NUL-terminated string that outlives the call;
        // the kernel copies it.
        let wd = unsafe { libc::inotify_add_watch(self.fd.as_raw_fd(), c.as_ptr(), mask) };
        if wd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(wd)
    }

    /// Wait until some watched file has news or `limit` passes: which
    /// watches had it (the events are read; the follower looks again).
    pub fn wait(&self, limit: Duration) -> News {
        let mut news = News::default();
        if !super::sys::wait_readable(self.fd.as_raw_fd(), super::sys::poll_ms(limit)) {
            return news;
        }
        let mut buf = [0u8; 4096];
        loop {
            // SAFETY: read writes at most `buf.len()` bytes into `buf`,
            // which outlives the call; the descriptor is non-blocking.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                return news;
            }
            events(&buf[..n as usize], &mut news);
        }
    }
}

/// The watches named by the inotify events in `buf` (each: wd, mask,
/// cookie, name length, name).
fn events(buf: &[u8], news: &mut News) {
    let mut at = 0;
    while at + 16 <= buf.len() {
        let word = |k: usize| {
            let b: [u8; 4] = buf[at + k..at + k + 4].try_into().expect("4 bytes");
            u32::from_ne_bytes(b)
        };
        let (wd, mask, len) = (word(0) as i32, word(4), word(12) as usize);
        if mask & libc::IN_Q_OVERFLOW != 0 {
            news.overflowed = true;
        } else if !news.watches.contains(&wd) {
            news.watches.push(wd);
        }
        at += 16 + len;
    }
}

/// Which of `files` some process holds open for writing, as far as this
/// process may see (all of them as root; its own user's otherwise).
pub fn held_for_writing(files: &HashSet<FileId>) -> HashSet<FileId> {
    let mut found = HashSet::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return found;
    };
    for p in procs.flatten() {
        let name = p.file_name();
        if !name.as_encoded_bytes().iter().all(u8::is_ascii_digit) {
            continue;
        }
        writers_in(&p.path(), files, &mut found);
        if found.len() == files.len() {
            break;
        }
    }
    found
}

/// Of one process's descriptors, those open for writing on one of `files`.
fn writers_in(pid: &Path, files: &HashSet<FileId>, found: &mut HashSet<FileId>) {
    use std::os::unix::fs::MetadataExt;
    let Ok(fds) = std::fs::read_dir(pid.join("fd")) else {
        return;
    };
    for fd in fds.flatten() {
        // The descriptor's file (the link followed), by device and inode.
        let Ok(m) = std::fs::metadata(fd.path()) else {
            continue;
        };
        let id = FileId {
            dev: m.dev(),
            ino: m.ino(),
        };
        if !m.is_file() || !files.contains(&id) || found.contains(&id) {
            continue;
        }
        let info = pid.join("fdinfo").join(fd.file_name());
        if std::fs::read_to_string(info).is_ok_and(|t| opened_for_writing(&t)) {
            found.insert(id);
        }
    }
}

/// Whether an `fdinfo` text names a descriptor opened to write
/// (`flags:` in octal, O_WRONLY or O_RDWR).
fn opened_for_writing(fdinfo: &str) -> bool {
    fdinfo
        .lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|f| i64::from_str_radix(f.trim(), 8).ok())
        .is_some_and(|flags| flags & i64::from(libc::O_ACCMODE) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id_of(f: &std::fs::File) -> FileId {
        FileId::of(f).unwrap()
    }

    #[test]
    fn a_file_open_for_writing_is_found_and_one_open_to_read_is_not() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let path = dir.path().join("rec");
        let w = std::fs::File::create(&path).unwrap();
        let id = id_of(&w);
        let want: HashSet<FileId> = [id].into();
        assert_eq!(held_for_writing(&want), want, "our own writer is seen");
        drop(w);
        let r = std::fs::File::open(&path).unwrap();
        assert!(held_for_writing(&want).is_empty(), "a reader is no writer");
        drop(r);
    }

    #[test]
    fn inotify_wakes_on_a_write_and_times_out_without_one() {
        use std::io::Write;
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let path = dir.path().join("rec");
        let mut w = std::fs::File::create(&path).unwrap();
        let n = Inotify::new().unwrap();
        let file = n.watch(&path, false).unwrap();
        let here = n.watch(dir.path(), true).unwrap();
        assert!(
            !n.wait(Duration::from_millis(50)).any(),
            "nothing happened yet"
        );
        w.write_all(b"data").unwrap();
        assert_eq!(
            n.wait(Duration::from_secs(5)).watches,
            vec![file],
            "a write"
        );
        assert!(
            !n.wait(Duration::from_millis(50)).any(),
            "the events were read"
        );
        std::fs::write(dir.path().join("new"), b"x").unwrap();
        let news = n.wait(Duration::from_secs(5));
        assert!(news.watches.contains(&here), "a new name in the directory");
        assert!(opened_for_writing("pos:\t0\nflags:\t0100001\n"));
        assert!(!opened_for_writing("pos:\t0\nflags:\t0100000\n"));
    }
}
