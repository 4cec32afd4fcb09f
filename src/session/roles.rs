//! The two roles of a transfer, each one piece of code whichever end plays
//! it: the source (`send`, and the daemon's side of a `pull`) and the sink
//! (the daemon's side of a push, and `pull`). Client and daemon differ only
//! in how they come by the control connection and the data streams (a
//! client connects them, a daemon accepts and collects them), and in that
//! the daemon, source or sink, ends the session with its summary.
//!
//! After the request, on the control connection, in this order:
//!
//! 1. the source sends its manifest ([`offer`]);
//! 2. when resuming, the sink says what it holds, the source checks it
//!    against its files and says what was wrong ([`offer`],
//!    [`settle_held`]);
//! 3. the sink says which entries it will not create and where it writes
//!    each file, its placement by device ([`place`]); the source hears
//!    both ([`hear`]) and routes its frames (`route::for_source`);
//! 4. the data streams (then `Ready`, from the daemon);
//! 5. the data: the source's lanes (`source::push_data`), the sink's
//!    (`Incoming::receive`), whose `Landing` acknowledges each file;
//! 6. the summary: the daemon's, checked by the client ([`differed`] when
//!    files arrived changed).

use std::fs::File;

use crate::protocol::control::{ErrorCode, Message, MANIFEST_PART_ENTRIES_MAX};
use crate::protocol::frame::FrameKey;
use crate::protocol::manifest::Entry;

use super::link::conn::{recv_msg, send_msg, unexpected, Control};
use super::link::lanes::Lane;
use super::link::refused::Refused;
use super::plan::held::{recv_verdict, Held};
use super::plan::route::Placement;
use super::plan::tree::Tree;
use super::sink::incoming::Incoming;
use super::SessionError;

/// What the sink said before the data: the entries it will not create,
/// and its placement (each stream's class and runs of entries' classes;
/// empty: no routing).
#[derive(Debug, Default)]
pub(crate) struct Before {
    pub(crate) refused: Vec<Refused>,
    pub(crate) placement: Placement,
    /// A pull's daemon: what its scan left out unnamed (entries its
    /// filter excluded, device nodes without `-D`).
    pub(crate) left_out: (u64, u64),
}

/// Send a manifest in parts, then its end.
pub(crate) fn send_manifest(ctl: &mut Control, entries: &[Entry]) -> Result<(), SessionError> {
    for part in entries.chunks(MANIFEST_PART_ENTRIES_MAX as usize) {
        send_msg(ctl, &Message::Manifest(part.to_vec()))?;
    }
    send_msg(ctl, &Message::ManifestEnd)
}

/// The source's part of the setup: send `tree`'s manifest and, when
/// resuming (with the session's frame key, and whether `--checksum` asks
/// for every held file's content), take what the sink holds
/// (memory for its ranges asked of `reserve`), check it against the files
/// as `local` opens them (the page cache will do) and tell the sink what
/// was wrong. What is held and right comes back.
pub(crate) fn offer(
    ctl: &mut Control,
    tree: &Tree,
    block: u64,
    resume: Option<(&FrameKey, bool)>,
    local: &dyn Fn(usize) -> Result<File, super::plan::unsendable::Unsendable>,
    reserve: &mut dyn FnMut(u64) -> Result<(), SessionError>,
) -> Result<Held, SessionError> {
    send_manifest(ctl, &tree.entries)?;
    let Some((key, by_content)) = resume else {
        return Ok(Held::default());
    };
    let mut held = Held::receive(ctl, &tree.entries, block, by_content, reserve)?;
    held.verify(ctl, tree, block, key, local)?;
    Ok(held)
}

/// Until when the source listens to the sink before the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Until {
    /// A client: until the daemon's `Ready` (its placement comes before).
    Ready,
    /// A daemon: until the client's placement, for a manifest of
    /// `entries` (no more refusals than it has are taken).
    Placement { entries: usize },
}

