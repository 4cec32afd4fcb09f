//! What this side holds before the data (resume): files held complete
//! (by their stamp or their content), parts continued from their journals,
//! the source's verdict on them, the space the rest needs, and the counts
//! a run reports.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::datapath::beneath::FileId;
use crate::protocol::control::{HaveItem, Message};
use crate::protocol::frame::FrameKey;

use super::file::{FileState, HeldFile, RecvFile};
use super::incoming::{no_room, Incoming};
use super::journal::{self, Identity};
use super::manifest::covered;
use super::part::{claim, is_own_file, lock_claims};
use super::pieces::{piece_generation, pieces_mark, PIECES_XATTR};
use super::rules::Resume;
use crate::session::link::refused::Refused;
use crate::session::SessionError;

/// How long a session waits, in all, for parts whose journals it continues
/// while another session holds them: one whose client was killed a moment
/// ago holds its parts until the daemon has noticed and ended it.
pub(super) const CLAIM_WAIT: Duration = Duration::from_secs(10);
/// How often a waiting claim looks again.
const CLAIM_POLL: Duration = Duration::from_millis(20);

impl Incoming {
    /// Claim part `id` (at `rel`) to continue it. Held by another session,
    /// it is waited for while this session's [`CLAIM_WAIT`] lasts (a
    /// session that ended lets its parts go at once), then busy; `tick`
    /// beats while it waits.
    pub(super) fn claim_held_part(
        &self,
        rel: &str,
        id: FileId,
        tick: &mut dyn FnMut(),
    ) -> Result<(), SessionError> {
        loop {
            let left = self.claim_wait_ms.load(Ordering::Relaxed);
            match claim(&self.rules, rel, id) {
                Err(SessionError::Contended(_)) if left > 0 => {
                    let step = (CLAIM_POLL.as_millis() as u64).min(left);
                    std::thread::sleep(Duration::from_millis(step));
                    tick();
                    self.claim_wait_ms.fetch_sub(step, Ordering::Relaxed);
                }
                other => return other,
            }
        }
    }

    /// `f`'s final file when it is complete already: unchanged when its
    /// stamp (ours, on this very file, for this size and mtime) says
    /// nothing touched it since its commit for this session's owner;
    /// otherwise read again now, and
    /// complete when its bytes have the stamped digest, or with
    /// `--checksum` for any file of the right size.
    pub(super) fn held_complete(
        &self,
        f: &RecvFile,
        r: Resume,
        tick: &mut dyn FnMut(),
    ) -> Option<HeldFile> {
        use std::os::unix::fs::MetadataExt;
        let file = self.root.open_read(&f.final_rel).ok()?;
        let m = file.metadata().ok()?;
        if !m.is_file() || m.len() != f.size {
            return None;
        }
        let named = super::stamp::Named {
            file: &file,
            rel: &f.final_rel,
        };
        let ours = super::stamp::stamped(named, &f.id, &self.rules.secret);
        // One name only, or (`-H`) the names the manifest gives it on a
        // file our stamp proves we committed here: any other name is
        // someone else's, and no file of ours to keep.
        let names = self.names.get(&f.final_rel).copied().unwrap_or(1);
        // A FUSE filesystem may still count a name just removed.
        let nlink = match m.nlink() {
            1 => 1,
            _ => crate::datapath::sys::fresh_links_and_ctime(&file).ok()?.0,
        };
        if nlink != 1 && (ours.is_none() || nlink != names) {
            return None;
        }
        let stamp = match r.checksum {
            true => None,
            false => Some(ours?),
        };
        let seen = (FileId::of(&file).ok()?, (m.ctime(), m.ctime_nsec()));
        let ours = |s: &super::stamp::Stamped| super::stamp::owned_by(&s.owner, self.rules.owner);
        // Untouched, and as the manifest would make it (a mode or owner
        // changed within the stamp's settling time shows here).
        let dressed = m.mode() & 0o7777 == f.mode
            && f.dress
                .owner
                .is_none_or(|(u, g)| (m.uid(), m.gid()) == (u, g));
        if let Some(s) = stamp.filter(|s| s.untouched && ours(s) && dressed) {
            return Some(HeldFile::Unchanged(s.digest));
        }
        if r.stamps_only {
            return None;
        }
        let on_disk =
            crate::session::plan::digest::content_digests(&file, f.size, &r.key, tick).ok()?;
        stamp
            .is_none_or(|s| s.digest == on_disk.plain)
            .then_some(HeldFile::Read(on_disk, seen))
    }

