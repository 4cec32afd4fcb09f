//! `urmove recv`: the daemon's listener, admission, sessions of every
//! kind and their metrics (`recv`), the per-address and log throttles
//! (`admit`) and its log (`log`). Uses every room below.

pub(crate) mod admit;
pub mod log;
pub mod recv;
