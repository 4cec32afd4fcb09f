//! The end of a followed file, confirmed off the follower's thread: each
//! ended file is read once more, whole, and must sum to what the copy
//! read as it grew (or a writer changed bytes already sent). A long
//! recording takes a while to read again; meanwhile the follower keeps
//! looking at the other files, ending them and beating, and several ended
//! files are read side by side ([`AT_ONCE`]), so one file's re-read never
//! holds back another's commit.

use std::collections::VecDeque;
use std::fs::File;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::work::End;
use crate::session::plan::unsendable::Unsendable;

/// Most ended files read again at once.
const AT_ONCE: usize = 4;

/// One ended file to confirm: read through as it grew, its blocks summed
/// to `digest`.
pub(crate) struct Ended {
    pub(crate) entry: usize,
    pub(crate) file: File,
    pub(crate) end: End,
    pub(crate) digest: u64,
}

/// What reading an ended file again found: its digest stands, or why the
/// file cannot be called verified.
pub(crate) type Verdict = Result<u64, Unsendable>;

/// The files waiting to be confirmed and the threads reading them.
pub(crate) struct Confirmer {
    waiting: VecDeque<Ended>,
    running: Vec<JoinHandle<()>>,
    busy: usize,
    tx: Sender<(usize, Verdict)>,
    rx: Receiver<(usize, Verdict)>,
    stop: Arc<AtomicBool>,
}

impl Confirmer {
    pub(crate) fn new() -> Confirmer {
        let (tx, rx) = channel();
        Confirmer {
            waiting: VecDeque::new(),
            running: Vec::new(),
            busy: 0,
            tx,
            rx,
            stop: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Confirm `e` as soon as a reader is free.
    pub(crate) fn push(&mut self, e: Ended) {
        self.waiting.push_back(e);
        self.start();
    }

    /// Nothing waits or is being read.
    pub(crate) fn idle(&self) -> bool {
        self.busy == 0 && self.waiting.is_empty()
    }

    /// The files confirmed (or not) since the last call: (entry, verdict).
    pub(crate) fn done(&mut self) -> Vec<(usize, Verdict)> {
        let done: Vec<_> = self.rx.try_iter().collect();
        self.busy -= done.len();
        self.running.retain(|h| !h.is_finished());
        self.start();
        done
    }

    fn start(&mut self) {
        while self.busy < AT_ONCE {
            let Some(e) = self.waiting.pop_front() else {
                return;
            };
            let (entry, tx, stop) = (e.entry, self.tx.clone(), Arc::clone(&self.stop));
            let read = move || {
                let _ = tx.send((e.entry, verdict(&e, &stop)));
            };
            let spawned = std::thread::Builder::new()
                .name("urmove-confirm".into())
                .spawn(read);
            match spawned {
                Ok(h) => self.running.push(h),
                Err(err) => {
                    let _ = self.tx.send((entry, Err(Unsendable::NoThread(err))));
                }
            }
            self.busy += 1;
        }
    }
}

impl Drop for Confirmer {
    /// A session that stops stops its readers (within a chunk's read).
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for h in self.running.drain(..) {
            let _ = h.join();
        }
    }
}

/// Read `e` again: unchanged since it ended, and summing to its digest.
fn verdict(e: &Ended, stop: &AtomicBool) -> Verdict {
    super::reads::check_unchanged(&e.file, e.end, None)?;
    let now = crate::session::plan::digest::plain_digest(&e.file, e.end.size, stop)
        .map_err(Unsendable::Reread)?;
    if now == e.digest {
        Ok(now)
    } else {
        Err(Unsendable::Rewritten)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;
    use std::time::{Duration, Instant};

    fn ended(dir: &std::path::Path, name: &str, data: &[u8], entry: usize) -> Ended {
        let p = dir.join(name);
        std::fs::write(&p, data).unwrap();
        let file = File::open(&p).unwrap();
        let m = file.metadata().unwrap();
        let end = End {
            size: m.len(),
            mtime_s: m.mtime(),
            mtime_ns: m.mtime_nsec() as u32,
        };
        let digest = crate::protocol::frame::content_terms(0, data);
        Ended {
            entry,
            file,
            end,
            digest,
        }
    }

    fn all(c: &mut Confirmer, n: usize) -> Vec<(usize, Verdict)> {
        let t = Instant::now();
        let mut got = Vec::new();
        while got.len() < n && t.elapsed() < Duration::from_secs(30) {
            got.extend(c.done());
            std::thread::sleep(Duration::from_millis(5));
        }
        got.sort_by_key(|g| g.0);
        got
    }

    #[test]
    fn files_confirmed_side_by_side_and_a_rewrite_is_named() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let mut c = Confirmer::new();
        assert!(c.idle());
        let mut want = Vec::new();
        for k in 0..6 {
            let data: Vec<u8> = (0..(k + 1) * 70_001).map(|i| (i * k % 251) as u8).collect();
            let mut e = ended(dir.path(), &format!("f{k}"), &data, k);
            if k == 4 {
                // What the copy read differs from what the file holds.
                e.digest ^= 1;
            }
            want.push(e.digest);
            c.push(e);
        }
        assert!(!c.idle());
        let got = all(&mut c, 6);
        assert!(c.idle());
        assert_eq!(got.len(), 6);
        for (i, v) in got {
            match v {
                Ok(d) => assert_eq!((i != 4, d), (true, want[i])),
                Err(why) => assert_eq!((i, why.to_string().contains("changed behind")), (4, true)),
            }
        }
    }

    #[test]
    fn a_file_that_changed_since_it_ended_is_not_confirmed() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let mut c = Confirmer::new();
        let e = ended(dir.path(), "g", b"0123456789", 7);
        std::fs::write(dir.path().join("g"), b"0123456789abc").unwrap();
        c.push(e);
        let got = all(&mut c, 1);
        assert_eq!(got.len(), 1);
        let why = got[0].1.as_ref().unwrap_err();
        assert!(why.to_string().contains("changed during the send"), "{why}");
    }
}
