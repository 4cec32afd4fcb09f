//! `urmove send`: push files and trees to a `urmove recv` daemon over one
//! control connection and N parallel data streams.

use std::collections::HashMap;
use std::fs::File;
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::coord::{Interval, IntervalTracker, StreamRates, WorkerCounters};
use crate::datapath::disk::{fill_random, scramble};
use crate::datapath::net::{payload_mut, NetSender, SendStats, ZeroCopy};
use crate::datapath::{sys, DirectMode};
use crate::protocol::control::{
    Direction, ErrorCode, HaveItem, Message, SessionRequest, MANIFEST_PART_ENTRIES_MAX,
    REQ_CHECKSUM, REQ_ENCRYPT, REQ_RESUME,
};
use crate::protocol::frame::{
    digest_add, hole_checksum, FrameHeader, FLAG_UNCHECKED, FRAME_HEADER_LEN,
};
use crate::protocol::handshake::{stream_proof, ClientHandshake, Key, SessionKeys};
use crate::protocol::seal::Direction as SealDirection;

/// The keys and direction a session's frames are sealed with, if it is
/// encrypted.
pub(crate) type Sealing = Option<(SessionKeys, SealDirection)>;
use crate::protocol::manifest::EntryKind;

use super::conn::{recv_msg, send_msg, Control};
use super::tree::{scan, Tree};
use super::SessionError;

/// Everything `send` needs, resolved from the command line.
#[derive(Debug, Clone)]
pub struct SendConfig {
    pub host: String,
    pub port: u16,
    /// Destination directory under the receiver's root.
    pub dest: String,
    pub sources: Vec<PathBuf>,
    pub streams: u16,
    pub block_size: u32,
    pub key: Key,
    pub zerocopy: ZeroCopy,
    pub direct: DirectMode,
    pub interval: Duration,
    pub sock_buf: Option<usize>,
    pub connect_timeout: Duration,
    /// Pace the data to at most this many bytes per second in total.
    pub rate_limit_bytes_per_s: Option<f64>,
    /// Continue from what the receiver holds; skip finished files.
    pub resume: bool,
    /// With `resume`: compare finished files by content.
    pub checksum: bool,
    /// Seal every data frame (AES-256-GCM).
    pub encrypt: bool,
    /// A peer silent (or a stream stalled) this long ends the session.
    pub timeout: Duration,
}

impl SendConfig {
    /// A configuration for `host:port` with `key` and the defaults: 4
    /// streams, 4 MiB blocks, zero-copy and O_DIRECT where they pay,
    /// 1 s intervals, no rate limit.
    pub fn to(host: String, port: u16, key: Key) -> Self {
        SendConfig {
            host,
            port,
            dest: String::new(),
            sources: Vec::new(),
            streams: 4,
            block_size: 4 << 20,
            key,
            zerocopy: ZeroCopy::Auto,
            direct: DirectMode::Auto,
            interval: Duration::from_secs(1),
            sock_buf: None,
            connect_timeout: Duration::from_secs(10),
            rate_limit_bytes_per_s: None,
            resume: false,
            checksum: false,
            encrypt: false,
            timeout: Duration::from_secs(60),
        }
    }

    /// The request flags this configuration asks for.
    pub fn flags(&self) -> u32 {
        let mut f = 0;
        if self.resume || self.checksum {
            f |= REQ_RESUME;
        }
        if self.checksum {
            f |= REQ_CHECKSUM;
        }
        if self.encrypt {
            f |= REQ_ENCRYPT;
        }
        f
    }
}

/// Keeps the bytes sent under `rate * elapsed`.
struct Pacer {
    rate: Option<f64>,
    start: Instant,
    sent: u64,
}

impl Pacer {
    fn new(rate: Option<f64>) -> Self {
        Pacer {
            rate,
            start: Instant::now(),
            sent: 0,
        }
    }

    /// How long until `bytes` more may go out (None: now).
    fn delay(&self, bytes: u64) -> Option<Duration> {
        let rate = self.rate?;
        let due = (self.sent + bytes) as f64 / rate;
        let now = self.start.elapsed().as_secs_f64();
        (due > now).then(|| Duration::from_secs_f64(due - now))
    }

    /// Wait until `bytes` more may go out, keeping `tx` moving meanwhile
    /// (frames already admitted go out while this waits).
    fn admit(&mut self, bytes: u64, tx: &mut NetSender) -> Result<(), SessionError> {
        while let Some(d) = self.delay(bytes) {
            tx.poll(false)?;
            std::thread::sleep(d.min(Duration::from_millis(5)));
        }
        self.sent += bytes;
        Ok(())
    }
}

/// One interval line of a transfer.
#[derive(Debug, Clone, Copy)]
pub struct NetInterval {
    pub interval: Interval,
    pub total_bytes: u64,
}

/// Receives progress while a transfer runs.
pub trait SendObserver {
    fn interval(&mut self, line: &NetInterval);
    /// The interval just passed to `interval`, per data stream (bytes each
    /// stream handed to its socket, frame headers included); empty when
    /// the data path does not count per stream (the receiving side).
    fn stream_intervals(&mut self, _streams: &[Interval]) {}
    /// Something went wrong but the run goes on.
    fn notice(&mut self, message: &str);
    /// Something worth knowing (what a resume found).
    fn info(&mut self, message: &str) {
        self.notice(message)
    }
    /// Before the data flows: the count of files done so far (acknowledged,
    /// or complete before the run), kept current while the run goes, and
    /// how many the run has in all.
    fn files(&mut self, _done: Arc<AtomicU64>, _total: u64) {}
}

/// The outcome of a transfer.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SendReport {
    pub schema: u32,
    pub command: &'static str,
    /// `ok` or an error code.
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Payload bytes that crossed the network.
    pub bytes: u64,
    pub bytes_skipped: u64,
    pub files: u64,
    pub files_verified: u64,
    pub elapsed_s: f64,
    pub rate_bits_per_s: f64,
    pub interval_rate_min_bits_per_s: f64,
    pub streams: u16,
    pub block_size_bytes: u32,
    pub zero_copy_sends: u64,
    pub zero_copy_copied: u64,
    pub zero_copy_fell_back: bool,
    /// Frames sent again because their stream was lost.
    pub frames_resent: u64,
    /// When the data started, to close the run when the peer confirmed it.
    #[serde(skip)]
    pub started: Option<Instant>,
}

impl SendReport {
    /// Record why the run failed (`interrupted` when the user stopped it).
    pub(crate) fn fail(&mut self, e: &SessionError, interrupted: bool) {
        self.status = if interrupted {
            "interrupted"
        } else {
            e.code().name()
        };
        self.error = Some(e.to_string());
    }

    /// End the run now: the time (and so the rate) covers the data and the
    /// peer's confirmation of it (digests, fsyncs, renames), not only the
    /// bytes leaving this host.
    pub fn close(&mut self) {
        if let Some(t) = self.started {
            let secs = t.elapsed().as_secs_f64().max(1e-9);
            self.elapsed_s = secs;
            self.rate_bits_per_s = self.bytes as f64 * 8.0 / secs;
        }
    }
}

fn random<const N: usize>() -> Result<[u8; N], SessionError> {
    let mut b = [0u8; N];
    sys::random_bytes(&mut b).map_err(|e| SessionError::io("random bytes", e))?;
    Ok(b)
}

