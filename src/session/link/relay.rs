//! `--through-ssh`: a session's TCP connections carried inside the ssh
//! channel, for hosts whose firewall admits only ssh. Each side keeps its
//! session code on ordinary loopback connections: the client's relay
//! accepts them on a loopback listener, the remote's opens them to its
//! own; between the two, every connection's bytes travel as frames on
//! the one pipe pair: `channel u32 | length u32 | bytes` (big-endian), a
//! length of 0 closing the channel. Each channel has its own writer and a
//! bounded queue, so one connection slow to take its bytes holds the
//! others back only once its queue ([`QUEUE_CHUNKS`] chunks) is full.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Mutex};

/// Bytes a frame carries at most.
pub const CHUNK: usize = 64 << 10;
/// Chunks queued for one connection before the pipe waits for it.
pub const QUEUE_CHUNKS: usize = 64;

/// The pipe frames are written to, shared by every connection's reader;
/// `None` once the relay is closed (the ssh channel let go).
pub type PipeOut = Arc<Mutex<Option<Box<dyn Write + Send>>>>;

/// An open channel: the queue to its connection's writer, and the
/// connection, shut down when the relay ends.
struct Channel {
    tx: SyncSender<Vec<u8>>,
    conn: TcpStream,
}

/// The open channels by number.
type Channels = Arc<Mutex<HashMap<u32, Channel>>>;

fn lock(chans: &Channels) -> std::sync::MutexGuard<'_, HashMap<u32, Channel>> {
    chans.lock().unwrap_or_else(|p| p.into_inner())
}

/// Which side of the channel this relay is.
pub enum Side {
    /// The client: its session connects to this listener, each connection
    /// a new channel.
    Accept(TcpListener),
    /// The remote: a new channel is a new connection to this address.
    Connect(SocketAddr),
}

/// Carry connections over `pipe_in`/`out` until `pipe_in` ends (the other
/// side or ssh is gone). Every connection is then shut down.
pub fn run(mut pipe_in: impl Read, out: PipeOut, side: Side) {
    let chans: Channels = Arc::default();
    let connect_to = match side {
        Side::Accept(listener) => {
            let (chans, out) = (Arc::clone(&chans), Arc::clone(&out));
            std::thread::spawn(move || accept(listener, &chans, &out));
            None
        }
        Side::Connect(addr) => Some(addr),
    };
    let mut head = [0u8; 8];
    while pipe_in.read_exact(&mut head).is_ok() {
        let chan = u32::from_be_bytes(head[..4].try_into().expect("4 bytes"));
        let len = u32::from_be_bytes(head[4..].try_into().expect("4 bytes")) as usize;
        let mut bytes = vec![0u8; len.min(CHUNK)];
        if len > CHUNK || pipe_in.read_exact(&mut bytes).is_err() {
            break;
        }
        let known = lock(&chans).get(&chan).map(|c| c.tx.clone());
        let sender = match (known, connect_to) {
            (Some(s), _) => Some(s),
            (None, Some(addr)) if len > 0 => TcpStream::connect(addr)
                .ok()
                .and_then(|s| open(chan, s, &chans, &out)),
            _ => None,
        };
        match (sender, len) {
            (Some(_), 0) | (None, _) => {
                lock(&chans).remove(&chan);
                if len > 0 {
                    send_frame(&out, chan, &[]);
                }
            }
            (Some(s), _) => {
                let _ = s.send(bytes);
            }
        }
    }
    for (_, c) in lock(&chans).drain() {
        let _ = c.conn.shutdown(Shutdown::Both);
    }
}

/// The client side's accept loop: each connection a channel, if this
/// process made it (the listener is on loopback, open to every local
/// user: another's connection is closed at once, at no thread's cost).
fn accept(listener: TcpListener, chans: &Channels, out: &PipeOut) {
    let mut next = 1u32;
    let Ok(local) = listener.local_addr() else {
        return;
    };
    for s in listener.incoming() {
        let Ok(s) = s else { continue };
        if out.lock().unwrap_or_else(|p| p.into_inner()).is_none() {
            return;
        }
        let ours = s
            .peer_addr()
            .is_ok_and(|peer| crate::datapath::sys::connected_from_this_process(peer, local));
        if !ours {
            continue;
        }
        open(next, s, chans, out);
        next = next.wrapping_add(1);
    }
}

