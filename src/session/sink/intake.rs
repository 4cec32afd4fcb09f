//! A receiving lane: its own ring, buffers and share of the data streams.
//!
//! Each tick polls the lane's streams, checks every frame's checksum (and
//! opens sealed frames) on this thread, then takes the book's lock once
//! for the batch: each frame against its file, its part opened, its write
//! issued from this lane's ring straight from the buffer it arrived in
//! (`WRITE_FIXED` to a file slot of this ring), and each finished write
//! marked. What the control thread needs (bytes, whether the lane waits
//! on its peer, its streams' states) is published after every tick.

use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::datapath::net::{NetReceiver, RecvEvent, HEADROOM};
use crate::datapath::Lease;
use crate::protocol::frame::{FrameHeader, FrameKey};

use super::book::{self, Accepted, Book};
use super::part::BUFFERED_FILE_MAX;
use crate::session::SessionError;

/// Small parts' blocks one batch of frames writes on the lane, after the
/// lock, at most (each holds a second descriptor of its part until then);
/// more go through the ring.
const HERE_MAX: usize = 16;

/// What a lane shows the control thread.
#[derive(Debug, Default)]
pub(in crate::session) struct LaneStatus {
    /// Streams open or operations in flight.
    pub(in crate::session) busy: AtomicBool,
    /// A receive waits on an open stream (the lane waits for the sender).
    pub(in crate::session) waiting: AtomicBool,
    /// A stream's payload waits for a buffer (this side is the slow one).
    pub(in crate::session) starved: AtomicBool,
    /// Payload bytes the lane took in.
    pub(in crate::session) bytes: AtomicU64,

    /// Its streams' (delivered bytes, waiting), in the lane's order.
    pub(in crate::session) states: Mutex<Vec<(u64, bool)>>,
}

impl LaneStatus {
    /// A lane about to start: busy until it shows otherwise.
    pub(in crate::session) fn new() -> Self {
        LaneStatus {
            busy: AtomicBool::new(true),
            ..LaneStatus::default()
        }
    }
}

/// A registered file slot of the lane's ring: which opening of which file
/// it holds, and the writes to it in flight.
struct Slot {
    index: usize,
    opened: u32,
    slot: u32,
    writes: u32,
}

/// A payload to write with a pwrite once the book is unlocked (the lane's
/// file slots were all busy): its part (a second descriptor), the write
/// noted in flight as a ring's would be.
struct Deferred {
    part: std::fs::File,
    offset: u64,
    lease: Lease,
    len: u32,
    token: u64,
    /// A sparse frame's block: only its data pieces are written.
    sparse: Option<SparseWrite>,
}

/// How a sparse block is written: its pieces as its map says, the absent
/// ones cleared when the part holds an earlier session's bytes.
#[derive(Clone, Copy)]
struct SparseWrite {
    span: u32,
    stale: bool,
    direct: bool,
}

/// Write a sparse block's data pieces (each run of them one write, an
/// O_DIRECT part's last padded to a whole page) and, in a part holding an
/// earlier session's bytes, clear the runs that did not come. Returns how
/// it went and the payload bytes the frame brought.
fn write_sparse(d: &Deferred, s: &SparseWrite) -> (std::io::Result<()>, Option<u64>) {
    let Some(map) = book::sparse_map(s.span, &d.lease) else {
        let e = std::io::Error::from_raw_os_error(libc::EINVAL);
        return (Err(e), None);
    };
    let block = &d.lease.as_slice()[HEADROOM..];
    let go = || -> std::io::Result<()> {
        for run in map.runs() {
            let at = d.offset + run.start as u64;
            match (run.present, s.direct) {
                (true, true) => d.part.write_all_at(
                    &block[run.start..crate::datapath::direct::padded(run.end)],
                    at,
                )?,
                (true, false) => d.part.write_all_at(&block[run.start..run.end], at)?,
                (false, _) if s.stale => {
                    crate::datapath::sys::zero_range(&d.part, at, (run.end - run.start) as u64)?
                }
                (false, _) => {}
            }
        }
        Ok(())
    };
    (go(), Some(map.packed_len() as u64))
}

/// One lane's side of a receive.
pub(in crate::session) struct Intake<'a> {
    rx: NetReceiver,
    key: FrameKey,
    slots: Vec<Slot>,
    /// Reused every tick: what the poll brought, each frame's check, the
    /// files that got blocks.
    events: Vec<RecvEvent>,
    checks: Vec<Result<Option<u64>, SessionError>>,
    completed: Vec<usize>,
    deferred: Vec<Deferred>,
    /// The lane's frame buffers: a file's writes in flight from this lane
    /// number at most this many.
    buffers: usize,
    status: &'a LaneStatus,
}

