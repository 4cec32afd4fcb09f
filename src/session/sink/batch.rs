//! Small files committed together. A finalizer takes every job ready when
//! it wakes (at most [`batch_max`]; never waiting for more: a lone file
//! commits alone, at once) and commits the small agreed files among them
//! through the very steps of `commit::finish`, each step for all of them
//! before the next, so that their syncs are in flight together and the
//! filesystem's journal commits them as one group:
//!
//! 1. each cut to size, given its mtime, rid of its part's attributes,
//!    leased and dressed (`commit::ready`, `commit::before_sync`);
//! 2. every part synced at once: its bytes and inode durable;
//! 3. each stamped, given its mode and renamed from its part name (only
//!    while that name holds this session's inode), each within its own
//!    stamp's settling time (`commit::after_sync`);
//! 4. every part synced again and every directory a rename went into
//!    synced once, all at once: the stamp, the mode and the name durable;
//! 5. only then each file's result goes to the control thread, which tells
//!    the sender it is verified.
//!
//! A crash before 3 leaves a part (continued where its journal allows,
//! else sent again; never counted complete); within 3 and 4, a file under its name whose bytes are
//! durable and complete, and whose stamp may be lost (read again by the
//! next run, which finds it complete by content). Large files, pieces of
//! split files and rejected ones commit one by one after the batch, as
//! `commit::run` does; journals of files still arriving are written first.

use std::collections::BTreeMap;
use std::os::fd::AsFd;
use std::sync::{mpsc, Mutex};

use crate::datapath::beneath::Root;
use crate::datapath::fsyncs;
use crate::datapath::sys::Waker;
use crate::session::SessionError;

use super::book::{Job, JobDone};
use super::commit::{self, FinalJob, Outcome};

/// Jobs a finalizer takes at once, at most: its share of the files that
/// may wait for the finalizers (`book::finalize_backlog_max`), so that
/// while one batch syncs the others (and the lanes) go on, and none waits
/// for a single batch holding every file in hand.
fn batch_max() -> usize {
    super::book::finalize_backlog_max() / super::landing::FINALIZERS
}
/// Empty files a receiver commits together while it prepares (each holds
/// a descriptor until then).
pub(crate) const EMPTY_BATCH: usize = 64;
/// A file this large or smaller commits in a batch; a larger one alone,
/// its sync its own.
pub(crate) const BATCH_FILE_MAX: u64 = 1 << 20;

/// A finalizer thread: take the jobs ready (waiting for the first), do
/// them, post each result and ring the receive loop awake for them; until
/// there are none.
pub(super) fn finalizer(
    root: &Root,
    jobs: &Mutex<mpsc::Receiver<Job>>,
    done: mpsc::Sender<JobDone>,
    waker: &Waker,
) {
    let post = |r: JobDone| done.send(r).map(|()| waker.wake()).is_ok();
    while let Some(taken) = take(jobs) {
        let (mut small, mut alone) = (Vec::new(), Vec::new());
        for job in taken {
            match job {
                Job::Finish(job) if job.batches(BATCH_FILE_MAX) => small.push(job),
                Job::Finish(job) => alone.push(job),
                Job::Journal(j) => {
                    let index = j.index;
                    if !post(JobDone::Journaled(index, commit::write_journal(root, j))) {
                        return;
                    }
                }
            }
        }
        // The small ones first: a large file's sync may take long.
        for r in commit_all(root, small) {
            if done.send(JobDone::Finished(r)).is_err() {
                return;
            }
        }
        waker.wake();
        for job in alone {
            let index = job.index();
            if !post(JobDone::Finished(
                commit::run(root, job).map_err(|e| (index, e)),
            )) {
                return;
            }
        }
    }
}

/// The first job (waiting for it) and every other ready now, up to
/// [`batch_max`]; `None` once the jobs end.
fn take(jobs: &Mutex<mpsc::Receiver<Job>>) -> Option<Vec<Job>> {
    let rx = jobs.lock().unwrap_or_else(|p| p.into_inner());
    let mut taken = vec![rx.recv().ok()?];
    while taken.len() < batch_max() {
        match rx.try_recv() {
            Ok(job) => taken.push(job),
            Err(_) => break,
        }
    }
    Some(taken)
}

