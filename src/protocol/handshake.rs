//! Mutual authentication by pre-shared key, as a pure state machine.
//!
//! ```text
//! client                                   server
//!   Hello { version, client_nonce }   ->
//!                                     <-   Challenge { server_nonce,
//!                                            server_proof = HMAC(K, "server" | cn | sn) }
//!   (client checks server_proof)
//!   Auth { client_proof =             ->
//!          HMAC(K, "client" | sn | cn) }   (server checks client_proof)
//!                                     <-   Welcome { session_id }   (protocol 12)
//! session_key = HMAC(K, "session" | cn | sn | session_id)
//! ```
//! Both nonces carry the versions each side speaks (`protocol::negotiate`).
//! From protocol 13 the session id is `HMAC(K, "urmove-session-id" | cn |
//! sn)`, its first 16 bytes, which both sides know once the challenge is
//! checked: there is no `Welcome`, and the client sends its request right
//! behind its proof.
//! The key never crosses the wire; both nonces are fresh per connection, so
//! a recorded `Auth` is worthless against a new challenge; proofs are
//! compared in constant time. Data streams prove they belong to a session
//! with `HMAC(session_key, "stream" | session_id | stream_index)`.

use hmac::{Hmac, Mac};

use super::negotiate::{self, Range};
use sha2::Sha256;

/// The newest protocol version this build speaks (the handshake's
/// messages are the same in every version it speaks).
pub const VERSION: u16 = 14;
pub const NONCE_LEN: usize = 32;
pub const PROOF_LEN: usize = 32;
pub const SESSION_ID_LEN: usize = 16;
/// Pre-shared keys are 32 bytes (written as 64 hex digits in a key file).
pub const KEY_LEN: usize = 32;

pub type Key = [u8; KEY_LEN];
pub type Nonce = [u8; NONCE_LEN];
pub type Proof = [u8; PROOF_LEN];
pub type SessionId = [u8; SESSION_ID_LEN];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub version: u16,
    pub client_nonce: Nonce,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    pub server_nonce: Nonce,
    pub server_proof: Proof,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Auth {
    pub client_proof: Proof,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Welcome {
    pub session_id: SessionId,
}

/// What both sides know after a successful handshake.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionKeys {
    pub session_id: SessionId,
    pub session_key: [u8; 32],
}

impl std::fmt::Debug for SessionKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key.
        f.debug_struct("SessionKeys")
            .field("session_id", &self.session_id)
            .finish_non_exhaustive()
    }
}

/// Why a handshake failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthError {
    /// The peer speaks another protocol version (a 0.1.0 client's Hello).
    Version { theirs: u16 },
    /// The two sides speak no version in common.
    NoCommonVersion(super::negotiate::NoCommonVersion),
    /// The peer's proof does not match: it holds another key (or none).
    BadProof,
    /// A message arrived in the wrong state (replayed, reordered, repeated).
    OutOfOrder,
}

impl std::fmt::Display for AuthError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AuthError::Version { theirs } => {
                write!(
                    f,
                    "the peer speaks protocol version {theirs} (urmove {}), this urmove speaks {}-{}: upgrade {}",
                    super::negotiate::release_of(*theirs),
                    super::negotiate::PROTOCOL_MIN,
                    super::negotiate::PROTOCOL_MAX,
                    if *theirs < super::negotiate::PROTOCOL_MIN { "the peer" } else { "this urmove" }
                )
            }
            AuthError::NoCommonVersion(e) => write!(f, "{e}"),
            AuthError::BadProof => write!(
                f,
                "authentication failed: the peer does not hold the same key"
            ),
            AuthError::OutOfOrder => write!(f, "handshake message out of order"),
        }
    }
}

impl std::error::Error for AuthError {}

/// HMAC-SHA256 of the concatenation of `parts` under `key`.
pub fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut mac =
        <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes keys of any length");
    for p in parts {
        mac.update(p);
    }
    mac.finalize().into_bytes().into()
}

/// Whether `tag` is the start (at least 16 bytes) of the HMAC-SHA256 of
/// `parts` under `key` (compared in constant time).
pub fn verify_truncated(key: &[u8], parts: &[&[u8]], tag: &[u8]) -> bool {
    if tag.len() < 16 {
        return false;
    }
    let mut mac =
        <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes keys of any length");
    for p in parts {
        mac.update(p);
    }
    mac.verify_truncated_left(tag).is_ok()
}

