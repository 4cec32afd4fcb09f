//! Each protocol version's fingerprint: SHA-256 of a canonical text of
//! the catalogue as that version sees it (its messages and their fields,
//! the bits and values it knows, the frame header, the limits, and the
//! bytes of a probe frame header and of a manifest entry of each shape). A
//! released version's wire is frozen: its fingerprint is recorded in
//! [`RELEASES`], and a test fails when it changes.

use sha2::{Digest, Sha256};

use super::{Bit, DIRECTIONS, ERROR_CODES, FRAME_FLAGS, LIMITS, MESSAGES, REQUEST_FLAGS};
use crate::protocol::control::{
    CONTROL_LEN_MAX, ERROR_TEXT_MAX, FILTER_PATTERN_MAX, FILTER_RULES_MAX, HAVE_PART_RANGES_MAX,
    LIST_PART_ITEMS_MAX, MAGIC, MANIFEST_PART_ENTRIES_MAX, STREAMS_MAX, UNLISTED,
};
use crate::protocol::frame::{
    FrameHeader, FRAME_HEADER_LAYOUT, FRAME_HEADER_LEN, FRAME_PAYLOAD_MAX,
};
use crate::protocol::manifest::{
    encode_entry, Entry, EntryKind, Owner, Piece, OWNER_NAME_MAX, PATH_LEN_MAX, PIECES_MAX,
    XATTRS_MAX, XATTR_NAME_MAX, XATTR_VALUE_MAX,
};
use crate::protocol::wire::Writer;

/// A protocol version a release spoke, and its fingerprint.
#[derive(Debug)]
pub struct Release {
    pub protocol: u16,
    /// The release that brought it (as CHANGELOG.md names it).
    pub name: &'static str,
    /// [`fingerprint`] of the protocol.
    pub fingerprint: &'static str,
}

/// Every recorded protocol version. A change to a recorded version's wire
/// is a new protocol version, recorded here and named in CHANGELOG.md.
pub const RELEASES: &[Release] = &[
    Release {
        protocol: 12,
        name: "0.1.0",
        fingerprint: "c97f7efd1b5fbb18fca3a844fb435270564539bd6024623a557e1705e5f30cd5",
    },
    Release {
        protocol: 13,
        name: "0.2.0",
        fingerprint: "7257afd3dfb2ccd84439f8e92417dd2f983e95e38bafdb328f858eb8d9321a2c",
    },
    Release {
        protocol: 14,
        name: "0.3.0",
        fingerprint: "cc728e0848b358c5233712b6defebd6f9d104e249eeb17644c722151e31dbf42",
    },
];

fn bits_at(out: &mut String, what: &str, table: &[Bit], v: u16) {
    for b in table.iter().filter(|b| b.since <= v) {
        out.push_str(&format!(
            "{what} {} = {} since {}\n",
            b.name, b.value, b.since
        ));
    }
}

/// The catalogue as protocol `v` has it, one line a fact.
pub fn canonical(v: u16) -> String {
    let mut out = format!("urmove protocol {v}\nmagic {MAGIC:?}\n");
    for d in MESSAGES.iter().filter(|d| d.since <= v) {
        out += &format!(
            "message {} {} since {} from {}\n",
            d.kind,
            d.name,
            d.since,
            d.from.name()
        );
        for f in d.fields.iter().filter(|f| f.since <= v) {
            out += &format!("  field {}: {} since {}\n", f.name, (f.wire)(), f.since);
        }
        for c in d.checks {
            out += &format!("  check {c}\n");
        }
    }
    bits_at(&mut out, "request flag", REQUEST_FLAGS, v);
    bits_at(&mut out, "frame flag", FRAME_FLAGS, v);
    bits_at(&mut out, "error code", ERROR_CODES, v);
    bits_at(&mut out, "direction", DIRECTIONS, v);
    bits_at(&mut out, "limit", LIMITS, v);
    out += &format!(
        "frame header {FRAME_HEADER_LEN} bytes: {FRAME_HEADER_LAYOUT}; payload <= {FRAME_PAYLOAD_MAX}\n"
    );
    let probe = FrameHeader {
        flags: 0x0102,
        file_index: 0x0304_0506,
        length: 0x0708_090a,
        span: 0x0b0c_0d0e,
        offset: 0x1112_1314_1516_1718,
        checksum: 0x2122_2324_2526_2728,
    };
    let hex: String = probe.encode().iter().map(|b| format!("{b:02x}")).collect();
    out += &format!("frame header probe {hex}\n");
    for (name, value) in [
        ("control message", u64::from(CONTROL_LEN_MAX)),
        (
            "manifest part entries",
            u64::from(MANIFEST_PART_ENTRIES_MAX),
        ),
        ("error text", ERROR_TEXT_MAX as u64),
        ("streams", u64::from(STREAMS_MAX)),
        ("list part items", u64::from(LIST_PART_ITEMS_MAX)),
        ("have part ranges", u64::from(HAVE_PART_RANGES_MAX)),
        ("filter rules", FILTER_RULES_MAX as u64),
        ("filter pattern", FILTER_PATTERN_MAX as u64),
        ("path", PATH_LEN_MAX as u64),
        ("pieces", u64::from(PIECES_MAX)),
        ("unlisted", u64::from(UNLISTED)),
        ("owner name", OWNER_NAME_MAX as u64),
        ("xattrs", XATTRS_MAX as u64),
        ("xattr name", XATTR_NAME_MAX as u64),
        ("xattr value", XATTR_VALUE_MAX as u64),
    ] {
        out += &format!("limit {name} {value}\n");
    }
    // The manifest entry's form, which no field type spells out: the
    // bytes of one entry of each shape.
    for e in entry_probes().into_iter().filter(|e| entry_since(e) <= v) {
        let mut w = Writer::default();
        encode_entry(&mut w, &e);
        let hex: String = w.buf.iter().map(|b| format!("{b:02x}")).collect();
        out += &format!("entry {} {hex}\n", e.kind.name());
    }
    out
}

