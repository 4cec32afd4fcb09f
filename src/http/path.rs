//! A request's path beneath the root: percent-decoded, split into
//! components, and held to the receiver's rules (no `..`, no component
//! longer than NAME_MAX, none of urmove's reserved names, no NUL). The
//! file system then confines what it names to the root (openat2
//! RESOLVE_BENEATH, no symlink followed: `datapath::beneath`).

use crate::protocol::manifest::{is_reserved, COMPONENT_LEN_MAX};

/// A path refused, with the status and reason to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub status: u16,
    pub reason: String,
}

/// The path part of a request target or URL (`/a/b?x` -> `/a/b`).
pub fn path_of(target: &str) -> &str {
    let no_fragment = target.split('#').next().unwrap_or("");
    no_fragment.split('?').next().unwrap_or("")
}

/// `target` as a path relative to the root ("" for the root itself).
pub fn rel_of(target: &str) -> Result<String, Refused> {
    let raw = path_of(target);
    if !raw.starts_with('/') {
        return Err(refused(400, format!("{raw:?}: not an absolute path")));
    }
    let decoded = percent_decode(raw)
        .ok_or_else(|| refused(400, format!("{raw:?}: bad percent-encoding")))?;
    let mut parts: Vec<&str> = Vec::new();
    for comp in decoded.split('/') {
        match comp {
            "" | "." => continue,
            ".." => return Err(refused(403, format!("{raw}: `..` is not allowed"))),
            c if c.contains('\0') => return Err(refused(400, format!("{raw}: a NUL in a name"))),
            c if c.len() > COMPONENT_LEN_MAX => {
                return Err(refused(
                    400,
                    format!("{raw}: a name longer than {COMPONENT_LEN_MAX} bytes"),
                ))
            }
            c if is_reserved(c) => {
                return Err(refused(
                    403,
                    format!("{raw}: names ending in .urmove.part, .urmove.journal or .urmove.piece are urmove's own"),
                ))
            }
            c => parts.push(c),
        }
    }
    Ok(parts.join("/"))
}

fn refused(status: u16, reason: String) -> Refused {
    Refused { status, reason }
}

/// Percent-decoding to UTF-8 (names that are not UTF-8 are not taken
/// over HTTP); `None` for a bad escape or bytes that are not UTF-8.
pub fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// `rel` as an absolute URL path, each component percent-encoded where it
/// holds anything but unreserved characters.
pub fn href_of(rel: &str, dir: bool) -> String {
    let mut out = String::from("/");
    for (i, comp) in rel.split('/').filter(|c| !c.is_empty()).enumerate() {
        if i > 0 {
            out.push('/');
        }
        for byte in comp.bytes() {
            if byte.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@".contains(&byte) {
                out.push(byte as char);
            } else {
                out.push_str(&format!("%{byte:02X}"));
            }
        }
    }
    if dir && !out.ends_with('/') {
        out.push('/');
    }
    out
}

/// The parent of `rel` ("" for a name at the root).
pub fn parent_of(rel: &str) -> &str {
    rel.rsplit_once('/').map_or("", |(p, _)| p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_decode_beneath_the_root() {
        assert_eq!(rel_of("/").unwrap(), "");
        assert_eq!(rel_of("/a//b/./c%20d?x=1").unwrap(), "a/b/c d");
        assert_eq!(rel_of("/d%C3%A9j%C3%A0").unwrap(), "déjà");
    }

    #[test]
    fn escapes_and_reserved_names_are_refused() {
        for (t, status) in [
            ("/a/../b", 403),
            ("/a/%2e%2e/b", 403),
            ("/a%00b", 400),
            ("/%zz", 400),
            ("/%ff", 400),
            ("a/b", 400),
            ("/x.urmove.part", 403),
            ("/d/y.urmove.journal/z", 403),
        ] {
            assert_eq!(rel_of(t).unwrap_err().status, status, "{t}");
        }
        let long = format!("/{}", "n".repeat(256));
        assert_eq!(rel_of(&long).unwrap_err().status, 400);
        assert!(rel_of(&format!("/{}", "n".repeat(255))).is_ok());
    }

    #[test]
    fn hrefs_encode_and_decode_back() {
        for rel in ["a b/c%d", "déjà/x?y#z", ""] {
            let h = href_of(rel, false);
            assert_eq!(rel_of(&h).unwrap(), rel, "{h}");
        }
        assert_eq!(href_of("dir", true), "/dir/");
        assert_eq!(parent_of("a/b/c"), "a/b");
        assert_eq!(parent_of("c"), "");
    }
}
