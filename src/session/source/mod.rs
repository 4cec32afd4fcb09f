//! The source's data path: its lanes read the files (`sending`, each lane
//! a `pusher` state machine over its `work`, with its `reads`, its
//! `ledger` of what each stream carried and its `repair` of lost
//! streams), confirm what the receiver held (`confirm`), and follow files
//! still growing (`follow`). Uses `plan` and `link`; never the sink.

pub(crate) mod confirm;
pub(crate) mod follow;
pub(crate) mod ledger;
pub(crate) mod pusher;
pub(crate) mod reads;
pub(crate) mod repair;
pub(crate) mod sending;
pub(crate) mod stream;
pub(crate) mod window;
pub(crate) mod work;
