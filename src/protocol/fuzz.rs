//! Fuzz bodies: each takes arbitrary bytes, drives the real decoders and
//! state machines with them, and asserts what must hold for every input.
//! `fuzz/fuzz_targets/*` call these under libFuzzer; the unit tests below
//! replay the committed corpus and every past finding on stable Rust.
//!
//! Every body is deterministic (fixed keys, nonces and session ids) and
//! panics only when an invariant breaks.

use std::path::{Component, Path};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::control::{self, Message};
use super::frame::{
    content_terms, digest_add, payload_checksum, FrameError, FrameHeader, FrameKey, FLAG_END,
    FLAG_HOLE, FLAG_SEALED, FLAG_SPARSE, FLAG_UNCHECKED, FRAME_HEADER_LEN, FRAME_PAYLOAD_MAX,
};
use super::handshake::{
    check_stream_proof, format_key, parse_key, stream_proof, Auth, AuthError, Challenge,
    ClientHandshake, Hello, Key, Nonce, Proof, ServerHandshake, SessionId, SessionKeys, Welcome,
    KEY_LEN, VERSION,
};
use super::manifest::{
    check_entry, check_path, decode_entry, encode_entry, link_stays_beneath, Entry, EntryKind,
    COMPONENT_LEN_MAX, PATH_LEN_MAX,
};
use super::names;
use super::wire::{Reader, Writer};

// ---------------------------------------------------------------- frames --

/// The frame checksum key every frame input is checked under, and another
/// session's.
const FUZZ_KEY: FrameKey = FrameKey {
    k0: 0x0123_4567_89ab_cdef,
    k1: 0xfedc_ba98_7654_3210,
};
const OTHER_FRAME_KEY: FrameKey = FrameKey { k0: 1, k1: 2 };

/// Most file sizes a frame input carries after its header.
const FRAME_SIZES_MAX: usize = 4;

