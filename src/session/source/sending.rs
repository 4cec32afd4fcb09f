//! The sending side of a transfer, shared by the client (push) and the
//! daemon (pull): read every file block by block into frame buffers
//! (O_DIRECT `READ_FIXED`), checksum each block, hand each frame to the
//! next data stream that can take it, and announce each file's digest once it
//! is read through, so the receiver can commit it. A source that cannot be
//! read (vanished, unreadable, replaced, changed while sent) is skipped and
//! the receiver told; the rest goes on. A stream that fails or stalls is
//! given up and what it carried (of files not yet acknowledged) goes again
//! on the others.
//!
//! This module runs the lanes of a push (`push_data`) and opens its
//! sources; each lane is a state machine of its own (`pusher`).

use std::fs::File;
use std::net::TcpStream;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use crate::coord::WorkerCounters;
use crate::datapath::beneath::FileId;
use crate::datapath::net::{NetSender, SendStats, ZeroCopy};
use crate::protocol::control::Message;
use crate::protocol::frame::FrameKey;
use crate::protocol::handshake::SessionKeys;

use super::follow::Follower;
pub(crate) use super::ledger::{Acks, Sent};
use super::pusher::{push_lane, LanesShare};
use super::work::Work;
use crate::session::link::conn::{send_msg, Control};
use crate::session::link::lanes::{self, Lane, LaneReport, Lanes};
use crate::session::plan::held::Held;
use crate::session::plan::route::Route;
use crate::session::plan::tree::Tree;
use crate::session::plan::unsendable::Unsendable;
use crate::session::SessionError;

/// Source files read through the sending ring at once (registered slots).
const READ_FILE_SLOTS: u32 = 8;
/// Frames remembered over all streams, at most (beyond, a lost stream
/// cannot be made good and ends the session): about 200 MiB.
pub(in crate::session) const SENT_RECORDS_MAX: usize = 1 << 22;

/// How the sending side reads and paces.
pub(crate) struct PushParams {
    pub(crate) block_size: u32,
    /// Frame buffers to register (see `session::buffer_count`).
    pub(crate) buffers: usize,
    pub(crate) zerocopy: ZeroCopy,
    pub(crate) rate_limit_bytes_per_s: Option<f64>,
    /// A stream stalled for half of this is given up; no stream moving for
    /// all of it ends the session.
    pub(crate) timeout: Duration,
    /// Seal every frame with these keys.
    pub(crate) seal: crate::session::link::streams::Sealing,
    /// The session's frame checksum key (`seal::frame_key`).
    pub(crate) key: FrameKey,
    /// `--sparse`: runs of zeros inside data go as holes too.
    pub(crate) zeros: bool,
}

impl PushParams {
    /// Key the session's frames with `keys` (known after the handshake):
    /// checksums always, sealing too when `seal` gives a direction.
    pub(crate) fn key_with(
        &mut self,
        keys: SessionKeys,
        seal: Option<crate::protocol::seal::Direction>,
    ) {
        self.key = crate::protocol::seal::frame_key(&keys);
        self.seal = seal.map(|dir| (keys, dir));
    }
}

/// Opens entry `i`'s source: (file, whether O_DIRECT is in force), or why
/// it cannot be sent (the entry is then skipped).
pub(crate) type Opener<'a> = dyn Fn(usize) -> Result<(File, bool), Unsendable> + Sync + 'a;

/// Where the sending side tells the receiver what it learns of files as
/// it reads them.
pub(crate) trait Announce {
    /// Entry `i` was read through, unchanged: its digest.
    fn digest(&mut self, i: u32, digest: u64);
    /// Entry `i` cannot be sent: why.
    fn skipped(&mut self, i: u32, why: &str);
    /// Send what was announced since the last flush.
    fn flush(&mut self) -> Result<(), SessionError>;
}

/// Announcements on a control connection: digests batched per tick,
/// skipped entries one message each.
pub(crate) struct ControlAnnounce {
    ctl: Control,
    digests: Vec<(u32, u64)>,
    skips: Vec<(u32, String)>,
}

impl ControlAnnounce {
    pub(crate) fn new(ctl: &Control) -> Result<Self, SessionError> {
        Ok(ControlAnnounce {
            ctl: ctl.try_clone()?,
            digests: Vec::new(),
            skips: Vec::new(),
        })
    }
}

impl Announce for ControlAnnounce {
    fn digest(&mut self, i: u32, digest: u64) {
        self.digests.push((i, digest));
    }

    fn skipped(&mut self, i: u32, why: &str) {
        self.skips.push((i, why.to_string()));
    }