impl<'a> Intake<'a> {
    /// A lane on `rx` (started on its streams by the caller), checking
    /// frames under `key`, showing itself in `status`.
    pub(in crate::session) fn new(
        mut rx: NetReceiver,
        key: FrameKey,
        status: &'a LaneStatus,
    ) -> Self {
        // Room for a whole poll's worth, so a tick allocates nothing.
        let most = rx.events_max();
        let buffers = rx.buffer_count();
        Intake {
            rx,
            key,
            slots: Vec::new(),
            events: Vec::with_capacity(most),
            checks: Vec::with_capacity(most),
            completed: Vec::with_capacity(most),
            deferred: Vec::new(),
            buffers,
            status,
        }
    }

    /// Streams still open, or operations in flight.
    pub(in crate::session) fn busy(&self) -> bool {
        self.rx.open() || self.rx.in_flight() > 0
    }

    /// Poll the lane's streams once (waiting for something when `wait`)
    /// and handle every event.
    pub(in crate::session) fn tick(
        &mut self,
        book: &Mutex<Book>,
        wait: bool,
    ) -> Result<(), SessionError> {
        let mut events = std::mem::take(&mut self.events);
        // Handle what arrived even when the poll failed: every event
        // carries a buffer that must go back to the pool.
        let polled = self.rx.poll(wait, &mut |ev| events.push(ev));
        self.checks.clear();
        for ev in &mut events {
            if let RecvEvent::Frame { header, lease, .. } = ev {
                self.checks.push(book::verify(header, lease, &self.key));
            }
        }
        let landed = self.land(book, &mut events);
        self.events = events;
        let written = self.write_deferred(book);
        self.publish();
        polled?;
        landed.and(written)
    }

    /// The pwrites the batch left (no lock held while they run), then
    /// each marked under the lock as a ring's write would be.
    fn write_deferred(&mut self, book: &Mutex<Book>) -> Result<(), SessionError> {
        if self.deferred.is_empty() {
            return Ok(());
        }
        let mut done = Vec::with_capacity(self.deferred.len());
        for d in self.deferred.drain(..) {
            let (written, wire) = match &d.sparse {
                Some(s) => write_sparse(&d, s),
                None => {
                    let bytes = &d.lease.as_slice()[HEADROOM..HEADROOM + d.len as usize];
                    (d.part.write_all_at(bytes, d.offset), None)
                }
            };
            let result = match written {
                Ok(()) => d.len as i32,
                Err(e) => -e.raw_os_error().unwrap_or(libc::EIO),
            };
            self.rx.give_back(d.lease);
            done.push((d.token, d.len, result, wire));
        }
        let mut book = book::lock(book);
        let mut failure = None;
        for (token, len, result, wire) in done {
            let r = book
                .written(token, len, result, wire)
                .and_then(|i| book.written_more(i));
            if let Err(e) = r {
                failure.get_or_insert(e);
            }
        }
        failure.map_or(Ok(()), Err)
    }

