//! What a resumed session's receiver holds, as the sending side learns
//! and checks it (the client's push and the daemon's pull alike): the
//! `Have` list, each item checked against the manifest and the sources
//! under the session's key, and the verdict the receiver takes back.

use std::collections::{HashMap, HashSet};
use std::fs::File;

use crate::protocol::control::{ErrorCode, HaveItem, Message};
use crate::protocol::frame::FrameKey;
use crate::protocol::manifest::{Entry, EntryKind};

use super::tree::Tree;
use crate::coord::units;
use crate::session::link::conn::{recv_msg, send_msg, unexpected, Control};
use crate::session::SessionError;

/// What the receiver holds already (it said so when the session resumed),
/// once this side checked it against the sources.
#[derive(Debug, Default)]
pub(crate) struct Held {
    /// Files complete under their final names: entry -> digest.
    pub(crate) complete: HashMap<u32, u64>,
    /// Files partly there: entry -> (digest of the blocks held, block ranges).
    pub(crate) partial: HashMap<u32, (u64, Vec<(u64, u64)>)>,
    /// Those of `complete` the receiver knows by their stamp alone
    /// (untouched since their commit): neither side read them.
    pub(crate) unchanged: HashSet<u32>,
    /// `--checksum`: every complete file is compared by content, so none
    /// may be called unchanged.
    by_content: bool,
    /// Files the receiver will not take (it said why before the data: a
    /// directory in the way): never sent.
    pub(crate) refused: HashSet<u32>,
    /// The receiver named something it holds (a verdict follows).
    heard: bool,
}

impl Held {
    /// Note the entries the receiver refused (`UNLISTED` ones are none of
    /// the manifest's).
    pub(crate) fn refuse(&mut self, refused: &[crate::session::link::refused::Refused]) {
        let listed = refused
            .iter()
            .map(|r| r.entry)
            .filter(|&i| i != crate::protocol::control::UNLISTED);
        self.refused.extend(listed);
    }

    /// Whether entry `i` needs no data: held complete, or refused.
    pub(crate) fn settled(&self, i: u32) -> bool {
        self.complete.contains_key(&i) || self.refused.contains(&i)
    }

    /// Bytes of data (holes left out) of the files the receiver refused.
    pub(crate) fn refused_bytes(&self, tree: &Tree, block: u64) -> u64 {
        self.refused
            .iter()
            .filter_map(|&i| tree.entries.get(i as usize))
            .map(|e| e.span_data(block))
            .sum()
    }

    /// Bytes of data (holes left out) the receiver needs no more: files
    /// held complete, and a held range's share of its file's data.
    pub(crate) fn bytes(&self, tree: &Tree, block: u64) -> u64 {
        let complete: u64 = self
            .complete
            .keys()
            .map(|&i| tree.entries[i as usize].span_data(block))
            .sum();
        let partial: u64 = self
            .partial
            .iter()
            .map(|(&i, (_, ranges))| {
                let e = &tree.entries[i as usize];
                let held = ranges_bytes(e.size, block, ranges);
                let share = u128::from(held) * u128::from(e.data.min(e.size));
                (share / u128::from(e.size.max(1))) as u64
            })
            .sum();
        complete + partial
    }

    /// Take `Have` parts until their end, each checked against the manifest
    /// (`by_content`: `--checksum`, no file may be unchanged by its stamp);
    /// the ranges kept are memory `reserve` is asked for (and may refuse).
    pub(crate) fn receive(
        ctl: &mut Control,
        tree_entries: &[Entry],
        block: u64,
        by_content: bool,
        reserve: &mut dyn FnMut(u64) -> Result<(), SessionError>,
    ) -> Result<Held, SessionError> {
        let mut held = Held {
            by_content,
            ..Held::default()
        };
        loop {
            let items = match recv_msg(ctl)? {
                Message::Have(items) => items,
                Message::HaveEnd => {
                    held.settle()?;
                    return Ok(held);
                }
                Message::Alive { .. } => continue,
                m => return Err(unexpected(ctl, &m)),
            };
            held.heard |= !items.is_empty();
            for it in items {
                if let HaveItem::Partial { ranges, .. } = &it {
                    reserve(ranges.len() as u64 * 16)?;
                }
                held.add(it, tree_entries, block)?;
            }
        }
    }