/// Whether `proof` is the HMAC-SHA256 of `parts` under `key` (compared in
/// constant time).
pub fn verify(key: &[u8], parts: &[&[u8]], proof: &Proof) -> bool {
    let mut mac =
        <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes keys of any length");
    for p in parts {
        mac.update(p);
    }
    // Constant-time comparison.
    mac.verify_slice(proof).is_ok()
}

fn session_keys(key: &Key, cn: &Nonce, sn: &Nonce, session_id: SessionId) -> SessionKeys {
    SessionKeys {
        session_id,
        session_key: hmac(key, &[b"urmove-session", cn, sn, &session_id]),
    }
}

/// The session id of protocol 13 on: known to both sides at the challenge.
fn derived_session_id(key: &Key, cn: &Nonce, sn: &Nonce) -> SessionId {
    let mac = hmac(key, &[b"urmove-session-id", cn, sn]);
    let mut id = [0u8; SESSION_ID_LEN];
    id.copy_from_slice(&mac[..SESSION_ID_LEN]);
    id
}

/// The server side of the handshake.
pub struct ServerHandshake {
    key: Key,
    server_nonce: Nonce,
    client_nonce: Option<Nonce>,
    done: bool,
    ours: Range,
    room: u16,
    version: u16,
}

impl ServerHandshake {
    /// `server_nonce` must be fresh random bytes for every connection;
    /// `room`: how many more unauthenticated connections the client's
    /// address may open (told to a client of protocol 13 on).
    pub fn new(key: Key, server_nonce: Nonce, room: u16) -> Self {
        Self::speaking(key, server_nonce, room, negotiate::OURS)
    }

    /// As [`ServerHandshake::new`], speaking the versions `ours`.
    pub fn speaking(key: Key, server_nonce: Nonce, room: u16, ours: Range) -> Self {
        ServerHandshake {
            key,
            server_nonce,
            client_nonce: None,
            done: false,
            ours,
            room,
            version: 0,
        }
    }

    /// The version agreed (after [`ServerHandshake::on_hello`]).
    pub fn version(&self) -> u16 {
        self.version
    }

    pub fn on_hello(&mut self, hello: &Hello) -> Result<Challenge, AuthError> {
        if self.client_nonce.is_some() || self.done {
            return Err(AuthError::OutOfOrder);
        }
        match negotiate::read_offer(&hello.client_nonce) {
            Some(theirs) => {
                let chosen =
                    negotiate::choose(self.ours, theirs).map_err(AuthError::NoCommonVersion)?;
                self.version = chosen;
                self.server_nonce = negotiate::answer_nonce(
                    self.server_nonce,
                    negotiate::Answer {
                        chosen,
                        daemon: self.ours,
                        room: self.room,
                    },
                );
            }
            // A 0.1.0 client: the version it names, if this build speaks it.
            None if (self.ours.min..=self.ours.max).contains(&hello.version) => {
                self.version = hello.version;
            }
            None => {
                return Err(AuthError::Version {
                    theirs: hello.version,
                })
            }
        }
        self.client_nonce = Some(hello.client_nonce);
        Ok(Challenge {
            server_nonce: self.server_nonce,
            server_proof: hmac(
                &self.key,
                &[b"urmove-server", &hello.client_nonce, &self.server_nonce],
            ),
        })
    }

    /// Check the client's proof; `session_id` must be fresh random bytes
    /// (protocol 12, told in the `Welcome`; from 13 the id is derived and
    /// there is no `Welcome`).
    pub fn on_auth(
        &mut self,
        auth: &Auth,
        session_id: SessionId,
    ) -> Result<(Option<Welcome>, SessionKeys), AuthError> {
        let Some(cn) = self.client_nonce.filter(|_| !self.done) else {
            return Err(AuthError::OutOfOrder);
        };
        self.done = true;
        if !verify(
            &self.key,
            &[b"urmove-client", &self.server_nonce, &cn],
            &auth.client_proof,
        ) {
            return Err(AuthError::BadProof);
        }
        if self.version >= 13 {
            let id = derived_session_id(&self.key, &cn, &self.server_nonce);
            return Ok((None, session_keys(&self.key, &cn, &self.server_nonce, id)));
        }
        Ok((
            Some(Welcome { session_id }),
            session_keys(&self.key, &cn, &self.server_nonce, session_id),
        ))
    }
}

