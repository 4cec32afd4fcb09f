//! `urmove recv`: the receiver daemon. Serves many sessions at once, each
//! confined to the root. A session is a control connection (handshake,
//! request, manifest, acks, summary) plus the data streams that prove they
//! belong to it; files arrive as `.urmove.part` and are renamed only when
//! every block arrived exactly once with a good checksum and was synced.

use std::collections::HashMap;
use std::fs::File;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::datapath::beneath::Root;
use crate::datapath::net::{payload, NetReceiver, RecvEvent, HEADROOM};
use crate::datapath::{sys, DirectMode};
use crate::protocol::control::{Direction, ErrorCode, Message, STREAMS_MAX};
use crate::protocol::frame::{digest_add, hole_checksum, FrameHeader};
use crate::protocol::handshake::{
    check_stream_proof, Key, ServerHandshake, SessionId, SessionKeys,
};
use crate::protocol::manifest::{check_entry, check_path, Entry, EntryKind, ENTRIES_MAX};

use super::conn::{fail, recv_any, recv_msg, send_msg};
use super::{SessionError, PART_SUFFIX};

/// How the daemon runs.
#[derive(Debug, Clone)]
pub struct RecvConfig {
    pub listen: SocketAddr,
    pub root: PathBuf,
    pub key: Key,
    pub direct: DirectMode,
    /// A client that says nothing for this long is dropped.
    pub handshake_timeout: Duration,
    /// How long a session waits for its data streams.
    pub stream_wait: Duration,
}

/// Where the daemon's log lines go (stderr, under systemd the journal).
pub type Log = Arc<dyn Fn(&str) + Send + Sync>;

struct Pending {
    keys: SessionKeys,
    streams: u16,
    tx: mpsc::Sender<(u16, TcpStream)>,
}

type Registry = Arc<Mutex<HashMap<SessionId, Pending>>>;