fn connect(cfg: &SendConfig) -> Result<TcpStream, SessionError> {
    let what = format!("connecting to {}:{}", cfg.host, cfg.port);
    let addrs = (cfg.host.as_str(), cfg.port)
        .to_socket_addrs()
        .map_err(|e| SessionError::io(what.clone(), e))?;
    let mut last = None;
    for a in addrs {
        match TcpStream::connect_timeout(&a, cfg.connect_timeout) {
            Ok(s) => {
                s.set_nodelay(true)
                    .map_err(|e| SessionError::io(what.clone(), e))?;
                sys::set_dead_peer_timeout(s.as_raw_fd(), cfg.timeout);
                return Ok(s);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(SessionError::io(
        what,
        last.unwrap_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no address")),
    ))
}

/// Connect, authenticate, ask for `req`, run `between` (sending or
/// receiving the manifest), wait until the daemon is ready, and open the
/// data streams, each proving it belongs to the session.
/// Send a manifest in parts, then its end.
pub(crate) fn send_manifest(
    ctl: &mut Control,
    entries: &[crate::protocol::manifest::Entry],
) -> Result<(), SessionError> {
    for part in entries.chunks(MANIFEST_PART_ENTRIES_MAX as usize) {
        send_msg(ctl, &Message::Manifest(part.to_vec()))?;
    }
    send_msg(ctl, &Message::ManifestEnd)
}

pub(crate) fn open_session(
    cfg: &SendConfig,
    req: SessionRequest,
    between: &mut dyn FnMut(&mut Control) -> Result<(), SessionError>,
) -> Result<(Control, Vec<TcpStream>, SessionKeys), SessionError> {
    let mut ctl = Control::new(connect(cfg)?);
    ctl.set_read_timeout(Some(cfg.timeout.max(Duration::from_secs(1))))?;
    let (mut hs, hello) = ClientHandshake::new(cfg.key, random()?);
    send_msg(&mut ctl, &Message::Hello(hello))?;
    let Message::Challenge(ch) = recv_msg(&mut ctl)? else {
        return Err(SessionError::Protocol(
            "expected the receiver's challenge".into(),
        ));
    };
    // A receiver without our key is told so before we hang up.
    let auth = hs
        .on_challenge(&ch)
        .map_err(|e| super::conn::fail(&mut ctl, SessionError::Auth(e)))?;
    send_msg(&mut ctl, &Message::Auth(auth))?;
    let Message::Welcome(welcome) = recv_msg(&mut ctl)? else {
        return Err(SessionError::Protocol(
            "expected the receiver's welcome".into(),
        ));
    };
    let keys = hs.on_welcome(&welcome).map_err(SessionError::Auth)?;
    // Everything after the welcome is sealed with the session's keys.
    ctl.secure(&keys, true);
    let streams_n = req.streams;
    send_msg(&mut ctl, &Message::Request(req))?;
    between(&mut ctl)?;
    loop {
        match recv_msg(&mut ctl)? {
            Message::Ready => break,
            // The receiver is still preparing (a large manifest).
            Message::Alive { .. } => {}
            _ => {
                return Err(SessionError::Protocol(
                    "expected the receiver to be ready".into(),
                ))
            }
        }
    }
    let mut streams = Vec::with_capacity(streams_n as usize);
    for i in 0..streams_n {
        let st = connect(cfg)?;
        if let Some(b) = cfg.sock_buf {
            set_sock_buf(&st, b);
        }
        let mut hello = Control::new(st);
        send_msg(
            &mut hello,
            &Message::StreamHello {
                session_id: keys.session_id,
                stream_index: i,
                proof: stream_proof(&keys, i),
            },
        )?;
        streams.push(hello.into_tcp());
    }
    Ok((ctl, streams, keys))
}

/// Run `data` on its own thread while this one samples its counters and
/// prints interval lines; then end the data streams.
pub(crate) fn drive<T: Send>(
    cfg: &SendConfig,
    total: u64,
    streams: &[TcpStream],
    interrupt: &AtomicBool,
    obs: &mut dyn SendObserver,
    data: impl FnOnce(&WorkerCounters, &AtomicBool) -> Result<T, SessionError> + Send,
) -> (Result<T, SessionError>, SendReport) {
    let counters = WorkerCounters::with_streams(streams.len());
    let mut per_stream = StreamRates::new(streams.len());
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let (result, mut tracker) = std::thread::scope(|scope| {
        let worker = scope.spawn(|| {
            let r = data(&counters, &stop);
            counters.finish();
            r
        });
        let mut tracker = IntervalTracker::new(cfg.interval.as_nanos() as u64);
        while !counters.is_done() {
            std::thread::sleep(Duration::from_millis(10).min(cfg.interval));
            if interrupt.load(Ordering::Relaxed) {
                stop.store(true, Ordering::Relaxed);
            }
            let t = start.elapsed().as_nanos() as u64;
            if let Some(iv) = tracker.observe(t, counters.snapshot().0) {
                obs.interval(&NetInterval {
                    interval: iv,
                    total_bytes: total,
                });
                obs.stream_intervals(per_stream.close(t, iv.full, counters.streams()));
            }
        }
        (worker.join().expect("the data thread panicked"), tracker)
    });
    for st in streams {
        let _ = st.shutdown(Shutdown::Write);
    }
    let elapsed = start.elapsed();
    let (bytes, _) = counters.snapshot();
    if let Some(iv) = tracker.finish(elapsed.as_nanos() as u64, bytes) {
        obs.interval(&NetInterval {
            interval: iv,
            total_bytes: total,
        });
        let t = elapsed.as_nanos() as u64;
        obs.stream_intervals(per_stream.close(t, iv.full, counters.streams()));
    }
    let secs = elapsed.as_secs_f64().max(1e-9);
    let report = SendReport {
        schema: 1,
        command: "send",
        status: "ok",
        error: None,
        bytes,
        bytes_skipped: 0,
        files: 0,
        files_verified: 0,
        elapsed_s: secs,
        rate_bits_per_s: bytes as f64 * 8.0 / secs,
        interval_rate_min_bits_per_s: tracker.min_full_rate().unwrap_or(bytes as f64 / secs) * 8.0,
        streams: streams.len() as u16,
        block_size_bytes: cfg.block_size,
        zero_copy_sends: 0,
        zero_copy_copied: 0,
        zero_copy_fell_back: false,
        frames_resent: 0,
        started: Some(start),
    };
    (result, report)
}

pub(crate) fn note_zero_copy(
    report: &mut SendReport,
    stats: &SendStats,
    obs: &mut dyn SendObserver,
) {
    report.zero_copy_sends = stats.zc_sends;
    report.zero_copy_copied = stats.zc_copied;
    report.zero_copy_fell_back = stats.zc_fell_back;
    if stats.zc_fell_back {
        obs.notice(
            "zero-copy sends were copied by the kernel (loopback or veth): fell back to plain send",
        );
    }
}

/// Run a push. Setup failures (connection, authentication, refusal) come
/// back as `Err`; a transfer that started reports its outcome in the report.
pub fn run_send(
    cfg: &SendConfig,
    interrupt: &AtomicBool,
    obs: &mut dyn SendObserver,
) -> Result<SendReport, SessionError> {
    let tree = scan(&cfg.sources)?;
    let req = SessionRequest {
        direction: Direction::Push,
        streams: cfg.streams,
        block_size: cfg.block_size,
        flags: cfg.flags(),
        path: cfg.dest.clone(),
    };
    let block = u64::from(cfg.block_size);
    let mut held = Held::default();
    let (mut ctl, streams, keys) = open_session(cfg, req, &mut |ctl| {
        send_manifest(ctl, &tree.entries)?;
        if cfg.checksum {
            let open = |i: usize| {
                File::open(&tree.sources[i])
                    .map_err(|e| SessionError::io(tree.sources[i].display().to_string(), e))
            };
            send_content_digests(ctl, &tree, block, &open)?;
        }
        if cfg.resume || cfg.checksum {
            held = Held::receive(ctl, &tree.entries, block)?;
        }
        Ok(())
    })?;
    let params = PushParams {
        seal: cfg.encrypt.then_some((keys, SealDirection::ClientToServer)),
        ..push_params(cfg)
    };
    let open = |i: usize| open_source(&tree.sources[i], cfg.direct);
    let skipped = held.bytes(&tree, block);
    if cfg.resume || cfg.checksum {
        obs.info(&format!(
            "resuming: {} files complete, {} partly there; {} bytes to send",
            held.complete.len(),
            held.partial.len(),
            tree.file_bytes().saturating_sub(skipped)
        ));
    }
    let files_done = Arc::new(AtomicU64::new(held.complete.len() as u64));
    obs.files(Arc::clone(&files_done), tree.file_count() as u64);
    // Entries needing no acknowledgement (not files, or complete) start set.
    let acks_state = Acks {
        acked: tree
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| {
                AtomicBool::new(
                    e.kind != EntryKind::File || held.complete.contains_key(&(i as u32)),
                )
            })
            .collect(),
        files_done,
        ended: AtomicBool::new(false),
        received: (0..cfg.streams).map(|_| AtomicU64::new(0)).collect(),
        waiting: (0..cfg.streams).map(|_| AtomicBool::new(false)).collect(),
    };
    // Acknowledgements are read while the data flows: a receiver that
    // finishes many files must never block on a full control socket.
    let mut reader = ctl.try_clone()?;
    reader.set_read_timeout(Some(cfg.timeout.max(Duration::from_secs(1))))?;
    let (data, mut report, acks) = std::thread::scope(|scope| {
        let acked = &acks_state;
        let acks = scope.spawn(move || {
            let r = read_acks(&mut reader, acked);
            acked.ended.store(true, Ordering::Release);
            r
        });
        let (data, report) = drive(
            cfg,
            tree.file_bytes().saturating_sub(skipped),
            &streams,
            interrupt,
            obs,
            |counters, stop| {
                push_data(
                    &params,
                    &tree,
                    &held,
                    Some(acked),
                    &open,
                    &streams,
                    counters,
                    stop,
                )
            },
        );
        if let Err(e) = &data {
            // Tell the receiver, which keeps only .part files (and ends the
            // session, so the reader returns).
            let _ = send_msg(
                &mut ctl,
                &Message::Error {
                    code: e.code(),
                    message: e.to_string(),
                },
            );
        }
        let acks = acks.join().unwrap_or_else(|_| {
            Err(SessionError::Protocol(
                "the acknowledgement reader panicked".into(),
            ))
        });
        (data, report, acks)
    });
    report.files = tree.file_count() as u64;
    report.bytes_skipped = skipped;
    let digests = match data {
        Ok(pushed) => {
            note_zero_copy(&mut report, &pushed.stats, obs);
            for l in &pushed.lost {
                obs.notice(&format!(
                    "data {l}; its frames went again on the other streams"
                ));
            }
            report.frames_resent = pushed.resent;
            pushed.digests
        }
        Err(e) => {
            // The receiver's reason (no space, a failed write) is the one
            // to report: the lost streams only follow from it.
            let e = match acks {
                Err(refused @ SessionError::Refused { .. }) if e.is_connection_loss() => refused,
                _ => e,
            };
            report.fail(&e, interrupt.load(Ordering::Relaxed));
            return Ok(report);
        }
    };
    // Every file is acknowledged with a digest that must match ours.
    report.close();
    if let Err(e) = acks.and_then(|acks| check_acks(&tree, &digests, &held, &acks, &mut report)) {
        report.fail(&e, false);
    }
    Ok(report)
}

/// `bench --net`: frames from memory to a receiver for `time`, which
/// discards them (after checking each checksum when `verify`); no disk is
/// touched on either side.
pub fn run_bench_net(
    cfg: &SendConfig,
    time: Duration,
    verify: bool,
    reverse: bool,
    interrupt: &AtomicBool,
    obs: &mut dyn SendObserver,
) -> Result<SendReport, SessionError> {
    if reverse {
        return run_bench_net_reverse(cfg, time, verify, interrupt, obs);
    }
    let req = SessionRequest {
        direction: Direction::Bench,
        streams: cfg.streams,
        block_size: cfg.block_size,
        flags: cfg.flags() & REQ_ENCRYPT,
        path: String::new(),
    };
    let (mut ctl, streams, keys) = open_session(cfg, req, &mut |_| Ok(()))?;
    let params = PushParams {
        seal: cfg.encrypt.then_some((keys, SealDirection::ClientToServer)),
        ..push_params(cfg)
    };
    let (data, mut report) = drive(cfg, 0, &streams, interrupt, obs, |counters, stop| {
        bench_data(&params, time, verify, &streams, counters, stop)
    });
    report.command = "bench --net";
    match data {
        Ok(stats) => note_zero_copy(&mut report, &stats, obs),
        Err(e) => {
            report.fail(&e, false);
            return Ok(report);
        }
    }
    confirm_bench(&mut ctl, &mut report);
    Ok(report)
}

/// `bench --net --reverse`: the daemon sends for `time` (carried in the
/// request's path as milliseconds, with `v` appended to ask for checksums)
/// and this side receives, counts and discards.
fn run_bench_net_reverse(
    cfg: &SendConfig,
    time: Duration,
    verify: bool,
    interrupt: &AtomicBool,
    obs: &mut dyn SendObserver,
) -> Result<SendReport, SessionError> {
    let req = SessionRequest {
        direction: Direction::BenchReverse,
        streams: cfg.streams,
        block_size: cfg.block_size,
        flags: cfg.flags() & REQ_ENCRYPT,
        path: format!("{}{}", time.as_millis(), if verify { "v" } else { "" }),
    };
    let (mut ctl, streams, keys) = open_session(cfg, req, &mut |_| Ok(()))?;
    let open = cfg.encrypt.then_some((keys, SealDirection::ServerToClient));
    let (data, mut report) = drive(cfg, 0, &streams, interrupt, obs, |counters, _stop| {
        discard_frames(&streams, cfg.block_size as usize, &open, &mut |b| {
            counters.add(b, 0)
        })
    });
    report.command = "bench --net --reverse";
    if let Err(e) = data {
        report.fail(&e, false);
        return Ok(report);
    }
    confirm_bench(&mut ctl, &mut report);
    Ok(report)
}

/// Receive bench frames on every stream until all end: check each
/// checksum (unless the frame says it carries none), count and discard.
pub(crate) fn discard_frames(
    streams: &[TcpStream],
    payload_max: usize,
    open: &Sealing,
    progress: &mut dyn FnMut(u64),
) -> Result<u64, SessionError> {
    use crate::datapath::net::{payload, NetReceiver, RecvEvent};
    let fds: Vec<i32> = streams.iter().map(|st| st.as_raw_fd()).collect();
    let buf_count = super::buffer_count(streams.len(), payload_max as u32, 2, 2)?;
    let mut rx = NetReceiver::new(&fds, buf_count, payload_max)?;
    if let Some((keys, dir)) = open {
        rx.open_with(keys, *dir);
    }
    let mut bytes = 0u64;
    while rx.open() {
        let mut frames = Vec::new();
        let mut failure = None;
        rx.poll(true, &mut |ev| match ev {
            RecvEvent::Frame { header, lease, .. } => frames.push((header, lease)),
            RecvEvent::Lost { stream, why } => {
                failure = Some(SessionError::io(format!("data stream {stream}"), why));
            }
            _ => {}
        })?;
        let mut batch = 0u64;
        for (header, lease) in frames {
            if header.flags & FLAG_UNCHECKED == 0 {
                if let Err(e) = header.check_payload(payload(&lease, &header)) {
                    failure.get_or_insert(SessionError::local(ErrorCode::Malformed, e.to_string()));
                }
            }
            batch += u64::from(header.length);
            rx.give_back(lease);
        }
        bytes += batch;
        progress(batch);
        if let Some(e) = failure {
            return Err(e);
        }
    }
    Ok(bytes)
}

/// End a benchmark: the peer's summary must count the bytes this side
/// counted (sent or received); the run's time ends with it.
fn confirm_bench(ctl: &mut Control, report: &mut SendReport) {
    let confirmed = recv_msg(ctl);
    report.close();
    match confirmed {
        Ok(Message::Summary {
            bytes, ok: true, ..
        }) if bytes == report.bytes => {}
        Ok(Message::Summary { bytes, .. }) => {
            report.status = ErrorCode::Io.name();
            report.error = Some(format!(
                "the peer counted {bytes} bytes, this side {}",
                report.bytes
            ));
        }
        Ok(_) => {
            report.status = ErrorCode::Malformed.name();
            report.error = Some("unexpected message after the data".into());
        }
        Err(e) => {
            report.fail(&e, false);
        }
    }
}

/// Send frames of incompressible data round-robin until `time` is up.
pub(crate) fn bench_data(
    cfg: &PushParams,
    time: Duration,
    verify: bool,
    streams: &[TcpStream],
    counters: &WorkerCounters,
    stop: &AtomicBool,
) -> Result<SendStats, SessionError> {
    let fds: Vec<i32> = streams.iter().map(|s| s.as_raw_fd()).collect();
    let bufs = super::buffer_count(streams.len(), cfg.block_size, 4, 0)?;
    let mut tx = NetSender::new(&fds, bufs, cfg.block_size as usize, cfg.zerocopy)?;
    tx.publish_stream_bytes(counters.streams());
    if let Some((keys, dir)) = &cfg.seal {
        tx.seal_with(keys, *dir);
    }
    // Random bytes in every buffer once; each frame then scrambles a word per
    // 512 bytes so no two frames are alike.
    let mut all = Vec::with_capacity(bufs);
    while let Some(mut l) = tx.take_buffer() {
        let at = all.len() as u64;
        fill_random(payload_mut(&mut l), 0xBE4C, at, 0);
        all.push(l);
    }
    for l in all {
        tx.give_back(l);
    }
    let n = cfg.block_size as usize;
    let start = Instant::now();
    let mut offset = 0u64;
    let mut next_stream = 0u32;
    while start.elapsed() < time && !stop.load(Ordering::Relaxed) {
        let mut lease = loop {
            match tx.take_buffer() {
                Some(l) => break l,
                None => tx.poll(true)?,
            }
        };
        let p = &mut payload_mut(&mut lease)[..n];
        scramble(p, 0xBE4C, offset, 0);
        let h = if verify {
            FrameHeader::for_payload(0, offset, p, 0)
        } else {
            FrameHeader {
                flags: FLAG_UNCHECKED,
                file_index: 0,
                length: n as u32,
                offset,
                checksum: 0,
            }
        };
        tx.queue(next_stream, lease, &h);
        next_stream = (next_stream + 1) % fds.len() as u32;
        counters.add(n as u64, 1);
        tx.poll(false)?;
        if let Some((stream, why)) = tx.take_lost().pop() {
            return Err(SessionError::io(format!("data stream {stream}"), why));
        }
        offset += n as u64;
    }
    tx.flush()?;
    Ok(tx.stats())
}

/// Read acknowledgements until the receiver's summary: (entry, digest).
/// Each acknowledged entry is marked in `acked` (its frames need not be
/// kept for re-sending); heartbeats only show the receiver is alive.
fn read_acks(ctl: &mut Control, state: &Acks) -> Result<Vec<(u32, u64)>, SessionError> {
    let mut acks = Vec::new();
    loop {
        match recv_msg(ctl)? {
            Message::FileAck { file_index, digest } => {
                if let Some(a) = state.acked.get(file_index as usize) {
                    if !a.swap(true, Ordering::Relaxed) {
                        state.files_done.fetch_add(1, Ordering::Relaxed);
                    }
                }
                acks.push((file_index, digest))
            }
            Message::Alive { streams } => {
                for ((at, w), (bytes, waiting)) in
                    state.received.iter().zip(&state.waiting).zip(streams)
                {
                    at.fetch_max(bytes, Ordering::Relaxed);
                    w.store(waiting, Ordering::Relaxed);
                }
            }
            Message::Summary { ok: true, .. } => return Ok(acks),
            Message::Summary { .. } => {
                return Err(SessionError::local(
                    ErrorCode::Io,
                    "the receiver reports a failed session",
                ))
            }
            _ => {
                return Err(SessionError::Protocol(
                    "unexpected message after the data".into(),
                ))
            }
        }
    }
}

/// Every file acknowledged once, each with the digest we computed.
fn check_acks(
    tree: &Tree,
    digests: &[u64],
    held: &Held,
    acks: &[(u32, u64)],
    report: &mut SendReport,
) -> Result<(), SessionError> {
    let mut acked = vec![false; tree.entries.len()];
    // Files complete before the session count as verified (size, mtime and
    // stored digest, or content with --checksum, matched on the receiver).
    for &i in held.complete.keys() {
        acked[i as usize] = true;
        report.files_verified += 1;
    }
    for &(file_index, digest) in acks {
        let i = file_index as usize;
        if i >= tree.entries.len() || tree.entries[i].kind != EntryKind::File || acked[i] {
            return Err(SessionError::Protocol(format!(
                "unexpected acknowledgement for entry {i}"
            )));
        }
        if digest != digests[i] {
            return Err(SessionError::local(
                ErrorCode::Io,
                format!(
                    "{}: the receiver's digest does not match",
                    tree.entries[i].path
                ),
            ));
        }
        acked[i] = true;
        report.files_verified += 1;
    }
    if report.files_verified != report.files {
        return Err(SessionError::local(
            ErrorCode::Io,
            format!(
                "only {} of {} files verified",
                report.files_verified, report.files
            ),
        ));
    }
    Ok(())
}

fn set_sock_buf(s: &TcpStream, bytes: usize) {
    sys::set_send_buffer(s.as_raw_fd(), bytes);
}

/// Whether `[offset, offset + len)` of `file` holds no data at all.
fn is_hole(file: &File, offset: u64, len: u64) -> bool {
    match sys::seek_data(file, offset) {
        Ok(Some(data)) => data >= offset + len,
        Ok(None) => true,
        Err(_) => false,
    }
}

/// Open a root-relative source beneath `root` (the daemon serving a pull).
pub(crate) fn open_source_beneath(
    root: &crate::datapath::beneath::Root,
    rel: &std::path::Path,
    direct: DirectMode,
) -> Result<(File, bool), SessionError> {
    let rel = rel.to_str().expect("root-relative sources are UTF-8");
    if direct != DirectMode::Off {
        match root.open_file(rel, libc::O_RDONLY | libc::O_DIRECT, 0) {
            Ok(f) => return Ok((f, true)),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && direct == DirectMode::Auto => {}
            Err(e) => return Err(SessionError::io(rel.to_string(), e)),
        }
    }
    let f = root
        .open_file(rel, libc::O_RDONLY, 0)
        .map_err(|e| SessionError::io(rel.to_string(), e))?;
    Ok((f, false))
}

pub(crate) fn open_source(
    path: &std::path::Path,
    direct: DirectMode,
) -> Result<(File, bool), SessionError> {
    let ctx = || path.display().to_string();
    if direct != DirectMode::Off {
        match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
        {
            Ok(f) => return Ok((f, true)),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && direct == DirectMode::Auto => {}
            Err(e) => return Err(SessionError::io(ctx(), e)),
        }
    }
    let f = File::open(path).map_err(|e| SessionError::io(ctx(), e))?;
    Ok((f, false))
}

fn push_params(cfg: &SendConfig) -> PushParams {
    PushParams {
        block_size: cfg.block_size,
        zerocopy: cfg.zerocopy,
        rate_limit_bytes_per_s: cfg.rate_limit_bytes_per_s,
        timeout: cfg.timeout,
        seal: None,
    }
}

/// Each file's content digest (`--checksum`), read from the sources and
/// sent as they come (a part at least every second, heartbeats while one
/// large file is read), then their end.
pub(crate) fn send_content_digests(
    ctl: &mut Control,
    tree: &Tree,
    block: u64,
    open: &dyn Fn(usize) -> Result<File, SessionError>,
) -> Result<(), SessionError> {
    use crate::protocol::control::LIST_PART_ITEMS_MAX;
    let mut beat = super::conn::Beat::new(ctl)?;
    let mut part = Vec::new();
    let mut last = Instant::now();
    for (i, e) in tree.entries.iter().enumerate() {
        if e.kind != EntryKind::File {
            continue;
        }
        let f = open(i)?;
        let d = super::journal::content_digest(&f, e.size, block, &mut || beat.tick())
            .map_err(|err| SessionError::io(tree.sources[i].display().to_string(), err))?;
        part.push((i as u32, d));
        if part.len() >= LIST_PART_ITEMS_MAX as usize || last.elapsed() >= Duration::from_secs(1) {
            send_msg(ctl, &Message::Digests(std::mem::take(&mut part)))?;
            last = Instant::now();
        }
    }
    if !part.is_empty() {
        send_msg(ctl, &Message::Digests(part))?;
    }
    send_msg(ctl, &Message::DigestsEnd)
}

/// Take content digests until their end, at most one per manifest entry.
pub(crate) fn recv_digests(
    ctl: &mut Control,
    entries: usize,
) -> Result<HashMap<u32, u64>, SessionError> {
    let mut out = HashMap::new();
    loop {
        match recv_msg(ctl)? {
            Message::Digests(part) => {
                for (i, d) in part {
                    if i as usize >= entries || out.insert(i, d).is_some() {
                        return Err(SessionError::local(
                            ErrorCode::Malformed,
                            format!("a content digest for entry {i}, unknown or twice"),
                        ));
                    }
                }
            }
            Message::DigestsEnd => return Ok(out),
            Message::Alive { .. } => {}
            _ => {
                return Err(SessionError::local(
                    ErrorCode::Malformed,
                    "expected content digests",
                ))
            }
        }
    }
}

/// How the sending side reads and paces.
pub(crate) struct PushParams {
    pub(crate) block_size: u32,
    pub(crate) zerocopy: ZeroCopy,
    pub(crate) rate_limit_bytes_per_s: Option<f64>,
    /// A stream stalled for half of this is given up; no stream moving for
    /// all of it ends the session.
    pub(crate) timeout: Duration,
    /// Seal every frame with these keys.
    pub(crate) seal: Sealing,
}

/// What the receiver holds already (it said so when the session resumed).
#[derive(Debug, Default)]
pub(crate) struct Held {
    /// Files complete under their final names: entry -> digest.
    pub(crate) complete: HashMap<u32, u64>,
    /// Files partly there: entry -> (digest of the blocks held, block ranges).
    pub(crate) partial: HashMap<u32, (u64, Vec<(u64, u64)>)>,
}

impl Held {
    /// Payload bytes the receiver needs no more.
    pub(crate) fn bytes(&self, tree: &Tree, block: u64) -> u64 {
        let complete: u64 = self
            .complete
            .keys()
            .map(|&i| tree.entries[i as usize].size)
            .sum();
        let partial: u64 = self
            .partial
            .iter()
            .map(|(&i, (_, ranges))| {
                let size = tree.entries[i as usize].size;
                ranges
                    .iter()
                    .flat_map(|&(first, count)| first..first + count)
                    .map(|b| (size - b * block).min(block))
                    .sum::<u64>()
            })
            .sum();
        complete + partial
    }

    /// Take `Have` parts until their end, each checked against the manifest.
    pub(crate) fn receive(
        ctl: &mut Control,
        tree_entries: &[crate::protocol::manifest::Entry],
        block: u64,
    ) -> Result<Held, SessionError> {
        let mut held = Held::default();
        loop {
            let items = match recv_msg(ctl)? {
                Message::Have(items) => items,
                Message::HaveEnd => return Ok(held),
                Message::Alive { .. } => continue,
                _ => {
                    return Err(SessionError::Protocol(
                        "expected what the receiver holds".into(),
                    ))
                }
            };
            for it in items {
                let i = it.file_index();
                let e = tree_entries
                    .get(i as usize)
                    .filter(|e| e.kind == EntryKind::File)
                    .ok_or_else(|| {
                        SessionError::Protocol(format!("the receiver holds unknown entry {i}"))
                    })?;
                match it {
                    HaveItem::Complete { digest, .. } => {
                        if held.partial.contains_key(&i) {
                            return Err(SessionError::Protocol(format!(
                                "the receiver holds entry {i} both complete and in part"
                            )));
                        }
                        held.complete.insert(i, digest);
                    }
                    HaveItem::Partial { digest, ranges, .. } => {
                        let blocks = e.size.div_ceil(block);
                        if ranges.iter().any(|&(f, c)| f + c > blocks) {
                            return Err(SessionError::Protocol(format!(
                                "the receiver holds blocks past the end of entry {i}"
                            )));
                        }
                        let slot = held.partial.entry(i).or_insert((digest, Vec::new()));
                        slot.1.extend(ranges);
                        // Sorted, not overlapping, within the file: what a
                        // file holds is never more than its blocks.
                        slot.1.sort_unstable();
                        if slot.1.windows(2).any(|w| w[0].0 + w[0].1 > w[1].0)
                            || held.complete.contains_key(&i)
                        {
                            return Err(SessionError::Protocol(format!(
                                "the receiver holds overlapping blocks of entry {i}"
                            )));
                        }
                    }
                }
            }
        }
    }

    /// Tell the sender what is held, in parts within the message limits.
    pub(crate) fn send(ctl: &mut Control, items: Vec<HaveItem>) -> Result<(), SessionError> {
        use crate::protocol::control::{HAVE_PART_RANGES_MAX, LIST_PART_ITEMS_MAX};
        let mut part: Vec<HaveItem> = Vec::new();
        let mut ranges_in_part = 0u32;
        let mut flush = |part: &mut Vec<HaveItem>, n: &mut u32| -> Result<(), SessionError> {
            if !part.is_empty() {
                send_msg(ctl, &Message::Have(std::mem::take(part)))?;
            }
            *n = 0;
            Ok(())
        };
        for it in items {
            let pieces = match it {
                HaveItem::Partial {
                    file_index,
                    digest,
                    ranges,
                } => ranges
                    .chunks(HAVE_PART_RANGES_MAX as usize / 2)
                    .map(|c| HaveItem::Partial {
                        file_index,
                        digest,
                        ranges: c.to_vec(),
                    })
                    .collect(),
                c => vec![c],
            };
            for piece in pieces {
                let n = match &piece {
                    HaveItem::Partial { ranges, .. } => ranges.len() as u32,
                    HaveItem::Complete { .. } => 0,
                };
                if part.len() as u32 >= LIST_PART_ITEMS_MAX
                    || ranges_in_part + n > HAVE_PART_RANGES_MAX
                {
                    flush(&mut part, &mut ranges_in_part)?;
                }
                ranges_in_part += n;
                part.push(piece);
            }
        }
        flush(&mut part, &mut ranges_in_part)?;
        send_msg(ctl, &Message::HaveEnd)
    }
}

/// Opens entry `i`'s source: (file, whether O_DIRECT is in force).
pub(crate) type Opener<'a> = dyn Fn(usize) -> Result<(File, bool), SessionError> + Sync + 'a;

/// What a push did.
pub(crate) struct Pushed {
    /// Each entry's digest (blocks held by the receiver included).
    pub(crate) digests: Vec<u64>,
    pub(crate) stats: SendStats,
    /// Streams given up, with why.
    pub(crate) lost: Vec<String>,
    /// Frames sent again after their stream was lost.
    pub(crate) resent: u64,
}

/// What was done about lost streams.
#[derive(Debug, Default)]
struct Repair {
    /// Streams given up, with why.
    lost: Vec<String>,
    /// Frames sent again.
    resent: u64,
}

/// A frame sent on a stream, remembered until its file is acknowledged so
/// it can go again if the stream is lost.
#[derive(Debug, Clone, Copy)]
struct Sent {
    entry: u32,
    offset: u64,
    len: u32,
    checksum: u64,
    hole: bool,
    /// Where the frame ends in its stream's bytes: once the receiver says
    /// it took this many, the frame arrived.
    end: u64,
}

/// Frames remembered over all streams, at most (beyond, a lost stream
/// cannot be made good and ends the session): about 200 MiB.
const SENT_RECORDS_MAX: usize = 1 << 22;

/// Frames each stream carried, for re-sending when a stream is lost.
struct Ledger<'a> {
    sent: Vec<Vec<Sent>>,
    prune_at: Vec<usize>,
    /// Records were dropped past the bound: this stream cannot be re-sent.
    overflowed: Vec<bool>,
    acked: Option<&'a Acks>,
    /// Bytes queued on each stream so far (headers, payloads, tags).
    queued: Vec<u64>,
    /// Frames carry a tag.
    sealed: bool,
    total: usize,
}

/// Which files the receiver acknowledged, shared with the reader of its
/// acknowledgements.
pub(crate) struct Acks {
    pub(crate) acked: Vec<AtomicBool>,
    /// Files acknowledged or complete before the run, for progress.
    pub(crate) files_done: Arc<AtomicU64>,
    /// The reader stopped (summary, error or silence): wait no more.
    pub(crate) ended: AtomicBool,
    /// Bytes each data stream delivered, as the receiver last said.
    pub(crate) received: Vec<AtomicU64>,
    /// Whether the receiver last said a receive waits on each stream.
    pub(crate) waiting: Vec<AtomicBool>,
}

impl Acks {
    fn has(&self, entry: u32) -> bool {
        self.acked[entry as usize].load(Ordering::Relaxed)
    }

    fn all(&self) -> bool {
        self.acked.iter().all(|a| a.load(Ordering::Relaxed))
    }

    fn received_by(&self, stream: u32) -> u64 {
        self.received
            .get(stream as usize)
            .map_or(0, |a| a.load(Ordering::Relaxed))
    }

    fn waiting_on(&self, stream: u32) -> bool {
        self.waiting
            .get(stream as usize)
            .is_some_and(|a| a.load(Ordering::Relaxed))
    }
}

impl Ledger<'_> {
    fn record(&mut self, stream: u32, mut s: Sent) {
        let st = stream as usize;
        let payload = if s.hole { 0 } else { u64::from(s.len) };
        let tag = if self.sealed {
            crate::protocol::seal::TAG_LEN as u64
        } else {
            0
        };
        self.queued[st] += FRAME_HEADER_LEN as u64 + payload + tag;
        s.end = self.queued[st];
        if self.sent[st].len() >= self.prune_at[st] {
            // Forget what arrived (the receiver said so) or whose file is
            // acknowledged.
            if let Some(acks) = self.acked {
                let arrived = acks.received_by(stream);
                let before = self.sent[st].len();
                self.sent[st].retain(|r| r.end > arrived && !acks.has(r.entry));
                self.total -= before - self.sent[st].len();
            }
            self.prune_at[st] = (self.sent[st].len() * 2).max(4096);
        }
        if self.total >= SENT_RECORDS_MAX {
            self.overflowed[st] = true;
            return;
        }
        self.total += 1;
        self.sent[st].push(s);
    }

    /// Whether record `r` of `stream` still has to go again.
    fn undelivered(&self, stream: u32, r: &Sent) -> bool {
        self.acked
            .is_none_or(|a| !a.has(r.entry) && r.end > a.received_by(stream))
    }
}

