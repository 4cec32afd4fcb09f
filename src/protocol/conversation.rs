//! The conversation on a control connection as one table: per role (push,
//! pull, their dry runs, bench, UDP, follow, shard) and state, which kinds
//! of message each side may send and where each leads ([`table::ROWS`]),
//! and the messages allowed in any state as rules ([`table::RULES`]).
//!
//! One [`Conversation`] per connection, on either side, checks each message
//! sent and received against it; the role is fixed by the `Request`. The
//! round trips a role costs are counted along the same table
//! ([`round_trips`]), and [`render`] writes it out for
//! `docs/internals/conversation.md`.
//!
//! Pure: no I/O, like the rest of `protocol`.

mod kind;
mod render;
pub mod table;
#[cfg(test)]
mod tests;
mod trips;

pub use kind::{kind_of, sample, Kind};
pub use render::render;
pub use trips::{round_trips, way, RoundTrips};

use crate::protocol::control::{
    Direction, Message, SessionRequest, REQ_DRY_RUN, REQ_FOLLOW, REQ_RESUME, REQ_SHARD, REQ_STREAM,
};
use table::{Next, Rule, Who, ROWS};

/// Which end of the control connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Client,
    Daemon,
}

impl Side {
    pub fn other(self) -> Side {
        match self {
            Side::Client => Side::Daemon,
            Side::Daemon => Side::Client,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Side::Client => "client",
            Side::Daemon => "daemon",
        }
    }
}

/// Whether `from` may beat in `role`: the daemon, and the source (a
/// client checking what is held, or following idle files). A pull's
/// client has nothing to work on that long: its beats would only hold the
/// session.
fn beats(role: Role, from: Side) -> bool {
    from == Side::Daemon || role.source() == from
}

/// What a session is, as its request says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Push,
    PushDryRun,
    FollowPush,
    /// A push whose manifest streams as its source walks (protocol 14,
    /// `REQ_STREAM`): entries added while the data flows.
    StreamPush,
    Pull,
    PullDryRun,
    ShardPull,
    Bench,
    BenchReverse,
    Udp,
    UdpReverse,
    /// `urmove info` (protocol 13): the daemon says what it is.
    Info,
}

impl Role {
    pub const ALL: [Role; 12] = [
        Role::Push,
        Role::PushDryRun,
        Role::FollowPush,
        Role::StreamPush,
        Role::Pull,
        Role::PullDryRun,
        Role::ShardPull,
        Role::Bench,
        Role::BenchReverse,
        Role::Udp,
        Role::UdpReverse,
        Role::Info,
    ];

    /// The role `req` asks for (a dry run before a follow or a shard, as
    /// the daemon serves it).
    pub fn of(req: &SessionRequest) -> Role {
        let dry = req.has(REQ_DRY_RUN);
        match req.direction {
            Direction::Push if dry => Role::PushDryRun,
            Direction::Push if req.has(REQ_FOLLOW) => Role::FollowPush,
            Direction::Push if req.has(REQ_STREAM) => Role::StreamPush,
            Direction::Push => Role::Push,
            Direction::Pull if dry => Role::PullDryRun,
            Direction::Pull if req.has(REQ_SHARD) => Role::ShardPull,
            Direction::Pull => Role::Pull,
            Direction::Bench => Role::Bench,
            Direction::BenchReverse => Role::BenchReverse,
            Direction::Udp => Role::Udp,
            Direction::UdpReverse => Role::UdpReverse,
            Direction::Info => Role::Info,
        }
    }

    pub const fn bit(self) -> u16 {
        1 << self as u16
    }

