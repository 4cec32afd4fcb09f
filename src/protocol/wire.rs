//! Bounded little-endian encoding: a writer into a `Vec<u8>` and a reader
//! over a byte slice that never reads past its end and never trusts a length
//! it has not checked against a limit.

/// Why bytes could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// Fewer bytes than the message needs.
    Short { needed: usize, have: usize },
    /// A length or count above its limit.
    TooLarge {
        what: &'static str,
        value: u64,
        max: u64,
    },
    /// A value that is not one of the allowed ones.
    Invalid { what: &'static str, value: u64 },
    /// Text that is not UTF-8.
    NotUtf8 { what: &'static str },
    /// Bytes left over after a complete message.
    Trailing { bytes: usize },
    /// A message, field or value that came with a later protocol than the
    /// one spoken.
    NotInVersion {
        what: &'static str,
        since: u16,
        version: u16,
    },
    /// A protocol version this build does not speak.
    Unspoken { version: u16 },
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Short { needed, have } => {
                write!(f, "message too short: needs {needed} bytes, has {have}")
            }
            DecodeError::TooLarge { what, value, max } => {
                write!(f, "{what} {value} is above the limit {max}")
            }
            DecodeError::Invalid { what, value } => write!(f, "invalid {what} {value}"),
            DecodeError::NotUtf8 { what } => write!(f, "{what} is not UTF-8"),
            DecodeError::Trailing { bytes } => {
                write!(f, "{bytes} unexpected bytes after the message")
            }
            DecodeError::NotInVersion {
                what,
                since,
                version,
            } => write!(
                f,
                "{what} came with protocol {since}, not in protocol {version}"
            ),
            DecodeError::Unspoken { version } => {
                write!(f, "protocol {version} is not one this build speaks")
            }
        }
    }
}

impl std::error::Error for DecodeError {}

/// Appends little-endian values.
#[derive(Debug, Default)]
pub struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn i64(&mut self, v: i64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(v);
        self
    }
    /// A string with a u16 length (callers keep strings under 64 KiB).
    pub fn str16(&mut self, s: &str) -> &mut Self {
        self.bytes16(s.as_bytes())
    }
    /// A file name or path with a u16 length: its bytes as the filesystem
    /// has them ([`super::names`]), UTF-8 or not.
    pub fn name16(&mut self, s: &str) -> &mut Self {
        self.bytes16(&super::names::to_bytes(s))
    }
    /// A u16-length byte string.
    pub fn bytes16(&mut self, b: &[u8]) -> &mut Self {
        assert!(b.len() <= u16::MAX as usize, "value too long for the wire");
        self.u16(b.len() as u16).bytes(b)
    }
}

/// Reads little-endian values from a slice, with bounds checks.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, at: 0 }
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.at
    }

    pub fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.remaining() < n {
            return Err(DecodeError::Short {
                needed: self.at + n,
                have: self.buf.len(),
            });
        }
        let out = &self.buf[self.at..self.at + n];
        self.at += n;
        Ok(out)
    }

    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.array::<1>()?[0])
    }
    pub fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    pub fn i64(&mut self) -> Result<i64, DecodeError> {
        Ok(i64::from_le_bytes(self.array()?))
    }

    /// A u16 count of at most `max` items.
    pub fn count16(&mut self, what: &'static str, max: usize) -> Result<usize, DecodeError> {
        let count = usize::from(self.u16()?);
        if count > max {
            return Err(DecodeError::TooLarge {
                what,
                value: count as u64,
                max: max as u64,
            });
        }
        Ok(count)
    }

    /// A u16-length string of at most `max` bytes.
    pub fn str16(&mut self, what: &'static str, max: usize) -> Result<&'a str, DecodeError> {
        std::str::from_utf8(self.bytes16(what, max)?).map_err(|_| DecodeError::NotUtf8 { what })
    }

    /// A u16-length file name or path of at most `max` bytes, any bytes
    /// (held as [`super::names`] says).
    pub fn name16(&mut self, what: &'static str, max: usize) -> Result<String, DecodeError> {
        Ok(super::names::from_bytes(self.bytes16(what, max)?))
    }

    /// A u16-length byte string of at most `max` bytes.
    pub fn bytes16(&mut self, what: &'static str, max: usize) -> Result<&'a [u8], DecodeError> {
        let len = self.u16()? as usize;
        if len > max {
            return Err(DecodeError::TooLarge {
                what,
                value: len as u64,
                max: max as u64,
            });
        }
        self.take(len)
    }

    /// Fail unless every byte was consumed.
    pub fn finish(&self) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            bytes => Err(DecodeError::Trailing { bytes }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_bounds() {
        let mut w = Writer::default();
        w.u8(1).u16(2).u32(3).u64(4).i64(-5).str16("héllo");
        let mut r = Reader::new(&w.buf);
        assert_eq!(r.u8(), Ok(1));
        assert_eq!(r.u16(), Ok(2));
        assert_eq!(r.u32(), Ok(3));
        assert_eq!(r.u64(), Ok(4));
        assert_eq!(r.i64(), Ok(-5));
        assert_eq!(r.str16("name", 100), Ok("héllo"));
        assert!(r.finish().is_ok());
        assert!(matches!(r.u8(), Err(DecodeError::Short { .. })));

        let mut r = Reader::new(&w.buf[..w.buf.len() - 1]);
        r.take(23).unwrap();
        assert!(matches!(
            r.str16("name", 100),
            Err(DecodeError::Short { .. })
        ));
        let mut r = Reader::new(&w.buf[23..]);
        assert!(matches!(
            r.str16("name", 3),
            Err(DecodeError::TooLarge { .. })
        ));
        let bad = [2u8, 0, 0xff, 0xfe];
        assert_eq!(
            Reader::new(&bad).str16("name", 9),
            Err(DecodeError::NotUtf8 { what: "name" })
        );
    }
}