/// The next stream still taking frames, round-robin from `*next`.
fn pick(tx: &NetSender, next: &mut u32, n: u32) -> u32 {
    for _ in 0..n {
        let s = *next;
        *next = (*next + 1) % n;
        if tx.is_live(s) {
            return s;
        }
    }
    // None live: the caller sees that from the lost streams.
    *next
}

/// Read every file block by block into frame buffers and queue the frames
/// round-robin on the streams, skipping what the receiver `held` already.
/// A stream that fails or stalls is given up and what it carried (of files
/// not yet `acked`) goes again on the others.
#[allow(clippy::too_many_arguments)]
pub(crate) fn push_data(
    params: &PushParams,
    tree: &Tree,
    held: &Held,
    acked: Option<&Acks>,
    open: &Opener<'_>,
    streams: &[TcpStream],
    counters: &WorkerCounters,
    stop: &AtomicBool,
) -> Result<Pushed, SessionError> {
    let cfg = params;
    let fds: Vec<i32> = streams.iter().map(|s| s.as_raw_fd()).collect();
    let n_streams = fds.len() as u32;
    // Buffers wait in the disk read, then in the socket: room for both.
    let bufs = super::buffer_count(streams.len(), cfg.block_size, 4, 4)?;
    let mut tx = NetSender::with_file_slots(
        &fds,
        bufs,
        cfg.block_size as usize,
        cfg.zerocopy,
        READ_FILE_SLOTS,
    )?;
    tx.set_stall_limit(cfg.timeout);
    tx.publish_stream_bytes(counters.streams());
    if let Some((keys, dir)) = &cfg.seal {
        tx.seal_with(keys, *dir);
    }
    let mut digests = vec![0u64; tree.entries.len()];
    for (&i, (digest, _)) in &held.partial {
        digests[i as usize] = *digest;
    }
    let block = u64::from(cfg.block_size);
    let mut next_stream = 0u32;
    let mut pacer = Pacer::new(cfg.rate_limit_bytes_per_s);
    let mut ledger = Ledger {
        sent: vec![Vec::new(); fds.len()],
        prune_at: vec![4096; fds.len()],
        overflowed: vec![false; fds.len()],
        acked,
        queued: vec![0; fds.len()],
        sealed: cfg.seal.is_some(),
        total: 0,
    };
    let mut repair = Repair::default();
    // Reads in flight, by token: (entry, offset, payload bytes, open-file index).
    let reads_max = (bufs / 2).max(1);
    let mut reads: Vec<Option<(usize, u64, usize, usize)>> = vec![None; reads_max];
    let mut free_tokens: Vec<u32> = (0..reads_max as u32).rev().collect();
    let mut open_files: Vec<Source> = Vec::new();
    let mut files = tree
        .entries
        .iter()
        .enumerate()
        .filter(|(i, e)| {
            e.kind == EntryKind::File && e.size > 0 && !held.complete.contains_key(&(*i as u32))
        })
        .map(|(i, _)| i);
    let mut current: Option<usize> = None; // index into open_files
    let name = |i: usize| tree.sources[i].display().to_string();
    loop {
        if stop.load(Ordering::Relaxed) {
            return Err(SessionError::local(ErrorCode::Io, "interrupted"));
        }
        // Issue reads while buffers and tokens last.
        while !free_tokens.is_empty() {
            let cur = match current {
                Some(c) if open_files[c].next < open_files[c].size => c,
                _ => {
                    let Some(i) = files.next() else { break };
                    let (file, direct) = open(i)?;
                    let sparse = file.metadata().is_ok_and(|m| {
                        use std::os::unix::fs::MetadataExt;
                        m.blocks() * 512 < m.len()
                    });
                    let slot = tx.attach_file(file.as_raw_fd())?;
                    let mut skip = held
                        .partial
                        .get(&(i as u32))
                        .map(|(_, r)| r.clone())
                        .unwrap_or_default();
                    skip.sort_unstable();
                    open_files.push(Source {
                        entry: i,
                        file,
                        direct,
                        sparse,
                        slot,
                        size: tree.entries[i].size,
                        next: 0,
                        reads: 0,
                        skip,
                    });
                    current = Some(open_files.len() - 1);
                    open_files.len() - 1
                }
            };
            let src = &mut open_files[cur];
            src.skip_held(block);
            if src.next >= src.size {
                continue;
            }
            // Paced: reads already issued go out before waiting for more.
            let next_len = (src.size - src.next).min(block);
            if free_tokens.len() < reads_max && pacer.delay(next_len).is_some() {
                break;
            }
            let Some(mut lease) = tx.take_buffer() else {
                break;
            };
            let (i, offset) = (src.entry, src.next);
            let n = (src.size - offset).min(block) as usize;
            src.next += n as u64;
            if src.sparse && is_hole(&src.file, offset, n as u64) {
                if offset + n as u64 == src.size {
                    if let Err(e) = check_unchanged(&src.file, &tree.entries[i], &name(i)) {
                        tx.give_back(lease);
                        return Err(e);
                    }
                }
                let h = FrameHeader::hole(i as u32, offset);
                let sum = hole_checksum(i as u32, offset, n as u64);
                digests[i] = digest_add(digests[i], sum);
                let st = pick(&tx, &mut next_stream, n_streams);
                ledger.record(
                    st,
                    Sent {
                        entry: i as u32,
                        offset,
                        len: n as u32,
                        checksum: sum,
                        hole: true,
                        end: 0,
                    },
                );
                tx.queue(st, lease, &h);
                continue;
            }
            pacer.admit(n as u64, &mut tx)?;
            let want = if src.direct {
                n.div_ceil(4096) * 4096
            } else {
                n
            };
            match src.slot {
                Some(slot) => {
                    // O_DIRECT READ_FIXED into the frame buffer itself.
                    let token = free_tokens.pop().expect("checked above");
                    reads[token as usize] = Some((i, offset, n, cur));
                    src.reads += 1;
                    tx.read(slot, offset, lease, want as u32, token);
                }
                None => {
                    // Every slot busy: read here, into the same buffer.
                    let got = read_full(&src.file, &mut payload_mut(&mut lease)[..want], offset, n)
                        .map_err(|e| SessionError::io(name(i), e))?;
                    if got < n {
                        tx.give_back(lease);
                        return Err(changed(&name(i), "it is shorter than when the send began"));
                    }
                    if offset + n as u64 == src.size {
                        if let Err(e) = check_unchanged(&src.file, &tree.entries[i], &name(i)) {
                            tx.give_back(lease);
                            return Err(e);
                        }
                    }
                    let block = Block {
                        entry: i,
                        offset,
                        len: n,
                    };
                    let st = pick(&tx, &mut next_stream, n_streams);
                    queue_block(&mut tx, &mut ledger, st, &mut digests, block, lease);
                    counters.add(n as u64, 1);
                }
            }
        }
        let reads_in_flight = reads_max - free_tokens.len();
        if reads_in_flight == 0 && current.is_none_or(|c| open_files[c].next >= open_files[c].size)
        {
            // The issue loop above opens the next file before it asks for a
            // buffer, so an exhausted current file here means none is left.
            break;
        }
        tx.poll(true)?;
        while let Some((token, result, lease)) = tx.take_read() {
            let (i, offset, n, of) = reads[token as usize].take().expect("a read in flight");
            free_tokens.push(token);
            open_files[of].reads -= 1;
            if result < 0 || (result as usize) < n {
                tx.give_back(lease);
                if result < 0 {
                    return Err(SessionError::io(
                        name(i),
                        std::io::Error::from_raw_os_error(-result),
                    ));
                }
                return Err(changed(&name(i), "it is shorter than when the send began"));
            }
            // Before a file's last block goes, the file must still be what
            // the manifest said: the receiver finishes it on that block.
            if offset + n as u64 == tree.entries[i].size {
                if let Err(e) = check_unchanged(&open_files[of].file, &tree.entries[i], &name(i)) {
                    tx.give_back(lease);
                    return Err(e);
                }
            }
            let st = pick(&tx, &mut next_stream, n_streams);
            let block = Block {
                entry: i,
                offset,
                len: n,
            };
            queue_block(&mut tx, &mut ledger, st, &mut digests, block, lease);
            counters.add(n as u64, 1);
        }
        resend_lost(
            &mut tx,
            &mut ledger,
            open,
            tree,
            &mut next_stream,
            counters,
            &mut repair,
        )?;
        // Close sources that are read through (keeping `current` in place),
        // and check each is still what the manifest said.
        let mut k = 0;
        while k < open_files.len() {
            let f = &open_files[k];
            if f.reads == 0 && f.next >= f.size && Some(k) != current {
                check_unchanged(&f.file, &tree.entries[f.entry], &name(f.entry))?;
                if let Some(slot) = f.slot {
                    tx.detach_file(slot);
                }
                open_files.swap_remove(k);
                // Keep indexes stable for reads in flight and `current`.
                let moved = open_files.len();
                if current == Some(moved) {
                    current = Some(k);
                }
                for r in reads.iter_mut().flatten() {
                    if r.3 == moved {
                        r.3 = k;
                    }
                }
            } else {
                k += 1;
            }
        }
    }
    for f in &open_files {
        check_unchanged(&f.file, &tree.entries[f.entry], &name(f.entry))?;
        if let Some(slot) = f.slot {
            tx.detach_file(slot);
        }
    }
    while tx.busy() {
        tx.poll(true)?;
        resend_lost(
            &mut tx,
            &mut ledger,
            open,
            tree,
            &mut next_stream,
            counters,
            &mut repair,
        )?;
    }
    // Everything is in the sockets. Keep the streams until every file is
    // acknowledged, and give up a stream that (a) its kernel says is no
    // longer connected, (b) holds bytes that stopped leaving its socket
    // while other streams' bytes still leave theirs, or (c) had every byte
    // acknowledged by the peer's TCP yet delivered to a receiver waiting
    // for it never arrived (a middlebox or path holding them). A receiver
    // that is only slow (its disk pauses) trips none of these.
    if let Some(acks) = acked {
        let half = cfg.timeout / 2;
        let start = Instant::now();
        let mut outq: Vec<(usize, Instant)> = vec![(0, start); fds.len()];
        let mut arrived: Vec<(u64, Instant)> = vec![(0, start); fds.len()];
        let mut outq_moved = start;
        while !acks.all() && !acks.ended.load(Ordering::Acquire) {
            if stop.load(Ordering::Relaxed) {
                return Err(SessionError::local(ErrorCode::Io, "interrupted"));
            }
            if tx.busy() {
                tx.poll(true)?;
            } else {
                std::thread::sleep(Duration::from_millis(20));
            }
            let now = Instant::now();
            let mut stuck = Vec::new();
            for st in 0..fds.len() as u32 {
                if !tx.is_live(st) {
                    continue;
                }
                if sys::tcp_progress(fds[st as usize]).is_some_and(|t| !t.connected) {
                    tx.lose(
                        st,
                        std::io::Error::new(
                            std::io::ErrorKind::ConnectionReset,
                            "the connection closed",
                        ),
                    );
                    continue;
                }
                let q = tx.unacknowledged(st);
                let (last, since) = &mut outq[st as usize];
                if q < *last {
                    outq_moved = now;
                }
                if q == 0 || q != *last {
                    (*last, *since) = (q, now);
                } else if now.duration_since(*since) > half {
                    stuck.push((st, q));
                }
                let got = acks.received_by(st);
                let (last, since) = &mut arrived[st as usize];
                if got >= tx.stream_bytes(st) || got != *last || q != 0 || !acks.waiting_on(st) {
                    (*last, *since) = (got, now);
                } else if now.duration_since(*since) > half {
                    let behind = tx.stream_bytes(st) - got;
                    tx.lose(
                        st,
                        std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            format!(
                                "stalled: {behind} bytes the peer's TCP took never reached the receiver in {} s",
                                half.as_secs()
                            ),
                        ),
                    );
                }
            }
            if now.duration_since(outq_moved) < half {
                for (st, q) in stuck {
                    tx.lose(
                        st,
                        std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            format!(
                                "stalled: {q} bytes unacknowledged for {} s while other streams moved",
                                half.as_secs()
                            ),
                        ),
                    );
                }
            }
            resend_lost(
                &mut tx,
                &mut ledger,
                open,
                tree,
                &mut next_stream,
                counters,
                &mut repair,
            )?;
        }
    }
    Ok(Pushed {
        digests,
        stats: tx.stats(),
        lost: repair.lost,
        resent: repair.resent,
    })
}