    /// Take one item of `Have`, checked against the manifest `entries`:
    /// a file of it, never both complete and in part, ranges within the
    /// file and never more of them than it has blocks. [`settle`] checks
    /// they do not overlap once all are in.
    ///
    /// [`settle`]: Self::settle
    pub(crate) fn add(
        &mut self,
        it: HaveItem,
        entries: &[Entry],
        block: u64,
    ) -> Result<(), SessionError> {
        let i = it.file_index();
        let e = entries
            .get(i as usize)
            .filter(|e| e.kind == EntryKind::File)
            .ok_or_else(|| {
                SessionError::Protocol(format!("the receiver holds unknown entry {i}"))
            })?;
        let both = || {
            SessionError::Protocol(format!(
                "the receiver holds entry {i} both complete and in part"
            ))
        };
        match it {
            HaveItem::Unchanged { .. } if self.by_content => {
                return Err(SessionError::Protocol(format!(
                    "the receiver called entry {i} unchanged by its stamp under --checksum"
                )));
            }
            HaveItem::Complete { digest, .. } | HaveItem::Unchanged { digest, .. } => {
                if self.partial.contains_key(&i) {
                    return Err(both());
                }
                if matches!(it, HaveItem::Unchanged { .. }) {
                    self.unchanged.insert(i);
                }
                self.complete.insert(i, digest);
            }
            HaveItem::Partial { digest, ranges, .. } => {
                let blocks = e.size.div_ceil(block);
                let held = self.partial.get(&i).map_or(0, |p| p.1.len());
                if ranges.iter().any(|&(f, c)| f + c > blocks)
                    || (held + ranges.len()) as u64 > blocks
                {
                    return Err(SessionError::Protocol(format!(
                        "the receiver holds blocks past the end of entry {i}"
                    )));
                }
                if self.complete.contains_key(&i) {
                    return Err(both());
                }
                self.partial
                    .entry(i)
                    .or_insert((digest, Vec::new()))
                    .1
                    .extend(ranges);
            }
        }
        Ok(())
    }

    /// Once every item is in: each file's ranges sorted, and refused when
    /// any overlap (what a file holds is never more than its blocks).
    pub(crate) fn settle(&mut self) -> Result<(), SessionError> {
        for (i, (_, ranges)) in &mut self.partial {
            ranges.sort_unstable();
            if ranges.windows(2).any(|w| w[0].0 + w[0].1 > w[1].0) {
                return Err(SessionError::Protocol(format!(
                    "the receiver holds overlapping blocks of entry {i}"
                )));
            }
        }
        Ok(())
    }

