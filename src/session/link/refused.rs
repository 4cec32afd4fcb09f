//! An entry that is not moved, and why, as either side says it (its
//! `Skipped` message): what a scan, a policy or a fault left out.

use crate::protocol::control::Message;

/// An entry that is not moved: its index (or `UNLISTED` for one left out
/// of the manifest, named by `path`), why, and whether a rule left it out
/// (a policy, an option, a name the filesystem cannot hold: a run again
/// cannot mend it) rather than a fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refused {
    pub(crate) entry: u32,
    pub(crate) path: String,
    pub(crate) reason: String,
    pub(crate) rule: bool,
}

/// Why one entry is not moved (see [`Refused`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Why {
    pub(crate) text: String,
    pub(crate) rule: bool,
}

impl Why {
    /// Left out by a rule: a run again cannot mend it.
    pub(crate) fn rule(text: impl Into<String>) -> Why {
        Why {
            text: text.into(),
            rule: true,
        }
    }

    /// A fault: a run again may mend it.
    pub(crate) fn fault(text: impl Into<String>) -> Why {
        Why {
            text: text.into(),
            rule: false,
        }
    }
}

impl Refused {
    /// Entry `entry` of the manifest, not moved for `why`.
    pub(crate) fn entry(entry: u32, why: Why) -> Refused {
        Refused {
            entry,
            path: String::new(),
            reason: why.text,
            rule: why.rule,
        }
    }

    /// Its message to the other side.
    pub(crate) fn message(&self) -> Message {
        Message::Skipped {
            file_index: self.entry,
            path: self.path.clone(),
            reason: self.reason.clone(),
            rule: self.rule,
        }
    }

    pub(crate) fn from_message(
        file_index: u32,
        path: String,
        reason: String,
        rule: bool,
    ) -> Refused {
        Refused {
            entry: file_index,
            path,
            reason,
            rule,
        }
    }
}