/// The client side of the handshake.
pub struct ClientHandshake {
    key: Key,
    client_nonce: Nonce,
    server_nonce: Option<Nonce>,
    done: bool,
    ours: Range,
    answer: Option<negotiate::Answer>,
}

impl ClientHandshake {
    /// `client_nonce` must be fresh random bytes for every connection (its
    /// last 12 bytes carry the versions this build speaks).
    pub fn new(key: Key, client_nonce: Nonce) -> (Self, Hello) {
        Self::speaking(key, client_nonce, negotiate::OURS)
    }

    /// As [`ClientHandshake::new`], offering the versions `ours`.
    pub fn speaking(key: Key, random: Nonce, ours: Range) -> (Self, Hello) {
        let client_nonce = negotiate::offer_nonce(random, ours);
        (
            ClientHandshake {
                key,
                client_nonce,
                server_nonce: None,
                done: false,
                ours,
                answer: None,
            },
            Hello {
                version: negotiate::HELLO_VERSION,
                client_nonce,
            },
        )
    }

    /// The daemon's answer (after a good challenge): the version chosen,
    /// the daemon's range and its room for unauthenticated connections.
    pub fn answer(&self) -> Option<negotiate::Answer> {
        self.answer
    }

    /// From protocol 13, the session's keys at once (no `Welcome`): after
    /// [`ClientHandshake::on_challenge`] chose 13 or later.
    pub fn keys_now(&mut self) -> Result<SessionKeys, AuthError> {
        let Some(sn) = self
            .server_nonce
            .filter(|_| !self.done && self.answer.is_some_and(|a| a.chosen >= 13))
        else {
            return Err(AuthError::OutOfOrder);
        };
        self.done = true;
        let id = derived_session_id(&self.key, &self.client_nonce, &sn);
        Ok(session_keys(&self.key, &self.client_nonce, &sn, id))
    }

    /// Check the server's proof and answer with ours.
    pub fn on_challenge(&mut self, c: &Challenge) -> Result<Auth, AuthError> {
        if self.server_nonce.is_some() || self.done {
            return Err(AuthError::OutOfOrder);
        }
        if !verify(
            &self.key,
            &[b"urmove-server", &self.client_nonce, &c.server_nonce],
            &c.server_proof,
        ) {
            self.done = true;
            return Err(AuthError::BadProof);
        }
        // The answer is read only once the proof holds: nobody could
        // have written it but a holder of the key.
        let answer = negotiate::accept_answer(self.ours, &c.server_nonce).map_err(|e| {
            self.done = true;
            AuthError::NoCommonVersion(e)
        })?;
        self.answer = Some(answer);
        self.server_nonce = Some(c.server_nonce);
        Ok(Auth {
            client_proof: hmac(
                &self.key,
                &[b"urmove-client", &c.server_nonce, &self.client_nonce],
            ),
        })
    }

    pub fn on_welcome(&mut self, w: &Welcome) -> Result<SessionKeys, AuthError> {
        let Some(sn) = self
            .server_nonce
            .filter(|_| !self.done && self.answer.is_some_and(|a| a.chosen < 13))
        else {
            return Err(AuthError::OutOfOrder);
        };
        self.done = true;
        Ok(session_keys(
            &self.key,
            &self.client_nonce,
            &sn,
            w.session_id,
        ))
    }
}

/// The proof a data stream presents for `stream_index` of a session.
pub fn stream_proof(keys: &SessionKeys, stream_index: u16) -> Proof {
    hmac(
        &keys.session_key,
        &[
            b"urmove-stream",
            &keys.session_id,
            &stream_index.to_le_bytes(),
        ],
    )
}

/// Whether `proof` is the right one for `stream_index` (constant time).
pub fn check_stream_proof(keys: &SessionKeys, stream_index: u16, proof: &Proof) -> bool {
    verify(
        &keys.session_key,
        &[
            b"urmove-stream",
            &keys.session_id,
            &stream_index.to_le_bytes(),
        ],
        proof,
    )
}

/// A key file's text that is not a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a key file holds {} hex digits (urmove keygen FILE writes one)", KEY_LEN * 2)]
pub struct NotAKey;

/// Parse a key file's text: 64 hex digits (whitespace around is ignored).
pub fn parse_key(text: &str) -> Result<Key, NotAKey> {
    let hex = text.trim();
    if hex.len() != KEY_LEN * 2 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(NotAKey);
    }
    let mut key = [0u8; KEY_LEN];
    for (i, k) in key.iter_mut().enumerate() {
        *k = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("checked hex digits");
    }
    Ok(key)
}

