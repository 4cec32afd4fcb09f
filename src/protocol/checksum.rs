//! The checksums storage systems speak (issue 37): adler32 (WLCG's),
//! crc32c and md5, computed over a file's bytes and answered in the
//! headers HTTP clients ask with.
//!
//! - [`Hasher`]: all of them over bytes in order, in one pass.
//! - [`Pieces`]: adler32 and crc32c of the blocks of a file arriving in
//!   any order (over parallel streams) combined into the whole file's,
//!   without a second read; [`InOrderMd5`] takes md5, which cannot
//!   combine, from the blocks that come in order and says when it missed
//!   some (the file is then read again for md5).
//! - Headers: `Want-Digest` (RFC 3230: `adler32;q=0.5, md5`) and
//!   `Want-Repr-Digest`/`Want-Content-Digest` (RFC 9530: `adler=5, md5=3`)
//!   read into the algorithms wanted, best first; the answers formatted
//!   (`Digest: adler32=0a1b2c3d`, `Repr-Digest: adler=:Chssw9:`) and read
//!   back from a peer.
//!
//! Values as XRootD and dCache write them in `Digest`: adler32 as 8
//! lowercase hex digits, md5 (RFC 3230/1864) and crc32c in base64 of their
//! big-endian bytes (XRootD's XrdHttp base64-encodes crc32c as it does
//! md5). In RFC 9530 fields every value is a byte sequence, `:base64:`.
//! A peer's value is read in either spelling (hex or base64) where the
//! two cannot be confused.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use md5::Digest as _;

/// A checksum this side computes and answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Algorithm {
    Adler32,
    Crc32c,
    Md5,
}

impl Algorithm {
    pub const ALL: [Algorithm; 3] = [Algorithm::Adler32, Algorithm::Crc32c, Algorithm::Md5];

    /// The RFC 3230 token (`Want-Digest`, `Digest`), as XRootD and dCache
    /// write it.
    pub fn rfc3230_token(self) -> &'static str {
        match self {
            Algorithm::Adler32 => "adler32",
            Algorithm::Crc32c => "crc32c",
            Algorithm::Md5 => "md5",
        }
    }

    /// The RFC 9530 key (`Repr-Digest`, `Content-Digest`).
    pub fn rfc9530_key(self) -> &'static str {
        match self {
            Algorithm::Adler32 => "adler",
            Algorithm::Crc32c => "crc32c",
            Algorithm::Md5 => "md5",
        }
    }

    /// The algorithm a token names in either RFC (case-insensitive;
    /// `adler` and `adler32` alike, as the WLCG TPC profile asks).
    pub fn from_token(token: &str) -> Option<Algorithm> {
        let t = token.trim();
        let is = |s: &str| t.eq_ignore_ascii_case(s);
        if is("adler32") || is("adler") {
            Some(Algorithm::Adler32)
        } else if is("crc32c") {
            Some(Algorithm::Crc32c)
        } else if is("md5") {
            Some(Algorithm::Md5)
        } else {
            None
        }
    }
}

/// One algorithm's value of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value {
    Adler32(u32),
    Crc32c(u32),
    Md5([u8; 16]),
}

impl Value {
    pub fn algorithm(&self) -> Algorithm {
        match self {
            Value::Adler32(_) => Algorithm::Adler32,
            Value::Crc32c(_) => Algorithm::Crc32c,
            Value::Md5(_) => Algorithm::Md5,
        }
    }

    /// The value's big-endian bytes (what base64 spellings encode).
    pub fn bytes(&self) -> Vec<u8> {
        match self {
            Value::Adler32(v) | Value::Crc32c(v) => v.to_be_bytes().to_vec(),
            Value::Md5(d) => d.to_vec(),
        }
    }

    /// As an RFC 3230 `Digest` writes it: adler32 in 8 lowercase hex
    /// digits, the others in base64.
    pub fn rfc3230(&self) -> String {
        match self {
            Value::Adler32(v) => format!("{v:08x}"),
            _ => BASE64.encode(self.bytes()),
        }
    }

