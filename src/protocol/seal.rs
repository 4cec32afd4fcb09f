//! Data-frame encryption: AES-256-GCM over each frame's payload, with the
//! frame's 32-byte header as associated data.
//!
//! ```text
//! prk        = HKDF-Extract(salt = session_id, session_key)
//! stream_key = HKDF-Expand(prk, "urmove-frame-key" | version | direction | stream_index, 32)
//! nonce      = 0u32 | frame_index (u64, big-endian)         frame_index = 0, 1, 2, ...
//! ```
//! Every stream of every direction of every session has a key of its own,
//! and within a stream each frame takes the next index, so no (key, nonce)
//! pair is ever used twice. Frames on a stream arrive in order (one TCP
//! stream), so both sides count frames and no nonce travels on the wire; a
//! replayed, reordered or dropped frame is opened under the wrong nonce and
//! fails authentication like a tampered one. A counter that would wrap is
//! refused, never reused.
//!
//! The header is authenticated, not encrypted: the receiver needs it in the
//! clear to place the payload, and it must already carry the "encrypted" flag
//! when it is sealed, so a peer cannot strip the flag without the frame
//! failing to open. The 16-byte tag travels with the frame (after the
//! payload); the header's `length` counts the payload only.
//!
//! The sealer and opener here are pure: they hold a key and a counter and
//! transform bytes in place. The cryptography is `ring`'s.

use super::frame::{FRAME_HEADER_LEN, FRAME_PAYLOAD_MAX};
use super::handshake::SessionKeys;

/// Version of this key schedule, named in every derivation (its own
/// number: the protocol's version may move without changing the keys).
const KDF_VERSION: u16 = 1;
use ring::aead::{self, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::hkdf;

/// Bytes of the authentication tag sent with each sealed frame.
pub const TAG_LEN: usize = 16;
const _: () = assert!(TAG_LEN == aead::MAX_TAG_LEN);

/// Names the purpose of the derived keys, so they can never collide with
/// keys derived from the same session key for anything else.
const KEY_LABEL: &[u8] = b"urmove-frame-key";

/// Which way a stream's frames flow. Each direction has its own keys, so a
/// frame sealed by one side can never be opened as if the other sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    ClientToServer,
    ServerToClient,
}

impl Direction {
    fn code(self) -> u8 {
        match self {
            Direction::ClientToServer => 1,
            Direction::ServerToClient => 2,
        }
    }
}

impl std::fmt::Display for Direction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Direction::ClientToServer => "client-to-server",
            Direction::ServerToClient => "server-to-client",
        })
    }
}

/// Why a frame could not be sealed or opened. Each ends the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SealError {
    /// The stream has used every frame index; another frame would reuse a
    /// nonce.
    Exhausted { direction: Direction, stream: u16 },
    /// The frame does not open: its header, payload or tag was altered, or
    /// it was replayed, reordered or preceded by a dropped frame, or it was
    /// sealed for another stream, direction or session.
    Unauthentic {
        direction: Direction,
        stream: u16,
        frame_index: u64,
    },
    /// An earlier frame on this stream failed to open; the stream is dead.
    Broken { direction: Direction, stream: u16 },
}

impl std::fmt::Display for SealError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SealError::Exhausted { direction, stream } => write!(
                f,
                "{direction} stream {stream} has used all its frame counters; \
                 start a new session"
            ),
            SealError::Unauthentic {
                direction,
                stream,
                frame_index,
            } => write!(
                f,
                "frame {frame_index} on {direction} stream {stream} failed authentication \
                 (altered, replayed, reordered, dropped, or sealed with another key)"
            ),
            SealError::Broken { direction, stream } => write!(
                f,
                "{direction} stream {stream} already failed authentication"
            ),
        }
    }
}

impl std::error::Error for SealError {}

/// Names the frame checksums' key, apart from every other key.
const CHECKSUM_LABEL: &[u8] = b"urmove-frame-checksum";

