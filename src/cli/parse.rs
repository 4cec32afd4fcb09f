//! Parsers for sizes (`1M`, `4KiB`, `2GB`), rates (`4Gbit`, `500MB`,
//! `450MiB`) and durations (`2s`, `500ms`, `1m`), with errors that name the
//! problem.

use std::time::Duration;

fn split_number(s: &str) -> Result<(f64, &str), String> {
    let s = s.trim();
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(end);
    if num.is_empty() {
        return Err(format!("'{s}' does not start with a number"));
    }
    let v: f64 = num
        .parse()
        .map_err(|_| format!("'{num}' is not a number"))?;
    Ok((v, unit.trim()))
}

/// `-P`: `auto` or a stream count from 1 to 256.
pub fn streams(s: &str) -> Result<Streams, String> {
    if s == "auto" {
        return Ok(Streams::Auto);
    }
    match s.parse::<u16>() {
        Ok(n @ 1..=256) => Ok(Streams::Count(n)),
        _ => Err(format!("'{s}': give auto or a stream count from 1 to 256")),
    }
}

/// `--lanes`: `auto` or a lane count from 1 to 64.
pub fn lanes(s: &str) -> Result<crate::session::link::lanes::Lanes, String> {
    use crate::session::link::lanes::{Lanes, LANES_MAX};
    if s == "auto" {
        return Ok(Lanes::Auto);
    }
    match s.parse::<u16>() {
        Ok(n @ 1..=LANES_MAX) => Ok(Lanes::Count(n)),
        _ => Err(format!(
            "'{s}': give auto or a lane count from 1 to {LANES_MAX}"
        )),
    }
}

/// What `-P` asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Streams {
    /// Add streams while the aggregate grows.
    Auto,
    Count(u16),
}

impl Streams {
    /// (streams to open, whether `-P auto` chooses how many carry data).
    pub fn resolve(self) -> (u16, bool) {
        use crate::session::client::send::{AUTO_CAP, AUTO_START};
        match self {
            Streams::Auto => (AUTO_CAP.max(AUTO_START), true),
            Streams::Count(n) => (n, false),
        }
    }
}

/// `--cc`: `auto` or a congestion control's name.
pub fn congestion(s: &str) -> Result<crate::datapath::tcp::Congestion, String> {
    crate::datapath::tcp::Congestion::parse(s).map_err(|e| e.to_string())
}

/// A size in bytes. `K`/`M`/`G`/`T` and `KiB`.. are powers of 1024 (as dd and
/// fio read them); `kB`/`MB`/`GB`/`TB` are powers of 1000; a bare number is bytes.
pub fn size(s: &str) -> Result<u64, String> {
    let (v, unit) = split_number(s)?;
    let mult: f64 = match unit {
        "" | "B" | "b" => 1.0,
        "k" | "K" | "KiB" | "kiB" => 1024.0,
        "M" | "m" | "MiB" => 1024.0 * 1024.0,
        "G" | "g" | "GiB" => 1024.0 * 1024.0 * 1024.0,
        "T" | "t" | "TiB" => 1024f64.powi(4),
        "kB" | "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        _ => {
            return Err(format!(
                "unknown size unit '{unit}' in '{s}' (use K, M, G, T, KiB, MiB, GiB, kB, MB, GB)"
            ))
        }
    };
    let bytes = v * mult;
    if !(bytes.is_finite() && bytes < 1.8e19) {
        return Err(format!("size '{s}' is too large"));
    }
    if bytes.fract() != 0.0 {
        return Err(format!("size '{s}' is not a whole number of bytes"));
    }
    Ok(bytes as u64)
}

/// A rate as given: bytes per second, and the unit family it was written
/// in, to echo it back in that unit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub bytes_per_s: f64,
    pub unit: crate::coord::units::RateUnit,
}

impl Rate {
    /// The rate in the unit it was given, then in the other family:
    /// `8.00 Mb/s (1.00 MB/s)`, `1.00 MB/s (8.00 Mb/s)`.
    pub fn echo(&self) -> String {
        use crate::coord::units::{rate, RateUnit};
        let other = match self.unit {
            RateUnit::Gbit => RateUnit::Mb,
            RateUnit::Mb | RateUnit::Mib => RateUnit::Gbit,
        };
        format!(
            "{} ({})",
            rate(self.bytes_per_s, self.unit),
            rate(self.bytes_per_s, other)
        )
    }
}

