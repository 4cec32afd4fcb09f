//! What the sender does with each completion: a finished read goes to the
//! caller, a send that came back short goes again for the rest, a failed
//! stream is lost, and a zero-copy notification returns its buffer (and
//! tells whether zero-copy is copying anyway).

use std::io;
use std::time::Instant;

use crate::datapath::error::is_retry;
use crate::datapath::net::zerocopy::{ZeroCopy, ZC_PROBE_NOTIFS};
use crate::datapath::ring::ZC_COPIED;
use crate::datapath::{Completion, Lease};

use super::{NetSender, SendOp, Sending};

impl NetSender {
    pub(super) fn complete(&mut self, c: Completion<SendOp>) {
        let Completion {
            result,
            lease,
            tag,
            more,
            notif,
        } = c;
        match tag {
            SendOp::Read { token } => {
                let lease = lease.expect("reads carry a buffer");
                self.reads_done.push_back((token, result, lease));
            }
            SendOp::Send(send) if notif => {
                let lease = lease.expect("a notification returns the buffer");
                self.notified(send.stream, lease, result, send.len);
            }
            SendOp::Send(send) => self.sent(send, result, lease, more),
        }
    }

    /// A send's result: a short or retried one goes again for the rest
    /// (from its buffer, or from the notification that returns it), a
    /// failed one loses its stream, a whole frame frees the stream for the
    /// next.
    fn sent(&mut self, send: Sending, result: i32, lease: Option<Lease>, more: bool) {
        let stream = send.stream;
        if !self.queues[stream as usize].live {
            // The stream was given up while this send was in flight.
            if let Some(lease) = lease {
                self.ring.arena().give_back(lease);
            }
            return;
        }
        if result < 0 {
            if is_retry(-result) {
                self.send_rest(send, send.done, lease);
                return;
            }
            if let Some(lease) = lease {
                self.ring.arena().give_back(lease);
            }
            self.lose(stream, io::Error::from_raw_os_error(-result));
            return;
        }
        if result > 0 {
            self.progressed(stream, result as u64);
        }
        let done = send.done + result as u32;
        assert!(done <= send.len, "the kernel sent more than asked");
        if done < send.len {
            // Short send: the rest goes out before anything else on this stream.
            self.send_rest(send, done, lease);
            return;
        }
        self.stats.frames += 1;
        self.stats.bytes += u64::from(send.len);
        if !more {
            if let Some(lease) = lease {
                self.ring.arena().give_back(lease);
            }
        }
        self.queues[stream as usize].busy = false;
        self.issue(stream);
    }

    /// Send the rest of `send` from byte `done`: now, with its buffer, or
    /// (a zero-copy send whose buffer the kernel still holds) when its
    /// notification returns it.
    fn send_rest(&mut self, send: Sending, done: u32, lease: Option<Lease>) {
        match lease {
            Some(lease) => self.push_send(send.stream, lease, send.len, done),
            None => self.queues[send.stream as usize].rest_from = Some((send.buf, done)),
        }
    }

    /// A zero-copy send's notification: the kernel is done with `lease`.
    fn notified(&mut self, stream: u32, lease: Lease, result: i32, len: u32) {
        self.stats.zc_notifs += 1;
        if result & ZC_COPIED != 0 {
            self.stats.zc_copied += 1;
        }
        if self.mode == ZeroCopy::Auto
            && self.zc_now
            && self.stats.zc_notifs >= ZC_PROBE_NOTIFS
            && self.stats.zc_copied == self.stats.zc_notifs
        {
            self.zc_now = false;
            self.stats.zc_fell_back = true;
        }
        // Resume a short send only with its own buffer: another frame
        // of this stream may have been sent since.
        let q = &mut self.queues[stream as usize];
        match q.rest_from {
            Some((index, done)) if index == lease.index() => {
                q.rest_from = None;
                self.push_send(stream, lease, len, done)
            }
            _ => self.ring.arena().give_back(lease),
        }
    }

    /// `bytes` of `stream` went out: counted, published, and the peer's
    /// progress noted.
    fn progressed(&mut self, stream: u32, bytes: u64) {
        let now = Instant::now();
        self.sent[stream as usize] += bytes;
        if let Some(p) = &self.published {
            p.store(
                self.ids[stream as usize] as usize,
                self.sent[stream as usize],
            );
        }
        self.queues[stream as usize].last_progress = now;
        // The peer as a whole moves when its TCP acknowledges: a send
        // into a fresh socket's buffer (a lost stream's frames moved to
        // an idle one) is no sign of a live receiver.
        if self.peer_acked(stream) {
            self.last_any_progress = now;
            self.lost_waiting = false;
        }
    }
}
