//! The checksums of the HTTP front's files, as storage systems speak them
//! (`protocol::checksum`): computed while a PUT's or a copy's bytes arrive,
//! checked against what the client sent, kept with the file (`kept`), and
//! answered to `Want-Digest` (RFC 3230) and `Want-Repr-Digest` /
//! `Want-Content-Digest` (RFC 9530).

use std::fs::File;

use crate::protocol::checksum::{self, Algorithm, Hasher, Value};

use super::dav::{Answer, Request};
use super::server::Front;
use super::wire::Head;

pub use crate::protocol::checksum::Sums;

/// Checksums of a file's bytes as they arrive in order, and urmove's own
/// digest of them (what its stamp names: `protocol::frame`).
pub struct Running {
    hasher: Option<Hasher>,
    with_md5: bool,
    digest: u64,
    at: u64,
}

impl Running {
    /// md5 (several times the cost of adler32 and crc32c together) only
    /// when `with_md5`: a client that sent one to check.
    pub fn new(with_md5: bool) -> Running {
        Running {
            hasher: Some(Hasher::new(with_md5)),
            with_md5,
            digest: 0,
            at: 0,
        }
    }

    /// The next bytes (each call but the last a whole number of the
    /// digest's pieces).
    pub fn update(&mut self, data: &[u8]) {
        if let Some(h) = &mut self.hasher {
            h.update(data);
        }
        let terms = crate::protocol::frame::content_terms(self.at, data);
        self.digest = crate::protocol::frame::digest_add(self.digest, terms);
        self.at += data.len() as u64;
    }

    /// The checksums, and urmove's digest.
    pub fn finish(&mut self) -> (Sums, u64) {
        let with_md5 = self.with_md5;
        let h = self.hasher.take().unwrap_or_else(|| Hasher::new(with_md5));
        (h.finish(), self.digest)
    }
}

/// The checksums a request's body came with (RFC 3230 `Digest`,
/// `Content-MD5`, RFC 9530 `Content-Digest` / `Repr-Digest`).
pub fn sent(head: &Head) -> Vec<Value> {
    let mut out = Vec::new();
    for (name, value) in &head.headers {
        let n = name.to_ascii_lowercase();
        match n.as_str() {
            "digest" => out.extend(checksum::parse_digest(value)),
            "content-digest" | "repr-digest" => out.extend(checksum::parse_fields(value)),
            "content-md5" => out.extend(checksum::parse_digest(&format!("md5={}", value.trim()))),
            _ => {}
        }
    }
    out
}

/// Whether a body's checksums need md5 (the client sent one).
pub fn wants_md5(head: &Head) -> bool {
    sent(head).iter().any(|v| v.algorithm() == Algorithm::Md5)
}

/// Whether the checksums the client sent with its body (if any) agree with
/// what arrived: a mismatch is refused (and nothing named).
pub fn verify_sent(head: &Head, sums: &Sums) -> Result<(), Answer> {
    for theirs in sent(head) {
        let ours = sums.value(theirs.algorithm());
        if ours.as_ref().is_some_and(|o| *o != theirs) {
            let ours = ours
                .map(|o| checksum::format_digest(&[o]))
                .unwrap_or_default();
            return Err(Answer::text(
                400,
                &format!(
                    "checksum mismatch: sent {}, received {ours}: nothing was written",
                    checksum::format_digest(&[theirs])
                ),
            ));
        }
    }
    Ok(())
}

/// Keep the checksums with the finished, synced file (before it is named
/// `rel`), then stamp it with urmove's `digest`, as a commit does: the
/// stamp settles now (the front's files are its own user's alone, mode
/// 0644, so nobody else writes them meanwhile) and any later change moves
/// the ctime past it, so neither is trusted after an edit. A failure costs
/// only a later read. Returns the stamp's settling time (0: none).
pub fn keep(front: &Front, file: &File, rel: &str, digest: u64, sums: &Sums) -> i128 {
    use crate::session::sink::stamp::Named;
    let named = Named { file, rel };
    match super::kept::store(named, digest, &front.secret, sums) {
        Ok(()) => stamp_now(front, file, rel, digest),
        Err(_) => 0,
    }
}

/// Stamp the file with urmove's `digest`, settling 20 ms from now (as the
/// sink's commit); the settling time.
fn stamp_now(front: &Front, file: &File, rel: &str, digest: u64) -> i128 {
    use crate::session::sink::stamp::{self, Named};
    let settled = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        + std::time::Duration::from_millis(20);
    let settled = settled.as_nanos() as i128;
    let _ = stamp::stamp(
        Named { file, rel },
        digest,
        &front.secret,
        None,
        Some(settled),
    );
    settled
}