/// What one spelling of a rate's unit says: its multiplier, and whether
/// it counts bytes.
fn rate_unit(unit: &str) -> Option<(f64, bool, bool)> {
    // `/s` or `ps` may end it: `4Gbit/s`, `4Gbps`, `500MBps`.
    let unit = unit.strip_suffix("/s").unwrap_or(unit);
    let unit = match unit.len().checked_sub(2).map(|at| unit.split_at(at)) {
        Some((rest, ps)) if ps.eq_ignore_ascii_case("ps") && !rest.is_empty() => rest,
        _ => unit,
    };
    let (power, rest) = match unit.chars().next().map(|c| c.to_ascii_lowercase()) {
        Some('k') => (1, &unit[1..]),
        Some('m') => (2, &unit[1..]),
        Some('g') => (3, &unit[1..]),
        Some('t') => (4, &unit[1..]),
        _ => (0, unit),
    };
    let (base, rest) = match rest.strip_prefix('i') {
        Some(rest) if power > 0 => (1024f64, rest),
        _ => (1000f64, rest),
    };
    let bytes = match rest {
        // A binary prefix names what it multiplies: `4GiB`, `4Gibit`.
        "" if base == 1024.0 => return None,
        "" | "b" => false,
        "B" => true,
        word if word.eq_ignore_ascii_case("bit") || word.eq_ignore_ascii_case("bits") => false,
        _ => return None,
    };
    Some((base.powi(power), bytes, base == 1024.0))
}

/// A rate: bits per second unless a `B` says bytes. `4G`, `4g`, `4Gb`,
/// `4gbit`, `4Gbit`, `4Gbps` are bits (iperf3's -b, tc's spelling in any
/// case); `500MB` and `450MiB` bytes; k, M, G, T are powers of 1000, Ki,
/// Mi, Gi, Ti of 1024; `/s` may follow; a bare number is bits per second.
/// Every rate option takes it, and echoes it in the unit family given.
pub fn rate(s: &str) -> Result<Rate, String> {
    use crate::coord::units::RateUnit;
    let (v, unit) = split_number(s)?;
    let Some((mult, bytes, binary)) = rate_unit(unit) else {
        return Err(format!(
            "unknown rate unit '{unit}' in '{s}' (bits: 4G, 4Gbit, 4Gbps, 1gbit; bytes: 500MB, 450MiB)"
        ));
    };
    let bytes_per_s = match bytes {
        true => v * mult,
        false => v * mult / 8.0,
    };
    if !bytes_per_s.is_finite() {
        return Err(format!("rate '{s}' is too large"));
    }
    let unit = match (bytes, binary) {
        (false, _) => RateUnit::Gbit,
        (true, true) => RateUnit::Mib,
        (true, false) => RateUnit::Mb,
    };
    Ok(Rate { bytes_per_s, unit })
}