impl super::incoming::Incoming {
    /// Commit the empty files prepared so far together (their syncs in
    /// flight at once, as the finalizers' batches), each of them among
    /// `files` already: each is done at the start; the first failure fails
    /// the session, as a single one did.
    pub(super) fn commit_empty(&mut self) -> Result<(), SessionError> {
        let jobs = std::mem::take(&mut self.empty);
        for r in commit_all(&self.root, jobs) {
            match r {
                Ok(Outcome::Committed(i, digest)) => {
                    if let Some(Some(f)) = self.files.get_mut(i as usize) {
                        f.state = super::file::FileState::Done;
                        super::part::release_claim(&self.rules, f);
                    }
                    self.done_at_start.push((i, digest));
                }
                Ok(other) => {
                    let m = format!("an empty file was not committed: {other:?}");
                    return Err(SessionError::local(crate::session::ErrorCode::Io, m));
                }
                Err((_, e)) => return Err(e),
            }
        }
        Ok(())
    }
}

/// Each finished file's result (see the module's steps).
type Done = Result<Outcome, (u32, SessionError)>;

/// Commit `jobs` (agreed whole files, see `FinalJob::batches`) together,
/// in the module's steps. Each file's result, in no particular order.
pub(super) fn commit_all(root: &Root, jobs: Vec<FinalJob>) -> Vec<Done> {
    let mut out = Vec::with_capacity(jobs.len());
    // 1: each readied and dressed.
    let mut dressed = Vec::with_capacity(jobs.len());
    for job in jobs {
        match commit::ready(&job).and_then(|way| commit::before_sync(&job, way)) {
            Ok(way) => dressed.push((job, way)),
            Err(e) => out.push(Err((job.index(), e))),
        }
    }
    // 2: every part synced at once.
    let fds: Vec<_> = dressed.iter().map(|(job, _)| job.part().as_fd()).collect();
    let synced = fsyncs::sync_all(&fds);
    drop(fds);
    // 3: each stamped, given its mode and renamed.
    let mut renamed = Vec::with_capacity(dressed.len());
    for ((job, way), r) in dressed.into_iter().zip(synced) {
        match commit::synced(&job, way, r).and_then(|way| commit::after_sync(root, &job, way)) {
            Ok(()) => renamed.push(job),
            Err(e) => out.push(Err((job.index(), e))),
        }
    }
    // 4: the parts and their directories synced at once.
    out.extend(sync_renamed(root, &renamed));
    out
}

/// Sync every file of `renamed` and every directory one went into, all at
/// once: each file's result, an error where its sync or its directory's
/// failed. A directory that cannot be opened is left to the end of the
/// receive (`Incoming::sync_dirs`), as before.
fn sync_renamed(root: &Root, renamed: &[FinalJob]) -> Vec<Done> {
    let mut dirs: BTreeMap<&str, Option<std::fs::File>> = BTreeMap::new();
    for job in renamed {
        let dir = parent(job.final_rel());
        dirs.entry(dir).or_insert_with(|| {
            root.open_file(dir, libc::O_RDONLY | libc::O_DIRECTORY, 0)
                .ok()
        });
    }
    let opened: Vec<(&str, &std::fs::File)> = dirs
        .iter()
        .filter_map(|(d, f)| f.as_ref().map(|f| (*d, f)))
        .collect();
    let mut fds: Vec<_> = renamed.iter().map(|job| job.part().as_fd()).collect();
    fds.extend(opened.iter().map(|(_, f)| f.as_fd()));
    let mut results = fsyncs::sync_all(&fds);
    let dir_results: BTreeMap<&str, std::io::Result<()>> = opened
        .iter()
        .map(|(d, _)| *d)
        .zip(results.split_off(renamed.len()))
        .collect();
    renamed
        .iter()
        .zip(results)
        .map(|(job, r)| {
            let dir = parent(job.final_rel());
            let (what, r) = match (r, dir_results.get(dir)) {
                (Err(e), _) => ("syncing", Err(e)),
                (Ok(()), Some(Err(e))) => {
                    let e = std::io::Error::new(e.kind(), format!("its directory: {e}"));
                    ("syncing", Err(e))
                }
                (Ok(()), _) => ("", Ok(())),
            };
            r.map(|()| Outcome::Committed(job.index(), job.digest()))
                .map_err(|e| {
                    let e = SessionError::io(format!("{what} {}", job.final_rel()), e);
                    (job.index(), e)
                })
        })
        .collect()
}

