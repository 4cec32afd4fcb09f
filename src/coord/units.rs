//! Human units for bytes and rates: decimal (MB, GB) as dd prints them,
//! binary (MiB, GiB), or bits (Mb/s, Gb/s) for networks. Always say which.

/// How rates are shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RateUnit {
    /// kB/s, MB/s, GB/s (powers of 1000).
    #[default]
    Mb,
    /// KiB/s, MiB/s, GiB/s (powers of 1024).
    Mib,
    /// Mb/s, Gb/s (bits, powers of 1000).
    Gbit,
}

fn scaled(v: f64, base: f64, names: &[&str]) -> String {
    let mut v = v;
    let mut i = 0;
    while v >= base * 0.9995 && i + 1 < names.len() {
        v /= base;
        i += 1;
    }
    let digits = if i == 0 || v >= 100.0 {
        0
    } else if v >= 10.0 {
        1
    } else {
        2
    };
    format!("{v:.digits$} {}", names[i])
}

/// `n` things, singular for one: "1 file", "3 files".
pub fn count(n: u64, thing: &str) -> String {
    match n {
        1 => format!("1 {thing}"),
        _ => match thing.strip_suffix('y') {
            Some(stem) => format!("{n} {stem}ies"),
            None => format!("{n} {thing}s"),
        },
    }
}

/// `2.15 GB` (decimal).
pub fn bytes_decimal(bytes: u64) -> String {
    scaled(bytes as f64, 1000.0, &["B", "kB", "MB", "GB", "TB", "PB"])
}

/// `2.00 GiB` (binary).
pub fn bytes_binary(bytes: u64) -> String {
    scaled(
        bytes as f64,
        1024.0,
        &["B", "KiB", "MiB", "GiB", "TiB", "PiB"],
    )
}

/// A size as summaries print it: decimal, then binary in parentheses
/// (`2.15 GB (2.00 GiB)`); once under 1000 bytes, where both read the same
/// (`3 B`).
pub fn bytes_both(bytes: u64) -> String {
    match bytes {
        0..1000 => bytes_decimal(bytes),
        _ => format!("{} ({})", bytes_decimal(bytes), bytes_binary(bytes)),
    }
}

/// As [`bytes_both`], with the byte count first and both units listed:
/// `16777216 bytes (16.8 MB, 16.0 MiB)`, or `3 bytes`.
pub fn bytes_exact(bytes: u64) -> String {
    match bytes {
        0..1000 => format!("{bytes} bytes"),
        _ => format!(
            "{bytes} bytes ({}, {})",
            bytes_decimal(bytes),
            bytes_binary(bytes)
        ),
    }
}

/// Bytes in the unit family of `unit`.
pub fn bytes(bytes: u64, unit: RateUnit) -> String {
    match unit {
        RateUnit::Mib => bytes_binary(bytes),
        RateUnit::Mb | RateUnit::Gbit => bytes_decimal(bytes),
    }
}

/// A rate given in bytes per second, shown in `unit`.
pub fn rate(bytes_per_s: f64, unit: RateUnit) -> String {
    match unit {
        RateUnit::Mb => scaled(
            bytes_per_s,
            1000.0,
            &["B/s", "kB/s", "MB/s", "GB/s", "TB/s"],
        ),
        RateUnit::Mib => scaled(
            bytes_per_s,
            1024.0,
            &["B/s", "KiB/s", "MiB/s", "GiB/s", "TiB/s"],
        ),
        RateUnit::Gbit => scaled(
            bytes_per_s * 8.0,
            1000.0,
            &["b/s", "kb/s", "Mb/s", "Gb/s", "Tb/s"],
        ),
    }
}

/// Seconds as `850 ms`, `12.3 s`, `4m05s`.
pub fn duration_s(s: f64) -> String {
    if s < 1.0 {
        format!("{:.0} ms", s * 1000.0)
    } else if s < 60.0 {
        format!("{s:.1} s")
    } else {
        let t = s.round() as u64;
        format!("{}m{:02}s", t / 60, t % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales() {
        assert_eq!(bytes_decimal(2_147_483_648), "2.15 GB");
        assert_eq!(bytes_binary(2_147_483_648), "2.00 GiB");
        assert_eq!(bytes_decimal(999), "999 B");
        assert_eq!(bytes_both(2_147_483_648), "2.15 GB (2.00 GiB)");
        assert_eq!(bytes_both(3), "3 B");
        assert_eq!(bytes_both(999), "999 B");
        assert_eq!(bytes_both(1000), "1.00 kB (1000 B)");
        assert_eq!(bytes_exact(16 << 20), "16777216 bytes (16.8 MB, 16.0 MiB)");
        assert_eq!(bytes_exact(3), "3 bytes");
        assert_eq!(rate(2.31e9, RateUnit::Mb), "2.31 GB/s");
        assert_eq!(rate(1.25e9, RateUnit::Gbit), "10.0 Gb/s");
        assert_eq!(rate(450.0 * 1048576.0, RateUnit::Mib), "450 MiB/s");
        assert_eq!(duration_s(0.25), "250 ms");
        assert_eq!(duration_s(245.0), "4m05s");
    }
}