    fn flush(&mut self) -> Result<(), SessionError> {
        use crate::protocol::control::LIST_PART_ITEMS_MAX;
        for (file_index, reason) in std::mem::take(&mut self.skips) {
            let r = crate::session::link::refused::Refused::entry(
                file_index,
                crate::session::link::refused::Why::fault(reason),
            );
            send_msg(&mut self.ctl, &r.message())?;
        }
        while !self.digests.is_empty() {
            let n = self.digests.len().min(LIST_PART_ITEMS_MAX as usize);
            let part: Vec<_> = self.digests.drain(..n).collect();
            send_msg(&mut self.ctl, &Message::SourceDigests(part))?;
        }
        Ok(())
    }
}

/// What a push did.
pub(crate) struct Pushed {
    /// Each entry's digest (blocks held by the receiver included).
    pub(crate) digests: Vec<u64>,
    pub(crate) stats: SendStats,
    /// Streams given up, with why.
    pub(crate) lost: Vec<String>,
    /// Frames sent again after their stream was lost.
    pub(crate) resent: u64,
    /// Entries that could not be sent: (entry, why).
    pub(crate) skipped: Vec<(u32, String)>,
    /// Where each lane ran and what it took.
    pub(crate) lanes: Vec<LaneReport>,
    /// What a follow could not add or send, and why.
    pub(crate) follow_skipped: Vec<crate::session::link::refused::Refused>,
}

/// prepared as `params` say, its share of the buffers registered now
/// (before any peer is contacted); [`push_data`] starts them.
pub(crate) fn prepare_senders(
    want: Lanes,
    streams: u16,
    carrying: u16,
    params: &PushParams,
) -> Result<(Vec<Lane>, Vec<NetSender>), SessionError> {
    let block = params.block_size as usize;
    lanes::prepare(want, streams, carrying, params.buffers, |n, b| {
        NetSender::prepare(n, b, block, params.zerocopy, READ_FILE_SLOTS)
    })
}

/// Where a push reads and what it tells: the sources, what the receiver
/// holds, its acknowledgements, how to open entry `i`, where to announce.
pub(crate) struct Sources<'a> {
    pub(crate) tree: &'a Tree,
    pub(crate) held: &'a Held,
    pub(crate) acked: Option<&'a Acks>,
    pub(crate) open: &'a Opener<'a>,
    pub(crate) announce_on: &'a Control,
    /// Where the receiver writes each file (its placement by device).
    pub(crate) route: &'a Route,
    /// `send --follow`: how it follows.
    pub(crate) follow: Option<&'a super::follow::FollowCtx<'a>>,
    /// A streamed push (protocol 14): the walk that goes on.
    pub(crate) stream: Option<&'a super::stream::StreamCtx<'a>>,
}

/// The data streams a push goes out on: the lanes of its plan, the
/// streams themselves, and each lane's sender (from [`prepare_senders`]).
pub(crate) struct DataStreams<'a> {
    pub(crate) plan: &'a [Lane],
    pub(crate) streams: &'a [TcpStream],
    pub(crate) txs: Vec<NetSender>,
}