/// The directory `rel` is in, under the root.
fn parent(rel: &str) -> &str {
    rel.rsplit_once('/').map_or(".", |(d, _)| d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datapath::beneath::FileId;
    use crate::protocol::manifest::{Entry, EntryKind};
    use crate::session::sink::file::RecvFile;
    use crate::session::sink::rules::Rules;

    /// The state of file `rel` of `size` bytes (mode 0640) as received.
    fn small_file(rules: &Rules, rel: &str, size: usize) -> RecvFile {
        let e = Entry {
            path: rel.into(),
            kind: EntryKind::File,
            size: size as u64,
            mode: 0o640,
            ..Default::default()
        };
        RecvFile::new(&e, rel.into(), 255, 4096, rules)
    }

    /// A written part of `bytes` at `rel`'s part name, agreed on, taken
    /// for its commit.
    fn job(dir: &std::path::Path, rules: &Rules, index: u32, rel: &str, bytes: &[u8]) -> FinalJob {
        let mut f = small_file(rules, rel, bytes.len());
        let path = dir.join(format!("{rel}.urmove.part"));
        std::fs::write(&path, bytes).unwrap();
        let part = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        (f.part_id, f.part) = (Some(FileId::of(&part).unwrap()), Some(part));
        (f.digest, f.sender_digest) = (index as u64 + 7, Some(index as u64 + 7));
        FinalJob::take(index, &mut f, rules)
    }

    /// A written part of `bytes` with no name (`O_TMPFILE`) for `rel`, new
    /// in a fresh directory, agreed on, taken for its commit.
    fn unnamed_job(root: &Root, rules: &Rules, index: u32, rel: &str, bytes: &[u8]) -> RecvFile {
        use std::os::unix::fs::FileExt;
        let mut f = small_file(rules, rel, bytes.len());
        f.fresh = true;
        let off = crate::datapath::DirectMode::Off;
        crate::session::sink::part::open_part(root, off, rules, &mut f).unwrap();
        assert!(f.unnamed, "a small fresh file's part has no name");
        let part = f.part.as_ref().unwrap();
        let links = crate::datapath::sys::fresh_links_and_ctime(part).unwrap().0;
        assert_eq!(links, 0);
        part.write_all_at(bytes, 0).unwrap();
        (f.digest, f.sender_digest) = (index as u64 + 7, Some(index as u64 + 7));
        f
    }

    /// Files written into parts with no name commit straight under their
    /// final names (bytes, mode, stamp), no part name ever made; one whose
    /// final name something took since it was prepared replaces that (as
    /// a rename does), leaving no name of its own behind; one rejected
    /// leaves nothing at all.
    #[test]
    fn unnamed_parts_are_linked_at_their_final_names_replacing_what_came_there() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let root = Root::open_for_writing(dir.path()).unwrap();
        let rules = Rules::plain([5; 32], 1 << 20);
        std::fs::create_dir(dir.path().join("a")).unwrap();
        let names = ["a/f0", "a/f1", "a/f2"];
        let jobs: Vec<FinalJob> = names
            .iter()
            .enumerate()
            .map(|(i, rel)| {
                let mut f = unnamed_job(&root, &rules, i as u32, rel, &[i as u8 + 1; 5000]);
                FinalJob::take(i as u32, &mut f, &rules)
            })
            .collect();
        // Nothing under any name while they wait.
        assert_eq!(std::fs::read_dir(dir.path().join("a")).unwrap().count(), 0);
        std::fs::write(dir.path().join("a/f1"), b"came meanwhile").unwrap();
        let mut done = commit_all(&root, jobs);
        done.sort_by_key(|r| match r {
            Ok(Outcome::Committed(i, _)) | Err((i, _)) => *i,
            Ok(other) => panic!("{other:?}"),
        });
        for (i, r) in done.iter().enumerate() {
            let want = Some(&Outcome::Committed(i as u32, i as u64 + 7));
            assert_eq!(r.as_ref().ok(), want, "{}", names[i]);
            let path = dir.path().join(names[i]);
            assert_eq!(std::fs::read(&path).unwrap(), [i as u8 + 1; 5000]);
            use std::os::unix::fs::{MetadataExt, PermissionsExt};
            let m = std::fs::metadata(&path).unwrap();
            assert_eq!((m.permissions().mode() & 0o7777, m.nlink()), (0o640, 1));
            let f = std::fs::File::open(&path).unwrap();
            let stamp = crate::datapath::sys::get_xattr(&f, c"user.urmove");
            assert_eq!(stamp.map(|s| s.len()), Some(42), "{}", names[i]);
            let tag =
                crate::datapath::sys::get_xattr(&f, crate::session::sink::journal::PART_TAG_XATTR);
            assert_eq!(tag, None);
        }
        let mut left: Vec<_> = std::fs::read_dir(dir.path().join("a"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["f0", "f1", "f2"]);
        // A rejected one: nothing made, nothing left.
        let mut f = unnamed_job(&root, &rules, 9, "a/g", b"differs");
        f.sender_digest = Some(17);
        let job = FinalJob::take(9, &mut f, &rules);
        assert_eq!(commit::run(&root, job).unwrap(), Outcome::Rejected(9, 16));
        assert_eq!(std::fs::read_dir(dir.path().join("a")).unwrap().count(), 3);
    }

    /// An unnamed part about to be closed before its commit gets its part
    /// name (so it can be opened again by it), then commits from there as
    /// any named part does.
    #[test]
    fn an_unnamed_part_named_before_its_close_commits_by_rename() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let root = Root::open_for_writing(dir.path()).unwrap();
        let rules = Rules::plain([5; 32], 1 << 20);
        let mut f = unnamed_job(&root, &rules, 0, "f", &[3; 700]);
        let part = f.part.take().unwrap();
        assert!(crate::session::sink::part::name_unnamed(
            &root, &mut f, &part
        ));
        drop(part);
        assert!(!f.unnamed);
        assert_eq!(
            std::fs::read(dir.path().join("f.urmove.part")).unwrap(),
            [3; 700]
        );
        crate::session::sink::part::open_part(
            &root,
            crate::datapath::DirectMode::Off,
            &rules,
            &mut f,
        )
        .unwrap();
        let done = commit_all(&root, vec![FinalJob::take(0, &mut f, &rules)]);
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].as_ref().ok(), Some(&Outcome::Committed(0, 7)));
        assert_eq!(std::fs::read(dir.path().join("f")).unwrap(), [3; 700]);
        assert!(!dir.path().join("f.urmove.part").exists());
    }

    /// A batch commits each of its files under its final name (its bytes,
    /// its mode, its stamp), in two directories; one whose part name was
    /// replaced meanwhile by another file is refused alone and its final
    /// name never made, the other file left where it was.
    #[test]
    fn a_batch_commits_each_file_and_refuses_a_replaced_part_alone() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let root = Root::open_for_writing(dir.path()).unwrap();
        let rules = Rules::plain([5; 32], 1 << 20);
        for d in ["a", "b"] {
            std::fs::create_dir(dir.path().join(d)).unwrap();
        }
        let names = ["a/f0", "a/f1", "b/f2", "b/f3", "a/f4"];
        let jobs: Vec<FinalJob> = names
            .iter()
            .enumerate()
            .map(|(i, rel)| job(dir.path(), &rules, i as u32, rel, &[i as u8; 3000]))
            .collect();
        // Another file now holds f3's part name.
        let stranger = dir.path().join("b/other");
        std::fs::write(&stranger, b"not ours").unwrap();
        std::fs::rename(&stranger, dir.path().join("b/f3.urmove.part")).unwrap();
        let mut done = commit_all(&root, jobs);
        done.sort_by_key(|r| match r {
            Ok(Outcome::Committed(i, _)) | Err((i, _)) => *i,
            Ok(other) => panic!("{other:?}"),
        });
        for (i, r) in done.iter().enumerate() {
            let path = dir.path().join(names[i]);
            if i == 3 {
                assert!(r.is_err(), "{r:?}");
                assert!(!path.exists());
                let left = std::fs::read(dir.path().join("b/f3.urmove.part")).unwrap();
                assert_eq!(left, b"not ours");
                continue;
            }
            assert_eq!(
                r.as_ref().ok(),
                Some(&Outcome::Committed(i as u32, i as u64 + 7))
            );
            assert_eq!(std::fs::read(&path).unwrap(), [i as u8; 3000]);
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o7777, 0o640);
            let f = std::fs::File::open(&path).unwrap();
            let stamp = crate::datapath::sys::get_xattr(&f, c"user.urmove");
            assert_eq!(stamp.map(|s| s.len()), Some(42), "{}", names[i]);
            assert!(!dir
                .path()
                .join(format!("{}.urmove.part", names[i]))
                .exists());
        }
    }
}
