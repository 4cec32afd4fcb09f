//! The manifest: what a session moves (path, kind, size, mode, mtime, and a
//! link target for symlinks), with the path rules a receiver relies on.
//! Every path on the wire is relative, normalised and bounded; a symlink's
//! target must stay beneath the root when resolved from the link.

use super::wire::{DecodeError, Reader, Writer};

/// Longest path on the wire (bytes), as Linux's PATH_MAX.
pub const PATH_LEN_MAX: usize = 4096;
/// Longest path component (bytes), as Linux's NAME_MAX.
pub const COMPONENT_LEN_MAX: usize = 255;
/// Most entries in one manifest.
pub const ENTRIES_MAX: u32 = 10_000_000;
/// Endings of the names urmove keeps for itself beside files being
/// received (part files, journals, their temporaries): no path from the
/// wire may have a component that ends so, for push and for pull.
pub const RESERVED_SUFFIXES: [&str; 5] = [
    ".urmove.part",
    ".urmove.journal",
    ".urmove.journal.tmp",
    ".urmove.piece",
    ".urmove.piece.tmp",
];

/// Most pieces one file is split into (`send --shard`).
pub const PIECES_MAX: u32 = 4096;

/// Piece `index` of `count` of a file split over the shards of one
/// transfer (protocol 10): the blocks `[blocks*index/count,
/// blocks*(index+1)/count)` of its `blocks` blocks, as both sides compute
/// it ([`piece_span`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub index: u32,
    pub count: u32,
}

/// Bytes `[start, end)` of piece `p` of a file of `size` bytes cut into
/// `block`-byte blocks: block aligned, the last ending at `size`. Empty
/// when the file has fewer blocks than pieces.
pub fn piece_span(size: u64, block: u64, p: Piece) -> (u64, u64) {
    let blocks = size.div_ceil(block.max(1));
    let cut = |k: u32| {
        let b = (u128::from(blocks) * u128::from(k) / u128::from(p.count.max(1))) as u64;
        b.saturating_mul(block).min(size)
    };
    (cut(p.index), cut(p.index + 1))
}

/// Whether `name` (one path component) is one of urmove's reserved names.
pub fn is_reserved(name: &str) -> bool {
    RESERVED_SUFFIXES.iter().any(|s| name.ends_with(s))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EntryKind {
    #[default]
    File = 0,
    Dir = 1,
    Symlink = 2,
    /// Another name of a file earlier in the manifest (`send -H`): `link`
    /// holds that file's path.
    HardLink = 3,
    /// A FIFO (named pipe), recreated empty (protocol 12).
    Fifo = 4,
    /// A Unix socket's name, recreated as one (protocol 12).
    Socket = 5,
    /// Device nodes (`-D`): `rdev` holds the device number (protocol 12).
    CharDevice = 6,
    BlockDevice = 7,
}

impl EntryKind {
    /// A FIFO, a socket or a device node: made with `mknod`, no content.
    pub fn is_special(self) -> bool {
        matches!(
            self,
            EntryKind::Fifo | EntryKind::Socket | EntryKind::CharDevice | EntryKind::BlockDevice
        )
    }

    /// A device node (`-D`).
    pub fn is_device(self) -> bool {
        matches!(self, EntryKind::CharDevice | EntryKind::BlockDevice)
    }

    /// The kind a wire byte names (its growing and piece bits cleared).
    fn from_byte(b: u8) -> Option<EntryKind> {
        Some(match b {
            0 => EntryKind::File,
            1 => EntryKind::Dir,
            2 => EntryKind::Symlink,
            3 => EntryKind::HardLink,
            4 => EntryKind::Fifo,
            5 => EntryKind::Socket,
            6 => EntryKind::CharDevice,
            7 => EntryKind::BlockDevice,
            _ => return None,
        })
    }

    /// How people call it.
    pub fn name(self) -> &'static str {
        match self {
            EntryKind::File => "file",
            EntryKind::Dir => "dir",
            EntryKind::Symlink => "symlink",
            EntryKind::HardLink => "hard link",
            EntryKind::Fifo => "fifo",
            EntryKind::Socket => "socket",
            EntryKind::CharDevice => "char device",
            EntryKind::BlockDevice => "block device",
        }
    }
}

