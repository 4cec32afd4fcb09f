//! L1 leaf: pure formats shared by the disk path and (later) the wire.
//!
//! No I/O, no `unsafe`: everything here is a function of bytes, so it can be
//! unit-tested and fuzzed.
#![forbid(unsafe_code)]

pub mod block;
