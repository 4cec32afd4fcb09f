//! Fields written by hand: values checked against the protocol version
//! (directions, error codes, request flags), against limits of their own
//! (stream count, block size), and fields whose check spans several values
//! (a piece acknowledgement's state, ascending placement runs, a `Have`'s
//! range budget, a shard's index below its count).

use super::bits::{request_flags_at, Direction, ErrorCode, Limit, REQUEST_FLAGS};
use super::fields::{list_len, too_many, Bool01, FilterVerdict, HaveItems, PlacementRuns, Str16};
use super::fields::{FilterPattern, Label};
use super::{known_at, EncodeError, Field, Message};
use crate::protocol::control::{
    FilterRule, HaveItem, PieceDone, UdpCount, HAVE_PART_RANGES_MAX, STREAMS_MAX,
};
use crate::protocol::frame::FRAME_PAYLOAD_MAX;
use crate::protocol::manifest::PIECES_MAX;
use crate::protocol::wire::{DecodeError, Reader, Writer};

/// Refuses to encode a value newer than `v`.
fn encodable(what: &'static str, since: u16, v: u16) -> Result<(), EncodeError> {
    if since > v {
        return Err(EncodeError::NotInVersion {
            what,
            since,
            version: v,
        });
    }
    Ok(())
}

/// Declares the [`Field`] of a `wire_enum!` type: its number as `$int`,
/// refused when unknown or newer than the protocol.
macro_rules! enum_field {
    ($(#[doc = $d:literal])* $field:ident, $enum:ident, $int:ident, $what:literal) => {
        $(#[doc = $d])*
        #[derive(Debug)]
        pub struct $field;
        impl Field for $field {
            type Value = $enum;
            fn wire() -> String {
                concat!(stringify!($int), " ", $what).into()
            }
            fn put(value: &$enum, w: &mut Writer, v: u16) -> Result<(), EncodeError> {
                encodable(value.name(), value.since(), v)?;
                w.$int(*value as $int);
                Ok(())
            }
            fn get(r: &mut Reader<'_>, v: u16) -> Result<$enum, DecodeError> {
                let n = r.$int()?;
                match $enum::from_wire(n) {
                    Some(x) if x.since() <= v => Ok(x),
                    Some(x) => Err(DecodeError::NotInVersion {
                        what: x.name(),
                        since: x.since(),
                        version: v,
                    }),
                    None => Err(DecodeError::Invalid {
                        what: $what,
                        value: u64::from(n),
                    }),
                }
            }
        }
    };
}

enum_field!(
    /// A [`Direction`] as u8.
    DirectionWire, Direction, u8, "direction"
);
enum_field!(
    /// A [`Limit`] as u8 (protocol 13).
    LimitWire, Limit, u8, "limit"
);
enum_field!(
    /// An [`ErrorCode`] as u16.
    ErrorCodeWire, ErrorCode, u16, "error code"
);

/// `REQ_*` bits as u32: a bit the protocol does not know is refused.
#[derive(Debug)]
pub struct ReqFlags;
impl Field for ReqFlags {
    type Value = u32;
    fn wire() -> String {
        "u32 request flags".into()
    }
    fn put(value: &u32, w: &mut Writer, v: u16) -> Result<(), EncodeError> {
        let later = *value & known_at(REQUEST_FLAGS, u16::MAX) as u32 & !request_flags_at(v);
        if let Some(bit) = REQUEST_FLAGS.iter().find(|b| b.value as u32 & later != 0) {
            encodable(bit.name, bit.since, v)?;
        }
        w.u32(*value);
        Ok(())
    }
    fn get(r: &mut Reader<'_>, v: u16) -> Result<u32, DecodeError> {
        let flags = r.u32()?;
        if flags & !request_flags_at(v) != 0 {
            return Err(DecodeError::Invalid {
                what: "request flags",
                value: u64::from(flags),
            });
        }
        Ok(flags)
    }
}

/// A session's data stream count, 1 to [`STREAMS_MAX`].
#[derive(Debug)]
pub struct Streams;
impl Field for Streams {
    type Value = u16;
    fn wire() -> String {
        format!("u16 1..={STREAMS_MAX}")
    }
    fn put(value: &u16, w: &mut Writer, _: u16) -> Result<(), EncodeError> {
        w.u16(*value);
        Ok(())
    }
    fn get(r: &mut Reader<'_>, _: u16) -> Result<u16, DecodeError> {
        let streams = r.u16()?;
        if streams == 0 || streams > STREAMS_MAX {
            return Err(DecodeError::TooLarge {
                what: "stream count",
                value: u64::from(streams),
                max: u64::from(STREAMS_MAX),
            });
        }
        Ok(streams)
    }
}

/// A block size, 1 to [`FRAME_PAYLOAD_MAX`].
#[derive(Debug)]
pub struct BlockSize;
impl Field for BlockSize {
    type Value = u32;
    fn wire() -> String {
        format!("u32 1..={FRAME_PAYLOAD_MAX}")
    }
    fn put(value: &u32, w: &mut Writer, _: u16) -> Result<(), EncodeError> {
        w.u32(*value);
        Ok(())
    }
    fn get(r: &mut Reader<'_>, _: u16) -> Result<u32, DecodeError> {
        let block_size = r.u32()?;
        if block_size == 0 || block_size > FRAME_PAYLOAD_MAX {
            return Err(DecodeError::TooLarge {
                what: "block size",
                value: u64::from(block_size),
                max: u64::from(FRAME_PAYLOAD_MAX),
            });
        }
        Ok(block_size)
    }
}

/// One `--exclude`/`--include` rule: its verdict (0 exclude, 1 include),
/// then its pattern.
#[derive(Debug)]
pub struct FilterRuleWire;
impl Field for FilterRuleWire {
    type Value = FilterRule;
    fn wire() -> String {
        format!(
            "(verdict {}, pattern {})",
            Bool01::<FilterVerdict>::wire(),
            Str16::<FilterPattern>::wire()
        )
    }
    fn put(value: &FilterRule, w: &mut Writer, v: u16) -> Result<(), EncodeError> {
        Bool01::<FilterVerdict>::put(&value.include, w, v)?;
        Str16::<FilterPattern>::put(&value.pattern, w, v)
    }
    fn get(r: &mut Reader<'_>, v: u16) -> Result<FilterRule, DecodeError> {
        let include = Bool01::<FilterVerdict>::get(r, v)?;
        let pattern = Str16::<FilterPattern>::get(r, v)?;
        Ok(FilterRule { include, pattern })
    }
}

/// One UDP flow's counts: seven u64.
#[derive(Debug)]
pub struct UdpCountWire;
impl Field for UdpCountWire {
    type Value = UdpCount;
    fn wire() -> String {
        "(sent, received, bytes, expected, out_of_order, duplicates, jitter_ns: u64)".into()
    }
    fn put(c: &UdpCount, w: &mut Writer, _: u16) -> Result<(), EncodeError> {
        w.u64(c.sent).u64(c.received).u64(c.bytes).u64(c.expected);
        w.u64(c.out_of_order).u64(c.duplicates).u64(c.jitter_ns);
        Ok(())
    }
    fn get(r: &mut Reader<'_>, _: u16) -> Result<UdpCount, DecodeError> {
        Ok(UdpCount {
            sent: r.u64()?,
            received: r.u64()?,
            bytes: r.u64()?,
            expected: r.u64()?,
            out_of_order: r.u64()?,
            duplicates: r.u64()?,
            jitter_ns: r.u64()?,
        })
    }
}

/// A [`PieceDone`]: digest u64, receipt u64, then (protocol 11) what
/// became of the file as state u8 and two u64: 0 left to the last piece
/// (0, 0), 1 committed (its digest, its receipts' digest), 2 not trusted
/// (the piece whose journal this receiver could not trust, 0).
#[derive(Debug)]
pub struct PieceDoneWire;
impl Field for PieceDoneWire {
    type Value = PieceDone;
    fn wire() -> String {
        "(digest u64, receipt u64, state u8 0|1|2 + u64 + u64 since 11)".into()
    }
    fn put(done: &PieceDone, w: &mut Writer, _: u16) -> Result<(), EncodeError> {
        let (state, a, b) = match (done.whole, done.untrusted) {
            (Some((digest, receipts)), _) => (1, digest, receipts),
            (None, Some(piece)) => (2, u64::from(piece), 0),
            (None, None) => (0, 0, 0),
        };
        w.u64(done.digest).u64(done.receipt);
        w.u8(state).u64(a).u64(b);
        Ok(())
    }
    fn get(r: &mut Reader<'_>, _: u16) -> Result<PieceDone, DecodeError> {
        let (digest, receipt) = (r.u64()?, r.u64()?);
        let (state, a, b) = (r.u8()?, r.u64()?, r.u64()?);
        let (whole, untrusted) = match (state, a, b) {
            (0, 0, 0) => (None, None),
            (1, digest, receipts) => (Some((digest, receipts)), None),
            (2, piece, 0) if piece <= u64::from(u32::MAX) => (None, Some(piece as u32)),
            _ => {
                return Err(DecodeError::Invalid {
                    what: "piece acknowledgement",
                    value: u64::from(state),
                })
            }
        };
        Ok(PieceDone {
            digest,
            receipt,
            whole,
            untrusted,
        })
    }
}

/// Placement runs (first entry u32, class u16), in a list32, each run's
/// first entry above the one before.
#[derive(Debug)]
pub struct AscendingRuns;
impl Field for AscendingRuns {
    type Value = Vec<(u32, u16)>;
    fn wire() -> String {
        format!(
            "list32 <= {} (and <= bytes left) of (u32, u16), ascending",
            PlacementRuns::MAX
        )
    }
    fn put(value: &Self::Value, w: &mut Writer, _: u16) -> Result<(), EncodeError> {
        too_many::<PlacementRuns>(value.len())?;
        w.u32(value.len() as u32);
        for (first, c) in value {
            w.u32(*first).u16(*c);
        }
        Ok(())
    }
    fn get(r: &mut Reader<'_>, _: u16) -> Result<Self::Value, DecodeError> {
        let count = list_len::<PlacementRuns>(r)?;
        let mut entries: Vec<(u32, u16)> = Vec::with_capacity(count);
        for _ in 0..count {
            let run = (r.u32()?, r.u16()?);
            if entries.last().is_some_and(|last| last.0 >= run.0) {
                return Err(DecodeError::Invalid {
                    what: "placement run (not ascending)",
                    value: u64::from(run.0),
                });
            }
            entries.push(run);
        }
        Ok(entries)
    }
}

/// What a receiver holds: a list32 of items, each a tag u8 (0 complete,
/// 1 partial, 2 unchanged), file index u32 and digest u64; a partial one
/// then its block ranges (first u64, count u64), at most
/// [`HAVE_PART_RANGES_MAX`] over the whole message.
#[derive(Debug)]
pub struct HaveList;
impl Field for HaveList {
    type Value = Vec<HaveItem>;
    fn wire() -> String {
        format!(
            "list32 <= {} (and <= bytes left) of (tag u8 0|1|2, u32, u64, tag 1: list32 of (u64, u64 > 0)), <= {HAVE_PART_RANGES_MAX} ranges in all",
            HaveItems::MAX
        )
    }
    fn put(items: &Vec<HaveItem>, w: &mut Writer, _: u16) -> Result<(), EncodeError> {
        too_many::<HaveItems>(items.len())?;
        w.u32(items.len() as u32);
        for it in items {
            match it {
                HaveItem::Complete { file_index, digest } => {
                    w.u8(0).u32(*file_index).u64(*digest);
                }
                HaveItem::Unchanged { file_index, digest } => {
                    w.u8(2).u32(*file_index).u64(*digest);
                }
                HaveItem::Partial {
                    file_index,
                    digest,
                    ranges,
                } => {
                    w.u8(1).u32(*file_index).u64(*digest);
                    w.u32(ranges.len() as u32);
                    for (first, count) in ranges {
                        w.u64(*first).u64(*count);
                    }
                }
            }
        }
        Ok(())
    }
    fn get(r: &mut Reader<'_>, _: u16) -> Result<Vec<HaveItem>, DecodeError> {
        let count = list_len::<HaveItems>(r)?;
        let mut ranges_left = HAVE_PART_RANGES_MAX;
        let mut items = Vec::with_capacity(count);
        for _ in 0..count {
            let tag = r.u8()?;
            let file_index = r.u32()?;
            let digest = r.u64()?;
            items.push(match tag {
                0 => HaveItem::Complete { file_index, digest },
                2 => HaveItem::Unchanged { file_index, digest },
                1 => HaveItem::Partial {
                    file_index,
                    digest,
                    ranges: have_ranges(r, &mut ranges_left)?,
                },
                t => {
                    return Err(DecodeError::Invalid {
                        what: "have item",
                        value: u64::from(t),
                    })
                }
            });
        }
        Ok(items)
    }
}

/// A partial item's block ranges, taken from what is left of the
/// message's budget.
fn have_ranges(r: &mut Reader<'_>, left: &mut u32) -> Result<Vec<(u64, u64)>, DecodeError> {
    let n = r.u32()?;
    if n > *left {
        return Err(DecodeError::TooLarge {
            what: "have ranges",
            value: u64::from(n),
            max: u64::from(HAVE_PART_RANGES_MAX),
        });
    }
    *left -= n;
    let mut ranges = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let (first, count) = (r.u64()?, r.u64()?);
        if count == 0 || first.checked_add(count).is_none() {
            return Err(DecodeError::Invalid {
                what: "block range",
                value: count,
            });
        }
        ranges.push((first, count));
    }
    Ok(ranges)
}

/// A `Shard` names one of 1 to [`PIECES_MAX`] shards.
pub fn shard_in_range(m: &Message) -> Result<(), DecodeError> {
    if let Message::Shard { index, count, .. } = *m {
        if count == 0 || count > PIECES_MAX || index >= count {
            return Err(DecodeError::Invalid {
                what: "shard",
                value: (u64::from(index) << 32) | u64::from(count),
            });
        }
    }
    Ok(())
}
