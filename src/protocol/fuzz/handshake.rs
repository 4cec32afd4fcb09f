//! The handshake body: a real client and a real server with a scripted man
//! in the middle between them, each answer checked against a model of
//! what the protocol allows; and a key file's text parsed.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::protocol::control::{self, Message};
use crate::protocol::handshake::{
    check_stream_proof, format_key, parse_key, stream_proof, Auth, AuthError, Challenge,
    ClientHandshake, Hello, Key, Nonce, Proof, ServerHandshake, SessionId, SessionKeys, Welcome,
    KEY_LEN,
};
use crate::protocol::negotiate::{self, Answer, Range};

/// The key the honest client holds.
pub(super) const KEY: Key = [0x5a; KEY_LEN];

/// The key of a server that is not the client's peer.
const OTHER_KEY: Key = [0xa5; KEY_LEN];

/// The client's random bytes (its nonce carries its range in the last 12).
pub(super) const CLIENT_NONCE: Nonce = [1; 32];

/// The ranges the first byte's bits 1-2 (the client's) and 3-4 (the
/// server's) choose among: both sides of this release, one side of
/// 0.1.0's version only, one of a later release only, one from the future.
const RANGES: [Range; 4] = [
    negotiate::OURS,
    Range { min: 12, max: 12 },
    Range { min: 13, max: 13 },
    Range { min: 15, max: 16 },
];

/// The daemon's room for unauthenticated connections, as told.
const ROOM: u16 = 7;

const SERVER_NONCE: Nonce = [2; 32];

pub(super) const SESSION_ID: SessionId = [3; 16];

/// Operations of the handshake input, one byte each (`byte % 8`).
pub(super) mod op {
    /// A control message decoded from the following bytes.
    pub const INJECT: u8 = 0;
    pub const HELLO: u8 = 1;
    pub const CHALLENGE: u8 = 2;
    pub const AUTH: u8 = 3;
    pub const WELCOME: u8 = 4;
    /// One of the four above with one bit of its body flipped
    /// (two more bytes: which message, which bit).
    pub const TAMPER: u8 = 5;
    /// The server's own proof sent back to it as the client's.
    pub const REFLECT: u8 = 6;
    /// The client opens a data stream (two more bytes: the stream index).
    pub const STREAM: u8 = 7;
}

/// A real client (key [`KEY`]) and a real server (that key, or another one
/// when the first byte is odd), each speaking a range of versions the
/// first byte picks (see [`RANGES`]), with a man in the middle that the rest of
/// `data` scripts: it forwards, drops, repeats, reorders, tampers with and
/// forges messages (see [`op`]). Every message crosses the wire encoding.
///
/// Each answer of either side is exactly what the protocol allows, checked
/// against the proofs recomputed from the module's definition and the
/// version the model chooses (the highest both offer; 12 or 13 named by
/// an unmarked hello; never one a tampered nonce asked for without the
/// proofs failing): each side
/// takes the right proof for the nonces in play and nothing else, each
/// message once and only in order; honest forwarding succeeds with the same
/// key and fails with another; whenever both sides finish on the same key,
/// nonces and session id, the server takes the client's stream proofs.
/// Also: the data as a key file's text parses exactly when it is 64 hex
/// digits, and round-trips.
///
/// The nonces are fixed (to stay deterministic), so every run is the same
/// session: a proof seen in one run is a valid replay in the next, and
/// libFuzzer's comparison tracing does see them. So "right proof" means
/// right for these nonces; fresh nonces per connection are what stop
/// replays (`handshake::tests::a_replayed_auth_fails_against_a_fresh_challenge`).
pub fn handshake(data: &[u8]) {
    key_text(data);
    run_handshake(data);
}

