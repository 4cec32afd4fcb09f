//! The source's data path: its lanes read the files (`sending`, each lane
//! a `pusher` state machine over its `work`), confirm what the receiver
//! held (`confirm`), and follow files still growing (`follow`). Uses
//! `plan` and `link`; never the sink.

pub(crate) mod confirm;
pub(crate) mod follow;
pub(crate) mod pusher;
pub(crate) mod sending;
pub(crate) mod work;
