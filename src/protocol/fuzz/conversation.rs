//! Arbitrary conversations: a role, a dialect, then (side, kind) pairs
//! fed to both ends' [`Conversation`]s, as one sends and the other
//! receives.

use crate::protocol::control::{Message, SessionRequest, REQ_SHARD};
use crate::protocol::conversation::{
    request_of, sample, Conversation, Dialect, Expect, Kind, Role, Side, State,
};

/// The fuzz body: see [`run_conversation`].
pub fn conversation(data: &[u8]) {
    let _ = run_conversation(data);
}

/// The request of role byte `role` and flag bits `flags`.
fn request(role: u8, flags: u8) -> SessionRequest {
    let role = Role::ALL[usize::from(role) % Role::ALL.len()];
    let mut req = request_of(role, flags & 1 != 0);
    if flags & 2 != 0 {
        req.flags |= REQ_SHARD;
    }
    req
}

/// The dialect of flag bits: each switch of protocol 12's off by a bit.
fn dialect_of(flags: u8) -> Dialect {
    Dialect {
        version: 12,
        welcome: flags & 4 == 0,
        ready: flags & 8 == 0,
        verdict_when_nothing_held: flags & 16 == 0,
    }
}

/// Input: the role (byte 0), flags (byte 1: resume, shard, and the
/// dialect's switches), then pairs (sender: bit 0, a `Have` that names
/// nothing: bit 1; kind). Checks, after every message: both ends agree
/// (both accept or both refuse it the same way, and stand in the same
/// state with the same role); `Error` is always taken; a refused message
/// leaves the state as it was, is not among what was expected, and
/// everything after it but `Error` is refused the same way; past the
/// request the role is known; a state the conversation may stand in
/// expects something unless it is an end. The state it ends in comes
/// back (`None`: too short).
pub fn run_conversation(data: &[u8]) -> Option<State> {
    let [role, flags, rest @ ..] = data else {
        return None;
    };
    let req = request(*role, *flags);
    let d = dialect_of(*flags);
    let mut ends = [
        Conversation::speaking(Side::Client, d),
        Conversation::speaking(Side::Daemon, d),
    ];
    let mut refused = None;
    let mut version_refused = false;
    for pair in rest.chunks_exact(2) {
        let from = if pair[0] & 1 == 0 {
            Side::Client
        } else {
            Side::Daemon
        };
        let kind = Kind::ALL[usize::from(pair[1]) % Kind::ALL.len()];
        let m = match kind {
            Kind::Have if pair[0] & 2 != 0 => Message::Have(Vec::new()),
            _ => sample(kind, &req),
        };
        let before = ends[0].state();
        let expected = ends[0].expected();
        let [r0, r1] = ends.each_mut().map(|c| match c.side() == from {
            true => c.on_send(&m),
            false => c.on_recv(&m),
        });
        assert_eq!(r0, r1, "the two ends disagree");
        assert_eq!(ends[0].state(), ends[1].state());
        assert_eq!(ends[0].role(), ends[1].role());
        let c = &ends[0];
        if kind == Kind::Error {
            assert!(r0.is_ok(), "an Error refused");
        }
        match (&refused, &r0) {
            (Some(first), r) if kind != Kind::Error => assert_eq!(r.as_ref(), Err(first)),
            (None, Err(u)) => {
                assert_eq!(c.state(), before, "a refusal moved the state");
                assert!(!expected.contains(&Expect { from, kind }));
                assert_eq!((u.state, u.kind, u.from), (before, kind, from));
                assert!(!u.to_string().is_empty());
                refused = Some(u.clone());
            }
            _ => {}
        }
        // A `VersionRefused` (protocol 13) ends a conversation before any
        // request: its end has no role.
        version_refused |= r0.is_ok() && kind == Kind::VersionRefused;
        if c.state().after_request() && !version_refused {
            assert!(
                c.role().is_some(),
                "a state past the request without a role"
            );
        }
        if refused.is_none() && !matches!(c.state(), State::Done | State::Stream) {
            assert!(!c.expected().is_empty(), "stuck in {:?}", c.state());
        }
    }
    Some(ends[0].state())
}

/// The seed of `role`'s way when nothing is amiss (`flags` as the input's).
pub fn seed(role: Role, flags: u8) -> Vec<u8> {
    let index = Role::ALL.iter().position(|r| *r == role).expect("a role");
    let mut out = vec![index as u8, flags];
    let req = request(index as u8, flags);
    let way = crate::protocol::conversation::way(&req, dialect_of(flags));
    for (from, kind) in way {
        let k = Kind::ALL.iter().position(|x| *x == kind).expect("a kind");
        out.extend([u8::from(from == Side::Daemon), k as u8]);
    }
    out
}