/// Longest user or group name on the wire.
pub const OWNER_NAME_MAX: usize = 64;
/// Most extended attributes of one entry.
pub const XATTRS_MAX: usize = 64;
/// Longest extended attribute name (XATTR_NAME_MAX).
pub const XATTR_NAME_MAX: usize = 255;
/// Largest extended attribute value carried (a larger one is left out).
pub const XATTR_VALUE_MAX: usize = 65_535;

/// Whether extended attribute `name` is a POSIX ACL (`-A`).
pub fn is_acl(name: &str) -> bool {
    name == "system.posix_acl_access" || name == "system.posix_acl_default"
}

/// Whether extended attribute `name` is carried at all (`-X`, `-A`): the
/// user namespace (urmove's own stamp aside) and POSIX ACLs, never
/// security.* (file capabilities, SELinux labels) or trusted.*.
pub fn is_carried_xattr(name: &str) -> bool {
    let own = name == "user.urmove" || name.starts_with("user.urmove.");
    (name.starts_with("user.") && !own) || is_acl(name)
}

/// Who owns an entry on the sending side: its numbers, and its names
/// where that side knows them (empty otherwise), so a receiver running as
/// root can give it the same owner by name (or by number, `--numeric-ids`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
    pub user: String,
    pub group: String,
}

/// One file, directory or symlink to move.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Entry {
    /// Relative path under the destination, `/`-separated.
    pub path: String,
    pub kind: EntryKind,
    /// Bytes (files only; 0 otherwise).
    pub size: u64,
    /// Bytes of the file that hold data (its allocated blocks, at most its
    /// size): the room a receiver must have for it, holes needing none.
    pub data: u64,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    pub mtime_s: i64,
    pub mtime_ns: u32,
    /// Target of a symlink; for a hard link, the path of its file.
    pub link: Option<String>,
    pub owner: Owner,
    /// Extended attributes (`send -X`, `-A`): name and value.
    pub xattrs: Vec<(String, Vec<u8>)>,
    /// A file still being written (`send --follow`, protocol 7): `size` is
    /// where it stood, full blocks beyond it may come, and its end is told
    /// apart (`FileEnd`). On the wire, bit 7 of the kind byte.
    pub growing: bool,
    /// Only one piece of the file moves in this session (`send --shard`):
    /// the file is whole once every piece is, whichever sessions brought
    /// them. On the wire, bit 6 of the kind byte and the piece after it.
    pub piece: Option<Piece>,
    /// A device node's number (`st_rdev`); 0 for every other kind. On the
    /// wire after a device's kind byte.
    pub rdev: u64,
}

impl Entry {
    /// Bytes `[start, end)` of the file this session moves: all of it, or
    /// its piece's span.
    pub fn span(&self, block: u64) -> (u64, u64) {
        match self.piece {
            Some(p) => piece_span(self.size, block, p),
            None => (0, self.size),
        }
    }

    /// Bytes of the file this session moves (see [`Entry::span`]).
    pub fn span_len(&self, block: u64) -> u64 {
        let (a, b) = self.span(block);
        b - a
    }

    /// Bytes of data (not holes) this session moves of the file: its data
    /// bytes, or a piece's share of them.
    pub fn span_data(&self, block: u64) -> u64 {
        let data = self.data.min(self.size);
        match self.piece {
            None => data,
            Some(_) => {
                let share = u128::from(data) * u128::from(self.span_len(block));
                (share / u128::from(self.size.max(1))) as u64
            }
        }
    }

    /// Bytes of text the entry holds (paths, names, attributes): what a
    /// receiver bounds a manifest by.
    pub fn text_len(&self) -> usize {
        let xattrs: usize = self.xattrs.iter().map(|(n, v)| n.len() + v.len()).sum();
        self.path.len()
            + self.link.as_ref().map_or(0, String::len)
            + self.owner.user.len()
            + self.owner.group.len()
            + xattrs
    }
}