    /// Continue `f`'s part file from its journal, when both are ours and
    /// agree, and the blocks the journal names, read again now, have the
    /// digest it recorded; claims the part and returns the blocks' digest
    /// keyed with `key`. Otherwise (`None`) the file starts over.
    pub(super) fn continue_part(
        &self,
        f: &mut RecvFile,
        key: &FrameKey,
        tick: &mut dyn FnMut(),
    ) -> Result<Option<u64>, SessionError> {
        let now = f.id;
        let accept = |j: &Identity| j.holds_for(&now);
        let Some(mut j) = journal::load(&self.root, &f.journal_rel(), &self.rules.secret, &accept)
        else {
            return Ok(None);
        };
        // A journal of the file while it grew names fewer blocks.
        j.blocks.resize(f.seen.len(), 0);
        j.id = f.id;
        let rel = f.part_rel();
        let Ok(part) = self.root.open_read(&rel) else {
            return Ok(None);
        };
        // The very part the journal names (inode and tag), ours alone (one
        // name, our user), and marked for these very pieces, or for none.
        let own = part.metadata().is_ok_and(|m| is_own_file(&m));
        let mark = crate::datapath::sys::get_xattr(&part, PIECES_XATTR);
        let want = f.piece.map(|p| pieces_mark(f, p).into_bytes());
        if !own || !j.matches(&part) || mark != want {
            return Ok(None);
        }
        // A piece's journal is the one its last writer left only with the
        // generation that writer recorded on the part.
        if f.piece
            .is_some_and(|p| piece_generation(&part, p) != Some(j.generation))
        {
            return Ok(None);
        }
        let ranges = j.ranges();
        let on_disk = crate::session::plan::digest::part_digests(
            &part, f.size, self.block, &ranges, key, tick,
        )
        .ok();
        let Some(on_disk) = on_disk.filter(|d| d.plain == j.digest) else {
            return Ok(None);
        };
        // A piece's part is shared: its range is locked when opened.
        if !self.rules.dry_run && f.piece.is_none() {
            self.claim_held_part(&rel, j.part, tick)?;
        }
        // Opened again (for writing) when its next block comes.
        f.part_id = Some(j.part);
        f.received = covered(&j.blocks, f.size, self.block);
        f.seen = j.blocks.clone();
        f.written = j.blocks;
        f.digest = j.digest;
        f.generation = j.generation;
        f.journal_by = f.piece.map(|_| j.generation);
        f.part_tag = j.tag;
        f.journaled = true;
        // Blocks the journal does not name may hold bytes of an earlier
        // session: a hole frame for one must clear it, not skip it.
        f.stale = true;
        Ok(Some(on_disk.keyed))
    }

    /// Files finished while preparing (empty ones): (entry, digest).
    pub(crate) fn take_done_at_start(&mut self) -> Vec<(u32, u64)> {
        std::mem::take(&mut self.done_at_start)
    }

    /// What this side holds already, for the sender.
    pub(crate) fn take_have(&mut self) -> Vec<HaveItem> {
        std::mem::take(&mut self.have)
    }

    /// Whether the session continues from what this side holds.
    pub(crate) fn resuming(&self) -> bool {
        self.resume.is_some()
    }

    /// Entries this side refused to create.
    pub(crate) fn take_refused(&mut self) -> Vec<Refused> {
        let refused = std::mem::take(&mut self.refused);
        self.skipped.extend(refused.iter().cloned());
        refused
    }

    /// The sender's verdict on what `Have` named: held files and blocks in
    /// `wrong` differ from the sources and are forgotten (sent again); the
    /// rest counts as held (complete files are done).
    pub(crate) fn apply_verdict(&mut self, wrong: &HashSet<u32>) -> Result<(), SessionError> {
        for i in 0..self.files.len() {
            let Some(f) = self.files[i].as_mut() else {
                continue;
            };
            let is_wrong = wrong.contains(&(i as u32));
            match f.state {
                FileState::HeldComplete if is_wrong => {
                    f.state = FileState::Receiving;
                    (f.received, f.digest) = (0, 0);
                }
                FileState::HeldComplete => {
                    f.state = FileState::Done;
                    self.complete_before.push(i as u32);
                    self.done_files += 1;
                    // Read and found right: stamped for this owner, so the
                    // next run need not read it.
                    if !self.unchanged.contains(&(i as u32)) && !self.rules.dry_run {
                        super::commit::settle_held(&self.root, f, &self.rules)?;
                    }
                }
                FileState::Receiving if is_wrong => {
                    // Start over: the part goes (by inode), a new one comes.
                    // A shared part keeps the other pieces, and this one's
                    // journal is replaced under its lock when it is joined
                    // again (`write_own`).
                    if let Some(id) = f.part_id.take().filter(|_| !self.rules.dry_run) {
                        if f.piece.is_none() {
                            let _ = self.root.unlink_file(&f.part_rel(), id);
                            lock_claims(&self.rules).remove(&id);
                            journal::remove(&self.root, &f.journal_rel());
                        }
                    }
                    f.seen.fill(0);
                    f.written.fill(0);
                    (f.received, f.digest, f.journaled, f.stale) = (0, 0, false, false);
                    (f.journal_by, f.own_generation) = (None, false);
                }
                _ => {}
            }
        }
        self.unchanged.retain(|i| !wrong.contains(i));
        Ok(())
    }