    /// As lowercase hex (what `gfal-sum` and the XRootD CLI print).
    pub fn hex(&self) -> String {
        self.bytes().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The value of `algorithm` whose big-endian bytes are `bytes`.
    fn of_bytes(algorithm: Algorithm, bytes: &[u8]) -> Option<Value> {
        match algorithm {
            Algorithm::Adler32 => Some(Value::Adler32(u32::from_be_bytes(bytes.try_into().ok()?))),
            Algorithm::Crc32c => Some(Value::Crc32c(u32::from_be_bytes(bytes.try_into().ok()?))),
            Algorithm::Md5 => Some(Value::Md5(bytes.try_into().ok()?)),
        }
    }

    /// A peer's RFC 3230 spelling of a value of `algorithm`: hex (up to 8
    /// digits for the 32-bit ones, leading zeros optional; 32 for md5) or
    /// base64 of the big-endian bytes.
    fn parse_rfc3230(algorithm: Algorithm, text: &str) -> Option<Value> {
        let text = text.trim();
        let width = match algorithm {
            Algorithm::Md5 => 32,
            _ => 8,
        };
        let all_hex = !text.is_empty() && text.bytes().all(|c| c.is_ascii_hexdigit());
        let hex_fits = match algorithm {
            Algorithm::Md5 => text.len() == width,
            _ => text.len() <= width,
        };
        if all_hex && hex_fits {
            return match algorithm {
                Algorithm::Md5 => Value::of_bytes(algorithm, &hex_bytes(text)?),
                _ => Value::of_bytes(
                    algorithm,
                    &u32::from_str_radix(text, 16).ok()?.to_be_bytes(),
                ),
            };
        }
        Value::of_bytes(algorithm, &BASE64.decode(text).ok()?)
    }
}

/// The bytes `text` (an even count of hex digits) spells.
fn hex_bytes(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || !text.is_ascii() {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

/// A file's checksums: adler32 and crc32c always, md5 when it was
/// computed (it costs several times the other two together).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sums {
    pub adler32: u32,
    pub crc32c: u32,
    pub md5: Option<[u8; 16]>,
}

impl Sums {
    /// Of the empty file (md5 with it).
    pub const EMPTY: Sums = Sums {
        adler32: 1,
        crc32c: 0,
        md5: Some([
            0xd4, 0x1d, 0x8c, 0xd9, 0x8f, 0x00, 0xb2, 0x04, 0xe9, 0x80, 0x09, 0x98, 0xec, 0xf8,
            0x42, 0x7e,
        ]),
    };

    /// The value of `algorithm`, if these sums have it.
    pub fn value(&self, algorithm: Algorithm) -> Option<Value> {
        match algorithm {
            Algorithm::Adler32 => Some(Value::Adler32(self.adler32)),
            Algorithm::Crc32c => Some(Value::Crc32c(self.crc32c)),
            Algorithm::Md5 => self.md5.map(Value::Md5),
        }
    }
}

/// Bytes each algorithm takes at a time, so the three passes over a
/// chunk read it from the cache.
const CHUNK_BYTES: usize = 64 << 10;

/// The checksums of bytes given in order.
#[derive(Clone)]
pub struct Hasher {
    adler32: simd_adler32::Adler32,
    crc32c: u32,
    md5: Option<md5::Md5>,
    len: u64,
}

impl Hasher {
    /// A hasher of adler32 and crc32c, and of md5 if `with_md5`.
    pub fn new(with_md5: bool) -> Hasher {
        Hasher {
            adler32: simd_adler32::Adler32::new(),
            crc32c: 0,
            md5: with_md5.then(md5::Md5::new),
            len: 0,
        }
    }

    /// The next bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(CHUNK_BYTES) {
            self.adler32.write(chunk);
            self.crc32c = crc32c::crc32c_append(self.crc32c, chunk);
            if let Some(m) = &mut self.md5 {
                m.update(chunk);
            }
        }
        self.len += bytes.len() as u64;
    }

    /// Bytes given so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The checksums of all the bytes given.
    pub fn finish(self) -> Sums {
        Sums {
            adler32: self.adler32.finish(),
            crc32c: self.crc32c,
            md5: self.md5.map(|m| m.finalize().into()),
        }
    }
}

/// Adler-32's modulus.
const ADLER_MOD: u64 = 65521;

/// The adler32 of `bytes` (alone).
pub fn adler32(bytes: &[u8]) -> u32 {
    let mut a = simd_adler32::Adler32::new();
    a.write(bytes);
    a.finish()
}

