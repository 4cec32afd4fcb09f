//! `urmove info HOST`: what a daemon is (protocol 13): its release, the
//! protocols it speaks, its limits, its sessions now and the free bytes
//! under its root, from one `DaemonInfo`. A daemon of protocol 12 is
//! refused before the request, by name.

use serde::Serialize;

use crate::protocol::control::{Direction, Message, SessionRequest};
use crate::session::link::conn::recv_msg;
use crate::session::SessionError;

use super::config::SendConfig;

/// What the daemon said of itself, and the version this session spoke.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DaemonAbout {
    pub release: String,
    pub protocol_oldest: u16,
    pub protocol_newest: u16,
    pub protocol_spoken: u16,
    pub streams_max: u16,
    pub sessions_max: u32,
    pub sessions_running: u32,
    pub files_max: u32,
    pub block_max: u32,
    pub pull_only: bool,
    pub encryption_required: bool,
    pub root_free_bytes: u64,
}

/// Ask the daemon of `cfg` what it is.
pub fn ask(cfg: &SendConfig) -> Result<DaemonAbout, SessionError> {
    let req = SessionRequest {
        direction: Direction::Info,
        streams: 1,
        block_size: 4096,
        flags: 0,
        path: String::new(),
        owner: [0; 32],
        rate_limit: 0,
        filter: Vec::new(),
        time_ms: 0,
    };
    let begun = super::connect::handshake(cfg, req)?;
    let mut ctl = begun.ctl;
    let spoken = ctl.protocol();
    match recv_msg(&mut ctl)? {
        Message::DaemonInfo {
            release,
            oldest,
            newest,
            streams_max,
            sessions_max,
            sessions_running,
            files_max,
            block_max,
            pull_only,
            encryption_required,
            root_free,
        } => Ok(DaemonAbout {
            release,
            protocol_oldest: oldest,
            protocol_newest: newest,
            protocol_spoken: spoken,
            streams_max,
            sessions_max,
            sessions_running,
            files_max,
            block_max,
            pull_only,
            encryption_required,
            root_free_bytes: root_free,
        }),
        _ => Err(SessionError::Protocol(
            "expected what the daemon is (DaemonInfo)".into(),
        )),
    }
}
