//! `--encrypt`: every data frame sealed with AES-256-GCM under keys from
//! the handshake. Real transfers in both directions and a benchmark, a
//! daemon that requires encryption, and frames forged or altered by hand.

use std::io::Write;
use std::path::Path;

use urmove::protocol::control::{ErrorCode, Message, REQ_ENCRYPT};
use urmove::protocol::frame::{FrameHeader, FLAG_SEALED};
use urmove::protocol::manifest::{Entry, EntryKind};
use urmove::protocol::seal::{frame_key, Direction, FrameSealer};

use crate::transfer::{assert_same_tree, Daemon};
use crate::util::{data_stream, hand_push_with, json, noise, sealed_refusal, stderr, urmove};

#[test]
fn encrypted_transfers_arrive_identical_and_a_daemon_can_require_them() {
    let d = Daemon::start_full(
        &[],
        "127.0.0.1",
        Path::new("/var/tmp"),
        &["--require-encryption"],
    );
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = src.path().join("run");
    std::fs::create_dir_all(top.join("sub")).unwrap();
    std::fs::write(top.join("a.dat"), noise((5 << 20) + 3, 1)).unwrap();
    std::fs::write(top.join("sub/b"), noise(4096, 2)).unwrap();
    std::fs::write(top.join("empty"), b"").unwrap();
    let args = [top.to_str().unwrap(), "127.0.0.1:in"];
    // Without --encrypt: refused, nothing written.
    let o = d.send(&["--json"], &args);
    assert!(!o.status.success());
    let v = json(&o);
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("requires encrypted sessions"),
        "{v}"
    );
    assert!(!d.root.path().join("in").exists());
    // Pushed sealed, with small blocks so there are many frames.
    let o = d.send(
        &["--encrypt", "-P", "3", "--block", "256k", "--json"],
        &args,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(json(&o)["files_verified"], 3);
    assert_same_tree(&top, &d.root.path().join("in/run"));
    // Pulled back sealed.
    let back = tempfile::tempdir_in("/var/tmp").unwrap();
    let o = urmove()
        .args(["pull", "-p", &d.port.to_string(), "--encrypt", "--key-file"])
        .arg(&d.key)
        .arg("127.0.0.1:in/run")
        .arg(back.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_same_tree(&top, &back.path().join("run"));
    // Benchmarked sealed, both ways.
    for extra in [&[][..], &["--reverse"][..]] {
        let o = urmove()
            .args(["bench", "--net", "127.0.0.1", "-p", &d.port.to_string()])
            .args([
                "--encrypt",
                "--time",
                "1s",
                "-P",
                "2",
                "--json",
                "--key-file",
            ])
            .arg(&d.key)
            .args(extra)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(json(&o)["bytes"].as_u64().unwrap() > 0);
    }
}

fn one_file(size: u64) -> Vec<Entry> {
    vec![Entry {
        path: "f".into(),
        kind: EntryKind::File,
        size,
        data: 0,
        mode: 0o644,
        mtime_s: 1_600_000_000,
        mtime_ns: 0,
        link: None,
        ..Default::default()
    }]
}

/// Send `bytes` on the data stream of a hand-made session (sealed when
/// `flags` asks) and return the daemon's refusal.
fn refused(
    d: &Daemon,
    flags: u32,
    make: impl Fn(&urmove::protocol::handshake::SessionKeys) -> Vec<u8>,
) -> (ErrorCode, String) {
    let (mut ctl, keys) = hand_push_with(d.port, &d.key, one_file(8192), 1, 8192, flags).unwrap();
    let mut data = data_stream(d.port, &keys, 0);
    let _ = data.write_all(&make(&keys));
    let refused = sealed_refusal(&mut ctl);
    drop(data);
    refused
}

/// A frame of `payload` sealed as stream 0's first, with `flip` bits
/// flipped in the ciphertext.
fn sealed_frame(
    keys: &urmove::protocol::handshake::SessionKeys,
    payload: &[u8],
    flip: usize,
) -> Vec<u8> {
    let mut h = FrameHeader::for_payload(&frame_key(keys), 0, 0, payload, 0);
    h.flags |= FLAG_SEALED;
    h.checksum = 0;
    let wire = h.encode();
    let mut body = payload.to_vec();
    let tag = FrameSealer::new(keys, Direction::ClientToServer, 0)
        .seal(&wire, &mut body)
        .unwrap();
    if flip > 0 {
        body[100] ^= 1;
    }
    [wire.to_vec(), body, tag.to_vec()].concat()
}

#[test]
fn forged_altered_and_unsealed_frames_are_refused() {
    let mut d = Daemon::start();
    let payload = noise(8192, 3);
    // An unsealed frame in an encrypted session.
    let (code, msg) = refused(&d, REQ_ENCRYPT, |keys| {
        [
            FrameHeader::for_payload(&frame_key(keys), 0, 0, &payload, 0)
                .encode()
                .to_vec(),
            payload.clone(),
        ]
        .concat()
    });
    assert_eq!(code, ErrorCode::Malformed, "{msg}");
    assert!(
        msg.contains("unsealed frame in an encrypted session"),
        "{msg}"
    );
    // One flipped bit of ciphertext.
    let (code, msg) = refused(&d, REQ_ENCRYPT, |k| sealed_frame(k, &payload, 1));
    assert_eq!(code, ErrorCode::Malformed, "{msg}");
    assert!(msg.contains("authentication failed"), "{msg}");
    // Sealed under another session's keys.
    let (_, other) = crate::util::handshake(d.port, &d.key);
    let (code, msg) = refused(&d, REQ_ENCRYPT, |_| sealed_frame(&other, &payload, 0));
    assert_eq!(code, ErrorCode::Malformed, "{msg}");
    assert!(msg.contains("authentication failed"), "{msg}");
    // A sealed frame in a session without encryption.
    let (code, msg) = refused(&d, 0, |k| sealed_frame(k, &payload, 0));
    assert_eq!(code, ErrorCode::Malformed, "{msg}");
    assert!(msg.contains("without encryption"), "{msg}");
    assert!(!d.root.path().join("hand/f").exists());
    // And the right frame, sealed by hand, makes the file.
    let (mut ctl, keys) =
        hand_push_with(d.port, &d.key, one_file(8192), 1, 8192, REQ_ENCRYPT).unwrap();
    let mut data = data_stream(d.port, &keys, 0);
    data.write_all(&sealed_frame(&keys, &payload, 0)).unwrap();
    drop(data);
    let digest = urmove::protocol::frame::content_terms(0, &payload);
    crate::util::send_sealed(&mut ctl, &Message::SourceDigests(vec![(0, digest)]));
    let reply = crate::util::sealed_replies(&mut ctl);
    let acked = reply
        .iter()
        .any(|m| matches!(m, Message::Summary { ok: true, .. }));
    assert!(acked, "{reply:?}");
    assert_eq!(
        std::fs::read(d.root.path().join("hand/f")).unwrap(),
        payload
    );
    assert!(d.alive());
}
