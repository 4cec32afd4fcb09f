use super::*;
use crate::protocol::control::Direction;

fn request(direction: Direction, flags: u32) -> SessionRequest {
    SessionRequest {
        direction,
        flags,
        ..request_of(Role::Push, false)
    }
}

/// A request's flags fix the role: a dry run before a follow or a shard,
/// as the daemon serves it.
#[test]
fn the_request_names_the_role() {
    use crate::protocol::control::{REQ_DRY_RUN, REQ_FOLLOW, REQ_SHARD};
    let role = |d, f| Role::of(&request(d, f));
    assert_eq!(
        role(Direction::Push, REQ_DRY_RUN | REQ_FOLLOW),
        Role::PushDryRun
    );
    assert_eq!(role(Direction::Push, REQ_FOLLOW), Role::FollowPush);
    assert_eq!(
        role(Direction::Pull, REQ_DRY_RUN | REQ_SHARD),
        Role::PullDryRun
    );
    assert_eq!(role(Direction::Pull, REQ_SHARD), Role::ShardPull);
    assert_eq!(role(Direction::UdpReverse, REQ_SHARD), Role::UdpReverse);
    for r in Role::ALL {
        assert_eq!(Role::of(&request_of(r, true)), r);
    }
}

/// Feed `steps` (who sends which kind) to both sides' conversations; each
/// must accept every one.
fn accept(role: Role, resume: bool, steps: &[(Side, Kind)]) -> (Conversation, Conversation) {
    let req = request_of(role, resume);
    let mut client = Conversation::new(Side::Client, 12);
    let mut daemon = Conversation::new(Side::Daemon, 12);
    for &(from, kind) in steps {
        let m = sample(kind, &req);
        for c in [&mut client, &mut daemon] {
            let r = if c.side() == from {
                c.on_send(&m)
            } else {
                c.on_recv(&m)
            };
            r.unwrap_or_else(|u| panic!("{}: {u}", role.name()));
        }
    }
    (client, daemon)
}

use Kind as K;
use Side::{Client as C, Daemon as D};

const HANDSHAKE: [(Side, Kind); 5] = [
    (C, K::Hello),
    (D, K::Challenge),
    (C, K::Auth),
    (D, K::Welcome),
    (C, K::Request),
];

fn with_handshake(rest: &[(Side, Kind)]) -> Vec<(Side, Kind)> {
    let mut v = HANDSHAKE.to_vec();
    v.extend_from_slice(rest);
    v
}

/// A resumed push as a client and its daemon run it: the beats while the
/// daemon prepares, refusals, the data with its acknowledgements, a
/// `--delete`'s list and the summary.
#[test]
fn a_push_runs_through() {
    let steps = with_handshake(&[
        (C, K::Manifest),
        (C, K::ManifestEnd),
        (D, K::Alive),
        (D, K::Have),
        (D, K::HaveEnd),
        (C, K::HeldWrong),
        (C, K::HeldChecked),
        (D, K::Skipped),
        (D, K::Placement),
        (D, K::Ready),
        (C, K::SourceDigests),
        (D, K::FileAck),
        (D, K::PieceAck),
        (C, K::Skipped),
        (D, K::FileRejected),
        (D, K::Alive),
        (D, K::Deleted),
        (D, K::Summary),
    ]);
    let (c, d) = accept(Role::Push, true, &steps);
    assert_eq!((c.state(), d.state()), (State::Done, State::Done));
    assert_eq!(c.role(), Some(Role::Push));
}

/// A pull: the daemon's scan left out things it says after the verdict,
/// which the client hears only once it placed its files.
#[test]
fn a_pull_hears_what_was_left_out_late() {
    let steps = with_handshake(&[
        (D, K::Manifest),
        (D, K::ManifestEnd),
        (C, K::Have),
        (C, K::HaveEnd),
        (D, K::HeldChecked),
        (C, K::Skipped),
        (C, K::Placement),
        (D, K::LeftOut),
        (D, K::Skipped),
        (D, K::Ready),
        (D, K::SourceDigests),
        (D, K::Summary),
    ]);
    accept(Role::Pull, true, &steps);
    // Its client does not beat instead of placing its files.
    let (_, mut d) = accept(Role::Pull, false, &with_handshake(&[(D, K::ManifestEnd)]));
    let u = d.on_recv(&Message::Alive { streams: vec![] }).unwrap_err();
    assert_eq!((u.state, u.kind, u.from), (State::Refusals, K::Alive, C));
    assert!(u.expected.contains(&Expect {
        from: C,
        kind: K::Placement
    }));
}

