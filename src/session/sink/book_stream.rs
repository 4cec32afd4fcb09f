//! The book's part of a streamed push (protocol 14, `REQ_STREAM`): the
//! rest of the sender's walk comes as windows of entries of any kind while
//! the data flows, each prepared beneath the root as the manifest's was
//! (`Incoming::prepare`): directories, symlinks and special files made,
//! empty files finished, what is in the way refused. What a window holds
//! already counts only by its stamp (unchanged files, not read again); a
//! part left by an earlier run is started over, for no verdict of the
//! source's comes on it.

use crate::protocol::control::{ErrorCode, HaveItem};
use crate::protocol::manifest::{check_entry, Entry, EntryKind};

use super::book::Book;
use super::file::FileState;
use super::incoming::{Destination, Incoming, Preparing};
use super::rules::Resume;
use crate::session::link::refused::Refused;
use crate::session::SessionError;

/// What a window's preparation tells the sender before its `Admitted`.
#[derive(Debug, Default)]
pub(in crate::session) struct Window {
    /// Entries now (what the sender may send from, below).
    pub(in crate::session) upto: u32,
    /// Files finished while prepared (empty ones): (entry, digest).
    pub(in crate::session) done: Vec<(u32, u64)>,
    /// Files held unchanged by their stamp: nothing of them is sent.
    pub(in crate::session) have: Vec<HaveItem>,
    /// Entries this side will not create.
    pub(in crate::session) refused: Vec<Refused>,
}

/// `item`, its entry numbered `shift` further.
fn shifted(item: HaveItem, shift: u32) -> HaveItem {
    match item {
        HaveItem::Complete { file_index, digest } => HaveItem::Complete {
            file_index: file_index + shift,
            digest,
        },
        HaveItem::Unchanged { file_index, digest } => HaveItem::Unchanged {
            file_index: file_index + shift,
            digest,
        },
        HaveItem::Partial {
            file_index,
            digest,
            ranges,
        } => HaveItem::Partial {
            file_index: file_index + shift,
            digest,
            ranges,
        },
    }
}

/// Entries of a streamed push in flight (admitted, not settled) at most:
/// the receiver prepares no further window beyond, so its memory stays
/// flat however large the tree (the sender waits for `Admitted`).
pub(crate) const IN_FLIGHT_MAX: usize = 65_536;

/// [`IN_FLIGHT_MAX`], or `URMOVE_STREAM_IN_FLIGHT` where set (tests show
/// the bound with a small tree).
fn in_flight_max() -> usize {
    static MAX: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *MAX.get_or_init(|| {
        std::env::var("URMOVE_STREAM_IN_FLIGHT")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(IN_FLIGHT_MAX)
    })
}

