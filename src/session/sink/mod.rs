//! The sink's data path and the on-disk contract: the files being
//! received (`receive`: `Incoming`, the receiver's `Rules`), their table
//! (`book`), each lane's intake of frames (`intake`) under the session's
//! `landing`; parts named beside their files (`beside`), journals
//! (`journal`), the commit (`commit`, under a `lease`), the stamp
//! (`stamp`), split files' receipts (`receipt`), `--delete` (`prune`) and
//! the daemon's sweep of old parts (`sweep`). Uses `plan` and `link`;
//! never the source.

pub(crate) mod beside;
pub(crate) mod book;
pub(crate) mod commit;
pub(crate) mod intake;
pub(crate) mod journal;
pub(crate) mod landing;
pub(crate) mod lease;
pub(crate) mod prune;
pub(crate) mod receipt;
pub mod receive;
pub(crate) mod stamp;
pub(crate) mod sweep;
