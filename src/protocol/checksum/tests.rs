use super::*;

/// A small deterministic generator (xorshift64*), so failures repeat.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
}

/// Adler-32 by its definition, byte at a time.
fn adler32_by_definition(bytes: &[u8]) -> u32 {
    let (mut s1, mut s2) = (1u32, 0u32);
    for &b in bytes {
        s1 = (s1 + u32::from(b)) % 65521;
        s2 = (s2 + s1) % 65521;
    }
    s1 | (s2 << 16)
}

fn md5_hex(bytes: &[u8]) -> String {
    let mut h = Hasher::new(true);
    h.update(bytes);
    Value::Md5(h.finish().md5.unwrap()).hex()
}

#[test]
fn known_vectors() {
    assert_eq!(adler32(b"Wikipedia"), 0x11E6_0398);
    assert_eq!(adler32(b""), 1);
    assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
    assert_eq!(md5_hex(b""), "d41d8cd98f00b204e9800998ecf8427e");
    assert_eq!(md5_hex(b"abc"), "900150983cd24fb0d6963f7d28e17f72");
    let mut h = Hasher::new(true);
    h.update(b"1234");
    h.update(b"");
    h.update(b"56789");
    assert_eq!(h.len(), 9);
    let s = h.finish();
    assert_eq!(s.crc32c, 0xE306_9283);
    assert_eq!(Hasher::new(true).finish(), Sums::EMPTY);
    assert_eq!(Hasher::new(false).finish().md5, None);
}

/// Long inputs (past a chunk, past adler32's 5552-byte reduction bound)
/// fed in uneven slices give what each algorithm gives over the whole.
#[test]
fn the_hasher_over_slices_equals_each_algorithm_over_the_whole() {
    let mut rng = Rng(7);
    for len in [1, 5551, 5552, 5553, CHUNK_BYTES - 1, CHUNK_BYTES * 3 + 17] {
        let data = rng.bytes(len);
        let mut h = Hasher::new(true);
        let mut at = 0;
        while at < data.len() {
            let n = (rng.below(CHUNK_BYTES as u64 + 1000) as usize + 1).min(data.len() - at);
            h.update(&data[at..at + n]);
            at += n;
        }
        let s = h.finish();
        assert_eq!(s.adler32, adler32_by_definition(&data), "{len}");
        assert_eq!(s.crc32c, crc32c::crc32c(&data), "{len}");
        let md5: [u8; 16] = md5::Md5::digest(&data).into();
        assert_eq!(s.md5, Some(md5), "{len}");
    }
    // All 0xff: the largest sums adler32 can take.
    let ones = vec![0xffu8; 1 << 20];
    assert_eq!(adler32(&ones), adler32_by_definition(&ones));
}

#[test]
fn combining_equals_the_whole_for_random_splits() {
    let mut rng = Rng(11);
    let data = rng.bytes(200_000);
    for _ in 0..2000 {
        let from = rng.below(data.len() as u64) as usize;
        let to = from + rng.below((data.len() - from) as u64 + 1) as usize;
        let split = from + rng.below((to - from) as u64 + 1) as usize;
        let (a, b, whole) = (&data[from..split], &data[split..to], &data[from..to]);
        let len_b = b.len() as u64;
        assert_eq!(
            adler32_combine(adler32(a), adler32(b), len_b),
            adler32(whole)
        );
        assert_eq!(
            crc32c_combine(crc32c::crc32c(a), crc32c::crc32c(b), len_b),
            crc32c::crc32c(whole)
        );
    }
    // As the crate's own (matrix) combine, for any values and lengths.
    for i in 0..2000u64 {
        let (a, b) = (rng.next() as u32, rng.next() as u32);
        let len = match i % 3 {
            0 => rng.below(100),
            1 => rng.below(1 << 40),
            _ => rng.next(),
        };
        // (An empty B's crc is 0; the crate's returns A's for any B then.)
        let b = if len == 0 { 0 } else { b };
        let want = crc32c::crc32c_combine(a, b, len as usize);
        assert_eq!(crc32c_combine(a, b, len), want, "{a:x} {b:x} {len}");
    }
    // A second part longer than the modulus, many times over.
    let zeros = vec![0u8; 65521 * 3 + 5];
    let a = adler32(b"head");
    let mut all = b"head".to_vec();
    all.extend_from_slice(&zeros);
    assert_eq!(
        adler32_combine(a, adler32(&zeros), zeros.len() as u64),
        adler32(&all)
    );
}

