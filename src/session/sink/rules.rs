//! What a receiver receives by: its `Rules` (the secret, whose files it
//! trusts, links, devices, owners and attributes, a file's `Dress`), the
//! journal budget every session of a process shares, and what a resume
//! asks (`Resume`).

use std::collections::HashSet;
use std::fs::File;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::datapath::beneath::FileId;
use crate::protocol::frame::FrameKey;
use crate::protocol::manifest::{Entry, EntryKind};

use crate::session::link::secret::Secret;
use crate::session::plan::filter::Filter;

/// What one manifest entry costs a receiver in memory besides its text
/// (the entry, its file's state, two copies of its name and the heap's
/// own cost of each), for budgets. Measured: four sessions of 20,000
/// entries with 17-byte names grew a daemon by 79 MiB, 1,035 bytes an
/// entry, where 320 had been counted (tests/many_files.rs holds a daemon
/// to its budget).
pub(crate) const ENTRY_COST_BYTES: u64 = 1024;

/// What an entry a streamed push's sender added costs a receiver while
/// it waits, decoded, for its window to be prepared. A sender has at most
/// `UNADMITTED_MAX` + `WINDOW_ENTRIES` entries waiting so (protocol 14):
/// their cost is counted for the whole session from its start
/// ([`stream_ahead_bytes`]).
pub(crate) const WAITING_ENTRY_BYTES: u64 = 512;

/// What a streamed push's windows waiting to be prepared may take.
pub(crate) fn stream_ahead_bytes() -> u64 {
    use crate::protocol::control::{
        STREAM_UNADMITTED_MAX as UNADMITTED_MAX, STREAM_WINDOW_ENTRIES as WINDOW_ENTRIES,
    };
    (UNADMITTED_MAX + WINDOW_ENTRIES) as u64 * WAITING_ENTRY_BYTES
}

/// What to do with a symlink whose target is absolute or climbs out of the
/// root (`--unsafe-links`). The receiver never follows a link when it
/// writes, so keeping them as they are (as `rsync -a` and `cp -a` do) is
/// safe for the receiver itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LinkPolicy {
    #[default]
    Keep,
    Skip,
    Refuse,
}

/// Files being written now, by what they are (device and inode), over all
/// sessions of a process: a second session never writes the same file.
pub type InodeClaims = Arc<Mutex<HashSet<FileId>>>;

/// How a receiver treats what arrives, whoever sends it.
#[derive(Debug, Clone)]
pub struct Rules {
    /// Authenticates journals and stamps.
    pub secret: Secret,
    /// Keep setuid and setgid bits from the wire (dropped otherwise).
    pub keep_setid: bool,
    pub unsafe_links: LinkPolicy,
    pub claims: InodeClaims,
    /// Journal bytes all sessions of the process may write per second.
    pub journal_budget: Arc<JournalBudget>,
    /// Whom this session commits its files for, in their stamps: on a
    /// daemon, its MAC of the client's owner token (a secret of the
    /// client's state directory, sent sealed), so a file another key
    /// holder committed under the same name, size and mtime is never
    /// skipped unread; on a pull's client, its own. `None` (a client
    /// without a state directory): every held file is read again.
    pub owner: Option<[u8; 32]>,
    /// Whether entries get the sender's owner and group.
    pub owners: Owners,
    /// The user and group names of this session's manifest looked up
    /// here, each once (a lookup may ask LDAP): each session its own.
    pub ids: Arc<IdCache>,
    /// A dry run (`--dry-run`): this session looks and writes nothing (no
    /// directory, link, part file, stamp, claim or journal change).
    pub dry_run: bool,
    /// A `--delete` push's rules: the receiver's extras they exclude are
    /// kept (rsync's default; empty: none is kept).
    pub keep: Filter,
    /// A `--follow` push: its manifest may hold growing files.
    pub follow: bool,
    /// A streamed push (`REQ_STREAM`): entries of any kind are added while
    /// the data comes, each prepared as the manifest's.
    pub stream: bool,
    /// `--live-parts`: growing files' parts readable as they grow, with
    /// their checked prefix in [`LIVE_XATTR`].
    pub live_parts: bool,
    /// Whether device nodes of the manifest are made (`-D`).
    pub devices: Devices,
    /// Keep each file's storage checksums (adler32, crc32c), computed from
    /// its blocks as they arrive, with the file at its commit (`kept`): a
    /// third-party copy's private receiver.
    pub sums: bool,
}

