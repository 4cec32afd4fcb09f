//! What the HTTP front writes beneath the root: PUT (a file written with
//! O_DIRECT into an unnamed inode, its checksums computed as the bytes
//! arrive, synced, and named only once complete and verified), DELETE and
//! MKCOL. The same `Upload` takes a third-party copy's pulled bytes.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;

use crate::datapath::beneath::FileId;
use crate::datapath::direct::{padded, TRANSFER_ALIGN};
use crate::datapath::Arena;

use super::auth::Op;
use super::dav::{Answer, Request};
use super::path::parent_of;
use super::server::Conn;
use super::sums::{Running, Sums};
use super::wire::{Body, BodyKind};

/// Bytes gathered before each O_DIRECT write.
const WRITE_CHUNK: usize = 8 << 20;

/// Whether `rel` names something now, and whether a directory.
pub fn existing(req: &Request, rel: &str) -> Option<bool> {
    req.front
        .root
        .symlink_metadata(rel)
        .ok()
        .map(|m| m.is_dir())
}

/// What writing `rel` needs: Create for a new name, Modify to replace one
/// (refused by `Overwrite: F`), and never a directory.
pub fn may_write(req: &mut Request, rel: &str) -> Result<bool, Answer> {
    if rel.is_empty() {
        return Err(Answer::text(405, "/: the root is a directory"));
    }
    // Every write needs create (modify includes it), checked before what
    // is at the path shows in the answer.
    req.allow(Op::Create, rel)?;
    match existing(req, rel) {
        Some(true) => Err(Answer::text(409, &format!("/{rel}: a directory is there"))),
        Some(false) => {
            if req
                .head
                .header("overwrite")
                .is_some_and(|o| o.eq_ignore_ascii_case("F"))
            {
                return Err(Answer::text(
                    412,
                    &format!("/{rel}: exists, and Overwrite: F"),
                ));
            }
            req.allow(Op::Modify, rel)?;
            Ok(true)
        }
        None => {
            req.allow(Op::Create, rel)?;
            Ok(false)
        }
    }
}

/// PUT: the body into a new file at the path.
pub fn put(req: &mut Request, conn: &mut Conn, kind: BodyKind, keep: &mut bool) -> Answer {
    let rel = req.rel.clone();
    let replaces = match may_write(req, &rel) {
        Ok(r) => r,
        Err(a) => {
            // The body stays unread: a small one is drained, else the
            // connection closes after the answer.
            *keep = *keep && Body::new(conn, kind).drain(super::server::DRAIN_MAX);
            return a;
        }
    };
    let mut upload = match Upload::begin(req, &rel, kind) {
        Ok(u) => u,
        Err(a) => {
            *keep = false;
            return a;
        }
    };
    if req
        .head
        .header("expect")
        .is_some_and(|e| e.eq_ignore_ascii_case("100-continue"))
    {
        let w = conn.get_mut();
        if w.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            .and_then(|()| w.flush())
            .is_err()
        {
            *keep = false;
            return Answer::text(400, "the client went away");
        }
    }
    let mut body = Body::new(conn, kind);
    if let Err(e) = upload.take_from(&mut body) {
        *keep = false;
        return Answer::text(400, &format!("/{rel}: the body did not arrive whole: {e}"));
    }
    let (sums, digest) = match upload.finish() {
        Ok(s) => s,
        Err(a) => return a,
    };
    req.bytes_in = upload.size;
    if let Err(a) = super::sums::verify_sent(req.head, &sums) {
        return a; // the unnamed file goes with the upload: nothing named
    }
    match upload.commit(req, &rel, &sums, digest, replaces) {
        Ok(()) => Answer::new(if replaces { 204 } else { 201 }),
        Err(a) => a,
    }
}

/// A file being written: unnamed until committed.
pub struct Upload {
    file: File,
    id: FileId,
    direct: bool,
    arena: Arena,
    filled: usize,
    /// Bytes taken so far (the file's size once finished).
    pub size: u64,
    running: Running,
}

impl Upload {
    /// A new unnamed file in the directory `rel` will be named in (made
    /// with its missing parents).
    pub fn begin(req: &Request, rel: &str, kind: BodyKind) -> Result<Upload, Answer> {
        let root = &req.front.root;
        let parent = parent_of(rel);
        root.mkdir_all(parent, 0o755)
            .map_err(|e| super::dav::not_found_or(parent, &e))?;
        let made = root
            .open_unnamed(parent, 0o644, req.front.config.direct)
            .map_err(|e| super::dav::not_found_or(rel, &e))?;
        let Some((file, direct)) = made else {
            return Err(Answer::text(
                501,
                "this file system makes no unnamed files (O_TMPFILE): the HTTP front cannot write here",
            ));
        };
        let id = FileId::of(&file).map_err(|e| Answer::text(500, &format!("/{rel}: {e}")))?;
        // A body of known length takes a buffer of its own size, at most WRITE_CHUNK.
        let chunk = match kind {
            BodyKind::Length(n) => padded((n.max(1)).min(WRITE_CHUNK as u64) as usize),
            BodyKind::Chunked => WRITE_CHUNK,
        };
        let arena =
            Arena::new(chunk, 1).map_err(|e| Answer::text(500, &format!("a write buffer: {e}")))?;
        Ok(Upload {
            file,
            id,
            direct,
            arena,
            filled: 0,
            size: 0,
            running: Running::new(super::sums::wants_md5(req.head)),
        })
    }

