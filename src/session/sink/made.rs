//! The directories a manifest's preparation made, as its entries are
//! prepared (and a streamed push's windows after it): which could not be
//! made, and which held nothing when first looked into (their new files
//! need no look of their own).

use std::collections::HashSet;

use crate::datapath::beneath::Root;
use crate::session::link::refused::Why;

/// The directories a manifest's preparation made: the last a file went
/// into (and the longest name its filesystem takes), and those it could
/// not make, with why.
#[derive(Debug, Default)]
pub(super) struct Made {
    pub(super) dir: String,
    pub(super) name_max: usize,
    pub(super) unmade: std::collections::HashMap<String, Why>,
    /// Directories that held nothing when first looked into (or were not
    /// there), with the names given since to entries in them, ASCII
    /// lowercased: a file of a plain name among them that no other shares
    /// (whatever the case) finds nothing in its way and nothing held, with
    /// no look of its own ([`Made::fresh`]).
    pub(super) empty: std::collections::HashMap<String, Option<HashSet<String>>>,
    /// Names held in `empty`'s sets: past [`NAMES_MAX`], every set is
    /// given up (its directory's later files look for themselves), so a
    /// tree of millions of files costs no name each.
    pub(super) names: usize,
}

/// Names [`Made`] keeps at most.
pub(super) const NAMES_MAX: usize = 1 << 16;

impl Made {
    /// Why `rel` cannot be made: a directory above it could not be.
    pub(super) fn beneath_unmade(&self, rel: &str) -> Option<Why> {
        if self.unmade.is_empty() {
            return None;
        }
        let mut at = rel;
        while let Some((dir, _)) = at.rsplit_once('/') {
            if let Some(why) = self.unmade.get(dir) {
                return Some(why.clone());
            }
            at = dir;
        }
        None
    }

    /// Whether entry `rel` (in directory `dir`, beneath `root`) is the
    /// only one of its name in a directory that held nothing when first
    /// looked into: then nothing of its name can be there, nor urmove's
    /// part and journal of it. Its name is noted either way. Names other
    /// than plain ASCII (which a strict or case-folding filesystem may
    /// refuse, or take for another) are never fresh, nor is anything in a
    /// directory since given one.
    pub(super) fn fresh(&mut self, root: &Root, dir: &str, rel: &str) -> bool {
        let name = rel.rsplit_once('/').map_or(rel, |(_, n)| n);
        if !self.empty.contains_key(dir) {
            // Looked into once: the directory's name is copied only then.
            let held = holds_nothing(root, dir).then(HashSet::new);
            self.empty.insert(dir.to_string(), held);
        }
        let names = self.empty.get_mut(dir).expect("inserted above");
        let Some(seen) = names else { return false };
        if !is_plain(name) || name.len() > self.name_max {
            *names = None;
            return false;
        }
        let fresh = seen.insert(name.to_ascii_lowercase());
        self.names += usize::from(fresh);
        if self.names > NAMES_MAX {
            self.forget();
        }
        fresh
    }

    /// Give up every directory's names (see [`Made::names`]).
    fn forget(&mut self) {
        self.empty.values_mut().for_each(|names| *names = None);
        self.names = 0;
    }

    /// Note entry `rel`'s name in its directory, if that is one held empty.
    pub(super) fn note(&mut self, rel: &str) {
        let (dir, name) = rel.rsplit_once('/').unwrap_or(("", rel));
        if let Some(names) = self.empty.get_mut(dir) {
            match names.as_mut().filter(|_| is_plain(name)) {
                Some(seen) => {
                    self.names += usize::from(seen.insert(name.to_ascii_lowercase()));
                }
                None => *names = None,
            }
            if self.names > NAMES_MAX {
                self.forget();
            }
        }
    }
}

/// A name of letters, digits and `._-+,=@~` only: one every filesystem
/// holds as it is, and folds (if at all) only by ASCII case.
fn is_plain(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-+,=@~".contains(&b))
}

/// Whether directory `dir` beneath `root` holds nothing, or is not there
/// (nor then anything beneath it): its first name read, no more.
fn holds_nothing(root: &Root, dir: &str) -> bool {
    use std::os::fd::AsRawFd;
    let at = if dir.is_empty() { "." } else { dir };
    let fd = match root.openat(at, libc::O_RDONLY | libc::O_DIRECTORY, 0) {
        Ok(fd) => fd,
        Err(e) => return e.kind() == std::io::ErrorKind::NotFound,
    };
    // Opened beneath the root; its /proc name reads that directory only.
    std::fs::read_dir(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .is_ok_and(|mut names| names.next().is_none())
}