#[test]
fn a_shard_pull_a_follow_and_a_stopped_push() {
    accept(
        Role::ShardPull,
        false,
        &with_handshake(&[
            (C, K::Shard),
            (D, K::ShardManifest),
            (D, K::ManifestEnd),
            (C, K::Placement),
            (D, K::Ready),
            (D, K::Summary),
        ]),
    );
    accept(
        Role::FollowPush,
        false,
        &with_handshake(&[
            (C, K::ManifestEnd),
            (D, K::Placement),
            (D, K::Ready),
            (C, K::Added),
            (D, K::Admitted),
            (C, K::FileEnd),
            (C, K::Alive),
            (C, K::DirTimes),
            (C, K::AddedEnd),
            (D, K::FileAck),
            (D, K::Summary),
        ]),
    );
    // Ctrl-C: the client's Error, the daemon's Kept, then its Error.
    accept(
        Role::Push,
        false,
        &with_handshake(&[
            (C, K::ManifestEnd),
            (D, K::Placement),
            (D, K::Ready),
            (C, K::Error),
            (D, K::Kept),
            (D, K::Error),
        ]),
    );
}

#[test]
fn dry_runs_bench_and_udp() {
    let dry_push = [
        (C, K::ManifestEnd),
        (D, K::Skipped),
        (D, K::Deleted),
        (D, K::Summary),
    ];
    accept(Role::PushDryRun, false, &with_handshake(&dry_push));
    let dry_pull = [
        (D, K::ManifestEnd),
        (D, K::LeftOut),
        (D, K::Skipped),
        (D, K::Summary),
    ];
    accept(Role::PullDryRun, false, &with_handshake(&dry_pull));
    accept(
        Role::Bench,
        false,
        &with_handshake(&[(D, K::Ready), (D, K::Summary)]),
    );
    let udp = [
        (C, K::UdpPlan),
        (D, K::UdpReady),
        (D, K::UdpCounts),
        (C, K::UdpEnd),
        (D, K::UdpCounts),
        (D, K::UdpCounts),
        (D, K::Summary),
    ];
    accept(Role::Udp, false, &with_handshake(&udp));
    let back = [
        (C, K::UdpPlan),
        (D, K::UdpReady),
        (D, K::UdpCounts),
        (D, K::UdpEnd),
        (C, K::UdpCounts),
        (D, K::Summary),
    ];
    accept(Role::UdpReverse, false, &with_handshake(&back));
    // A data stream says hello, and nothing else.
    let (mut c, _) = accept(Role::Push, false, &[(C, K::StreamHello)]);
    assert!(c.on_send(&Message::Alive { streams: vec![] }).is_err());
}

/// Out of order: refused, naming the state, the kind and what was
/// expected; from then on everything but `Error` is refused.
#[test]
fn out_of_order_is_refused_for_good() {
    let req = request_of(Role::Push, true);
    let (_, mut d) = accept(Role::Push, true, &with_handshake(&[(C, K::ManifestEnd)]));
    let u = d.on_recv(&sample(K::SourceDigests, &req)).unwrap_err();
    assert_eq!(
        (u.state, u.kind, u.from),
        (State::Have, K::SourceDigests, C)
    );
    assert_eq!(u.role, Some(Role::Push));
    assert!(u.expected.contains(&Expect {
        from: D,
        kind: K::HaveEnd
    }));
    assert_eq!(
        u.to_string(),
        "SourceDigests from the client out of order: a push in state have expects HaveEnd from the daemon, Have from the daemon"
    );
    assert_eq!(d.on_send(&sample(K::HaveEnd, &req)), Err(u.clone()));
    assert!(d.on_send(&sample(K::Error, &req)).is_ok());
    // Before a request, no heartbeat; a daemon never says hello.
    let mut fresh = Conversation::new(D, 12);
    assert!(fresh.on_send(&sample(K::Hello, &req)).is_err());
    let mut fresh = Conversation::new(C, 12);
    assert!(fresh.on_send(&sample(K::Alive, &req)).is_err());
}