/// The key of a session's frame checksums (both directions, every stream:
/// a checksum binds its file and offset, and is never valid in another
/// session).
pub fn frame_key(keys: &SessionKeys) -> super::frame::FrameKey {
    struct Len16;
    impl hkdf::KeyType for Len16 {
        fn len(&self) -> usize {
            16
        }
    }
    let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, &keys.session_id).extract(&keys.session_key);
    let version = KDF_VERSION.to_be_bytes();
    let info: [&[u8]; 2] = [CHECKSUM_LABEL, &version];
    let mut okm = [0u8; 16];
    prk.expand(&info, Len16)
        .and_then(|o| o.fill(&mut okm))
        .expect("16 bytes are within HKDF-SHA256's output limit");
    super::frame::FrameKey {
        k0: u64::from_le_bytes(okm[..8].try_into().expect("8 bytes")),
        k1: u64::from_le_bytes(okm[8..].try_into().expect("8 bytes")),
    }
}

/// The AES-256-GCM key of one stream in one direction of one session.
fn stream_key(keys: &SessionKeys, direction: Direction, stream: u16) -> LessSafeKey {
    let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, &keys.session_id).extract(&keys.session_key);
    let version = KDF_VERSION.to_be_bytes();
    let direction = [direction.code()];
    let stream = stream.to_be_bytes();
    // Fixed-length fields after a fixed label: the encoding is unambiguous.
    let info: [&[u8]; 4] = [KEY_LABEL, &version, &direction, &stream];
    let okm = prk
        .expand(&info, &AES_256_GCM)
        .expect("a 32-byte key is within HKDF-SHA256's output limit");
    LessSafeKey::new(UnboundKey::from(okm))
}

fn nonce(frame_index: u64) -> Nonce {
    let mut bytes = [0u8; NONCE_LEN];
    bytes[NONCE_LEN - 8..].copy_from_slice(&frame_index.to_be_bytes());
    Nonce::assume_unique_for_key(bytes)
}

/// The frame index both sides keep for one stream.
#[derive(Debug)]
struct FrameCounter {
    next: u64,
}

impl FrameCounter {
    /// The index for the next frame, or `None` once the counter would wrap.
    /// `u64::MAX` is never handed out, so a stream carries at most
    /// 2^64 - 1 frames.
    fn take(&mut self) -> Option<u64> {
        let index = self.next;
        self.next = index.checked_add(1)?;
        Some(index)
    }
}

/// Seals the frames one side sends on one stream.
pub struct FrameSealer {
    key: LessSafeKey,
    direction: Direction,
    stream: u16,
    counter: FrameCounter,
}

impl FrameSealer {
    pub fn new(keys: &SessionKeys, direction: Direction, stream: u16) -> Self {
        Self::starting_at(keys, direction, stream, 0)
    }

    fn starting_at(keys: &SessionKeys, direction: Direction, stream: u16, next: u64) -> Self {
        FrameSealer {
            key: stream_key(keys, direction, stream),
            direction,
            stream,
            counter: FrameCounter { next },
        }
    }

    /// Encrypt `payload` in place under the stream's next frame index,
    /// authenticating `header` with it, and return the tag to send after
    /// the payload. `header` must be the exact bytes that go on the wire,
    /// encrypted flag included.
    pub fn seal(
        &mut self,
        header: &[u8; FRAME_HEADER_LEN],
        payload: &mut [u8],
    ) -> Result<[u8; TAG_LEN], SealError> {
        assert!(payload.len() <= FRAME_PAYLOAD_MAX as usize);
        let frame_index = self.counter.take().ok_or(SealError::Exhausted {
            direction: self.direction,
            stream: self.stream,
        })?;
        let tag = self
            .key
            .seal_in_place_separate_tag(nonce(frame_index), aead::Aad::from(header), payload)
            .expect("a frame payload is within AES-GCM's message limit");
        Ok(tag
            .as_ref()
            .try_into()
            .expect("AES-GCM tags are TAG_LEN bytes"))
    }
}