    /// The batch's frames and finished writes, under the book's lock.
    fn land(
        &mut self,
        book: &Mutex<Book>,
        events: &mut Vec<RecvEvent>,
    ) -> Result<(), SessionError> {
        let mut book = book::lock(book);
        let mut checks = std::mem::take(&mut self.checks);
        let mut checks_iter = checks.drain(..);
        let mut failure = None;
        let mut batch_bytes = 0;
        self.completed.clear();
        for ev in events.drain(..) {
            let r = match ev {
                RecvEvent::Frame { header, lease, .. } => {
                    let check = checks_iter.next().expect("a check per frame");
                    if failure.is_some() {
                        self.rx.give_back(lease);
                        continue;
                    }
                    // Only a frame that passed its checks has a block (and,
                    // sparse, a map) to count.
                    let data = match check {
                        Ok(_) => book::data_bytes(&header, &lease),
                        Err(_) => 0,
                    };
                    batch_bytes += data;
                    self.frame(&mut book, &header, lease, check)
                }
                RecvEvent::Written {
                    token,
                    len,
                    result,
                    lease,
                } => {
                    self.rx.give_back(lease);
                    self.wrote((token >> 32) as usize);
                    book.written(token, len, result, None).map(Some)
                }
                RecvEvent::Closed { .. } => Ok(None),
                RecvEvent::Lost { stream, why } => {
                    let stream = self.rx.stream_id(stream);
                    book.tally
                        .lost_streams
                        .push(format!("stream {stream}: {why}"));
                    Ok(None)
                }
            };
            match r {
                Ok(Some(i)) => self.completed.push(i),
                Ok(None) => {}
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        drop(checks_iter);
        self.checks = checks;
        book.tally.bytes += batch_bytes;
        self.status.bytes.fetch_add(batch_bytes, Ordering::Relaxed);
        for &i in &self.completed {
            if let Err(e) = book.written_more(i) {
                failure.get_or_insert(e);
            }
        }
        self.empty_done_slots(&mut book);
        failure.map_or(Ok(()), Err)
    }

    /// Empty the slots of files no longer received (committed, rejected,
    /// dropped) with no write in flight: a registration holds its file,
    /// and a rejected part's space comes back only when it is let go.
    fn empty_done_slots(&mut self, book: &mut Book) {
        let rx = &mut self.rx;
        self.slots.retain(|s| {
            if s.writes > 0 || book.receiving(s.index) {
                return true;
            }
            rx.detach_file(s.slot);
            false
        });
    }

    /// One frame, checked (`check`): accepted, then written (or a hole, or
    /// a block held already). Returns the file when a block of it is now
    /// written.
    fn frame(
        &mut self,
        book: &mut Book,
        header: &FrameHeader,
        lease: Lease,
        check: Result<Option<u64>, SessionError>,
    ) -> Result<Option<usize>, SessionError> {
        match check.and_then(|terms| book.accept(header, terms)) {
            Err(e) => {
                self.rx.give_back(lease);
                Err(e)
            }
            Ok(Accepted::Drop) => {
                self.rx.give_back(lease);
                Ok(None)
            }
            Ok(Accepted::Hole { terms }) => {
                self.rx.give_back(lease);
                let (index, _) = book.hole(header, terms)?;
                Ok(Some(index))
            }
            Ok(Accepted::Data { terms }) => self.write(book, header, lease, terms),
        }
    }

    /// Write an accepted frame's payload: O_DIRECT `WRITE_FIXED` straight
    /// from its buffer, or (every slot busy) a pwrite from it here.
    fn write(
        &mut self,
        book: &mut Book,
        header: &FrameHeader,
        lease: Lease,
        terms: u64,
    ) -> Result<Option<usize>, SessionError> {
        let index = header.file_index as usize;
        let block_no = header.offset / book.block;
        let f = book.file(index);
        f.take_sums(header, &lease);
        // O_DIRECT writes whole aligned blocks: the tail is padded here and
        // cut back to the true size before the rename.
        let write_len = match f.direct {
            true => crate::datapath::direct::padded_u32(header.length),
            false => header.length,
        };
        if f.writing.capacity() == 0 {
            // Once per file: its writes in flight never grow the list.
            f.writing.reserve(self.buffers);
        }
        let part = f.part.as_ref().expect("opened when accepted");
        let token = (index as u64) << 32 | block_no;
        let sparse = header.is_sparse().then_some(SparseWrite {
            span: header.span,
            stale: f.stale,
            direct: f.direct,
        });
        // A sparse block is written piece by piece, here, after the lock;
        // a small part's through the page cache too (at most [`HERE_MAX`]
        // a batch, each a second descriptor meanwhile): a copy, cheaper
        // here than through the ring (which hands a buffered write to a
        // worker thread) and needing no registered slot.
        let small = !f.direct && f.size <= BUFFERED_FILE_MAX;
        let here = sparse.is_some() || (small && self.deferred.len() < HERE_MAX);
        let slot = match here {
            true => None,
            false => self.slot_for(index, f.opened, part.as_raw_fd()),
        };
        let Some(at) = slot else {
            // Written here, or every slot busy: a pwrite after the lock,
            // from a second descriptor (the part stays open while its
            // write is noted).
            let part = match part.try_clone() {
                Ok(p) => p,
                Err(e) => {
                    self.rx.give_back(lease);
                    return Err(SessionError::io(format!("writing {}", f.final_rel), e));
                }
            };
            f.writing.push((block_no, terms));
            self.deferred.push(Deferred {
                part,
                offset: header.offset,
                lease,
                len: write_len,
                token,
                sparse,
            });
            return Ok(None);
        };
        f.writing.push((block_no, terms));
        self.slots[at].writes += 1;
        self.rx
            .write(self.slots[at].slot, header.offset, lease, write_len, token);
        Ok(None)
    }

    /// This lane's slot for file `index` as opened now (`opened`, on
    /// descriptor `fd`): the one it has, else a new one, making room by
    /// emptying slots with no write in flight. `None`: every slot is busy.
    fn slot_for(&mut self, index: usize, opened: u32, fd: i32) -> Option<usize> {
        if let Some(at) = self.slots.iter().position(|s| s.index == index) {
            if self.slots[at].opened == opened {
                return Some(at);
            }
            // Opened anew since: the part was closed, which waits for every
            // write of it, so this slot has none in flight.
            let old = self.slots.swap_remove(at);
            debug_assert_eq!(old.writes, 0, "a closed part has no write in flight");
            self.rx.detach_file(old.slot);
        }
        let slot = match self.rx.attach_file(fd).unwrap_or(None) {
            Some(s) => s,
            None => {
                self.empty_idle_slots();
                self.rx.attach_file(fd).unwrap_or(None)?
            }
        };
        self.slots.push(Slot {
            index,
            opened,
            slot,
            writes: 0,
        });
        Some(self.slots.len() - 1)
    }

    /// Empty every slot no write is in flight to (files finished, waiting
    /// or written by other lanes).
    fn empty_idle_slots(&mut self) {
        let rx = &mut self.rx;
        self.slots.retain(|s| {
            if s.writes > 0 {
                return true;
            }
            rx.detach_file(s.slot);
            false
        });
    }

    /// A write to file `index` finished.
    fn wrote(&mut self, index: usize) {
        if let Some(s) = self.slots.iter_mut().find(|s| s.index == index) {
            s.writes -= 1;
        }
    }

    /// Show the control thread where this lane stands.
    fn publish(&self) {
        let s = self.status;
        s.busy.store(self.busy(), Ordering::Release);
        s.waiting.store(self.rx.waiting(), Ordering::Relaxed);
        s.starved.store(self.rx.starved(), Ordering::Relaxed);
        let mut states = s.states.lock().unwrap_or_else(|p| p.into_inner());
        self.rx.stream_states_into(&mut states);
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    use std::sync::mpsc;

    use super::*;
    use crate::datapath::alloc_count::allocations_during;
    use crate::protocol::manifest::{Entry, EntryKind};
    use crate::session::sink::incoming::Incoming;
    use crate::session::sink::rules::Rules;

    const BLOCK: u64 = 64 << 10;
    const BLOCKS: u64 = 64;

    /// A receive of one file of [`BLOCKS`] blocks beneath `dir`.
    fn incoming(dir: &std::path::Path) -> Incoming {
        let entries = vec![Entry {
            path: "big".into(),
            kind: EntryKind::File,
            size: BLOCK * BLOCKS,
            data: 0,
            mode: 0o644,
            mtime_s: 0,
            mtime_ns: 0,
            link: None,
            ..Default::default()
        }];
        Incoming::beneath(dir, entries, BLOCK, Rules::plain([7; 32], 64 << 20))
    }

    /// The file's frames, written to `to` by a thread of their own.
    fn send_frames(mut to: TcpStream, key: FrameKey) -> std::thread::JoinHandle<()> {
        std::thread::spawn(move || {
            for b in 0..BLOCKS {
                let payload = vec![b as u8 ^ 0x5a; BLOCK as usize];
                let h = FrameHeader::for_payload(&key, 0, b * BLOCK, &payload, 0);
                to.write_all(&h.encode()).unwrap();
                to.write_all(&payload).unwrap();
            }
        })
    }

    #[test]
    fn a_lanes_tick_allocates_nothing_while_a_file_streams_in() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let mut inc = incoming(dir.path());
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let out = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (sock, _) = listener.accept().unwrap();
        let key = FrameKey { k0: 3, k1: 4 };
        let sender = send_frames(out, key);
        let mut rx = NetReceiver::prepare(1, 8, BLOCK as usize, 4).unwrap();
        rx.start(&[sock.as_raw_fd()]).unwrap();
        let status = LaneStatus::new();
        let mut intake = Intake::new(rx, key, &status);
        let (jobs, _finalizer) = mpsc::channel();
        let book = Book::new(&mut inc, jobs);
        let book = Mutex::new(book);
        let received = |b: &Mutex<Book>| book::lock(b).file(0).received;
        let size = BLOCK * BLOCKS;
        // The part opened, its slot registered, the lists at their size.
        while received(&book) < size / 4 {
            intake.tick(&book, true).unwrap();
        }
        let ((), allocs) = allocations_during(|| {
            while received(&book) < size * 3 / 4 {
                intake.tick(&book, true).unwrap();
            }
        });
        assert_eq!(allocs, 0, "a tick allocated while blocks streamed in");
        while received(&book) < size {
            intake.tick(&book, true).unwrap();
        }
        sender.join().unwrap();
        // The blocks landed where their frames said.
        drop(book);
        let got = std::fs::read(dir.path().join("big.urmove.part")).unwrap();
        assert_eq!(got.len() as u64, size);
        for (b, block) in got.chunks(BLOCK as usize).enumerate() {
            let want = b as u8 ^ 0x5a;
            assert!(block.iter().all(|&x| x == want), "block {b}");
        }
        drop(inc);
    }
}