    /// Refuse, before any part file exists, files the filesystems under
    /// them cannot hold: per filesystem, the data bytes still to come (each
    /// file's data bytes as the sender counted them, holes needing none,
    /// less what is held of it) against what it has free for this user.
    pub(crate) fn check_space(&self) -> Result<(), SessionError> {
        use std::collections::HashMap;
        use std::os::unix::fs::MetadataExt;
        // st_dev -> (a directory on it, bytes still to come there).
        let mut need: HashMap<u64, (&str, u64)> = HashMap::new();
        // A file's directory -> (its device, the directory standing).
        let mut dev_of: HashMap<&str, (u64, &str)> = HashMap::new();
        for (i, f) in self.files.iter().enumerate() {
            let Some(f) = f.as_ref().filter(|f| f.state == FileState::Receiving) else {
                continue;
            };
            let dir = f.final_rel.rsplit_once('/').map_or("", |(d, _)| d);
            let (dev, dir) = *dev_of.entry(dir).or_insert_with(|| {
                let dir = self.standing(dir);
                let rel = if dir.is_empty() { "." } else { dir };
                (self.root.symlink_metadata(rel).map_or(0, |m| m.dev()), dir)
            });
            // A piece needs its share of the file's data.
            let share =
                u128::from(self.entries[i].data) * u128::from(f.want()) / u128::from(f.size.max(1));
            let data = (share as u64).min(f.want() - f.received.min(f.want()));
            let at = need.entry(dev).or_insert((dir, 0));
            at.1 = at.1.saturating_add(data);
        }
        for (dir, bytes) in need.into_values() {
            let rel = if dir.is_empty() { "." } else { dir };
            let fd = self
                .root
                .openat(rel, libc::O_RDONLY | libc::O_DIRECTORY, 0)
                .map_err(|e| SessionError::io(rel.to_string(), e))?;
            let free = crate::datapath::sys::free_bytes_fd(&fd)
                .map_err(|e| SessionError::io(rel.to_string(), e))?;
            match free {
                Some(free) if free < bytes => return Err(no_room(bytes, free)),
                _ => {}
            }
        }
        Ok(())
    }