/// Today's round trips (memo §4): a push with resume waits 4 protocol
/// round trips, 9 with its TCP connect and 16 streams in groups of 4, and
/// 1 after its last byte; 8 without resume; a pull 11 and none after.
#[test]
fn round_trips_today() {
    let rt = |role, resume| round_trips(role, resume, V12);
    let push = rt(Role::Push, true);
    assert_eq!((push.before, push.after), (4, 1));
    assert_eq!(push.with_connects(16, 4), 9);
    assert_eq!(rt(Role::Push, false).with_connects(16, 4), 8);
    let pull = rt(Role::Pull, true);
    assert_eq!((pull.before, pull.after), (6, 0));
    assert_eq!(pull.with_connects(16, 4), 11);
    assert_eq!(rt(Role::ShardPull, true).before, 6);
    assert_eq!(
        (rt(Role::Bench, false).before, rt(Role::Bench, false).after),
        (3, 1)
    );
    assert_eq!(rt(Role::BenchReverse, false).after, 0);
    assert_eq!(
        (rt(Role::Udp, false).before, rt(Role::Udp, false).after),
        (3, 1)
    );
    assert_eq!(rt(Role::UdpReverse, false).before, 4);
    let dry = rt(Role::PushDryRun, true);
    assert_eq!((dry.before, dry.data), (4, false));
    assert_eq!(rt(Role::PullDryRun, true).before, 4);
    assert_eq!(rt(Role::PushDryRun, false).before, 3);
}

/// Protocol 13 takes two round trips off a push and a pull (the welcome,
/// the verdict on nothing held), one off a bench; with its streams
/// connected during the setup, a push waits 3 (TCP, hello, request) before
/// its first byte where protocol 12 waited 9.
#[test]
fn protocol_13_waits_less() {
    let rt = |role, d| round_trips(role, true, d);
    assert_eq!(rt(Role::Push, V12).before, 4);
    assert_eq!(rt(Role::Push, super::V13).before, 2);
    assert_eq!(rt(Role::Push, super::V13).after, 1);
    assert_eq!(rt(Role::Push, V12).with_connects(16, 4), 9);
    assert_eq!(rt(Role::Push, super::V13).before + 1, 3);
    assert_eq!(
        rt(Role::Pull, super::V13).before,
        rt(Role::Pull, V12).before - 2
    );
    assert_eq!(
        rt(Role::Bench, super::V13).before,
        rt(Role::Bench, V12).before - 1
    );
    assert_eq!(
        rt(Role::Info, super::V13).before,
        2,
        "{:?}",
        rt(Role::Info, super::V13)
    );
}

/// A dialect's switches shorten the way without another table: no
/// welcome, no ready, no verdict on nothing held.
#[test]
fn a_dialect_drops_steps() {
    let d = Dialect {
        version: 99,
        welcome: false,
        ready: false,
        verdict_when_nothing_held: false,
    };
    assert_eq!(round_trips(Role::Push, true, d).before, 2);
    let mut c = Conversation::speaking(C, d);
    let req = request_of(Role::Push, true);
    for (from, k) in [
        (C, K::Hello),
        (D, K::Challenge),
        (C, K::Auth),
        (C, K::Request),
    ] {
        c.step(from, &sample(k, &req)).unwrap();
    }
    c.step(C, &Message::ManifestEnd).unwrap();
    c.step(D, &Message::HaveEnd).unwrap();
    assert_eq!(c.state(), State::Refusals);
    c.step(D, &sample(K::Placement, &req)).unwrap();
    assert_eq!(c.state(), State::Data);
}

/// docs/internals/conversation.md is the table's rendering
/// (`URMOVE_BLESS=1` rewrites it).
#[test]
fn the_document_is_the_table() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/internals/conversation.md");
    let text = render(&V12);
    if std::env::var_os("URMOVE_BLESS").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let file = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        file == text,
        "{} differs from the table: URMOVE_BLESS=1 cargo test --lib conversation",
        path.display()
    );
}