/// `data` is a 32-byte frame header, then one byte `n`, `n % 5` little-endian
/// u64 file sizes (the manifest the header is checked against), then the
/// payload.
///
/// Decoding agrees with the byte layout and its limits, a decoded header
/// re-encodes to the same bytes (the reserved word zeroed), the manifest
/// and payload checks agree with their definitions, and the header a sender
/// would write for this payload passes every check.
pub fn frame(data: &[u8]) {
    let decoded = FrameHeader::decode(data);
    let Some(head) = data.get(..FRAME_HEADER_LEN) else {
        assert_eq!(decoded, Err(FrameError::Short { have: data.len() }));
        return;
    };
    if head[..2] != *b"UF" {
        assert_eq!(decoded, Err(FrameError::BadMagic));
        return;
    }
    let le = |at: usize, n: usize| {
        head[at..at + n]
            .iter()
            .rev()
            .fold(0u64, |v, &b| v << 8 | u64::from(b))
    };
    let fields = FrameHeader {
        flags: le(2, 2) as u16,
        file_index: le(4, 4) as u32,
        length: le(8, 4) as u32,
        span: le(12, 4) as u32,
        offset: le(16, 8),
        checksum: le(24, 8),
    };
    let known = FLAG_END | FLAG_HOLE | FLAG_UNCHECKED | FLAG_SEALED | FLAG_SPARSE;
    let sparse = fields.flags & FLAG_SPARSE != 0;
    let span_ok = match sparse {
        true => {
            fields.flags & FLAG_HOLE == 0
                && fields.length < fields.span
                && fields.span <= FRAME_PAYLOAD_MAX
        }
        false => fields.span == 0,
    };
    let expected = if fields.flags & !known != 0 {
        Err(FrameError::UnknownFlags {
            flags: fields.flags,
        })
    } else if fields.length > FRAME_PAYLOAD_MAX {
        Err(FrameError::Oversized {
            length: fields.length,
            limit: FRAME_PAYLOAD_MAX,
        })
    } else if !span_ok {
        Err(FrameError::BadSpan {
            length: fields.length,
            span: fields.span,
        })
    } else {
        Ok(fields)
    };
    assert_eq!(decoded, expected);
    let Ok(h) = decoded else { return };

    let mut canonical = [0u8; FRAME_HEADER_LEN];
    canonical.copy_from_slice(head);
    assert_eq!(h.encode(), canonical, "re-encoded header differs");
    assert_eq!(FrameHeader::decode(&h.encode()), Ok(h));

    let (sizes, payload) = frame_sizes_and_payload(&data[FRAME_HEADER_LEN..]);
    let end = u128::from(h.offset) + u128::from(h.length);
    let size = sizes.get(h.file_index as usize).copied();
    match h.check_against(&sizes) {
        Ok(()) => assert!(
            size.is_some_and(|s| end <= u128::from(s)),
            "{h:?} {sizes:?}"
        ),
        Err(FrameError::UnknownFile { file_index, files }) => {
            assert!(size.is_none());
            assert_eq!((file_index, files), (h.file_index, sizes.len()));
        }
        Err(FrameError::PastEnd {
            file_index,
            end: end_seen,
            size: size_seen,
        }) => {
            assert!(size.is_some_and(|s| end > u128::from(s)), "{h:?} {sizes:?}");
            assert_eq!((file_index, Some(size_seen)), (h.file_index, size));
            assert_eq!(u128::from(end_seen), end.min(u128::from(u64::MAX)));
        }
        Err(e) => panic!("check_against gave {e:?}"),
    }

    let intact = payload.len() == h.length as usize
        && payload_checksum(&FUZZ_KEY, h.file_index, h.offset, payload) == h.checksum;
    match h.check_payload(&FUZZ_KEY, payload) {
        Ok(terms) => {
            assert!(intact);
            assert_eq!(terms, content_terms(h.offset, payload));
        }
        Err(FrameError::BadChecksum { file_index, offset }) => {
            assert!(!intact);
            assert_eq!((file_index, offset), (h.file_index, h.offset));
        }
        Err(e) => panic!("check_payload gave {e:?}"),
    }

    // What an honest sender writes for this payload passes every check.
    if payload.len() <= FRAME_PAYLOAD_MAX as usize {
        let file_index = h.file_index % FRAME_SIZES_MAX as u32;
        let flags = h.flags & !FLAG_SPARSE;
        let honest = FrameHeader::for_payload(&FUZZ_KEY, file_index, h.offset, payload, flags);
        assert_eq!(FrameHeader::decode(&honest.encode()), Ok(honest));
        assert_eq!(
            honest.check_payload(&FUZZ_KEY, payload),
            Ok(content_terms(h.offset, payload))
        );
        // Under another session's key the same header is refused.
        assert!(honest.check_payload(&OTHER_FRAME_KEY, payload).is_err());
        if let Some(end) = h.offset.checked_add(payload.len() as u64) {
            assert_eq!(honest.check_against(&[end; FRAME_SIZES_MAX]), Ok(()));
        }
    }
    let hole = FrameHeader::hole(&FUZZ_KEY, h.file_index, h.offset);
    assert!(hole.is_hole());
    assert_eq!(FrameHeader::decode(&hole.encode()), Ok(hole));
    assert_eq!(hole.check_hole(&FUZZ_KEY), Ok(()));
    assert!(hole.check_hole(&OTHER_FRAME_KEY).is_err());

    // Blocks fold into a file digest in any order.
    let block = payload_checksum(&FUZZ_KEY, h.file_index, h.offset, payload);
    assert_eq!(
        digest_add(digest_add(0, h.checksum), block),
        digest_add(digest_add(0, block), h.checksum)
    );
    if h.is_sparse() && payload.len() >= h.length as usize {
        sparse_payload(h, &payload[..h.length as usize]);
    }
}

/// A sparse frame's payload unpacks only when its map and pieces add up;
/// then the block holds the pieces at their places and zeros between, and
/// packing it again gives back the payload that came.
fn sparse_payload(h: FrameHeader, payload: &[u8]) {
    use super::sparse::{pack, unpack};
    let span = h.span as usize;
    // What a receiver's buffer holds: the block (small ones only here).
    if span > 1 << 20 {
        return;
    }
    let mut buf = vec![0xA5u8; span.div_ceil(4096) * 4096];
    buf[..payload.len()].copy_from_slice(payload);
    let Ok(map) = unpack(&mut buf, span, payload.len()) else {
        return;
    };
    for r in map.runs().filter(|r| !r.present) {
        assert!(buf[r.start..r.end].iter().all(|&b| b == 0), "{r:?}");
    }
    let mut again = buf.clone();
    let len = pack(&mut again, &map);
    assert_eq!(&again[..len], payload);
}

