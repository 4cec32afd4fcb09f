//! Net rings over real TCP on loopback: frames sent from registered buffers
//! arrive whole, in order per stream, with their bytes intact; zero-copy
//! falls back to plain sends where the kernel copies anyway; malformed
//! frames and cut streams are errors, not crashes.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::mpsc;
use std::time::Duration;

use urmove::datapath::net::{
    payload, payload_mut, NetReceiver, NetSender, RecvEvent, SendStats, ZeroCopy,
};
use urmove::datapath::Error;
use urmove::protocol::frame::{payload_checksum, FrameError, FrameHeader, FrameKey};

/// These rings carry no session: frames are checksummed under a fixed key.
const KEY: FrameKey = FrameKey { k0: 5, k1: 6 };

fn pair(n: usize) -> (Vec<TcpStream>, Vec<TcpStream>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let mut a = Vec::new();
    let mut b = Vec::new();
    for _ in 0..n {
        a.push(TcpStream::connect(addr).unwrap());
        b.push(l.accept().unwrap().0);
    }
    (a, b)
}

/// Frame sizes with unaligned tails, tiny and large payloads.
fn sizes() -> Vec<usize> {
    (0..120)
        .map(|i| [1 << 20, 4096, 1000, 1, 777_777, 65536][i % 6])
        .collect()
}

fn send_all(socks: Vec<TcpStream>, mode: ZeroCopy) -> SendStats {
    let fds: Vec<i32> = socks.iter().map(|s| s.as_raw_fd()).collect();
    let mut tx = NetSender::new(&fds, 8, 1 << 20, mode).unwrap();
    // Unsent data is bounded by a frame, but not under zero-copy, where a
    // send cut short by the bound would wait a round trip for its buffer.
    let frame = urmove::datapath::net::frame_buf_size(1 << 20) as i32;
    let bounded = socks.iter().all(|s| notsent_lowat(s) == frame);
    assert_eq!(bounded, mode != ZeroCopy::On, "{mode:?}");
    for (i, &len) in sizes().iter().enumerate() {
        let mut lease = loop {
            match tx.take_buffer() {
                Some(l) => break l,
                None => tx.poll(true).unwrap(),
            }
        };
        let data = crate::util::noise(len, i as u64);
        payload_mut(&mut lease)[..len].copy_from_slice(&data);
        let h = FrameHeader::for_payload(&KEY, i as u32, 0, &data, 0);
        tx.queue((i % fds.len()) as u32, lease, &h);
        tx.poll(false).unwrap();
    }
    tx.flush().unwrap();
    let stats = tx.stats();
    drop(tx);
    drop(socks);
    stats
}

fn receive_all(socks: Vec<TcpStream>) -> Vec<(u32, u32, Vec<u8>)> {
    let fds: Vec<i32> = socks.iter().map(|s| s.as_raw_fd()).collect();
    let mut rx = NetReceiver::new(&fds, 8, 1 << 20).unwrap();
    let mut got = Vec::new();
    let mut closed = 0;
    while rx.open() {
        let mut frames = Vec::new();
        rx.poll(true, &mut |ev| match ev {
            RecvEvent::Frame {
                stream,
                header,
                lease,
            } => frames.push((stream, header, lease)),
            RecvEvent::Closed { .. } => closed += 1,
            RecvEvent::Written { .. } => unreachable!("nothing was written"),
            RecvEvent::Lost { stream, why } => panic!("stream {stream} lost: {why}"),
        })
        .unwrap();
        for (stream, header, lease) in frames {
            let p = payload(&lease, &header);
            header.check_payload(&KEY, p).expect("checksum");
            got.push((stream, header.file_index, p.to_vec()));
            rx.give_back(lease);
        }
    }
    assert_eq!(closed, fds.len(), "every stream ended cleanly");
    got
}

