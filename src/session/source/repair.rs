//! A sending lane's repairs: frames of a lost stream sent again on the
//! others (its own, or those another lane handed over), a stalled stream
//! given up, and whether the receiver still wants what it carried.

use std::collections::HashMap;
use std::fs::File;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::datapath::net::NetSender;
use crate::datapath::sys;
use crate::protocol::frame::FrameHeader;

use super::ledger::{Acks, Sent};
use super::pusher::Pusher;
use super::reads::reread;
use super::work::Piece;
use crate::session::SessionError;

impl<'a> Pusher<'a> {
    /// Send again, on the streams left, every frame a lost stream carried
    /// of files not yet acknowledged. The data is read again and must still
    /// have the checksum it had, or its file is skipped (the receiver drops
    /// blocks it already holds). A lane left without streams hands its
    /// frames to the other lanes; frames other lanes handed over go here.
    pub(super) fn resend_lost(&mut self) -> Result<(), SessionError> {
        self.repair_streams()?;
        if self.handed_over || self.idle {
            return Ok(());
        }
        let orphans = self.work.take_orphans();
        self.resend(orphans)
    }

    /// This lane's lost streams: their frames go again on its others, or
    /// (none left) to the other lanes.
    pub(super) fn repair_streams(&mut self) -> Result<(), SessionError> {
        self.check_receiver()?;
        loop {
            let lost = self.tx.take_lost();
            if lost.is_empty() {
                break;
            }
            for (s, why) in lost {
                let id = self.tx.stream_id(s);
                // A stream that carried nothing still wanted (the receiver
                // had every file it holds, or closed it once a file it was
                // bringing was dropped) is no loss to report.
                if self.carried_wanted(s) {
                    self.repair.lost.push(format!("stream {id}: {why}"));
                }
                if self.ledger.acked.is_some_and(Acks::all) {
                    // The receiver has every file: it may close streams early.
                    continue;
                }
                if self.tx.live_count() == 0 {
                    return self.hand_over(id, why);
                }
                if self.ledger.overflowed[s as usize] {
                    return Err(SessionError::io(
                        format!("stream {id} was lost with more frames than can be sent again"),
                        why,
                    ));
                }
                self.resend_stream(s)?;
            }
        }
        Ok(())
    }

    /// Every stream of this lane is lost: finish the reads in flight, give
    /// the unread rest of each piece back to the work and every frame still
    /// owed to the other lanes. With no other lane left (or frames
    /// forgotten past the ledger's bound), the push fails.
    pub(super) fn hand_over(&mut self, last: u32, why: std::io::Error) -> Result<(), SessionError> {
        // What is read lands in frames the lost streams drop, but recorded.
        while self.free_tokens.len() < self.reads_max {
            self.tx.poll(true)?;
            self.take_reads()?;
            self.dispatch();
        }
        self.dispatch();
        for src in &mut self.sources {
            if !src.dropped && src.next < src.end {
                let rest = Piece {
                    entry: src.entry,
                    start: src.next,
                    end: src.end,
                };
                self.work.split_off(rest);
                src.end = src.next;
            }
        }
        self.close_sources(true)?;
        let frames = self.ledger.take_undelivered();
        if self.ledger.overflowed.iter().any(|&o| o)
            || !self.work.hand_over(self.lane.index, frames, self.idle)
        {
            return Err(SessionError::io(
                format!(
                    "every data stream was lost: the receiver stopped taking data or closed them (last, stream {last})"
                ),
                why,
            ));
        }
        self.handed_over = true;
        Ok(())
    }

    /// A receiver that stopped talking (the reader of its messages gave up:
    /// it heard nothing for `--timeout`, while a live one beats every half
    /// second) with files unacknowledged ends the push. Its kernel may
    /// still acknowledge bytes into socket buffers nobody reads, which no
    /// TCP-level clock can tell from progress.
    pub(super) fn check_receiver(&self) -> Result<(), SessionError> {
        match self.ledger.acked {
            Some(acks) if acks.ended.load(Ordering::Acquire) && !acks.all() => {
                Err(SessionError::io(
                    "the receiver",
                    // A connection loss: a refusal the reader got instead
                    // is the reason reported.
                    std::io::Error::new(
                        std::io::ErrorKind::ConnectionAborted,
                        format!(
                            "it went silent (nothing for {} s: stopped, overloaded or gone)",
                            self.params.timeout.as_secs()
                        ),
                    ),
                ))
            }
            _ => Ok(()),
        }
    }

