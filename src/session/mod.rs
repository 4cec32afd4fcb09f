//! L3: send / recv orchestration (handshake, lanes, workers, finish).
//!
//! This room holds the transfer sessions of `urmove send`, `urmove recv` and
//! `urmove pull`. It may use `datapath`, `protocol` and `coord`; nothing below it
//! may use it. It is empty until the transfer path lands: the disk benchmark,
//! the first capability, needs no session.
