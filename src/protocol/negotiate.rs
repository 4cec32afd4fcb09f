//! Which protocol version a session speaks, agreed in the handshake.
//!
//! Release 0.1.0 (protocol 12) demands `Hello.version == 12`, refuses any
//! byte it does not know (a longer message, a new kind, a new request
//! bit), and reads the two 32-byte nonces without looking inside them. So
//! the range a side speaks travels in the last bytes of its nonce, behind
//! an 8-byte mark:
//!
//! ```text
//! client nonce: random[20] | "URMVNEG1" | min u16 | max u16
//! server nonce: random[16] | "URMVNEG1" | chosen u16 | min u16 | max u16 | room u16
//! ```
//!
//! A 0.1.0 daemon sees a Hello of version 12 and a nonce; a 0.1.0 client
//! sees a challenge without the mark and speaks 12. A daemon of this
//! release answers a Hello without the mark (a 0.1.0 client) in protocol
//! `Hello.version`, and one with the mark in the highest version both
//! speak. Both nonces feed both proofs and the session key, so nobody on
//! the path can change an offer, an answer or the absence of the mark
//! without the handshake failing (`BadProof`): a session cannot be pushed
//! down to an older version than both sides speak.
//!
//! `room` is how many more connections from the client's address the
//! daemon takes before they authenticate: how many data streams the
//! client may connect while this connection is still being set up.

use super::handshake::Nonce;

/// The mark before a nonce's version block.
pub const MARK: [u8; 8] = *b"URMVNEG1";
/// The oldest version this build speaks, as client and as daemon: the
/// previous release's (0.1.0).
pub const PROTOCOL_MIN: u16 = super::catalogue::PROTOCOL_OLDEST;
/// The newest version this build speaks.
pub const PROTOCOL_MAX: u16 = super::catalogue::PROTOCOL_NEWEST;
/// The version a Hello names: what a 0.1.0 daemon demands.
pub const HELLO_VERSION: u16 = 12;

/// The release that introduced protocol `v`, as the catalogue records it
/// ("a build of protocol v" when none of ours did).
pub fn release_of(v: u16) -> String {
    super::catalogue::RELEASES
        .iter()
        .find(|r| r.protocol == v)
        .map_or_else(
            || format!("a build of protocol {v}"),
            |r| r.name.to_string(),
        )
}

/// The versions one side speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub min: u16,
    pub max: u16,
}

/// This build's range.
pub const OURS: Range = Range {
    min: PROTOCOL_MIN,
    max: PROTOCOL_MAX,
};

/// The daemon's answer to an offer: the version chosen, its own range,
/// and its room for unauthenticated connections from the client's address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    pub chosen: u16,
    pub daemon: Range,
    pub room: u16,
}

const CLIENT_BLOCK: usize = 20;
const SERVER_BLOCK: usize = 16;

fn u16_at(n: &Nonce, at: usize) -> u16 {
    u16::from_le_bytes([n[at], n[at + 1]])
}

/// `random` with the client's range written into its last 12 bytes.
pub fn offer_nonce(mut random: Nonce, ours: Range) -> Nonce {
    random[CLIENT_BLOCK..CLIENT_BLOCK + 8].copy_from_slice(&MARK);
    random[28..30].copy_from_slice(&ours.min.to_le_bytes());
    random[30..32].copy_from_slice(&ours.max.to_le_bytes());
    random
}

/// The range in a client's nonce; `None` without the mark (a 0.1.0 client,
/// or one whose random bytes happen to differ from the mark: 2^-64).
pub fn read_offer(n: &Nonce) -> Option<Range> {
    (n[CLIENT_BLOCK..CLIENT_BLOCK + 8] == MARK).then(|| Range {
        min: u16_at(n, 28),
        max: u16_at(n, 30),
    })
}

/// `random` with the daemon's answer written into its last 16 bytes.
pub fn answer_nonce(mut random: Nonce, a: Answer) -> Nonce {
    random[SERVER_BLOCK..SERVER_BLOCK + 8].copy_from_slice(&MARK);
    random[24..26].copy_from_slice(&a.chosen.to_le_bytes());
    random[26..28].copy_from_slice(&a.daemon.min.to_le_bytes());
    random[28..30].copy_from_slice(&a.daemon.max.to_le_bytes());
    random[30..32].copy_from_slice(&a.room.to_le_bytes());
    random
}

/// The answer in a daemon's nonce; `None` without the mark (a 0.1.0
/// daemon, which speaks 12).
pub fn read_answer(n: &Nonce) -> Option<Answer> {
    (n[SERVER_BLOCK..SERVER_BLOCK + 8] == MARK).then(|| Answer {
        chosen: u16_at(n, 24),
        daemon: Range {
            min: u16_at(n, 26),
            max: u16_at(n, 28),
        },
        room: u16_at(n, 30),
    })
}

/// Something a session may ask that a protocol version brought: a
/// daemon that speaks only older ones is refused it before the request,
/// by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Feature {
    /// What the daemon cannot do without it ("report its release ...").
    pub what: &'static str,
    pub since: u16,
    /// What the user can leave out instead ("" when nothing: upgrade).
    pub instead: &'static str,
}

