//! A connection's socket with a deadline: while one is set, every read
//! waits only for what is left of it, so a client sending a byte at a time
//! cannot stretch its TLS handshake or a request head (each byte would
//! otherwise start a read timeout anew).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// A TCP stream whose reads end at a deadline, when one is set.
pub struct Deadlined {
    sock: TcpStream,
    deadline: Option<Instant>,
    /// The read timeout without a deadline (between a head and its body).
    idle: Duration,
}

impl Deadlined {
    pub fn new(sock: TcpStream, idle: Duration) -> Deadlined {
        Deadlined {
            sock,
            deadline: None,
            idle,
        }
    }

    /// Reads end by `at` (None: each waits `idle` at most).
    pub fn set_deadline(&mut self, at: Option<Instant>) {
        self.deadline = at;
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }
}

impl Read for Deadlined {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let wait = match self.deadline {
            None => self.idle,
            Some(at) => {
                let left = at.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the handshake or request head took too long",
                    ));
                }
                left.min(self.idle)
            }
        };
        self.sock.set_read_timeout(Some(wait))?;
        self.sock.read(buf)
    }
}

impl Write for Deadlined {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.sock.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.sock.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trickle_ends_at_the_deadline() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let writer = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            for _ in 0..40 {
                if s.write_all(b"x").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let (s, _) = l.accept().unwrap();
        let mut d = Deadlined::new(s, Duration::from_secs(60));
        let started = Instant::now();
        d.set_deadline(Some(started + Duration::from_millis(400)));
        let mut buf = [0u8; 1];
        let e = loop {
            match d.read(&mut buf) {
                Ok(0) => panic!("closed"),
                Ok(_) => continue,
                Err(e) => break e,
            }
        };
        assert!(
            matches!(
                e.kind(),
                io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
            ),
            "{e}"
        );
        assert!(started.elapsed() < Duration::from_secs(2));
        drop(d);
        writer.join().unwrap();
    }
}
