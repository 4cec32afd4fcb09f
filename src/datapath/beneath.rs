//! Paths from the wire, resolved beneath a root directory and never out of
//! it: every open goes through `openat2(2)` with `RESOLVE_BENEATH` (and no
//! magic links), so absolute paths, `..` and symlinks that escape the root
//! fail in the kernel with EXDEV, whatever races the filesystem sees.
//!
//! A root opened for writing ([`Root::open_for_writing`]) also resolves
//! with `RESOLVE_NO_SYMLINKS`: no symlink is followed anywhere in a path it
//! writes through, so a link planted at a part name, a journal or a
//! directory (by another key holder or a local user of the root) cannot
//! redirect a write, even inside the root.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// `struct open_how` of openat2(2) (libc's is non-exhaustive).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// A directory that wire paths are confined to.
#[derive(Debug)]
pub struct Root {
    dir: OwnedFd,
    path: PathBuf,
    /// Follow no symlink in any path (the receiving side).
    no_symlinks: bool,
}

/// What a file is, whatever it is called: its device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
}

impl FileId {
    /// The identity of an open file.
    pub fn of(file: &File) -> io::Result<FileId> {
        Ok(FileId::of_metadata(&file.metadata()?))
    }

    /// The identity of what `m` describes.
    pub fn of_metadata(m: &std::fs::Metadata) -> FileId {
        use std::os::unix::fs::MetadataExt;
        FileId {
            dev: m.dev(),
            ino: m.ino(),
        }
    }
}

/// A name as the kernel takes it: its bytes ([`crate::protocol::names`]).
fn cstr(s: &str) -> io::Result<CString> {
    CString::new(crate::protocol::names::to_bytes(s).into_owned())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

/// A path refused beneath the root: it goes through a symlink, leads
/// out of the root, or names another file than the one expected there.
/// What someone who can write under the root may cause for one entry:
/// that entry is refused, never the session (see [`refused`]).
#[derive(Debug)]
pub struct Refusal(String);

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refusal {}

/// Whether `e` is a [`Refusal`].
pub fn refused(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<Refusal>())
}

/// Turn the kernel's EXDEV/ELOOP into an error that says what happened.
fn name_escape(rel: &str, e: io::Error, no_symlinks: bool) -> io::Error {
    let why = match e.raw_os_error() {
        Some(libc::ELOOP) if no_symlinks => format!("{rel}: refused, it goes through a symlink (the receiver never follows links when it writes)"),
        Some(libc::EXDEV | libc::ELOOP) => {
            format!("{rel}: refused, it resolves outside the receiver's root")
        }
        _ => return e,
    };
    io::Error::new(io::ErrorKind::PermissionDenied, Refusal(why))
}

