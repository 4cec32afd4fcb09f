//! What the two ends of a session share to talk: the control connection
//! (`conn`: messages, the peer's reader and its events), the lanes that
//! carry the data streams (`lanes`) and the streams' descriptors and
//! sealing (`streams`), the keys a receiver and a client keep (`secret`),
//! and an entry one side refused, as it says it (`refused`). Every other
//! room may use this one; it uses none of them.

pub mod conn;
pub mod lanes;
pub(crate) mod refused;
pub mod relay;
pub mod secret;
pub(crate) mod streams;