    /// `dir`, or its nearest ancestor that exists (a dry run made none).
    pub(super) fn standing<'d>(&self, mut dir: &'d str) -> &'d str {
        while !dir.is_empty() && self.root.symlink_metadata(dir).is_err() {
            dir = dir.rsplit_once('/').map_or("", |(d, _)| d);
        }
        dir
    }

    /// The placement, for the sender, of the files still to receive over
    /// `lanes`: the devices their directories sit on, each driven by its
    /// own lanes (see `route`). Once routed, [`receive`](Self::receive)
    /// keeps the streams on the lanes planned. `tick` beats while it
    /// looks.
    pub(crate) fn place(
        &mut self,
        lanes: &[crate::session::link::lanes::Lane],
        tick: &mut dyn FnMut(),
    ) -> Message {
        let entries = &self.entries;
        let dirs = self.files.iter().enumerate().filter_map(|(i, f)| {
            let f = f.as_ref().filter(|f| f.state == FileState::Receiving)?;
            let dir = f.final_rel.rsplit_once('/').map_or("", |(d, _)| d);
            Some((i, dir, entries[i].size))
        });
        let route = crate::session::plan::route::plan_for(
            &self.root,
            lanes,
            self.entries.len(),
            dirs,
            tick,
        );
        // Routed only when the sender is told (a route too long for one
        // message is not sent).
        let message = route.message();
        self.routed = matches!(&message, Message::Placement { streams, .. } if !streams.is_empty());
        message
    }

    /// Files complete under their final names before any data came.
    pub(crate) fn complete_before(&self) -> &[u32] {
        &self.complete_before
    }

    /// What this side held before any data: (unchanged by their stamp,
    /// found complete by content, part files continued). Before any data
    /// only.
    pub(crate) fn held_counts(&self) -> crate::session::plan::held::HeldCounts {
        let continued = self
            .files
            .iter()
            .flatten()
            .filter(|f| f.state == FileState::Receiving && f.received > 0)
            .count();
        crate::session::plan::held::held_counts(
            self.complete_before.len(),
            self.unchanged.len(),
            continued,
        )
    }

    /// What a run would do with entry `i`, from what this side holds of
    /// it before any data (a pull's dry run): held unchanged (by its
    /// stamp) or complete (read and found right), a part of which `bytes`
    /// are still to come, refused, or all of it to come.
    pub(crate) fn plan_of(&self, i: usize) -> (crate::session::plan::held::Action, u64) {
        use crate::session::plan::held::Action;
        let Some(f) = self.files.get(i).and_then(Option::as_ref) else {
            return (Action::Send, 0);
        };
        match f.state {
            FileState::Done if self.unchanged.contains(&(i as u32)) => (Action::Unchanged, 0),
            FileState::Done => (Action::Complete, 0),
            FileState::Skipped => (Action::Refused, 0),
            _ if f.received > 0 => (Action::Continue, f.want() - f.received.min(f.want())),
            _ => (Action::Send, f.want()),
        }
    }

    /// Bytes of data still to come (holes left out; not complete, not
    /// journaled): each file's data less its held share, noted on it as
    /// what its payload is measured against when it is done.
    pub(crate) fn data_missing(&mut self) -> u64 {
        let mut sum = 0;
        for f in self.files.iter_mut().flatten() {
            if f.state != FileState::Receiving {
                continue;
            }
            let want = f.want();
            let left = u128::from(f.data_left) * u128::from(want - f.received.min(want));
            f.data_left = (left / u128::from(want.max(1))) as u64;
            sum += f.data_left;
        }
        sum
    }

    /// Bytes of data (holes left out) the files hold in all.
    pub(crate) fn file_data(&self) -> u64 {
        (0..self.files.len())
            .filter(|&i| self.files[i].is_some())
            .map(|i| self.entries[i].span_data(self.block))
            .sum()
    }

    /// Files not finished whose verified blocks are journaled (kept for
    /// the next run), and the bytes of those blocks.
    pub(crate) fn kept(&self) -> (u64, u64) {
        self.files
            .iter()
            .flatten()
            .filter(|f| f.state == FileState::Receiving && f.journaled && !f.dirty)
            .fold((0, 0), |(n, bytes), f| (n + 1, bytes + f.received))
    }

    /// Number of regular files in the manifest.
    pub(crate) fn file_count(&self) -> usize {
        self.files.iter().flatten().count() + self.settled.count()
    }

    /// Bytes the files hold in total.
    pub(crate) fn file_bytes(&self) -> u64 {
        self.files.iter().flatten().map(|f| f.want()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::sink::rules::Rules;
    use std::time::Instant;

    /// A part another session holds is claimed once that session lets it
    /// go (a session of a killed client ending a moment later); one held
    /// past this session's wait is busy, and the wait is spent for good.
    #[test]
    fn a_held_part_is_waited_for_within_the_sessions_wait_then_busy() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let rules = Rules::plain([3; 32], 1 << 20);
        let id = FileId::of(&std::fs::File::open(dir.path()).unwrap()).unwrap();
        let inc = Incoming::beneath(dir.path(), Vec::new(), 1 << 16, rules.clone());
        assert!(lock_claims(&rules).insert(id), "the other session's claim");
        let claims = std::sync::Arc::clone(&rules.claims);
        let other = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            claims.lock().unwrap().remove(&id);
        });
        let started = Instant::now();
        inc.claim_held_part("p", id, &mut || {}).unwrap();
        assert!(started.elapsed() >= Duration::from_millis(300));
        other.join().unwrap();
        // Now this session's: another claim of it waits out what is left.
        inc.claim_wait_ms.store(100, Ordering::Relaxed);
        let started = Instant::now();
        let busy = inc.claim_held_part("p", id, &mut || {}).unwrap_err();
        assert!(matches!(busy, SessionError::Contended(_)), "{busy}");
        assert!(started.elapsed() >= Duration::from_millis(100));
        assert_eq!(inc.claim_wait_ms.load(Ordering::Relaxed), 0);
        let started = Instant::now();
        assert!(inc.claim_held_part("p", id, &mut || {}).is_err());
        assert!(
            started.elapsed() < Duration::from_millis(50),
            "no wait left"
        );
    }
}