/// The handshake scripted by `data`, as far as it goes.
pub(super) fn run_handshake(data: &[u8]) -> Option<Handshake> {
    let (&first, script) = data.split_first()?;
    let mut mitm = Handshake::new(
        first & 1 == 0,
        RANGES[usize::from(first >> 1) % 4],
        RANGES[usize::from(first >> 3) % 4],
    );
    let mut rest = script;
    while let Some((&byte, tail)) = rest.split_first() {
        rest = tail;
        let m = match byte % 8 {
            op::INJECT => match control::decode(rest) {
                Ok(Some((m, used))) => {
                    rest = &rest[used..];
                    m
                }
                _ => return Some(mitm),
            },
            op::HELLO => Message::Hello(mitm.hello.clone()),
            op::CHALLENGE => match &mitm.challenge {
                Some(c) => Message::Challenge(c.clone()),
                None => continue,
            },
            op::AUTH => match &mitm.auth {
                Some(a) => Message::Auth(a.clone()),
                None => continue,
            },
            op::WELCOME => match &mitm.welcome {
                Some(w) => Message::Welcome(w.clone()),
                None => continue,
            },
            op::TAMPER => {
                let Some(([which, bit], tail)) = rest.split_first_chunk::<2>() else {
                    return Some(mitm);
                };
                rest = tail;
                match mitm.tampered(*which, *bit) {
                    Some(m) => m,
                    None => continue,
                }
            }
            op::REFLECT => match &mitm.challenge {
                Some(c) => Message::Auth(Auth {
                    client_proof: c.server_proof,
                }),
                None => continue,
            },
            op::STREAM => {
                let Some((index, tail)) = rest.split_first_chunk::<2>() else {
                    return Some(mitm);
                };
                rest = tail;
                mitm.open_stream(u16::from_le_bytes(*index));
                continue;
            }
            _ => unreachable!("eight operations"),
        };
        mitm.deliver(m);
    }
    Some(mitm)
}

/// Both sides, what they said, and the model of what each may accept.
pub(super) struct Handshake {
    server_key: Key,
    client: ClientHandshake,
    server: ServerHandshake,
    client_range: Range,
    server_range: Range,
    /// The version the server chose for the hello it took.
    server_version: u16,
    /// The version the client took from the challenge it took.
    client_version: u16,
    hello: Hello,
    /// The server's answers (it gives each at most once).
    challenge: Option<Challenge>,
    welcome: Option<Welcome>,
    /// The client's proof (it gives it at most once).
    auth: Option<Auth>,
    /// The client nonce of the hello the server took.
    server_took: Option<Nonce>,
    /// The server checked a proof (right or wrong): it takes no other.
    server_checked: bool,
    /// The server nonce of the challenge the client took.
    client_took: Option<Nonce>,
    /// The client checked a challenge (right or wrong): it takes no other.
    client_checked: bool,
    pub(super) client_keys: Option<SessionKeys>,
    pub(super) server_keys: Option<SessionKeys>,
}

/// `HMAC-SHA256(key, label | a | b)`, the proofs as the handshake module
/// defines them, computed here independently of it.
fn proof(key: &Key, label: &[u8], a: &Nonce, b: &Nonce) -> Proof {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("any key length");
    mac.update(label);
    mac.update(a);
    mac.update(b);
    mac.finalize().into_bytes().into()
}

impl Handshake {
    fn new(same_key: bool, client_range: Range, server_range: Range) -> Self {
        let (client, hello) = ClientHandshake::speaking(KEY, CLIENT_NONCE, client_range);
        let server_key = if same_key { KEY } else { OTHER_KEY };
        Handshake {
            server_key,
            client,
            server: ServerHandshake::speaking(server_key, SERVER_NONCE, ROOM, server_range),
            client_range,
            server_range,
            server_version: 0,
            client_version: 0,
            hello,
            challenge: None,
            welcome: None,
            auth: None,
            server_took: None,
            server_checked: false,
            client_took: None,
            client_checked: false,
            client_keys: None,
            server_keys: None,
        }
    }

    /// One of the handshake messages seen so far, with one bit flipped.
    fn tampered(&self, which: u8, bit: u8) -> Option<Message> {
        let m = match which % 4 {
            0 => Message::Hello(self.hello.clone()),
            1 => Message::Challenge(self.challenge.clone()?),
            2 => Message::Auth(self.auth.clone()?),
            _ => Message::Welcome(self.welcome.clone()?),
        };
        let mut bytes = control::encode(&m);
        // Past the length prefix and the kind byte: the fields.
        let fields = bytes.len() - 5;
        let bit = usize::from(bit) % (fields * 8);
        bytes[5 + bit / 8] ^= 1 << (bit % 8);
        control::decode(&bytes).ok().flatten().map(|(m, _)| m)
    }

    /// Send `m` across the wire to the side it is addressed to, and check
    /// that side's answer against the model.
    fn deliver(&mut self, m: Message) {
        match wire_round_trip(&m) {
            Message::Hello(h) => self.hello_to_server(&h),
            Message::Challenge(c) => self.challenge_to_client(&c),
            Message::Auth(a) => self.auth_to_server(&a),
            Message::Welcome(w) => self.welcome_to_client(&w),
            Message::StreamHello {
                stream_index,
                proof,
                ..
            } => self.stream_hello_to_server(stream_index, &proof),
            _ => {}
        }
    }

