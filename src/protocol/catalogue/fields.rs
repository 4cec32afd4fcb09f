//! How each field travels: a [`Field`] type per wire form, carrying its
//! own validation, so a message's declaration (`messages.rs`) names its
//! fields' types and nothing else.
//!
//! Plain numbers and byte arrays ([`U16`], [`Bytes`]), booleans strict
//! ([`Bool01`]: 0 or 1) or lenient ([`BoolAny`]: any non-zero is true, as
//! release 0.1.0 reads `ok`, `done` and `waiting`), nanoseconds below
//! 10⁹ ([`Nanos`]), lists with a u16 or u32 count bounded by a [`Label`]'s
//! limit ([`List16`], [`List32`], whose count must also fit in what is left
//! of the message), names and text ([`Name16`], [`Str16`], and [`Text16`],
//! which an encoder truncates). Fields whose check spans several values are
//! hand-written in `checked.rs`.

use std::marker::PhantomData;

use super::{EncodeError, Field};
use crate::protocol::control::MAGIC;
use crate::protocol::manifest::{decode_entry, encode_entry, Entry};
use crate::protocol::wire::{DecodeError, Reader, Writer};

/// What a bounded field is called in a refusal, and its limit.
pub trait Label {
    const WHAT: &'static str;
    const MAX: usize;
}