/// Whether a receiver makes the device nodes a manifest holds (`-D`):
/// only when asked for, allowed (a daemon's config says so) and running
/// as root (mknod needs CAP_MKNOD); else each is one entry refused, why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Devices {
    Make,
    Refuse(&'static str),
}

impl Default for Devices {
    fn default() -> Self {
        Devices::Refuse("device nodes are made only when asked for (-D, --devices)")
    }
}

impl Devices {
    /// A receiver that allows device nodes when `allowed` (else refuses
    /// them, saying `not_allowed`), run by this process.
    pub fn for_this_process(allowed: bool, not_allowed: &'static str) -> Devices {
        match (allowed, crate::datapath::sys::effective_uid() == 0) {
            (false, _) => Devices::Refuse(not_allowed),
            (true, false) => Devices::Refuse(
                "the receiver does not run as root: making a device node needs CAP_MKNOD",
            ),
            (true, true) => Devices::Make,
        }
    }
}

/// Names already looked up: (a group?, name) to its number here, if any.
#[derive(Debug, Default)]
pub struct IdCache(Mutex<std::collections::HashMap<(bool, String), Option<u32>>>);

impl IdCache {
    pub(super) fn find(&self, group: bool, name: &str) -> Option<u32> {
        use crate::datapath::ids;
        let mut known = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *known.entry((group, name.to_string())).or_insert_with(|| {
            if group {
                ids::gid_of(name)
            } else {
                ids::uid_of(name)
            }
        })
    }
}

/// Whose files a receiver makes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Owners {
    /// Its own (it does not run as root, or was told not to).
    #[default]
    Own,
    /// The sender's, found here by their names (by number when a name is
    /// unknown here or was not sent), as rsync run as root does.
    ByName,
    /// The sender's, by number (`--numeric-ids`).
    ByNumber,
}

impl Owners {
    /// What a receiver running as this process gives, `numeric` asked.
    pub fn for_this_process(numeric: bool) -> Owners {
        match (crate::datapath::sys::effective_uid() == 0, numeric) {
            (false, _) => Owners::Own,
            (true, false) => Owners::ByName,
            (true, true) => Owners::ByNumber,
        }
    }
}

/// What a receiver gives an entry besides its bytes, mode and mtime: its
/// owner and group (when [`Owners`] says so) and the extended attributes
/// it may carry ([`crate::protocol::manifest::is_carried_xattr`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Dress {
    pub(crate) owner: Option<(u32, u32)>,
    pub(crate) xattrs: Vec<(String, Vec<u8>)>,
}

impl Dress {
    /// Give an open file or directory its dress: the owner first (a chown
    /// drops setuid bits, and the mode is set after), then the attributes.
    pub(crate) fn put_on(&self, file: &File) -> Result<(), DressFailed> {
        self.put_on_made(file, None)
    }

    /// [`put_on`](Self::put_on) a file made with owner `made` (when known):
    /// giving it that very owner changes nothing, and is left out.
    pub(crate) fn put_on_made(
        &self,
        file: &File,
        made: Option<(u32, u32)>,
    ) -> Result<(), DressFailed> {
        use crate::datapath::ids;
        if let Some((uid, gid)) = self.owner.filter(|&o| Some(o) != made) {
            ids::fchown(file, uid, gid).map_err(|source| DressFailed::Owner {
                uid,
                gid,
                source,
            })?;
        }
        for (name, value) in &self.xattrs {
            ids::set(file, name, value).map_err(|source| DressFailed::Xattr {
                name: name.clone(),
                source,
            })?;
        }
        Ok(())
    }
}