    /// Check what the receiver holds against the sources: a complete file
    /// counts only when the digest of the whole source equals the
    /// receiver's digest of its file, held blocks only when the source's
    /// same blocks have the digest the receiver has for them, both keyed
    /// with this session's `key` (a plain digest can be collided by whoever
    /// planted the bytes; this one not before the session began). The rest
    /// is forgotten on both sides (sent again). Tells the receiver which;
    /// what is kept carries the sources' plain digests from then on.
    pub(crate) fn verify(
        &mut self,
        ctl: &mut Control,
        tree: &Tree,
        block: u64,
        key: &FrameKey,
        open: &dyn Fn(usize) -> Result<File, super::unsendable::Unsendable>,
    ) -> Result<(), SessionError> {
        use super::digest::{content_digests, ranges_digests};
        use crate::protocol::control::LIST_PART_ITEMS_MAX;
        if no_verdict(ctl, !self.heard) {
            return Ok(());
        }
        let mut beat = crate::session::link::conn::Beat::new(ctl)?;
        let mut wrong = Vec::new();
        // Unchanged files are taken as the receiver's stamp has them.
        let mut items: Vec<u32> = self
            .complete
            .keys()
            .filter(|i| !self.unchanged.contains(i))
            .chain(self.partial.keys())
            .copied()
            .collect();
        items.sort_unstable();
        for i in items {
            let size = tree.entries[i as usize].size;
            let ours = open(i as usize).ok().and_then(|f| {
                let tick = &mut || beat.tick();
                match self.partial.get(&i) {
                    Some((_, ranges)) => ranges_digests(&f, size, block, ranges, key, tick).ok(),
                    None => content_digests(&f, size, key, tick).ok(),
                }
            });
            let theirs = match self.partial.get_mut(&i) {
                Some(p) => &mut p.0,
                None => self.complete.get_mut(&i).expect("held"),
            };
            match ours {
                Some(d) if d.keyed == *theirs => *theirs = d.plain,
                _ => wrong.push(i),
            }
        }
        for i in &wrong {
            self.complete.remove(i);
            self.partial.remove(i);
        }
        for part in wrong.chunks(LIST_PART_ITEMS_MAX as usize) {
            send_msg(ctl, &Message::HeldWrong(part.to_vec()))?;
        }
        send_msg(ctl, &Message::HeldChecked)
    }

    /// Tell the sender what is held, in parts within the message limits;
    /// whether any item went (a part with no ranges says nothing, and the
    /// sender's verdict follows only what it heard).
    pub(crate) fn send(ctl: &mut Control, items: Vec<HaveItem>) -> Result<bool, SessionError> {
        let named = Held::send_items(ctl, items)?;
        send_msg(ctl, &Message::HaveEnd)?;
        Ok(named)
    }

    /// `items` in `Have` parts (no end): whether any was named.
    pub(crate) fn send_items(
        ctl: &mut Control,
        items: Vec<HaveItem>,
    ) -> Result<bool, SessionError> {
        use crate::protocol::control::{HAVE_PART_RANGES_MAX, LIST_PART_ITEMS_MAX};
        let mut part: Vec<HaveItem> = Vec::new();
        let mut ranges_in_part = 0u32;
        let mut named = false;
        for it in items {
            for piece in split_have(it) {
                let n = match &piece {
                    HaveItem::Partial { ranges, .. } => ranges.len() as u32,
                    HaveItem::Complete { .. } | HaveItem::Unchanged { .. } => 0,
                };
                if part.len() as u32 >= LIST_PART_ITEMS_MAX
                    || ranges_in_part + n > HAVE_PART_RANGES_MAX
                {
                    send_msg(ctl, &Message::Have(std::mem::take(&mut part)))?;
                    ranges_in_part = 0;
                }
                ranges_in_part += n;
                named = true;
                part.push(piece);
            }
        }
        if !part.is_empty() {
            send_msg(ctl, &Message::Have(part))?;
        }
        Ok(named)
    }
}

/// Split a held file's ranges into items that fit a `Have` message.
fn split_have(it: HaveItem) -> Vec<HaveItem> {
    use crate::protocol::control::HAVE_PART_RANGES_MAX;
    match it {
        HaveItem::Partial {
            file_index,
            digest,
            ranges,
        } => ranges
            .chunks(HAVE_PART_RANGES_MAX as usize / 2)
            .map(|c| HaveItem::Partial {
                file_index,
                digest,
                ranges: c.to_vec(),
            })
            .collect(),
        c => vec![c],
    }
}

/// The sender's verdict on what it holds, taken by the receiver: the
/// entries whose held state is wrong.
pub(crate) fn recv_verdict(
    ctl: &mut Control,
    entries: usize,
) -> Result<std::collections::HashSet<u32>, SessionError> {
    let mut wrong = std::collections::HashSet::new();
    loop {
        match recv_msg(ctl)? {
            Message::HeldWrong(part) => {
                for i in part {
                    if i as usize >= entries {
                        return Err(SessionError::local(
                            ErrorCode::Malformed,
                            format!("a verdict on entry {i}, which the manifest does not have"),
                        ));
                    }
                    wrong.insert(i);
                }
            }
            Message::HeldChecked => return Ok(wrong),
            Message::Alive { .. } => {}
            m => return Err(unexpected(ctl, &m)),
        }
    }
}