fn round_trip(mode: ZeroCopy) -> SendStats {
    let (a, b) = pair(3);
    let (done_tx, done_rx) = mpsc::channel();
    let rx = std::thread::spawn(move || receive_all(b));
    let tx = std::thread::spawn(move || {
        let s = send_all(a, mode);
        done_tx.send(()).unwrap();
        s
    });
    done_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("sender hung");
    let stats = tx.join().unwrap();
    let got = rx.join().unwrap();
    assert_eq!(got.len(), sizes().len());
    // Per stream, frames arrive in the order queued; every byte matches.
    let mut last = [None::<u32>; 3];
    for (stream, index, data) in &got {
        assert_eq!(*stream as usize, *index as usize % 3);
        assert!(
            last[*stream as usize].is_none_or(|l| l < *index),
            "out of order on stream {stream}"
        );
        last[*stream as usize] = Some(*index);
        assert_eq!(
            *data,
            crate::util::noise(sizes()[*index as usize], u64::from(*index))
        );
    }
    assert_eq!(stats.frames, sizes().len() as u64);
    stats
}

#[test]
fn frames_arrive_whole_with_plain_sends() {
    let s = round_trip(ZeroCopy::Off);
    assert_eq!(s.zc_sends, 0);
}

#[test]
fn zero_copy_sends_keep_buffers_until_notified() {
    let s = round_trip(ZeroCopy::On);
    assert_eq!(
        s.zc_sends, s.zc_notifs,
        "every zero-copy send was notified before its buffer was reused"
    );
    assert!(s.zc_sends >= 120);
}

#[test]
fn zero_copy_is_not_tried_over_loopback() {
    let s = round_trip(ZeroCopy::Auto);
    // Loopback (as veth and TUN) always copies: auto does not try.
    assert_eq!(s.zc_sends, 0, "{s:?}");
    assert!(
        s.zc_skipped
            .is_some_and(|why| why.contains("virtual device")),
        "{s:?}"
    );
}

#[test]
fn a_virtual_device_or_a_long_round_trip_rules_zero_copy_out() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (_s, _) = l.accept().unwrap();
    let why = urmove::datapath::net::zero_copy_wont_pay(&[c.as_raw_fd()]);
    assert!(why.is_some_and(|w| w.contains("loopback")), "{why:?}");
    let (name, physical) = urmove::datapath::sys::socket_interface(c.as_raw_fd()).unwrap();
    assert_eq!((name.as_str(), physical), ("lo", false));
}

/// What a receiver reports for a stream carrying `bytes`: a malformed
/// frame is an error of the poll, a stream cut short is a lost stream.
fn receive_outcome(bytes: &[u8]) -> Result<std::io::Error, Error> {
    let (mut a, b) = pair(1);
    a[0].write_all(bytes).unwrap();
    drop(a);
    let fds: Vec<i32> = b.iter().map(|s| s.as_raw_fd()).collect();
    let mut rx = NetReceiver::new(&fds, 2, 64 << 10).unwrap();
    loop {
        let mut frames = Vec::new();
        let mut lost = None;
        rx.poll(true, &mut |ev| match ev {
            RecvEvent::Frame { lease, .. } => frames.push(lease),
            RecvEvent::Lost { why, .. } => lost = Some(why),
            _ => {}
        })?;
        for l in frames {
            rx.give_back(l);
        }
        if let Some(why) = lost {
            assert!(!rx.open(), "a lost stream is closed");
            return Ok(why);
        }
        assert!(rx.open(), "stream closed without an error");
    }
}

fn receive_error(bytes: &[u8]) -> Error {
    receive_outcome(bytes).expect_err("a malformed frame is an error")
}

fn receive_lost(bytes: &[u8]) -> std::io::Error {
    receive_outcome(bytes).expect("a cut stream is reported lost")
}

#[test]
fn malformed_streams_are_errors_and_cut_ones_are_lost() {
    let good = FrameHeader::for_payload(&KEY, 0, 0, b"hello", 0);
    // Not a frame at all.
    let e = receive_error(b"GET / HTTP/1.1\r\nHost: example.org\r\nAccept: */*\r\n\r\n");
    assert!(
        matches!(
            e,
            Error::Frame {
                reason: FrameError::BadMagic,
                ..
            }
        ),
        "{e}"
    );
    // A length above the receiver's buffers.
    let mut big = good;
    big.length = 1 << 20;
    let e = receive_error(&big.encode());
    assert!(
        matches!(
            e,
            Error::Frame {
                reason: FrameError::Oversized { .. },
                ..
            }
        ),
        "{e}"
    );
    // Cut in the middle of the payload.
    let mut bytes = good.encode().to_vec();
    bytes.extend_from_slice(b"he");
    let e = receive_lost(&bytes);
    assert!(e.to_string().contains("middle of a frame"), "{e}");
    // Cut in the middle of a header.
    let e = receive_lost(&good.encode()[..10]);
    assert!(e.to_string().contains("middle of a frame"), "{e}");
    // A whole frame arrives intact before the clean end.
    assert_eq!(payload_checksum(&KEY, 0, 0, b"hello"), good.checksum);
}

