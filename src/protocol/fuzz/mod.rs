//! Fuzz bodies: each takes arbitrary bytes, drives the real decoders and
//! state machines with them, and asserts what must hold for every input.
//! `fuzz/fuzz_targets/*` call these under libFuzzer; the unit tests
//! (`tests.rs`) replay the committed corpus and every past finding on
//! stable Rust.
//!
//! Every body is deterministic (fixed keys, nonces and session ids) and
//! panics only when an invariant breaks. One file per body: [`frame()`],
//! [`handshake()`], [`manifest()`], [`conversation()`].

mod conversation;
mod frame;
mod handshake;
mod manifest;
#[cfg(test)]
mod tests;

pub use conversation::{conversation, run_conversation, seed as conversation_seed};
pub use frame::frame;
pub use handshake::handshake;
pub use manifest::manifest;