/// Bind, then serve until `stop` is raised. `on_listening` gets the bound
/// address (useful with port 0).
pub fn serve(
    cfg: RecvConfig,
    stop: &AtomicBool,
    log: Log,
    on_listening: &mut dyn FnMut(SocketAddr),
) -> Result<(), SessionError> {
    Root::open(&cfg.root).map_err(|e| SessionError::io("--root", e))?;
    sys::raise_nofile_limit();
    let listener = TcpListener::bind(cfg.listen)
        .map_err(|e| SessionError::io(format!("listening on {}", cfg.listen), e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| SessionError::io("listening", e))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| SessionError::io("listening", e))?;
    log(&format!("listening on {addr}, root {}", cfg.root.display()));
    on_listening(addr);
    let cfg = Arc::new(cfg);
    let registry: Registry = Arc::default();
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((s, peer)) => {
                let (cfg, registry, log) =
                    (Arc::clone(&cfg), Arc::clone(&registry), Arc::clone(&log));
                std::thread::spawn(move || {
                    if let Err(e) = connection(s, peer, &cfg, &registry, &log) {
                        log(&format!("{peer}: {e}"));
                    }
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => log(&format!("accept: {e}")),
        }
    }
    log("stopping: no new sessions; sessions in flight keep their .urmove.part files");
    Ok(())
}

fn connection(
    mut s: TcpStream,
    peer: SocketAddr,
    cfg: &RecvConfig,
    registry: &Registry,
    log: &Log,
) -> Result<(), SessionError> {
    s.set_nonblocking(false)
        .map_err(|e| SessionError::io("socket", e))?;
    s.set_nodelay(true)
        .map_err(|e| SessionError::io("socket", e))?;
    s.set_read_timeout(Some(cfg.handshake_timeout))
        .map_err(|e| SessionError::io("socket", e))?;
    let first = recv_any(&mut s).map_err(|e| fail(&mut s, e))?;
    match first {
        Message::Hello(hello) => {
            let started = Instant::now();
            match control_session(&mut s, hello, cfg, registry) {
                Ok((files, bytes)) => {
                    let secs = started.elapsed().as_secs_f64();
                    log(&format!(
                        "{peer}: session done: {files} files, {bytes} bytes in {secs:.2} s ({:.3} Gb/s)",
                        bytes as f64 * 8.0 / secs.max(1e-9) / 1e9
                    ));
                    Ok(())
                }
                Err(e) => Err(fail(&mut s, e)),
            }
        }
        Message::StreamHello {
            session_id,
            stream_index,
            proof,
        } => {
            let reg = registry.lock().unwrap_or_else(|p| p.into_inner());
            match reg.get(&session_id) {
                Some(p)
                    if stream_index < p.streams
                        && check_stream_proof(&p.keys, stream_index, &proof) =>
                {
                    let _ = p.tx.send((stream_index, s));
                    Ok(())
                }
                _ => {
                    drop(reg);
                    Err(fail(
                        &mut s,
                        SessionError::local(
                            ErrorCode::AuthFailed,
                            "data stream refused: it does not belong to a session",
                        ),
                    ))
                }
            }
        }
        _ => Err(fail(
            &mut s,
            SessionError::local(
                ErrorCode::Malformed,
                "expected a handshake or a data stream",
            ),
        )),
    }
}

fn random<const N: usize>() -> Result<[u8; N], SessionError> {
    let mut b = [0u8; N];
    sys::random_bytes(&mut b).map_err(|e| SessionError::io("random bytes", e))?;
    Ok(b)
}

/// One file being received.
struct RecvFile {
    /// Open while blocks arrive (opened on the first, closed when done), so
    /// a tree of 100,000 files does not hold 100,000 descriptors.
    part: Option<File>,
    part_rel: String,
    final_rel: String,
    size: u64,
    mode: u32,
    mtime: SystemTime,
    direct: bool,
    /// One bit per block: which blocks arrived.
    seen: Vec<u64>,
    received: u64,
    digest: u64,
    done: bool,
}

fn join(dest: &str, path: &str) -> String {
    if dest.is_empty() {
        path.to_string()
    } else {
        format!("{dest}/{path}")
    }
}

fn mtime_of(e: &Entry) -> SystemTime {
    let d = Duration::new(e.mtime_s.unsigned_abs(), e.mtime_ns);
    if e.mtime_s >= 0 {
        SystemTime::UNIX_EPOCH + d
    } else {
        SystemTime::UNIX_EPOCH - d
    }
}

fn control_session(
    s: &mut TcpStream,
    hello: crate::protocol::handshake::Hello,
    cfg: &RecvConfig,
    registry: &Registry,
) -> Result<(u64, u64), SessionError> {
    let root = Root::open(&cfg.root).map_err(|e| SessionError::io("root", e))?;
    let mut hs = ServerHandshake::new(cfg.key, random()?);
    let challenge = hs.on_hello(&hello).map_err(SessionError::Auth)?;
    send_msg(s, &Message::Challenge(challenge))?;
    let Message::Auth(auth) = recv_msg(s)? else {
        return Err(SessionError::local(
            ErrorCode::Malformed,
            "expected the handshake's proof",
        ));
    };
    let (welcome, keys) = hs.on_auth(&auth, random()?).map_err(SessionError::Auth)?;
    send_msg(s, &Message::Welcome(welcome))?;

    let Message::Request(req) = recv_msg(s)? else {
        return Err(SessionError::local(
            ErrorCode::Malformed,
            "expected a session request",
        ));
    };
    if req.direction == Direction::Bench {
        return bench_session(s, &req, &keys, cfg, registry);
    }
    if req.direction != Direction::Push {
        return Err(SessionError::local(
            ErrorCode::BadRequest,
            "this receiver takes pushed data only (urmove send); pull is not supported",
        ));
    }
    if req.streams == 0 || req.streams > STREAMS_MAX {
        return Err(SessionError::local(
            ErrorCode::BadRequest,
            "bad stream count",
        ));
    }
    let dest = match req.path.as_str() {
        "" | "." => String::new(),
        p => {
            check_path(p)
                .map_err(|e| SessionError::local(ErrorCode::PathRefused, format!("{p}: {e}")))?;
            p.to_string()
        }
    };
    let mut entries: Vec<Entry> = Vec::new();
    loop {
        match recv_msg(s)? {
            Message::Manifest(part) => {
                if entries.len() as u64 + part.len() as u64 > u64::from(ENTRIES_MAX) {
                    return Err(SessionError::local(
                        ErrorCode::TooLarge,
                        "manifest has too many entries",
                    ));
                }
                entries.extend(part);
            }
            Message::ManifestEnd => break,
            _ => {
                return Err(SessionError::local(
                    ErrorCode::Malformed,
                    "expected the manifest",
                ))
            }
        }
    }
    for e in &entries {
        check_entry(e).map_err(|err| {
            SessionError::local(ErrorCode::PathRefused, format!("{}: {err}", e.path))
        })?;
    }

    // Prepare everything before any byte arrives.
    if !dest.is_empty() {
        root.mkdir_all(&dest, 0o755)
            .map_err(|e| SessionError::io(dest.clone(), e))?;
    }
    let block = u64::from(req.block_size);
    let mut files: Vec<Option<RecvFile>> = Vec::with_capacity(entries.len());
    let mut empty_acks = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let rel = join(&dest, &e.path);
        match e.kind {
            EntryKind::Dir => {
                root.mkdir_all(&rel, 0o755)
                    .map_err(|err| SessionError::io(rel.clone(), err))?;
                files.push(None);
            }
            EntryKind::Symlink => {
                let _ = root.unlink(&rel);
                let target = e.link.as_deref().unwrap_or_default();
                root.symlink(target, &rel)
                    .map_err(|err| SessionError::io(rel.clone(), err))?;
                files.push(None);
            }
            EntryKind::File => {
                let part_rel = format!("{rel}{PART_SUFFIX}");
                // Create (or empty) the .part now: a bad path fails before any data.
                let (part, direct) = open_part(&root, &part_rel, cfg.direct, true)?;
                let mut f = RecvFile {
                    part: (e.size == 0).then_some(part),
                    part_rel,
                    final_rel: rel,
                    size: e.size,
                    mode: e.mode,
                    mtime: mtime_of(e),
                    direct,
                    seen: vec![0; e.size.div_ceil(block).div_ceil(64) as usize],
                    received: 0,
                    digest: 0,
                    done: false,
                };
                if e.size == 0 {
                    finalize(&root, &mut f)?;
                    empty_acks.push(i as u32);
                }
                files.push(Some(f));
            }
        }
    }

    // Wait for the data streams, each proving it belongs here.
    let streams = collect_streams(s, registry, &keys, req.streams, cfg.stream_wait)?;
    for i in empty_acks {
        send_msg(
            s,
            &Message::FileAck {
                file_index: i,
                digest: 0,
            },
        )?;
    }

    // Receive: frames into registered buffers, checked, written, acked.
    let fds: Vec<i32> = streams.iter().map(|st| st.as_raw_fd()).collect();
    let buf_count = (streams.len() * 2 + 2).min(256);
    let mut rx = NetReceiver::new(&fds, buf_count, req.block_size as usize)?;
    let mut bytes = 0u64;
    let mut done_files = files.iter().flatten().filter(|f| f.done).count();
    while rx.open() {
        let mut frames = Vec::new();
        rx.poll(true, &mut |ev| {
            if let RecvEvent::Frame { header, lease, .. } = ev {
                frames.push((header, lease));
            }
        })?;
        let mut failure = None;
        for (header, lease) in frames {
            if failure.is_none() {
                match take_frame(&root, cfg.direct, &mut files, block, &header, &lease) {
                    Ok(Some(digest)) => {
                        done_files += 1;
                        send_msg(
                            s,
                            &Message::FileAck {
                                file_index: header.file_index,
                                digest,
                            },
                        )?;
                    }
                    Ok(None) => {}
                    Err(e) => failure = Some(e),
                }
                bytes += u64::from(header.length);
            }
            rx.give_back(lease);
        }
        if let Some(e) = failure {
            return Err(e);
        }
    }
    let file_count = files.iter().flatten().count();
    if done_files < file_count {
        return Err(SessionError::local(
            ErrorCode::Io,
            format!(
                "the data streams ended with {} of {file_count} files incomplete",
                file_count - done_files
            ),
        ));
    }
    // Directories last: adding files changed their mtimes.
    for e in entries.iter().rev().filter(|e| e.kind == EntryKind::Dir) {
        let rel = join(&dest, &e.path);
        if let Ok(d) = root.open_file(&rel, libc::O_RDONLY | libc::O_DIRECTORY, 0) {
            use std::os::unix::fs::PermissionsExt;
            let _ = d.set_permissions(std::fs::Permissions::from_mode(e.mode));
            let _ = d.set_times(std::fs::FileTimes::new().set_modified(mtime_of(e)));
        }
    }
    send_msg(
        s,
        &Message::Summary {
            files: file_count as u64,
            bytes,
            ok: true,
        },
    )?;
    Ok((file_count as u64, bytes))
}

