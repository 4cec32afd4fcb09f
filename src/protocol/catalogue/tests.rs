//! The codec's tests: golden bytes of protocol 12, every message round
//! trips, what is refused, and what a version does not know.

use super::{decode_at, decode_body_at, encode_at, kind, EncodeError, PROTOCOL_NEWEST};
use crate::protocol::control::*;
use crate::protocol::handshake::{Auth, Challenge, Hello, Welcome};
use crate::protocol::manifest::{Entry, EntryKind};
use crate::protocol::wire::{DecodeError, Writer};

/// One message of each kind protocol 12 has (but `Deleted`), as the
/// golden file of protocol 12 holds them; a message or field value of a
/// later protocol gets its sample in [`all_samples`], not here.
fn samples() -> Vec<Message> {
    vec![
        Message::Hello(Hello {
            version: 1,
            client_nonce: [1; 32],
        }),
        Message::Challenge(Challenge {
            server_nonce: [2; 32],
            server_proof: [3; 32],
        }),
        Message::Auth(Auth {
            client_proof: [4; 32],
        }),
        Message::Welcome(Welcome {
            session_id: [5; 16],
        }),
        Message::Request(SessionRequest {
            filter: vec![
                FilterRule {
                    include: true,
                    pattern: "keep.tmp".into(),
                },
                FilterRule {
                    include: false,
                    pattern: "*.tmp".into(),
                },
            ],
            owner: [3; 32],
            rate_limit: 0,
            direction: Direction::Push,
            streams: 4,
            block_size: 4 << 20,
            flags: REQ_RESUME | REQ_CHECKSUM,
            time_ms: 0,
            path: "ingest".into(),
        }),
        Message::Manifest(vec![Entry {
            path: "run42/a.dat".into(),
            kind: EntryKind::File,
            size: 123,
            data: 0,
            mode: 0o640,
            mtime_s: 1_700_000_000,
            mtime_ns: 5,
            link: None,
            ..Default::default()
        }]),
        Message::ManifestEnd,
        Message::Ready,
        Message::StreamHello {
            session_id: [6; 16],
            stream_index: 3,
            proof: [7; 32],
        },
        Message::FileAck {
            file_index: 9,
            digest: 0xdead_beef,
        },
        Message::PieceAck {
            file_index: 9,
            done: PieceDone {
                digest: 7,
                receipt: 5,
                whole: Some((0, 3)),
                untrusted: None,
            },
        },
        Message::PieceAck {
            file_index: 2,
            done: PieceDone {
                digest: 7,
                receipt: 1 << 63,
                whole: None,
                untrusted: None,
            },
        },
        Message::PieceAck {
            file_index: 4,
            done: PieceDone {
                digest: 3,
                receipt: 2,
                whole: None,
                untrusted: Some(u32::MAX),
            },
        },
        Message::Shard {
            index: 3,
            count: 4,
            split_over: 1 << 28,
        },
        Message::ShardManifest {
            files: 2001,
            bytes: 5 << 30,
            digest: [9; 32],
        },
        Message::Kept {
            files: 3,
            bytes: 7 << 20,
        },
        Message::Error {
            code: ErrorCode::PathRefused,
            message: "absolute path".into(),
        },
        Message::Summary {
            files: 3,
            bytes: 1 << 30,
            ok: true,
        },
        Message::Have(vec![
            HaveItem::Complete {
                file_index: 1,
                digest: 7,
            },
            HaveItem::Partial {
                file_index: 2,
                digest: 8,
                ranges: vec![(0, 3), (9, 1)],
            },
            HaveItem::Unchanged {
                file_index: 3,
                digest: 9,
            },
        ]),
        Message::HaveEnd,
        Message::SourceDigests(vec![(1, 2), (3, 4)]),
        Message::FileEnd {
            file_index: 2,
            size: 5 << 30,
            mtime_s: 1_700_000_000,
            mtime_ns: 5,
        },
        Message::Added {
            first: 3,
            entries: vec![Entry {
                path: "rec/scan2.vdif".into(),
                growing: true,
                ..Entry::default()
            }],
        },
        Message::Admitted { upto: 4 },
        Message::DirTimes(vec![(0, 1_700_000_000, 9)]),
        Message::AddedEnd,
        Message::UdpPlan {
            flows: 2,
            size: 1472,
            rate: 125_000_000,
            time_ms: 10_000,
            interval_ms: 1000,
            port: 7878,
        },
        Message::UdpReady { port: 7878 },
        Message::UdpCounts {
            done: true,
            foreign: 3,
            flows: vec![UdpCount {
                sent: 9,
                received: 8,
                bytes: 8 * 1472,
                expected: 9,
                out_of_order: 1,
                duplicates: 0,
                jitter_ns: 4000,
            }],
        },
        Message::UdpEnd { sent: vec![9, 10] },
        Message::FileRejected {
            file_index: 4,
            digest: 5,
        },
        Message::Skipped {
            file_index: 6,
            path: String::new(),
            reason: "vanished since the scan".into(),
            rule: false,
        },
        Message::Skipped {
            file_index: UNLISTED,
            path: "run/dev".into(),
            reason: "a device node, not sent without -D".into(),
            rule: true,
        },
        Message::HeldWrong(vec![1, 7]),
        Message::HeldChecked,
        Message::LeftOut {
            excluded: 3,
            devices: 1,
        },
        Message::StreamsRefused { asked: 64, max: 16 },
        Message::Alive {
            streams: vec![(1, true), (2, false)],
        },
        Message::Placement {
            streams: vec![0, 1, 0, 1],
            entries: vec![(0, 1), (5, 0)],
        },
        Message::Placement {
            streams: vec![],
            entries: vec![],
        },
    ]
}

