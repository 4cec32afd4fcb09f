//! The commands a user runs against a daemon: `send` (its config and
//! report), `pull`, a dry run's `survey`, the progress `watch`, a shard's
//! report (`shard_report`) and `urmove report` (`merge`). Uses the roles
//! and every room below them.

pub mod merge;
pub mod pull;
pub mod send;
pub mod shard_report;
pub mod survey;
pub(crate) mod watch;
