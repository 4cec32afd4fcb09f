//! The sink's data path and the on-disk contract:
//!
//! - the files being received: `incoming` (`Incoming`, every entry
//!   prepared beneath the root), `resume` (what this side holds before the
//!   data), `finish` (links and directories at the end), each `file`, the
//!   receiver's `rules`, the `manifest` it takes;
//! - the data: each lane's `intake` of frames under the session's
//!   `landing`, into the `book` of files (`book_follow`, `book_journal`);
//! - on disk: `part`s (and a split file's shared part, `pieces`) named
//!   `beside` their files, `journal`s, the `commit` under a `lease` (small files in a `batch`), the
//!   `stamp`, split files' `receipt`s, `--delete` (`prune`) and the
//!   daemon's `sweep` of old parts.
//!
//! Uses `plan` and `link`; never the source.

pub(crate) mod batch;
pub(crate) mod beside;
pub(crate) mod book;
pub(crate) mod book_follow;
pub(crate) mod book_journal;
pub(crate) mod book_stream;
pub(crate) mod commit;
pub(crate) mod file;
pub(crate) mod finish;
pub mod incoming;
pub(crate) mod intake;
pub(crate) mod journal;
pub mod kept;
pub(crate) mod landing;
pub(crate) mod lease;
pub(crate) mod made;
pub(crate) mod manifest;
pub(crate) mod part;
pub(crate) mod pieces;
pub(crate) mod prune;
pub(crate) mod receipt;
pub(crate) mod resume;
pub mod rules;
pub(crate) mod stamp;
pub(crate) mod sweep;