impl Book<'_> {
    /// Whether a streamed push's next window waits: too many entries are
    /// in flight (see [`IN_FLIGHT_MAX`]).
    pub(in crate::session) fn window_waits(&self) -> bool {
        self.settled.on && self.files.len() - self.settled.base() >= in_flight_max()
    }

    /// A window of a streamed push, numbered from `first` (the count so
    /// far): each entry with a path the manifest rules allow and no entry
    /// has, prepared as the manifest's (see the module).
    pub(in crate::session) fn add_window(
        &mut self,
        first: u32,
        entries: Vec<Entry>,
    ) -> Result<Window, SessionError> {
        let bad = |m: String| SessionError::local(ErrorCode::Malformed, m);
        if !self.adding || first as usize != self.files.len() {
            return Err(bad(format!(
                "entries added from {first}, where the session has {} and adds no more",
                self.files.len(),
            )));
        }
        let manifest = self.manifest;
        // Files let go: a name is checked against its window's (and the
        // names claimed in flight, the daemon's `admit`), not every name
        // the session ever had (a name settled may come again: as a later
        // session's, it replaces what was committed, whole).
        let mut window = std::collections::HashSet::new();
        let paths = match self.settled.on && !self.settled.every_entry {
            true => &mut window,
            false => self
                .paths
                .get_or_insert_with(|| manifest.iter().map(|e| e.path.clone()).collect()),
        };
        for e in &entries {
            check_entry(e).map_err(|err| bad(format!("{}: {err}", e.path)))?;
            if e.growing || e.kind == EntryKind::HardLink {
                return Err(bad(format!(
                    "{}: a growing file or a hard link in a streamed push",
                    e.path
                )));
            }
            if !paths.insert(e.path.clone()) {
                return Err(bad(format!("{}: named twice", e.path)));
            }
        }
        let root = self
            .root
            .try_clone()
            .map_err(|e| SessionError::io("root", e))?;
        let resume = self.resume.map(|r| Resume {
            stamps_only: true,
            ..r
        });
        let at = Destination {
            root,
            dest: self.dest.to_string(),
        };
        let how = Preparing {
            block: self.block,
            direct: self.direct,
            rules: self.rules.clone(),
            resume,
        };
        let made = std::mem::take(self.made);
        let mut inc = Incoming::prepare_from(at, entries, how, made, &mut || {})?;
        *self.made = std::mem::take(&mut inc.made);
        // What it holds unchanged is done: no verdict comes on it.
        inc.apply_verdict(&std::collections::HashSet::new())?;
        self.tally.done_files += inc.done_files;
        for f in std::mem::take(&mut inc.files) {
            let receiving = f.as_ref().is_some_and(|f| f.state == FileState::Receiving);
            self.remaining += usize::from(receiving);
            let done = f.as_ref().is_some_and(|f| f.state == FileState::Done);
            self.files.push(f);
            if done {
                // Held unchanged, or empty and committed: let go.
                let at = self.files.len() - 1;
                self.settled.let_go(self.files, at);
            }
        }
        let refused: Vec<Refused> = inc
            .take_refused()
            .into_iter()
            .map(|r| Refused {
                entry: r.entry + first,
                ..r
            })
            .collect();
        self.tally.skipped.extend(refused.iter().cloned());
        let done: Vec<(u32, u64)> = inc
            .take_done_at_start()
            .into_iter()
            .map(|(i, d)| (i + first, d))
            .collect();
        let have = inc.take_have().into_iter().map(|h| shifted(h, first));
        if self.settled.on && !self.settled.every_entry {
            // Its files are let go once committed; a rejected one is
            // named by its file (see `Incoming::finish`).
            inc.entries.retain(|e| e.kind == EntryKind::Dir);
        }
        self.tally.added.append(&mut inc.entries);
        Ok(Window {
            upto: self.files.len() as u32,
            done,
            have: have.collect(),
            refused,
        })
    }
}

/// The files of a streamed push (protocol 14) let go once committed, so a
/// receiver's memory grows by a bit per entry, not by its file's state:
/// one bit an entry. A frame that comes again for one (a lost stream's,
/// sent again) is dropped as a block already seen. Other sessions let go
/// of nothing (`-H` links name their first file's state at the end).
#[derive(Debug, Default)]
pub(crate) struct Settled {
    /// Whether files are let go.
    pub(crate) on: bool,
    /// Every entry is kept to the end (`--delete` prunes what none names);
    /// else a window keeps only its directories (their mode and mtime are
    /// set at the end).
    pub(crate) every_entry: bool,
    bits: Vec<u64>,
    count: usize,
    /// Every entry below is settled (see [`Settled::advance`]).
    base: usize,
}

impl Settled {
    /// Whether file `i` was committed and let go.
    pub(crate) fn has(&self, i: usize) -> bool {
        self.bits
            .get(i / 64)
            .is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    /// Let file `i` of `files` go (if files are let go here).
    pub(crate) fn let_go(&mut self, files: &mut [Option<Box<super::file::RecvFile>>], i: usize) {
        if !self.on || files.get(i).is_none_or(Option::is_none) {
            return;
        }
        files[i] = None;
        if self.bits.len() <= i / 64 {
            self.bits.resize(i / 64 + 1, 0);
        }
        self.bits[i / 64] |= 1 << (i % 64);
        self.count += 1;
    }

    /// Entries below which all are settled.
    pub(crate) fn base(&self) -> usize {
        self.base
    }

    /// Files let go.
    pub(crate) fn count(&self) -> usize {
        self.count
    }

    /// The entries below which every one of `files` is settled (no file,
    /// let go, given up or rejected), if that moved since last asked.
    pub(crate) fn advance(&mut self, files: &[Option<Box<super::file::RecvFile>>]) -> Option<u32> {
        use super::file::FileState::{Done, Rejected, Skipped};
        if !self.on {
            return None;
        }
        let from = self.base;
        while let Some(f) = files.get(self.base) {
            match f {
                Some(f) if !matches!(f.state, Done | Skipped | Rejected) => break,
                _ => self.base += 1,
            }
        }
        (self.base > from).then_some(self.base as u32)
    }
}