/// A block of a source file, read into a frame buffer.
#[derive(Debug, Clone, Copy)]
struct Block {
    entry: usize,
    offset: u64,
    len: usize,
}

/// Checksum a block read into `lease`, add it to its file's digest, and
/// queue it on `stream`, remembered for sending again should it be lost.
fn queue_block(
    tx: &mut NetSender,
    ledger: &mut Ledger<'_>,
    stream: u32,
    digests: &mut [u64],
    b: Block,
    mut lease: crate::datapath::Lease,
) {
    let h = FrameHeader::for_payload(
        b.entry as u32,
        b.offset,
        &payload_mut(&mut lease)[..b.len],
        0,
    );
    digests[b.entry] = digest_add(digests[b.entry], h.checksum);
    ledger.record(
        stream,
        Sent {
            entry: b.entry as u32,
            offset: b.offset,
            len: b.len as u32,
            checksum: h.checksum,
            hole: false,
            end: 0,
        },
    );
    tx.queue(stream, lease, &h);
}

fn changed(name: &str, how: &str) -> SessionError {
    SessionError::local(
        ErrorCode::Io,
        format!("{name}: changed during the send ({how}); send it again when it is complete"),
    )
}

/// A source read through must still have the size and mtime the manifest
/// announced: a file still being written is reported, not sent half-old.
fn check_unchanged(
    file: &File,
    e: &crate::protocol::manifest::Entry,
    name: &str,
) -> Result<(), SessionError> {
    use std::os::unix::fs::MetadataExt;
    let m = file
        .metadata()
        .map_err(|err| SessionError::io(name.to_string(), err))?;
    if m.len() != e.size {
        return Err(changed(name, &format!("size {} -> {}", e.size, m.len())));
    }
    if m.mtime() != e.mtime_s || m.mtime_nsec() as u32 != e.mtime_ns {
        return Err(changed(name, "modified"));
    }
    Ok(())
}

