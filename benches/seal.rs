//! Single-core AES-256-GCM throughput of the frame sealer and opener on
//! 4 MiB frames: `cargo bench --bench seal`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use urmove::protocol::frame::FRAME_HEADER_LEN;
use urmove::protocol::handshake::SessionKeys;
use urmove::protocol::seal::{Direction, FrameOpener, FrameSealer};

const FRAME_BYTES: usize = 4 << 20;
const RUN_TIME: Duration = Duration::from_secs(2);

fn report(what: &str, frames: u64, busy: Duration) {
    let bytes = frames as f64 * FRAME_BYTES as f64;
    let gb_per_s = bytes / busy.as_secs_f64() / 1e9;
    println!(
        "{what:<5} {frames:>6} frames of 4 MiB in {:.2} s: {gb_per_s:.2} GB/s = {:.1} Gbit/s",
        busy.as_secs_f64(),
        gb_per_s * 8.0,
    );
}

fn main() {
    let keys = SessionKeys {
        session_id: [1; 16],
        session_key: [2; 32],
    };
    let header = [3u8; FRAME_HEADER_LEN];
    let mut payload: Vec<u8> = (0..FRAME_BYTES).map(|i| i as u8).collect();

    // Seal alone (the buffer turns into ciphertext of ciphertext, which
    // costs the same).
    let mut sealer = FrameSealer::new(&keys, Direction::ClientToServer, 0);
    let mut frames = 0u64;
    let start = Instant::now();
    while start.elapsed() < RUN_TIME {
        black_box(sealer.seal(&header, &mut payload).expect("seal"));
        frames += 1;
    }
    report("seal", frames, start.elapsed());

    // Open: each frame is sealed first (not timed), then opened (timed),
    // which also turns the buffer back into plaintext.
    let plain = payload.clone();
    let mut sealer = FrameSealer::new(&keys, Direction::ServerToClient, 1);
    let mut opener = FrameOpener::new(&keys, Direction::ServerToClient, 1);
    let mut frames = 0u64;
    let mut busy = Duration::ZERO;
    while busy < RUN_TIME {
        let tag = sealer.seal(&header, &mut payload).expect("seal");
        let start = Instant::now();
        opener
            .open(&header, black_box(&mut payload), &tag)
            .expect("open");
        busy += start.elapsed();
        frames += 1;
    }
    assert!(payload == plain, "open did not restore the plaintext");
    report("open", frames, busy);
}
