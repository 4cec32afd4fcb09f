//! Control messages over a blocking TCP stream, every read bounded in size
//! (checked before allocating) and in time (socket timeouts).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::protocol::control::Limit;
use crate::protocol::control::{body_len, decode_body_at, encode_at, Message, CONTROL_LEN_MAX};
use crate::protocol::conversation::{kind_of, Conversation, Side, State, Unexpected};
use crate::protocol::handshake::{AuthError, SessionKeys, VERSION};
use crate::protocol::negotiate::{self, Range};
use crate::protocol::seal::{Direction, FrameOpener, FrameSealer, TAG_LEN};
use crate::session::limit::LimitRefusal;

use crate::datapath::sys::Waker;
use crate::protocol::manifest::Entry;
use crate::session::SessionError;
use std::sync::mpsc;

/// The "stream" whose keys seal control messages (data streams are 0..256).
const CONTROL_STREAM: u16 = u16::MAX;

/// Sealing state of a control connection, shared by its clones (a reader
/// thread, a heartbeat) so the frame counters stay in step.
#[derive(Default)]
struct Sealing {
    sealer: Mutex<Option<FrameSealer>>,
    opener: Mutex<Option<FrameOpener>>,
    /// Messages read early and handed back (see [`Control::unread`]).
    pending: Mutex<std::collections::VecDeque<Message>>,
    /// The conversation every message sent and received is checked
    /// against: from the connection's first message (a `Hello` or a data
    /// stream's hello: the side that sends it is the client), or from
    /// [`Control::secure`] when the handshake was spoken around this
    /// handle. A connection that opens with anything else is not checked
    /// (a daemon refuses it at once).
    talk: Mutex<Option<Conversation>>,
}

/// Check `m`, sent (`sent`) or received on `c`, against its conversation.
fn check(c: &Control, m: &Message, sent: bool) -> Result<(), SessionError> {
    let mut talk = lock(&c.sealing.talk);
    if talk.is_none() && matches!(m, Message::Hello(_) | Message::StreamHello { .. }) {
        let side = if sent { Side::Client } else { Side::Daemon };
        *talk = Some(Conversation::new(side, VERSION));
    }
    let Some(t) = talk.as_mut() else {
        return Ok(());
    };
    match sent {
        true => t.on_send(m),
        false => t.on_recv(m),
    }
    .map_err(SessionError::OutOfOrder)
}

/// The error for a message the table allows but the code reading it has
/// no use for here: the peer's `m` refused as out of order, with what the
/// conversation expects at this point.
pub fn unexpected(c: &Control, m: &Message) -> SessionError {
    let talk = lock(&c.sealing.talk);
    let (state, role, side, expected) = match talk.as_ref() {
        Some(t) => (t.state(), t.role(), t.side(), t.expected()),
        None => (State::Start, None, Side::Client, Vec::new()),
    };
    SessionError::OutOfOrder(Unexpected {
        state,
        role,
        from: side.other(),
        kind: kind_of(m),
        expected,
    })
}

/// A control connection. After the handshake both sides [`secure`] it:
/// every message is then sealed with AES-256-GCM under keys derived from
/// the session key (its own key per direction, a counter as the nonce, the
/// length authenticated), so nobody on the path can read, inject, drop,
/// replay or reorder a message: not an acknowledgement, not what a resume
/// says the receiver holds.
///
/// [`secure`]: Control::secure
pub struct Control {
    s: TcpStream,
    sealing: Arc<Sealing>,
    /// Each whole message must arrive within this (however slowly its
    /// bytes trickle in).
    timeout: Option<Duration>,
    /// The protocol version the session speaks (agreed in the handshake;
    /// `handshake::VERSION` until then).
    protocol: u16,
}

impl Control {
    pub fn new(s: TcpStream) -> Control {
        Control {
            s,
            sealing: Arc::default(),
            timeout: None,
            protocol: crate::protocol::handshake::VERSION,
        }
    }