/// Why a path is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathError {
    Empty,
    Absolute,
    DotDot,
    /// `.` or an empty component (`a//b`, trailing `/`).
    NotNormal,
    Nul,
    TooLong {
        len: usize,
    },
    ComponentTooLong {
        len: usize,
    },
    /// A symlink whose target is absolute or climbs out of the root.
    LinkEscapes,
    /// A symlink with an empty target, or one with a NUL byte or too long.
    BadLinkTarget,
    /// A name urmove keeps for itself (`*.urmove.part`, `*.urmove.journal`).
    Reserved,
}

impl std::fmt::Display for PathError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PathError::Empty => write!(f, "empty path"),
            PathError::Absolute => write!(f, "absolute path"),
            PathError::DotDot => write!(f, "path with '..'"),
            PathError::NotNormal => write!(f, "path with '.' or an empty component"),
            PathError::Nul => write!(f, "path with a NUL byte"),
            PathError::TooLong { len } => write!(f, "path of {len} bytes (limit {PATH_LEN_MAX})"),
            PathError::ComponentTooLong { len } => {
                write!(
                    f,
                    "path component of {len} bytes (limit {COMPONENT_LEN_MAX})"
                )
            }
            PathError::LinkEscapes => write!(f, "symlink target outside the root"),
            PathError::BadLinkTarget => write!(f, "symlink with an empty or invalid target"),
            PathError::Reserved => write!(
                f,
                "a name ending in .urmove.part, .urmove.journal or .urmove.piece is reserved for urmove's own files"
            ),
        }
    }
}

impl std::error::Error for PathError {}

/// Check a relative wire path: no absolute paths, `..`, `.`, empty
/// components, NUL bytes, reserved names, or lengths past the limits.
pub fn check_path(path: &str) -> Result<(), PathError> {
    if path.is_empty() {
        return Err(PathError::Empty);
    }
    let len = super::names::byte_len(path);
    if len > PATH_LEN_MAX {
        return Err(PathError::TooLong { len });
    }
    if path.starts_with('/') {
        return Err(PathError::Absolute);
    }
    if path.contains('\0') {
        return Err(PathError::Nul);
    }
    for c in path.split('/') {
        match c {
            ".." => return Err(PathError::DotDot),
            "" | "." => return Err(PathError::NotNormal),
            c if super::names::byte_len(c) > COMPONENT_LEN_MAX => {
                return Err(PathError::ComponentTooLong {
                    len: super::names::byte_len(c),
                })
            }
            c if is_reserved(c) => return Err(PathError::Reserved),
            _ => {}
        }
    }
    Ok(())
}

/// Whether a symlink at `link_path` pointing to `target` stays beneath the
/// root when resolved lexically from the link's directory.
pub fn link_stays_beneath(link_path: &str, target: &str) -> bool {
    if target.is_empty()
        || target.starts_with('/')
        || target.contains('\0')
        || super::names::byte_len(target) > PATH_LEN_MAX
    {
        return false;
    }
    // Depth of the link's directory below the root.
    // `..` may only lead the target: after a name it would climb through
    // that name, which may itself be a link (`s -> .`, then `l -> ../s/..`
    // climbs out of the root).
    let mut depth = link_path.split('/').count() as i64 - 1;
    let mut named = false;
    for c in target.split('/') {
        match c {
            "" | "." => {}
            ".." if named => return false,
            ".." => {
                depth -= 1;
                if depth < 0 {
                    return false;
                }
            }
            _ => {
                named = true;
                depth += 1;
            }
        }
    }
    true
}

/// Validate an entry as a receiver must before acting on it: its path,
/// and a symlink's target text. Whether a link's target stays beneath the
/// root is the receiver's policy ([`link_stays_beneath`] on the link's
/// root-relative path): links are data, and the receiver never follows one
/// when it writes.
pub fn check_entry(e: &Entry) -> Result<(), PathError> {
    check_path(&e.path)?;
    if e.kind == EntryKind::HardLink {
        return check_path(e.link.as_deref().unwrap_or("")).map_err(|_| PathError::BadLinkTarget);
    }
    if e.kind == EntryKind::Symlink {
        let ok = e.link.as_deref().is_some_and(|t| {
            !t.is_empty() && !t.contains('\0') && super::names::byte_len(t) <= PATH_LEN_MAX
        });
        if !ok {
            return Err(PathError::BadLinkTarget);
        }
    }
    Ok(())
}

