//! The checksums of the HTTP front's files, as storage systems speak them
//! (`protocol::checksum`): computed while a PUT's or a copy's bytes arrive,
//! checked against what the client sent, kept with the file (`kept`), and
//! answered to `Want-Digest` (RFC 3230) and `Want-Repr-Digest` /
//! `Want-Content-Digest` (RFC 9530).

use std::fs::File;
use std::io::Read;

use crate::protocol::checksum::{self, Algorithm, Hasher, Value};

use super::dav::{Answer, Request};
use super::server::Front;
use super::wire::Head;

pub use crate::protocol::checksum::Sums;

/// Checksums of a file's bytes as they arrive in order.
pub struct Running {
    hasher: Option<Hasher>,
    with_md5: bool,
}

impl Running {
    /// md5 (several times the cost of adler32 and crc32c together) only
    /// when `with_md5`: a client that sent one to check.
    pub fn new(with_md5: bool) -> Running {
        Running {
            hasher: Some(Hasher::new(with_md5)),
            with_md5,
        }
    }

    pub fn update(&mut self, data: &[u8]) {
        if let Some(h) = &mut self.hasher {
            h.update(data);
        }
    }

    pub fn finish(&mut self) -> Sums {
        let h = self
            .hasher
            .take()
            .unwrap_or_else(|| Hasher::new(self.with_md5));
        h.finish()
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

/// Keep the checksums with the file (before it is named), so a later HEAD
/// does not read it again. A failure to keep them costs only a later read.
pub fn keep(front: &Front, file: &File, rel: &str, sums: &Sums) {
    let _ = kept::store(file, rel, &front.secret, sums);
}

/// The checksums of `file`: kept with it, else read from it (and kept).
pub fn of_file(front: &Front, file: &File, rel: &str, md5: bool) -> std::io::Result<Sums> {
    if let Some(s) = kept::load(file, rel, &front.secret) {
        if !md5 || s.md5.is_some() {
            return Ok(s);
        }
    }
    let mut hasher = Hasher::new(md5);
    let mut buf = vec![0u8; 1 << 20];
    let mut r = file;
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    let sums = hasher.finish();
    let _ = kept::store(file, rel, &front.secret, &sums);
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
    let Ok(sums) = of_file(req.front, &reader, &req.rel, md5) else {
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

/// Until `http::kept` lands: nothing kept, every answer read.
mod kept {
    use super::Sums;
    use crate::session::link::secret::Secret;
    use std::fs::File;

    pub fn load(_file: &File, _rel: &str, _secret: &Secret) -> Option<Sums> {
        None
    }

    pub fn store(_file: &File, _rel: &str, _secret: &Secret, _sums: &Sums) -> std::io::Result<()> {
        Ok(())
    }
}
