//! `urmove info HOST`: what a daemon is (protocol 13): its release, the
//! protocols it speaks, its limits, its sessions now and the free bytes
//! under its root, from one `DaemonInfo`. A daemon of protocol 12 is
//! refused before the request, by name.

use serde::Serialize;

use crate::protocol::control::{DaemonInfo, Direction, Message, SessionRequest};
use crate::session::link::conn::recv_msg;
use crate::session::SessionError;

use super::config::SendConfig;

/// What the daemon said of itself, and the version this session spoke.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DaemonAbout {
    #[serde(flatten)]
    pub info: DaemonInfo,
    pub protocol_spoken: u16,
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
        Message::DaemonInfo(info) => Ok(DaemonAbout {
            info,
            protocol_spoken: spoken,
        }),
        _ => Err(SessionError::Protocol(
            "expected what the daemon is (DaemonInfo)".into(),
        )),
    }
}
