//! A receive's end: every file committed or skipped, further names
//! (`-H`) linked, directories synced and given their mode and mtime.

use std::os::fd::AsFd;

use crate::datapath::beneath::FileId;
use crate::protocol::control::ErrorCode;
use crate::protocol::manifest::EntryKind;

use super::file::FileState;
use super::incoming::{join, mtime_of, Incoming};
use crate::session::link::refused::{Refused, Why};
use crate::session::SessionError;

/// Directories synced together at the end (each open meanwhile).
const DIRS_AT_ONCE: usize = 32;

/// What a receive's end found: files and bytes committed, and the entries
/// refused while finishing (see `Incoming::finish`).
pub(crate) struct Finished {
    pub(crate) files: u64,
    pub(crate) bytes: u64,
    pub(crate) refused: Vec<Refused>,
}

impl Incoming {
    /// Check that every file is committed (or skipped), then give
    /// directories their mode and mtime (adding files changed them), never
    /// through a link and never to the root itself. Returns (files, bytes)
    /// and the entries refused here while finishing (a further name whose
    /// path another hand changed), which are skipped, not the session's end.
    pub(crate) fn finish(&mut self) -> Result<Finished, SessionError> {
        let file_count = self.file_count();
        if !self.rejected.is_empty() {
            let names: Vec<&str> = self
                .rejected
                .iter()
                .take(5)
                .filter_map(|&i| self.files.get(i as usize)?.as_deref())
                .map(|f| f.final_rel.as_str())
                .collect();
            return Err(SessionError::local(
                ErrorCode::Io,
                format!(
                    "{} files differ from the sender's digest and were not committed: {}",
                    self.rejected.len(),
                    names.join(", ")
                ),
            ));
        }
        let skipped = self
            .files
            .iter()
            .flatten()
            .filter(|f| f.state == FileState::Skipped)
            .count();
        if self.done_files + skipped < file_count {
            let lost = if self.lost_streams.is_empty() {
                String::new()
            } else {
                format!(" (lost: {})", self.lost_streams.join("; "))
            };
            return Err(SessionError::local(
                ErrorCode::Io,
                format!(
                    "the data streams ended with {} of {file_count} files incomplete{lost}",
                    file_count - self.done_files - skipped
                ),
            ));
        }
        let refused = self.make_hard_links()?;
        self.skipped.extend(refused.iter().cloned());
        self.sync_dirs()?;
        self.settle_dirs();
        Ok(Finished {
            files: self.done_files as u64,
            bytes: self.bytes,
            refused,
        })
    }

