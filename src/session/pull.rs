//! `urmove pull`: the same transfer in the other direction. The daemon
//! walks the requested paths beneath its root and sends them; this side
//! receives them into a local directory exactly as the daemon receives a
//! push (`.urmove.part`, verified blocks, sync, mode, mtime, rename).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::datapath::beneath::Root;
use crate::protocol::control::{Direction, ErrorCode, Message, SessionRequest};
use crate::protocol::manifest::check_path;
use crate::protocol::manifest::ENTRIES_MAX;

use super::conn::recv_msg;
use super::receive::{recv_manifest, Incoming, Resume};
use super::send::{drive, open_session, recv_digests, Held, SendConfig, SendObserver, SendReport};
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
        flags: cfg.flags(),
        path: joined,
    };
    let mut incoming = None;
    let mut root = Some(root);
    let (mut ctl, streams, keys) = open_session(cfg, req, &mut |ctl| {
        let entries = recv_manifest(ctl, ENTRIES_MAX)?;
        let resume = (cfg.resume || cfg.checksum).then(Resume::default);
        let resume = match resume {
            Some(mut r) if cfg.checksum => {
                r.digests = Some(recv_digests(ctl, entries.len())?);
                Some(r)
            }
            r => r,
        };
        let root = root.take().expect("the manifest arrives once");
        let mut beat = super::conn::Beat::new(ctl)?;
        let mut prepared = Incoming::prepare(
            root,
            String::new(),
            entries,
            u64::from(cfg.block_size),
            cfg.direct,
            resume.as_ref(),
            // Heartbeats only when the daemon reads them (it waits for
            // what this side holds).
            &mut || {
                if cfg.resume || cfg.checksum {
                    beat.tick()
                }
            },
        )?;
        if resume.is_some() {
            Held::send(ctl, prepared.take_have())?;
        }
        incoming = Some(prepared);
        Ok(())
    })?;
    let mut incoming = incoming.expect("prepared before the streams opened");
    let total = incoming.bytes_missing();
    let skipped = incoming.file_bytes().saturating_sub(total);
    let files = incoming.file_count() as u64;
    let complete_before = incoming.complete_before().len() as u64;
    if cfg.resume || cfg.checksum {
        obs.info(&format!(
            "resuming: {complete_before} files complete here already; {total} bytes to fetch"
        ));
    }
    let at_start = incoming.take_done_at_start();
    let files_done = Arc::new(AtomicU64::new(complete_before + at_start.len() as u64));
    obs.files(Arc::clone(&files_done), files);
    let open = cfg
        .encrypt
        .then_some((keys, crate::protocol::seal::Direction::ServerToClient));
    let (data, mut report) = drive(cfg, total, &streams, interrupt, obs, |counters, _stop| {
        let mut got: Vec<(u32, u64)> = at_start.clone();
        incoming.receive(
            &streams,
            cfg.block_size as usize,
            cfg.timeout,
            &open,
            &mut |b| counters.add(b, 0),
            &mut |i, d| {
                files_done.fetch_add(1, Ordering::Relaxed);
                got.push((i, d));
                Ok(())
            },
            &mut |_| Ok(()),
        )?;
        Ok(got)
    });
    report.command = "pull";
    report.files = files;
    report.bytes_skipped = skipped;
    report.files_verified = complete_before;
    let got = match data {
        Ok(got) => got,
        Err(e) => {
            report.fail(&e, interrupt.load(Ordering::Relaxed));
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
                Message::Alive { .. } => {}
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
        report.fail(&e, false);
    }
    Ok(report)
}