    /// The protocol version the session speaks.
    pub fn protocol(&self) -> u16 {
        self.protocol
    }

    /// Speak protocol `v` from now on (the handshake agreed it), in the
    /// codec and in the conversation.
    pub fn set_protocol(&mut self, v: u16) {
        self.protocol = v;
        if let Some(t) = lock(&self.sealing.talk).as_mut() {
            t.set_version(v);
        }
    }

    /// Another handle on the same connection and the same sealing state.
    pub fn try_clone(&self) -> Result<Control, SessionError> {
        Ok(Control {
            s: self
                .s
                .try_clone()
                .map_err(|e| SessionError::io("control connection", e))?,
            sealing: Arc::clone(&self.sealing),
            timeout: self.timeout,
            protocol: self.protocol,
        })
    }

    /// Seal every message from now on (`client`: which side this is).
    pub fn secure(&self, keys: &SessionKeys, client: bool) {
        let (out, inn) = if client {
            (Direction::ClientToServer, Direction::ServerToClient)
        } else {
            (Direction::ServerToClient, Direction::ClientToServer)
        };
        let mut talk = lock(&self.sealing.talk);
        if talk.as_ref().is_none_or(|t| t.state() == State::Start) {
            let side = if client { Side::Client } else { Side::Daemon };
            *talk = Some(Conversation::handshaken(side, VERSION));
        }
        drop(talk);
        *lock(&self.sealing.sealer) = Some(FrameSealer::new(keys, out, CONTROL_STREAM));
        *lock(&self.sealing.opener) = Some(FrameOpener::new(keys, inn, CONTROL_STREAM));
    }

    /// Hand back a message read before its time (a session that watched the
    /// connection while waiting for something else): the next read, on
    /// this handle or a clone, returns it first.
    pub fn unread(&self, m: Message) {
        lock(&self.sealing.pending).push_back(m);
    }

    pub fn tcp(&self) -> &TcpStream {
        &self.s
    }

    pub fn into_tcp(self) -> TcpStream {
        self.s
    }

    /// Every message read from now on must arrive whole within `d`.
    pub fn set_read_timeout(&mut self, d: Option<Duration>) -> Result<(), SessionError> {
        self.timeout = d;
        self.s
            .set_read_timeout(d)
            .map_err(|e| SessionError::io("control connection", e))
    }