/// Start carrying connection `s` as channel `chan`: a reader that frames
/// what it sends onto the pipe, and a writer of what arrives for it. None
/// when the connection cannot be shared between the two.
fn open(chan: u32, s: TcpStream, chans: &Channels, out: &PipeOut) -> Option<SyncSender<Vec<u8>>> {
    let _ = s.set_nodelay(true);
    let (mut w, conn) = (s.try_clone().ok()?, s.try_clone().ok()?);
    let (tx, rx) = sync_channel::<Vec<u8>>(QUEUE_CHUNKS);
    let channel = Channel {
        tx: tx.clone(),
        conn,
    };
    lock(chans).insert(chan, channel);
    std::thread::spawn(move || {
        for bytes in rx {
            if w.write_all(&bytes).is_err() {
                break;
            }
        }
        let _ = w.shutdown(Shutdown::Write);
    });
    let (out, mut r) = (Arc::clone(out), s);
    std::thread::spawn(move || {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match r.read(&mut buf) {
                Ok(n) if n > 0 => {
                    if !send_frame(&out, chan, &buf[..n]) {
                        break;
                    }
                }
                _ => break,
            }
        }
        send_frame(&out, chan, &[]);
    });
    Some(tx)
}

/// Write one frame; false once the pipe is closed or broken.
fn send_frame(out: &PipeOut, chan: u32, bytes: &[u8]) -> bool {
    let mut guard = out.lock().unwrap_or_else(|p| p.into_inner());
    let Some(w) = guard.as_mut() else {
        return false;
    };
    let mut head = [0u8; 8];
    head[..4].copy_from_slice(&chan.to_be_bytes());
    head[4..].copy_from_slice(&(bytes.len() as u32).to_be_bytes());
    let ok = w
        .write_all(&head)
        .and_then(|()| w.write_all(bytes))
        .and_then(|()| w.flush())
        .is_ok();
    if !ok {
        *guard = None;
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two relays joined by pipes carry two connections at once, both
    /// ways, byte for byte, and a connection's close reaches the other end.
    #[test]
    fn connections_cross_the_pipe_intact_and_close() {
        let far = TcpListener::bind("127.0.0.1:0").unwrap();
        let far_addr = far.local_addr().unwrap();
        let near = TcpListener::bind("127.0.0.1:0").unwrap();
        let near_addr = near.local_addr().unwrap();
        let (a_in, b_out) = std::io::pipe().unwrap();
        let (b_in, a_out) = std::io::pipe().unwrap();
        let a_out: PipeOut = Arc::new(Mutex::new(Some(Box::new(a_out))));
        let b_out: PipeOut = Arc::new(Mutex::new(Some(Box::new(b_out))));
        std::thread::spawn(move || run(a_in, a_out, Side::Accept(near)));
        std::thread::spawn(move || run(b_in, b_out, Side::Connect(far_addr)));
        let echo = std::thread::spawn(move || {
            for _ in 0..2 {
                let (mut s, _) = far.accept().unwrap();
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    s.read_to_end(&mut got).unwrap();
                    got.reverse();
                    s.write_all(&got).unwrap();
                });
            }
        });
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let clients: Vec<_> = (0..2)
            .map(|_| {
                let data = data.clone();
                std::thread::spawn(move || {
                    let mut s = TcpStream::connect(near_addr).unwrap();
                    s.write_all(&data).unwrap();
                    s.shutdown(Shutdown::Write).unwrap();
                    let mut back = Vec::new();
                    s.read_to_end(&mut back).unwrap();
                    back
                })
            })
            .collect();
        let mut want = data.clone();
        want.reverse();
        for c in clients {
            assert_eq!(c.join().unwrap(), want);
        }
        echo.join().unwrap();
    }
}
