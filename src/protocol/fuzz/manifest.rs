//! The manifest body: entries decoded as a stream and as a Manifest
//! message, each checked against an independent reading of what a safe
//! path and a safe link target are; and any control message round-tripped.

use std::path::{Component, Path};

use crate::protocol::control::{self, Message};
use crate::protocol::manifest::{
    check_entry, check_path, decode_entry, encode_entry, link_stays_beneath, Entry, EntryKind,
    COMPONENT_LEN_MAX, PATH_LEN_MAX,
};
use crate::protocol::names;
use crate::protocol::wire::{Reader, Writer};

/// `data` read twice: as a stream of manifest entries, and as the body of a
/// Manifest control message (u32 count, then entries).
///
/// Every decoded entry has fields within their limits and re-encodes to its
/// own bytes (a directory's size and a non-symlink's link text are not
/// carried: they come back zero and empty). [`check_path`] and
/// [`link_stays_beneath`] agree with an independent reading through
/// `std::path`: an accepted path is relative, normal (no `.`, `..` or empty
/// components), within the length limits and free of NUL bytes, and an
/// accepted symlink target, resolved from the link's directory, never climbs
/// above the root nor climbs through a name (which might be a link).
pub fn manifest(data: &[u8]) {
    any_control_message(data);
    let mut r = Reader::new(data);
    while r.remaining() > 0 {
        let at = data.len() - r.remaining();
        let Ok(e) = decode_entry(&mut r) else { break };
        let raw = &data[at..data.len() - r.remaining()];
        manifest_entry(&e);
        // Decoding is canonical: a directory or link with a size, or a
        // target on what is no link, is refused, so nothing is dropped.
        assert_eq!(entry_bytes(&e), raw, "re-encoded {e:?}");
    }

    let kind = control::encode(&Message::Manifest(Vec::new()))[4];
    let mut body = Vec::with_capacity(1 + data.len());
    body.push(kind);
    body.extend_from_slice(data);
    match control::decode_body(&body) {
        Ok(Message::Manifest(entries)) => {
            assert!(entries.len() <= control::MANIFEST_PART_ENTRIES_MAX as usize);
            for e in &entries {
                manifest_entry(e);
            }
            let again = control::encode(&Message::Manifest(entries.clone()));
            assert!(again.len() <= 4 + body.len(), "re-encoding grew the part");
            let normal: Vec<Entry> = entries.iter().map(normalised).collect();
            assert_eq!(
                control::decode(&again),
                Ok(Some((Message::Manifest(normal), again.len())))
            );
        }
        Ok(other) => panic!("a Manifest body decoded as {other:?}"),
        Err(_) => {}
    }
}

/// The checks on one decoded entry.
fn manifest_entry(e: &Entry) {
    assert!(e.mode <= 0o7777 && e.mtime_ns < 1_000_000_000, "{e:?}");
    assert!(names::byte_len(&e.path) <= PATH_LEN_MAX);
    assert_eq!(
        e.link.is_some(),
        matches!(e.kind, EntryKind::Symlink | EntryKind::HardLink)
    );
    assert!(e
        .link
        .as_ref()
        .is_none_or(|l| names::byte_len(l) <= PATH_LEN_MAX));

    let path_ok = check_path(&e.path).is_ok();
    assert_eq!(path_ok, path_is_safe(&e.path), "check_path({:?})", e.path);
    let mut link_ok = false;
    if let Some(link) = e.link.as_deref().filter(|_| path_ok) {
        link_ok = link_is_safe(&e.path, link);
        assert_eq!(
            link_stays_beneath(&e.path, link),
            link_ok,
            "link {:?} -> {link:?}",
            e.path
        );
    }
    let _ = link_ok;
    // A receiver takes any link target it can store: whether the target
    // leaves the root is its policy's call, and it never follows links.
    let target_ok = e
        .link
        .as_deref()
        .is_some_and(|t| !t.is_empty() && !t.contains('\0'));
    let linked_ok = match e.kind {
        EntryKind::Symlink => target_ok,
        EntryKind::HardLink => e.link.as_deref().is_some_and(|l| check_path(l).is_ok()),
        _ => true,
    };
    assert_eq!(
        check_entry(e).is_ok(),
        path_ok && linked_ok,
        "check_entry({e:?})"
    );
}

/// A relative, normal path within the limits, read through `std::path`.
fn path_is_safe(path: &str) -> bool {
    let components: Vec<Component<'_>> = Path::new(path).components().collect();
    !path.is_empty()
        && names::byte_len(path) <= PATH_LEN_MAX
        && !path.contains('\0')
        // std drops empty and inner `.` components: a normal path keeps
        // every `/`-separated piece as one name.
        && components.len() == path.split('/').count()
        && components.iter().all(|c| match c {
            Component::Normal(name) => {
                let name = name.to_string_lossy();
                names::byte_len(&name) <= COMPONENT_LEN_MAX
                    && !crate::protocol::manifest::RESERVED_SUFFIXES
                        .iter()
                        .any(|s| name.ends_with(s))
            }
            _ => false,
        })
}

/// `target`, resolved from the directory of the link at `link_path` (a
/// safe path), stays beneath the root, and climbs (`..`) only before its
/// first name.
fn link_is_safe(link_path: &str, target: &str) -> bool {
    if target.is_empty() || target.len() > PATH_LEN_MAX || target.contains('\0') {
        return false;
    }
    let mut depth = Path::new(link_path).components().count() - 1;
    let mut named = false;
    for c in Path::new(target).components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir if named || depth == 0 => return false,
            Component::ParentDir => depth -= 1,
            Component::Normal(_) => {
                named = true;
                depth += 1;
            }
            Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    true
}

/// What a receiver keeps of a decoded entry: only files have a size.
fn normalised(e: &Entry) -> Entry {
    Entry {
        size: if e.kind == EntryKind::File { e.size } else { 0 },
        ..e.clone()
    }
}

fn entry_bytes(e: &Entry) -> Vec<u8> {
    let mut w = Writer::default();
    encode_entry(&mut w, e);
    w.buf
}

/// Any control message body (the manifest's neighbours on the wire: what
/// the receiver holds, content digests, heartbeats, requests): whatever
/// decodes re-encodes to a message that decodes equal. Texts cut on
/// encoding (an Error's, a DaemonInfo's release) are left out.
fn any_control_message(data: &[u8]) {
    if let Ok(m) = control::decode_body(data) {
        if !matches!(m, Message::Error { .. } | Message::DaemonInfo(_)) {
            let b = control::encode(&m);
            assert_eq!(control::decode(&b), Ok(Some((m, b.len()))));
        }
    }
}