    /// The server takes a fresh hello it shares a version with, once, and
    /// answers with its nonce (its answer in it when the hello had an
    /// offer) and the proof of its key.
    fn hello_to_server(&mut self, h: &Hello) {
        let got = self.server.on_hello(h);
        if self.server_took.is_some() || self.server_checked {
            assert_eq!(got, Err(AuthError::OutOfOrder));
            return;
        }
        let r = self.server_range;
        let (version, nonce) = match negotiate::read_offer(&h.client_nonce) {
            Some(offer) => match negotiate::choose(r, offer) {
                Ok(v) => {
                    let answer = Answer {
                        chosen: v,
                        daemon: r,
                        room: ROOM,
                    };
                    (v, negotiate::answer_nonce(SERVER_NONCE, answer))
                }
                Err(e) => {
                    assert_eq!(got, Err(AuthError::NoCommonVersion(e)));
                    return;
                }
            },
            None if (r.min..=r.max).contains(&h.version) => (h.version, SERVER_NONCE),
            None => {
                assert_eq!(got, Err(AuthError::Version { theirs: h.version }));
                return;
            }
        };
        let c = got.expect("a fresh server takes a hello it shares a version with");
        assert_eq!(c.server_nonce, nonce);
        assert_eq!(self.server.version(), version);
        assert_eq!(
            c.server_proof,
            proof(&self.server_key, b"urmove-server", &h.client_nonce, &nonce)
        );
        self.server_took = Some(h.client_nonce);
        self.server_version = version;
        self.challenge = Some(c);
    }

    /// The client checks a challenge once, and takes it only with the
    /// right proof, answering with its own.
    fn challenge_to_client(&mut self, c: &Challenge) {
        let got = self.client.on_challenge(c);
        if self.client_checked {
            assert_eq!(got, Err(AuthError::OutOfOrder));
            return;
        }
        self.client_checked = true;
        let cn = self.hello.client_nonce;
        let right = c.server_proof == proof(&KEY, b"urmove-server", &cn, &c.server_nonce);
        if self.challenge.as_ref() == Some(c) {
            // The server's own answer: right only from a server
            // with the client's key that answered the client's hello.
            assert_eq!(
                right,
                self.server_key == KEY && self.server_took == Some(cn)
            );
        }
        if right {
            // The proof holds: the answer is the server's, and the client
            // takes it only when the version lies in both ranges.
            let answer = negotiate::accept_answer(self.client_range, &c.server_nonce);
            let Ok(answer) = answer else {
                assert!(matches!(got, Err(AuthError::NoCommonVersion(_))), "{got:?}");
                return;
            };
            let a = got.expect("the client takes the right challenge");
            assert_eq!(self.client.answer(), Some(answer));
            assert_eq!(
                a.client_proof,
                proof(&KEY, b"urmove-client", &c.server_nonce, &cn)
            );
            self.client_took = Some(c.server_nonce);
            self.client_version = answer.chosen;
            self.auth = Some(a);
        } else {
            assert_eq!(got, Err(AuthError::BadProof), "wrong challenge {c:?}");
        }
    }

    /// The server checks a proof once, after its challenge, and takes only
    /// the right one, welcoming the client into a session.
    fn auth_to_server(&mut self, a: &Auth) {
        let got = self.server.on_auth(a, SESSION_ID);
        let Some(cn) = self.server_took.filter(|_| !self.server_checked) else {
            assert_eq!(got.map(|_| ()), Err(AuthError::OutOfOrder));
            return;
        };
        self.server_checked = true;
        let sn = self.challenge.as_ref().map(|c| c.server_nonce);
        let sn = sn.expect("a server that took a hello challenged it");
        let right = a.client_proof == proof(&self.server_key, b"urmove-client", &sn, &cn);
        if self.auth.as_ref() == Some(a) {
            // The client's own proof: right only with the same key
            // and both nonces agreed.
            assert_eq!(
                right,
                self.server_key == KEY
                    && cn == self.hello.client_nonce
                    && self.client_took == Some(sn)
            );
        }
        if right {
            let (w, keys) = got.expect("the server takes the right proof");
            if self.server_version >= 13 {
                assert_eq!(w, None, "no welcome from protocol 13");
                assert_ne!(keys.session_id, SESSION_ID, "a derived id");
                self.server_keys = Some(keys);
                self.client_keys_now();
            } else {
                let w = w.expect("a welcome in protocol 12");
                assert_eq!((w.session_id, keys.session_id), (SESSION_ID, SESSION_ID));
                self.welcome = Some(w);
                self.server_keys = Some(keys);
            }
        } else {
            assert_eq!(got.map(|_| ()), Err(AuthError::BadProof), "wrong {a:?}");
        }
    }