impl Root {
    /// Open `path` as a root (it must be a directory).
    pub fn open(path: &Path) -> io::Result<Root> {
        let dir = File::options()
            .read(true)
            .custom_flags_dir()
            .open(path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        Ok(Root {
            dir: dir.into(),
            path: path.to_path_buf(),
            no_symlinks: false,
        })
    }

    /// Open `path` as a root to write beneath: no path resolved in it may
    /// go through a symlink (a final symlink is still reachable with
    /// `O_PATH | O_NOFOLLOW`, to look at or remove it).
    pub fn open_for_writing(path: &Path) -> io::Result<Root> {
        Ok(Root {
            no_symlinks: true,
            ..Root::open(path)?
        })
    }

    /// Another handle on the same root directory (its descriptor
    /// duplicated, its rules kept).
    pub fn try_clone(&self) -> io::Result<Root> {
        Ok(Root {
            dir: self.dir.try_clone()?,
            path: self.path.clone(),
            no_symlinks: self.no_symlinks,
        })
    }

    /// The identity of the root directory itself.
    pub fn id(&self) -> io::Result<FileId> {
        // SAFETY: dup of a descriptor we own; the new one is ours alone.
        let fd = unsafe { libc::fcntl(self.dir.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel just returned this descriptor to us.
        let f = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        FileId::of(&f)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `openat2(root, rel, flags, mode, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`.
    pub fn openat(&self, rel: &str, flags: i32, mode: u32) -> io::Result<OwnedFd> {
        self.openat_resolve(rel, flags, mode, 0)
    }

    /// `openat` with extra `RESOLVE_*` flags.
    fn openat_resolve(
        &self,
        rel: &str,
        flags: i32,
        mode: u32,
        resolve: u64,
    ) -> io::Result<OwnedFd> {
        if rel.starts_with('/') {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{rel}: refused, absolute paths are not allowed"),
            ));
        }
        let c = cstr(rel)?;
        let how = OpenHow {
            flags: (flags | libc::O_CLOEXEC) as u64,
            // openat2 takes a mode only where one makes a file.
            mode: if flags & libc::O_CREAT != 0 || flags & libc::O_TMPFILE == libc::O_TMPFILE {
                u64::from(mode)
            } else {
                0
            },
            resolve: libc::RESOLVE_BENEATH
                | libc::RESOLVE_NO_MAGICLINKS
                | resolve
                | if self.no_symlinks {
                    libc::RESOLVE_NO_SYMLINKS
                } else {
                    0
                },
        };
        loop {
            // SAFETY: `c` is NUL-terminated and `how` is a valid open_how that
            // outlives the call; the kernel reads both and keeps neither.
            let fd = unsafe {
                libc::syscall(
                    libc::SYS_openat2,
                    self.dir.as_raw_fd(),
                    c.as_ptr(),
                    &how as *const OpenHow,
                    std::mem::size_of::<OpenHow>(),
                )
            };
            if fd >= 0 {
                // SAFETY: the kernel just returned this descriptor to us; we
                // are its only owner.
                return Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) });
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EAGAIN) || e.raw_os_error() == Some(libc::EINTR) {
                continue; // a concurrent rename raced the lookup: retry
            }
            return Err(name_escape(rel, e, self.no_symlinks));
        }
    }

    /// Open a file beneath the root.
    pub fn open_file(&self, rel: &str, flags: i32, mode: u32) -> io::Result<File> {
        self.openat(rel, flags, mode).map(File::from)
    }

    /// Open what is at `rel` to read it, through no link and without
    /// waiting (a FIFO planted there opens at once, and reads nothing).
    pub fn open_read(&self, rel: &str) -> io::Result<File> {
        self.open_file(rel, libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK, 0)
    }

    /// Open a file beneath the root with O_DIRECT as `direct` asks: in
    /// `Auto`, a filesystem that refuses O_DIRECT (EINVAL) gets buffered I/O.
    /// Returns the file and whether O_DIRECT is in force.
    pub fn open_direct(
        &self,
        rel: &str,
        flags: i32,
        mode: u32,
        direct: super::DirectMode,
    ) -> io::Result<(File, bool)> {
        // Opened first, O_DIRECT set after: a filesystem that refuses it
        // refuses the flag, not the open (which may have made the file).
        let f = self.open_file(rel, flags, mode)?;
        super::direct::set_opened(f, direct, flags)
    }

    /// A new regular file with no name yet (`O_TMPFILE`) in directory
    /// `dir` beneath the root, with O_DIRECT as `direct` asks (see
    /// [`open_direct`](Self::open_direct)): nothing is left behind if the
    /// process dies before [`link_unnamed`](Self::link_unnamed) names it.
    /// `Ok(None)` where the filesystem makes no such files (NFS, FUSE).
    pub fn open_unnamed(
        &self,
        dir: &str,
        mode: u32,
        direct: super::DirectMode,
    ) -> io::Result<Option<(File, bool)>> {
        let at = if dir.is_empty() { "." } else { dir };
        let flags = libc::O_TMPFILE | libc::O_WRONLY;
        match self.open_file(at, flags, mode) {
            Ok(f) => super::direct::set_opened(f, direct, flags).map(Some),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EISDIR)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Give the unnamed file `file` ([`open_unnamed`](Self::open_unnamed))
    /// the name `rel` beneath the root: `Err(AlreadyExists)` when the name
    /// is taken (nothing is replaced).
    pub fn link_unnamed(&self, file: &File, rel: &str) -> io::Result<()> {
        let (parent, name) = self.parent(rel)?;
        // The descriptor's /proc name is the file itself (linkat with
        // AT_EMPTY_PATH would need CAP_DAC_READ_SEARCH).
        let proc = cstr(&format!("/proc/self/fd/{}", file.as_raw_fd()))?;
        // SAFETY: both names are NUL-terminated; linkat reads them only.
        let rc = unsafe {
            libc::linkat(
                libc::AT_FDCWD,
                proc.as_ptr(),
                parent.as_raw_fd(),
                name.as_ptr(),
                libc::AT_SYMLINK_FOLLOW,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The directory holding `rel` (opened beneath the root) and the last
    /// component, for *at() calls that must not follow a final symlink.
    fn parent(&self, rel: &str) -> io::Result<(OwnedFd, CString)> {
        let (dir, name) = match rel.rsplit_once('/') {
            Some((d, n)) => (d, n),
            None => (".", rel),
        };
        if name.is_empty() || name == "." || name == ".." {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{rel}: not a file name"),
            ));
        }
        let fd = self.openat(dir, libc::O_PATH | libc::O_DIRECTORY, 0)?;
        Ok((fd, cstr(name)?))
    }

    /// Create directory `rel` and its missing parents, each beneath the root.
    pub fn mkdir_all(&self, rel: &str, mode: u32) -> io::Result<()> {
        let mut at = String::new();
        for comp in rel.split('/').filter(|c| !c.is_empty()) {
            if !at.is_empty() {
                at.push('/');
            }
            at.push_str(comp);
            let (parent, name) = self.parent(&at)?;
            // SAFETY: `name` is NUL-terminated; mkdirat reads it only.
            let rc = unsafe { libc::mkdirat(parent.as_raw_fd(), name.as_ptr(), mode) };
            if rc != 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EEXIST) {
                    return Err(e);
                }
            }
            // Whatever is there now must be a directory beneath the root.
            self.openat(&at, libc::O_PATH | libc::O_DIRECTORY, 0)?;
        }
        Ok(())
    }

    /// Rename `from` to `to`, both beneath the root (replacing `to`).
    pub fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let (fd_from, n_from) = self.parent(from)?;
        let (fd_to, n_to) = self.parent(to)?;
        // SAFETY: both names are NUL-terminated; renameat reads them only.
        let rc = unsafe {
            libc::renameat(
                fd_from.as_raw_fd(),
                n_from.as_ptr(),
                fd_to.as_raw_fd(),
                n_to.as_ptr(),
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Rename `from` to `to`, both beneath the root, only when `to` names
    /// nothing (`RENAME_NOREPLACE`): `Err(AlreadyExists)` otherwise, and
    /// `Err(Unsupported)` on a filesystem without that flag (NFS, CIFS,
    /// FUSE filesystems of an older protocol: see
    /// [`link_new`](Self::link_new)).
    pub fn rename_new(&self, from: &str, to: &str) -> io::Result<()> {
        let (fd_from, n_from) = self.parent(from)?;
        let (fd_to, n_to) = self.parent(to)?;
        // SAFETY: both names are NUL-terminated; renameat2 reads them only.
        let rc = unsafe {
            libc::renameat2(
                fd_from.as_raw_fd(),
                n_from.as_ptr(),
                fd_to.as_raw_fd(),
                n_to.as_ptr(),
                libc::RENAME_NOREPLACE,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        match io::Error::last_os_error() {
            e if e.raw_os_error() == Some(libc::EINVAL) => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("{to}: no RENAME_NOREPLACE here ({e})"),
            )),
            e => Err(e),
        }
    }

    /// Give the file at `from` the further name `to`, both beneath the
    /// root, only when `to` names nothing (`Err(AlreadyExists)`
    /// otherwise). With the old name then removed, it is a rename that
    /// replaces nothing where `RENAME_NOREPLACE` is missing; the old name
    /// is best removed while nothing holds the file open (a FUSE or NFS
    /// filesystem keeps an open file's removed name until its last close,
    /// under a hidden one).
    pub fn link_new(&self, from: &str, to: &str) -> io::Result<()> {
        let (fd_from, n_from) = self.parent(from)?;
        let (fd_to, n_to) = self.parent(to)?;
        // SAFETY: both names are NUL-terminated; linkat reads them only.
        let rc = unsafe {
            libc::linkat(
                fd_from.as_raw_fd(),
                n_from.as_ptr(),
                fd_to.as_raw_fd(),
                n_to.as_ptr(),
                0,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Rename `from` to `to` only while `from` still names the file `id`,
    /// and check that `to` names it afterwards: the file a session wrote is
    /// the one that gets the final name, not whatever was put at its part
    /// name since. `Err` with `InvalidData` when the names held another.
    pub fn rename_file(&self, from: &str, to: &str, id: FileId) -> io::Result<()> {
        let (fd_from, n_from) = self.parent(from)?;
        let (fd_to, n_to) = self.parent(to)?;
        if stat_at(&fd_from, &n_from)? != id {
            return Err(replaced(from));
        }
        // SAFETY: both names are NUL-terminated; renameat reads them only.
        let rc = unsafe {
            libc::renameat(
                fd_from.as_raw_fd(),
                n_from.as_ptr(),
                fd_to.as_raw_fd(),
                n_to.as_ptr(),
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        if stat_at(&fd_to, &n_to)? != id {
            return Err(replaced(to));
        }
        Ok(())
    }

    /// Remove `rel` only while it names the file `id`.
    pub fn unlink_file(&self, rel: &str, id: FileId) -> io::Result<()> {
        let (parent, name) = self.parent(rel)?;
        if stat_at(&parent, &name)? != id {
            return Err(replaced(rel));
        }
        // SAFETY: `name` is NUL-terminated; unlinkat reads it only.
        let rc = unsafe { libc::unlinkat(parent.as_raw_fd(), name.as_ptr(), 0) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Create a symlink `rel` (beneath the root) pointing at `target`.
    /// The target text is the caller's to check (see `protocol::manifest`).
    pub fn symlink(&self, target: &str, rel: &str) -> io::Result<()> {
        // The link's directory is reached through no symlink, so a target
        // that is safe on paper cannot climb out through a linked parent.
        let (dir, name) = match rel.rsplit_once('/') {
            Some((d, n)) => (d, n),
            None => (".", rel),
        };
        let parent = self
            .openat_resolve(
                dir,
                libc::O_PATH | libc::O_DIRECTORY,
                0,
                libc::RESOLVE_NO_SYMLINKS,
            )
            .map_err(|e| name_escape(rel, e, true))?;
        let name = cstr(name)?;
        let t = cstr(target)?;
        // SAFETY: both strings are NUL-terminated; symlinkat reads them only.
        let rc = unsafe { libc::symlinkat(t.as_ptr(), parent.as_raw_fd(), name.as_ptr()) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Metadata of `rel` beneath the root, not following a final symlink.
    pub fn symlink_metadata(&self, rel: &str) -> io::Result<std::fs::Metadata> {
        self.open_path(rel)?.metadata()
    }

    /// `rel` beneath the root itself (a final symlink not followed), held
    /// by an `O_PATH` descriptor: for its metadata and, through
    /// [`super::ids::list_fd`], its extended attributes, of one inode.
    pub fn open_path(&self, rel: &str) -> io::Result<File> {
        self.openat(rel, libc::O_PATH | libc::O_NOFOLLOW, 0)
            .map(File::from)
    }

    /// The longest name the filesystem holding directory `rel` (or, where
    /// it is not made yet, its nearest ancestor) takes; 255 when it will
    /// not say.
    pub fn name_max(&self, mut rel: &str) -> usize {
        loop {
            let at = if rel.is_empty() { "." } else { rel };
            if let Ok(fd) = self.openat(at, libc::O_PATH | libc::O_DIRECTORY, 0) {
                return match super::sys::name_max_fd(&fd) {
                    Ok(n) if n > 0 => n,
                    _ => 255,
                };
            }
            if rel.is_empty() {
                return 255;
            }
            rel = rel.rsplit_once('/').map_or("", |(d, _)| d);
        }
    }

    /// Names in directory `rel` beneath the root.
    pub fn read_dir(&self, rel: &str) -> io::Result<Vec<String>> {
        let fd = self.openat(rel, libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
        // The descriptor was opened beneath the root; listing it by its
        // /proc name reads that directory and no other.
        let mut names = Vec::new();
        for e in std::fs::read_dir(format!("/proc/self/fd/{}", fd.as_raw_fd()))? {
            names.push(crate::protocol::names::from_os(&e?.file_name()));
        }
        names.sort();
        Ok(names)
    }

    /// The target of symlink `rel` beneath the root.
    pub fn read_link(&self, rel: &str) -> io::Result<String> {
        let (parent, name) = self.parent(rel)?;
        let mut buf = vec![0u8; libc::PATH_MAX as usize];
        // SAFETY: readlinkat writes at most `buf.len()` bytes into our live
        // buffer; `name` is NUL-terminated.
        let n = unsafe {
            libc::readlinkat(
                parent.as_raw_fd(),
                name.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        buf.truncate(n as usize);
        Ok(crate::protocol::names::from_bytes(&buf))
    }

    /// Make the FIFO, socket or device node `rel` beneath the root (its
    /// type and permission bits in `mode`, a device's number in `rdev`),
    /// never through a symlink; the process umask applies, as to mknod(2).
    pub fn mknod(&self, rel: &str, mode: u32, rdev: u64) -> io::Result<()> {
        let (parent, name) = self.parent(rel)?;
        // SAFETY: `name` is NUL-terminated; mknodat reads it only.
        let rc = unsafe { libc::mknodat(parent.as_raw_fd(), name.as_ptr(), mode, rdev) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Give the entry `rel` (not followed if a symlink) permission bits
    /// `mode`, through a descriptor of it, only when it is of the type
    /// `kind` (`S_IFIFO`, ...): whatever is put at the name meanwhile is
    /// left as it is.
    pub fn chmod_kind(&self, rel: &str, kind: u32, mode: u32) -> io::Result<()> {
        use std::os::unix::fs::MetadataExt;
        let at = self.open_path(rel)?;
        if at.metadata()?.mode() & libc::S_IFMT != kind {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{rel}: replaced while it was made"),
            ));
        }
        // The descriptor's /proc name leads to its inode, whatever the
        // name `rel` holds now (chmod has no flag for an O_PATH one on
        // every kernel).
        let path = cstr(&format!("/proc/self/fd/{}", at.as_raw_fd()))?;
        // SAFETY: `path` is NUL-terminated; chmod reads it only.
        if unsafe { libc::chmod(path.as_ptr(), mode) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Give `rel` (a symlink itself, not what it points to) owner `uid`
    /// and group `gid`.
    pub fn lchown(&self, rel: &str, uid: u32, gid: u32) -> io::Result<()> {
        let (parent, name) = self.parent(rel)?;
        // SAFETY: `name` is NUL-terminated; fchownat reads it only.
        let rc = unsafe {
            libc::fchownat(
                parent.as_raw_fd(),
                name.as_ptr(),
                uid,
                gid,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Give `rel` (a symlink itself, not what it points to) modification
    /// time `mtime_s`.`mtime_ns`; its access time is left as it is.
    pub fn set_link_mtime(&self, rel: &str, mtime_s: i64, mtime_ns: u32) -> io::Result<()> {
        let (parent, name) = self.parent(rel)?;
        let times = [
            libc::timespec {
                tv_sec: 0,
                tv_nsec: libc::UTIME_OMIT,
            },
            libc::timespec {
                tv_sec: mtime_s,
                tv_nsec: i64::from(mtime_ns),
            },
        ];
        // SAFETY: `name` is NUL-terminated and `times` holds two timespecs;
        // utimensat reads both only.
        let rc = unsafe {
            libc::utimensat(
                parent.as_raw_fd(),
                name.as_ptr(),
                times.as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Make `rel` another name of the regular file at `existing` (both
    /// beneath the root, neither through a symlink), replacing a file (not
    /// a directory) at `rel`. The file is opened first and linked by its
    /// descriptor, so what is linked is the file checked, whatever is
    /// renamed meanwhile; with `expect`, it must be that file. Returns the
    /// file's identity.
    pub fn hard_link(
        &self,
        existing: &str,
        rel: &str,
        expect: Option<FileId>,
    ) -> io::Result<FileId> {
        let fd = self.openat(existing, libc::O_PATH | libc::O_NOFOLLOW, 0)?;
        let file = File::from(fd);
        let m = file.metadata()?;
        if !m.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{existing}: not a regular file, so not linked"),
            ));
        }
        let id = FileId::of(&file)?;
        if expect.is_some_and(|want| want != id) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{existing}: replaced since it was committed, so not linked"),
            ));
        }
        let (parent, name) = self.parent(rel)?;
        match stat_at(&parent, &name) {
            Ok(there) if there == id => return Ok(id),
            Ok(_) => self.unlink(rel)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let by_fd = cstr(&format!("/proc/self/fd/{}", file.as_raw_fd()))?;
        // SAFETY: both names are NUL-terminated; linkat reads them only.
        // Following the /proc link names the open file itself.
        let rc = unsafe {
            libc::linkat(
                libc::AT_FDCWD,
                by_fd.as_ptr(),
                parent.as_raw_fd(),
                name.as_ptr(),
                libc::AT_SYMLINK_FOLLOW,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(id)
    }

    /// Remove the empty directory `rel` beneath the root.
    pub fn remove_dir(&self, rel: &str) -> io::Result<()> {
        let (parent, name) = self.parent(rel)?;
        // SAFETY: `name` is NUL-terminated; unlinkat reads it only.
        let rc = unsafe { libc::unlinkat(parent.as_raw_fd(), name.as_ptr(), libc::AT_REMOVEDIR) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Remove the file `rel` beneath the root (not following a final symlink).
    pub fn unlink(&self, rel: &str) -> io::Result<()> {
        let (parent, name) = self.parent(rel)?;
        // SAFETY: `name` is NUL-terminated; unlinkat reads it only.
        let rc = unsafe { libc::unlinkat(parent.as_raw_fd(), name.as_ptr(), 0) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// The identity of `name` in `dir`, not following a symlink.
fn stat_at(dir: &OwnedFd, name: &CString) -> io::Result<FileId> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: `name` is NUL-terminated and `st` a writable stat buffer that
    // outlives the call.
    let rc = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstatat returned 0, so it filled the buffer.
    let st = unsafe { st.assume_init() };
    Ok(FileId {
        dev: st.st_dev,
        ino: st.st_ino,
    })
}

fn replaced(rel: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        Refusal(format!(
            "{rel}: refused, the name now holds another file than the one this session wrote"
        )),
    )
}

trait DirFlags {
    fn custom_flags_dir(&mut self) -> &mut Self;
}

impl DirFlags for std::fs::OpenOptions {
    fn custom_flags_dir(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
    }
}
