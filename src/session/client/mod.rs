//! The commands a user runs against a daemon: `send` and `pull` (with
//! their `config` and `report`; `connect` opens a session), a dry run's
//! `survey`, the progress `watch`, a shard's report (`shard_report`) and
//! `urmove report` (`merge`). Uses the roles and every room below them.

pub mod config;
pub(crate) mod connect;
pub mod info;
pub mod merge;
pub mod pull;
pub mod report;
pub mod send;
pub mod shard_report;
pub mod ssh;
pub mod survey;
pub(crate) mod watch;
