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
pub fn lanes(s: &str) -> Result<crate::session::lanes::Lanes, String> {
    use crate::session::lanes::{Lanes, LANES_MAX};
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
        use crate::session::send::{AUTO_CAP, AUTO_START};
        match self {
            Streams::Auto => (AUTO_CAP.max(AUTO_START), true),
            Streams::Count(n) => (n, false),
        }
    }
}

/// `--cc`: `auto` or a congestion control's name.
pub fn congestion(s: &str) -> Result<crate::datapath::tcp::Congestion, String> {
    crate::datapath::tcp::Congestion::parse(s)
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

/// A rate in bytes per second: `4Gbit` (bits, powers of 1000), `500MB`
/// (bytes, powers of 1000), `450MiB` (bytes, powers of 1024); `/s` may follow.
pub fn rate(s: &str) -> Result<f64, String> {
    let (v, unit) = split_number(s)?;
    let unit = unit.strip_suffix("/s").unwrap_or(unit).trim();
    let per_s = match unit {
        "bit" | "b" => v / 8.0,
        "kbit" | "Kbit" | "kb" | "Kb" => v * 1e3 / 8.0,
        "Mbit" | "Mb" => v * 1e6 / 8.0,
        "Gbit" | "Gb" => v * 1e9 / 8.0,
        "Tbit" | "Tb" => v * 1e12 / 8.0,
        "B" => v,
        "kB" | "KB" => v * 1e3,
        "MB" => v * 1e6,
        "GB" => v * 1e9,
        "TB" => v * 1e12,
        "KiB" => v * 1024.0,
        "MiB" => v * 1024.0 * 1024.0,
        "GiB" => v * 1024f64.powi(3),
        "TiB" => v * 1024f64.powi(4),
        "" => {
            return Err(format!(
                "rate '{s}' needs a unit, as 4Gbit, 500MB or 450MiB"
            ))
        }
        _ => {
            return Err(format!(
                "unknown rate unit '{unit}' in '{s}' (use Gbit, Mbit, GB, MB, GiB, MiB)"
            ))
        }
    };
    Ok(per_s)
}

/// A rate as given: bytes per second, and the unit family it was written
/// in, to echo it back in that unit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub bytes_per_s: f64,
    pub unit: crate::coord::units::RateUnit,
}

/// [`rate`], keeping the unit family: bits (`4Gbit`), binary bytes
/// (`450MiB`) or decimal bytes (`500MB`).
pub fn rate_given(s: &str) -> Result<Rate, String> {
    use crate::coord::units::RateUnit;
    let bytes_per_s = rate(s)?;
    let unit = s.trim().trim_end_matches("/s");
    let unit = if unit.ends_with("bit") || unit.ends_with('b') {
        RateUnit::Gbit
    } else if unit.ends_with("iB") {
        RateUnit::Mib
    } else {
        RateUnit::Mb
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
pub fn follow_until(s: &str) -> Result<crate::session::send::FollowUntil, String> {
    use crate::session::send::FollowUntil;
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
        use crate::session::send::FollowUntil;
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
        let unit = |s: &str| rate_given(s).unwrap().unit;
        assert_eq!(unit("4Gbit"), RateUnit::Gbit);
        assert_eq!(unit("4Gb/s"), RateUnit::Gbit);
        assert_eq!(unit("450MiB"), RateUnit::Mib);
        assert_eq!(unit("500MB/s"), RateUnit::Mb);
        assert_eq!(rate_given("4Gbit").unwrap().bytes_per_s, 5e8);
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
    fn rates() {
        assert_eq!(rate("4Gbit"), Ok(5e8));
        assert_eq!(rate("500MB"), Ok(5e8));
        assert_eq!(rate("450MiB/s"), Ok(450.0 * 1048576.0));
        assert!(rate("450").is_err());
        assert!(rate("4Gbps").is_err());
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