    /// Read exactly `buf`, all of it within the message deadline.
    fn read_exact(&mut self, buf: &mut [u8], deadline: Option<Instant>) -> std::io::Result<()> {
        match deadline {
            Some(d) => {
                let r = read_exact_by(&mut self.s, buf, d);
                // The deadline read moved the socket's timeout: put it back.
                let _ = self.s.set_read_timeout(self.timeout);
                r
            }
            None => self.s.read_exact(buf),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The 32 bytes a sealed message authenticates besides its body: its
/// length prefix.
fn aad(prefix: [u8; 4]) -> [u8; 32] {
    let mut a = [0u8; 32];
    a[..4].copy_from_slice(&prefix);
    a
}

/// Send `m`, once the conversation allows it here, as the session's
/// protocol version has it (one that version lacks is this side's error,
/// never bytes the peer cannot read).
pub fn send_msg(c: &mut Control, m: &Message) -> Result<(), SessionError> {
    check(c, m, true)?;
    let bytes = encode_at(m, c.protocol).map_err(SessionError::Encode)?;
    send_encoded(c, bytes)
}

/// Send one message already encoded (length prefix and body), sealed when
/// the connection is secured. Bytes are not checked against the
/// conversation (they may be anything: a test's forgery): [`send_msg`] is.
pub fn send_encoded(c: &mut Control, mut bytes: Vec<u8>) -> Result<(), SessionError> {
    let mut sealer = lock(&c.sealing.sealer);
    if let Some(sealer) = sealer.as_mut() {
        let len = (bytes.len() - 4 + TAG_LEN) as u32;
        bytes[..4].copy_from_slice(&len.to_le_bytes());
        let prefix: [u8; 4] = bytes[..4].try_into().expect("4 bytes");
        let tag = sealer
            .seal(&aad(prefix), &mut bytes[4..])
            .map_err(SessionError::Seal)?;
        bytes.extend_from_slice(&tag);
    }
    // Written under the sealer's lock: messages leave in counter order.
    c.s.write_all(&bytes)
        .map_err(|e| SessionError::io("sending a control message", e))
}

/// Read one message. A peer's `Error` message is returned as an error.
pub fn recv_msg(c: &mut Control) -> Result<Message, SessionError> {
    match recv_any(c)? {
        Message::Error { code, message } => Err(SessionError::Refused { code, message }),
        Message::StreamsRefused { asked, max } => Err(SessionError::TooManyStreams {
            asked,
            max,
            ours: false,
        }),
        Message::LimitRefused {
            limit: Limit::Streams,
            asked,
            max,
            ..
        } => Err(SessionError::TooManyStreams {
            asked: u16::try_from(asked).unwrap_or(u16::MAX),
            max: u16::try_from(max).unwrap_or(u16::MAX),
            ours: false,
        }),
        Message::LimitRefused {
            limit,
            asked,
            max,
            in_use,
        } => Err(SessionError::Limit(LimitRefusal {
            limit,
            asked,
            max,
            in_use,
            ours: false,
        })),
        Message::VersionRefused { oldest, newest } => {
            let theirs = Range {
                min: oldest,
                max: newest,
            };
            // Unsealed, before any proof: one that refuses versions this
            // side offered is no daemon's honest answer.
            match negotiate::choose(negotiate::OURS, theirs) {
                Ok(_) => Err(SessionError::Protocol(format!(
                    "the daemon refused protocols {oldest}-{newest}, which this client offered: a broken or tampered connection"
                ))),
                Err(e) => Err(SessionError::Auth(AuthError::NoCommonVersion(e))),
            }
        }
        m => Ok(m),
    }
}

/// Read one message, `Error` included, once the conversation allows it
/// here (a message handed back by [`Control::unread`] was checked when
/// first read).
pub fn recv_any(c: &mut Control) -> Result<Message, SessionError> {
    if let Some(m) = lock(&c.sealing.pending).pop_front() {
        return Ok(m);
    }
    let m = read_any(c)?;
    check(c, &m, false)?;
    Ok(m)
}

fn read_any(c: &mut Control) -> Result<Message, SessionError> {
    let what = "reading a control message";
    let mut prefix = [0u8; 4];
    // The clock starts with the message's first byte: silence between
    // messages is the socket timeout's, a trickle within one is bounded.
    c.read_exact(&mut prefix[..1], None)
        .map_err(|e| read_err(e, what))?;
    let deadline = c.timeout.map(|t| Instant::now() + t);
    c.read_exact(&mut prefix[1..], deadline)
        .map_err(|e| read_err(e, what))?;
    let sealed = lock(&c.sealing.opener).is_some();
    if !sealed {
        let len = body_len(prefix).map_err(SessionError::Decode)?;
        let mut body = vec![0u8; len];
        c.read_exact(&mut body, deadline)
            .map_err(|e| read_err(e, what))?;
        return decode_body_at(&body, c.protocol).map_err(SessionError::Decode);
    }
    let len = u32::from_le_bytes(prefix) as usize;
    if len <= TAG_LEN || len > CONTROL_LEN_MAX as usize + TAG_LEN {
        return Err(SessionError::Protocol(format!(
            "a sealed control message of {len} bytes"
        )));
    }
    let mut body = vec![0u8; len];
    c.read_exact(&mut body, deadline)
        .map_err(|e| read_err(e, what))?;
    let (msg, tag) = body.split_at_mut(len - TAG_LEN);
    let tag: [u8; TAG_LEN] = (&*tag).try_into().expect("a tag's bytes");
    lock(&c.sealing.opener)
        .as_mut()
        .expect("checked above")
        .open(&aad(prefix), msg, &tag)
        .map_err(|_| SessionError::Unauthentic)?;
    decode_body_at(msg, c.protocol).map_err(SessionError::Decode)
}

/// Events of the peer read and not yet handled, at most.
const PEER_EVENTS_QUEUED: usize = 16;

/// Read what the peer says on `ctl` while data flows, on a thread of its
/// own, and hand it on as [`PeerEvent`]s until the connection ends (or the
/// owner shuts its reading side down). No read timeout applies: a long
/// file is a long silence.
pub(crate) fn spawn_peer_reader(
    ctl: &Control,
) -> Result<(std::thread::JoinHandle<()>, Peer), SessionError> {
    let mut c = ctl.try_clone()?;
    c.set_read_timeout(None)?;
    // Bounded: a peer that floods the control connection (a follow's
    // directory times, say) waits on its socket, not on this side's memory.
    let (tx, events) = std::sync::mpsc::sync_channel(PEER_EVENTS_QUEUED);
    let waker = Arc::new(
        crate::datapath::sys::Waker::new().map_err(|e| SessionError::io("an eventfd", e))?,
    );
    let ring = Arc::clone(&waker);
    let reader = std::thread::spawn(move || loop {
        let ev = match recv_any(&mut c) {
            Ok(Message::SourceDigests(list)) => PeerEvent::Digests(list),
            Ok(Message::FileEnd {
                file_index,
                size,
                mtime_s,
                mtime_ns,
            }) => PeerEvent::FileEnd(file_index, size, (mtime_s, mtime_ns)),
            Ok(Message::Skipped {
                file_index,
                reason,
                rule,
                ..
            }) => PeerEvent::Skipped(super::refused::Refused::entry(
                file_index,
                super::refused::Why { text: reason, rule },
            )),
            Ok(Message::Summary { files, bytes, ok }) => PeerEvent::Summary { files, bytes, ok },
            Ok(Message::Added { first, entries }) => PeerEvent::Added(first, entries),
            Ok(Message::AddedEnd) => PeerEvent::AddedEnd,
            Ok(Message::DirTimes(list)) => PeerEvent::DirTimes(list),
            // The sender of a follow is alive while its files are idle.
            Ok(Message::Alive { .. }) => PeerEvent::Alive,
            Ok(Message::Error { code, message }) => {
                PeerEvent::Closed(Some(SessionError::Refused { code, message }))
            }
            Ok(m) => PeerEvent::Closed(Some(unexpected(&c, &m))),
            Err(e) if e.is_connection_loss() => PeerEvent::Closed(None),
            Err(e) => PeerEvent::Closed(Some(e)),
        };
        let last = matches!(ev, PeerEvent::Closed(_));
        let sent = tx.send(ev).is_ok();
        // The receive loop may sleep in its ring: ring it awake.
        ring.wake();
        if !sent || last {
            return;
        }
    });
    Ok((reader, Peer { events, waker }))
}

/// Heartbeats on a control connection while this side works without
/// anything else to say (reading files for digests, checking what it holds),
/// so the peer's read timeout measures silence, not work.
pub struct Beat {
    s: Control,
    last: Instant,
}

impl Beat {
    pub fn new(s: &Control) -> Result<Beat, SessionError> {
        Ok(Beat {
            s: s.try_clone()?,
            last: Instant::now(),
        })
    }

    /// Send a heartbeat if a second passed since the last (best effort:
    /// a broken connection shows on the next real message).
    pub fn tick(&mut self) {
        if self.last.elapsed() >= std::time::Duration::from_secs(1) {
            self.last = Instant::now();
            let _ = send_msg(
                &mut self.s,
                &Message::Alive {
                    streams: Vec::new(),
                },
            );
        }
    }
}

/// Largest message a peer may send before it has authenticated (a Hello,
/// an Auth or a data stream's hello are a few dozen bytes).
pub const UNAUTHENTICATED_LEN_MAX: usize = 256;

/// Read one message of at most [`UNAUTHENTICATED_LEN_MAX`] bytes, all of it
/// by `deadline` (however slowly the bytes trickle in), `Error` included.
pub fn recv_small_by(c: &mut Control, deadline: Instant) -> Result<Message, SessionError> {
    let s = &mut c.s;
    let what = "reading a handshake message";
    let mut prefix = [0u8; 4];
    read_exact_by(s, &mut prefix, deadline).map_err(|e| read_err(e, what))?;
    let len = body_len(prefix).map_err(SessionError::Decode)?;
    if len > UNAUTHENTICATED_LEN_MAX {
        return Err(SessionError::Protocol(format!(
            "a {len}-byte message before authentication (at most {UNAUTHENTICATED_LEN_MAX})"
        )));
    }
    let mut body = [0u8; UNAUTHENTICATED_LEN_MAX];
    read_exact_by(s, &mut body[..len], deadline).map_err(|e| read_err(e, what))?;
    let m = decode_body_at(&body[..len], c.protocol).map_err(SessionError::Decode)?;
    check(c, &m, false)?;
    Ok(m)
}

fn read_exact_by(s: &mut TcpStream, mut buf: &mut [u8], deadline: Instant) -> std::io::Result<()> {
    while !buf.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        s.set_read_timeout(Some(left))?;
        match s.read(buf) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => buf = &mut buf[n..],
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn read_err(e: std::io::Error, what: &str) -> SessionError {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => SessionError::io(
            what,
            std::io::Error::new(std::io::ErrorKind::TimedOut, "the peer went silent"),
        ),
        std::io::ErrorKind::UnexpectedEof => SessionError::io(
            what,
            std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the peer closed the connection",
            ),
        ),
        _ => SessionError::io(what, e),
    }
}

/// Tell the peer why we stop (best effort) and return the error. What the
/// peer still sends is drained briefly, so closing does not reset the
/// connection before the peer has read why.
/// How protocol `v` says `e` to the peer: a limit as its numbers (12 has
/// them for streams only), a version refusal as the versions, anything
/// else as its code and text.
fn refusal(v: u16, e: &SessionError) -> Message {
    let limit = |limit, asked, max, in_use| Message::LimitRefused {
        limit,
        asked,
        max,
        in_use,
    };
    match e {
        SessionError::TooManyStreams { asked, max, .. } if v >= 13 => {
            limit(Limit::Streams, u64::from(*asked), u64::from(*max), 0)
        }
        SessionError::TooManyStreams { asked, max, .. } => Message::StreamsRefused {
            asked: *asked,
            max: *max,
        },
        SessionError::Limit(l) if v >= 13 => limit(l.limit, l.asked, l.max, l.in_use),
        SessionError::Auth(AuthError::NoCommonVersion(n)) if v >= 13 => Message::VersionRefused {
            oldest: n.ours.min,
            newest: n.ours.max,
        },
        _ => Message::Error {
            code: e.code(),
            message: e.to_string(),
        },
    }
}

pub fn fail(c: &mut Control, e: SessionError) -> SessionError {
    let msg = refusal(c.protocol, &e);
    if send_msg(c, &msg).is_ok() {
        let s = &mut c.s;
        let _ = s.shutdown(std::net::Shutdown::Write);
        let _ = s.set_read_timeout(Some(std::time::Duration::from_millis(500)));
        let mut sink = [0u8; 64 << 10];
        let until = std::time::Instant::now() + std::time::Duration::from_secs(1);
        while std::time::Instant::now() < until {
            match s.read(&mut sink) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    }
    e
}

/// The other side's words while data flows, from its reader thread, and
/// the eventfd that thread rings so a receive loop asleep in its ring
/// wakes to hear them.
pub(crate) struct Peer {
    pub(crate) events: mpsc::Receiver<PeerEvent>,
    pub(crate) waker: std::sync::Arc<Waker>,
}

/// What the other side says on the control connection while data flows.
#[derive(Debug)]
pub(crate) enum PeerEvent {
    /// The sender's digest of each file it read through: (entry, digest).
    Digests(Vec<(u32, u64)>),
    /// The sender dropped an entry: (entry, why).
    Skipped(super::refused::Refused),
    /// A heartbeat: the sender is there (its followed files are idle).
    Alive,
    /// Entries a follow added, numbered from the first.
    Added(u32, Vec<Entry>),
    /// A follow adds nothing more.
    AddedEnd,
    /// Directories a follow changed: (entry, mtime).
    DirTimes(Vec<(u32, i64, u32)>),
    /// A growing file stopped growing: (entry, its size, its mtime).
    FileEnd(u32, u64, (i64, u32)),
    /// The sender's summary (pull: the daemon is done sending).
    Summary { files: u64, bytes: u64, ok: bool },
    /// The control connection ended: cleanly (`None`) or with the peer's
    /// error or a broken connection.
    Closed(Option<SessionError>),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::conversation::{sample, Kind, Role};

    fn pair() -> (Control, Control) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (d, _) = l.accept().unwrap();
        (Control::new(c), Control::new(d))
    }

    fn out_of_order(r: Result<impl std::fmt::Debug, SessionError>) -> Unexpected {
        match r {
            Err(SessionError::OutOfOrder(u)) => u,
            other => panic!("not refused as out of order: {other:?}"),
        }
    }

    /// The side is the one that says hello; its clones share the
    /// conversation; a message out of order is refused on sending and on
    /// receiving, naming state, kind and what was expected.
    #[test]
    fn both_ends_check_the_order() {
        let req = crate::protocol::conversation::request_of(Role::Push, false);
        let (mut client, mut daemon) = pair();
        let by = Instant::now() + Duration::from_secs(5);
        send_msg(&mut client, &sample(Kind::Hello, &req)).unwrap();
        assert_eq!(
            recv_small_by(&mut daemon, by).unwrap(),
            sample(Kind::Hello, &req)
        );
        // The client may not prove before it is challenged: nothing leaves.
        let u = out_of_order(send_msg(&mut client, &sample(Kind::Auth, &req)));
        assert_eq!(
            (u.state, u.kind, u.from),
            (State::Hello, Kind::Auth, Side::Client)
        );
        // The daemon's clone challenges; the original then hears a proof
        // sent around the check as out of order (its clone saw the
        // challenge go).
        send_msg(
            &mut daemon.try_clone().unwrap(),
            &sample(Kind::Challenge, &req),
        )
        .unwrap();
        send_encoded(
            &mut client,
            crate::protocol::control::encode(&sample(Kind::Welcome, &req)),
        )
        .unwrap();
        let u = out_of_order(recv_small_by(&mut daemon, by));
        assert_eq!(
            (u.state, u.kind, u.from),
            (State::Challenge, Kind::Welcome, Side::Client)
        );
        assert_eq!(u.expected.len(), 1);
        assert!(
            u.to_string().contains("expects Auth from the client"),
            "{u}"
        );
        // Refused for good, but the daemon may still say why.
        let again = send_msg(&mut daemon, &sample(Kind::Welcome, &req));
        assert_eq!(out_of_order(again), u);
        fail(&mut daemon, SessionError::OutOfOrder(u));
        // The client refused its own proof: it hears nothing more but why.
        let first = out_of_order(recv_msg(&mut client));
        assert_eq!((first.state, first.kind), (State::Hello, Kind::Auth));
        assert!(matches!(
            recv_msg(&mut client),
            Err(SessionError::Refused {
                code: crate::protocol::control::ErrorCode::Malformed,
                ..
            })
        ));
    }
}