/// A key as key-file text.
pub fn format_key(key: &Key) -> String {
    let mut s: String = key.iter().map(|b| format!("{b:02x}")).collect();
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: Key = [7u8; 32];

    fn run(client_key: Key, server_key: Key) -> Result<(SessionKeys, SessionKeys), AuthError> {
        let (mut c, hello) = ClientHandshake::new(client_key, [1; 32]);
        let mut s = ServerHandshake::new(server_key, [2; 32], 4);
        let challenge = s.on_hello(&hello)?;
        let auth = c.on_challenge(&challenge)?;
        let (welcome, sk) = s.on_auth(&auth, [3; 16])?;
        let ck = match welcome {
            Some(w) => c.on_welcome(&w)?,
            None => c.keys_now()?,
        };
        Ok((ck, sk))
    }

    /// A 0.1.0 daemon: checks `version == 12`, answers with its random
    /// nonce as it is, welcomes with a random id.
    fn legacy_daemon(hello: &Hello, sn: Nonce) -> Option<(Challenge, Nonce)> {
        (hello.version == 12).then(|| {
            let proof = hmac(&K, &[b"urmove-server", &hello.client_nonce, &sn]);
            (
                Challenge {
                    server_nonce: sn,
                    server_proof: proof,
                },
                sn,
            )
        })
    }

    #[test]
    fn two_builds_of_this_release_speak_their_newest_without_a_welcome() {
        let (mut c, hello) = ClientHandshake::new(K, [1; 32]);
        let mut s = ServerHandshake::new(K, [2; 32], 9);
        let ch = s.on_hello(&hello).unwrap();
        assert_eq!(s.version(), VERSION);
        let auth = c.on_challenge(&ch).unwrap();
        let a = c.answer().unwrap();
        assert_eq!((a.chosen, a.room, a.daemon), (VERSION, 9, negotiate::OURS));
        let (w, sk) = s.on_auth(&auth, [3; 16]).unwrap();
        assert!(w.is_none());
        let ck = c.keys_now().unwrap();
        assert_eq!(ck, sk);
        assert_ne!(ck.session_id, [3; 16], "derived, not the random id");
        assert_eq!(c.keys_now().unwrap_err(), AuthError::OutOfOrder);
    }

    #[test]
    fn a_new_client_speaks_12_to_a_0_1_0_daemon() {
        let (mut c, hello) = ClientHandshake::new(K, [1; 32]);
        assert_eq!(hello.version, 12, "what a 0.1.0 daemon demands");
        let (ch, sn) = legacy_daemon(&hello, [2; 32]).unwrap();
        c.on_challenge(&ch).unwrap();
        assert_eq!(c.answer().unwrap().chosen, 12);
        assert_eq!(c.keys_now().unwrap_err(), AuthError::OutOfOrder);
        let ck = c
            .on_welcome(&Welcome {
                session_id: [3; 16],
            })
            .unwrap();
        assert_eq!(ck, session_keys(&K, &hello.client_nonce, &sn, [3; 16]));
    }

    #[test]
    fn a_0_1_0_client_gets_12_and_a_welcome() {
        // Its nonce is random: no mark.
        let hello = Hello {
            version: 12,
            client_nonce: [1; 32],
        };
        let mut s = ServerHandshake::new(K, [2; 32], 9);
        let ch = s.on_hello(&hello).unwrap();
        assert_eq!(s.version(), 12);
        assert_eq!(
            ch.server_nonce, [2; 32],
            "its nonce untouched, as 0.1.0 sends"
        );
        let auth = Auth {
            client_proof: hmac(&K, &[b"urmove-client", &ch.server_nonce, &[1; 32]]),
        };
        let (w, sk) = s.on_auth(&auth, [3; 16]).unwrap();
        assert_eq!(
            w,
            Some(Welcome {
                session_id: [3; 16]
            })
        );
        assert_eq!(sk.session_id, [3; 16]);
    }

    #[test]
    fn nobody_on_the_path_can_change_the_versions() {
        // A lowered offer: the daemon's proof covers the changed nonce.
        let (mut c, mut hello) = ClientHandshake::new(K, [1; 32]);
        hello.client_nonce[31] = 0;
        hello.client_nonce[30] = 12;
        let mut s = ServerHandshake::new(K, [2; 32], 4);
        let ch = s.on_hello(&hello).unwrap();
        assert_eq!(s.version(), 12);
        assert_eq!(c.on_challenge(&ch).unwrap_err(), AuthError::BadProof);
        // A changed answer, or the mark taken away.
        for at in [16usize, 24, 26, 31] {
            let (mut c, hello) = ClientHandshake::new(K, [1; 32]);
            let mut s = ServerHandshake::new(K, [2; 32], 4);
            let mut ch = s.on_hello(&hello).unwrap();
            ch.server_nonce[at] ^= 1;
            assert_eq!(
                c.on_challenge(&ch).unwrap_err(),
                AuthError::BadProof,
                "{at}"
            );
        }
    }

    #[test]
    fn no_common_version_is_refused_by_name() {
        let (_, hello) = ClientHandshake::speaking(
            K,
            [1; 32],
            Range {
                min: VERSION + 1,
                max: VERSION + 2,
            },
        );
        let mut s = ServerHandshake::new(K, [2; 32], 4);
        let e = s.on_hello(&hello).unwrap_err();
        assert!(matches!(e, AuthError::NoCommonVersion(_)), "{e:?}");
        assert!(e.to_string().contains("upgrade this urmove"), "{e}");
        // A client that speaks only 13 refuses a 0.1.0 daemon's 12.
        let (mut c, hello) = ClientHandshake::speaking(K, [1; 32], Range { min: 13, max: 13 });
        let (ch, _) = legacy_daemon(&hello, [2; 32]).unwrap();
        let e = c.on_challenge(&ch).unwrap_err();
        assert!(e.to_string().contains("urmove 0.1.0"), "{e}");
    }

    #[test]
    fn same_key_agrees_on_session() {
        let (ck, sk) = run(K, K).unwrap();
        assert_eq!(ck, sk);
        assert_ne!(ck.session_key, K, "the session key is derived, not the PSK");
        let p = stream_proof(&ck, 3);
        assert!(check_stream_proof(&sk, 3, &p));
        assert!(
            !check_stream_proof(&sk, 4, &p),
            "a proof is bound to its stream index"
        );
    }

    #[test]
    fn wrong_key_is_refused_by_both_sides() {
        // The client sees the server does not hold its key.
        assert_eq!(run(K, [8; 32]).unwrap_err(), AuthError::BadProof);
        // A client without the key cannot forge the proof either.
        let mut s = ServerHandshake::new(K, [2; 32], 4);
        s.on_hello(&Hello {
            version: VERSION,
            client_nonce: [1; 32],
        })
        .unwrap();
        assert_eq!(
            s.on_auth(
                &Auth {
                    client_proof: [0; 32]
                },
                [3; 16]
            )
            .unwrap_err(),
            AuthError::BadProof
        );
    }

    #[test]
    fn a_replayed_auth_fails_against_a_fresh_challenge() {
        let (mut c, hello) = ClientHandshake::new(K, [1; 32]);
        let mut s1 = ServerHandshake::new(K, [2; 32], 4);
        let auth = c.on_challenge(&s1.on_hello(&hello).unwrap()).unwrap();
        assert!(s1.on_auth(&auth, [3; 16]).is_ok());
        // Same hello and auth replayed to a new connection (new server nonce).
        let mut s2 = ServerHandshake::new(K, [9; 32], 4);
        s2.on_hello(&hello).unwrap();
        assert_eq!(s2.on_auth(&auth, [3; 16]).unwrap_err(), AuthError::BadProof);
    }

    #[test]
    fn out_of_order_and_version() {
        let mut s = ServerHandshake::new(K, [2; 32], 4);
        assert_eq!(
            s.on_auth(
                &Auth {
                    client_proof: [0; 32]
                },
                [0; 16]
            )
            .unwrap_err(),
            AuthError::OutOfOrder
        );
        assert_eq!(
            s.on_hello(&Hello {
                version: 99,
                client_nonce: [1; 32]
            })
            .unwrap_err(),
            AuthError::Version { theirs: 99 }
        );
        let (mut c, _) = ClientHandshake::new(K, [1; 32]);
        assert_eq!(
            c.on_welcome(&Welcome {
                session_id: [0; 16]
            })
            .unwrap_err(),
            AuthError::OutOfOrder
        );
    }

    #[test]
    fn key_text_round_trip() {
        let text = format_key(&K);
        assert_eq!(parse_key(&text), Ok(K));
        assert!(parse_key("abc").is_err());
        assert!(parse_key(&"zz".repeat(32)).is_err());
    }
}