impl std::fmt::Debug for FrameSealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key.
        f.debug_struct("FrameSealer")
            .field("direction", &self.direction)
            .field("stream", &self.stream)
            .field("next_frame", &self.counter.next)
            .finish_non_exhaustive()
    }
}

/// Opens the frames one side receives on one stream, in the order they
/// were sealed.
pub struct FrameOpener {
    key: LessSafeKey,
    direction: Direction,
    stream: u16,
    counter: FrameCounter,
    broken: bool,
}

impl FrameOpener {
    pub fn new(keys: &SessionKeys, direction: Direction, stream: u16) -> Self {
        Self::starting_at(keys, direction, stream, 0)
    }

    fn starting_at(keys: &SessionKeys, direction: Direction, stream: u16, next: u64) -> Self {
        FrameOpener {
            key: stream_key(keys, direction, stream),
            direction,
            stream,
            counter: FrameCounter { next },
            broken: false,
        }
    }

    /// Check and decrypt `payload` in place as the stream's next frame.
    /// On error the payload is left zeroed or unspecified, never as
    /// unauthenticated plaintext, and every later call fails too: a stream
    /// that failed once is not trusted again.
    pub fn open(
        &mut self,
        header: &[u8; FRAME_HEADER_LEN],
        payload: &mut [u8],
        tag: &[u8; TAG_LEN],
    ) -> Result<(), SealError> {
        assert!(payload.len() <= FRAME_PAYLOAD_MAX as usize);
        if self.broken {
            return Err(SealError::Broken {
                direction: self.direction,
                stream: self.stream,
            });
        }
        let Some(frame_index) = self.counter.take() else {
            self.broken = true;
            return Err(SealError::Exhausted {
                direction: self.direction,
                stream: self.stream,
            });
        };
        let opened = self.key.open_in_place_separate_tag(
            nonce(frame_index),
            aead::Aad::from(header),
            aead::Tag::from(*tag),
            payload,
            0..,
        );
        if opened.is_err() {
            self.broken = true;
            return Err(SealError::Unauthentic {
                direction: self.direction,
                stream: self.stream,
                frame_index,
            });
        }
        Ok(())
    }
}