/// The adler32 of a concatenation A|B from that of A (`a`), that of B
/// (`b`) and B's length (as zlib's `adler32_combine64`).
pub fn adler32_combine(a: u32, b: u32, len_b: u64) -> u32 {
    // Over A|B: s1 = s1(A) + s1(B) - 1; s2 = s2(A) + s2(B) + len_b
    // * (s1(A) - 1), all mod 65521.
    let (a1, a2) = (u64::from(a & 0xffff), u64::from(a >> 16));
    let (b1, b2) = (u64::from(b & 0xffff), u64::from(b >> 16));
    let rem = len_b % ADLER_MOD;
    let s1 = (a1 + b1 + ADLER_MOD - 1) % ADLER_MOD;
    let s2 = (a2 + b2 + rem * ((a1 + ADLER_MOD - 1) % ADLER_MOD)) % ADLER_MOD;
    (s1 | (s2 << 16)) as u32
}

/// CRC-32C's polynomial, bit-reflected.
const CRC32C_POLY: u32 = 0x82F6_3B78;

/// `a` times `b` modulo the polynomial (bit-reflected: x^0 is the top
/// bit).
const fn mul_mod_poly(a: u32, mut b: u32) -> u32 {
    let (mut m, mut p) = (1u32 << 31, 0u32);
    while m != 0 {
        if a & m != 0 {
            p ^= b;
        }
        m >>= 1;
        b = if b & 1 != 0 {
            (b >> 1) ^ CRC32C_POLY
        } else {
            b >> 1
        };
    }
    p
}

/// x^(2^k) modulo the polynomial, for every k a shift by a u64 count of
/// bytes needs (3 to 66; spelled out: for Castagnoli's the powers cycle
/// every 31, not every 32 as zlib's table of 32 relies on for CRC-32's).
const X_POW_2K: [u32; 67] = {
    let mut t = [0u32; 67];
    let mut p = 1u32 << 30; // x^1
    let mut k = 0;
    while k < 67 {
        t[k] = p;
        p = mul_mod_poly(p, p);
        k += 1;
    }
    t
};

/// The crc32c of a concatenation A|B from that of A, that of B and B's
/// length: A's crc shifted over `len_b` zero bytes (times x^(8 len_b),
/// by squares), then B's added (zlib's `crc32_combine64` with the
/// Castagnoli polynomial). A microsecond, where the crate's matrix
/// squaring takes tens for a 4 MiB block.
pub fn crc32c_combine(a: u32, b: u32, len_b: u64) -> u32 {
    // x^(8 len_b) = the product of x^(2^k) over the bits k of len_b << 3.
    let (mut shift, mut n, mut k) = (1u32 << 31, len_b, 3);
    while n != 0 {
        if n & 1 != 0 {
            shift = mul_mod_poly(X_POW_2K[k], shift);
        }
        n >>= 1;
        k += 1;
    }
    mul_mod_poly(shift, a) ^ b
}

/// A block of a file and its adler32 and crc32c.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub offset: u64,
    pub len: u64,
    pub adler32: u32,
    pub crc32c: u32,
}

impl Piece {
    /// The piece of `bytes` at `offset`.
    pub fn of(offset: u64, bytes: &[u8]) -> Piece {
        Piece {
            offset,
            len: bytes.len() as u64,
            adler32: adler32(bytes),
            crc32c: crc32c::crc32c(bytes),
        }
    }

    /// Where it ends (exclusive).
    pub fn end(&self) -> u64 {
        self.offset + self.len
    }

    /// This piece followed by `next` (which starts where it ends).
    fn then(self, next: Piece) -> Piece {
        debug_assert_eq!(self.end(), next.offset);
        Piece {
            offset: self.offset,
            len: self.len + next.len,
            adler32: adler32_combine(self.adler32, next.adler32, next.len),
            crc32c: crc32c_combine(self.crc32c, next.crc32c, next.len),
        }
    }
}

/// Why pieces do not make a file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PieceError {
    #[error("a piece at [{offset}, {end}) overlaps one already given")]
    Overlap { offset: u64, end: u64 },
    #[error("a piece at [{offset}, {end}) runs past the file's end ({size})")]
    BeyondEnd { offset: u64, end: u64, size: u64 },
    #[error("no piece covers the bytes from {at} (file of {size})")]
    Gap { at: u64, size: u64 },
}

/// The pieces of a file of a known size, given in any order, combined as
/// they become adjacent: it holds one run per stretch of the file covered
/// so far (a handful while blocks arrive over parallel streams).
#[derive(Debug, Clone)]
pub struct Pieces {
    size: u64,
    /// Runs of contiguous pieces by their offset, none adjacent.
    runs: std::collections::BTreeMap<u64, Piece>,
}

impl Pieces {
    /// For a file of `size` bytes.
    pub fn new(size: u64) -> Pieces {
        Pieces {
            size,
            runs: std::collections::BTreeMap::new(),
        }
    }

