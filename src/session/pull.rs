//! `urmove pull`: the same transfer in the other direction. The daemon
//! walks the requested paths beneath its root and sends them; this side
//! receives them into a local directory exactly as the daemon receives a
//! push (`.urmove.part`, verified blocks, sync, mode, mtime, rename).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::datapath::beneath::Root;
use crate::protocol::control::{Direction, ErrorCode, Message, SessionRequest};
use crate::protocol::manifest::check_path;

use super::conn::recv_msg;
use super::receive::{recv_manifest, Incoming};
use super::send::{drive, open_session, SendConfig, SendObserver, SendReport};
use super::SessionError;

/// Fetch `paths` (under the daemon's root) into `local`.
pub fn run_pull(
    cfg: &SendConfig,
    paths: &[String],
    local: &PathBuf,
    interrupt: &AtomicBool,
    obs: &mut dyn SendObserver,
) -> Result<SendReport, SessionError> {
    for p in paths {
        check_path(p)
            .map_err(|e| SessionError::local(ErrorCode::PathRefused, format!("{p}: {e}")))?;
    }
    let joined = paths.join("\0");
    if joined.len() > crate::protocol::manifest::PATH_LEN_MAX {
        return Err(SessionError::local(
            ErrorCode::TooLarge,
            "too many paths for one pull",
        ));
    }
    std::fs::create_dir_all(local).map_err(|e| SessionError::io(local.display().to_string(), e))?;
    let root = Root::open(local).map_err(|e| SessionError::io(local.display().to_string(), e))?;
    let req = SessionRequest {
        direction: Direction::Pull,
        streams: cfg.streams,
        block_size: cfg.block_size,
        path: joined,
    };
    let mut incoming = None;
    let mut root = Some(root);
    let (mut ctl, streams) = open_session(cfg, req, &mut |ctl| {
        let entries = recv_manifest(ctl)?;
        let root = root.take().expect("the manifest arrives once");
        incoming = Some(Incoming::prepare(
            root,
            String::new(),
            entries,
            u64::from(cfg.block_size),
            cfg.direct,
        )?);
        Ok(())
    })?;
    let mut incoming = incoming.expect("prepared before the streams opened");
    let total = incoming.file_bytes();
    let files = incoming.file_count() as u64;
    let empties = incoming.take_empty_done();
    let (data, mut report) = drive(cfg, total, &streams, interrupt, obs, |counters, _stop| {
        let mut got: Vec<(u32, u64)> = empties.iter().map(|&i| (i, 0)).collect();
        incoming.receive(
            &streams,
            cfg.block_size as usize,
            &mut |b| counters.add(b, 0),
            &mut |i, d| {
                got.push((i, d));
                Ok(())
            },
        )?;
        Ok(got)
    });
    report.command = "pull";
    report.files = files;
    let got = match data {
        Ok(got) => got,
        Err(e) => {
            report.status = if interrupt.load(Ordering::Relaxed) {
                "interrupted"
            } else {
                e.code().name()
            };
            report.error = Some(e.to_string());
            return Ok(report);
        }
    };
    // The daemon's digest of every file must equal ours.
    let ours: std::collections::HashMap<u32, u64> = got.into_iter().collect();
    let mut acked = std::collections::HashSet::new();
    let outcome = (|| -> Result<(), SessionError> {
        loop {
            match recv_msg(&mut ctl)? {
                Message::FileAck { file_index, digest } => {
                    if !acked.insert(file_index) {
                        return Err(SessionError::Protocol(format!("file {file_index} acknowledged twice")));
                    }
                    if ours.get(&file_index) != Some(&digest) {
                        return Err(SessionError::local(
                            ErrorCode::Io,
                            format!("file {file_index}: the sender's digest does not match what arrived"),
                        ));
                    }
                    report.files_verified += 1;
                }
                Message::Summary { ok: true, .. } if report.files_verified == files => return Ok(()),
                Message::Summary { .. } => {
                    return Err(SessionError::local(
                        ErrorCode::Io,
                        format!("only {} of {files} files verified", report.files_verified),
                    ))
                }
                _ => return Err(SessionError::Protocol("unexpected message after the data".into())),
            }
        }
    })()
    .and_then(|()| incoming.finish().map(|_| ()));
    report.close();
    if let Err(e) = outcome {
        report.status = e.code().name();
        report.error = Some(e.to_string());
    }
    Ok(report)
}
