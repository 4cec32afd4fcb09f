//! `urmove info HOST`: what a daemon is, as text or one JSON document.

use crate::coord::units::{bytes_both, count};
use crate::session::client::config::SendConfig;
use crate::session::client::info::{ask, DaemonAbout};
use crate::session::SessionError;

use super::args::InfoArgs;
use super::{keys, Failure};

/// Ask, print; a daemon too old to answer is a usage error (exit 2), with
/// its release and what to upgrade.
pub fn info(a: InfoArgs) -> Result<u8, Failure> {
    let key = keys::load(&a.key_file).map_err(Failure::Usage)?;
    let cfg = SendConfig::to(a.host.clone(), a.port, key);
    match ask(&cfg) {
        Ok(about) if a.json => {
            let text = serde_json::to_string(&about).map_err(|e| Failure::Run(e.into()))?;
            println!("{text}");
            Ok(0)
        }
        Ok(about) => {
            print!("{}", text(&format!("{}:{}", a.host, a.port), &about));
            Ok(0)
        }
        Err(e @ SessionError::Lacks(_)) => Err(Failure::Usage(e.into())),
        Err(e) => Err(Failure::Run(e.into())),
    }
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// The report, one line a fact.
pub fn text(daemon: &str, about: &DaemonAbout) -> String {
    let d = &about.info;
    let rows = [
        ("daemon", daemon.to_string()),
        // The daemon's words: shown, never obeyed by the terminal.
        (
            "release",
            format!("urmove {}", super::service::escape_controls(&d.release)),
        ),
        (
            "protocols",
            format!(
                "{}-{} (this session: {})",
                d.protocol_oldest, d.protocol_newest, about.protocol_spoken
            ),
        ),
        (
            "sessions",
            format!("{} running, at most {}", d.sessions_running, d.sessions_max),
        ),
        ("streams", format!("at most {} per session", d.streams_max)),
        (
            "files",
            format!(
                "at most {} per session",
                count(u64::from(d.files_max), "entry")
            ),
        ),
        (
            "blocks",
            format!("up to {}", bytes_both(u64::from(d.block_max))),
        ),
        ("pull only", yes(d.pull_only).into()),
        ("encryption required", yes(d.encryption_required).into()),
        ("free under its root", bytes_both(d.root_free_bytes)),
    ];
    rows.iter().map(|(k, v)| format!("{k:<20} {v}\n")).collect()
}
