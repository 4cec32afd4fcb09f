//! A window of per-entry state for the entries a push adds after its
//! manifest (a streamed push's later windows, a follow's): slots for the
//! entries `[base, base + len)`, numbered as the session numbers them.
//! Entries are pushed in order; once every entry below some index is
//! settled (acknowledged, refused, held, dropped, or no file), the base
//! advances past them and their slots are dropped: what is kept is what
//! is in flight and not yet acknowledged, not the tree.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};

use crate::datapath::beneath::FileId;

/// Entries added and not yet settled, at most, unless
/// `URMOVE_STREAM_WINDOW` says otherwise (tests): a streamed push's walk
/// waits beyond (the sender's memory is bounded by this, not the tree).
pub(crate) const UNSETTLED_MAX: usize = 256 * 1024;

/// [`UNSETTLED_MAX`], or (tests) `URMOVE_STREAM_WINDOW` entries (at least
/// one).
pub(crate) fn unsettled_max() -> usize {
    std::env::var("URMOVE_STREAM_WINDOW")
        .ok()
        .and_then(|n| n.parse::<usize>().ok())
        .map_or(UNSETTLED_MAX, |n| n.max(1))
}

/// See the module.
#[derive(Debug)]
pub(crate) struct Window<T> {
    base: usize,
    slots: VecDeque<T>,
}

impl<T> Window<T> {
    /// An empty window whose first entry will be `base`.
    pub(crate) fn new(base: usize) -> Self {
        Window {
            base,
            slots: VecDeque::new(),
        }
    }

    /// The first entry still kept.
    pub(crate) fn base(&self) -> usize {
        self.base
    }

    /// The entry the next push takes.
    pub(crate) fn end(&self) -> usize {
        self.base + self.slots.len()
    }

    /// Entries kept.
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Entry `i`'s slot, unless it was never pushed or is settled and
    /// dropped.
    pub(crate) fn get(&self, i: usize) -> Option<&T> {
        self.slots.get(i.checked_sub(self.base)?)
    }

    pub(crate) fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        self.slots.get_mut(i.checked_sub(self.base)?)
    }

    /// The next entry's slot: returns its index.
    pub(crate) fn push(&mut self, slot: T) -> usize {
        self.slots.push_back(slot);
        self.end() - 1
    }

    /// Drop the slots of the entries below `upto` (the base moves up to
    /// it, never back, never past the end).
    pub(crate) fn retire(&mut self, upto: usize) {
        let n = upto.saturating_sub(self.base).min(self.slots.len());
        self.slots.drain(..n);
        self.base += n;
    }

    /// Drop the front slots below `upto` for as long as `settled` says
    /// so: returns the new base.
    pub(crate) fn retire_while(&mut self, upto: usize, settled: impl Fn(&T) -> bool) -> usize {
        while self.base < upto && self.slots.front().is_some_and(&settled) {
            self.slots.pop_front();
            self.base += 1;
        }
        self.base
    }

    /// Every slot kept, with its entry.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (usize, &T)> {
        let base = self.base;
        self.slots
            .iter()
            .enumerate()
            .map(move |(k, s)| (base + k, s))
    }
}

/// One entry a push added after its manifest: its name, whether it is a
/// file, and its source with its identity (for the lanes to open it).
#[derive(Debug)]
pub(crate) struct AddedEntry {
    pub(crate) path: String,
    pub(crate) file: bool,
    pub(crate) source: PathBuf,
    pub(crate) id: Option<FileId>,
}

/// The entries a push adds after the manifest's `base` (a follow's, or a
/// streamed push's later windows): the streamer or follower pushes them,
/// the lanes open them, and once settled they are dropped
/// ([`retire`](Self::retire)). The names of those skipped or refused are
/// kept for the report (exceptions, few).
#[derive(Debug)]
pub(crate) struct Added {
    pub(crate) base: usize,
    list: RwLock<Window<AddedEntry>>,
    /// Files added.
    files: AtomicU64,
    /// The name of each added entry skipped, refused or rejected, and
    /// whether it is a file.
    named: Mutex<HashMap<u32, (String, bool)>>,
}

impl Default for Added {
    fn default() -> Self {
        Added::new(0)
    }
}