    /// Every byte of `r`, written as it comes.
    pub fn take_from(&mut self, r: &mut impl Read) -> std::io::Result<()> {
        loop {
            let mut lease = self.arena.take().expect("the upload's one buffer is free");
            let buf = &mut lease.as_mut_slice()[self.filled..];
            let n = match r.read(buf) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => 0,
                Err(e) => {
                    self.arena.give_back(lease);
                    return Err(e);
                }
            };
            self.filled += n;
            let full = self.filled == self.arena.buf_size();
            let r = if full { self.flush(&lease) } else { Ok(()) };
            self.arena.give_back(lease);
            r?;
            if n == 0 && !full {
                return Ok(());
            }
        }
    }

    /// The buffer written at the file's end so far (padded to the
    /// alignment when it is the last, partial one).
    fn flush(&mut self, lease: &crate::datapath::Lease) -> std::io::Result<()> {
        if self.filled == 0 {
            return Ok(());
        }
        let data = &lease.as_slice()[..self.filled];
        self.running.update(data);
        let len = if self.direct {
            padded(self.filled)
        } else {
            self.filled
        };
        let offset = self.size;
        self.size += self.filled as u64;
        self.filled = 0;
        // A padded tail's extra bytes are cut off by `finish`.
        self.file.write_all_at(&lease.as_slice()[..len], offset)
    }

    /// The last bytes written, the file cut to its size and synced: its
    /// checksums.
    pub fn finish(&mut self) -> Result<(Sums, u64), Answer> {
        let io = |what: &str, e: std::io::Error| Answer::text(500, &format!("{what}: {e}"));
        let lease = self.arena.take().expect("the upload's one buffer is free");
        // The tail's padding must be zeros on disk until the cut.
        let tail = self.filled;
        let mut lease = lease;
        if self.direct && !tail.is_multiple_of(TRANSFER_ALIGN) {
            let end = padded(tail);
            lease.as_mut_slice()[tail..end].fill(0);
        }
        let r = self.flush(&lease);
        self.arena.give_back(lease);
        r.map_err(|e| io("writing", e))?;
        self.file
            .set_len(self.size)
            .map_err(|e| io("cutting to size", e))?;
        self.file.sync_all().map_err(|e| io("syncing", e))?;
        Ok(self.running.finish())
    }

    /// Named at `rel` (replacing what is there when `replaces`), its
    /// checksums kept with it.
    pub fn commit(
        &self,
        req: &Request,
        rel: &str,
        sums: &Sums,
        digest: u64,
        replaces: bool,
    ) -> Result<(), Answer> {
        super::sums::keep(req.front, &self.file, rel, digest, sums);
        name_file(&req.front.root, &self.file, self.id, rel, replaces).map_err(|e| match e {
            Naming::Appeared => Answer::text(412, &format!("/{rel}: appeared meanwhile")),
            Naming::Failed(e) => Answer::text(500, &format!("/{rel}: naming the file: {e}")),
        })?;
        super::sums::named(req.front, &self.file, rel, digest);
        Ok(())
    }
}

/// Why a finished file did not get its name.
#[derive(Debug)]
pub enum Naming {
    /// Something was made at the name since the check, and this writer
    /// may not replace it.
    Appeared,
    Failed(std::io::Error),
}

/// Give the unnamed, synced `file` (identity `id`) the name `rel`,
/// replacing what is there only when `replaces`: linked at a name of its
/// own beside it and renamed from there (only while that name holds it).
pub fn name_file(
    root: &crate::datapath::beneath::Root,
    file: &File,
    id: FileId,
    rel: &str,
    replaces: bool,
) -> Result<(), Naming> {
    match root.link_unnamed(file, rel) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && replaces => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Err(Naming::Appeared),
        Err(e) => return Err(Naming::Failed(e)),
    }
    let mut r = [0u8; 8];
    crate::datapath::sys::random_bytes(&mut r).map_err(Naming::Failed)?;
    let tmp = format!(
        "{rel}.{:016x}{}",
        u64::from_le_bytes(r),
        crate::session::PART_SUFFIX
    );
    root.link_unnamed(file, &tmp).map_err(Naming::Failed)?;
    let renamed = root.rename_file(&tmp, rel, id);
    if renamed.is_err() {
        let _ = root.unlink_file(&tmp, id);
    }
    renamed.map_err(Naming::Failed)
}

/// DELETE: a file or link, or an empty directory.
pub fn delete(req: &mut Request) -> Result<Answer, Answer> {
    let rel = req.rel.clone();
    if rel.is_empty() {
        return Err(Answer::text(403, "/: the root is not removed"));
    }
    req.allow(Op::Modify, &rel)?;
    let root = &req.front.root;
    let meta = root
        .symlink_metadata(&rel)
        .map_err(|e| super::dav::not_found_or(&rel, &e))?;
    let removed = if meta.is_dir() {
        root.remove_dir(&rel)
    } else {
        root.unlink(&rel)
    };
    match removed {
        Ok(()) => Ok(Answer::new(204)),
        Err(e) if e.raw_os_error() == Some(libc::ENOTEMPTY) => Err(Answer::text(
            409,
            &format!("/{rel}: the directory is not empty"),
        )),
        Err(e) => Err(super::dav::not_found_or(&rel, &e)),
    }
}

/// MKCOL: a directory whose parent exists.
pub fn mkcol(req: &mut Request) -> Result<Answer, Answer> {
    let rel = req.rel.clone();
    req.allow(Op::CreateDir, &rel)?;
    if existing(req, &rel).is_some() {
        return Err(Answer::text(405, &format!("/{rel}: exists")));
    }
    let parent = parent_of(&rel);
    if !parent.is_empty() && existing(req, parent) != Some(true) {
        return Err(Answer::text(409, &format!("/{parent}: no such directory")));
    }
    match req.front.root.mkdir_all(&rel, 0o755) {
        Ok(()) => Ok(Answer::new(201)),
        Err(e) => Err(super::dav::not_found_or(&rel, &e)),
    }
}