/// Bit of the kind byte that marks a growing file.
const GROWING: u8 = 0x80;
/// Bit of the kind byte that marks a piece of a file (index, count follow).
const PIECE: u8 = 0x40;

pub fn encode_entry(w: &mut Writer, e: &Entry) {
    let file = e.kind == EntryKind::File;
    let growing = if e.growing && file { GROWING } else { 0 };
    let piece = e.piece.filter(|_| file && !e.growing);
    w.u8(e.kind as u8 | growing | piece.map_or(0, |_| PIECE));
    if let Some(p) = piece {
        w.u32(p.index).u32(p.count);
    }
    if e.kind.is_device() {
        w.u64(e.rdev);
    }
    w.u32(e.mode)
        .i64(e.mtime_s)
        .u32(e.mtime_ns)
        .u64(if e.kind == EntryKind::File { e.size } else { 0 })
        .u64(if e.kind == EntryKind::File {
            e.data.min(e.size)
        } else {
            0
        })
        .name16(&e.path)
        .name16(e.link.as_deref().unwrap_or(""))
        .u32(e.owner.uid)
        .u32(e.owner.gid)
        .str16(&e.owner.user)
        .str16(&e.owner.group);
    let xattrs = &e.xattrs[..e.xattrs.len().min(XATTRS_MAX)];
    w.u16(xattrs.len() as u16);
    for (name, value) in xattrs {
        w.str16(name).bytes16(value);
    }
}

/// Decode one entry. Paths are length-checked here and must still pass
/// [`check_entry`] before use.
pub fn decode_entry(r: &mut Reader<'_>) -> Result<Entry, DecodeError> {
    let byte = r.u8()?;
    let growing = byte == EntryKind::File as u8 | GROWING;
    let piece = match byte == EntryKind::File as u8 | PIECE {
        true => Some(decode_piece(r)?),
        false => None,
    };
    let Some(kind) = EntryKind::from_byte(byte & !(GROWING | PIECE)) else {
        return Err(DecodeError::Invalid {
            what: "entry kind",
            value: u64::from(byte),
        });
    };
    let rdev = match kind.is_device() {
        true => r.u64()?,
        false => 0,
    };
    if (byte & GROWING != 0 && !growing) || (byte & PIECE != 0 && piece.is_none()) {
        return Err(DecodeError::Invalid {
            what: "entry kind",
            value: u64::from(byte),
        });
    }
    let mode = r.u32()?;
    if mode > 0o7777 {
        return Err(DecodeError::Invalid {
            what: "mode",
            value: u64::from(mode),
        });
    }
    let mtime_s = r.i64()?;
    let mtime_ns = r.u32()?;
    if mtime_ns >= 1_000_000_000 {
        return Err(DecodeError::Invalid {
            what: "mtime nanoseconds",
            value: u64::from(mtime_ns),
        });
    }
    let size = r.u64()?;
    if kind != EntryKind::File && size != 0 {
        return Err(DecodeError::Invalid {
            what: "size of an entry that is no file",
            value: size,
        });
    }
    let data = r.u64()?;
    if data > size {
        return Err(DecodeError::Invalid {
            what: "data bytes above the size",
            value: data,
        });
    }
    let path = r.name16("path", PATH_LEN_MAX)?;
    let link = r.name16("symlink target", PATH_LEN_MAX)?;
    let linked = matches!(kind, EntryKind::Symlink | EntryKind::HardLink);
    if !linked && !link.is_empty() {
        return Err(DecodeError::Invalid {
            what: "symlink target of an entry that is no link",
            value: link.len() as u64,
        });
    }
    let link = linked.then_some(link);
    let owner = Owner {
        uid: r.u32()?,
        gid: r.u32()?,
        user: r.str16("user name", OWNER_NAME_MAX)?.to_string(),
        group: r.str16("group name", OWNER_NAME_MAX)?.to_string(),
    };
    Ok(Entry {
        path,
        kind,
        size,
        data,
        mode,
        mtime_s,
        mtime_ns,
        link,
        owner,
        xattrs: decode_xattrs(r)?,
        growing,
        piece,
        rdev,
    })
}