/// What giving a file its dress failed at.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DressFailed {
    #[error("giving it owner {uid}:{gid}: {source}")]
    Owner {
        uid: u32,
        gid: u32,
        source: std::io::Error,
    },
    #[error("setting its extended attribute {name}: {source}")]
    Xattr {
        name: String,
        source: std::io::Error,
    },
}

/// A token bucket of journal bytes per second, shared by every session of
/// a process: journals are written only as fast as the budget refills (a
/// journal that waits is written later, or its file finishes first).
#[derive(Debug)]
pub struct JournalBudget {
    pub(super) rate_bytes_per_s: u64,
    pub(super) state: Mutex<(u64, Instant)>,
}

impl JournalBudget {
    pub fn new(rate_bytes_per_s: u64) -> Self {
        JournalBudget {
            rate_bytes_per_s,
            state: Mutex::new((rate_bytes_per_s, Instant::now())),
        }
    }

    /// Take `bytes` now if the bucket holds them (or is full, for a journal
    /// larger than a second's worth).
    pub fn take(&self, bytes: u64) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (tokens, at) = *s;
        let refill = (at.elapsed().as_secs_f64() * self.rate_bytes_per_s as f64) as u64;
        let tokens = tokens.saturating_add(refill).min(self.rate_bytes_per_s);
        let full = tokens == self.rate_bytes_per_s;
        if tokens >= bytes || full {
            *s = (tokens.saturating_sub(bytes), Instant::now());
            return true;
        }
        *s = (tokens, Instant::now());
        false
    }
}

/// Journal bytes per second all sessions may write together, by default.
pub const JOURNAL_BYTES_PER_S: u64 = 64 << 20;

impl Rules {
    /// A session's rules with nothing asked for: `secret`, and a journal
    /// budget of `journal_bytes` a second.
    #[cfg(test)]
    pub(crate) fn plain(secret: [u8; 32], journal_bytes: u64) -> Rules {
        Rules {
            owner: None,
            owners: Default::default(),
            ids: Default::default(),
            dry_run: false,
            follow: false,
            stream: false,
            live_parts: false,
            sums: false,
            devices: Devices::default(),
            keep: Default::default(),
            secret: Secret::from_bytes(secret),
            keep_setid: false,
            unsafe_links: Default::default(),
            claims: Default::default(),
            journal_budget: Arc::new(JournalBudget::new(journal_bytes)),
        }
    }

    /// What entry `e` is given besides its bytes.
    pub(crate) fn dress(&self, e: &Entry) -> Dress {
        let o = &e.owner;
        let by_name = |name: &str, group: bool, n: u32| {
            (!name.is_empty())
                .then(|| self.ids.find(group, name))
                .flatten()
                .unwrap_or(n)
        };
        let owner = match self.owners {
            Owners::Own => None,
            Owners::ByNumber => Some((o.uid, o.gid)),
            Owners::ByName => Some((
                by_name(&o.user, false, o.uid),
                by_name(&o.group, true, o.gid),
            )),
        };
        let xattrs = e
            .xattrs
            .iter()
            .filter(|(n, _)| crate::protocol::manifest::is_carried_xattr(n))
            .filter(|(n, _)| n != "system.posix_acl_default" || e.kind == EntryKind::Dir)
            .cloned()
            .collect();
        Dress { owner, xattrs }
    }

    /// The permission bits to give an entry of `mode`.
    pub(crate) fn mode(&self, mode: u32) -> u32 {
        if self.keep_setid {
            mode & 0o7777
        } else {
            mode & 0o1777
        }
    }
}

/// How a session continues from what the receiver holds (`--resume`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Resume {
    /// `--checksum`: a finished file is judged by its content (read again
    /// here), not by its stamp.
    pub(crate) checksum: bool,
    /// The session's frame key: what is held is told to the sender by its
    /// digest keyed with it (`crate::session::plan::digest::HeldDigest`).
    pub(crate) key: FrameKey,
    /// Only files held unchanged by their stamp count as held (nothing is
    /// read again, no part continued): a streamed push's added windows,
    /// which have no verdict of the source's to wait for.
    pub(crate) stamps_only: bool,
}