/// `urmove info`: the daemon reports its release, protocols and limits.
pub const INFO: Feature = Feature {
    what: "report its release, protocols and limits (urmove info)",
    since: 13,
    instead: "",
};

/// A feature asked of a daemon whose version lacks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{}", lacks_text(self))]
pub struct Lacks {
    pub feature: Feature,
    /// The version the session speaks.
    pub theirs: u16,
}

fn lacks_text(l: &Lacks) -> String {
    let f = l.feature;
    let instead = match f.instead {
        "" => String::new(),
        i => format!(" or leave out {i}"),
    };
    format!(
        "the receiver runs urmove {} (protocol {}), which cannot {}: upgrade it to urmove {} (protocol {}) or later{instead}",
        release_of(l.theirs),
        l.theirs,
        f.what,
        release_of(f.since),
        f.since
    )
}

/// Whether a session of protocol `v` can have `feature`.
pub fn check(feature: Feature, v: u16) -> Result<(), Lacks> {
    match v >= feature.since {
        true => Ok(()),
        false => Err(Lacks { feature, theirs: v }),
    }
}

/// The two sides speak no version in common.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{}", no_common_text(*ours, *theirs))]
pub struct NoCommonVersion {
    pub ours: Range,
    pub theirs: Range,
}

fn no_common_text(ours: Range, theirs: Range) -> String {
    let older = if theirs.max < ours.min {
        "the peer"
    } else {
        "this urmove"
    };
    format!(
        "no protocol version in common: this urmove speaks protocols {}-{} (urmove {}), the peer {}-{} (urmove {}): upgrade {older}",
        ours.min,
        ours.max,
        release_of(ours.max),
        theirs.min,
        theirs.max,
        release_of(theirs.max),
    )
}

/// The highest version in both ranges.
pub fn choose(ours: Range, theirs: Range) -> Result<u16, NoCommonVersion> {
    let top = ours.max.min(theirs.max);
    if top >= ours.min.max(theirs.min) && theirs.min <= theirs.max {
        Ok(top)
    } else {
        Err(NoCommonVersion { ours, theirs })
    }
}

/// What a client makes of a daemon's challenge: the version it chose (12
/// when it has no mark: a 0.1.0 daemon), which must lie in the client's
/// offer and the daemon's own range.
pub fn accept_answer(offered: Range, n: &Nonce) -> Result<Answer, NoCommonVersion> {
    let a = read_answer(n).unwrap_or(Answer {
        chosen: HELLO_VERSION,
        daemon: Range {
            min: HELLO_VERSION,
            max: HELLO_VERSION,
        },
        room: 0,
    });
    let fits = |r: Range| (r.min..=r.max).contains(&a.chosen);
    if fits(offered) && fits(a.daemon) {
        Ok(a)
    } else {
        Err(NoCommonVersion {
            ours: offered,
            theirs: a.daemon,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_feature_a_version_lacks_is_refused_by_name() {
        assert_eq!(check(INFO, 13), Ok(()));
        let e = check(INFO, 12).unwrap_err().to_string();
        assert_eq!(
            e,
            "the receiver runs urmove 0.1.0 (protocol 12), which cannot report its release, protocols and limits (urmove info): upgrade it to urmove 0.2.0 (protocol 13) or later"
        );
    }

    #[test]
    fn blocks_round_trip_and_leave_the_random_part() {
        let r = [7u8; 32];
        let n = offer_nonce(r, OURS);
        assert_eq!(read_offer(&n), Some(OURS));
        assert_eq!(&n[..20], &r[..20]);
        assert_eq!(read_answer(&n), None, "a client block is no answer");
        let a = Answer {
            chosen: 13,
            daemon: OURS,
            room: 143,
        };
        let s = answer_nonce(r, a);
        assert_eq!(read_answer(&s), Some(a));
        assert_eq!(&s[..16], &r[..16]);
        assert_eq!(read_offer(&r), None);
    }

    #[test]
    fn the_highest_common_version_is_chosen() {
        let r = |min, max| Range { min, max };
        assert_eq!(choose(r(12, 13), r(12, 13)), Ok(13));
        assert_eq!(choose(r(12, 13), r(12, 12)), Ok(12));
        assert_eq!(choose(r(12, 13), r(13, 20)), Ok(13));
        let e = choose(r(12, 13), r(14, 15)).unwrap_err();
        assert!(e.to_string().contains("upgrade this urmove"), "{e}");
        let e = choose(r(13, 14), r(11, 12)).unwrap_err();
        assert!(e.to_string().contains("urmove 0.1.0"), "{e}");
        assert!(e.to_string().contains("upgrade the peer"), "{e}");
        assert!(choose(r(12, 13), r(13, 12)).is_err(), "an empty range");
    }

    #[test]
    fn an_unmarked_challenge_is_protocol_12_and_a_foreign_choice_is_refused() {
        let a = accept_answer(OURS, &[0u8; 32]).unwrap();
        assert_eq!(a.chosen, 12);
        let odd = answer_nonce(
            [0; 32],
            Answer {
                chosen: 11,
                daemon: Range { min: 11, max: 13 },
                room: 4,
            },
        );
        assert!(accept_answer(OURS, &odd).is_err());
    }
}
