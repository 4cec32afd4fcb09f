//! L2: rings, registered buffers, op slots, O_DIRECT files, workers.
//!
//! The only room where `unsafe` is allowed. Every `unsafe` block carries a
//! `// SAFETY:` comment naming why the kernel cannot touch freed memory.

/// The integration tests' counting allocator, for the unit tests of loops
/// that must not allocate (the same file: one allocator, two test crates).
#[cfg(test)]
#[path = "../../tests/alloc_count.rs"]
pub(crate) mod alloc_count;
pub mod arena;
pub mod beneath;
pub mod direct;
pub mod disk;
pub mod error;
pub mod file;
pub mod fsyncs;
pub mod growth;
pub mod host;
pub mod ids;
pub mod net;
pub mod ring;
pub mod signature;
pub mod sys;
pub mod tcp;
pub mod topology;
pub mod tun;
pub mod udp;

pub use arena::{Arena, Lease};
pub use direct::{Alignment, DirectMode};
pub use error::Error;
pub use file::{OpenSpec, TargetFile, TargetKind};
pub use ring::{Completion, Ring};
