//! The opening of a session over ssh (`urmove send SRC user@host:DEST`):
//! what `urmove serve --stdio`, started by the client through the system
//! `ssh`, and the client say on the ssh channel before urmove's own
//! handshake runs over TCP. Versioned on its own ([`OPENING_VERSION`]).
//!
//! 1. serve writes a [`Greeting`] line at once (a login shell's noise may
//!    come before it: the client skips to its mark);
//! 2. the client writes an [`Opening`]: the mode and a fresh session key,
//!    made for this run and never on a command line or in an environment;
//! 3. serve answers [`Ready`]: where it listens, the home directory the
//!    remote paths are relative to, and its locked-memory limit.

use super::wire::{DecodeError, Reader, Writer};

/// The greeting line's first word.
pub const GREETING_MARK: &str = "URMOVE-SERVE";
/// This build's version of the opening.
pub const OPENING_VERSION: u8 = 1;
/// The binary records' mark (the opening's version in its last byte).
pub const RECORD_MARK: [u8; 8] = *b"URMVSSH1";
/// The longest greeting line read.
pub const GREETING_MAX: usize = 512;

/// What serve says first: the opening's version, its release and the
/// protocol versions it speaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Greeting {
    pub opening: u8,
    pub release: String,
    pub protocol: (u16, u16),
}

impl Greeting {
    /// This build's greeting.
    pub fn ours() -> Greeting {
        Greeting {
            opening: OPENING_VERSION,
            release: env!("CARGO_PKG_VERSION").to_string(),
            protocol: (
                super::negotiate::PROTOCOL_MIN,
                super::negotiate::PROTOCOL_MAX,
            ),
        }
    }

    /// The line, newline included.
    pub fn line(&self) -> String {
        format!(
            "{GREETING_MARK} {} release={} protocol={}-{}\n",
            self.opening, self.release, self.protocol.0, self.protocol.1
        )
    }

    /// A greeting line (without its newline), or None where it is none.
    pub fn parse(line: &str) -> Option<Greeting> {
        let mut words = line.trim_end().split(' ');
        (words.next()? == GREETING_MARK).then_some(())?;
        let opening = words.next()?.parse().ok()?;
        let release = words.next()?.strip_prefix("release=")?.to_string();
        let (lo, hi) = words.next()?.strip_prefix("protocol=")?.split_once('-')?;
        Some(Greeting {
            opening,
            release,
            protocol: (lo.parse().ok()?, hi.parse().ok()?),
        })
    }
}

/// How the session's connections run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// urmove's own TCP streams to a port serve opens.
    Tcp = 0,
    /// Control and data inside the ssh connection (`--through-ssh`).
    ThroughSsh = 1,
}

/// What the client says once greeted.
#[derive(Clone, PartialEq, Eq)]
pub struct Opening {
    pub mode: Mode,
    pub key: super::handshake::Key,
}

impl std::fmt::Debug for Opening {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opening").field("mode", &self.mode).finish()
    }
}

/// An opening's length on the channel.
pub const OPENING_LEN: usize = 8 + 1 + super::handshake::KEY_LEN;

impl Opening {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = RECORD_MARK.to_vec();
        b.push(self.mode as u8);
        b.extend_from_slice(&self.key);
        b
    }

    pub fn decode(b: &[u8; OPENING_LEN]) -> Result<Opening, DecodeError> {
        let mut r = Reader::new(b);
        if r.array::<8>()? != RECORD_MARK {
            return Err(invalid("opening mark", 0));
        }
        let mode = match r.u8()? {
            0 => Mode::Tcp,
            1 => Mode::ThroughSsh,
            m => return Err(invalid("opening mode", m.into())),
        };
        Ok(Opening {
            mode,
            key: r.array()?,
        })
    }
}

fn invalid(what: &'static str, value: u64) -> DecodeError {
    DecodeError::Invalid { what, value }
}

/// serve's answer: where it listens (on loopback under `--through-ssh`),
/// the directory relative paths start from, and the locked memory left
/// for registered buffers: its RLIMIT_MEMLOCK less what its user's
/// processes have pinned (None: unlimited or CAP_IPC_LOCK).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ready {
    pub addr: std::net::IpAddr,
    pub port: u16,
    pub home: String,
    pub memlock: Option<u64>,
    /// The limit itself (RLIMIT_MEMLOCK; None: unlimited or exempt), so a
    /// client picks the same frames run after run when nothing else holds
    /// any (a resumed part continues only with the frames it began with).
    pub memlock_limit: Option<u64>,
}