impl std::fmt::Debug for FrameOpener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key.
        f.debug_struct("FrameOpener")
            .field("direction", &self.direction)
            .field("stream", &self.stream)
            .field("next_frame", &self.counter.next)
            .field("broken", &self.broken)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIR: Direction = Direction::ClientToServer;

    fn keys() -> SessionKeys {
        SessionKeys {
            session_id: [7; 16],
            session_key: [42; 32],
        }
    }

    fn header(n: u8) -> [u8; FRAME_HEADER_LEN] {
        let mut h = [0u8; FRAME_HEADER_LEN];
        for (i, b) in h.iter_mut().enumerate() {
            *b = n.wrapping_add(i as u8);
        }
        h
    }

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 31 + i / 251) as u8).collect()
    }

    fn pair(stream: u16) -> (FrameSealer, FrameOpener) {
        (
            FrameSealer::new(&keys(), DIR, stream),
            FrameOpener::new(&keys(), DIR, stream),
        )
    }

    #[test]
    fn round_trips_empty_small_and_large_payloads() {
        let (mut sealer, mut opener) = pair(0);
        for (n, len) in [0usize, 1, 17, 4096, 4 << 20].into_iter().enumerate() {
            let h = header(n as u8);
            let plain = pattern(len);
            let mut buf = plain.clone();
            let tag = sealer.seal(&h, &mut buf).unwrap();
            if len >= 16 {
                assert_ne!(buf, plain, "payload of {len} bytes left in the clear");
            }
            opener.open(&h, &mut buf, &tag).unwrap();
            assert_eq!(buf, plain, "payload of {len} bytes");
        }
    }

    #[test]
    fn same_plaintext_seals_differently_each_frame() {
        let (mut sealer, _) = pair(0);
        let h = header(1);
        let mut a = pattern(64);
        let mut b = pattern(64);
        let tag_a = sealer.seal(&h, &mut a).unwrap();
        let tag_b = sealer.seal(&h, &mut b).unwrap();
        assert_ne!(a, b);
        assert_ne!(tag_a, tag_b);
        // An empty payload still gets a distinct tag per frame.
        let tag_c = sealer.seal(&h, &mut []).unwrap();
        let tag_d = sealer.seal(&h, &mut []).unwrap();
        assert_ne!(tag_c, tag_d);
    }

    /// Seal one frame and return (header, ciphertext, tag).
    fn sealed(len: usize) -> ([u8; FRAME_HEADER_LEN], Vec<u8>, [u8; TAG_LEN]) {
        let (mut sealer, _) = pair(0);
        let h = header(9);
        let mut buf = pattern(len);
        let tag = sealer.seal(&h, &mut buf).unwrap();
        (h, buf, tag)
    }

    fn opens(h: &[u8; FRAME_HEADER_LEN], buf: &[u8], tag: &[u8; TAG_LEN]) -> bool {
        let (_, mut opener) = pair(0);
        let mut buf = buf.to_vec();
        opener.open(h, &mut buf, tag).is_ok()
    }

    #[test]
    fn any_flipped_bit_fails() {
        let (h, buf, tag) = sealed(100);
        assert!(opens(&h, &buf, &tag));
        for bit in 0..FRAME_HEADER_LEN * 8 {
            let mut bad = h;
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(!opens(&bad, &buf, &tag), "header bit {bit}");
        }
        for bit in [0, 7, 401, 799] {
            let mut bad = buf.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(!opens(&h, &bad, &tag), "payload bit {bit}");
        }
        for bit in 0..TAG_LEN * 8 {
            let mut bad = tag;
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(!opens(&h, &buf, &bad), "tag bit {bit}");
        }
        // Truncated or extended payloads fail too.
        assert!(!opens(&h, &buf[..99], &tag));
        let mut longer = buf.clone();
        longer.push(0);
        assert!(!opens(&h, &longer, &tag));
    }

    #[test]
    fn failed_open_zeroes_payload_and_breaks_the_stream() {
        let (mut sealer, mut opener) = pair(0);
        let h = header(0);
        let mut first = pattern(32);
        let mut bad_tag = sealer.seal(&h, &mut first).unwrap();
        bad_tag[0] ^= 1;
        let err = opener.open(&h, &mut first, &bad_tag).unwrap_err();
        assert_eq!(
            err,
            SealError::Unauthentic {
                direction: DIR,
                stream: 0,
                frame_index: 0
            }
        );
        assert!(first.iter().all(|&b| b == 0));
        // A genuine next frame is refused: the stream is no longer trusted.
        let mut second = pattern(32);
        let tag = sealer.seal(&h, &mut second).unwrap();
        assert_eq!(
            opener.open(&h, &mut second, &tag),
            Err(SealError::Broken {
                direction: DIR,
                stream: 0
            })
        );
    }

    #[test]
    fn replayed_reordered_or_dropped_frames_fail() {
        let h = header(3);
        let (mut sealer, _) = pair(0);
        let frames: Vec<_> = (0..3)
            .map(|_| {
                let mut buf = pattern(48);
                let tag = sealer.seal(&h, &mut buf).unwrap();
                (buf, tag)
            })
            .collect();
        let open = |order: &[usize]| {
            let (_, mut opener) = pair(0);
            order.iter().all(|&i| {
                let (buf, tag) = &frames[i];
                opener.open(&h, &mut buf.clone(), tag).is_ok()
            })
        };
        assert!(open(&[0, 1, 2]));
        assert!(!open(&[0, 0]), "replay");
        assert!(!open(&[0, 2, 1]), "reorder");
        assert!(!open(&[1]), "first frame dropped");
        assert!(!open(&[0, 2]), "middle frame dropped");
    }

    #[test]
    fn other_stream_direction_or_session_fails() {
        let (h, buf, tag) = sealed(64);
        let try_open = |keys: &SessionKeys, direction, stream| {
            let mut b = buf.clone();
            FrameOpener::new(keys, direction, stream)
                .open(&h, &mut b, &tag)
                .is_ok()
        };
        assert!(try_open(&keys(), DIR, 0));
        assert!(!try_open(&keys(), DIR, 1), "another stream");
        assert!(!try_open(&keys(), DIR, 256), "another stream");
        assert!(!try_open(&keys(), Direction::ServerToClient, 0));
        let mut other = keys();
        other.session_id[0] ^= 1;
        assert!(!try_open(&other, DIR, 0), "another session id");
        let mut other = keys();
        other.session_key[31] ^= 1;
        assert!(!try_open(&other, DIR, 0), "another session key");
    }

    #[test]
    fn streams_and_directions_have_distinct_keystreams() {
        let h = header(0);
        let mut outputs = Vec::new();
        for direction in [Direction::ClientToServer, Direction::ServerToClient] {
            for stream in [0, 1, 2, u16::MAX] {
                let mut buf = vec![0u8; 64];
                let tag = FrameSealer::new(&keys(), direction, stream)
                    .seal(&h, &mut buf)
                    .unwrap();
                outputs.push((buf, tag));
            }
        }
        for (i, a) in outputs.iter().enumerate() {
            for b in &outputs[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    #[test]
    fn counter_overflow_is_refused() {
        let h = header(0);
        let mut sealer = FrameSealer::starting_at(&keys(), DIR, 5, u64::MAX - 1);
        let mut opener = FrameOpener::starting_at(&keys(), DIR, 5, u64::MAX - 1);
        let mut buf = pattern(16);
        let tag = sealer.seal(&h, &mut buf).unwrap();
        opener.open(&h, &mut buf, &tag).unwrap();
        assert_eq!(buf, pattern(16));
        let exhausted = SealError::Exhausted {
            direction: DIR,
            stream: 5,
        };
        assert_eq!(sealer.seal(&h, &mut buf), Err(exhausted));
        assert_eq!(sealer.seal(&h, &mut buf), Err(exhausted));
        assert_eq!(buf, pattern(16), "a refused seal leaves the payload alone");
        assert_eq!(opener.open(&h, &mut buf, &tag), Err(exhausted));
    }

    /// The key schedule and nonce layout are wire format: both peers must
    /// derive the same keys. This pins them against accidental change; the
    /// expected bytes were checked against an independent HKDF-SHA256 and
    /// AES-256-GCM implementation (OpenSSL) following the scheme in the
    /// module docs: the second frame (index 1) of server-to-client stream 3.
    #[test]
    fn wire_format_is_pinned() {
        let mut sealer = FrameSealer::new(&keys(), Direction::ServerToClient, 3);
        let h = header(0);
        let mut first: Vec<u8> = Vec::new();
        let _ = sealer.seal(&h, &mut first).unwrap();
        let mut buf = *b"urmove";
        let tag = sealer.seal(&h, &mut buf).unwrap();
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        assert_eq!(
            format!("{} {}", hex(&buf), hex(&tag)),
            "e7bfbde45ad9 c49668397a830d3000d6db4d4a480762"
        );
    }

    #[test]
    fn debug_output_hides_the_key() {
        let (sealer, opener) = pair(0);
        let text = format!("{sealer:?} {opener:?}");
        assert!(text.contains("next_frame: 0"), "{text}");
        assert!(!text.contains("42"), "{text}");
    }
}
