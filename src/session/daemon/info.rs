//! `urmove info` on the daemon's side (protocol 13): one `DaemonInfo`
//! (its release, the protocols it speaks, its limits, its sessions now and
//! the free bytes under its root), and the session ends. Nothing moves,
//! nothing is reserved.

use std::sync::atomic::Ordering;

use crate::datapath::sys;
use crate::protocol::control::{
    DaemonInfo, Message, PROTOCOL_NEWEST, PROTOCOL_OLDEST, STREAMS_MAX,
};
use crate::protocol::frame::FRAME_PAYLOAD_MAX;
use crate::session::link::conn::{send_msg, Control};
use crate::session::SessionError;

use super::config::RecvConfig;
use super::registry::Registry;

/// What the daemon says of itself.
pub(super) fn daemon_info(cfg: &RecvConfig, registry: &Registry) -> Message {
    let clamp = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    Message::DaemonInfo(DaemonInfo {
        release: env!("CARGO_PKG_VERSION").to_string(),
        protocol_oldest: PROTOCOL_OLDEST,
        protocol_newest: PROTOCOL_NEWEST,
        streams_max: cfg.limits.streams.min(STREAMS_MAX),
        sessions_max: clamp(cfg.limits.sessions),
        sessions_running: clamp(registry.stats.sessions_active.load(Ordering::Acquire)),
        files_max: cfg.limits.files,
        block_max: FRAME_PAYLOAD_MAX,
        pull_only: cfg.pull_only,
        encryption_required: cfg.require_encryption,
        root_free_bytes: sys::free_bytes(&cfg.root).ok().flatten().unwrap_or(0),
    })
}

/// Answer an `Info` request.
pub(super) fn info_session(
    s: &mut Control,
    cfg: &RecvConfig,
    registry: &Registry,
) -> Result<(), SessionError> {
    send_msg(s, &daemon_info(cfg, registry))
}