/// Declares zero-sized [`Label`]s: `Name = "what", MAX;`.
macro_rules! labels {
    ($($(#[doc = $d:literal])* $name:ident = $what:literal, $max:expr;)*) => {
        $(
            $(#[doc = $d])*
            #[derive(Debug)]
            pub struct $name;
            impl Label for $name {
                const WHAT: &'static str = $what;
                const MAX: usize = $max as usize;
            }
        )*
    };
}

use crate::protocol::control::{
    ERROR_TEXT_MAX, FILTER_PATTERN_MAX, FILTER_RULES_MAX, LIST_PART_ITEMS_MAX,
    MANIFEST_PART_ENTRIES_MAX, STREAMS_MAX,
};
use crate::protocol::manifest::PATH_LEN_MAX;

labels! {
    Path = "path", PATH_LEN_MAX;
    ErrorText = "error text", ERROR_TEXT_MAX;
    ReleaseText = "release", 64;
    SkipReason = "skip reason", ERROR_TEXT_MAX;
    FilterPattern = "filter pattern", FILTER_PATTERN_MAX;
    FilterRules = "filter rules", FILTER_RULES_MAX;
    StreamCount = "stream count", STREAMS_MAX;
    UdpFlows = "UDP flows", STREAMS_MAX;
    ManifestEntries = "manifest part entries", MANIFEST_PART_ENTRIES_MAX;
    DirTimesItems = "directory times", LIST_PART_ITEMS_MAX;
    Digests = "digests", LIST_PART_ITEMS_MAX;
    HeldEntries = "held entries", LIST_PART_ITEMS_MAX;
    DeletedPaths = "deleted paths", LIST_PART_ITEMS_MAX;
    HaveItems = "have items", LIST_PART_ITEMS_MAX;
    PlacementRuns = "placement runs", LIST_PART_ITEMS_MAX;
}

/// Declares a plain little-endian number field.
macro_rules! number {
    ($($name:ident: $t:ident, $wire:literal;)*) => {
        $(
            #[doc = concat!("A ", $wire, ", any value.")]
            #[derive(Debug)]
            pub struct $name;
            impl Field for $name {
                type Value = $t;
                fn wire() -> String {
                    $wire.into()
                }
                fn put(value: &$t, w: &mut Writer, _: u16) -> Result<(), EncodeError> {
                    w.$t(*value);
                    Ok(())
                }
                fn get(r: &mut Reader<'_>, _: u16) -> Result<$t, DecodeError> {
                    r.$t()
                }
            }
        )*
    };
}

number! {
    U16: u16, "u16";
    U32: u32, "u32";
    U64: u64, "u64";
    I64: i64, "i64";
}

/// `N` bytes as they are.
#[derive(Debug)]
pub struct Bytes<const N: usize>;
impl<const N: usize> Field for Bytes<N> {
    type Value = [u8; N];
    fn wire() -> String {
        format!("[u8; {N}]")
    }
    fn put(value: &[u8; N], w: &mut Writer, _: u16) -> Result<(), EncodeError> {
        w.bytes(value);
        Ok(())
    }
    fn get(r: &mut Reader<'_>, _: u16) -> Result<[u8; N], DecodeError> {
        r.array()
    }
}

/// [`MAGIC`] (refused unless exact), then `F`: the first field of a
/// connection's first message.
#[derive(Debug)]
pub struct AfterMagic<F>(PhantomData<F>);
impl<F: Field> Field for AfterMagic<F> {
    type Value = F::Value;
    fn wire() -> String {
        format!("\"URMV\" {}", F::wire())
    }
    fn put(value: &F::Value, w: &mut Writer, v: u16) -> Result<(), EncodeError> {
        w.bytes(&MAGIC);
        F::put(value, w, v)
    }
    fn get(r: &mut Reader<'_>, v: u16) -> Result<F::Value, DecodeError> {
        if r.array::<4>()? != MAGIC {
            return Err(DecodeError::Invalid {
                what: "magic",
                value: 0,
            });
        }
        F::get(r, v)
    }
}

/// A bool as u8 0 or 1; any other value is refused (`L` names it).
#[derive(Debug)]
pub struct Bool01<L>(PhantomData<L>);
impl<L: Label> Field for Bool01<L> {
    type Value = bool;
    fn wire() -> String {
        "u8 0|1".into()
    }
    fn put(value: &bool, w: &mut Writer, _: u16) -> Result<(), EncodeError> {
        w.u8(u8::from(*value));
        Ok(())
    }
    fn get(r: &mut Reader<'_>, _: u16) -> Result<bool, DecodeError> {
        match r.u8()? {
            v @ 0..=1 => Ok(v == 1),
            v => Err(DecodeError::Invalid {
                what: L::WHAT,
                value: u64::from(v),
            }),
        }
    }
}

labels! {
    SkipRule = "skip rule", 1;
    PullOnly = "pull only", 1;
    EncryptionRequired = "encryption required", 1;
    FilterVerdict = "filter rule verdict", 1;
}

/// A bool as u8, sent 0 or 1, read true for any non-zero value.
#[derive(Debug)]
pub struct BoolAny;
impl Field for BoolAny {
    type Value = bool;
    fn wire() -> String {
        "u8 (non-zero: true)".into()
    }
    fn put(value: &bool, w: &mut Writer, _: u16) -> Result<(), EncodeError> {
        w.u8(u8::from(*value));
        Ok(())
    }
    fn get(r: &mut Reader<'_>, _: u16) -> Result<bool, DecodeError> {
        Ok(r.u8()? != 0)
    }
}

/// Nanoseconds of a time: a u32 below 10⁹.
#[derive(Debug)]
pub struct Nanos;
impl Field for Nanos {
    type Value = u32;
    fn wire() -> String {
        "u32 < 1e9".into()
    }
    fn put(value: &u32, w: &mut Writer, _: u16) -> Result<(), EncodeError> {
        w.u32(*value);
        Ok(())
    }
    fn get(r: &mut Reader<'_>, _: u16) -> Result<u32, DecodeError> {
        let ns = r.u32()?;
        if ns >= 1_000_000_000 {
            return Err(DecodeError::Invalid {
                what: "mtime nanoseconds",
                value: u64::from(ns),
            });
        }
        Ok(ns)
    }
}

/// A file name or path, u16 length, at most `L::MAX` bytes, any bytes
/// (`protocol::names`).
#[derive(Debug)]
pub struct Name16<L>(PhantomData<L>);
impl<L: Label> Field for Name16<L> {
    type Value = String;
    fn wire() -> String {
        format!("name16 <= {}", L::MAX)
    }
    fn put(value: &String, w: &mut Writer, _: u16) -> Result<(), EncodeError> {
        w.name16(value);
        Ok(())
    }
    fn get(r: &mut Reader<'_>, _: u16) -> Result<String, DecodeError> {
        r.name16(L::WHAT, L::MAX)
    }
}

/// UTF-8 text, u16 length, at most `L::MAX` bytes, sent whole.
#[derive(Debug)]
pub struct Str16<L>(PhantomData<L>);
impl<L: Label> Field for Str16<L> {
    type Value = String;
    fn wire() -> String {
        format!("str16 <= {}", L::MAX)
    }
    fn put(value: &String, w: &mut Writer, _: u16) -> Result<(), EncodeError> {
        w.str16(value);
        Ok(())
    }
    fn get(r: &mut Reader<'_>, _: u16) -> Result<String, DecodeError> {
        Ok(r.str16(L::WHAT, L::MAX)?.to_owned())
    }
}

/// UTF-8 text, u16 length, at most `L::MAX` bytes, which an encoder cuts
/// to its first `L::MAX / 4` characters (so it always fits).
#[derive(Debug)]
pub struct Text16<L>(PhantomData<L>);
impl<L: Label> Field for Text16<L> {
    type Value = String;
    fn wire() -> String {
        format!("str16 <= {} (cut to {} chars)", L::MAX, L::MAX / 4)
    }
    fn put(value: &String, w: &mut Writer, _: u16) -> Result<(), EncodeError> {
        let text: String = value.chars().take(L::MAX / 4).collect();
        w.str16(&text);
        Ok(())
    }
    fn get(r: &mut Reader<'_>, _: u16) -> Result<String, DecodeError> {
        Ok(r.str16(L::WHAT, L::MAX)?.to_owned())
    }
}

/// A list: a u16 count of at most `L::MAX`, then the items.
#[derive(Debug)]
pub struct List16<F, L>(PhantomData<(F, L)>);
impl<F: Field, L: Label> Field for List16<F, L> {
    type Value = Vec<F::Value>;
    fn wire() -> String {
        format!("list16 <= {} of {}", L::MAX, F::wire())
    }
    fn put(value: &Vec<F::Value>, w: &mut Writer, v: u16) -> Result<(), EncodeError> {
        too_many::<L>(value.len())?;
        w.u16(value.len() as u16);
        value.iter().try_for_each(|x| F::put(x, w, v))
    }
    fn get(r: &mut Reader<'_>, v: u16) -> Result<Vec<F::Value>, DecodeError> {
        let n = r.count16(L::WHAT, L::MAX)?;
        (0..n).map(|_| F::get(r, v)).collect()
    }
}

/// A list: a u32 count of at most `L::MAX` and of at most the bytes left
/// in the message (so nothing is allocated for a lie), then the items.
#[derive(Debug)]
pub struct List32<F, L>(PhantomData<(F, L)>);
impl<F: Field, L: Label> Field for List32<F, L> {
    type Value = Vec<F::Value>;
    fn wire() -> String {
        format!("list32 <= {} (and <= bytes left) of {}", L::MAX, F::wire())
    }
    fn put(value: &Vec<F::Value>, w: &mut Writer, v: u16) -> Result<(), EncodeError> {
        too_many::<L>(value.len())?;
        w.u32(value.len() as u32);
        value.iter().try_for_each(|x| F::put(x, w, v))
    }
    fn get(r: &mut Reader<'_>, v: u16) -> Result<Vec<F::Value>, DecodeError> {
        let count = list_len::<L>(r)?;
        let mut out = Vec::with_capacity(count);
        for _ in 0..count {
            out.push(F::get(r, v)?);
        }
        Ok(out)
    }
}

/// A list's item count, within `L::MAX` and within what the rest of the
/// message can hold.
pub(super) fn list_len<L: Label>(r: &mut Reader<'_>) -> Result<usize, DecodeError> {
    let count = r.u32()?;
    if count as usize > L::MAX || count as usize > r.remaining() {
        return Err(DecodeError::TooLarge {
            what: L::WHAT,
            value: u64::from(count),
            max: L::MAX as u64,
        });
    }
    Ok(count as usize)
}

/// Refuses to encode more than `L::MAX` items.
pub(super) fn too_many<L: Label>(len: usize) -> Result<(), EncodeError> {
    if len > L::MAX {
        return Err(EncodeError::TooLarge {
            what: L::WHAT,
            len: len as u64,
            max: L::MAX as u64,
        });
    }
    Ok(())
}

/// A part of a manifest: a u32 count of at most
/// [`MANIFEST_PART_ENTRIES_MAX`] (entries vary in size, so no check
/// against the bytes left), then the entries (`protocol::manifest`).
#[derive(Debug)]
pub struct ManifestPart;
impl Field for ManifestPart {
    type Value = Vec<Entry>;
    fn wire() -> String {
        format!("list32 <= {MANIFEST_PART_ENTRIES_MAX} of entry (protocol::manifest)")
    }
    fn put(value: &Vec<Entry>, w: &mut Writer, _: u16) -> Result<(), EncodeError> {
        too_many::<ManifestEntries>(value.len())?;
        w.u32(value.len() as u32);
        value.iter().for_each(|e| encode_entry(w, e));
        Ok(())
    }
    fn get(r: &mut Reader<'_>, _: u16) -> Result<Vec<Entry>, DecodeError> {
        let count = r.u32()?;
        if count > MANIFEST_PART_ENTRIES_MAX {
            return Err(DecodeError::TooLarge {
                what: ManifestEntries::WHAT,
                value: u64::from(count),
                max: u64::from(MANIFEST_PART_ENTRIES_MAX),
            });
        }
        let mut entries = Vec::with_capacity(count as usize);
        for _ in 0..count {
            entries.push(decode_entry(r)?);
        }
        Ok(entries)
    }
}

/// Two fields one after the other, as a pair.
impl<A: Field, B: Field> Field for (A, B) {
    type Value = (A::Value, B::Value);
    fn wire() -> String {
        format!("({}, {})", A::wire(), B::wire())
    }
    fn put(value: &Self::Value, w: &mut Writer, v: u16) -> Result<(), EncodeError> {
        A::put(&value.0, w, v)?;
        B::put(&value.1, w, v)
    }
    fn get(r: &mut Reader<'_>, v: u16) -> Result<Self::Value, DecodeError> {
        Ok((A::get(r, v)?, B::get(r, v)?))
    }
}

/// Three fields one after the other, as a triple.
impl<A: Field, B: Field, C: Field> Field for (A, B, C) {
    type Value = (A::Value, B::Value, C::Value);
    fn wire() -> String {
        format!("({}, {}, {})", A::wire(), B::wire(), C::wire())
    }
    fn put(value: &Self::Value, w: &mut Writer, v: u16) -> Result<(), EncodeError> {
        A::put(&value.0, w, v)?;
        B::put(&value.1, w, v)?;
        C::put(&value.2, w, v)
    }
    fn get(r: &mut Reader<'_>, v: u16) -> Result<Self::Value, DecodeError> {
        Ok((A::get(r, v)?, B::get(r, v)?, C::get(r, v)?))
    }
}
