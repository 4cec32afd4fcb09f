//! The book's part of a streamed push (protocol 14, `REQ_STREAM`): the
//! rest of the sender's walk comes as windows of entries of any kind while
//! the data flows, each prepared beneath the root as the manifest's was
//! (`Incoming::prepare`): directories, symlinks and special files made,
//! empty files finished, what is in the way refused. What a window holds
//! already counts only by its stamp (unchanged files, not read again); a
//! part left by an earlier run is started over, for no verdict of the
//! source's comes on it.

use crate::protocol::control::{ErrorCode, HaveItem};
use crate::protocol::manifest::{check_entry, Entry};

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

impl Book<'_> {
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
        let paths = self
            .paths
            .get_or_insert_with(|| manifest.iter().map(|e| e.path.clone()).collect());
        for e in &entries {
            check_entry(e).map_err(|err| bad(format!("{}: {err}", e.path)))?;
            if e.growing {
                return Err(bad(format!(
                    "{}: a growing file in a streamed push",
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
            self.files.push(f);
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
        self.tally.added.append(&mut inc.entries);
        Ok(Window {
            upto: self.files.len() as u32,
            done,
            have: have.collect(),
            refused,
        })
    }
}
