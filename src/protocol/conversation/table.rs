//! The table: per state and role, who may send which kinds, and where
//! each leads. Written once; a protocol version's differences are a
//! [`Dialect`](super::Dialect), read by the computed next states.

use super::kind::Kind;
use super::{Role, State};

/// Who sends a row's kinds: a side, or the role's end of the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    Client,
    Daemon,
    /// The side that sends the manifest and the data (push: the client).
    Source,
    /// The side that receives them (push: the daemon).
    Sink,
}

/// Where a row leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// The same state: a kind that may come any number of times.
    Stay,
    To(State),
    /// After the proof: the welcome, or the request where there is none.
    AfterAuth,
    /// After the request: the role's first state.
    AfterRequest,
    /// After the manifest: what the sink holds when resuming, else as
    /// [`Next::AfterVerdict`].
    AfterManifest,
    /// After what is held: the source's verdict (unless nothing is held
    /// and the dialect skips it).
    AfterHave,
    /// After the verdict: a dry run's answer, else the sink's refusals.
    AfterVerdict,
    /// After the placement (or a bench's request): the daemon's `Ready`,
    /// or the data where there is none.
    AfterPlacement,
}

/// Sets of roles, as bits of [`Role::bit`].
pub type Roles = u16;

const fn bits(roles: &[Role]) -> Roles {
    let mut b = 0;
    let mut i = 0;
    while i < roles.len() {
        b |= roles[i].bit();
        i += 1;
    }
    b
}

/// Every role (and the handshake, before a request names one).
pub const ANY: Roles = Roles::MAX;
const PUSH_WET: Roles = bits(&[Role::Push, Role::FollowPush, Role::StreamPush]);
const PULL_WET: Roles = bits(&[Role::Pull, Role::ShardPull]);
const PULLS: Roles = PULL_WET | bits(&[Role::PullDryRun]);
const SHARDS: Roles = bits(&[Role::ShardPull, Role::PullDryRun]);
const TRANSFERS: Roles = PUSH_WET | PULLS | bits(&[Role::PushDryRun]);
const WET: Roles = PUSH_WET | PULL_WET;
const DRY: Roles = bits(&[Role::PushDryRun, Role::PullDryRun]);
const BENCHES: Roles = bits(&[Role::Bench, Role::BenchReverse]);
const UDPS: Roles = bits(&[Role::Udp, Role::UdpReverse]);
const INFO: Roles = bits(&[Role::Info]);

/// One row: in `state`, for `roles`, `who` may send any of `kinds`, and
/// the conversation goes on to `next`.
#[derive(Debug, Clone, Copy)]
pub struct Row {
    pub state: State,
    pub roles: Roles,
    pub who: Who,
    pub kinds: &'static [Kind],
    pub next: Next,
}

const fn row(state: State, roles: Roles, who: Who, kinds: &'static [Kind], next: Next) -> Row {
    Row {
        state,
        roles,
        who,
        kinds,
        next,
    }
}

use Kind as K;
use Next::{Stay, To};
use State as S;
use Who::{Client, Daemon, Sink, Source};