    /// Take `piece`: refused (and nothing changed) when it overlaps one
    /// given before or runs past the file's end. An empty piece inside the
    /// file is taken and changes nothing.
    pub fn add(&mut self, piece: Piece) -> Result<(), PieceError> {
        let (offset, end) = (piece.offset, piece.offset.checked_add(piece.len));
        let Some(end) = end.filter(|&e| e <= self.size) else {
            return Err(PieceError::BeyondEnd {
                offset,
                end: end.unwrap_or(u64::MAX),
                size: self.size,
            });
        };
        if piece.len == 0 {
            return Ok(());
        }
        let before = self.runs.range(..=offset).next_back().map(|(_, r)| *r);
        let after = self.runs.range(offset..).next().map(|(_, r)| *r);
        let overlaps =
            before.is_some_and(|r| r.end() > offset) || after.is_some_and(|r| r.offset < end);
        if overlaps {
            return Err(PieceError::Overlap { offset, end });
        }
        let mut run = piece;
        if let Some(b) = before.filter(|r| r.end() == offset) {
            self.runs.remove(&b.offset);
            run = b.then(run);
        }
        if let Some(a) = after.filter(|r| r.offset == end) {
            self.runs.remove(&a.offset);
            run = run.then(a);
        }
        self.runs.insert(run.offset, run);
        Ok(())
    }

    /// Bytes covered so far.
    pub fn covered(&self) -> u64 {
        self.runs.values().map(|r| r.len).sum()
    }

    /// The whole file's adler32 and crc32c, once the pieces cover it;
    /// else where the first gap is.
    pub fn whole(&self) -> Result<(u32, u32), PieceError> {
        if self.size == 0 {
            return Ok((Sums::EMPTY.adler32, Sums::EMPTY.crc32c));
        }
        match self.runs.get(&0) {
            Some(r) if r.len == self.size => Ok((r.adler32, r.crc32c)),
            Some(r) => Err(PieceError::Gap {
                at: r.end(),
                size: self.size,
            }),
            None => Err(PieceError::Gap {
                at: 0,
                size: self.size,
            }),
        }
    }
}

/// The md5 of a file from the blocks that arrive in order: bytes at the
/// next offset are taken (a block overlapping it: its new part), any at a
/// later one means md5 missed some and must read the file later.
#[derive(Clone)]
pub struct InOrderMd5 {
    md5: md5::Md5,
    next: u64,
    missed: bool,
}

impl Default for InOrderMd5 {
    fn default() -> Self {
        InOrderMd5 {
            md5: md5::Md5::new(),
            next: 0,
            missed: false,
        }
    }
}

impl InOrderMd5 {
    pub fn new() -> InOrderMd5 {
        InOrderMd5::default()
    }

    /// Offer the block `bytes` at `offset`; whether md5 still follows the
    /// file (false from the first block that came ahead of its turn).
    pub fn offer(&mut self, offset: u64, bytes: &[u8]) -> bool {
        if self.missed {
            return false;
        }
        let end = offset.saturating_add(bytes.len() as u64);
        if offset > self.next {
            self.missed = true;
            return false;
        }
        if end > self.next {
            let from = (self.next - offset) as usize;
            self.md5.update(&bytes[from..]);
            self.next = end;
        }
        true
    }

    /// The offset md5 takes next.
    pub fn next(&self) -> u64 {
        self.next
    }

    /// Whether a block came ahead of its turn (md5 must read the file).
    pub fn missed(&self) -> bool {
        self.missed
    }

    /// The md5 of a file of `size` bytes, if it took every one of them.
    pub fn finish(self, size: u64) -> Option<[u8; 16]> {
        (!self.missed && self.next == size).then(|| self.md5.finalize().into())
    }
}

/// Items of a comma-separated header list, trimmed, empty ones dropped.
fn items(header: &str) -> impl Iterator<Item = &str> {
    header.split(',').map(str::trim).filter(|s| !s.is_empty())
}

/// The algorithms an RFC 3230 `Want-Digest` asks for, best first: by
/// q-value (1 when absent), ties in the order given; q=0, unknown ones
/// and items that do not read (a q outside [0, 1]) left out.
pub fn parse_want_digest(header: &str) -> Vec<Algorithm> {
    let mut wanted: Vec<(u16, Algorithm)> = Vec::new();
    for item in items(header) {
        let mut parts = item.split(';');
        let Some(algorithm) = parts.next().and_then(Algorithm::from_token) else {
            continue;
        };
        let mut q = Some(1000);
        for param in parts {
            let (k, v) = param.split_once('=').unwrap_or((param, ""));
            if k.trim().eq_ignore_ascii_case("q") {
                q = q_value(v.trim());
            }
        }
        if let Some(q) = q.filter(|&q| q > 0) {
            wanted.push((q, algorithm));
        }
    }
    ranked(wanted)
}