    pub fn name(self) -> &'static str {
        match self {
            Role::Push => "push",
            Role::PushDryRun => "push dry run",
            Role::FollowPush => "follow push",
            Role::StreamPush => "streamed push",
            Role::Pull => "pull",
            Role::PullDryRun => "pull dry run",
            Role::ShardPull => "shard pull",
            Role::Bench => "bench",
            Role::BenchReverse => "bench reverse",
            Role::Udp => "UDP",
            Role::UdpReverse => "UDP reverse",
            Role::Info => "info",
        }
    }

    /// Its name in one word (file names, JSON).
    pub fn token(self) -> &'static str {
        match self {
            Role::Push => "push",
            Role::PushDryRun => "push-dry-run",
            Role::FollowPush => "follow-push",
            Role::StreamPush => "stream-push",
            Role::Pull => "pull",
            Role::PullDryRun => "pull-dry-run",
            Role::ShardPull => "shard-pull",
            Role::Bench => "bench",
            Role::BenchReverse => "bench-reverse",
            Role::Udp => "udp",
            Role::UdpReverse => "udp-reverse",
            Role::Info => "info",
        }
    }

    /// The side that sends the manifest and the data.
    pub fn source(self) -> Side {
        match self {
            Role::Push
            | Role::PushDryRun
            | Role::FollowPush
            | Role::StreamPush
            | Role::Bench
            | Role::Udp => Side::Client,
            Role::Pull
            | Role::PullDryRun
            | Role::ShardPull
            | Role::BenchReverse
            | Role::UdpReverse
            | Role::Info => Side::Daemon,
        }
    }

    pub fn dry(self) -> bool {
        matches!(self, Role::PushDryRun | Role::PullDryRun)
    }

    /// Whether its request's flags change its order: resume (what is
    /// held, and the verdict) and a shard.
    pub fn resumable(self) -> bool {
        matches!(
            self,
            Role::Push
                | Role::PushDryRun
                | Role::FollowPush
                | Role::StreamPush
                | Role::Pull
                | Role::PullDryRun
                | Role::ShardPull
        )
    }
}

/// Where a conversation stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum State {
    /// Nothing said yet.
    Start,
    /// The client said hello; the daemon challenges.
    Hello,
    /// The client proves it holds the key.
    Challenge,
    /// The daemon welcomes it (protocols with a `Welcome`).
    Auth,
    /// The client asks for a session.
    Welcome,
    /// A data stream: after its hello, frames only.
    Stream,
    /// A sharded pull's client names its share.
    ShardAsk,
    /// The daemon sums up the whole manifest.
    Shard,
    /// The source sends its manifest.
    Listing,
    /// Resuming: the sink says what it holds.
    Have,
    /// Resuming: the source's verdict on it.
    Verdict,
    /// The sink's refusals, then its placement.
    Refusals,
    /// The daemon gets ready (collects the data streams).
    Placed,
    /// A dry run's answer.
    Answer,
    /// The data flows.
    Data,
    /// A UDP test's client sends its plan.
    UdpAsk,
    /// The daemon says where it counts (or waits).
    UdpPlanned,
    /// Datagrams flow; counts come.
    UdpRun,
    /// The sending side ended; the counting side's last counts.
    UdpEnded,
    /// The daemon's summary.
    Summing,
    /// The session said all it says.
    Done,
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::Start => "start",
            State::Hello => "hello",
            State::Challenge => "challenge",
            State::Auth => "auth",
            State::Welcome => "welcome",
            State::Stream => "stream",
            State::ShardAsk => "shard-ask",
            State::Shard => "shard",
            State::Listing => "listing",
            State::Have => "have",
            State::Verdict => "verdict",
            State::Refusals => "refusals",
            State::Placed => "placed",
            State::Answer => "answer",
            State::Data => "data",
            State::UdpAsk => "udp-ask",
            State::UdpPlanned => "udp-planned",
            State::UdpRun => "udp-run",
            State::UdpEnded => "udp-ended",
            State::Summing => "summing",
            State::Done => "done",
        }
    }

    /// Whether a conversation here has a role (a request came).
    pub fn after_request(self) -> bool {
        !matches!(
            self,
            State::Start
                | State::Hello
                | State::Challenge
                | State::Auth
                | State::Welcome
                | State::Stream
        )
    }
}

/// What one protocol version changes in the order, as switches on the
/// one table (not a copy of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dialect {
    pub version: u16,
    /// The daemon answers the proof with `Welcome` before the request.
    pub welcome: bool,
    /// The daemon says `Ready` before the data.
    pub ready: bool,
    /// The source sends its verdict even when the sink's `Have` named
    /// nothing.
    pub verdict_when_nothing_held: bool,
}

/// Protocol 12 (urmove 0.1.0): every step in turn.
pub const V12: Dialect = Dialect {
    version: 12,
    welcome: true,
    ready: true,
    verdict_when_nothing_held: true,
};

/// The dialect of protocol `version`, if this build speaks it.
/// Protocol 13: no `Welcome` (the session id is derived from the
/// nonces), and no verdict after a `Have` that named nothing.
pub const V13: Dialect = Dialect {
    version: 13,
    welcome: false,
    ready: true,
    verdict_when_nothing_held: false,
};