/// The conversation of every role. The first row of a state that leaves
/// it is the way a session goes when nothing is amiss (the round trips
/// are counted along it).
pub const ROWS: &[Row] = &[
    row(S::Start, ANY, Client, &[K::Hello], To(S::Hello)),
    row(S::Start, ANY, Client, &[K::StreamHello], To(S::Stream)),
    row(S::Hello, ANY, Daemon, &[K::Challenge], To(S::Challenge)),
    // Protocol 13: an offer that shares no version with the daemon's.
    row(S::Hello, ANY, Daemon, &[K::VersionRefused], To(S::Done)),
    row(S::Challenge, ANY, Client, &[K::Auth], Next::AfterAuth),
    row(S::Auth, ANY, Daemon, &[K::Welcome], To(S::Welcome)),
    row(S::Welcome, ANY, Client, &[K::Request], Next::AfterRequest),
    // A sharded pull: which share, and the whole manifest's summary.
    row(S::ShardAsk, SHARDS, Client, &[K::Shard], To(S::Shard)),
    row(
        S::Shard,
        SHARDS,
        Daemon,
        &[K::ShardManifest],
        To(S::Listing),
    ),
    row(
        S::Listing,
        TRANSFERS,
        Source,
        &[K::ManifestEnd],
        Next::AfterManifest,
    ),
    row(S::Listing, TRANSFERS, Source, &[K::Manifest], Stay),
    // Resuming: what the sink holds, and the source's verdict on it.
    row(S::Have, TRANSFERS, Sink, &[K::HaveEnd], Next::AfterHave),
    row(S::Have, TRANSFERS, Sink, &[K::Have], Stay),
    row(
        S::Verdict,
        TRANSFERS,
        Source,
        &[K::HeldChecked],
        Next::AfterVerdict,
    ),
    row(S::Verdict, TRANSFERS, Source, &[K::HeldWrong], Stay),
    // What the sink will not create, and where it writes each file; a
    // pull's daemon says what its scan left out meanwhile (heard by the
    // client only once it placed its files).
    row(
        S::Refusals,
        WET,
        Sink,
        &[K::Placement],
        Next::AfterPlacement,
    ),
    row(S::Refusals, WET, Sink, &[K::Skipped], Stay),
    row(
        S::Refusals,
        PULL_WET,
        Source,
        &[K::LeftOut, K::Skipped],
        Stay,
    ),
    row(
        S::Placed,
        PUSH_WET | PULL_WET | BENCHES,
        Daemon,
        &[K::Ready],
        To(S::Data),
    ),
    row(S::Placed, PULL_WET, Daemon, &[K::LeftOut, K::Skipped], Stay),
    // A dry run's answer, until its summary.
    row(S::Answer, DRY, Daemon, &[K::Summary], To(S::Done)),
    // `urmove info` (protocol 13): one answer.
    row(S::Answer, INFO, Daemon, &[K::DaemonInfo], To(S::Done)),
    row(S::Answer, DRY, Daemon, &[K::Skipped], Stay),
    row(
        S::Answer,
        bits(&[Role::PushDryRun]),
        Daemon,
        &[K::Deleted],
        Stay,
    ),
    row(
        S::Answer,
        bits(&[Role::PullDryRun]),
        Daemon,
        &[K::LeftOut],
        Stay,
    ),
    // The data: a push's sink ends it with its summary, or what it kept
    // once the client stopped (Ctrl-C); a pull's and a bench's daemon
    // with its summary.
    row(
        S::Data,
        PUSH_WET | PULL_WET | BENCHES,
        Daemon,
        &[K::Summary],
        To(S::Done),
    ),
    row(S::Data, PUSH_WET, Sink, &[K::Kept], To(S::Done)),
    row(
        S::Data,
        PUSH_WET | PULL_WET,
        Source,
        &[K::SourceDigests, K::Skipped],
        Stay,
    ),
    row(
        S::Data,
        PUSH_WET,
        Sink,
        &[
            K::FileAck,
            K::PieceAck,
            K::FileRejected,
            K::Skipped,
            K::Deleted,
        ],
        Stay,
    ),
    row(
        S::Data,
        bits(&[Role::FollowPush]),
        Source,
        &[K::Added, K::DirTimes, K::AddedEnd, K::FileEnd],
        Stay,
    ),
    row(
        S::Data,
        bits(&[Role::FollowPush]),
        Sink,
        &[K::Admitted],
        Stay,
    ),
    // A streamed push (protocol 14): the rest of the walk as it comes,
    // each window made ready (what is held by its stamp said first).
    row(
        S::Data,
        bits(&[Role::StreamPush]),
        Source,
        &[K::Added, K::AddedEnd],
        Stay,
    ),
    row(
        S::Data,
        bits(&[Role::StreamPush]),
        Sink,
        &[K::Have, K::Admitted],
        Stay,
    ),
    // A UDP test: its plan, the daemon's port, the counts.
    row(S::UdpAsk, UDPS, Client, &[K::UdpPlan], To(S::UdpPlanned)),
    row(S::UdpPlanned, UDPS, Daemon, &[K::UdpReady], To(S::UdpRun)),
    row(
        S::UdpRun,
        bits(&[Role::Udp]),
        Client,
        &[K::UdpEnd],
        To(S::UdpEnded),
    ),
    row(
        S::UdpRun,
        bits(&[Role::UdpReverse]),
        Daemon,
        &[K::UdpEnd],
        To(S::UdpEnded),
    ),
    row(S::UdpRun, UDPS, Daemon, &[K::UdpCounts], Stay),
    row(
        S::UdpEnded,
        bits(&[Role::Udp]),
        Daemon,
        &[K::Summary],
        To(S::Done),
    ),
    row(
        S::UdpEnded,
        bits(&[Role::Udp]),
        Daemon,
        &[K::UdpCounts],
        Stay,
    ),
    row(
        S::UdpEnded,
        bits(&[Role::UdpReverse]),
        Client,
        &[K::UdpCounts],
        To(S::Summing),
    ),
    row(S::Summing, UDPS, Daemon, &[K::Summary], To(S::Done)),
];

/// Messages allowed in more than one state, as rules rather than rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// `Error`, from either side, in every state: why a side stops (a
    /// refusal, a fault, a user's Ctrl-C), after which the peer may still
    /// answer (a push's `Kept`).
    Error,
    /// `StreamsRefused`, from the daemon once a request came: a refusal
    /// of more data streams than it takes, said as fields.
    StreamsRefused,
    /// `Alive`, from the daemon or the source once a request came (never
    /// on a data stream): a heartbeat while a side works without anything
    /// to say.
    Alive,
}

pub const RULES: [(Rule, Kind, &str); 4] = [
    (Rule::Error, Kind::Error, "either side, in every state"),
    (
        Rule::StreamsRefused,
        Kind::StreamsRefused,
        "the daemon, once a request came",
    ),
    (
        Rule::StreamsRefused,
        Kind::LimitRefused,
        "the daemon, once a request came (protocol 13)",
    ),
    (
        Rule::Alive,
        Kind::Alive,
        "the daemon, or the side that sends the data, once a request came (not on a data stream)",
    ),
];