/// A piece's index and count: at least two pieces, at most
/// [`PIECES_MAX`], the index one of them.
fn decode_piece(r: &mut Reader<'_>) -> Result<Piece, DecodeError> {
    let (index, count) = (r.u32()?, r.u32()?);
    if !(2..=PIECES_MAX).contains(&count) || index >= count {
        return Err(DecodeError::Invalid {
            what: "piece of a file",
            value: (u64::from(index) << 32) | u64::from(count),
        });
    }
    Ok(Piece { index, count })
}

fn decode_xattrs(r: &mut Reader<'_>) -> Result<Vec<(String, Vec<u8>)>, DecodeError> {
    let count = r.count16("extended attributes", XATTRS_MAX)?;
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let name = r.str16("attribute name", XATTR_NAME_MAX)?.to_string();
        let value = r.bytes16("attribute value", XATTR_VALUE_MAX)?.to_vec();
        out.push((name, value));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_targets_only_where_they_belong() {
        let enc_data = |kind: EntryKind, (size, data): (u64, u64), link: Option<&str>| {
            let mut w = Writer::default();
            w.u8(kind as u8)
                .u32(0o755)
                .i64(0)
                .u32(0)
                .u64(size)
                .u64(data)
                .str16("d")
                .str16(link.unwrap_or(""))
                .u32(0)
                .u32(0)
                .str16("")
                .str16("")
                .u16(0);
            w.buf
        };
        let enc = |kind, size, link| enc_data(kind, (size, 0), link);
        let dec = |b: Vec<u8>| decode_entry(&mut Reader::new(&b));
        assert!(dec(enc(EntryKind::Dir, 0, None)).is_ok());
        assert!(dec(enc(EntryKind::Dir, 5, None)).is_err());
        assert!(dec(enc(EntryKind::Symlink, 5, Some("x"))).is_err());
        assert!(dec(enc(EntryKind::File, 0, Some("x"))).is_err());
        assert!(dec(enc(EntryKind::Symlink, 0, Some("x"))).is_ok());
        // Data bytes: at most the size, and none but in a file.
        assert_eq!(
            dec(enc_data(EntryKind::File, (9, 4), None)).unwrap().data,
            4
        );
        assert!(dec(enc_data(EntryKind::File, (9, 10), None)).is_err());
        assert!(dec(enc_data(EntryKind::Dir, (0, 1), None)).is_err());
    }

    #[test]
    fn owners_attributes_hard_links_and_byte_names_round_trip() {
        let e = Entry {
            path: crate::protocol::names::from_bytes(b"run/r\xe9sum\xe9"),
            kind: EntryKind::HardLink,
            link: Some("run/first".into()),
            owner: Owner {
                uid: 1234,
                gid: 99,
                user: "alma".into(),
                group: "obs".into(),
            },
            xattrs: vec![("user.a".into(), vec![0, 1, 255])],
            ..Default::default()
        };
        let mut w = Writer::default();
        encode_entry(&mut w, &e);
        assert_eq!(decode_entry(&mut Reader::new(&w.buf)), Ok(e.clone()));
        assert_eq!(check_entry(&e), Ok(()));
        let up = Entry {
            link: Some("../etc/passwd".into()),
            ..e.clone()
        };
        assert_eq!(check_entry(&up), Err(PathError::BadLinkTarget));
        // Too many attributes are refused, not truncated silently on decode.
        let mut w = Writer::default();
        encode_entry(&mut w, &Entry::default());
        let n = w.buf.len();
        w.buf[n - 2..].copy_from_slice(&((XATTRS_MAX + 1) as u16).to_le_bytes());
        assert!(decode_entry(&mut Reader::new(&w.buf)).is_err());
        assert!(is_carried_xattr("user.x") && is_carried_xattr("system.posix_acl_access"));
        assert!(!is_carried_xattr("user.urmove") && !is_carried_xattr("security.capability"));
        assert!(!is_carried_xattr("trusted.x") && !is_carried_xattr("user.urmove.part"));
    }

    #[test]
    fn only_a_file_may_be_growing() {
        let e = Entry {
            path: "rec/scan.vdif".into(),
            size: 4 << 20,
            growing: true,
            ..Entry::default()
        };
        let mut w = Writer::default();
        encode_entry(&mut w, &e);
        assert_eq!(w.buf[0], 0x80, "bit 7 of the kind byte");
        assert_eq!(decode_entry(&mut Reader::new(&w.buf)).unwrap(), e);
        // A growing directory (or another kind) is no entry.
        let mut bad = w.buf.clone();
        bad[0] = 0x81;
        assert!(decode_entry(&mut Reader::new(&bad)).is_err());
        // Encoding a directory marked growing drops the mark.
        let dir = Entry {
            kind: EntryKind::Dir,
            size: 0,
            ..e
        };
        let mut w = Writer::default();
        encode_entry(&mut w, &dir);
        assert_eq!(w.buf[0], 1);
    }

    #[test]
    fn path_rules() {
        assert_eq!(check_path("run42/a/b.dat"), Ok(()));
        assert_eq!(check_path(""), Err(PathError::Empty));
        assert_eq!(check_path("/etc/passwd"), Err(PathError::Absolute));
        assert_eq!(check_path("a/../../etc"), Err(PathError::DotDot));
        assert_eq!(check_path(".."), Err(PathError::DotDot));
        assert_eq!(check_path("a//b"), Err(PathError::NotNormal));
        assert_eq!(check_path("a/./b"), Err(PathError::NotNormal));
        assert_eq!(check_path("a/"), Err(PathError::NotNormal));
        assert_eq!(check_path("a\0b"), Err(PathError::Nul));
        assert!(matches!(
            check_path(&"x".repeat(300)),
            Err(PathError::ComponentTooLong { .. })
        ));
        assert!(matches!(
            check_path(&"x/".repeat(3000)),
            Err(PathError::TooLong { .. })
        ));
        for reserved in [
            "a.urmove.part",
            "d/a.urmove.journal",
            "d.urmove.part/x",
            "a.urmove.journal.tmp",
        ] {
            assert_eq!(check_path(reserved), Err(PathError::Reserved), "{reserved}");
        }
        assert_eq!(check_path("a.urmove.partial"), Ok(()));
        assert_eq!(check_path("urmove.part"), Ok(()));
    }

    #[test]
    fn symlinks_must_stay_beneath() {
        assert!(link_stays_beneath("a/b/link", "../c"));
        assert!(link_stays_beneath("a/link", "../c"));
        assert!(!link_stays_beneath("link", "../c"));
        assert!(!link_stays_beneath("a/link", "../../etc/passwd"));
        assert!(!link_stays_beneath("a/link", "/etc/passwd"));
        assert!(
            !link_stays_beneath("a/link", "x/../y"),
            "no .. after a name"
        );
        assert!(
            !link_stays_beneath("d/l", "../s/.."),
            "climbing through a linked name"
        );
        assert!(!link_stays_beneath("a/link", "x/../../../y"));
        assert!(!link_stays_beneath("a/link", ""));
    }

    #[test]
    fn entries_round_trip_and_bad_fields_are_refused() {
        let e = Entry {
            path: "d/f".into(),
            kind: EntryKind::Symlink,
            size: 0,
            data: 0,
            mode: 0o777,
            mtime_s: -5,
            mtime_ns: 7,
            link: Some("../g".into()),
            ..Default::default()
        };
        let mut w = Writer::default();
        encode_entry(&mut w, &e);
        let mut r = Reader::new(&w.buf);
        assert_eq!(decode_entry(&mut r), Ok(e.clone()));
        assert!(check_entry(&e).is_ok());

        let mut bad = w.buf.clone();
        bad[0] = 9;
        assert!(matches!(
            decode_entry(&mut Reader::new(&bad)),
            Err(DecodeError::Invalid { .. })
        ));
        let mut bad = w.buf.clone();
        bad[1..5].copy_from_slice(&0o170000u32.to_le_bytes());
        assert!(matches!(
            decode_entry(&mut Reader::new(&bad)),
            Err(DecodeError::Invalid { .. })
        ));
        for cut in 0..w.buf.len() {
            assert!(
                decode_entry(&mut Reader::new(&w.buf[..cut])).is_err(),
                "cut at {cut}"
            );
        }
    }
}
