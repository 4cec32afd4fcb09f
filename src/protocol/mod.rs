//! L1 leaf: pure formats: block stamps on disk, and the versioned wire
//! protocol (handshake, control messages, manifest, data frames and their
//! encryption).
//!
//! No I/O, no `unsafe`: everything here is a function of bytes, so it can be
//! unit-tested and fuzzed.
#![forbid(unsafe_code)]

pub mod block;
pub mod catalogue;
pub mod checksum;
pub mod control;
pub mod conversation;
pub mod frame;
pub mod fuzz;
pub mod handshake;
pub mod manifest;
pub mod names;
pub mod negotiate;
pub mod seal;
pub mod sparse;
pub mod ssh;
pub mod wire;