/// Protocol 14: 13's order; a push may stream its manifest
/// (`REQ_STREAM`, [`Role::StreamPush`]).
pub const V14: Dialect = Dialect { version: 14, ..V13 };

pub fn dialect(version: u16) -> Option<Dialect> {
    [V12, V13, V14].into_iter().find(|d| d.version == version)
}

/// One expected message: who sends it and its kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expect {
    pub from: Side,
    pub kind: Kind,
}

/// A message out of order: the state, the role (once a request named
/// one), who sent it, its kind, and what was expected there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unexpected {
    pub state: State,
    pub role: Option<Role>,
    pub from: Side,
    pub kind: Kind,
    pub expected: Vec<Expect>,
}

impl std::fmt::Display for Unexpected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let role = self.role.map_or("session", Role::name);
        write!(
            f,
            "{} from the {} out of order: a {role} in state {} expects ",
            self.kind,
            self.from.name(),
            self.state.name(),
        )?;
        if self.expected.is_empty() {
            return f.write_str("nothing more");
        }
        for (i, e) in self.expected.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(f, "{sep}{} from the {}", e.kind, e.from.name())?;
        }
        Ok(())
    }
}

impl std::error::Error for Unexpected {}

/// One control connection's conversation, as one side sees it: each
/// message it sends ([`on_send`]) and receives ([`on_recv`]) must be one
/// the table allows where the conversation stands; the first that is not
/// is refused, and so is everything after it but `Error`.
///
/// [`on_send`]: Conversation::on_send
/// [`on_recv`]: Conversation::on_recv
#[derive(Debug, Clone)]
pub struct Conversation {
    side: Side,
    dialect: Dialect,
    state: State,
    role: Option<Role>,
    resume: bool,
    shard: bool,
    /// Items the sink's `Have` named so far.
    held: u64,
    refused: Option<Unexpected>,
}

impl Conversation {
    /// The conversation of `side` speaking protocol `version` (one this
    /// build does not speak is spoken as the newest it does).
    pub fn new(side: Side, version: u16) -> Conversation {
        Conversation::speaking(side, dialect(version).unwrap_or(V12))
    }

    /// The conversation of `side` after a handshake spoken elsewhere:
    /// the client's request comes next.
    pub fn handshaken(side: Side, version: u16) -> Conversation {
        Conversation {
            state: State::Welcome,
            ..Conversation::new(side, version)
        }
    }

    /// The conversation of `side` in dialect `dialect`.
    pub fn speaking(side: Side, dialect: Dialect) -> Conversation {
        Conversation {
            side,
            dialect,
            state: State::Start,
            role: None,
            resume: false,
            shard: false,
            held: 0,
            refused: None,
        }
    }

    pub fn side(&self) -> Side {
        self.side
    }

    pub fn state(&self) -> State {
        self.state
    }

    pub fn role(&self) -> Option<Role> {
        self.role
    }

    pub fn refused(&self) -> Option<&Unexpected> {
        self.refused.as_ref()
    }

    /// Speak protocol `version` from now on (the handshake agreed it:
    /// before the proof, whose next step it decides).
    pub fn set_version(&mut self, version: u16) {
        self.dialect = dialect(version).unwrap_or(V12);
    }

    /// This side sends `m`.
    pub fn on_send(&mut self, m: &Message) -> Result<(), Unexpected> {
        self.step(self.side, m)
    }

    /// This side received `m`.
    pub fn on_recv(&mut self, m: &Message) -> Result<(), Unexpected> {
        self.step(self.side.other(), m)
    }

    /// `from` sent `m`.
    pub fn step(&mut self, from: Side, m: &Message) -> Result<(), Unexpected> {
        let kind = kind_of(m);
        match &self.refused {
            Some(u) if kind != Kind::Error => return Err(u.clone()),
            _ => {}
        }
        if self.rule_allows(from, kind) {
            return Ok(());
        }
        let Some(next) = self
            .rows()
            .find(|r| self.is(r.who, from) && r.kinds.contains(&kind))
        else {
            let u = Unexpected {
                state: self.state,
                role: self.role,
                from,
                kind,
                expected: self.expected(),
            };
            self.refused = Some(u.clone());
            return Err(u);
        };
        let next = next.next;
        match m {
            Message::Request(req) => {
                self.role = Some(Role::of(req));
                self.resume = req.has(REQ_RESUME);
                self.shard = req.has(REQ_SHARD);
            }
            Message::Have(items) => self.held += items.len() as u64,
            _ => {}
        }
        self.state = self.resolve(next);
        Ok(())
    }