/// `samples()` as release 0.1.0 (protocol 12) encodes them, one hex
/// line each, written by the encoder before the catalogue.
const GOLDEN_V12: &str = include_str!("golden/v12.hex");

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn golden_bytes_of_protocol_12_decode_to_the_samples_and_back() {
    let lines: Vec<&str> = GOLDEN_V12.lines().collect();
    assert_eq!(lines.len(), samples().len(), "one line per sample");
    for (line, m) in lines.into_iter().zip(samples()) {
        let bytes: Vec<u8> = (0..line.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&line[i..i + 2], 16).unwrap())
            .collect();
        assert_eq!(
            decode_at(&bytes, 12),
            Ok(Some((m.clone(), bytes.len()))),
            "{line}"
        );
        assert_eq!(hex(&encode_at(&m, 12).unwrap()), line, "{m:?}");
    }
}

#[test]
fn every_message_round_trips_and_streams_split_anywhere() {
    let mut all = Vec::new();
    for m in samples() {
        let b = encode(&m);
        assert_eq!(decode(&b), Ok(Some((m.clone(), b.len()))));
        all.extend_from_slice(&b);
    }
    // A byte stream cut at any point decodes to "need more", never an error.
    for cut in 0..all.len() {
        let mut at = 0;
        while let Some((_, used)) = decode(&all[at..cut]).unwrap() {
            at += used;
        }
    }
}

#[test]
fn a_placement_out_of_order_or_too_wide_is_refused() {
    let mut w = Writer::default();
    w.u8(kind::Placement).u16(1).u16(0).u32(2);
    w.u32(5).u16(0).u32(5).u16(1);
    assert!(matches!(
        decode_body(&w.buf),
        Err(DecodeError::Invalid { .. })
    ));
    let mut w = Writer::default();
    w.u8(kind::Placement).u16(STREAMS_MAX + 1);
    assert!(matches!(
        decode_body(&w.buf),
        Err(DecodeError::TooLarge { .. })
    ));
}

