//! Control messages over a blocking TCP stream, every read bounded in size
//! (checked before allocating) and in time (socket timeouts).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use crate::protocol::control::{body_len, decode_body, encode, Message};

use super::SessionError;

pub fn send_msg(s: &mut TcpStream, m: &Message) -> Result<(), SessionError> {
    s.write_all(&encode(m))
        .map_err(|e| SessionError::io("sending a control message", e))
}

/// Read one message. A peer's `Error` message is returned as an error.
pub fn recv_msg(s: &mut TcpStream) -> Result<Message, SessionError> {
    match recv_any(s)? {
        Message::Error { code, message } => Err(SessionError::Refused { code, message }),
        m => Ok(m),
    }
}

/// Read one message, `Error` included.
pub fn recv_any(s: &mut TcpStream) -> Result<Message, SessionError> {
    let mut prefix = [0u8; 4];
    s.read_exact(&mut prefix)
        .map_err(|e| read_err(e, "reading a control message"))?;
    let len = body_len(prefix).map_err(|e| SessionError::Protocol(e.to_string()))?;
    let mut body = vec![0u8; len];
    s.read_exact(&mut body)
        .map_err(|e| read_err(e, "reading a control message"))?;
    decode_body(&body).map_err(|e| SessionError::Protocol(e.to_string()))
}

/// Heartbeats on a control connection while this side works without
/// anything else to say (reading files for digests, checking what it holds),
/// so the peer's read timeout measures silence, not work.
pub struct Beat {
    s: TcpStream,
    last: Instant,
}

impl Beat {
    pub fn new(s: &TcpStream) -> Result<Beat, SessionError> {
        Ok(Beat {
            s: s.try_clone()
                .map_err(|e| SessionError::io("control connection", e))?,
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
pub fn recv_small_by(s: &mut TcpStream, deadline: Instant) -> Result<Message, SessionError> {
    let what = "reading a handshake message";
    let mut prefix = [0u8; 4];
    read_exact_by(s, &mut prefix, deadline).map_err(|e| read_err(e, what))?;
    let len = body_len(prefix).map_err(|e| SessionError::Protocol(e.to_string()))?;
    if len > UNAUTHENTICATED_LEN_MAX {
        return Err(SessionError::Protocol(format!(
            "a {len}-byte message before authentication (at most {UNAUTHENTICATED_LEN_MAX})"
        )));
    }
    let mut body = [0u8; UNAUTHENTICATED_LEN_MAX];
    read_exact_by(s, &mut body[..len], deadline).map_err(|e| read_err(e, what))?;
    decode_body(&body[..len]).map_err(|e| SessionError::Protocol(e.to_string()))
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
pub fn fail(s: &mut TcpStream, e: SessionError) -> SessionError {
    let msg = Message::Error {
        code: e.code(),
        message: e.to_string(),
    };
    if s.write_all(&encode(&msg)).is_ok() {
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
