//! One wire contract that negotiates (protocol 12 and 13): `urmove info`
//! against this build's daemon, an offer from a release to come refused
//! with the versions as fields, and a reversed bench whose length travels
//! as a field. The previous release itself is run in tests/compat.rs.

use std::io::Write;
use std::path::Path;

use urmove::protocol::control::{encode, Message};
use urmove::protocol::handshake::ClientHandshake;
use urmove::protocol::negotiate::Range;

use crate::transfer::Daemon;
use crate::util::{connect, json, key_of, read_msg, stdout, urmove};

fn info(d: &Daemon, extra: &[&str]) -> std::process::Output {
    let mut c = urmove();
    c.args(["info", "127.0.0.1", "-p", &d.port.to_string(), "--key-file"])
        .arg(&d.key)
        .args(extra);
    c.output().unwrap()
}

/// `urmove info` says the daemon's release, the protocols it speaks and
/// the limits it was started with, as text and as JSON; the daemon logs
/// the question and reserves nothing for it.
#[test]
fn info_reports_the_release_protocols_and_limits() {
    let d = Daemon::start_full(
        &[],
        "127.0.0.1",
        Path::new("/var/tmp"),
        &["--max-streams", "5", "--max-sessions", "3", "--pull-only"],
    );
    let o = info(&d, &["--json"]);
    assert!(o.status.success(), "{}", d.log());
    let v = json(&o);
    assert_eq!(v["release"], env!("CARGO_PKG_VERSION"), "{v}");
    assert_eq!(v["protocol_oldest"], 12, "{v}");
    assert_eq!(v["protocol_newest"], 14, "{v}");
    assert_eq!(v["protocol_spoken"], 14, "{v}");
    assert_eq!(v["streams_max"], 5, "{v}");
    assert_eq!(v["sessions_max"], 3, "{v}");
    assert_eq!(v["sessions_running"], 0, "{v}");
    assert_eq!(v["pull_only"], true, "{v}");
    assert_eq!(v["encryption_required"], false, "{v}");
    assert!(v["root_free_bytes"].as_u64().unwrap() > 0, "{v}");
    let o = info(&d, &[]);
    assert!(o.status.success(), "{}", d.log());
    let text = stdout(&o);
    for want in [
        &format!("release              urmove {}", env!("CARGO_PKG_VERSION"))[..],
        "protocols            12-14 (this session: 14)",
        "streams              at most 5 per session",
        "sessions             0 running, at most 3",
        "pull only            yes",
    ] {
        assert!(text.contains(want), "{want:?} in\n{text}");
    }
    assert!(d.log().contains("info asked"), "{}", d.log());
}

/// A client of a release to come that speaks only protocols 15 and 16 is
/// answered with the versions this daemon speaks, as fields
/// (`VersionRefused`), before any challenge: nothing to parse.
#[test]
fn an_offer_with_no_common_version_gets_the_daemons_versions() {
    let d = Daemon::start();
    let (_, hello) = ClientHandshake::speaking(key_of(&d.key), [3; 32], Range { min: 15, max: 16 });
    let mut s = connect(d.port);
    s.write_all(&encode(&Message::Hello(hello))).unwrap();
    assert_eq!(
        read_msg(&mut s),
        Message::VersionRefused {
            oldest: 12,
            newest: 14
        }
    );
}

/// A reversed bench says its length as a field in protocol 13 (12 wrote it
/// into the path): the daemon sends for what was asked, with checksums
/// under --verify (the client refuses unchecked frames then).
#[test]
fn a_reversed_bench_runs_for_the_length_asked() {
    let d = Daemon::start();
    let mut c = urmove();
    c.args(d.bench_net_args("127.0.0.1"))
        .args(["--reverse", "--verify", "--time", "2", "--json"]);
    let o = c.output().unwrap();
    assert!(o.status.success(), "{}", d.log());
    let v = json(&o);
    let test = v["test_s"].as_f64().unwrap_or_else(|| panic!("{v}"));
    assert!((1.8..4.0).contains(&test), "{v}");
}