/// After the file took its name (a link changes its ctime): stamped again
/// when the naming came later than the stamp's settling time (a slow file
/// system), so the kept checksums stay trusted.
pub fn named(front: &Front, file: &File, rel: &str, digest: u64) {
    use crate::session::sink::stamp::{stamped_now, Named};
    let held = stamped_now(Named { file, rel }, &front.secret);
    if held.is_some_and(|h| !h.untouched) {
        stamp_now(front, file, rel, digest);
    }
}

/// The checksums of `file` (at `rel`): kept with it, else read from it
/// and kept: under its stamp where urmove wrote it, or (a file put there
/// by other means) with a stamp of its own, when nothing changed it while
/// it was read.
pub fn of_file(front: &Front, file: &File, rel: &str, md5: bool) -> std::io::Result<Sums> {
    use crate::session::sink::stamp::{stamped_now, Named};
    let named = Named { file, rel };
    if let Some(s) = super::kept::load(named, &front.secret).filter(|s| !md5 || s.md5.is_some()) {
        return Ok(s);
    }
    if stamped_now(named, &front.secret).is_some() {
        let sums = super::kept::compute(file, md5)?;
        super::kept::keep_after(named, &front.secret, &sums);
        return Ok(sums);
    }
    read_and_keep(front, file, rel, md5)
}

/// A file's ctime (ns since the epoch).
fn ctime_ns(file: &File) -> std::io::Result<i128> {
    use std::os::unix::fs::MetadataExt;
    let m = file.metadata()?;
    Ok(i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()))
}

/// Read a file urmove did not write for its checksums and digest; keep
/// them, stamped, under a write lease, only when its ctime did not move
/// while it was read (nobody wrote it meanwhile).
fn read_and_keep(front: &Front, file: &File, rel: &str, md5: bool) -> std::io::Result<Sums> {
    use std::os::unix::fs::FileExt;
    let before = ctime_ns(file)?;
    let mut running = Running::new(md5);
    let mut buf = vec![0u8; 4 << 20];
    let mut at = 0u64;
    loop {
        let n = file.read_at(&mut buf, at)?;
        if n == 0 {
            break;
        }
        // Whole buffers but the last: the digest's pieces stay aligned.
        let mut got = n;
        while got < buf.len() {
            match file.read_at(&mut buf[got..], at + got as u64)? {
                0 => break,
                k => got += k,
            }
        }
        running.update(&buf[..got]);
        at += got as u64;
    }
    let (sums, digest) = running.finish();
    // A read lease: writers wait until the stamp's settling time is past
    // (an edit then moves the ctime beyond it), a GET of the file does not.
    if let Some(lease) = crate::session::sink::lease::hold_against_writers(file) {
        let settled = if ctime_ns(file)? == before {
            keep(front, file, rel, digest, &sums)
        } else {
            0
        };
        crate::session::sink::lease::release_after(lease, settled);
    }
    Ok(sums)
}

/// The answers to what a request's `Want-Digest`, `Want-Repr-Digest` or
/// `Want-Content-Digest` asks of `file` (none asked: none given).
pub fn digest_headers(req: &Request, file: &File, head: &Head) -> Vec<(String, String)> {
    let legacy: Vec<Algorithm> = head
        .header("want-digest")
        .map(checksum::parse_want_digest)
        .unwrap_or_default();
    let fields: Vec<Algorithm> = ["want-repr-digest", "want-content-digest"]
        .iter()
        .filter_map(|h| head.header(h))
        .flat_map(checksum::parse_want_fields)
        .collect();
    if legacy.is_empty() && fields.is_empty() {
        return Vec::new();
    }
    let md5 = legacy.iter().chain(&fields).any(|a| *a == Algorithm::Md5);
    // A file opened by its path beneath the root is read from its own
    // descriptor, from the start.
    let Ok(reader) = file.try_clone() else {
        return Vec::new();
    };
    // A urmove peer probing a file it will copy on urmove's own protocol
    // gets only checksums already kept (nothing read for it).
    let probe = head.header(super::tpc::native::HEADER).is_some()
        && file
            .metadata()
            .is_ok_and(|m| m.len() >= super::tpc::native::SIZE_MIN);
    let found = if probe {
        let named = crate::session::sink::stamp::Named {
            file: &reader,
            rel: &req.rel,
        };
        super::kept::load(named, &req.front.secret).ok_or(())
    } else {
        of_file(req.front, &reader, &req.rel, md5).map_err(|_| ())
    };
    let Ok(sums) = found else {
        return Vec::new();
    };
    let values = |asked: &[Algorithm]| -> Vec<Value> {
        asked.iter().filter_map(|a| sums.value(*a)).collect()
    };
    let mut out = Vec::new();
    if !legacy.is_empty() {
        // Every algorithm asked that this side has, best first: gfal reads
        // the one it asked for from the list.
        out.push((
            "Digest".to_string(),
            checksum::format_digest(&values(&legacy)),
        ));
    }
    if !fields.is_empty() {
        out.push((
            "Repr-Digest".to_string(),
            checksum::format_fields(&values(&fields)),
        ));
    }
    out
}