fn frame_sizes_and_payload(rest: &[u8]) -> (Vec<u64>, &[u8]) {
    let Some((&n, mut rest)) = rest.split_first() else {
        return (Vec::new(), rest);
    };
    let mut sizes = Vec::with_capacity(FRAME_SIZES_MAX);
    for _ in 0..usize::from(n) % (FRAME_SIZES_MAX + 1) {
        let Some((size, tail)) = rest.split_first_chunk::<8>() else {
            break;
        };
        sizes.push(u64::from_le_bytes(*size));
        rest = tail;
    }
    (sizes, rest)
}

// ------------------------------------------------------------- handshake --

/// The key the honest client holds.
const KEY: Key = [0x5a; KEY_LEN];
/// The key of a server that is not the client's peer.
const OTHER_KEY: Key = [0xa5; KEY_LEN];
const CLIENT_NONCE: Nonce = [1; 32];
const SERVER_NONCE: Nonce = [2; 32];
const SESSION_ID: SessionId = [3; 16];

/// Operations of the handshake input, one byte each (`byte % 8`).
mod op {
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
/// when the first byte is odd), with a man in the middle that the rest of
/// `data` scripts: it forwards, drops, repeats, reorders, tampers with and
/// forges messages (see [`op`]). Every message crosses the wire encoding.
///
/// Each answer of either side is exactly what the protocol allows, checked
/// against the proofs recomputed from the module's definition: each side
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
fn run_handshake(data: &[u8]) -> Option<Handshake> {
    let (&first, script) = data.split_first()?;
    let mut mitm = Handshake::new(first & 1 == 0);
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
struct Handshake {
    server_key: Key,
    client: ClientHandshake,
    server: ServerHandshake,
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
    client_keys: Option<SessionKeys>,
    server_keys: Option<SessionKeys>,
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
    fn new(same_key: bool) -> Self {
        let (client, hello) = ClientHandshake::new(KEY, CLIENT_NONCE);
        let server_key = if same_key { KEY } else { OTHER_KEY };
        Handshake {
            server_key,
            client,
            server: ServerHandshake::new(server_key, SERVER_NONCE),
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
        let m = wire_round_trip(&m);
        match m {
            Message::Hello(h) => {
                let got = self.server.on_hello(&h);
                if self.server_took.is_some() || self.server_checked {
                    assert_eq!(got, Err(AuthError::OutOfOrder));
                } else if h.version != VERSION {
                    assert_eq!(got, Err(AuthError::Version { theirs: h.version }));
                } else {
                    let c = got.expect("a fresh server takes a hello");
                    assert_eq!(c.server_nonce, SERVER_NONCE);
                    assert_eq!(
                        c.server_proof,
                        proof(
                            &self.server_key,
                            b"urmove-server",
                            &h.client_nonce,
                            &SERVER_NONCE
                        )
                    );
                    self.server_took = Some(h.client_nonce);
                    self.challenge = Some(c);
                }
            }
            Message::Challenge(c) => {
                let got = self.client.on_challenge(&c);
                if self.client_checked {
                    assert_eq!(got, Err(AuthError::OutOfOrder));
                    return;
                }
                self.client_checked = true;
                let right =
                    c.server_proof == proof(&KEY, b"urmove-server", &CLIENT_NONCE, &c.server_nonce);
                if self.challenge.as_ref() == Some(&c) {
                    // The server's own answer: right only from a server
                    // with the client's key that answered the client's hello.
                    assert_eq!(
                        right,
                        self.server_key == KEY && self.server_took == Some(CLIENT_NONCE)
                    );
                }
                if right {
                    let a = got.expect("the client takes the right challenge");
                    assert_eq!(
                        a.client_proof,
                        proof(&KEY, b"urmove-client", &c.server_nonce, &CLIENT_NONCE)
                    );
                    self.client_took = Some(c.server_nonce);
                    self.auth = Some(a);
                } else {
                    assert_eq!(got, Err(AuthError::BadProof), "wrong challenge {c:?}");
                }
            }
            Message::Auth(a) => {
                let got = self.server.on_auth(&a, SESSION_ID);
                let Some(cn) = self.server_took.filter(|_| !self.server_checked) else {
                    assert_eq!(got.map(|_| ()), Err(AuthError::OutOfOrder));
                    return;
                };
                self.server_checked = true;
                let right =
                    a.client_proof == proof(&self.server_key, b"urmove-client", &SERVER_NONCE, &cn);
                if self.auth.as_ref() == Some(&a) {
                    // The client's own proof: right only with the same key
                    // and both nonces agreed.
                    assert_eq!(
                        right,
                        self.server_key == KEY
                            && cn == CLIENT_NONCE
                            && self.client_took == Some(SERVER_NONCE)
                    );
                }
                if right {
                    let (w, keys) = got.expect("the server takes the right proof");
                    assert_eq!((w.session_id, keys.session_id), (SESSION_ID, SESSION_ID));
                    self.welcome = Some(w);
                    self.server_keys = Some(keys);
                } else {
                    assert_eq!(got.map(|_| ()), Err(AuthError::BadProof), "wrong {a:?}");
                }
            }
            Message::Welcome(w) => {
                let got = self.client.on_welcome(&w);
                if self.client_took.is_none() || self.client_keys.is_some() {
                    assert_eq!(got, Err(AuthError::OutOfOrder));
                    return;
                }
                let keys = got.expect("a client that took a challenge takes a welcome");
                assert_eq!(keys.session_id, w.session_id);
                self.client_keys = Some(keys);
                self.open_stream(0);
            }
            Message::StreamHello {
                stream_index,
                proof,
                ..
            } => {
                if let Some(server) = &self.server_keys {
                    assert_eq!(
                        check_stream_proof(server, stream_index, &proof),
                        proof == stream_proof(server, stream_index)
                    );
                }
            }
            _ => {}
        }
    }

    /// Whether both sides derived their session keys from the same key,
    /// nonces and session id.
    fn agreed(&self) -> bool {
        self.server_key == KEY
            && self.server_took == Some(CLIENT_NONCE)
            && self.client_took == Some(SERVER_NONCE)
            && self
                .client_keys
                .as_ref()
                .is_some_and(|k| k.session_id == SESSION_ID)
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

// -------------------------------------------------------------- manifest --

/// `data` read twice: as a stream of manifest entries, and as the body of a
/// Manifest control message (u32 count, then entries).
///
/// Every decoded entry has fields within their limits and re-encodes to its
/// own bytes (a directory's size and a non-symlink's link text are not
/// carried: they come back zero and empty). [`check_path`] and
/// [`link_stays_beneath`] agree with an independent reading through
/// `std::path`: an accepted path is relative, normal (no `.`, `..` or empty
/// components), within the length limits and free of NUL bytes, and an
/// accepted symlink target, resolved from the link's directory, never climbs
/// above the root nor climbs through a name (which might be a link).
pub fn manifest(data: &[u8]) {
    any_control_message(data);
    let mut r = Reader::new(data);
    while r.remaining() > 0 {
        let at = data.len() - r.remaining();
        let Ok(e) = decode_entry(&mut r) else { break };
        let raw = &data[at..data.len() - r.remaining()];
        manifest_entry(&e);
        // Decoding is canonical: a directory or link with a size, or a
        // target on what is no link, is refused, so nothing is dropped.
        assert_eq!(entry_bytes(&e), raw, "re-encoded {e:?}");
    }

    let kind = control::encode(&Message::Manifest(Vec::new()))[4];
    let mut body = Vec::with_capacity(1 + data.len());
    body.push(kind);
    body.extend_from_slice(data);
    match control::decode_body(&body) {
        Ok(Message::Manifest(entries)) => {
            assert!(entries.len() <= control::MANIFEST_PART_ENTRIES_MAX as usize);
            for e in &entries {
                manifest_entry(e);
            }
            let again = control::encode(&Message::Manifest(entries.clone()));
            assert!(again.len() <= 4 + body.len(), "re-encoding grew the part");
            let normal: Vec<Entry> = entries.iter().map(normalised).collect();
            assert_eq!(
                control::decode(&again),
                Ok(Some((Message::Manifest(normal), again.len())))
            );
        }
        Ok(other) => panic!("a Manifest body decoded as {other:?}"),
        Err(_) => {}
    }
}

/// The checks on one decoded entry.
fn manifest_entry(e: &Entry) {
    assert!(e.mode <= 0o7777 && e.mtime_ns < 1_000_000_000, "{e:?}");
    assert!(names::byte_len(&e.path) <= PATH_LEN_MAX);
    assert_eq!(
        e.link.is_some(),
        matches!(e.kind, EntryKind::Symlink | EntryKind::HardLink)
    );
    assert!(e
        .link
        .as_ref()
        .is_none_or(|l| names::byte_len(l) <= PATH_LEN_MAX));

    let path_ok = check_path(&e.path).is_ok();
    assert_eq!(path_ok, path_is_safe(&e.path), "check_path({:?})", e.path);
    let mut link_ok = false;
    if let Some(link) = e.link.as_deref().filter(|_| path_ok) {
        link_ok = link_is_safe(&e.path, link);
        assert_eq!(
            link_stays_beneath(&e.path, link),
            link_ok,
            "link {:?} -> {link:?}",
            e.path
        );
    }
    let _ = link_ok;
    // A receiver takes any link target it can store: whether the target
    // leaves the root is its policy's call, and it never follows links.
    let target_ok = e
        .link
        .as_deref()
        .is_some_and(|t| !t.is_empty() && !t.contains('\0'));
    let linked_ok = match e.kind {
        EntryKind::Symlink => target_ok,
        EntryKind::HardLink => e.link.as_deref().is_some_and(|l| check_path(l).is_ok()),
        _ => true,
    };
    assert_eq!(
        check_entry(e).is_ok(),
        path_ok && linked_ok,
        "check_entry({e:?})"
    );
}

/// A relative, normal path within the limits, read through `std::path`.
fn path_is_safe(path: &str) -> bool {
    let components: Vec<Component<'_>> = Path::new(path).components().collect();
    !path.is_empty()
        && names::byte_len(path) <= PATH_LEN_MAX
        && !path.contains('\0')
        // std drops empty and inner `.` components: a normal path keeps
        // every `/`-separated piece as one name.
        && components.len() == path.split('/').count()
        && components.iter().all(|c| match c {
            Component::Normal(name) => {
                let name = name.to_string_lossy();
                names::byte_len(&name) <= COMPONENT_LEN_MAX
                    && !crate::protocol::manifest::RESERVED_SUFFIXES
                        .iter()
                        .any(|s| name.ends_with(s))
            }
            _ => false,
        })
}

/// `target`, resolved from the directory of the link at `link_path` (a
/// safe path), stays beneath the root, and climbs (`..`) only before its
/// first name.
fn link_is_safe(link_path: &str, target: &str) -> bool {
    if target.is_empty() || target.len() > PATH_LEN_MAX || target.contains('\0') {
        return false;
    }
    let mut depth = Path::new(link_path).components().count() - 1;
    let mut named = false;
    for c in Path::new(target).components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir if named || depth == 0 => return false,
            Component::ParentDir => depth -= 1,
            Component::Normal(_) => {
                named = true;
                depth += 1;
            }
            Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    true
}

/// What a receiver keeps of a decoded entry: only files have a size.
fn normalised(e: &Entry) -> Entry {
    Entry {
        size: if e.kind == EntryKind::File { e.size } else { 0 },
        ..e.clone()
    }
}

fn entry_bytes(e: &Entry) -> Vec<u8> {
    let mut w = Writer::default();
    encode_entry(&mut w, e);
    w.buf
}

/// Any control message body (the manifest's neighbours on the wire: what
/// the receiver holds, content digests, heartbeats, requests): whatever
/// decodes re-encodes to a message that decodes equal. Error texts are cut
/// on encoding, so they are left out.
fn any_control_message(data: &[u8]) {
    if let Ok(m) = control::decode_body(data) {
        if !matches!(m, Message::Error { .. }) {
            let b = control::encode(&m);
            assert_eq!(control::decode(&b), Ok(Some((m, b.len()))));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    type Body = fn(&[u8]);
    const TARGETS: [(&str, Body); 3] = [
        ("frame", frame),
        ("handshake", handshake),
        ("manifest", manifest),
    ];

    fn fuzz_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
    }

    /// The files of `dir` (none if it does not exist), by name.
    fn inputs(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        let mut out: Vec<(PathBuf, Vec<u8>)> = entries
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file() && !p.ends_with(".gitkeep"))
            .map(|p| {
                let bytes = std::fs::read(&p).unwrap();
                (p, bytes)
            })
            .collect();
        out.sort();
        out
    }

    /// Every committed seed and every past finding passes its body again.
    #[test]
    fn corpus_and_regressions_replay() {
        let mut count = 0;
        for (target, body) in TARGETS {
            for set in ["corpus", "regressions"] {
                for (path, bytes) in inputs(&fuzz_dir().join(set).join(target)) {
                    let run = std::panic::catch_unwind(|| body(&bytes));
                    assert!(run.is_ok(), "{} fails its fuzz body", path.display());
                    count += 1;
                }
            }
        }
        assert!(count >= seeds().len(), "only {count} inputs under fuzz/");
    }

    /// A sparse frame as a sender makes it: a block of 5 pieces (the last
    /// short) of which the second and the last came.
    fn sparse_seed() -> Vec<u8> {
        use crate::protocol::sparse::{pack, Map};
        let span = 4 * 4096 + 100;
        let mut block = vec![0u8; span];
        block[4096..8192].fill(3);
        block[4 * 4096..].fill(9);
        let plain = FrameHeader::for_payload(&FUZZ_KEY, 0, 0, &block, 0);
        let mut map = Map::new(span);
        map.set(1);
        map.set(4);
        let len = pack(&mut block, &map);
        frame_seed(plain.packed(len), &[span as u64], &block[..len])
    }

    fn frame_seed(h: FrameHeader, sizes: &[u64], payload: &[u8]) -> Vec<u8> {
        let mut out = h.encode().to_vec();
        out.push(sizes.len() as u8);
        for s in sizes {
            out.extend_from_slice(&s.to_le_bytes());
        }
        out.extend_from_slice(payload);
        out
    }

    fn entry(path: &str, kind: EntryKind, size: u64, link: Option<&str>) -> Entry {
        Entry {
            path: path.into(),
            kind,
            size,
            data: 0,
            mode: if kind == EntryKind::Dir { 0o755 } else { 0o644 },
            mtime_s: 1_700_000_000,
            mtime_ns: 250_000_000,
            link: link.map(String::from),
            ..Default::default()
        }
    }

    fn entries_seed(entries: &[Entry]) -> Vec<u8> {
        let mut w = Writer::default();
        for e in entries {
            encode_entry(&mut w, e);
        }
        w.buf
    }

    fn message_seed(ops: &[u8], then: &[Message]) -> Vec<u8> {
        let mut out = ops.to_vec();
        for m in then {
            out.push(op::INJECT);
            out.extend_from_slice(&control::encode(m));
        }
        out
    }

    /// The seed corpus, made by the real encoders: `(target, name, bytes)`.
    fn seeds() -> Vec<(&'static str, &'static str, Vec<u8>)> {
        let text = b"hello urmove";
        let block: Vec<u8> = (0..64u8).collect();
        let unchecked = FrameHeader {
            flags: FLAG_UNCHECKED,
            file_index: 0,
            length: 16,
            span: 0,
            offset: 0,
            checksum: 0,
        };
        let tree = [
            entry("run42", EntryKind::Dir, 0, None),
            entry("run42/a.dat", EntryKind::File, 12345, None),
            entry("run42/l", EntryKind::Symlink, 0, Some("a.dat")),
            entry("run42/up", EntryKind::Symlink, 0, Some("../run42/a.dat")),
            entry("run42/pipe", EntryKind::Fifo, 0, None),
            Entry {
                rdev: 0x103,
                ..entry("run42/null", EntryKind::CharDevice, 0, None)
            },
        ];
        let refused = [
            entry("/etc/passwd", EntryKind::File, 1, None),
            entry("a/../b", EntryKind::File, 1, None),
            entry("l", EntryKind::Symlink, 0, Some("../x")),
            entry("a/l", EntryKind::Symlink, 0, Some("x/../../y")),
        ];
        let part = control::encode(&Message::Manifest(tree.to_vec()))[5..].to_vec();
        let (h, c, a, w) = (op::HELLO, op::CHALLENGE, op::AUTH, op::WELCOME);
        vec![
            (
                "frame",
                "file",
                frame_seed(
                    FrameHeader::for_payload(&FUZZ_KEY, 0, 0, text, 0),
                    &[12],
                    text,
                ),
            ),
            (
                "frame",
                "end",
                frame_seed(
                    FrameHeader::for_payload(&FUZZ_KEY, 1, 4096, &block, FLAG_END),
                    &[8192, 4160],
                    &block,
                ),
            ),
            (
                "frame",
                "hole",
                frame_seed(FrameHeader::hole(&FUZZ_KEY, 2, 8192), &[0, 0, 16384], &[]),
            ),
            ("frame", "unchecked", frame_seed(unchecked, &[16], &[7; 16])),
            ("frame", "sparse", sparse_seed()),
            (
                "frame",
                "past-end",
                frame_seed(
                    FrameHeader::for_payload(&FUZZ_KEY, 0, u64::MAX - 3, b"abcdefgh", 0),
                    &[u64::MAX],
                    b"abcdefgh",
                ),
            ),
            ("handshake", "honest", vec![0, h, c, a, w, op::STREAM, 3, 0]),
            ("handshake", "wrong-key", vec![1, h, c, a, w]),
            ("handshake", "replay", vec![0, h, h, c, c, a, a, w, w]),
            ("handshake", "tamper", vec![0, h, op::TAMPER, 1, 40, c, a]),
            ("handshake", "reflect", vec![0, h, op::REFLECT, w]),
            (
                "handshake",
                "injected",
                message_seed(
                    &[0],
                    &[
                        Message::Hello(Hello {
                            version: VERSION + 1,
                            client_nonce: CLIENT_NONCE,
                        }),
                        Message::Hello(Hello {
                            version: VERSION,
                            client_nonce: [9; 32],
                        }),
                        Message::Auth(Auth {
                            client_proof: [0; 32],
                        }),
                        Message::StreamHello {
                            session_id: SESSION_ID,
                            stream_index: 0,
                            proof: [0; 32],
                        },
                    ],
                ),
            ),
            ("handshake", "key-file", format_key(&KEY).into_bytes()),
            (
                "manifest",
                "file",
                entries_seed(&[entry("a.dat", EntryKind::File, 4096, None)]),
            ),
            ("manifest", "tree", entries_seed(&tree)),
            ("manifest", "refused", entries_seed(&refused)),
            ("manifest", "part", part),
        ]
    }

    /// The committed seeds are the encoders' current output, and each
    /// reaches past the first check of its target.
    #[test]
    fn seeds_are_committed_and_current() {
        for (target, name, bytes) in seeds() {
            let path = fuzz_dir().join("corpus").join(target).join(name);
            assert_eq!(
                std::fs::read(&path).ok().as_ref(),
                Some(&bytes),
                "{} is stale: run `cargo test --lib write_fuzz_seeds -- --ignored`",
                path.display()
            );
            match target {
                "frame" => assert!(FrameHeader::decode(&bytes).is_ok(), "{name}"),
                "manifest" => {
                    let kind = control::encode(&Message::Manifest(Vec::new()))[4];
                    let part = control::decode_body(&[&[kind][..], &bytes].concat());
                    assert!(
                        decode_entry(&mut Reader::new(&bytes)).is_ok() || part.is_ok(),
                        "{name}"
                    );
                }
                _ => assert!(run_handshake(&bytes).is_some(), "{name}"),
            }
        }
        let seed = |name: &str| seeds().into_iter().find(|s| s.1 == name).unwrap().2;
        let honest = run_handshake(&seed("honest")).unwrap();
        assert!(honest.client_keys.is_some() && honest.client_keys == honest.server_keys);
        let wrong = run_handshake(&seed("wrong-key")).unwrap();
        assert!(wrong.client_keys.is_none() && wrong.server_keys.is_none());
    }

    /// Write the seed corpus into `fuzz/corpus/`.
    #[test]
    #[ignore = "writes fuzz/corpus; run by hand after changing an encoder"]
    fn write_fuzz_seeds() {
        for (target, name, bytes) in seeds() {
            let dir = fuzz_dir().join("corpus").join(target);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(name), bytes).unwrap();
        }
    }
}
