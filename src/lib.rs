//! urmove: an io_uring data mover for storage servers.
//!
//! The crate is built in rooms, each of which may use only the rooms below it
//! (see `tests/tests.rs`, module `linters`, which keeps this honest):
//!
//! ```text
//! cli       L4  argument parsing, host probes into configs, rendering (anyhow lives here)
//! http      L3  recv's HTTPS WebDAV front: third-party copy, checksums, tokens (uses session)
//! session   L3  send / recv orchestration
//! bench     L3  bench --disk (datapath + coord only)
//! datapath  L2  rings, registered buffers, op slots, O_DIRECT files; the only unsafe room
//! protocol  L1  pure formats: block stamps, wire frames
//! coord     L1  counters, interval sampling, histograms, the sustained-rate gate
//! ```

pub mod bench;
pub mod cli;
pub mod coord;
pub mod datapath;
pub mod http;
pub mod protocol;
pub mod session;
