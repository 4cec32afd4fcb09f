//! The data path used directly: ring teardown with ops in flight, the
//! allocation-free loop, alignment discovery and refusal.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use urmove::coord::WorkerCounters;
use urmove::datapath::disk::{DiskWorker, Limit, Pattern, PhaseSpec, VerifySpec};
use urmove::datapath::file::{open_target, DirectMode, OpenSpec};
use urmove::datapath::ring::Needed;
use urmove::datapath::{Arena, Error, Ring};

use crate::alloc_count::allocations_during;

/// Whether any mapping in /proc/self/maps covers `addr`.
fn mapped(addr: usize) -> bool {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .any(|l| {
            let range = l.split_whitespace().next().unwrap();
            let (lo, hi) = range.split_once('-').unwrap();
            let lo = usize::from_str_radix(lo, 16).unwrap();
            let hi = usize::from_str_radix(hi, 16).unwrap();
            (lo..hi).contains(&addr)
        })
}

#[test]
fn dropping_a_ring_with_a_read_in_flight_cancels_it_then_unmaps_the_buffers() {
    // Run in a thread so a Drop that never finishes fails the test instead
    // of hanging it.
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let (mut r, mut w) = std::io::pipe().unwrap();
        let arena = Arena::new(4096, 2).unwrap();
        let mut ring: Ring<u32> = Ring::new(
            4,
            arena,
            &[r.as_raw_fd()],
            &[Needed::READ_FIXED, Needed::ASYNC_CANCEL],
        )
        .unwrap();
        let lease = ring.arena().take().unwrap();
        let buf_addr = lease.as_ptr() as usize;
        // Nothing is in the pipe: the read stays in flight.
        ring.read_fixed(0, 0, lease, 0, 4096, 7);
        ring.submit_and_wait(0).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(ring.in_flight(), 1);
        assert_eq!(ring.arena().free_count(), 1);
        assert!(mapped(buf_addr));

        // Drop cancels the read, waits for its completion, gets the lease
        // back and only then unmaps the arena (with a lease still out the
        // arena would keep its mapping instead).
        drop(ring);
        assert!(
            !mapped(buf_addr),
            "the arena was not unmapped: a lease never came back"
        );

        // The cancelled read is gone: what we write now stays in the pipe.
        w.write_all(b"still here").unwrap();
        let mut got = [0u8; 10];
        r.read_exact(&mut got).unwrap();
        done_tx.send(got).unwrap();
    });
    let got = done_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("dropping a ring with a read in flight hung or panicked");
    assert_eq!(&got, b"still here");
}

#[test]
fn cancel_all_returns_every_lease() {
    let (r, _w) = std::io::pipe().unwrap();
    let arena = Arena::new(4096, 3).unwrap();
    let mut ring: Ring<u32> = Ring::new(
        4,
        arena,
        &[r.as_raw_fd()],
        &[Needed::READ_FIXED, Needed::ASYNC_CANCEL],
    )
    .unwrap();
    for tag in 0..3 {
        let lease = ring.arena().take().unwrap();
        ring.read_fixed(0, 0, lease, 0, 4096, tag);
    }
    assert!(
        ring.arena().take().is_none(),
        "arena exhausted is backpressure"
    );
    ring.submit_and_wait(0).unwrap();
    ring.cancel_all_and_drain();
    assert_eq!(ring.in_flight(), 0);
    assert_eq!(ring.arena().free_count(), 3);
}

fn spec(pattern: Pattern, size: u64, verify: Option<VerifySpec>) -> PhaseSpec {
    PhaseSpec {
        pattern,
        bs: 256 << 10,
        qd: 8,
        region_start: 0,
        region_end: size,
        eof: if pattern.writes() { u64::MAX } else { size },
        limit: Limit::Bytes(size),
        ramp: Duration::ZERO,
        zeros: false,
        verify,
        seed: 99,
        fsync: pattern.writes(),
        rate: None,
    }
}

#[test]
fn the_per_op_loop_allocates_nothing() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let path = dir.path().join("f.dat");
    let target = open_target(
        &path,
        &OpenSpec {
            write: true,
            create: true,
            direct: DirectMode::Auto,
            destroy: false,
        },
    )
    .unwrap();
    let mut worker = DiskWorker::new(&target, 256 << 10, 8).unwrap();
    let counters = WorkerCounters::default();
    let stop = AtomicBool::new(false);
    let size = 16 << 20;
    let verify = Some(VerifySpec {
        target: 0,
        seed: Some(99),
    });
    for pattern in [
        Pattern::SeqWrite,
        Pattern::SeqRead,
        Pattern::RandRead,
        Pattern::Mixed { read_pct: 50 },
    ] {
        let s = spec(pattern, size, verify);
        let (out, allocs) = allocations_during(|| worker.run(&s, &counters, &stop, Instant::now()));
        let out = out.unwrap_or_else(|e| panic!("{pattern:?}: {e}"));
        assert_eq!(
            allocs, 0,
            "{pattern:?} allocated {allocs} times in its loop"
        );
        assert_eq!(out.bytes, size, "{pattern:?}");
        if pattern.reads() {
            assert!(out.verified_blocks > 0, "{pattern:?} verified nothing");
        }
        assert_eq!(worker.free_buffers(), 8, "every lease came back");
    }
    assert_eq!(std::fs::metadata(&path).unwrap().len(), size);
}

#[test]
fn alignment_is_discovered_and_misaligned_sizes_refused() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let path = dir.path().join("a.dat");
    let t = open_target(
        &path,
        &OpenSpec {
            write: true,
            create: true,
            direct: DirectMode::Required,
            destroy: false,
        },
    )
    .unwrap();
    assert!(t.direct, "ext4 here supports O_DIRECT");
    assert!(
        t.align.offset.is_power_of_two() && t.align.offset >= 512,
        "{:?}",
        t.align
    );
    assert!(t
        .check_aligned("block size", u64::from(t.align.offset) * 3)
        .is_ok());
    match t.check_aligned("block size", u64::from(t.align.offset) + 1) {
        Err(Error::Misaligned { align, .. }) => assert_eq!(align, t.align.offset),
        other => panic!("expected Misaligned, got {other:?}"),
    }
}