/// The source hears what the sink says before the data (see [`Before`]):
/// until `until`, the entries it refuses and its placement. A daemon beats
/// while it prepares (a client is told there what a daemon source's scan
/// left out too); a client has no reason to, and its refusals are only
/// counted (the daemon has nothing to do with them), no more of them than
/// its manifest has entries.
pub(crate) fn hear(ctl: &mut Control, until: Until) -> Result<Before, SessionError> {
    let mut before = Before::default();
    let mut refusals = 0usize;
    loop {
        match (until, recv_msg(ctl)?) {
            (Until::Ready, Message::Ready) => return Ok(before),
            (_, Message::Placement { streams, entries }) => {
                before.placement = Placement::new(streams, entries);
                if until != Until::Ready {
                    return Ok(before);
                }
            }
            (Until::Ready, Message::Alive { .. }) => {}
            (Until::Ready, Message::LeftOut { excluded, devices }) => {
                before.left_out = (excluded, devices);
            }
            (
                Until::Ready,
                Message::Skipped {
                    file_index,
                    path,
                    reason,
                    rule,
                },
            ) => before
                .refused
                .push(Refused::from_message(file_index, path, reason, rule)),
            // A pull's client: what it will not take is not sent.
            (
                Until::Placement { entries },
                Message::Skipped {
                    file_index,
                    path,
                    reason,
                    rule,
                },
            ) => {
                refusals += 1;
                if refusals > entries {
                    return Err(SessionError::local(
                        ErrorCode::Malformed,
                        "more entries refused than the manifest has",
                    ));
                }
                before
                    .refused
                    .push(Refused::from_message(file_index, path, reason, rule));
            }
            (_, m) => return Err(unexpected(ctl, &m)),
        }
    }
}

/// The sink's part of the setup, once `incoming` is prepared from the
/// source's manifest: [`settle_held`], then [`place`].
pub(crate) fn accept(
    ctl: &mut Control,
    incoming: &mut Incoming,
    lanes: &[Lane],
    tick: &mut dyn FnMut(),
) -> Result<(), SessionError> {
    settle_held(ctl, incoming)?;
    place(ctl, incoming, lanes, tick)
}

/// When resuming, say what is held and apply the source's verdict on it.
pub(crate) fn settle_held(ctl: &mut Control, incoming: &mut Incoming) -> Result<(), SessionError> {
    if incoming.resuming() {
        let named = Held::send(ctl, incoming.take_have())?;
        if super::plan::held::no_verdict(ctl, !named) {
            return Ok(());
        }
        let wrong = recv_verdict(ctl, incoming.entries.len())?;
        incoming.apply_verdict(&wrong)?;
    }
    Ok(())
}

/// Refuse what cannot be held or created (see [`refuse`]), and place the
/// files still to come on `lanes` (see `Incoming::place`; `tick` beats while it looks).
pub(crate) fn place(
    ctl: &mut Control,
    incoming: &mut Incoming,
    lanes: &[Lane],
    tick: &mut dyn FnMut(),
) -> Result<(), SessionError> {
    refuse(ctl, incoming)?;
    let placement = incoming.place(lanes, tick);
    send_msg(ctl, &placement)
}

/// Refuse what the filesystems cannot hold (`Incoming::check_space`) and
/// say which entries this side will not create.
pub(crate) fn refuse(ctl: &mut Control, incoming: &mut Incoming) -> Result<(), SessionError> {
    incoming.check_space()?;
    for r in incoming.take_refused() {
        send_msg(ctl, &r.message())?;
    }
    Ok(())
}

/// The error of a session in which `count` files arrived different from
/// their sources (`first` the first of them) and were not committed:
/// `fault` says where else than on the path they may have been altered,
/// `again` the command that moves them again.
pub(crate) fn differed(count: usize, first: &str, fault: &str, again: &str) -> SessionError {
    SessionError::local(
        ErrorCode::Io,
        format!(
            "{count} files arrived different from their sources and were not committed (first: {first}); altered on the path or {fault}: {again} again, with --encrypt on untrusted paths"
        ),
    )
}