pub(in crate::session) fn ranges_bytes(size: u64, block: u64, ranges: &[(u64, u64)]) -> u64 {
    ranges
        .iter()
        .map(|&(first, count)| {
            let start = first.saturating_mul(block).min(size);
            let end = first.saturating_add(count).saturating_mul(block).min(size);
            end - start
        })
        .sum()
}

/// Whether the verdict on what the receiver holds is left out: from
/// protocol 13 when it holds `nothing`, so neither side waits a round trip
/// for a verdict that can only be empty.
pub(crate) fn no_verdict(ctl: &Control, nothing: bool) -> bool {
    nothing && ctl.protocol() >= 13
}

/// What a receiver held before the data, in files.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeldCounts {
    /// Unchanged since an earlier run, by their stamp.
    pub unchanged: u64,
    /// Found complete by content.
    pub found: u64,
    /// Part files continued.
    pub continued: u64,
}

/// What a receiver held before the data, from `complete` files
/// (`unchanged` of them by their stamp) and `partial` ones.
pub(crate) fn held_counts(complete: usize, unchanged: usize, partial: usize) -> HeldCounts {
    let u = unchanged as u64;
    HeldCounts {
        unchanged: u,
        found: complete as u64 - u,
        continued: partial as u64,
    }
}

impl HeldCounts {
    pub fn is_empty(&self) -> bool {
        *self == HeldCounts::default()
    }
}

/// What was held in words, the empty counts left out: what a resumed run
/// skips and why.
pub fn held_text(held: HeldCounts) -> String {
    let HeldCounts {
        unchanged,
        found,
        continued,
    } = held;
    let mut parts = Vec::new();
    if unchanged > 0 {
        parts.push(format!(
            "{} unchanged since an earlier run (size, mtime and the receiver's stamp match)",
            units::count(unchanged, "file")
        ));
    }
    if found > 0 {
        parts.push(format!(
            "{} complete by content",
            units::count(found, "file")
        ));
    }
    if continued > 0 {
        parts.push(format!(
            "{} in part (continued)",
            units::count(continued, "file")
        ));
    }
    parts.join(", ")
}

/// What a real run would do with an entry of the manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Sent whole (a directory or link: made).
    Send,
    /// A file the receiver holds in part: the rest is sent.
    Continue,
    /// A file the receiver's stamp says is untouched since an earlier run.
    Unchanged,
    /// A file the receiver holds whole, its content read and found equal.
    Complete,
    /// An entry the receiver would not create (its policy says why).
    Refused,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::manifest::EntryKind;

    fn file(size: u64) -> Entry {
        Entry {
            path: "f".into(),
            kind: EntryKind::File,
            size,
            data: size,
            mode: 0o644,
            mtime_s: 0,
            mtime_ns: 0,
            link: None,
            ..Default::default()
        }
    }

    #[test]
    fn unchanged_files_are_kept_apart_and_refused_under_checksum() {
        let entries = [file(10), file(20)];
        let unchanged = |i| HaveItem::Unchanged {
            file_index: i,
            digest: 5,
        };
        let mut held = Held::default();
        held.add(unchanged(0), &entries, 4096).unwrap();
        held.add(
            HaveItem::Complete {
                file_index: 1,
                digest: 6,
            },
            &entries,
            4096,
        )
        .unwrap();
        assert_eq!(held.complete.len(), 2);
        assert_eq!(held.unchanged, HashSet::from([0]));
        // With --checksum every held file is compared by content.
        let mut by_content = Held {
            by_content: true,
            ..Held::default()
        };
        let e = by_content.add(unchanged(0), &entries, 4096).unwrap_err();
        assert!(
            e.to_string()
                .contains("unchanged by its stamp under --checksum"),
            "{e}"
        );
    }
}
