//! Single-core throughput of a frame's digest terms (xxh3-64 per 4 KiB
//! piece, mixed with its offset: the sum that makes a file's digest the
//! same in any block size and cheap for holes), of what each frame costs
//! now (those terms and the keyed checksum terms, SipHash-2-4 per piece,
//! in one pass), against one xxh3-64 over the whole 4 MiB frame (the
//! checksum protocol v2 used): `cargo bench --bench digest`. Prints each
//! and its ratio to the whole-frame hash. Then the checksums storage
//! systems speak (adler32, crc32c, md5: `protocol::checksum`), each alone
//! and in one pass, and what combining two pieces' values costs.

use std::hint::black_box;
use std::time::{Duration, Instant};

use urmove::protocol::checksum::{adler32, adler32_combine, crc32c_combine, Hasher};
use urmove::protocol::frame::{content_terms, frame_terms, zero_terms, FrameKey};

const FRAME_BYTES: usize = 4 << 20;
const RUN_TIME: Duration = Duration::from_secs(2);

/// GB/s of `f` over `payload`, repeated for `RUN_TIME`.
fn rate(payload: &[u8], f: &dyn Fn(&[u8]) -> u64) -> f64 {
    let mut frames = 0u64;
    let start = Instant::now();
    while start.elapsed() < RUN_TIME {
        black_box(f(black_box(payload)));
        frames += 1;
    }
    frames as f64 * payload.len() as f64 / start.elapsed().as_secs_f64() / 1e9
}

fn main() {
    let payload: Vec<u8> = (0..FRAME_BYTES).map(|i| (i * 131 % 251) as u8).collect();
    // Rounds alternate, so a noisy neighbour hurts both alike.
    let key = FrameKey { k0: 1, k1: 2 };
    let (mut pieces, mut keyed, mut whole) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..3 {
        pieces.push(rate(&payload, &|p| content_terms(8 << 20, p)));
        keyed.push(rate(&payload, &|p| {
            let (t, k) = frame_terms(&key, 8 << 20, p);
            t ^ k
        }));
        whole.push(rate(&payload, &|p| xxhash_rust::xxh3::xxh3_64(p)));
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let (p, k, w) = (median(&mut pieces), median(&mut keyed), median(&mut whole));
    println!(
        "digest terms, 4 KiB pieces  {p:6.2} GB/s = {:5.1} Gbit/s",
        p * 8.0
    );
    println!(
        "terms + keyed checksum      {k:6.2} GB/s = {:5.1} Gbit/s",
        k * 8.0
    );
    println!(
        "one xxh3-64 over the frame  {w:6.2} GB/s = {:5.1} Gbit/s",
        w * 8.0
    );
    println!("pieces / whole: {:.2}, keyed / whole: {:.2}", p / w, k / w);
    let start = Instant::now();
    let mut holes = 0u64;
    while start.elapsed() < RUN_TIME {
        black_box(zero_terms(
            black_box(holes * FRAME_BYTES as u64),
            FRAME_BYTES as u64,
        ));
        holes += 1;
    }
    let per_s = holes as f64 / start.elapsed().as_secs_f64();
    println!(
        "a 4 MiB hole's terms: {:.1} us ({:.0} GB/s of hole)",
        1e6 / per_s,
        per_s * FRAME_BYTES as f64 / 1e9
    );
    storage_checksums(&payload);
}

/// A checksum of a frame, folded to a u64 (so it cannot be optimized away).
type Sum = dyn Fn(&[u8]) -> u64;

/// GB/s of each storage checksum over `payload`, and the cost of a
/// combine (one per block of a file arriving over parallel streams).
fn storage_checksums(payload: &[u8]) {
    let md5 = |p: &[u8]| {
        use md5::Digest;
        u64::from(md5::Md5::digest(p)[0])
    };
    let one_pass = |with_md5: bool| {
        move |p: &[u8]| {
            let mut h = Hasher::new(with_md5);
            h.update(p);
            u64::from(h.finish().adler32)
        }
    };
    let rows: [(&str, &Sum); 5] = [
        ("adler32 (simd-adler32)     ", &|p| u64::from(adler32(p))),
        ("crc32c (SSE4.2)            ", &|p| {
            u64::from(crc32c::crc32c(p))
        }),
        ("md5                        ", &md5),
        ("Hasher: adler32 + crc32c   ", &one_pass(false)),
        ("Hasher: adler32+crc32c+md5 ", &one_pass(true)),
    ];
    for (name, f) in rows {
        let r = rate(payload, f);
        println!("{name} {r:6.2} GB/s = {:5.1} Gbit/s", r * 8.0);
    }
    let start = Instant::now();
    let mut n = 0u64;
    let mut acc = (1u32, 0u32);
    while start.elapsed() < RUN_TIME {
        let len = black_box(FRAME_BYTES as u64 + n);
        acc.0 = adler32_combine(acc.0, black_box(0x1234_5678), len);
        acc.1 = crc32c_combine(acc.1, black_box(0x9abc_def0), len);
        n += 1;
    }
    black_box(acc);
    println!(
        "combining a 4 MiB piece's adler32 and crc32c: {:.2} us",
        start.elapsed().as_secs_f64() * 1e6 / n as f64
    );
}