/// Register the session, say Ready, and wait for its data streams, each of
/// which proved it belongs here when it connected.
fn collect_streams(
    s: &mut TcpStream,
    registry: &Registry,
    keys: &SessionKeys,
    count: u16,
    wait: Duration,
) -> Result<Vec<TcpStream>, SessionError> {
    let (tx, rx) = mpsc::channel();
    registry.lock().unwrap_or_else(|p| p.into_inner()).insert(
        keys.session_id,
        Pending {
            keys: keys.clone(),
            streams: count,
            tx,
        },
    );
    let ready = send_msg(s, &Message::Ready);
    let mut streams: Vec<Option<TcpStream>> = (0..count).map(|_| None).collect();
    let deadline = Instant::now() + wait;
    let mut arrived = 0;
    while ready.is_ok() && arrived < streams.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((i, st)) if streams[i as usize].is_none() => {
                streams[i as usize] = Some(st);
                arrived += 1;
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    registry
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&keys.session_id);
    ready?;
    if arrived < streams.len() {
        return Err(SessionError::local(
            ErrorCode::BadRequest,
            format!("only {arrived} of {} data streams arrived", streams.len()),
        ));
    }
    Ok(streams.into_iter().flatten().collect())
}

/// `bench --net` on the receiving side: take frames on every stream, check
/// each checksum, count and discard them; no disk is touched.
fn bench_session(
    s: &mut TcpStream,
    req: &crate::protocol::control::SessionRequest,
    keys: &SessionKeys,
    cfg: &RecvConfig,
    registry: &Registry,
) -> Result<(u64, u64), SessionError> {
    let streams = collect_streams(s, registry, keys, req.streams, cfg.stream_wait)?;
    let fds: Vec<i32> = streams.iter().map(|st| st.as_raw_fd()).collect();
    let buf_count = (streams.len() * 2 + 2).min(256);
    let mut rx = NetReceiver::new(&fds, buf_count, req.block_size as usize)?;
    let mut bytes = 0u64;
    while rx.open() {
        let mut frames = Vec::new();
        rx.poll(true, &mut |ev| {
            if let RecvEvent::Frame { header, lease, .. } = ev {
                frames.push((header, lease));
            }
        })?;
        let mut failure = None;
        for (header, lease) in frames {
            let unchecked = header.flags & crate::protocol::frame::FLAG_UNCHECKED != 0;
            if !unchecked {
                if let Err(e) = header.check_payload(payload(&lease, &header)) {
                    failure.get_or_insert(SessionError::local(ErrorCode::Malformed, e.to_string()));
                }
            }
            bytes += u64::from(header.length);
            rx.give_back(lease);
        }
        if let Some(e) = failure {
            return Err(e);
        }
    }
    send_msg(
        s,
        &Message::Summary {
            files: 0,
            bytes,
            ok: true,
        },
    )?;
    Ok((0, bytes))
}