    /// Give committed files their further names (`-H`): each link names
    /// the file this session committed or found held at its first name,
    /// checked by identity, through no symlink, and the file is stamped
    /// anew after (see `commit::Relink`). A first name the sender skipped
    /// gets no links. A name that cannot be made for its own entry's fault
    /// (a link planted in its path) is refused alone.
    pub(super) fn make_hard_links(&self) -> Result<Vec<Refused>, SessionError> {
        let by_path: std::collections::HashMap<&str, usize> = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.path.as_str(), i))
            .collect();
        let mut further: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
        for (i, e) in self.entries.iter().enumerate() {
            let first = e.link.as_deref().unwrap_or_default();
            if let (EntryKind::HardLink, Some(&at)) = (e.kind, by_path.get(first)) {
                further.entry(at).or_default().push(i);
            }
        }
        let mut refused = Vec::new();
        for (first, links) in further {
            let Some(f) = self.files[first].as_ref() else {
                continue;
            };
            let expect = match f.state {
                FileState::Done => f.part_id.or(f.held_seen.map(|(id, _)| id)),
                FileState::HeldComplete => f.held_seen.map(|(id, _)| id),
                _ => continue,
            };
            let linked = |&i: &usize| {
                let rel = join(&self.dest, &self.entries[i].path);
                let there = self.root.symlink_metadata(&rel).ok();
                there.is_some_and(|m| Some(FileId::of_metadata(&m)) == expect)
            };
            if expect.is_some() && links.iter().all(linked) {
                continue;
            }
            let secret = &self.rules.secret;
            let held = super::commit::Relink::hold(&self.root, &f.final_rel, expect, secret);
            for i in links {
                self.link_one(i, &f.final_rel, expect, &mut refused)?;
            }
            if let Some(h) = held {
                h.settle(&f.final_rel, secret);
            }
        }
        Ok(refused)
    }

    /// Entry `i`'s name made a further name of `first` (`expect`), or, for
    /// its own entry's fault, refused.
    pub(super) fn link_one(
        &self,
        i: usize,
        first: &str,
        expect: Option<FileId>,
        refused: &mut Vec<Refused>,
    ) -> Result<(), SessionError> {
        let rel = join(&self.dest, &self.entries[i].path);
        let linked = self
            .root
            .hard_link(first, &rel, expect)
            .map_err(|err| SessionError::io(format!("linking {rel} to {first}"), err));
        match linked {
            Err(err) if err.is_entry_fault() => {
                refused.push(Refused::entry(
                    i as u32,
                    Why::fault(format!("refused here: {err}")),
                ));
                Ok(())
            }
            other => other.map(|_| ()),
        }
    }

    /// Make the renames durable: sync every directory that gained an entry
    /// (once each, all at once: see `datapath::fsyncs`) before the summary
    /// says the session is done.
    pub(crate) fn sync_dirs(&self) -> Result<(), SessionError> {
        let mut dirs: std::collections::BTreeSet<&str> = std::collections::BTreeSet::new();
        let rels: Vec<String> = self
            .entries
            .iter()
            .map(|e| join(&self.dest, &e.path))
            .collect();
        for (rel, e) in rels.iter().zip(&self.entries) {
            dirs.insert(rel.rsplit_once('/').map_or(".", |(d, _)| d));
            // (A streamed push keeps only its directories' entries.)
            if e.kind == EntryKind::Dir {
                dirs.insert(rel);
            }
        }
        let dirs: Vec<&str> = dirs.into_iter().collect();
        // A few dozen open at a time: a tree may have many.
        dirs.chunks(DIRS_AT_ONCE).try_for_each(|chunk| {
            let opened: Vec<(&str, std::fs::File)> = chunk
                .iter()
                .filter_map(|&d| {
                    let flags = libc::O_RDONLY | libc::O_DIRECTORY;
                    self.root.open_file(d, flags, 0).ok().map(|f| (d, f))
                })
                .collect();
            let fds: Vec<_> = opened.iter().map(|(_, f)| f.as_fd()).collect();
            let synced = crate::datapath::fsyncs::sync_all(&fds);
            opened.iter().zip(synced).try_for_each(|((d, _), r)| {
                r.map_err(|e| SessionError::io(format!("syncing directory {d}"), e))
            })
        })
    }

    /// Directories' mode and mtime, deepest first, through no symlink and
    /// never on the root itself (whatever a planted link made it look like).
    pub(crate) fn settle_dirs(&self) {
        use std::os::unix::fs::PermissionsExt;
        let root_id = self.root.id().ok();
        for e in self
            .entries
            .iter()
            .rev()
            .filter(|e| e.kind == EntryKind::Dir)
        {
            let rel = join(&self.dest, &e.path);
            let Ok(d) = self.root.open_file(
                &rel,
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
                0,
            ) else {
                continue;
            };
            if root_id.is_none() || FileId::of(&d).ok() == root_id {
                continue;
            }
            let _ = self.rules.dress(e).put_on(&d);
            let _ = d.set_permissions(std::fs::Permissions::from_mode(self.rules.mode(e.mode)));
            let _ = d.set_times(super::commit::mtime_now_accessed(mtime_of(e)));
        }
    }
}