/// Send again, on the streams left, every frame a lost stream carried of
/// files not yet acknowledged. The data is read again and must still have
/// the checksum it had (the receiver drops blocks it already holds).
fn resend_lost(
    tx: &mut NetSender,
    ledger: &mut Ledger<'_>,
    open: &Opener<'_>,
    tree: &Tree,
    next_stream: &mut u32,
    counters: &WorkerCounters,
    repair: &mut Repair,
) -> Result<(), SessionError> {
    let n_streams = ledger.sent.len() as u32;
    loop {
        let lost = tx.take_lost();
        if lost.is_empty() {
            return Ok(());
        }
        for (s, why) in lost {
            repair.lost.push(format!("stream {s}: {why}"));
            let all_acked = ledger.acked.is_some_and(Acks::all);
            if all_acked {
                // The receiver has every file: it may close streams early.
                continue;
            }
            if tx.live_count() == 0 {
                return Err(SessionError::io(
                    format!(
                        "every data stream was lost: the receiver stopped taking data or closed them (last, stream {s})"
                    ),
                    why,
                ));
            }
            if ledger.overflowed[s as usize] {
                return Err(SessionError::io(
                    format!("stream {s} was lost with more frames than can be sent again"),
                    why,
                ));
            }
            let records = std::mem::take(&mut ledger.sent[s as usize]);
            ledger.total -= records.len();
            let mut sources: HashMap<u32, (File, bool)> = HashMap::new();
            for r in records {
                if !ledger.undelivered(s, &r) {
                    continue;
                }
                let mut lease = loop {
                    match tx.take_buffer() {
                        Some(l) => break l,
                        None => tx.poll(true)?,
                    }
                };
                let h = if r.hole {
                    FrameHeader::hole(r.entry, r.offset)
                } else {
                    let (file, direct) = match sources.entry(r.entry) {
                        std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
                        std::collections::hash_map::Entry::Vacant(v) => {
                            v.insert(open(r.entry as usize)?)
                        }
                    };
                    let n = r.len as usize;
                    let want = if *direct { n.div_ceil(4096) * 4096 } else { n };
                    let name = tree.sources[r.entry as usize].display().to_string();
                    let got = read_full(file, &mut payload_mut(&mut lease)[..want], r.offset, n);
                    let h = FrameHeader::for_payload(
                        r.entry,
                        r.offset,
                        &payload_mut(&mut lease)[..n],
                        0,
                    );
                    match got {
                        Ok(got) if got >= n && h.checksum == r.checksum => h,
                        Ok(_) => {
                            tx.give_back(lease);
                            return Err(changed(&name, "a block read again differs"));
                        }
                        Err(e) => {
                            tx.give_back(lease);
                            return Err(SessionError::io(name, e));
                        }
                    }
                };
                let st = pick(tx, next_stream, n_streams);
                ledger.record(st, r);
                tx.queue(st, lease, &h);
                counters.add(u64::from(r.len) * u64::from(!r.hole), 1);
                repair.resent += 1;
            }
        }
    }
}