impl Added {
    pub(crate) fn new(base: usize) -> Added {
        Added {
            base,
            list: RwLock::new(Window::new(base)),
            files: AtomicU64::new(0),
            named: Mutex::default(),
        }
    }

    fn list(&self) -> std::sync::RwLockReadGuard<'_, Window<AddedEntry>> {
        self.list.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Entry `i`'s source and identity, if it was added and is not
    /// settled yet.
    pub(crate) fn source(&self, i: usize) -> Option<(PathBuf, Option<FileId>)> {
        let list = self.list();
        let a = list.get(i)?;
        Some((a.source.clone(), a.id))
    }

    /// Entries added so far (settled or not).
    pub(crate) fn len(&self) -> usize {
        self.end() - self.base
    }

    /// The index the next entry added takes.
    pub(crate) fn end(&self) -> usize {
        self.list().end()
    }

    /// Files added so far.
    pub(crate) fn files(&self) -> u64 {
        self.files.load(Ordering::Acquire)
    }

    /// Add `a`: returns its index.
    pub(crate) fn push(&self, a: AddedEntry) -> usize {
        if a.file {
            self.files.fetch_add(1, Ordering::AcqRel);
        }
        self.list.write().unwrap_or_else(|p| p.into_inner()).push(a)
    }

    /// The entries below `upto` are settled: their sources are dropped.
    pub(crate) fn retire(&self, upto: usize) {
        let mut list = self.list.write().unwrap_or_else(|p| p.into_inner());
        if upto > list.base() {
            list.retire(upto);
        }
    }

    /// Keep entry `i`'s name for the report (it is skipped, refused or
    /// rejected): call before it is settled.
    pub(crate) fn remember(&self, i: u32) {
        let Some(named) = self
            .list()
            .get(i as usize)
            .map(|a| (a.path.clone(), a.file))
        else {
            return;
        };
        self.named
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(i, named);
    }

    /// Entry `i`'s name and whether it is a file, while it is kept or
    /// when it was remembered.
    pub(crate) fn name(&self, i: u32) -> Option<(String, bool)> {
        if let Some(a) = self.list().get(i as usize) {
            return Some((a.path.clone(), a.file));
        }
        let named = self.named.lock().unwrap_or_else(|p| p.into_inner());
        named.get(&i).cloned()
    }
}

/// Drop what the added entries settled so far needed, in the
/// acknowledgements, the work and the entries alike: returns the first
/// entry not settled.
pub(crate) fn retire(acks: &super::ledger::Acks, work: &super::work::Work, added: &Added) -> usize {
    let base = acks.retire();
    work.retire(base);
    added.retire(base);
    base
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_base_advances_only_past_settled_entries_and_keeps_the_numbering() {
        let mut w: Window<bool> = Window::new(100);
        assert_eq!((w.base(), w.end()), (100, 100));
        for settled in [true, true, false, true, false] {
            w.push(settled);
        }
        assert_eq!(w.end(), 105);
        assert_eq!(w.get(99), None, "below the manifest's end: none");
        assert_eq!(w.get(102), Some(&false));
        assert_eq!(w.get(105), None, "not pushed yet");
        // Entries 100 and 101 are settled, 102 is not: it holds the base.
        assert_eq!(w.retire_while(101, |s| *s), 101, "not past upto");
        assert_eq!(w.retire_while(usize::MAX, |s| *s), 102);
        assert_eq!(w.len(), 3);
        assert_eq!(w.get(101), None, "dropped once settled");
        assert_eq!(w.get(103), Some(&true), "indexes keep their entry");
        *w.get_mut(102).unwrap() = true;
        assert_eq!(w.retire_while(usize::MAX, |s| *s), 104);
        assert_eq!(w.iter().map(|(i, _)| i).collect::<Vec<_>>(), vec![104]);
        // Another table retires up to what this one settled.
        let mut other: Window<u8> = Window::new(100);
        for k in 0..6 {
            other.push(k);
        }
        other.retire(104);
        assert_eq!((other.base(), other.get(104)), (104, Some(&4)));
        other.retire(90);
        assert_eq!(other.base(), 104, "never back");
        other.retire(1000);
        assert_eq!(
            (other.base(), other.end()),
            (106, 106),
            "never past the end"
        );
        assert_eq!(other.push(9), 106);
    }
}
