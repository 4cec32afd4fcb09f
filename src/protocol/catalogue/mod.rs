//! The wire contract, declared once: every control message (`messages.rs`),
//! the request and frame flags, error codes and directions (`bits.rs`),
//! each with the protocol version it came with and its doc text. From the
//! declarations come the `Message` enum, its version-aware codec
//! ([`encode_at`], [`decode_at`], [`decode_body_at`]), the tables of
//! `docs/internals/protocol.md` (`doc.rs`) and a fingerprint per protocol
//! version (`versions.rs`), which a test holds to the released ones.
//!
//! A message is its kind byte, its fields in wire order, and nothing else:
//! each field's type ([`Field`]) says how it travels and what is refused.
//! [`PROTOCOL_OLDEST`] to [`PROTOCOL_NEWEST`] are the versions spoken.
//!
//! # Adding to the protocol
//!
//! Say protocol 13 adds a message and a field. Raise
//! `handshake::VERSION` (and so [`PROTOCOL_NEWEST`]) to 13, record 13 in
//! `versions.rs` and name it in CHANGELOG.md, then declare, in
//! `messages.rs`:
//!
//! ```text
//! /// The daemon's limits, sealed, right after the Challenge.
//! 38 Caps { since 13, from Daemon } {
//!     streams_max: U16,
//!     block_max: U32,
//! }
//! ```
//!
//! and, for a field added to a message that protocol 12 has, its
//! version and the value it has below it, at the end of the message:
//!
//! ```text
//! 37 StreamsRefused { since 12, from Daemon } {
//!     asked: U16,
//!     max: U16,
//!     #[since(13, 0)]
//!     in_use: U16,
//! }
//! ```
//!
//! The variant (`Message::Caps`, or the new field of the variant), its
//! kind constant (`kind::Caps`), encoding at each version, refusal below
//! it by name (`DecodeError::NotInVersion`, `EncodeError::NotInVersion`
//! for a field whose value is not its default) and the document's rows
//! follow; regenerate the document with `URMOVE_BLESS=1 cargo test --lib
//! catalogue::doc`. Then give the message (or the field's new value) a
//! sample in `tests.rs`'s `all_samples` (not `samples`, which are protocol
//! 12's golden bytes), and the compiler names every place in `session/`
//! that builds or fully matches the variant. A new flag bit, error code or
//! direction is one line in `bits.rs` with `since 13`. Protocol 12 stays as
//! it was: its golden bytes and its recorded fingerprint are tested at 12.

#[macro_use]
mod macros;
mod bits;
mod checked;
mod doc;
mod fields;
mod messages;
#[cfg(test)]
mod tests;
mod versions;

pub use bits::{
    frame_flags_at, known_at, request_flags_at, Direction, ErrorCode, Limit, DIRECTIONS,
    ERROR_CODES, FRAME_FLAGS, LIMITS, REQUEST_FLAGS,
};
pub use bits::{
    FLAG_END, FLAG_HOLE, FLAG_SEALED, FLAG_SPARSE, FLAG_UNCHECKED, REQ_ACLS, REQ_CHECKSUM,
    REQ_CONTENTS, REQ_DELETE, REQ_DEVICES, REQ_DRY_RUN, REQ_ENCRYPT, REQ_FOLLOW, REQ_HARD_LINKS,
    REQ_LIVE_PARTS, REQ_NUMERIC_IDS, REQ_ONE_FILE, REQ_RESUME, REQ_SHARD, REQ_SPARSE, REQ_STREAM,
    REQ_VERIFY, REQ_XATTRS,
};
pub use doc::render_blocks;
pub use messages::{kind, kind_of, Kind, Message, MESSAGES};
pub use versions::{fingerprint, Release, RELEASES};

use super::control::CONTROL_LEN_MAX;
use super::wire::{DecodeError, Reader, Writer};

/// The oldest protocol this build speaks.
pub const PROTOCOL_OLDEST: u16 = 12;
/// The newest protocol this build speaks (the one it offers).
pub const PROTOCOL_NEWEST: u16 = super::handshake::VERSION;

const _: () = assert!(PROTOCOL_OLDEST <= PROTOCOL_NEWEST);

