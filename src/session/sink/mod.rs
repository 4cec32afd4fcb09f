//! The sink's data path and the on-disk contract: the files being
//! received (`incoming`: `Incoming`, prepared beneath the root, what it
//! holds before the data in `resume`, its end in `finish`; each `file`;
//! the receiver's `rules`; the `manifest` taken; `part`s and split files'
//! shared parts, `pieces`), their table
//! (`book`), each lane's intake of frames (`intake`) under the session's
//! `landing`; parts named beside their files (`beside`), journals
//! (`journal`), the commit (`commit`, under a `lease`), the stamp
//! (`stamp`), split files' receipts (`receipt`), `--delete` (`prune`) and
//! the daemon's sweep of old parts (`sweep`). Uses `plan` and `link`;
//! never the source.

pub(crate) mod beside;
pub(crate) mod book;
pub(crate) mod commit;
pub(crate) mod file;
pub(crate) mod finish;
pub mod incoming;
pub(crate) mod intake;
pub(crate) mod journal;
pub(crate) mod landing;
pub(crate) mod lease;
pub(crate) mod manifest;
pub(crate) mod part;
pub(crate) mod pieces;
pub(crate) mod prune;
pub(crate) mod receipt;
pub(crate) mod resume;
pub mod rules;
pub(crate) mod stamp;
pub(crate) mod sweep;