    /// From protocol 13 the client has its keys once it took the
    /// challenge, and opens its first data stream.
    fn client_keys_now(&mut self) {
        if self.client_version < 13 || self.client_keys.is_some() {
            return;
        }
        let keys = self.client.keys_now().expect("a client of 13 has its keys");
        self.client_keys = Some(keys);
        self.open_stream(0);
    }

    /// The client takes a welcome once, after the challenge it took, in
    /// protocol 12 only, and opens its first data stream.
    fn welcome_to_client(&mut self, w: &Welcome) {
        let got = self.client.on_welcome(w);
        if self.client_took.is_none() || self.client_keys.is_some() || self.client_version >= 13 {
            assert_eq!(got, Err(AuthError::OutOfOrder));
            return;
        }
        let keys = got.expect("a client that took a challenge takes a welcome");
        assert_eq!(keys.session_id, w.session_id);
        self.client_keys = Some(keys);
        self.open_stream(0);
    }

    /// A server in a session takes a stream's proof exactly when it is
    /// that stream's.
    fn stream_hello_to_server(&self, stream_index: u16, proof: &Proof) {
        if let Some(server) = &self.server_keys {
            assert_eq!(
                check_stream_proof(server, stream_index, proof),
                *proof == stream_proof(server, stream_index)
            );
        }
    }

    /// Whether both sides derived their session keys from the same key,
    /// nonces and session id.
    fn agreed(&self) -> bool {
        let sn = self.challenge.as_ref().map(|c| c.server_nonce);
        self.server_key == KEY
            && self.server_took == Some(self.hello.client_nonce)
            && sn.is_some()
            && self.client_took == sn
            && self.client_version == self.server_version
            && match (&self.client_keys, &self.server_keys) {
                (Some(c), Some(s)) => c.session_id == s.session_id,
                _ => false,
            }
    }

    /// The client opens data stream `index` with its proof; the server
    /// takes it exactly when both sides agreed on their keys.
    fn open_stream(&mut self, index: u16) {
        let Some(keys) = &self.client_keys else {
            return;
        };
        let m = Message::StreamHello {
            session_id: keys.session_id,
            stream_index: index,
            proof: stream_proof(keys, index),
        };
        if let Some(server) = &self.server_keys {
            let Message::StreamHello { proof, .. } = wire_round_trip(&m) else {
                unreachable!("a stream hello decodes as one");
            };
            assert_eq!(
                check_stream_proof(server, index, &proof),
                self.agreed(),
                "stream {index}"
            );
        }
    }
}

/// `m` encoded and decoded again: the handshake messages are fixed-size,
/// so they come back exactly.
fn wire_round_trip(m: &Message) -> Message {
    let bytes = control::encode(m);
    let (back, used) = control::decode(&bytes)
        .expect("an encoded message decodes")
        .expect("an encoded message is complete");
    assert_eq!(used, bytes.len());
    if matches!(
        m,
        Message::Hello(_)
            | Message::Challenge(_)
            | Message::Auth(_)
            | Message::Welcome(_)
            | Message::StreamHello { .. }
    ) {
        assert_eq!(&back, m);
        assert_eq!(control::encode(&back), bytes);
    }
    back
}

/// `data` as a key file: it parses exactly when it is 64 hex digits with
/// whitespace around, and formats back to the same digits.
fn key_text(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let digits = text.trim();
    let is_key = digits.len() == 2 * KEY_LEN && digits.bytes().all(|b| b.is_ascii_hexdigit());
    match parse_key(text) {
        Ok(key) => {
            assert!(is_key, "{text:?} parsed as a key");
            let formatted = format_key(&key);
            assert_eq!(formatted.trim(), digits.to_ascii_lowercase());
            assert_eq!(parse_key(&formatted), Ok(key));
        }
        Err(_) => assert!(!is_key, "{text:?} refused"),
    }
}
