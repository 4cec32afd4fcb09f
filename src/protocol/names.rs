//! File names as Linux has them: any bytes but `/` and NUL. On the wire a
//! name is its bytes; inside urmove it is a `String` in which each byte that
//! is not part of valid UTF-8 is held as one character of the escape range
//! (U+10FF80 + (byte - 0x80)). Characters of that range that a name really
//! holds are escaped byte by byte too, so [`to_bytes`] gives back exactly
//! the bytes [`from_bytes`] was given, and two names are equal exactly when
//! their bytes are. An escape never stands for `/` or NUL (escaped bytes
//! are 0x80 and above), so the path rules hold on the escaped form.

use std::borrow::Cow;

/// First character of the escape range: byte 0x80.
const ESCAPE_BASE: u32 = 0x10_FF00;

fn escape(b: u8) -> char {
    char::from_u32(ESCAPE_BASE + u32::from(b)).expect("U+10FF80..U+10FFFF are characters")
}

/// The byte an escape character stands for.
fn escaped_byte(c: char) -> Option<u8> {
    let v = c as u32;
    (ESCAPE_BASE + 0x80..=ESCAPE_BASE + 0xFF)
        .contains(&v)
        .then(|| (v - ESCAPE_BASE) as u8)
}

/// The name's bytes as urmove holds them.
pub fn from_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if escaped_byte(c).is_some() {
                let mut buf = [0u8; 4];
                out.extend(c.encode_utf8(&mut buf).bytes().map(escape));
            } else {
                out.push(c);
            }
        }
        out.extend(chunk.invalid().iter().copied().map(escape));
    }
    out
}

/// The bytes of a name held as [`from_bytes`] made it.
pub fn to_bytes(name: &str) -> Cow<'_, [u8]> {
    if !name.chars().any(|c| escaped_byte(c).is_some()) {
        return Cow::Borrowed(name.as_bytes());
    }
    let mut out = Vec::with_capacity(name.len());
    for c in name.chars() {
        match escaped_byte(c) {
            Some(b) => out.push(b),
            None => out.extend_from_slice(c.encode_utf8(&mut [0u8; 4]).as_bytes()),
        }
    }
    Cow::Owned(out)
}

/// A name from the operating system (a directory entry, a link target).
pub fn from_os(name: &std::ffi::OsStr) -> String {
    use std::os::unix::ffi::OsStrExt;
    from_bytes(name.as_bytes())
}

/// A name for people: bytes that are not UTF-8 shown as `\xNN`.
pub fn shown(name: &str) -> Cow<'_, str> {
    if !name.chars().any(|c| escaped_byte(c).is_some()) {
        return Cow::Borrowed(name);
    }
    let text: String = to_bytes(name)
        .utf8_chunks()
        .flat_map(|chunk| {
            let bad = chunk.invalid().iter().map(|b| format!("\\x{b:02x}"));
            std::iter::once(chunk.valid().to_string()).chain(bad)
        })
        .collect();
    Cow::Owned(text)
}

/// Length in bytes of the name on disk (and on the wire).
pub fn byte_len(name: &str) -> usize {
    to_bytes(name).len()
}

/// The longest start of `name` that takes at most `max` bytes on disk,
/// cut between characters (a byte held escaped is one character): never
/// half of a UTF-8 character.
pub fn prefix_within(name: &str, max: usize) -> &str {
    let mut bytes = 0;
    for (at, c) in name.char_indices() {
        let n = match escaped_byte(c) {
            Some(_) => 1,
            None => c.len_utf8(),
        };
        if bytes + n > max {
            return &name[..at];
        }
        bytes += n;
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_bytes_round_trip_and_utf8_is_untouched() {
        let cases: [&[u8]; 7] = [
            b"plain",
            "caf\u{e9}".as_bytes(),
            b"bad\xff",
            b"\xc3",
            b"\xe9t\xe9",
            // A name that really holds a character of the escape range.
            "x\u{10FF80}y\u{10FFFF}".as_bytes(),
            b"\xf4\x8f\xbe\x80\xff",
        ];
        for b in cases {
            let s = from_bytes(b);
            assert_eq!(&*to_bytes(&s), b, "{s:?}");
            assert_eq!(from_bytes(&to_bytes(&s)), s);
        }
        assert_eq!(from_bytes("caf\u{e9}".as_bytes()), "caf\u{e9}");
        assert_ne!(from_bytes(b"\xe9"), from_bytes("\u{e9}".as_bytes()));
        assert_eq!(byte_len(&from_bytes(b"a\xff")), 2);
    }

    #[test]
    fn a_prefix_within_a_byte_count_cuts_between_characters() {
        assert_eq!(prefix_within("abc", 2), "ab");
        assert_eq!(prefix_within("abc", 9), "abc");
        // \u{e9} takes two bytes: never half of it.
        assert_eq!(prefix_within("a\u{e9}b", 2), "a");
        assert_eq!(prefix_within("a\u{e9}b", 3), "a\u{e9}");
        // An escaped byte is one byte on disk, four in the string.
        let s = from_bytes(b"\xff\xfex");
        assert_eq!(to_bytes(prefix_within(&s, 2)).as_ref(), b"\xff\xfe");
    }

    #[test]
    fn escapes_never_stand_for_a_slash_or_nul_and_show_as_hex() {
        for b in 0u8..=255 {
            let s = from_bytes(&[b]);
            let back = to_bytes(&s);
            assert_eq!(&*back, [b]);
            assert_eq!(s.contains('/'), b == b'/');
            assert_eq!(s.contains('\0'), b == 0);
        }
        assert_eq!(shown(&from_bytes(b"run\xff.dat")), "run\\xff.dat");
        assert_eq!(shown("plain"), "plain");
    }
}
