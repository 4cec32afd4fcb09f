//! A pull from an endpoint that is not urmove: its size and adler32 from a
//! HEAD, then parallel ranged GETs (the client's kept-alive connections)
//! written with O_DIRECT at their offsets into an unnamed file, each chunk's
//! adler32 and crc32c combined into the whole file's without a second read;
//! named only once every byte is written and synced and its checksum agrees
//! with the source's.

use std::collections::HashMap;
use std::fs::File;
use std::net::ToSocketAddrs;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

use crate::datapath::beneath::FileId;
use crate::datapath::direct::padded;
use crate::datapath::{Arena, Lease};
use crate::protocol::checksum::{self, Algorithm, Piece, Pieces, Value};

use super::{remote_failed, Copy, CopyError, Progress};
use crate::http::path::parent_of;
use crate::http::server::Front;
use crate::http::sums::Sums;

/// Largest chunk one ranged GET asks for.
const CHUNK_MAX: u64 = 16 << 20;
/// The chunks in flight of one copy take at most this much memory.
const BUFFERS_BYTES_MAX: u64 = 256 << 20;

/// The source as its HEAD describes it.
pub struct Source {
    pub size: u64,
    /// Its adler32, where it gave one.
    pub adler32: Option<Value>,
    /// It is urmove (its `X-Urmove-Tpc` header).
    pub urmove: bool,
}

/// Pull `copy.remote` (described by `source`) into `copy.rel`.
pub fn run(
    front: &Front,
    copy: &Copy,
    progress: &Progress,
    source: &Source,
) -> Result<(), CopyError> {
    let (size, theirs) = (source.size, source.adler32);
    if copy.require_checksum && theirs.is_none() {
        return Err(
            "RequireChecksumVerification: the source gives no adler32 (Want-Digest)".into(),
        );
    }
    let chunk = (BUFFERS_BYTES_MAX / copy.streams as u64).clamp(1 << 20, CHUNK_MAX);
    // A small file takes one buffer of its own size, not a stream's chunks.
    let chunk = chunk.min((padded(size.max(1) as usize)) as u64);
    let streams = copy.streams.min(size.div_ceil(chunk).max(1) as usize);
    let landing = Landing::begin(front, &copy.rel, size, chunk, streams)?;
    let sink = |offset: u64, data: &[u8]| {
        if progress.cancel.load(Ordering::Relaxed) {
            return Err(std::io::Error::other("the client of the COPY went away"));
        }
        landing.put(offset, data, progress)
    };
    front
        .client
        .get_ranges(
            &copy.remote,
            size,
            copy.streams,
            chunk,
            &copy.forward,
            &sink,
        )
        .map_err(|e| e.to_string())?;
    let sums = landing.finish()?;
    if let Some(Value::Adler32(a)) = theirs {
        if a != sums.adler32 {
            return Err(format!(
                "checksum mismatch: the source says adler32 {a:08x}, the bytes received have {:08x}: nothing was written",
                sums.adler32
            )
            .into());
        }
    }
    let digest = landing.digest();
    crate::http::sums::keep(front, &landing.file, &copy.rel, digest, &sums);
    let named = crate::http::store::name_file(
        &front.root,
        &landing.file,
        landing.id,
        &copy.rel,
        copy.replaces,
    )
    .map_err(|e| format!("/{}: naming the file: {e:?}", copy.rel));
    named?;
    crate::http::sums::named(front, &landing.file, &copy.rel, digest);
    Ok(())
}

/// The source's size, whether it is urmove, and its adler32 (which a
/// source other than urmove may read the whole file for).
pub fn look(front: &Front, copy: &Copy, progress: &Progress) -> Result<Source, CopyError> {
    let mut headers = copy.forward.clone();
    headers.push(("Want-Digest".into(), "adler32".into()));
    // A urmove source then reads no large file for its checksum (the copy
    // of one runs on urmove's own protocol, verified block by block).
    headers.push((super::native::HEADER.into(), "probe".into()));
    let head = front.client.head(&copy.remote, &headers)?;
    if let Ok(mut addrs) = head.url.authority().to_socket_addrs() {
        if let Some(a) = addrs.next() {
            progress.connected(format!("tcp:{a}"));
        }
    }
    if !(200..300).contains(&head.status) {
        return Err(remote_failed(head.status, &head.reason));
    }
    let size = head
        .headers
        .get("content-length")
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or_else(|| format!("{}: no Content-Length in its HEAD", head.url.redacted()))?;
    let adler32 = head
        .headers
        .get_all("digest")
        .flat_map(checksum::parse_digest)
        .find(|v| v.algorithm() == Algorithm::Adler32);
    let urmove = head.headers.get(super::native::HEADER).is_some();
    Ok(Source {
        size,
        adler32,
        urmove,
    })
}