/// How one field travels: written and read as protocol `v` has it, with
/// every check its values need.
pub trait Field {
    /// What the field holds in a [`Message`].
    type Value;
    /// Its wire form, for the document and the fingerprint.
    fn wire() -> String;
    fn put(value: &Self::Value, w: &mut Writer, v: u16) -> Result<(), EncodeError>;
    fn get(r: &mut Reader<'_>, v: u16) -> Result<Self::Value, DecodeError>;
}

/// Why a message cannot be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("{what} came with protocol {since}, not in protocol {version}")]
    NotInVersion {
        what: &'static str,
        since: u16,
        version: u16,
    },
    #[error("protocol {version} is not one this build speaks")]
    Unspoken { version: u16 },
    #[error("{what}: {len} is above the limit {max}")]
    TooLarge {
        what: &'static str,
        len: u64,
        max: u64,
    },
}

/// Who sends a message: by connection end, or by transfer role (the
/// source is a push's client or a pull's daemon).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Client,
    Daemon,
    Source,
    Sink,
    Either,
}

impl Side {
    pub fn name(self) -> &'static str {
        match self {
            Side::Client => "client",
            Side::Daemon => "daemon",
            Side::Source => "source",
            Side::Sink => "sink",
            Side::Either => "either",
        }
    }
}

/// One message's declaration.
#[derive(Debug)]
pub struct MessageDef {
    pub kind: u8,
    pub name: &'static str,
    pub since: u16,
    pub from: Side,
    pub doc: &'static str,
    pub fields: &'static [FieldDef],
    /// The check run on the decoded message, if any, by name.
    pub checks: &'static [&'static str],
}

/// One field's declaration: its name, the protocol it came with, its wire
/// form.
#[derive(Debug)]
pub struct FieldDef {
    pub name: &'static str,
    pub since: u16,
    pub wire: fn() -> String,
}

/// One flag bit or numbered value: its name, value, the protocol it came
/// with, its doc text.
#[derive(Debug)]
pub struct Bit {
    pub name: &'static str,
    pub value: u64,
    pub since: u16,
    pub doc: &'static str,
}

/// The declaration of the message of kind `k`.
pub fn def_of(k: u8) -> Option<&'static MessageDef> {
    MESSAGES.iter().find(|d| d.kind == k)
}

fn spoken(v: u16) -> bool {
    (PROTOCOL_OLDEST..=PROTOCOL_NEWEST).contains(&v)
}

/// Encodes `m` with its length prefix as protocol `v` has it.
pub fn encode_at(m: &Message, v: u16) -> Result<Vec<u8>, EncodeError> {
    if !spoken(v) {
        return Err(EncodeError::Unspoken { version: v });
    }
    let mut w = Writer::default();
    w.u32(0); // length, patched below
    m.put_at(&mut w, v)?;
    let len = (w.buf.len() - 4) as u64;
    if len > u64::from(CONTROL_LEN_MAX) {
        return Err(EncodeError::TooLarge {
            what: "control message",
            len,
            max: u64::from(CONTROL_LEN_MAX),
        });
    }
    w.buf[..4].copy_from_slice(&(len as u32).to_le_bytes());
    Ok(w.buf)
}

/// Decodes one message body (kind and fields, without the length prefix)
/// as protocol `v` has it.
pub fn decode_body_at(body: &[u8], v: u16) -> Result<Message, DecodeError> {
    if !spoken(v) {
        return Err(DecodeError::Unspoken { version: v });
    }
    let mut r = Reader::new(body);
    let k = r.u8()?;
    let m = Message::get_at(k, &mut r, v)?;
    r.finish()?;
    Ok(m)
}

/// Decodes one whole message (prefix and body) from the start of `buf` as
/// protocol `v` has it. `Ok(None)` means more bytes are needed.
pub fn decode_at(buf: &[u8], v: u16) -> Result<Option<(Message, usize)>, DecodeError> {
    let Some(prefix) = buf.get(..4) else {
        return Ok(None);
    };
    let len = super::control::body_len(prefix.try_into().expect("4 bytes"))?;
    let Some(body) = buf.get(4..4 + len) else {
        return Ok(None);
    };
    Ok(Some((decode_body_at(body, v)?, 4 + len)))
}
