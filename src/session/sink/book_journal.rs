//! The book's journals: what is written of files still arriving, made
//! durable and named in each file's journal at most every interval and
//! within the journal budget, and all at once when a session stops early.

use std::time::{Duration, Instant};

use super::book::{Book, Job};
use super::commit::JournalJob;
use super::file::FileState;
use super::journal::Journal;

/// A file with new blocks gets its journal rewritten this often, at most.
pub(super) const JOURNAL_INTERVAL: Duration = Duration::from_secs(1);

impl<'s> Book<'s> {
    /// Journal what is written of files still arriving, each at most every
    /// [`JOURNAL_INTERVAL`], and only once the blocks written since the last
    /// journal cover at least as many bytes as a journal takes (so journal
    /// writes never outgrow the data: a huge sparse file fed a block at a
    /// time is not a journal amplifier).
    pub(in crate::session) fn sweep_journals(&mut self) {
        let now = Instant::now();
        if now.duration_since(self.last_sweep) < JOURNAL_INTERVAL / 4 {
            return;
        }
        self.last_sweep = now;
        let mut dirty = std::mem::take(&mut self.dirty);
        dirty.retain(|&index| self.journal(index, now));
        self.dirty.extend(dirty);
    }

    /// Journal file `index` if it is due; whether it stays dirty.
    pub(super) fn journal(&mut self, index: usize, now: Instant) -> bool {
        // (A file committed since was let go: nothing to journal.)
        let Some(f) = self.files[index].as_mut() else {
            return false;
        };
        if f.state != FileState::Receiving || !f.dirty {
            return false;
        }
        if f.journaling || now.duration_since(f.last_journal) < JOURNAL_INTERVAL {
            return true;
        }
        // Never more journal than what came for the file, and within the
        // process's journal budget.
        let len = super::journal::encoded_len(&f.id, &f.written);
        if f.wire_since_journal < len || !self.rules.journal_budget.take(len) {
            return true;
        }
        let Some(part) = f.part.as_ref().and_then(|p| p.try_clone().ok()) else {
            return true;
        };
        self.send_journal(index, part, now);
        false
    }

    /// Hand file `index`'s journal, of the blocks written now, to a
    /// finalizer, which syncs `part` (its part) first.
    pub(super) fn send_journal(&mut self, index: usize, part: std::fs::File, now: Instant) {
        let f = self.files[index]
            .as_mut()
            .expect("journaled entries are files");
        let j = Journal {
            id: f.id,
            part: f.part_id.expect("written files are claimed"),
            digest: f.digest,
            blocks: f.written.clone(),
            generation: f.generation,
            tag: f.part_tag,
        };
        (f.dirty, f.journaling, f.last_journal, f.wire_since_journal) = (false, true, now, 0);
        self.pending += 1;
        let _ = self.jobs.send(Job::Journal(JournalJob {
            index: index as u32,
            part,
            final_rel: f.final_rel.clone(),
            journal_rel: f.journal_rel(),
            journal: j,
            secret: self.rules.secret.clone(),
        }));
    }

    /// The receive is over before its files are (the sender stopped, or
    /// went): every file with written blocks its journal does not name
    /// yet is journaled now, whatever the interval and the budget, so what
    /// was verified is kept for the next run. A part closed while it
    /// waited is opened again (by name, only while it holds the file).
    pub(in crate::session) fn journal_all_now(&mut self) {
        let now = Instant::now();
        for index in 0..self.files.len() {
            let Some(f) = self.files[index].as_ref() else {
                continue;
            };
            if f.state != FileState::Receiving || !f.dirty || f.journaling {
                continue;
            }
            let part = match &f.part {
                Some(p) => p.try_clone().ok(),
                None => self
                    .root
                    .open_read(&f.part_rel())
                    .ok()
                    .filter(|p| crate::datapath::beneath::FileId::of(p).ok() == f.part_id),
            };
            if let Some(part) = part {
                self.send_journal(index, part, now);
            }
        }
    }
}
