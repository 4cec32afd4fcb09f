//! Control messages over a blocking TCP stream, every read bounded in size
//! (checked before allocating) and in time (socket timeouts).

use std::io::{Read, Write};
use std::net::TcpStream;

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
