//! `urmove recv`: the daemon. Its `config` and `startup` checks, the
//! `server` that accepts and admits connections (`admit` throttles
//! strangers), each `connection` from handshake to session, the sessions
//! by kind (`push`, `pull`, `bench`; UDP tests in `probe`), their data
//! `streams`, and what they share (`registry`), count (`stats`), report
//! (`progress`) and log (`log`). Uses every room below.

pub(crate) mod admit;
pub(crate) mod bench;
pub(crate) mod config;
pub(crate) mod connection;
pub(crate) mod info;
pub mod log;
pub(crate) mod progress;
pub(crate) mod pull;
pub(crate) mod push;
pub(crate) mod registry;
pub(crate) mod server;
pub(crate) mod startup;
pub(crate) mod stats;
pub(crate) mod stdio;
pub(crate) mod streams;

pub use config::{Limits, RecvConfig};
pub use log::{Level, Log};
pub use server::serve;
pub use stats::{DaemonStats, SessionStat};
pub use stdio::{quiet_log, serve_stdio};
