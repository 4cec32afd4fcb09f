//! A push to an endpoint that is not urmove: one PUT of the file (HTTP has
//! no parallel PUT of one file), over the client's kept-alive connections.
//! Its markers count the bytes handed to the connection: the destination
//! says it wrote them only with its answer, at the end.

use std::io::Read;
use std::net::ToSocketAddrs;
use std::sync::atomic::Ordering;

use super::{remote_failed, Copy, CopyError, Progress};
use crate::http::server::Front;
use crate::protocol::checksum::{self, Algorithm, Value};

/// The file `copy.rel` names, opened to read, and its size (a regular
/// file, or refused).
pub fn open_source(front: &Front, copy: &Copy) -> Result<(std::fs::File, u64), CopyError> {
    let rel = if copy.rel.is_empty() {
        "."
    } else {
        copy.rel.as_str()
    };
    let file = front
        .root
        .open_read(rel)
        .map_err(|e| format!("/{}: {e}", copy.rel))?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err(format!("/{}: not a regular file", copy.rel).into());
    }
    Ok((file, meta.len()))
}

/// Push `file` (`size` bytes, at `copy.rel`) to `copy.remote`.
pub fn run(
    front: &Front,
    copy: &Copy,
    progress: &Progress,
    file: &std::fs::File,
    size: u64,
) -> Result<(), CopyError> {
    if let Ok(mut addrs) = copy.remote.authority().to_socket_addrs() {
        if let Some(a) = addrs.next() {
            progress.connected(format!("tcp:{a}"));
        }
    }
    let mut reader = Counted {
        inner: file,
        progress,
    };
    let response = front
        .client
        .put_reader(&copy.remote, &copy.forward, &mut reader, size)
        .map_err(|e| e.to_string())?;
    if !(200..300).contains(&response.status) {
        let status = response.status;
        let text = response.text(4096).unwrap_or_default();
        return Err(remote_failed(status, text.trim()));
    }
    response.discard(64 << 10);
    if copy.require_checksum {
        verify_remote(front, copy, file)?;
    }
    Ok(())
}

/// The destination's adler32 (HEAD, Want-Digest) against this file's.
fn verify_remote(front: &Front, copy: &Copy, file: &std::fs::File) -> Result<(), CopyError> {
    let ours =
        crate::http::sums::of_file(front, file, &copy.rel, false).map_err(|e| e.to_string())?;
    let mut headers = copy.forward.clone();
    headers.push(("Want-Digest".into(), "adler32".into()));
    let head = front
        .client
        .head(&copy.remote, &headers)
        .map_err(|e| e.to_string())?;
    let theirs = head
        .headers
        .get_all("digest")
        .flat_map(checksum::parse_digest)
        .find(|v| v.algorithm() == Algorithm::Adler32);
    match theirs {
        Some(Value::Adler32(a)) if a == ours.adler32 => Ok(()),
        Some(v) => Err(format!(
            "checksum mismatch: the destination says {}, the source has adler32 {:08x}",
            checksum::format_digest(&[v]),
            ours.adler32
        )
        .into()),
        None => Err("RequireChecksumVerification: the destination gives no adler32".into()),
    }
}

/// A reader counting what it gives, and stopping when the copy is cancelled.
struct Counted<'a> {
    inner: &'a std::fs::File,
    progress: &'a Progress,
}

impl Read for Counted<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.progress.cancel.load(Ordering::Relaxed) {
            return Err(std::io::Error::other("the client of the COPY went away"));
        }
        let n = self.inner.read(buf)?;
        self.progress.add(n as u64);
        Ok(n)
    }
}