/// Read every file block by block into frame buffers and hand the frames
/// to the streams as they can take them, skipping what the receiver held
/// already, announcing digests and skipped entries on the control
/// connection. Each lane of `on.plan` (its sender in `on.txs`) takes pieces
/// of the work in turn on its own streams; a lane that loses every stream
/// hands its frames to the others.
pub(crate) fn push_data(
    params: &PushParams,
    from: &Sources<'_>,
    on: DataStreams<'_>,
    counters: &WorkerCounters,
    stop: &AtomicBool,
) -> Result<Pushed, SessionError> {
    let DataStreams { plan, streams, txs } = on;
    let block = u64::from(params.block_size);
    let adding = from.follow.is_some() || from.stream.is_some();
    let work = Work::routed(from.tree, from.held, plan, from.route, block, adding);
    let fds = crate::session::link::streams::fds_of(streams);
    let plan = lanes::near_nic(plan, &fds);
    let mut follower = match from.follow {
        Some(ctx) => Some(Follower::new(from, ctx, &work, block)?),
        None => None,
    };
    let mut streamer = match from.stream {
        Some(ctx) => Some(super::stream::Streamer::new(from, ctx, &work)?),
        None => None,
    };
    let shared = LanesShare {
        work: &work,
        counters,
        stop,
        fds: &fds,
    };
    let (results, followed) = std::thread::scope(|scope| {
        let followed = follower.as_mut().map(|f| scope.spawn(|| f.run(stop)));
        let streamed = streamer.as_mut().map(|s| scope.spawn(|| s.run(stop)));
        let results = lanes::run(&plan, txs, &|lane, tx| {
            let others = lanes::StopOthers(work.failed_flag());
            others.on(push_lane(params, from, lane, &shared, tx))
        });
        let joined = |h: std::thread::ScopedJoinHandle<'_, _>, who: &str| {
            h.join()
                .unwrap_or_else(|_| Err(SessionError::Protocol(format!("the {who} panicked"))))
        };
        let followed = followed.map(|h| joined(h, "follower"));
        let streamed = streamed.map(|h| joined(h, "streamer"));
        (results, followed.or(streamed))
    });
    // The follower's error (a file truncated) is why the lanes stopped.
    if let Some(Err(e)) = followed {
        return Err(e);
    }
    let mut pushed = Pushed {
        digests: Vec::new(),
        stats: SendStats::default(),
        lost: Vec::new(),
        resent: 0,
        skipped: Vec::new(),
        lanes: Vec::new(),
        follow_skipped: match (follower, streamer) {
            (Some(f), _) => f.skipped,
            (None, Some(s)) => s.skipped,
            (None, None) => Vec::new(),
        },
    };
    let mut stats = Vec::new();
    let mut first_error = None;
    for (r, mut report) in results {
        report.bytes = r.as_ref().map_or(0, |l| l.stats.bytes);
        pushed.lanes.push(report);
        match r {
            Ok(l) => {
                stats.push(l.stats);
                pushed.lost.extend(l.lost);
                pushed.resent += l.resent;
                pushed.skipped.extend(l.skipped);
            }
            // A lane stopped because another failed: that one's error says why.
            Err(e @ SessionError::AnotherLaneFailed) => {
                first_error.get_or_insert(e);
            }
            Err(e) => return Err(e),
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    pushed.stats = SendStats::sum(&stats);
    pushed.digests = work.digests();
    Ok(pushed)
}

/// Check a just-opened source: a regular file, and the very file the scan
/// listed (device and inode), else why it is skipped.
pub(in crate::session) fn check_opened(
    file: &File,
    scanned: Option<FileId>,
) -> Result<(), Unsendable> {
    let m = file.metadata().map_err(Unsendable::Stat)?;
    if !m.is_file() {
        return Err(Unsendable::NotRegularNow);
    }
    match scanned {
        Some(id) if FileId::of(file).ok() != Some(id) => Err(Unsendable::Replaced),
        _ => Ok(()),
    }
}

/// Open a local source (a push) for reading: never through a final
/// symlink, never blocking (a FIFO swapped in is refused, not waited on),
/// and only when it is still the file the scan listed.
pub(crate) fn open_source(
    path: &std::path::Path,
    scanned: Option<FileId>,
    direct: crate::datapath::DirectMode,
) -> Result<(File, bool), Unsendable> {
    use crate::datapath::DirectMode;
    use std::os::unix::fs::OpenOptionsExt;
    let open = |extra: i32| {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | extra)
            .open(path)
    };
    let (file, is_direct) = match direct {
        DirectMode::Off => (open(0), false),
        _ => match open(libc::O_DIRECT) {
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && direct == DirectMode::Auto => {
                (open(0), false)
            }
            other => (other, true),
        },
    };
    let file = file.map_err(Unsendable::of_open)?;
    check_opened(&file, scanned)?;
    Ok((file, is_direct))
}

/// Open a root-relative source beneath `root` (the daemon serving a pull),
/// with the same rules as [`open_source`].
pub(crate) fn open_source_beneath(
    root: &crate::datapath::beneath::Root,
    rel: &std::path::Path,
    scanned: Option<FileId>,
    direct: crate::datapath::DirectMode,
) -> Result<(File, bool), Unsendable> {
    let rel = rel.to_str().expect("root-relative sources are UTF-8");
    let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK;
    let (file, is_direct) = root
        .open_direct(rel, flags, 0, direct)
        .map_err(Unsendable::of_open)?;
    check_opened(&file, scanned)?;
    Ok((file, is_direct))
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn a_fifo_or_a_swapped_file_is_refused_without_blocking() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if !made.is_ok_and(|s| s.success()) {
            eprintln!("skipped: no mkfifo");
            return;
        }
        let mode = crate::datapath::DirectMode::Off;
        let e = open_source(&fifo, None, mode).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let a = dir.path().join("a");
        std::fs::write(&a, b"x").unwrap();
        let id = FileId::of(&File::open(&a).unwrap()).unwrap();
        assert!(open_source(&a, Some(id), mode).is_ok());
        // Another file put in its place (both exist at once: another inode).
        let b = dir.path().join("b");
        std::fs::write(&b, b"y").unwrap();
        std::fs::rename(&b, &a).unwrap();
        let e = open_source(&a, Some(id), mode).unwrap_err();
        assert!(e.to_string().contains("replaced"), "{e}");
        let link = dir.path().join("l");
        std::os::unix::fs::symlink(&a, &link).unwrap();
        assert!(
            open_source(&link, None, mode).is_err(),
            "a symlink is not followed"
        );
    }
}