/// A file cut at random points, its pieces given in a random order:
/// the whole file's values once they cover it, a gap before.
#[test]
fn pieces_in_any_order_make_the_whole_file() {
    let mut rng = Rng(23);
    for round in 0..300 {
        let size = rng.below(if round % 10 == 0 { 300_000 } else { 5000 }) as usize;
        let data = rng.bytes(size);
        let mut cuts: Vec<usize> = (0..rng.below(12))
            .map(|_| rng.below(size as u64 + 1) as usize)
            .collect();
        cuts.extend([0, size]);
        cuts.sort_unstable();
        let mut pieces: Vec<Piece> = cuts
            .windows(2)
            .map(|w| Piece::of(w[0] as u64, &data[w[0]..w[1]]))
            .collect();
        for i in (1..pieces.len()).rev() {
            pieces.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let mut p = Pieces::new(size as u64);
        for (i, piece) in pieces.iter().enumerate() {
            let whole = p.whole();
            let nonempty_left = pieces[i..].iter().any(|x| x.len > 0);
            assert_eq!(whole.is_err(), nonempty_left, "round {round}");
            p.add(*piece).unwrap();
        }
        assert_eq!(p.covered(), size as u64);
        let want = (adler32(&data), crc32c::crc32c(&data));
        assert_eq!(p.whole(), Ok(want), "round {round}");
    }
}

#[test]
fn pieces_refuse_overlaps_and_overruns_and_name_gaps() {
    let data = Rng(5).bytes(100);
    let mut p = Pieces::new(100);
    p.add(Piece::of(10, &data[10..20])).unwrap();
    p.add(Piece::of(40, &data[40..50])).unwrap();
    assert_eq!(p.whole(), Err(PieceError::Gap { at: 0, size: 100 }));
    for (from, to) in [(15, 25), (5, 11), (19, 41), (0, 100), (10, 20), (45, 46)] {
        assert_eq!(
            p.add(Piece::of(from, &data[from as usize..to as usize])),
            Err(PieceError::Overlap {
                offset: from,
                end: to
            }),
            "[{from}, {to})"
        );
    }
    let past = Piece::of(95, &[0u8; 10]);
    assert!(matches!(p.add(past), Err(PieceError::BeyondEnd { .. })));
    let huge = Piece {
        offset: u64::MAX,
        len: 2,
        adler32: 1,
        crc32c: 0,
    };
    assert!(matches!(p.add(huge), Err(PieceError::BeyondEnd { .. })));
    // Refusals changed nothing: the rest still makes the file.
    assert_eq!(p.covered(), 20);
    p.add(Piece::of(0, &data[..10])).unwrap();
    assert_eq!(p.whole(), Err(PieceError::Gap { at: 20, size: 100 }));
    p.add(Piece::of(20, &data[20..40])).unwrap();
    p.add(Piece::of(30, &[])).unwrap();
    assert_eq!(p.whole(), Err(PieceError::Gap { at: 50, size: 100 }));
    p.add(Piece::of(50, &data[50..])).unwrap();
    assert_eq!(p.whole(), Ok((adler32(&data), crc32c::crc32c(&data))));
    assert_eq!(Pieces::new(0).whole(), Ok((1, 0)));
}

#[test]
fn md5_in_order_takes_what_comes_in_turn_and_tells_when_it_missed() {
    let data = Rng(9).bytes(10_000);
    let want: [u8; 16] = md5::Md5::digest(&data).into();
    let mut m = InOrderMd5::new();
    assert!(m.offer(0, &data[..4000]));
    // Sent again, and overlapping the next part: only the new bytes count.
    assert!(m.offer(0, &data[..4000]));
    assert!(m.offer(3000, &data[3000..7000]));
    assert!(m.offer(7000, &data[7000..]));
    assert_eq!(m.next(), 10_000);
    assert_eq!(m.clone().finish(10_000), Some(want));
    assert_eq!(m.finish(10_001), None, "short of the size");
    let mut m = InOrderMd5::new();
    assert!(m.offer(0, &data[..4000]));
    assert!(!m.offer(5000, &data[5000..]), "ahead of its turn");
    assert!(m.missed());
    assert!(!m.offer(4000, &data[4000..5000]), "once missed, always");
    assert_eq!(m.finish(10_000), None);
    assert_eq!(InOrderMd5::new().finish(0), Some(Sums::EMPTY.md5.unwrap()));
}

#[test]
fn want_digest_ranks_by_q_and_ignores_what_it_does_not_know() {
    use Algorithm::*;
    let cases: &[(&str, &[Algorithm])] = &[
        ("adler32;q=0.5, MD5;q=1", &[Md5, Adler32]),
        ("ADLER32", &[Adler32]),
        ("sha-256, adler32;q=0.3, crc32c;q=0.3", &[Adler32, Crc32c]),
        ("md5, adler32", &[Md5, Adler32]),
        ("UNIXcksum;q=1, adler32;q=0.001", &[Adler32]),
        ("adler32;q=0, md5;q=0.0", &[]),
        ("md5;q=1.5, adler32;q=2, crc32c;q=-1, md5;q=abc", &[]),
        ("md5;q=1.000, adler32 ; Q=0.999", &[Md5, Adler32]),
        ("adler32;q=0.5;foo=bar, adler32;q=0.9", &[Adler32]),
        ("", &[]),
        (",,;;==", &[]),
    ];
    for (header, want) in cases {
        assert_eq!(parse_want_digest(header), *want, "{header:?}");
    }
}

#[test]
fn want_fields_rank_by_preference_and_drop_zero() {
    use Algorithm::*;
    let cases: &[(&str, &[Algorithm])] = &[
        ("adler=5, md5=3", &[Adler32, Md5]),
        ("md5=3, adler32=5, crc32c=5", &[Adler32, Crc32c, Md5]),
        ("sha-256=10, crc32c=0", &[]),
        ("md5=11, adler=-1, crc32c=1.5, adler32", &[]),
        ("crc32c=1;p=2", &[Crc32c]),
        ("adler=1, adler=9", &[Adler32]),
        ("=", &[]),
    ];
    for (header, want) in cases {
        assert_eq!(parse_want_fields(header), *want, "{header:?}");
    }
}

#[test]
fn answers_are_spelled_as_storage_systems_spell_them() {
    let abc: [u8; 16] = md5::Md5::digest(b"abc").into();
    let values = [
        Value::Adler32(0x11E6_0398),
        Value::Crc32c(0xE306_9283),
        Value::Md5(abc),
    ];
    assert_eq!(
        format_digest(&values),
        "adler32=11e60398,crc32c=4waSgw==,md5=kAFQmDzST7DWlj99KOF/cg=="
    );
    assert_eq!(format_digest(&[Value::Adler32(0xabc)]), "adler32=00000abc");
    assert_eq!(
        format_fields(&values),
        "adler=:EeYDmA==:, crc32c=:4waSgw==:, md5=:kAFQmDzST7DWlj99KOF/cg==:"
    );
    assert_eq!(Value::Crc32c(0xE306_9283).hex(), "e3069283");
    assert_eq!(parse_digest(&format_digest(&values)), values);
    assert_eq!(parse_fields(&format_fields(&values)), values);
}

#[test]
fn a_peers_digest_reads_in_its_spellings() {
    let abc: [u8; 16] = md5::Md5::digest(b"abc").into();
    let cases: &[(&str, &[Value])] = &[
        ("ADLER32=A1B2C3D", &[Value::Adler32(0x0a1b_2c3d)]),
        ("adler32=EeYDmA==", &[Value::Adler32(0x11E6_0398)]),
        (
            "md5=900150983cd24fb0d6963f7d28e17f72, sha-256=abc=",
            &[Value::Md5(abc)],
        ),
        ("crc32c=e3069283", &[Value::Crc32c(0xE306_9283)]),
        ("adler32=zzzz, md5=AAAA, crc32c=123456789", &[]),
        ("adler32=, =, md5", &[]),
    ];
    for (header, want) in cases {
        assert_eq!(parse_digest(header), *want, "{header:?}");
    }
    let fields: &[(&str, &[Value])] = &[
        ("adler32=:EeYDmA==:", &[Value::Adler32(0x11E6_0398)]),
        ("ADLER=:EeYDmA==:;x=1", &[Value::Adler32(0x11E6_0398)]),
        ("adler=EeYDmA==, md5=:AAAA:, crc32c=:4waSgw", &[]),
    ];
    for (header, want) in fields {
        assert_eq!(parse_fields(header), *want, "{header:?}");
    }
}

/// Random values read back the same in both RFCs' spellings.
#[test]
fn formats_round_trip() {
    let mut rng = Rng(31);
    for _ in 0..500 {
        let mut md5 = [0u8; 16];
        md5.copy_from_slice(&rng.bytes(16));
        let values = [
            Value::Adler32(rng.next() as u32),
            Value::Crc32c(rng.next() as u32),
            Value::Md5(md5),
        ];
        let n = rng.below(4) as usize;
        assert_eq!(parse_digest(&format_digest(&values[..n])), &values[..n]);
        assert_eq!(parse_fields(&format_fields(&values[..n])), &values[..n]);
    }
}

/// Any text, every truncation of real headers and random bytes, reads
/// without a panic.
#[test]
fn odd_headers_never_panic() {
    let real = [
        "adler32;q=0.5, MD5;q=1",
        "adler=:EeYDmA==:, md5=:kAFQmDzST7DWlj99KOF/cg==:",
        "md5=900150983cd24fb0d6963f7d28e17f72",
        "crc32c=4waSgw==;q=0.25",
    ];
    let all = |h: &str| {
        let _ = (parse_want_digest(h), parse_want_fields(h));
        let _ = (parse_digest(h), parse_fields(h));
    };
    for h in real {
        for i in 0..=h.len() {
            all(&h[..i]);
            all(&h[i..]);
        }
    }
    let mut rng = Rng(41);
    let alphabet = b"adlerm5crc32q=;:,. 0123456789+/=ABCxyz\t\xc3\xa9";
    for _ in 0..5000 {
        let len = rng.below(40) as usize;
        let raw: Vec<u8> = (0..len)
            .map(|_| alphabet[rng.below(alphabet.len() as u64) as usize])
            .collect();
        all(&String::from_utf8_lossy(&raw));
    }
}