/// The protocol an entry's kind or mark came with: the growing bit 7,
/// pieces 10, FIFOs, sockets and devices 12.
fn entry_since(e: &Entry) -> u16 {
    if e.kind.is_special() {
        12
    } else if e.piece.is_some() {
        10
    } else if e.growing {
        7
    } else {
        1
    }
}

/// One manifest entry of each kind and mark, every field set.
fn entry_probes() -> Vec<Entry> {
    let base = Entry {
        path: "d/f".into(),
        size: 9,
        data: 5,
        mode: 0o640,
        mtime_s: -2,
        mtime_ns: 3,
        owner: Owner {
            uid: 1,
            gid: 2,
            user: "u".into(),
            group: "g".into(),
        },
        xattrs: vec![("user.a".into(), vec![7])],
        ..Entry::default()
    };
    let kinds = [
        EntryKind::File,
        EntryKind::Dir,
        EntryKind::Symlink,
        EntryKind::HardLink,
        EntryKind::Fifo,
        EntryKind::Socket,
        EntryKind::CharDevice,
        EntryKind::BlockDevice,
    ];
    let mut out: Vec<Entry> = kinds
        .into_iter()
        .map(|kind| Entry {
            kind,
            link: matches!(kind, EntryKind::Symlink | EntryKind::HardLink).then(|| "t".into()),
            rdev: if kind.is_device() { 0x0801 } else { 0 },
            ..base.clone()
        })
        .collect();
    out.push(Entry {
        growing: true,
        ..base.clone()
    });
    out.push(Entry {
        piece: Some(Piece { index: 1, count: 3 }),
        ..base
    });
    out
}

/// SHA-256 of [`canonical`]`(v)`, in hex.
pub fn fingerprint(v: u16) -> String {
    Sha256::digest(canonical(v).as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// What came with protocol `v`: its messages, the fields added to older
/// ones, its bits and values.
pub fn came_with(v: u16) -> Vec<String> {
    let mut out = Vec::new();
    let named = |what: &str, names: Vec<String>| {
        (!names.is_empty()).then(|| format!("{what} {}", names.join(", ")))
    };
    let messages = MESSAGES.iter().filter(|d| d.since == v);
    out.extend(named(
        "messages",
        messages
            .map(|d| format!("{} ({})", d.name, d.kind))
            .collect(),
    ));
    let fields = MESSAGES.iter().flat_map(|d| {
        d.fields
            .iter()
            .filter(move |f| f.since == v && f.since > d.since)
            .map(move |f| format!("{}.{}", d.name, f.name))
    });
    out.extend(named("fields", fields.collect()));
    for (what, table) in [
        ("request flags", REQUEST_FLAGS),
        ("frame flags", FRAME_FLAGS),
        ("error codes", ERROR_CODES),
        ("directions", DIRECTIONS),
        ("limits", LIMITS),
    ] {
        let names = table.iter().filter(|b| b.since == v);
        out.extend(named(what, names.map(|b| b.name.to_string()).collect()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::catalogue::{PROTOCOL_NEWEST, PROTOCOL_OLDEST};

    #[test]
    fn a_recorded_protocols_wire_never_changes() {
        for r in RELEASES {
            assert_eq!(
                fingerprint(r.protocol),
                r.fingerprint,
                "the wire of protocol {} (release {}) changed; a change needs a new protocol \
                 version recorded in catalogue/versions.rs and named in CHANGELOG.md.\n\
                 The catalogue as protocol {} now has it:\n{}",
                r.protocol,
                r.name,
                r.protocol,
                canonical(r.protocol)
            );
        }
    }

    #[test]
    fn every_spoken_protocol_is_recorded() {
        for v in PROTOCOL_OLDEST..=PROTOCOL_NEWEST {
            assert!(
                RELEASES.iter().any(|r| r.protocol == v),
                "protocol {v} has no record in catalogue/versions.rs: add \
                 Release {{ protocol: {v}, name: \"<release>\", fingerprint: \"{}\" }}",
                fingerprint(v)
            );
        }
    }

    #[test]
    fn the_changelog_names_every_recorded_protocol() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/CHANGELOG.md");
        let text = std::fs::read_to_string(path).unwrap();
        for r in RELEASES {
            let heading = format!("## {} (protocol {})", r.name, r.protocol);
            assert!(
                text.lines().any(|l| l.starts_with(&heading)),
                "CHANGELOG.md has no heading \"{heading}\""
            );
        }
    }

    #[test]
    fn a_version_sees_only_what_came_before_it() {
        assert!(canonical(12).contains("message 37 StreamsRefused"));
        assert!(!canonical(11).contains("StreamsRefused"));
        assert!(!canonical(11).contains("field rule"));
        assert!(canonical(11).contains("message 18 Skipped"));
        assert_ne!(fingerprint(11), fingerprint(12));
        assert!(came_with(12).iter().any(|s| s.contains("Skipped.rule")));
        assert!(canonical(12).contains("entry fifo"));
        assert!(!canonical(11).contains("entry fifo"));
        assert!(canonical(11).contains("entry file"));
    }
}
