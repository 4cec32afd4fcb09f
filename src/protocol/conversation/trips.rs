//! Round trips per role, counted along the table.

use super::table::Next;
use crate::protocol::control::SessionRequest;

use super::{request_of, sample, Conversation, Dialect, Role, Side, State};

/// The protocol round trips of a role (TCP connects, and the data streams
/// connected in groups, come on top): the times the client must wait for
/// the daemon before the first data byte leaves (push) or arrives (pull),
/// and after the last byte until the session is said done. A dry run
/// moves no data: `before` counts until its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoundTrips {
    pub before: u32,
    pub after: u32,
    /// Whether data flows at all (not in a dry run).
    pub data: bool,
}

impl RoundTrips {
    /// With the connects: the control connection's handshake, and
    /// `streams` data streams connected `at_once` at a time.
    pub fn with_connects(self, streams: u32, at_once: u32) -> u32 {
        let groups = if self.data {
            streams.div_ceil(at_once.max(1))
        } else {
            0
        };
        self.before + 1 + groups
    }
}

/// Where the data of `role` flows.
fn flowing(role: Role) -> State {
    match role {
        Role::Udp | Role::UdpReverse => State::UdpRun,
        _ => State::Data,
    }
}

/// Walk the table from `c`'s state along the first row of each state that
/// leaves it, until `stop`; each message's sender.
fn walk(c: &mut Conversation, role: Role, resume: bool, stop: State) -> Vec<Side> {
    let req = request_of(role, resume);
    let mut turns = Vec::new();
    while c.state() != stop && c.state() != State::Done {
        let row = c
            .rows()
            .find(|r| r.next != Next::Stay)
            .unwrap_or_else(|| panic!("{}: no way on from {:?}", role.name(), c.state()));
        let from = c.who(row.who).expect("a role by now");
        c.step(from, &sample(row.kinds[0], &req))
            .unwrap_or_else(|u| panic!("the table refuses its own way: {u}"));
        turns.push(from);
    }
    turns
}

/// The way the session `req` asks for goes when nothing is amiss, from the client's hello to
/// its end: who sends which kind (the data itself aside).
pub fn way(req: &SessionRequest, dialect: Dialect) -> Vec<(Side, super::Kind)> {
    let role = Role::of(req);
    let mut c = Conversation::speaking(Side::Client, dialect);
    let mut out = Vec::new();
    while c.state() != State::Done {
        let row = c
            .rows()
            .find(|r| r.next != Next::Stay)
            .unwrap_or_else(|| panic!("{}: no way on from {:?}", role.name(), c.state()));
        let from = c.who(row.who).expect("a role by now");
        let kind = row.kinds[0];
        c.step(from, &sample(kind, req))
            .unwrap_or_else(|u| panic!("the table refuses its own way: {u}"));
        out.push((from, kind));
    }
    out
}

/// The times the client waits: each daemon turn that follows its own.
fn waits(turns: &[Side]) -> u32 {
    turns
        .windows(2)
        .filter(|w| w[0] == Side::Client && w[1] == Side::Daemon)
        .count() as u32
}

/// The round trips of `role` (resuming when `resume` and the role can)
/// in `dialect`, counted along the table.
pub fn round_trips(role: Role, resume: bool, dialect: Dialect) -> RoundTrips {
    let mut c = Conversation::speaking(Side::Client, dialect);
    let mut turns = walk(&mut c, role, resume, flowing(role));
    // No data: until its end.
    if role.dry() || role == Role::Info {
        return RoundTrips {
            before: waits(&turns),
            after: 0,
            data: false,
        };
    }
    // The client opens the data streams (or, a reversed UDP test, sends
    // its hello datagram), then the source sends.
    turns.extend([Side::Client, role.source()]);
    let mut after = vec![role.source()];
    after.extend(walk(&mut c, role, resume, State::Done));
    RoundTrips {
        before: waits(&turns),
        after: waits(&after),
        data: true,
    }
}
