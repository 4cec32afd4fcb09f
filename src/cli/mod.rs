//! L4: parse the command line, resolve it against the host into configs, run,
//! render, and turn the outcome into an exit code. `anyhow` lives here only.

pub mod args;
mod bench;
pub mod config;
mod demo;
mod dry_run;
mod filters;
mod info;
pub mod keys;
mod metrics_http;
pub mod parse;
pub mod plot;
mod progress;
pub mod render;
mod report;
pub mod service;
mod shell;
mod transfer;
mod tune;
mod udp;

use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::Context;

use crate::datapath::sys;

use args::{Cli, Command};

/// Exit code of a run that failed (I/O error, verify failure, gate not met).
pub const EXIT_FAILED: u8 = 1;
/// Exit code of a usage or configuration error.
pub const EXIT_USAGE: u8 = 2;
/// Exit code of a transfer that moved and verified everything it could but
/// skipped some entries, each named with its reason (as rsync's 23).
pub const EXIT_PARTIAL: u8 = 23;

/// Every exit code and what it means, as `--help`, the man pages and
/// docs/transfers.md list them.
pub const EXIT_CODES: &[(&str, &str)] = &[
    (
        "0",
        "success: every file verified (send, pull), every file of the manifest committed (report), the test ran and met its gate (bench)",
    ),
    (
        "23",
        "a transfer verified everything it moved, but skipped some entries, each named with why: left out by a rule (a receiver's policy, a name its filesystem cannot hold), which a run again cannot mend, or a fault (vanished, unreadable, changed during the send), which it may",
    ),
    (
        "1",
        "the run failed: an I/O error, files that arrived different, the --min-rate gate not met, the peer gone or refusing, or interrupted (Ctrl-C); what was verified is kept for the next run",
    ),
    (
        "2",
        "usage or configuration: bad arguments, a key, config or state directory refused (the message says what to change), the peer refusing the key or the path",
    ),
    (
        "other",
        "urmove did not end by itself: killed by a signal (a shell shows 128+N, as 137 for kill -9) or a bug (101: it panicked; please report it)",
    ),
];

/// What went wrong, and which exit code it earns.
#[derive(Debug)]
pub(crate) enum Failure {
    Usage(anyhow::Error),
    Run(anyhow::Error),
}

/// Parse, run, and map the result to an exit code (the binary's whole main).
pub fn main() -> ExitCode {
    sys::ignore_sigxfsz();
    sys::ignore_sigio();
    let parsed = <Cli as clap::CommandFactory>::command()
        .try_get_matches()
        .and_then(|m| <Cli as clap::FromArgMatches>::from_arg_matches(&m).map(|c| (c, m)));
    let (cli, matches) = match parsed {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EXIT_USAGE } else { 0 });
        }
    };
    let result = match cli.command {
        Command::Bench(a) => bench::bench(a),
        Command::Recv(a) => transfer::recv(a),
        Command::Send(a) => {
            filters::of(matches.subcommand_matches("send")).and_then(|f| transfer::send(a, f))
        }
        Command::Demo(a) => demo::demo(a),
        Command::Pull(a) => {
            filters::of(matches.subcommand_matches("pull")).and_then(|f| transfer::pull(a, f))
        }
        Command::Report(a) => report::report(a),
        Command::Tune(a) => tune::tune(a),
        Command::Info(a) => info::info(a),
        Command::Keygen { file } => keys::keygen(&file).map(|()| 0).map_err(Failure::Usage),
        Command::Completions { shell } => shell::completions(shell),
        Command::Man { dir } => shell::man(dir.as_deref()),
        Command::Serve(a) => transfer::serve(a),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(Failure::Usage(e)) => {
            render::error(&format!("{e:#}"));
            ExitCode::from(EXIT_USAGE)
        }
        Err(Failure::Run(e)) => {
            render::error(&format!("{e:#}"));
            ExitCode::from(EXIT_FAILED)
        }
    }
}

pub(crate) fn interrupt_flag() -> anyhow::Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&flag))
            .context("installing a signal handler")?;
    }
    Ok(flag)
}
