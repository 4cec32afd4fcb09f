//! What a transfer is to move, worked out before any data: the tree a
//! source scans (`tree`, read by several threads in `walk`, with `filter`
//! for what rules leave out and `extents` for a sparse file's data), what the receiver already holds
//! (`held`) and the digests that judge it (`digest`), which lane carries
//! which file (`route`), and a shard's share of the transfer (`shard`).
//! Uses `link` only.

pub mod digest;
pub(crate) mod extents;
pub mod filter;
pub mod held;
pub(crate) mod route;
pub mod shard;
pub mod tree;
pub mod unsendable;
pub mod walk;