/// An unnamed file taking chunks at their offsets, from several threads.
struct Landing {
    file: File,
    id: FileId,
    direct: bool,
    size: u64,
    chunk: u64,
    state: Mutex<State>,
}

struct State {
    arena: Arena,
    /// Chunks being filled: their buffer and the bytes in it.
    open: HashMap<u64, (Lease, u64)>,
    pieces: Pieces,
    /// urmove's digest of the chunks written (a sum: any order).
    digest: u64,
    failed: Option<String>,
}

impl Landing {
    fn begin(
        front: &Front,
        rel: &str,
        size: u64,
        chunk: u64,
        streams: usize,
    ) -> Result<Landing, CopyError> {
        let root = &front.root;
        let parent = parent_of(rel);
        root.mkdir_all(parent, 0o755)
            .map_err(|e| format!("/{parent}: {e}"))?;
        let (file, direct) = root
            .open_unnamed(parent, 0o644, front.config.direct)
            .map_err(|e| format!("/{rel}: {e}"))?
            .ok_or("this file system makes no unnamed files (O_TMPFILE)")?;
        let id = FileId::of(&file).map_err(|e| e.to_string())?;
        let arena = Arena::new(chunk as usize, streams + 1).map_err(|e| e.to_string())?;
        Ok(Landing {
            file,
            id,
            direct,
            size,
            chunk,
            state: Mutex::new(State {
                arena,
                open: HashMap::new(),
                pieces: Pieces::new(size),
                digest: 0,
                failed: None,
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `data` at `offset`; a chunk once whole is written and counted.
    fn put(&self, offset: u64, data: &[u8], progress: &Progress) -> std::io::Result<()> {
        let index = offset / self.chunk;
        let start = index * self.chunk;
        let len = self.chunk.min(self.size - start);
        let within = (offset - start) as usize;
        if within + data.len() > len as usize {
            return Err(std::io::Error::other("a range past its chunk"));
        }
        let whole = {
            let mut st = self.lock();
            if !st.open.contains_key(&index) {
                let lease = st
                    .arena
                    .take()
                    .ok_or_else(|| std::io::Error::other("more chunks in flight than buffers"))?;
                st.open.insert(index, (lease, 0));
            }
            let (lease, filled) = st.open.get_mut(&index).expect("just made");
            lease.as_mut_slice()[within..within + data.len()].copy_from_slice(data);
            *filled += data.len() as u64;
            if *filled < len {
                return Ok(());
            }
            st.open.remove(&index).expect("open").0
        };
        self.write_chunk(whole, start, len, progress)
    }

    /// A whole chunk written at `start`, its piece of the checksums taken.
    fn write_chunk(
        &self,
        mut lease: Lease,
        start: u64,
        len: u64,
        progress: &Progress,
    ) -> std::io::Result<()> {
        let n = len as usize;
        let piece = Piece::of(start, &lease.as_slice()[..n]);
        let terms = crate::protocol::frame::content_terms(start, &lease.as_slice()[..n]);
        let out = if self.direct {
            let end = padded(n);
            lease.as_mut_slice()[n..end].fill(0);
            end
        } else {
            n
        };
        let wrote = self.file.write_all_at(&lease.as_slice()[..out], start);
        let mut st = self.lock();
        st.arena.give_back(lease);
        wrote?;
        if let Err(e) = st.pieces.add(piece) {
            st.failed.get_or_insert(e.to_string());
        }
        st.digest = crate::protocol::frame::digest_add(st.digest, terms);
        progress.add(len);
        Ok(())
    }

    /// urmove's digest of the file (once finished).
    fn digest(&self) -> u64 {
        self.lock().digest
    }

    /// Cut to size and synced: the whole file's checksums, once every
    /// byte arrived.
    fn finish(&self) -> Result<Sums, CopyError> {
        let st = self.lock();
        if let Some(f) = &st.failed {
            return Err(f.clone().into());
        }
        let (adler32, crc32c) = st.pieces.whole().map_err(|e| e.to_string())?;
        drop(st);
        self.file.set_len(self.size).map_err(|e| e.to_string())?;
        self.file.sync_all().map_err(|e| e.to_string())?;
        Ok(Sums {
            adler32,
            crc32c,
            md5: None,
        })
    }
}