/// Source files read through the sending ring at once (registered slots).
const READ_FILE_SLOTS: u32 = 8;

/// A source file being read.
struct Source {
    entry: usize,
    file: File,
    direct: bool,
    sparse: bool,
    slot: Option<u32>,
    size: u64,
    /// Next offset to read.
    next: u64,
    /// Reads in flight.
    reads: u32,
    /// Block ranges (first, count) the receiver holds, sorted.
    skip: Vec<(u64, u64)>,
}

impl Source {
    /// Move `next` past blocks the receiver holds already.
    fn skip_held(&mut self, block: u64) {
        while let Some(&(first, count)) = self.skip.first() {
            let b = self.next / block;
            // At the end of the file nothing is left to skip (a held range
            // ending with a short last block would otherwise loop forever).
            if b >= first + count || self.next >= self.size {
                self.skip.remove(0);
            } else if b >= first {
                self.next = ((first + count) * block).min(self.size);
            } else {
                break;
            }
        }
    }
}

/// Read at least `n` bytes at `offset` into `buf` (up to its length);
/// returns how many arrived (fewer than `n` only at end of file).
fn read_full(file: &File, buf: &mut [u8], offset: u64, n: usize) -> std::io::Result<usize> {
    let mut got = 0;
    while got < n {
        let r = file.read_at(&mut buf[got..], offset + got as u64)?;
        if r == 0 {
            break;
        }
        got += r;
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(size: u64, skip: Vec<(u64, u64)>) -> Source {
        Source {
            entry: 0,
            file: tempfile::tempfile().unwrap(),
            direct: false,
            sparse: false,
            slot: None,
            size,
            next: 0,
            reads: 0,
            skip,
        }
    }

    #[test]
    fn held_blocks_are_skipped_up_to_a_short_last_block() {
        let block = 4096;
        let mut s = source(10 * block + 5, vec![(0, 2), (4, 1), (9, 2)]);
        s.skip_held(block);
        assert_eq!(s.next, 2 * block, "the first two blocks are held");
        s.next = 4 * block;
        s.skip_held(block);
        assert_eq!(s.next, 5 * block);
        // The last range ends with the short last block: the file is done
        // (this once looped forever), on a thread so a regression fails.
        s.next = 9 * block;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            s.skip_held(block);
            let _ = tx.send((s.next, s.size, s.skip.len()));
        });
        let (next, size, left) = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("skip_held returns");
        assert_eq!((next, left), (size, 0));
    }
}