/// The longest address or home directory a ready record carries.
const TEXT_MAX: usize = 4096;

impl Ready {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.bytes(&RECORD_MARK)
            .u16(self.port)
            .u64(self.memlock.unwrap_or(u64::MAX))
            .u64(self.memlock_limit.unwrap_or(u64::MAX))
            .str16(&self.addr.to_string())
            .name16(&self.home);
        w.buf
    }

    /// A record at the start of `b` and its length; `Short` when more must
    /// be read.
    pub fn decode(b: &[u8]) -> Result<(Ready, usize), DecodeError> {
        let mut r = Reader::new(b);
        if r.array::<8>()? != RECORD_MARK {
            return Err(invalid("ready mark", 0));
        }
        let port = r.u16()?;
        let memlock = Some(r.u64()?).filter(|&m| m != u64::MAX);
        let memlock_limit = Some(r.u64()?).filter(|&m| m != u64::MAX);
        let addr = r.str16("ready address", TEXT_MAX)?;
        let addr = addr.parse().map_err(|_| invalid("ready address", 0))?;
        let home = r.name16("home directory", TEXT_MAX)?;
        let ready = Ready {
            addr,
            port,
            home,
            memlock,
            memlock_limit,
        };
        Ok((ready, b.len() - r.remaining()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_greeting_reads_back_and_noise_is_none() {
        let g = Greeting::ours();
        let line = g.line();
        assert!(line.starts_with("URMOVE-SERVE 1 release="));
        assert_eq!(Greeting::parse(line.trim_end()), Some(g));
        assert_eq!(Greeting::parse("Welcome to dtn2"), None);
        assert_eq!(
            Greeting::parse("URMOVE-SERVE 1 release=x protocol=a-3"),
            None
        );
    }

    #[test]
    fn an_opening_and_a_ready_read_back_and_a_short_ready_asks_for_more() {
        let o = Opening {
            mode: Mode::Tcp,
            key: [7; 32],
        };
        let b: [u8; OPENING_LEN] = o.encode().try_into().unwrap();
        assert_eq!(Opening::decode(&b).unwrap(), o);
        assert!(!format!("{o:?}").contains('7'), "the key is never printed");
        let mut bad = b;
        bad[8] = 9;
        assert!(Opening::decode(&bad).is_err());
        let r = Ready {
            addr: "10.77.0.2".parse().unwrap(),
            port: 40001,
            home: "/home/a b".into(),
            memlock: Some(6 << 20),
            memlock_limit: Some(8 << 20),
        };
        let e = r.encode();
        assert_eq!(Ready::decode(&e).unwrap(), (r, e.len()));
        assert!(matches!(
            Ready::decode(&e[..e.len() - 1]),
            Err(DecodeError::Short { .. })
        ));
    }

    /// Any bytes, and every truncation and one-byte change of a real
    /// record, decode without a panic; what decodes reads back the same
    /// from its own encoding.
    #[test]
    fn any_bytes_decode_or_are_refused_without_a_panic() {
        let r = Ready {
            addr: "fe80::1".parse().unwrap(),
            port: 7,
            home: "/home/u".into(),
            memlock: None,
            memlock_limit: Some(1),
        };
        let good = r.encode();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut inputs: Vec<Vec<u8>> = (0..good.len()).map(|n| good[..n].to_vec()).collect();
        for _ in 0..4000 {
            let mut b = good.clone();
            let at = next() as usize % b.len();
            b[at] = next() as u8;
            inputs.push(b);
            let len = next() as usize % 64;
            inputs.push((0..len).map(|_| next() as u8).collect());
        }
        for b in inputs {
            if let Ok((ready, used)) = Ready::decode(&b) {
                assert!(used <= b.len());
                assert_eq!(Ready::decode(&ready.encode()).unwrap().0, ready);
            }
            let opening: Vec<u8> = b.iter().copied().cycle().take(OPENING_LEN).collect();
            if let Ok(fixed) = <[u8; OPENING_LEN]>::try_from(opening) {
                if let Ok(o) = Opening::decode(&fixed) {
                    assert_eq!(o.encode(), fixed.to_vec());
                }
            }
            let _ = Greeting::parse(&String::from_utf8_lossy(&b));
        }
    }
}
