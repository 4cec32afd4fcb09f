//! `send --dry-run` asks the receiver: a push's session that goes as far
//! as the receiver's word on what it holds (checked against the sources as
//! a real run checks it), whether it all fits, what it would refuse and,
//! with `--delete`, what it would remove; then it ends. No data stream is
//! opened, and the receiver writes nothing (`REQ_DRY_RUN`).
//!
//! `pull --dry-run`: this side is the receiver. The daemon lists (its
//! manifest, what its scan left out, its check of what this side holds),
//! then ends; this side decides the rest where it would land, writing
//! nothing.

use crate::datapath::DirectMode;
use crate::protocol::control::{Message, REQ_DRY_RUN};
use crate::protocol::manifest::EntryKind;

use super::config::SendConfig;
use crate::session::link::conn::{recv_msg, Control};
pub use crate::session::plan::held::Action;
use crate::session::plan::held::Held;
use crate::session::plan::tree::Tree;
use crate::session::source::sending::open_source;
use crate::session::SessionError;

/// The receiver's answer to a dry run.
#[derive(Debug, Default)]
pub struct Survey {
    /// Per manifest entry: what would happen, and the bytes it would send.
    pub actions: Vec<(Action, u64)>,
    /// Entries the receiver would refuse: (entry, why).
    pub refused: Vec<(u32, String)>,
    /// What `--delete` would remove, under the destination.
    pub deleted: Vec<String>,
}

/// Ask the receiver of `cfg` what a push of `tree` would do.
pub fn survey(cfg: &SendConfig, tree: &Tree) -> Result<Survey, SessionError> {
    let owner =
        crate::session::link::secret::owner_token(&cfg.state_dir, &cfg.peer().0, cfg.peer().1)
            .unwrap_or([0; 32]);
    let mut req = cfg.push_request(owner);
    req.flags |= REQ_DRY_RUN;
    let block = u64::from(cfg.block_size);
    let (mut ctl, keys) = super::connect::begin(cfg, req)?;
    let key = crate::protocol::seal::frame_key(&keys);
    let resume = (cfg.resume || cfg.checksum).then_some((&key, cfg.checksum));
    let local =
        |i: usize| open_source(&tree.sources[i], tree.ids[i], DirectMode::Off).map(|(f, _)| f);
    let held =
        crate::session::roles::offer(&mut ctl, tree, block, resume, &local, &mut |_| Ok(()))?;
    let (refused, deleted) = hear_verdict(&mut ctl, tree.entries.len())?;
    Ok(Survey {
        actions: actions(tree, &held, &refused, block),
        refused,
        deleted,
    })
}

/// The receiver's refusals and deletions, until its summary.
#[allow(clippy::type_complexity)]
fn hear_verdict(
    ctl: &mut Control,
    entries: usize,
) -> Result<(Vec<(u32, String)>, Vec<String>), SessionError> {
    let (mut refused, mut deleted) = (Vec::new(), Vec::new());
    loop {
        match recv_msg(ctl)? {
            Message::Alive { .. } => {}
            Message::Skipped {
                file_index, reason, ..
            } if (file_index as usize) < entries => refused.push((file_index, reason)),
            Message::Deleted(paths) => deleted.extend(paths),
            Message::Summary { .. } => return Ok((refused, deleted)),
            m => return Err(crate::session::link::conn::unexpected(ctl, &m)),
        }
    }
}

/// Each entry's action and bytes to send, from what the receiver holds
/// (`held`, checked) and refuses.
fn actions(tree: &Tree, held: &Held, refused: &[(u32, String)], block: u64) -> Vec<(Action, u64)> {
    let refused: std::collections::HashSet<u32> = refused.iter().map(|r| r.0).collect();
    let send = |size: u64, kind: EntryKind| match kind {
        EntryKind::File => size,
        _ => 0,
    };
    (0..tree.entries.len())
        .map(|i| {
            let e = &tree.entries[i];
            let i = i as u32;
            if refused.contains(&i) {
                (Action::Refused, 0)
            } else if held.unchanged.contains(&i) {
                (Action::Unchanged, 0)
            } else if held.complete.contains_key(&i) {
                (Action::Complete, 0)
            } else if let Some((_, ranges)) = held.partial.get(&i) {
                let have = crate::session::plan::held::ranges_bytes(e.size, block, ranges);
                (Action::Continue, e.span_len(block).saturating_sub(have))
            } else {
                (Action::Send, send(e.span_len(block), e.kind))
            }
        })
        .collect()
}