/// An RFC 7231 qvalue (`0`, `0.5`, `1.000`) in thousandths.
fn q_value(text: &str) -> Option<u16> {
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| s.bytes().all(|c| c.is_ascii_digit());
    if int.len() != 1 || frac.len() > 3 || !digits(int) || !digits(frac) {
        return None;
    }
    let thousandths = format!("{frac:0<3}").parse::<u16>().ok()?;
    match int {
        "0" => Some(thousandths),
        "1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// The algorithms in `wanted`, highest preference first (ties: in the
/// order given), each once.
fn ranked(mut wanted: Vec<(u16, Algorithm)>) -> Vec<Algorithm> {
    wanted.sort_by_key(|w| std::cmp::Reverse(w.0));
    let mut out: Vec<Algorithm> = Vec::new();
    for (_, a) in wanted {
        if !out.contains(&a) {
            out.push(a);
        }
    }
    out
}

/// The algorithms an RFC 9530 `Want-Repr-Digest` or `Want-Content-Digest`
/// asks for, best first: by preference (an integer 1 to 10; 0: not
/// wanted), ties in the order given; unknown keys and members whose value
/// is not such an integer left out.
pub fn parse_want_fields(header: &str) -> Vec<Algorithm> {
    let mut wanted: Vec<(u16, Algorithm)> = Vec::new();
    for item in items(header) {
        // Parameters (`;p=...`) say nothing here.
        let member = item.split(';').next().unwrap_or("");
        let Some((key, value)) = member.split_once('=') else {
            continue;
        };
        let Some(algorithm) = Algorithm::from_token(key) else {
            continue;
        };
        let value = value.trim();
        if value.is_empty() || value.len() > 2 || !value.bytes().all(|c| c.is_ascii_digit()) {
            continue;
        }
        match value.parse::<u16>() {
            Ok(p @ 1..=10) => wanted.push((p, algorithm)),
            _ => continue,
        }
    }
    ranked(wanted)
}

/// An RFC 3230 `Digest` header's value for `values`:
/// `adler32=0a1b2c3d,md5=kAFQmDzST7DWlj99KOF/cg==`.
pub fn format_digest(values: &[Value]) -> String {
    let each = values
        .iter()
        .map(|v| format!("{}={}", v.algorithm().rfc3230_token(), v.rfc3230()));
    each.collect::<Vec<_>>().join(",")
}

/// An RFC 9530 `Repr-Digest` or `Content-Digest` value for `values`:
/// `adler=:AAAAAQ==:, md5=:...:` (structured-field byte sequences).
pub fn format_fields(values: &[Value]) -> String {
    let each = values.iter().map(|v| {
        let key = v.algorithm().rfc9530_key();
        format!("{key}=:{}:", BASE64.encode(v.bytes()))
    });
    each.collect::<Vec<_>>().join(", ")
}

/// The values a peer's RFC 3230 `Digest` header names, of the algorithms
/// known here (unknown ones, and values that do not read, left out).
pub fn parse_digest(header: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for item in items(header) {
        let Some((token, text)) = item.split_once('=') else {
            continue;
        };
        let Some(algorithm) = Algorithm::from_token(token) else {
            continue;
        };
        if let Some(v) = Value::parse_rfc3230(algorithm, text) {
            out.push(v);
        }
    }
    out
}

/// The values a peer's RFC 9530 `Repr-Digest` or `Content-Digest` names,
/// of the algorithms known here (`adler` or `adler32` alike; unknown
/// keys, values that are not byte sequences of the right length, left
/// out).
pub fn parse_fields(header: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for item in items(header) {
        let member = item.split(';').next().unwrap_or("");
        let Some((key, value)) = member.split_once('=') else {
            continue;
        };
        let Some(algorithm) = Algorithm::from_token(key) else {
            continue;
        };
        let inner = value
            .trim()
            .strip_prefix(':')
            .and_then(|v| v.strip_suffix(':'));
        let bytes = inner.and_then(|b| BASE64.decode(b).ok());
        if let Some(v) = bytes.and_then(|b| Value::of_bytes(algorithm, &b)) {
            out.push(v);
        }
    }
    out
}

#[cfg(test)]
mod tests;