/// `TCP_NOTSENT_LOWAT` of a socket.
fn notsent_lowat(s: &TcpStream) -> i32 {
    urmove::datapath::sys::notsent_lowat(s.as_raw_fd()).expect("a TCP socket")
}

/// A frame is bound to a stream only when the stream can take it: one whose
/// peer reads nothing holds no more than its socket took, the stream that
/// is read carries the rest, and no socket keeps more than a frame unsent.
#[test]
fn frames_go_to_the_streams_that_take_them() {
    let (a, mut b) = pair(2);
    let stuck = b.pop().unwrap();
    let read = b.pop().unwrap();
    let reader = std::thread::spawn(move || receive_all(vec![read]));
    let (done_tx, done_rx) = mpsc::channel();
    let sender = std::thread::spawn(move || {
        let carried = send_where_taken(&a);
        done_tx.send(()).unwrap();
        drop(a);
        carried
    });
    done_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the sender waited on the stream nobody reads");
    let carried = sender.join().unwrap();
    // Its first frame fits under the bound, its second waits in the socket.
    assert!(carried[1] <= 2, "the stream nobody reads took {carried:?}");
    let got = reader.join().unwrap();
    assert_eq!(got.len() as u32, carried[0]);
    for (_, index, data) in &got {
        assert_eq!(*data, crate::util::noise(PAYLOAD, u64::from(*index)));
    }
    drop(stuck);
}

const PAYLOAD: usize = 1 << 20;

/// Send 40 frames, each on a stream [`NetSender::idle_stream`] picks, then
/// give up stream 1: how many frames each stream carried.
fn send_where_taken(a: &[TcpStream]) -> [u32; 2] {
    let fds: Vec<i32> = a.iter().map(|s| s.as_raw_fd()).collect();
    let mut tx = NetSender::new(&fds, 8, PAYLOAD, ZeroCopy::Off).unwrap();
    let frame = urmove::datapath::net::frame_buf_size(PAYLOAD) as i32;
    assert!(
        a.iter().all(|s| notsent_lowat(s) == frame),
        "unsent data bounded by a frame"
    );
    let (mut next, mut carried) = (0u32, [0u32; 2]);
    for i in 0..40u32 {
        let mut lease = loop {
            match tx.take_buffer() {
                Some(l) => break l,
                None => tx.poll(true).unwrap(),
            }
        };
        let data = crate::util::noise(PAYLOAD, u64::from(i));
        payload_mut(&mut lease)[..PAYLOAD].copy_from_slice(&data);
        let h = FrameHeader::for_payload(&KEY, i, 0, &data, 0);
        let st = loop {
            match tx.idle_stream(&mut next, 2) {
                Some(s) => break s,
                None => tx.poll(true).unwrap(),
            }
        };
        carried[st as usize] += 1;
        tx.queue(st, lease, &h);
    }
    tx.lose(1, std::io::Error::other("never read"));
    tx.flush().unwrap();
    carried
}

#[test]
fn a_lane_receiver_names_the_session_stream_in_frame_errors() {
    let (mut a, b) = pair(1);
    a[0].write_all(b"GET / HTTP/1.1\r\nHost: example.org\r\nAccept: */*\r\n\r\n")
        .unwrap();
    drop(a);
    let fds: Vec<i32> = b.iter().map(|s| s.as_raw_fd()).collect();
    let mut rx = NetReceiver::new(&fds, 2, 64 << 10).unwrap();
    // This lane's only stream is the session's stream 3.
    rx.number_streams(&[3]);
    let e = loop {
        if let Err(e) = rx.poll(true, &mut |_| {}) {
            break e;
        }
    };
    assert!(e.to_string().contains("data stream 3"), "{e}");
}