/// A duration: `500ms`, `2s`, `1.5m`, `1h`, or bare seconds.
pub fn duration(s: &str) -> Result<Duration, String> {
    let (v, unit) = split_number(s)?;
    let secs = match unit {
        "" | "s" | "sec" => v,
        "ms" => v / 1e3,
        "us" => v / 1e6,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        "d" => v * 86400.0,
        _ => {
            return Err(format!(
                "unknown duration unit '{unit}' in '{s}' (use ms, s, m, h, d)"
            ))
        }
    };
    if !(secs.is_finite() && secs < 1e9) {
        return Err(format!("duration '{s}' is too long"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// `--follow-until`: a duration from now (`2h`), a time with its offset
/// (`2026-12-03T18:00:00Z`, `...T19:00+01:00`), or a marker file whose
/// appearance ends the follow (a path with a `/`: `./done`, `/data/END`).
pub fn follow_until(s: &str) -> Result<crate::session::client::send::FollowUntil, String> {
    use crate::session::client::send::FollowUntil;
    if let Ok(d) = duration(s) {
        return Ok(FollowUntil::At(std::time::SystemTime::now() + d));
    }
    if let Some(t) = timestamp(s) {
        return Ok(FollowUntil::At(t));
    }
    if s.contains('/') {
        return Ok(FollowUntil::Marker(s.into()));
    }
    Err(format!(
        "'{s}' is no duration (2h), time (2026-12-03T18:00:00Z) or marker path (./done: a path with a '/')"
    ))
}

/// `YYYY-MM-DDTHH:MM[:SS](Z|+HH:MM|-HH:MM)` as a time.
fn timestamp(s: &str) -> Option<std::time::SystemTime> {
    let (date, rest) = s.split_once(['T', ' '])?;
    let num = |t: &str| t.parse::<i64>().ok();
    let mut d = date.splitn(3, '-').map(num);
    let (y, mo, day) = (d.next()??, d.next()??, d.next()??);
    let (clock, offset) = match rest.strip_suffix('Z') {
        Some(c) => (c, 0),
        None => {
            let at = rest.rfind(['+', '-'])?;
            let (h, m) = rest[at + 1..].split_once(':')?;
            let sign = if rest.as_bytes()[at] == b'-' { -1 } else { 1 };
            (&rest[..at], sign * (num(h)? * 3600 + num(m)? * 60))
        }
    };
    let mut c = clock.splitn(3, ':').map(num);
    let (h, mi) = (c.next()??, c.next()??);
    let sec = c.next().unwrap_or(Some(0))?;
    let ok = (1..=12).contains(&mo) && (1..=31).contains(&day) && h < 24 && mi < 60 && sec < 61;
    let epoch = days_from_civil(y, mo, day) * 86400 + h * 3600 + mi * 60 + sec - offset;
    let secs = u64::try_from(epoch).ok().filter(|_| ok)?;
    Some(std::time::UNIX_EPOCH + Duration::from_secs(secs))
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar
/// (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follow_until_takes_a_duration_a_time_or_a_marker_path() {
        use crate::session::client::send::FollowUntil;
        let at = |s: &str| match follow_until(s) {
            Ok(FollowUntil::At(t)) => t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs(),
            other => panic!("{s}: {other:?}"),
        };
        assert_eq!(at("2026-12-03T18:00:00Z"), 1_796_320_800);
        assert_eq!(at("2026-12-03T19:00+01:00"), 1_796_320_800);
        assert_eq!(at("2000-03-01T00:00:00Z"), 951_868_800);
        let soon = at("90s");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        assert!((now + 89..=now + 91).contains(&soon));
        assert_eq!(
            follow_until("./done"),
            Ok(FollowUntil::Marker("./done".into()))
        );
        let e = follow_until("done").unwrap_err();
        assert!(e.contains("a path with a '/'"), "{e}");
        assert!(follow_until("2026-13-03T18:00:00Z").is_err());
    }

    #[test]
    fn rates_keep_the_unit_given() {
        use crate::coord::units::RateUnit;
        let unit = |s: &str| rate(s).unwrap().unit;
        for bits in ["4Gbit", "4Gb/s", "4G", "4Gbps", "1gbit", "8M", "450"] {
            assert_eq!(unit(bits), RateUnit::Gbit, "{bits}");
        }
        assert_eq!(unit("450MiB"), RateUnit::Mib);
        assert_eq!(unit("500MB/s"), RateUnit::Mb);
        assert_eq!(unit("500MBps"), RateUnit::Mb);
    }

    #[test]
    fn a_rate_echoes_in_the_unit_given_then_the_other() {
        assert_eq!(rate("8M").unwrap().echo(), "8.00 Mb/s (1.00 MB/s)");
        assert_eq!(rate("1MB").unwrap().echo(), "1.00 MB/s (8.00 Mb/s)");
        assert_eq!(rate("450MiB").unwrap().echo(), "450 MiB/s (3.77 Gb/s)");
    }

    #[test]
    fn sizes() {
        assert_eq!(size("1M"), Ok(1 << 20));
        assert_eq!(size("4k"), Ok(4096));
        assert_eq!(size("4KiB"), Ok(4096));
        assert_eq!(size("2GB"), Ok(2_000_000_000));
        assert_eq!(size("512"), Ok(512));
        assert_eq!(size("1.5G"), Ok(3 << 29));
        assert!(size("12Q").unwrap_err().contains("unknown size unit 'Q'"));
        assert!(size("abc").is_err());
        assert!(size("0.3").is_err());
        assert!(size("99999999T").is_err());
    }

    #[test]
    fn rates_are_bits_unless_a_b_says_bytes() {
        let bps = |s: &str| rate(s).unwrap().bytes_per_s;
        // Bits: iperf3's -b, tc's spelling in any case, a bare number.
        for four_g in [
            "4G",
            "4g",
            "4Gb",
            "4gb",
            "4gbit",
            "4Gbit",
            "4GBIT",
            "4Gbits",
            "4Gbps",
            "4gbps",
            "4Gbit/s",
            "4Gb/s",
            "4G/s",
            "4000M",
            "4000Mbit",
            "4000000k",
            "4000000kbit",
            "4000000000",
            "4000000000bit",
            "4000000000b/s",
        ] {
            assert_eq!(bps(four_g), 5e8, "{four_g}");
        }
        assert_eq!(bps("1gbit"), 1.25e8);
        assert_eq!(bps("1Gb"), 1.25e8);
        assert_eq!(bps("500M"), 62.5e6);
        assert_eq!(bps("8kbit"), 1000.0);
        assert_eq!(bps("1T"), 1.25e11);
        assert_eq!(bps("1Mibit"), 1048576.0 / 8.0);
        // Bytes: a B says so.
        assert_eq!(bps("500MB"), 5e8);
        assert_eq!(bps("500MB/s"), 5e8);
        assert_eq!(bps("500MBps"), 5e8);
        assert_eq!(bps("2GB"), 2e9);
        assert_eq!(bps("1kB"), 1e3);
        assert_eq!(bps("1KB"), 1e3);
        assert_eq!(bps("100B"), 100.0);
        assert_eq!(bps("450MiB"), 450.0 * 1048576.0);
        assert_eq!(bps("450MiB/s"), 450.0 * 1048576.0);
        assert_eq!(bps("1GiB"), 1073741824.0);
        assert_eq!(bps("1KiB"), 1024.0);
        assert_eq!(bps("1.5Gbit"), 1.875e8);
        for bad in [
            "4Q", "4Gbyte", "fast", "4 G bit", "4Gi", "4ibit", "ps", "4xps",
        ] {
            let e = rate(bad).unwrap_err();
            assert!(e.contains("rate") || e.contains("number"), "{bad}: {e}");
        }
        assert!(rate("4Qbit")
            .unwrap_err()
            .contains("bits: 4G, 4Gbit, 4Gbps, 1gbit; bytes: 500MB, 450MiB"));
    }

    #[test]
    fn durations() {
        assert_eq!(duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(duration("3"), Ok(Duration::from_secs(3)));
        assert!(duration("2 weeks").is_err());
    }
}