/// Ask the daemon of `cfg` for what a pull of `paths` into `local` would
/// bring, and look here at what it would do: the daemon's manifest as a
/// tree (with what its scan left out), and this side's answer on it (per
/// entry, what is held; what it would refuse; with `--delete`, what it
/// would remove). Nothing is written under `local`.
pub fn survey_pull(
    cfg: &SendConfig,
    paths: &[String],
    local: &std::path::Path,
) -> Result<(Tree, Survey), SessionError> {
    use crate::session::sink::incoming::{Destination, Incoming};
    use crate::session::sink::manifest::recv_manifest;
    use crate::session::sink::rules::{Resume, Rules};
    let mut req = super::pull::pull_request(cfg, paths)?;
    req.flags |= REQ_DRY_RUN;
    let (mut ctl, keys) = super::connect::begin(cfg, req)?;
    if let Some(s) = cfg.shard {
        super::pull::ask_share(&mut ctl, s, cfg.split_over)?;
    }
    let max = crate::protocol::manifest::ENTRIES_MAX;
    let mut entries = recv_manifest(&mut ctl, max, &mut |_| Ok(()))?;
    super::pull::check_asked_for(&entries, paths)?;
    let (root, dest) = super::pull::local_root(local, &mut entries, cfg.one_file, true)?;
    let rules = Rules {
        dry_run: true,
        ..super::pull::client_rules(cfg)?
    };
    let resume = (cfg.resume || cfg.checksum).then(|| Resume {
        checksum: cfg.checksum,
        key: crate::protocol::seal::frame_key(&keys),
        stamps_only: false,
    });
    let block = u64::from(cfg.block_size);
    let (direct, tick) = (DirectMode::Off, &mut || {});
    let at = Destination { root, dest };
    let mut incoming = Incoming::prepare(at, entries, block, direct, rules, resume, tick)?;
    crate::session::roles::settle_held(&mut ctl, &mut incoming)?;
    let mut tree = hear_listing(&mut ctl)?;
    tree.entries = incoming.entries.clone();
    incoming.check_space()?;
    Ok((tree, answer_here(cfg, &mut incoming, paths)))
}

/// The rest of what a pull's daemon says of its listing until its
/// summary: what its scan left out, named and counted (a tree of no
/// entries yet).
fn hear_listing(ctl: &mut Control) -> Result<Tree, SessionError> {
    let mut tree = Tree::default();
    loop {
        match recv_msg(ctl)? {
            Message::Skipped {
                path, reason, rule, ..
            } => tree.skipped.push(crate::session::plan::tree::Skipped {
                path,
                reason,
                by_rule: rule,
            }),
            Message::LeftOut { excluded, devices } => {
                (tree.excluded, tree.devices_left) = (excluded, devices)
            }
            Message::Summary { .. } => return Ok(tree),
            m => return Err(crate::session::link::conn::unexpected(ctl, &m)),
        }
    }
}

/// This side's word on a pull it would receive into `incoming`: each
/// entry's action, what it would refuse and, with `--delete`, remove.
fn answer_here(
    cfg: &SendConfig,
    incoming: &mut crate::session::sink::incoming::Incoming,
    paths: &[String],
) -> Survey {
    let refused: Vec<(u32, String)> = incoming
        .take_refused()
        .into_iter()
        .map(|r| (r.entry, r.reason))
        .collect();
    let refused_at: std::collections::HashSet<u32> = refused.iter().map(|r| r.0).collect();
    let actions = (0..incoming.entries.len())
        .map(|i| match refused_at.contains(&(i as u32)) {
            true => (Action::Refused, 0),
            false => incoming.plan_of(i),
        })
        .collect();
    let whole_dest = paths.iter().any(|p| p.ends_with('/'));
    let deleted = match cfg.delete {
        true => crate::session::sink::prune::prune(incoming, true, whole_dest).deleted,
        false => Vec::new(),
    };
    Survey {
        actions,
        refused,
        deleted,
    }
}