#[test]
fn a_piece_acknowledgement_says_one_thing_of_its_file() {
    let ack = |state: u8, a: u64, b: u64| {
        let mut w = Writer::default();
        w.u8(kind::PieceAck).u32(1).u64(2).u64(3);
        w.u8(state).u64(a).u64(b);
        decode_body(&w.buf)
    };
    let untrusted = |m: Message| match m {
        Message::PieceAck { done, .. } => (done.whole, done.untrusted),
        other => panic!("{other:?}"),
    };
    assert_eq!(untrusted(ack(0, 0, 0).unwrap()), (None, None));
    assert_eq!(untrusted(ack(1, 0, 0).unwrap()), (Some((0, 0)), None));
    assert_eq!(untrusted(ack(2, 7, 0).unwrap()), (None, Some(7)));
    // Left to the last with a digest, a piece past u32 or with a
    // receipts digest, a state past 2: refused.
    for (state, a, b) in [(0, 1, 0), (0, 0, 1), (2, 1 << 32, 0), (2, 1, 1), (3, 0, 0)] {
        assert!(
            matches!(ack(state, a, b), Err(DecodeError::Invalid { .. })),
            "{state} {a} {b}"
        );
    }
}

#[test]
fn malformed_messages_are_refused() {
    // Oversized length: refused before any allocation.
    assert!(matches!(
        body_len((CONTROL_LEN_MAX + 1).to_le_bytes()),
        Err(DecodeError::TooLarge { .. })
    ));
    assert!(body_len(0u32.to_le_bytes()).is_err());
    // Unknown kind.
    assert!(matches!(
        decode_body(&[200]),
        Err(DecodeError::Invalid { .. })
    ));
    // A stranger's protocol: wrong magic.
    let mut b = encode(&samples()[0]);
    b[5] = b'X';
    assert!(decode(&b).is_err());
    // Trailing garbage inside a message.
    let mut b = encode(&Message::ManifestEnd);
    b.push(0);
    b[..4].copy_from_slice(&2u32.to_le_bytes());
    assert!(matches!(decode(&b), Err(DecodeError::Trailing { .. })));
    // Zero or too many streams, zero block size.
    for (streams, bs) in [(0u16, 1u32), (STREAMS_MAX + 1, 1), (1, 0)] {
        let b = encode(&Message::Request(SessionRequest {
            filter: Vec::new(),
            owner: [0; 32],
            rate_limit: 0,
            direction: Direction::Pull,
            streams,
            block_size: bs,
            flags: 0,
            path: "x".into(),
            time_ms: 0,
        }));
        assert!(decode(&b).is_err());
    }
    // A verdict that is neither, too many rules, too long a pattern: at
    // protocol 12, where the rules end the request.
    let encode = |m: &Message| encode_at(m, 12).unwrap();
    let decode = |b: &[u8]| decode_at(b, 12);
    let Message::Request(good) = &samples()[4] else {
        panic!("sample 4 is the request")
    };
    let mut b = encode(&Message::Request(good.clone()));
    let verdict = b.len() - (1 + 2 + 5);
    assert_eq!(b[verdict], 0, "the second rule's verdict");
    b[verdict] = 2;
    assert!(
        matches!(decode(&b), Err(DecodeError::Invalid { .. })),
        "{:?}",
        decode(&b)
    );
    let mut many = good.clone();
    many.filter = vec![good.filter[0].clone(); FILTER_RULES_MAX];
    assert!(decode(&encode(&Message::Request(many.clone()))).is_ok());
    let mut b = encode(&Message::Request(many));
    let count = b.len() - FILTER_RULES_MAX * (1 + 2 + 8) - 2;
    b[count..count + 2].copy_from_slice(&(FILTER_RULES_MAX as u16 + 1).to_le_bytes());
    assert!(matches!(decode(&b), Err(DecodeError::TooLarge { .. })));
    let mut long = good.clone();
    long.filter[0].pattern = "x".repeat(FILTER_PATTERN_MAX + 1);
    assert!(decode(&encode(&Message::Request(long))).is_err());
    // Truncated bodies at every length.
    for m in samples() {
        let b = encode(&m);
        for cut in 1..b.len() - 4 {
            assert!(decode_body(&b[4..4 + cut]).is_err(), "{m:?} cut at {cut}");
        }
    }
}