fn open_part(
    root: &Root,
    rel: &str,
    direct: DirectMode,
    truncate: bool,
) -> Result<(File, bool), SessionError> {
    let flags = libc::O_WRONLY | libc::O_CREAT | if truncate { libc::O_TRUNC } else { 0 };
    if direct != DirectMode::Off {
        match root.open_file(rel, flags | libc::O_DIRECT, 0o600) {
            Ok(f) => return Ok((f, true)),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && direct == DirectMode::Auto => {}
            Err(e) => return Err(SessionError::io(rel.to_string(), e)),
        }
    }
    let f = root
        .open_file(rel, flags, 0o600)
        .map_err(|e| SessionError::io(rel.to_string(), e))?;
    Ok((f, false))
}

/// Check a frame against the file it names and write it. Returns the
/// file's digest when this frame completed it (and it was renamed).
fn take_frame(
    root: &Root,
    direct: DirectMode,
    files: &mut [Option<RecvFile>],
    block: u64,
    header: &FrameHeader,
    lease: &crate::datapath::Lease,
) -> Result<Option<u64>, SessionError> {
    let malformed = |m: String| SessionError::local(ErrorCode::Malformed, m);
    let Some(Some(f)) = files.get_mut(header.file_index as usize) else {
        return Err(malformed(format!(
            "frame for entry {}, which is not a file being received",
            header.file_index
        )));
    };
    let sizes = [f.size];
    FrameHeader {
        file_index: 0,
        ..*header
    }
    .check_against(&sizes)
    .map_err(|e| malformed(format!("file {}: {e}", header.file_index)))?;
    let expected = (f.size - header.offset.min(f.size)).min(block);
    let hole = header.is_hole();
    let covered = if hole && header.length == 0 {
        expected
    } else {
        u64::from(header.length)
    };
    if !header.offset.is_multiple_of(block)
        || covered != expected
        || (hole && header.length != 0)
        || f.done
    {
        return Err(malformed(format!(
            "frame at offset {} of file {} does not fit its block layout",
            header.offset, header.file_index
        )));
    }
    let block_no = (header.offset / block) as usize;
    let (word, bit) = (block_no / 64, 1u64 << (block_no % 64));
    if f.seen[word] & bit != 0 {
        return Err(malformed(format!(
            "block at offset {} of file {} arrived twice",
            header.offset, header.file_index
        )));
    }
    if hole {
        // Nothing to write: the hole stays a hole (the size is set at the end).
        f.seen[word] |= bit;
        f.received += expected;
        f.digest = digest_add(
            f.digest,
            hole_checksum(header.file_index, header.offset, expected),
        );
        if f.received == f.size {
            if f.part.is_none() {
                f.part = Some(open_part(root, &f.part_rel, direct, false)?.0);
            }
            finalize(root, f)?;
            return Ok(Some(f.digest));
        }
        return Ok(None);
    }
    let data = payload(lease, header);
    header
        .check_payload(data)
        .map_err(|e| malformed(e.to_string()))?;
    // O_DIRECT writes whole aligned blocks: the tail is padded here and cut
    // back to the true size before the rename.
    if f.part.is_none() {
        let (part, d) = open_part(root, &f.part_rel, direct, false)?;
        f.part = Some(part);
        f.direct = d;
    }
    let part = f.part.as_ref().expect("opened above");
    let len = header.length as usize;
    let write_len = if f.direct {
        len.div_ceil(4096) * 4096
    } else {
        len
    };
    let bytes = &lease.as_slice()[HEADROOM..HEADROOM + write_len];
    part.write_all_at(bytes, header.offset)
        .map_err(|e| SessionError::io(format!("writing {}", f.final_rel), e))?;
    f.seen[word] |= bit;
    f.received += u64::from(header.length);
    f.digest = digest_add(f.digest, header.checksum);
    if f.received == f.size {
        finalize(root, f)?;
        return Ok(Some(f.digest));
    }
    Ok(None)
}

/// Cut to size, set mode and mtime, sync, and rename to the final name.
fn finalize(root: &Root, f: &mut RecvFile) -> Result<(), SessionError> {
    use std::os::unix::fs::PermissionsExt;
    let ctx = |what: &str| format!("{what} {}", f.final_rel);
    let part = f.part.take().expect("a file being finalized is open");
    part.set_len(f.size)
        .map_err(|e| SessionError::io(ctx("truncating"), e))?;
    part.set_permissions(std::fs::Permissions::from_mode(f.mode))
        .map_err(|e| SessionError::io(ctx("setting the mode of"), e))?;
    part.set_times(std::fs::FileTimes::new().set_modified(f.mtime))
        .map_err(|e| SessionError::io(ctx("setting the mtime of"), e))?;
    part.sync_all()
        .map_err(|e| SessionError::io(ctx("syncing"), e))?;
    root.rename(&f.part_rel, &f.final_rel)
        .map_err(|e| SessionError::io(ctx("renaming"), e))?;
    f.done = true;
    Ok(())
}
