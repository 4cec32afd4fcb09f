//! The table written out, per role: `docs/internals/conversation.md`.

use std::fmt::Write;

use super::table::{Next, Row, Who, ANY, ROWS, RULES};
use super::{round_trips, Dialect, Role, State};

fn who(w: Who, role: Role) -> String {
    let side = match w {
        Who::Client => "client",
        Who::Daemon => "daemon",
        Who::Source | Who::Sink if role.source() == super::Side::Client => {
            if w == Who::Source {
                "client"
            } else {
                "daemon"
            }
        }
        Who::Source => "daemon",
        Who::Sink => "client",
    };
    side.to_string()
}

fn then(next: Next, role: Role, d: &Dialect) -> String {
    let verdict = if role.dry() { "answer" } else { "refusals" };
    let placed = if d.ready { "placed" } else { "data" };
    match next {
        Next::Stay => "(stays)".into(),
        Next::To(s) => s.name().into(),
        Next::AfterAuth if d.welcome => "auth".into(),
        Next::AfterAuth => "welcome".into(),
        Next::AfterRequest => match role {
            Role::Bench | Role::BenchReverse => placed.into(),
            Role::Udp | Role::UdpReverse => "udp-ask".into(),
            Role::ShardPull => "shard-ask".into(),
            Role::PullDryRun => "shard-ask (shard), else listing".into(),
            _ => "listing".into(),
        },
        Next::AfterManifest => format!("have (resume), else {verdict}"),
        Next::AfterHave if d.verdict_when_nothing_held => "verdict".into(),
        Next::AfterHave => format!("verdict, or {verdict} when nothing is held"),
        Next::AfterVerdict => verdict.into(),
        Next::AfterPlacement => placed.into(),
    }
}

/// The conversation of every role in `d`, as Markdown tables, with the
/// rules and each role's round trips.
/// What protocol 13 changes, and its round trips per role.
fn protocol_13() -> String {
    let mut w = String::from(
        "Protocol 13 (`V13`) has no `Welcome` (the session id comes from the\nnonces and the request follows the proof), and no verdict after a `Have`\nthat named nothing. Round trips before the first byte (after the last),\nprotocol 12 against 13:\n\n| role | 12 | 13 |\n|---|--:|--:|\n",
    );
    for role in Role::ALL {
        let (a, b) = (
            round_trips(role, true, super::V12),
            round_trips(role, true, super::V13),
        );
        let _ = writeln!(
            w,
            "| {} | {} ({}) | {} ({}) |",
            role.name(),
            a.before,
            a.after,
            b.before,
            b.after
        );
    }
    w
}

pub fn render(d: &Dialect) -> String {
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(w, "# The conversation on a control connection\n");
    let _ = writeln!(
        w,
        "Generated from `src/protocol/conversation/table.rs` (protocol {}) by\n`protocol::conversation::render`; `URMOVE_BLESS=1 cargo test --lib conversation`\nrewrites it. Both sides check every control message against this table\n(`session::link::conn`); a message out of order ends the session.\n",
        d.version
    );
    let _ = writeln!(w, "Allowed in any state, as rules:\n");
    for (_, kind, when) in RULES {
        let _ = writeln!(w, "- `{kind}`: {when}.");
    }
    let _ = writeln!(
        w,
        "\nRound trips count the protocol's only: the client's waits for the daemon\nbefore the first data byte and after the last. A TCP connect comes on top;\nin protocol 12 so do the data streams (connected 4 at a time after `Ready`:\na push of 16 streams with resume waits 4 + 1 + 4 = 9 before its first byte),\nwhile in protocol 13 they connect during the setup (3 in all). The counts\nof protocol 13 are for a receiver that holds nothing yet (no verdict).\n\n{}",
        protocol_13()
    );
    let _ = writeln!(w, "\n## The handshake, and a data stream's hello\n");
    let _ = writeln!(w, "| state | from | sends | then |\n|---|---|---|---|");
    for row in ROWS
        .iter()
        .filter(|x| x.roles == ANY && x.state != State::Welcome)
    {
        line(w, row, Role::Push, d);
    }
    for role in Role::ALL {
        let _ = writeln!(w, "\n## {}\n", role.name());
        let r = |resume| round_trips(role, resume, *d);
        let (on, off) = (r(true), r(false));
        if !on.data {
            let _ = writeln!(
                w,
                "Round trips until its end: {} with resume, {} without.\n",
                on.before, off.before
            );
        } else if role.resumable() {
            let _ = writeln!(w, "Round trips: {} before the first byte with resume ({} without), {} after the last.\n", on.before, off.before, on.after);
        } else {
            let _ = writeln!(
                w,
                "Round trips: {} before the first byte, {} after the last.\n",
                on.before, on.after
            );
        }
        let _ = writeln!(w, "| state | from | sends | then |\n|---|---|---|---|");
        let mut states: Vec<State> = ROWS.iter().map(|r| r.state).collect();
        states.sort();
        states.dedup();
        for s in states {
            let mine = |x: &&Row| {
                x.state == s
                    && x.roles & role.bit() != 0
                    && (x.roles != ANY || x.state == State::Welcome)
            };
            for row in ROWS.iter().filter(mine) {
                line(w, row, role, d);
            }
        }
    }
    out
}

/// One row of `role`'s table.
fn line(w: &mut String, row: &Row, role: Role, d: &Dialect) {
    let kinds: Vec<String> = row.kinds.iter().map(|k| format!("`{k}`")).collect();
    let _ = writeln!(
        w,
        "| {} | {} | {} | {} |",
        row.state.name(),
        who(row.who, role),
        kinds.join(", "),
        then(row.next, role, d)
    );
}