/// The samples, and messages the golden file of protocol 12 has none of
/// (a later protocol's messages go here, one sample each).
fn all_samples() -> Vec<Message> {
    let mut out = samples();
    out.push(Message::Deleted(vec!["old/a.dat".into(), "old".into()]));
    // Protocol 13.
    out.push(Message::Request(SessionRequest {
        filter: Vec::new(),
        owner: [0; 32],
        rate_limit: 0,
        direction: Direction::BenchReverse,
        streams: 4,
        block_size: 1 << 20,
        flags: super::REQ_VERIFY,
        path: String::new(),
        time_ms: 10_000,
    }));
    out.push(Message::LimitRefused {
        limit: super::Limit::Sessions,
        asked: 1,
        max: 16,
        in_use: 16,
    });
    out.push(Message::DaemonInfo(DaemonInfo {
        release: "0.2.0".into(),
        protocol_oldest: 12,
        protocol_newest: 13,
        streams_max: 64,
        sessions_max: 16,
        sessions_running: 3,
        files_max: 1_000_000,
        block_max: 64 << 20,
        pull_only: false,
        encryption_required: true,
        root_free_bytes: 1 << 40,
    }));
    out.push(Message::VersionRefused {
        oldest: 14,
        newest: 15,
    });
    out
}

#[test]
fn every_declared_kind_has_a_sample_and_kinds_are_unique() {
    let kinds: Vec<u8> = super::MESSAGES.iter().map(|d| d.kind).collect();
    assert!(kinds.windows(2).all(|w| w[0] < w[1]), "{kinds:?}");
    let mut sampled: Vec<u8> = all_samples().iter().map(Message::kind).collect();
    sampled.sort_unstable();
    sampled.dedup();
    assert_eq!(sampled, kinds);
    for m in all_samples() {
        assert_eq!(encode(&m)[4], m.kind(), "{}", m.def().name);
    }
}

#[test]
fn every_message_round_trips_at_every_spoken_version() {
    for v in super::PROTOCOL_OLDEST..=PROTOCOL_NEWEST {
        for m in all_samples() {
            // A message, or a field value, of a later protocol.
            let b = match encode_at(&m, v) {
                Err(EncodeError::NotInVersion { since, .. }) if since > v => continue,
                b => b.unwrap(),
            };
            assert_eq!(decode_at(&b, v), Ok(Some((m.clone(), b.len()))));
            assert_eq!(decode_body_at(&b[4..], v), Ok(m));
        }
    }
    let m = Message::ManifestEnd;
    let unspoken = [super::PROTOCOL_OLDEST - 1, PROTOCOL_NEWEST + 1];
    for v in unspoken {
        assert_eq!(encode_at(&m, v), Err(EncodeError::Unspoken { version: v }));
        assert_eq!(
            decode_at(&encode(&m), v),
            Err(DecodeError::Unspoken { version: v })
        );
    }
}

/// Below the versions spoken, through the codec's inner steps: what a
/// message of protocol 12 looks like to protocol 11.
fn at(m: &Message, v: u16) -> Result<Vec<u8>, EncodeError> {
    let mut w = Writer::default();
    m.put_at(&mut w, v).map(|()| w.buf)
}

fn read_at(body: &[u8], v: u16) -> Result<Message, DecodeError> {
    let mut r = crate::protocol::wire::Reader::new(body);
    let k = r.u8()?;
    let m = Message::get_at(k, &mut r, v)?;
    r.finish()?;
    Ok(m)
}