    fn rule_allows(&self, from: Side, kind: Kind) -> bool {
        let rule = table::RULES.iter().find(|r| r.1 == kind).map(|r| r.0);
        let requested = self.role.is_some() && self.state.after_request();
        match rule {
            Some(Rule::Error) => true,
            Some(Rule::StreamsRefused) => requested && from == Side::Daemon,
            Some(Rule::Alive) => requested && self.role.is_some_and(|r| beats(r, from)),
            None => false,
        }
    }

    /// The rows of this state that apply to this conversation's role
    /// (every row before a request).
    pub fn rows(&self) -> impl Iterator<Item = &'static table::Row> + '_ {
        let bit = self.role.map_or(table::ANY, Role::bit);
        ROWS.iter()
            .filter(move |r| r.state == self.state && r.roles & bit != 0)
    }

    /// Whether `who` of a row is `side` in this role.
    fn is(&self, who: Who, side: Side) -> bool {
        self.who(who) == Some(side)
    }

    pub(crate) fn who(&self, who: Who) -> Option<Side> {
        match who {
            Who::Client => Some(Side::Client),
            Who::Daemon => Some(Side::Daemon),
            Who::Source => self.role.map(Role::source),
            Who::Sink => self.role.map(|r| r.source().other()),
        }
    }

    /// What may come next here, rules aside.
    pub fn expected(&self) -> Vec<Expect> {
        let mut out = Vec::new();
        for r in self.rows() {
            let Some(from) = self.who(r.who) else {
                continue;
            };
            out.extend(r.kinds.iter().map(|&kind| Expect { from, kind }));
        }
        out
    }

    fn resolve(&self, next: Next) -> State {
        let d = &self.dialect;
        let role = self.role.unwrap_or(Role::Push);
        let after_verdict = if role.dry() {
            State::Answer
        } else {
            State::Refusals
        };
        let placed = if d.ready { State::Placed } else { State::Data };
        match next {
            Next::Stay => self.state,
            Next::To(s) => s,
            Next::AfterAuth if d.welcome => State::Auth,
            Next::AfterAuth => State::Welcome,
            Next::AfterRequest => match role {
                Role::Bench | Role::BenchReverse => placed,
                Role::Udp | Role::UdpReverse => State::UdpAsk,
                Role::Info => State::Answer,
                Role::ShardPull => State::ShardAsk,
                Role::PullDryRun if self.shard => State::ShardAsk,
                _ => State::Listing,
            },
            Next::AfterManifest if self.resume => State::Have,
            Next::AfterManifest => after_verdict,
            Next::AfterHave if self.held > 0 || d.verdict_when_nothing_held => State::Verdict,
            Next::AfterHave => after_verdict,
            Next::AfterVerdict => after_verdict,
            Next::AfterPlacement => placed,
        }
    }
}

/// A request for `role` (resuming when `resume`), as a client asks it.
pub fn request_of(role: Role, resume: bool) -> SessionRequest {
    use crate::protocol::control::Direction as D;
    let (direction, flags) = match role {
        Role::Push => (D::Push, 0),
        Role::PushDryRun => (D::Push, REQ_DRY_RUN),
        Role::FollowPush => (D::Push, REQ_FOLLOW),
        Role::StreamPush => (D::Push, REQ_STREAM),
        Role::Pull => (D::Pull, 0),
        Role::PullDryRun => (D::Pull, REQ_DRY_RUN),
        Role::ShardPull => (D::Pull, REQ_SHARD),
        Role::Bench => (D::Bench, 0),
        Role::BenchReverse => (D::BenchReverse, 0),
        Role::Udp => (D::Udp, 0),
        Role::UdpReverse => (D::UdpReverse, 0),
        Role::Info => (D::Info, 0),
    };
    let resume = if resume && role.resumable() {
        REQ_RESUME
    } else {
        0
    };
    SessionRequest {
        direction,
        streams: 1,
        block_size: 1 << 20,
        flags: flags | resume,
        path: String::new(),
        owner: [0; 32],
        rate_limit: 0,
        filter: Vec::new(),
        time_ms: 0,
    }
}
