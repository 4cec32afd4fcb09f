//! Why a source's entry is not sent now (it is then skipped, with this as
//! its reason): it vanished, was replaced or changed since the scan, or
//! could not be read. Told to the user as text, decided on as a value.

/// Why entry is not sent; its text is the skip's reason.
#[derive(Debug, thiserror::Error)]
pub enum Unsendable {
    #[error("stat: {0}")]
    Stat(#[source] std::io::Error),
    #[error("not a regular file now (replaced since the scan)")]
    NotRegularNow,
    #[error("replaced by another file since the scan")]
    Replaced,
    #[error("vanished since the scan")]
    Vanished,
    #[error("replaced by a symlink since the scan")]
    Symlinked,
    #[error("not a regular file (a FIFO or socket)")]
    Special,
    #[error("cannot be opened: {0}")]
    Open(#[source] std::io::Error),
    #[error("changed during the send (size {was} -> {now}); send it again when it is complete")]
    Resized { was: u64, now: u64 },
    #[error("changed during the send (modified); send it again when it is complete")]
    Modified,
    #[error("changed during the send (its ctime moved: written or changed, its mtime put back); send it again")]
    Touched,
    #[error("changed behind the copy (a writer rewrote bytes already sent); send it again")]
    Rewritten,
    #[error("read again at its end: {0}")]
    Reread(#[source] std::io::Error),
    #[error("read again at its end: no thread: {0}")]
    NoThread(#[source] std::io::Error),
    #[error("entry {0} is no source")]
    NoSource(usize),
}

impl Unsendable {
    /// Why opening a source failed, from its error.
    pub fn of_open(e: std::io::Error) -> Unsendable {
        match e.raw_os_error() {
            Some(libc::ENOENT) => Unsendable::Vanished,
            Some(libc::ELOOP) => Unsendable::Symlinked,
            Some(libc::ENXIO) => Unsendable::Special,
            _ => Unsendable::Open(e),
        }
    }
}