#[test]
fn what_came_later_is_refused_at_an_older_version_by_name() {
    let newer = |what, since| DecodeError::NotInVersion {
        what,
        since,
        version: 11,
    };
    // A message of protocol 12.
    let refused = Message::StreamsRefused { asked: 2, max: 1 };
    let body = &encode(&refused)[4..];
    assert_eq!(read_at(body, 11), Err(newer("StreamsRefused", 12)));
    assert_eq!(
        at(&refused, 11),
        Err(EncodeError::NotInVersion {
            what: "StreamsRefused",
            since: 12,
            version: 11
        })
    );
    // A field of protocol 12: left out below it when it has its default,
    // not encodable otherwise.
    let skipped = |rule| Message::Skipped {
        file_index: 1,
        path: "a".into(),
        reason: "b".into(),
        rule,
    };
    let v12 = at(&skipped(false), 12).unwrap();
    let v11 = at(&skipped(false), 11).unwrap();
    assert_eq!(v11[..], v12[..v12.len() - 1]);
    assert_eq!(read_at(&v11, 11), Ok(skipped(false)));
    assert!(matches!(read_at(&v11, 12), Err(DecodeError::Short { .. })));
    assert!(matches!(
        read_at(&v12, 11),
        Err(DecodeError::Trailing { .. })
    ));
    assert!(
        matches!(at(&skipped(true), 11), Err(EncodeError::NotInVersion { what, since: 12, .. }) if what == "Skipped.rule")
    );
    // Values of protocol 12: an error code, a request flag.
    let interrupted = Message::Error {
        code: ErrorCode::Interrupted,
        message: String::new(),
    };
    let body = &encode(&interrupted)[4..];
    assert_eq!(read_at(body, 11), Err(newer("interrupted", 12)));
    assert!(matches!(
        at(&interrupted, 11),
        Err(EncodeError::NotInVersion { since: 12, .. })
    ));
    let Message::Request(mut req) = samples()[4].clone() else {
        panic!("sample 4 is the request")
    };
    req.filter.clear();
    req.flags = REQ_DEVICES;
    let body = encode(&Message::Request(req.clone()))[4..].to_vec();
    assert!(matches!(
        read_at(&body, 11),
        Err(DecodeError::Invalid {
            what: "request flags",
            ..
        })
    ));
    assert!(
        matches!(at(&Message::Request(req), 11), Err(EncodeError::NotInVersion { what, .. }) if what == "REQ_DEVICES")
    );
}

#[test]
fn a_direction_newer_than_the_version_is_refused_by_name() {
    let Message::Request(mut req) = samples()[4].clone() else {
        panic!("sample 4 is the request")
    };
    req.direction = Direction::Udp;
    req.flags = 0;
    req.filter.clear();
    req.rate_limit = 0;
    let m = Message::Request(req);
    let v12 = at(&m, 12).unwrap();
    let v7 = at(&m, 7);
    assert!(matches!(
        v7,
        Err(EncodeError::NotInVersion {
            what: "udp",
            since: 8,
            ..
        })
    ));
    // Protocol 7 reads a request without its filter.
    let mut body = v12[..v12.len() - 2].to_vec();
    assert_eq!(
        read_at(&body, 7),
        Err(DecodeError::NotInVersion {
            what: "udp",
            since: 8,
            version: 7
        })
    );
    body[1] = Direction::Push as u8;
    assert!(read_at(&body, 7).is_ok());
}

#[test]
fn every_since_is_a_version_up_to_the_newest_and_fields_follow_their_message() {
    use super::{DIRECTIONS, ERROR_CODES, FRAME_FLAGS, MESSAGES, REQUEST_FLAGS};
    for d in MESSAGES {
        assert!((1..=PROTOCOL_NEWEST).contains(&d.since), "{}", d.name);
        assert!(!d.doc.trim().is_empty(), "{} has no doc text", d.name);
        let mut last = d.since;
        for f in d.fields {
            assert!(
                f.since >= last,
                "{}.{} before an older field",
                d.name,
                f.name
            );
            assert!(f.since <= PROTOCOL_NEWEST, "{}.{}", d.name, f.name);
            last = f.since;
        }
    }
    for b in [REQUEST_FLAGS, FRAME_FLAGS, ERROR_CODES, DIRECTIONS]
        .into_iter()
        .flatten()
    {
        assert!((1..=PROTOCOL_NEWEST).contains(&b.since), "{}", b.name);
        assert!(!b.doc.trim().is_empty(), "{} has no doc text", b.name);
    }
    for b in [REQUEST_FLAGS, FRAME_FLAGS].into_iter().flatten() {
        assert_eq!(b.value.count_ones(), 1, "{} is one bit", b.name);
    }
}