    /// Whether stream `s` carried frames not delivered of files the
    /// receiver still wants (not dropped, not acknowledged).
    pub(super) fn carried_wanted(&self, s: u32) -> bool {
        let id = self.tx.stream_id(s);
        let acked = |entry: u32| self.ledger.acked.is_some_and(|a| a.has(entry));
        self.ledger.sent[s as usize].iter().any(|r| {
            self.ledger.undelivered(id, r)
                && !self.work.is_dropped(r.entry as usize)
                && !acked(r.entry)
        })
    }

    pub(super) fn resend_stream(&mut self, s: u32) -> Result<(), SessionError> {
        let records = std::mem::take(&mut self.ledger.sent[s as usize]);
        self.ledger.total -= records.len();
        let id = self.tx.stream_id(s);
        self.resend(records.into_iter().map(|r| (id, r)).collect())
    }

    /// Send `records` again (each with the session's number of the stream
    /// that carried it): those not delivered, of files not skipped.
    pub(super) fn resend(&mut self, records: Vec<(u32, Sent)>) -> Result<(), SessionError> {
        let mut files: HashMap<u32, Option<(File, bool)>> = HashMap::new();
        for (id, r) in records {
            if !self.ledger.undelivered(id, &r) || self.work.is_dropped(r.entry as usize) {
                continue;
            }
            let mut lease = self.buffer()?;
            let h = if r.hole {
                Some(FrameHeader::hole(&self.params.key, r.entry, r.offset))
            } else {
                let open = self.open;
                let src = files
                    .entry(r.entry)
                    .or_insert_with(|| open(r.entry as usize).ok());
                let params = self.params;
                src.as_ref()
                    .and_then(|(file, direct)| reread(file, *direct, &r, params, &mut lease))
            };
            let Some(h) = h else {
                self.tx.give_back(lease);
                files.insert(r.entry, None);
                let why = "changed or vanished before its lost frames could be sent again";
                self.skip(r.entry as usize, why.into());
                continue;
            };
            let r = Sent {
                wire: h.length,
                ..r
            };
            self.counters.add(r.data_bytes(), 1);
            self.make_ready(lease, h, r);
            self.repair.resent += 1;
        }
        Ok(())
    }
}

/// Per stream: when its unacknowledged bytes and its delivered bytes last
/// moved, to tell a stalled stream from a slow receiver.
pub(super) struct StallWatch {
    pub(super) half: Duration,
    pub(super) outq: Vec<(usize, Instant)>,
    pub(super) arrived: Vec<(u64, Instant)>,
    pub(super) outq_moved: Instant,
}

impl StallWatch {
    pub(super) fn new(n: usize, half: Duration) -> Self {
        let start = Instant::now();
        StallWatch {
            half,
            outq: vec![(0, start); n],
            arrived: vec![(0, start); n],
            outq_moved: start,
        }
    }

    pub(super) fn look(&mut self, tx: &mut NetSender, fds: &[i32], ids: &[u32], acks: &Acks) {
        let now = Instant::now();
        let mut stuck = Vec::new();
        for st in 0..fds.len() as u32 {
            if !tx.is_live(st) {
                continue;
            }
            if sys::tcp_progress(fds[st as usize]).is_some_and(|t| !t.connected) {
                tx.lose(
                    st,
                    lost(
                        "the connection closed".into(),
                        std::io::ErrorKind::ConnectionReset,
                    ),
                );
                continue;
            }
            let q = tx.unacknowledged(st);
            let (last, since) = &mut self.outq[st as usize];
            if q < *last {
                self.outq_moved = now;
            }
            if q == 0 || q != *last {
                (*last, *since) = (q, now);
            } else if now.duration_since(*since) > self.half {
                stuck.push((st, q));
            }
            let id = ids[st as usize];
            let got = acks.received_by(id);
            let (last, since) = &mut self.arrived[st as usize];
            if got >= tx.stream_bytes(st) || got != *last || q != 0 || !acks.waiting_on(id) {
                (*last, *since) = (got, now);
            } else if now.duration_since(*since) > self.half {
                let behind = tx.stream_bytes(st) - got;
                let why = format!(
                    "stalled: {behind} bytes the peer's TCP took never reached the receiver in {} s",
                    self.half.as_secs()
                );
                tx.lose(st, lost(why, std::io::ErrorKind::TimedOut));
            }
        }
        if now.duration_since(self.outq_moved) < self.half {
            for (st, q) in stuck {
                let why = format!(
                    "stalled: {q} bytes unacknowledged for {} s while other streams moved",
                    self.half.as_secs()
                );
                tx.lose(st, lost(why, std::io::ErrorKind::TimedOut));
            }
        }
    }
}

pub(super) fn lost(why: String, kind: std::io::ErrorKind) -> std::io::Error {
    std::io::Error::new(kind, why)
}
