//! What a client session runs with (`SendConfig`): the resolved options
//! of `send`, `pull` and `bench --net`, shared by the client room.

use std::path::PathBuf;
use std::time::Duration;

use crate::datapath::net::ZeroCopy;
use crate::datapath::tcp::Congestion;
use crate::datapath::DirectMode;
use crate::protocol::control::{
    Direction, FilterRule, SessionRequest, REQ_CHECKSUM, REQ_ENCRYPT, REQ_RESUME,
};
use crate::protocol::handshake::Key;

use crate::session::link::lanes::Lanes;

use crate::session::source::follow::FollowUntil;

/// `send --min-rate RATE --window DURATION`: the copy must sustain RATE
/// over every window in which that much waited to go.
#[derive(Debug, Clone, Copy)]
pub struct MinRate {
    pub bytes_per_s: f64,
    pub window: Duration,
}

/// How `send --follow` follows.
#[derive(Debug, Clone)]
pub struct Follow {
    pub idle: Duration,
    pub until: FollowUntil,
    /// `--live-parts`: a growing file can be read at the far end as it
    /// grows (its part, up to its `user.urmove.live` attribute).
    pub live_parts: bool,
}

/// Everything `send` needs, resolved from the command line.
#[derive(Debug, Clone)]
pub struct SendConfig {
    pub host: String,
    pub port: u16,
    /// Through ssh, the login (`[user@]host`): the peer this side's owner
    /// tokens name, since the session's port is new each run.
    pub login: Option<String>,
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
    /// Continue from what the receiver holds; skip finished files (the
    /// default; `--ignore-times` turns it off).
    pub resume: bool,
    /// With `resume`: compare finished files by content.
    pub checksum: bool,
    /// Seal every data frame (AES-256-GCM).
    pub encrypt: bool,
    /// A peer silent (or a stream stalled) this long ends the session.
    pub timeout: Duration,
    /// Where this side keeps its secret for the resume state of pulls.
    pub state_dir: PathBuf,
    /// The data streams' congestion control (`--cc`).
    pub congestion: Congestion,
    /// `-P auto`: `streams` are opened, and frames go on as many of them
    /// as still raise the rate.
    pub auto_streams: bool,
    /// Threads of this side's data path (`--lanes`), each with its ring.
    pub lanes: Lanes,
    /// What of the sources goes, and what is carried besides the bytes
    /// (`--exclude`, `-H`, `-X`, `-A`).
    pub scan: crate::session::plan::tree::ScanRules,
    /// Owners by number (`--numeric-ids`).
    pub numeric_ids: bool,
    /// `--sparse`: runs of zeros inside data arrive as holes too (a pull
    /// asks the daemon for it).
    pub sparse: bool,
    /// Remove the receiver's extra entries under the manifest's
    /// directories (`--delete`).
    pub delete: bool,
    /// `--delete-excluded`: what `--exclude` leaves out is removed too.
    pub delete_excluded: bool,
    /// A source is a directory's contents (`DIR/`): the destination
    /// stands for that directory (`--delete` prunes it too).
    pub contents: bool,
    /// One file, no directory, that may take the destination's name where
    /// the receiver holds no directory there (rsync's and scp's rename): a
    /// push asks the daemon (`REQ_ONE_FILE`); a pull's client, the
    /// receiver, decides it by itself for LOCAL_DIR.
    pub one_file: bool,
    /// `--follow`: files still being written go as they grow, each ending
    /// once nobody writes it and it stayed idle for `idle`
    /// (`--follow-idle`); what appears in the directories is added until
    /// `until` (`--follow-until`).
    pub follow: Option<Follow>,
    /// `--min-rate`, `--window`: the run fails when the sustained rate fell
    /// short (the files still arrive and are verified).
    pub min_rate: Option<MinRate>,
    /// `--shard K/N`: this session moves its share of the manifest
    /// (`shard::select`), files above `split_over` bytes split into
    /// pieces over the shards.
    pub shard: Option<crate::session::plan::shard::Shard>,
    pub split_over: u64,
    /// What every shard of one transfer names alike (the receivers and
    /// where: `HOST1,HOST2:DEST`), which `urmove report` holds them to.
    pub transfer: String,
}

impl SendConfig {
    /// The peer this side's owner tokens name: the daemon's `host:port`,
    /// or through ssh the login.
    pub fn peer(&self) -> (String, u16) {
        match &self.login {
            Some(login) => (format!("ssh:{login}"), 0),
            None => (self.host.clone(), self.port),
        }
    }

    /// A configuration for `host:port` with `key` and the defaults: 4
    /// streams, 4 MiB blocks, zero-copy and O_DIRECT where they pay,
    /// 1 s intervals, no rate limit, resuming.
    pub fn to(host: String, port: u16, key: Key) -> Self {
        SendConfig {
            host,
            port,
            login: None,
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
            resume: true,
            checksum: false,
            encrypt: false,
            timeout: Duration::from_secs(60),
            state_dir: crate::session::link::secret::default_state_dir(),
            congestion: Congestion::Auto,
            auto_streams: false,
            lanes: Lanes::Auto,
            scan: crate::session::plan::tree::ScanRules::default(),
            numeric_ids: false,
            sparse: false,
            delete: false,
            delete_excluded: false,
            contents: false,
            one_file: false,
            follow: None,
            min_rate: None,
            shard: None,
            split_over: crate::session::plan::shard::SPLIT_OVER,
            transfer: String::new(),
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
        if self.numeric_ids {
            f |= crate::protocol::control::REQ_NUMERIC_IDS;
        }
        if self.delete {
            f |= crate::protocol::control::REQ_DELETE;
        }
        f |= self.scan.request_flags();
        if self.contents {
            f |= crate::protocol::control::REQ_CONTENTS;
        }
        if self.one_file {
            f |= crate::protocol::control::REQ_ONE_FILE;
        }
        if self.sparse {
            f |= crate::protocol::control::REQ_SPARSE;
        }
        if let Some(follow) = &self.follow {
            f |= crate::protocol::control::REQ_FOLLOW;
            if follow.live_parts {
                f |= crate::protocol::control::REQ_LIVE_PARTS;
            }
        }
        f
    }

    /// The request of a push by the client `owner`.
    pub(crate) fn push_request(&self, owner: [u8; 32]) -> SessionRequest {
        SessionRequest {
            owner,
            // This side sends, and paces its own streams.
            rate_limit: 0,
            direction: Direction::Push,
            streams: self.streams,
            block_size: self.block_size,
            flags: self.flags(),
            path: self.dest.clone(),
            filter: self.protect(),
            time_ms: 0,
        }
    }

    /// The rules a `--delete` push gives the receiver, for it to keep what
    /// they exclude (none without `--delete`, or with `--delete-excluded`).
    pub fn protect(&self) -> Vec<FilterRule> {
        match self.delete && !self.delete_excluded {
            true => self.filter_rules(),
            false => Vec::new(),
        }
    }

    /// `--exclude` and `--include`, in order, as a request carries them.
    pub fn filter_rules(&self) -> Vec<FilterRule> {
        let rules = self.scan.filter.rules();
        rules
            .map(|(v, p)| FilterRule {
                include: v == crate::session::plan::filter::Verdict::Include,
                pattern: p.to_owned(),
            })
            .collect()
    }
}
