//! `urmove recv --config FILE`: a TOML file whose keys are the daemon's
//! option names (with underscores). Options on the command line win over the
//! file, the file over the defaults. A bad file is refused before anything
//! starts, naming the line and the reason.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::args::{DirectArg, LinksArg, LogFormatArg, RecvArgs};
use super::parse;

/// Everything `recv` runs with, once the command line, the file and the
/// defaults are merged.
#[derive(Debug, Clone)]
pub struct RecvSettings {
    pub listen: String,
    pub root: PathBuf,
    pub key_file: PathBuf,
    pub direct: DirectArg,
    pub interval: Duration,
    pub handshake_timeout: Duration,
    pub timeout: Duration,
    pub max_sessions: usize,
    pub max_connections: usize,
    pub max_unauthenticated_per_address: usize,
    pub max_streams: u16,
    pub max_files: u32,
    pub max_buffer_memory: u64,
    pub require_encryption: bool,
    pub metrics: Option<String>,
    pub log_format: LogFormatArg,
    pub state_dir: PathBuf,
    pub unsafe_links: LinksArg,
    pub keep_setid: bool,
    pub devices: bool,
    pub pull_only: bool,
    pub udp: bool,
    pub udp_time_max: Duration,
    pub cc: crate::datapath::tcp::Congestion,
    pub lanes: crate::session::link::lanes::Lanes,
    pub max_manifest_memory: u64,
    /// `min_rate`, in the unit given.
    pub min_rate: parse::Rate,
    pub part_max_age: Duration,
    /// The HTTPS front (`--http` and its companions).
    pub http: HttpSettings,
}

/// `--http` and its companions, each from the command line or the file.
#[derive(Debug, Clone, Default)]
pub struct HttpSettings {
    pub listen: Option<String>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub ca: Option<PathBuf>,
    pub token_issuers: Option<PathBuf>,
}

/// The HTTPS front's settings: the command line over the file.
fn http_settings(a: &RecvArgs, f: &mut RecvFile) -> HttpSettings {
    HttpSettings {
        listen: either(a.http.clone(), f.http.take()),
        cert: either(a.http_cert.clone(), f.http_cert.take()),
        key: either(a.http_key.clone(), f.http_key.take()),
        ca: either(a.http_ca.clone(), f.http_ca.take()),
        token_issuers: either(a.token_issuers.clone(), f.token_issuers.take()),
    }
}

/// The daemon's `min_rate` unless one is given: 8 kbit/s.
pub fn min_rate_default() -> parse::Rate {
    let bytes_per_s = crate::session::MIN_RATE_BYTES_PER_S as f64;
    parse::Rate {
        bytes_per_s,
        unit: crate::coord::units::RateUnit::Gbit,
    }
}

/// A number, or a string with a unit ("4G", "30s").
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Amount {
    Number(u64),
    Text(String),
}

/// The file as written: each value keeps where it stood, for errors.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecvFile {
    listen: Option<Spanned<String>>,
    root: Option<Spanned<PathBuf>>,
    key_file: Option<Spanned<PathBuf>>,
    direct: Option<Spanned<DirectArg>>,
    interval: Option<Spanned<Amount>>,
    handshake_timeout: Option<Spanned<Amount>>,
    timeout: Option<Spanned<Amount>>,
    max_sessions: Option<Spanned<u64>>,
    max_connections: Option<Spanned<u64>>,
    max_unauthenticated_per_address: Option<Spanned<u64>>,
    max_streams: Option<Spanned<u64>>,
    max_files: Option<Spanned<u64>>,
    max_buffer_memory: Option<Spanned<Amount>>,
    require_encryption: Option<Spanned<bool>>,
    metrics: Option<Spanned<String>>,
    log_format: Option<Spanned<LogFormatArg>>,
    state_dir: Option<Spanned<PathBuf>>,
    unsafe_links: Option<Spanned<LinksArg>>,
    keep_setid: Option<Spanned<bool>>,
    devices: Option<Spanned<bool>>,
    pull_only: Option<Spanned<bool>>,
    udp: Option<Spanned<bool>>,
    udp_time_max: Option<Spanned<Amount>>,
    cc: Option<Spanned<String>>,
    lanes: Option<Spanned<Amount>>,
    max_manifest_memory: Option<Spanned<Amount>>,
    min_rate: Option<Spanned<String>>,
    part_max_age: Option<Spanned<Amount>>,
    http: Option<Spanned<String>>,
    http_cert: Option<Spanned<PathBuf>>,
    http_key: Option<Spanned<PathBuf>>,
    http_ca: Option<Spanned<PathBuf>>,
    token_issuers: Option<Spanned<PathBuf>>,
}

/// Every key of the file (each a field of [`RecvFile`], and the `recv`
/// option of that name), with its default as it would be written in the
/// file, or `None` where there is none to write (required, off, or worked
/// out from other settings). `urmove man` lists them from here, with each
/// option's help; the tests hold this table to the parser and the defaults.
pub const KEYS: &[(&str, Option<&str>)] = &[
    ("listen", Some("\"0.0.0.0:7878\"")),
    ("root", None),
    ("key_file", None),
    ("direct", Some("\"auto\"")),
    ("interval", Some("\"5s\"")),
    ("handshake_timeout", Some("\"10s\"")),
    ("timeout", Some("\"60s\"")),
    ("max_sessions", Some("64")),
    ("max_connections", Some("1024")),
    ("max_unauthenticated_per_address", None),
    ("max_streams", Some("64")),
    ("max_files", Some("10000000")),
    ("max_buffer_memory", Some("\"4G\"")),
    ("require_encryption", Some("false")),
    ("metrics", None),
    ("log_format", Some("\"text\"")),
    ("state_dir", None),
    ("unsafe_links", Some("\"keep\"")),
    ("keep_setid", Some("false")),
    ("devices", Some("false")),
    ("pull_only", Some("false")),
    ("udp", Some("false")),
    ("udp_time_max", Some("\"10m\"")),
    ("cc", Some("\"auto\"")),
    ("lanes", Some("\"auto\"")),
    ("max_manifest_memory", Some("\"2G\"")),
    ("min_rate", Some("\"8kbit\"")),
    ("part_max_age", Some("\"7d\"")),
    ("http", None),
    ("http_cert", None),
    ("http_key", None),
    ("http_ca", None),
    ("token_issuers", None),
];

/// A refusal naming the file, the line and the reason.
fn at(path: &Path, text: &str, span: Range<usize>, reason: impl std::fmt::Display) -> String {
    let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
    format!("{}, line {line}: {reason}", path.display())
}

fn duration(path: &Path, text: &str, key: &str, v: Spanned<Amount>) -> Result<Duration, String> {
    let span = v.span();
    match v.into_inner() {
        Amount::Number(n) => Ok(Duration::from_secs(n)),
        Amount::Text(t) => {
            parse::duration(&t).map_err(|e| at(path, text, span, format!("{key}: {e}")))
        }
    }
}

fn size(path: &Path, text: &str, key: &str, v: Spanned<Amount>) -> Result<u64, String> {
    let span = v.span();
    match v.into_inner() {
        Amount::Number(n) => Ok(n),
        Amount::Text(t) => parse::size(&t).map_err(|e| at(path, text, span, format!("{key}: {e}"))),
    }
}

/// A count setting: its key in the file (the option is the same with
/// dashes), the range the daemon takes and its default. The command line
/// and the file are checked by the same rule, so both refuse with the same
/// words.
struct CountRule {
    key: &'static str,
    min: u64,
    max: u64,
    default: u64,
}

const MAX_SESSIONS: CountRule = CountRule {
    key: "max_sessions",
    min: 1,
    max: 1 << 20,
    default: 64,
};
const MAX_CONNECTIONS: CountRule = CountRule {
    key: "max_connections",
    min: 1,
    max: 1 << 20,
    default: 1024,
};
const MAX_UNAUTHENTICATED_PER_ADDRESS: CountRule = CountRule {
    key: "max_unauthenticated_per_address",
    min: 1,
    max: 1 << 20,
    default: 16,
};
/// [`MAX_UNAUTHENTICATED_PER_ADDRESS`], whose default unless set is room
/// for one client opening all its data streams at once (each is
/// unauthenticated until its proof is read) twice over, and a few
/// handshakes besides.
fn unauthenticated_rule(max_streams: u16) -> CountRule {
    CountRule {
        default: 2 * u64::from(max_streams) + 16,
        ..MAX_UNAUTHENTICATED_PER_ADDRESS
    }
}

const MAX_STREAMS: CountRule = CountRule {
    key: "max_streams",
    min: 1,
    max: 256,
    default: 64,
};
const _: () = assert!(MAX_STREAMS.max == crate::protocol::control::STREAMS_MAX as u64);
const MAX_FILES: CountRule = CountRule {
    key: "max_files",
    min: 1,
    max: u32::MAX as u64,
    default: 10_000_000,
};

/// How a setting is named in a refusal: its key and its option.
fn names(key: &str) -> String {
    format!("{key} (--{})", key.replace('_', "-"))
}

impl CountRule {
    fn check(&self, n: u64) -> Result<u64, String> {
        if n < self.min || n > self.max {
            return Err(format!(
                "{} must be {} to {}, not {n}",
                names(self.key),
                self.min,
                self.max
            ));
        }
        Ok(n)
    }
}

/// The longest `timeout` or `handshake_timeout` taken: a day of silence is
/// no session, and deadlines stay far from overflowing.
const DURATION_SETTING_MAX: Duration = Duration::from_secs(24 * 3600);

/// A duration setting that must be more than zero, with its default.
struct DurationRule {
    key: &'static str,
    default: Duration,
}

const TIMEOUT: DurationRule = DurationRule {
    key: "timeout",
    default: Duration::from_secs(60),
};
const HANDSHAKE_TIMEOUT: DurationRule = DurationRule {
    key: "handshake_timeout",
    default: Duration::from_secs(10),
};
const UDP_TIME_MAX: DurationRule = DurationRule {
    key: "udp_time_max",
    default: Duration::from_secs(600),
};

impl DurationRule {
    fn check(&self, d: Duration) -> Result<Duration, String> {
        if d.is_zero() || d > DURATION_SETTING_MAX {
            return Err(format!(
                "{} must be more than 0 s and at most 24h, not {} s",
                names(self.key),
                d.as_secs_f64()
            ));
        }
        Ok(d)
    }
}

/// The `--config` file a setting may come from, to name its line in a
/// refusal (no path and no text when there is none).
#[derive(Clone, Copy)]
struct Source<'a> {
    path: &'a Path,
    text: &'a str,
}

impl Source<'_> {
    /// The command line's value, else the file's (refused with its line),
    /// else the default; either checked by `rule`.
    fn count(
        self,
        rule: &CountRule,
        cli: Option<u64>,
        file: Option<Spanned<u64>>,
    ) -> Result<u64, String> {
        match (cli, file) {
            (Some(n), _) => rule.check(n),
            (None, Some(v)) => {
                let span = v.span();
                rule.check(v.into_inner())
                    .map_err(|e| at(self.path, self.text, span, e))
            }
            (None, None) => Ok(rule.default),
        }
    }

    /// As [`Source::count`], for a duration.
    fn checked_duration(
        self,
        rule: &DurationRule,
        cli: Option<Duration>,
        file: Option<Spanned<Amount>>,
    ) -> Result<Duration, String> {
        match (cli, file) {
            (Some(d), _) => rule.check(d),
            (None, Some(v)) => {
                let span = v.span();
                let d = duration(self.path, self.text, rule.key, v)?;
                rule.check(d).map_err(|e| at(self.path, self.text, span, e))
            }
            (None, None) => Ok(rule.default),
        }
    }

    /// The command line's duration, else the file's `key` (refused with
    /// its line when it is none), else `default`.
    fn duration(
        self,
        key: &str,
        cli: Option<Duration>,
        file: Option<Spanned<Amount>>,
        default: Duration,
    ) -> Result<Duration, String> {
        match (cli, file) {
            (Some(d), _) => Ok(d),
            (None, Some(v)) => duration(self.path, self.text, key, v),
            (None, None) => Ok(default),
        }
    }

    /// As [`Source::duration`], for a size in bytes.
    fn size(
        self,
        key: &str,
        cli: Option<u64>,
        file: Option<Spanned<Amount>>,
        default: u64,
    ) -> Result<u64, String> {
        match (cli, file) {
            (Some(n), _) => Ok(n),
            (None, Some(v)) => size(self.path, self.text, key, v),
            (None, None) => Ok(default),
        }
    }

    /// The command line's value, else the file's `key` read by `parse`
    /// (refused with its line), else `default`.
    fn parsed<T>(
        self,
        key: &str,
        cli: Option<T>,
        file: Option<Spanned<String>>,
        parse: fn(&str) -> Result<T, String>,
        default: impl FnOnce() -> T,
    ) -> Result<T, String> {
        match (cli, file) {
            (Some(c), _) => Ok(c),
            (None, Some(v)) => {
                let span = v.span();
                parse(v.get_ref())
                    .map_err(|e| at(self.path, self.text, span, format!("{key}: {e}")))
            }
            (None, None) => Ok(default()),
        }
    }
}

/// The command line's value, else the file's.
fn either<T>(cli: Option<T>, file: Option<Spanned<T>>) -> Option<T> {
    cli.or(file.map(Spanned::into_inner))
}

/// A path the daemon cannot start without: `missing` says so.
fn required(
    cli: &Option<PathBuf>,
    file: Option<Spanned<PathBuf>>,
    missing: &str,
) -> Result<PathBuf, String> {
    either(cli.clone(), file).ok_or_else(|| missing.into())
}

impl Amount {
    /// The value as text where it stood (`8` or `"8"` alike).
    fn spanned_text(v: Spanned<Amount>) -> Spanned<String> {
        let span = v.span();
        let text = match v.into_inner() {
            Amount::Number(n) => n.to_string(),
            Amount::Text(t) => t,
        };
        Spanned::new(span, text)
    }
}

/// A `--config` file as read: its settings, and its text and path, to
/// name the line of a refusal (all empty without one).
#[derive(Default)]
struct Loaded {
    file: RecvFile,
    text: String,
    path: PathBuf,
}

/// Read and check `path`.
fn load(path: &Path) -> Result<Loaded, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let file: RecvFile = toml::from_str(&text).map_err(|e| match e.span() {
        Some(span) => {
            let hint = unquoted_amount(&text, span.start);
            at(
                path,
                &text,
                span,
                hint.unwrap_or_else(|| e.message().into()),
            )
        }
        None => format!("{}: {}", path.display(), e.message()),
    })?;
    Ok(Loaded {
        file,
        text,
        path: path.to_path_buf(),
    })
}

/// The line at `offset` when it is `KEY = 2G`: a number with a unit left
/// unquoted, which TOML cannot read. Says how to write it instead.
fn unquoted_amount(text: &str, offset: usize) -> Option<String> {
    let start = text[..offset.min(text.len())]
        .rfind('\n')
        .map_or(0, |i| i + 1);
    let line = text[start..].lines().next()?;
    let line = line.split('#').next()?.trim();
    let (key, value) = line.split_once('=')?;
    let (key, value) = (key.trim(), value.trim());
    let number = value.trim_end_matches(|c: char| c.is_ascii_alphabetic() || c == '/');
    let unquoted = !number.is_empty()
        && number.len() < value.len()
        && number.chars().all(|c| c.is_ascii_digit() || c == '.')
        && key.chars().all(|c| c.is_ascii_lowercase() || c == '_');
    unquoted.then(|| {
        format!("{key}: a value with a unit is text in TOML: quote it: {key} = \"{value}\"")
    })
}

/// Merge the command line `a` over its `--config` file over the defaults.
pub fn resolve(a: &RecvArgs) -> Result<RecvSettings, String> {
    let Loaded {
        file: mut f,
        text,
        path,
    } = match &a.config {
        Some(p) => load(p)?,
        None => Loaded::default(),
    };
    let http = http_settings(a, &mut f);
    let src = Source {
        path: &path,
        text: &text,
    };
    let root = required(
        &a.root,
        f.root,
        "--root DIR is required (or `root` in the --config file)",
    )?;
    let key_file = required(
        &a.key_file,
        f.key_file,
        "--key-file FILE is required (or `key_file` in the --config file)",
    )?;
    let interval = src.duration("interval", a.interval, f.interval, Duration::from_secs(5))?;
    let max_streams = u16::try_from(src.count(&MAX_STREAMS, a.max_streams, f.max_streams)?)
        .expect("checked to be at most 256");
    Ok(RecvSettings {
        listen: either(a.listen.clone(), f.listen).unwrap_or_else(|| "0.0.0.0:7878".into()),
        root,
        key_file,
        direct: either(a.direct, f.direct).unwrap_or(DirectArg::Auto),
        interval,
        handshake_timeout: src.checked_duration(
            &HANDSHAKE_TIMEOUT,
            a.handshake_timeout,
            f.handshake_timeout,
        )?,
        timeout: src.checked_duration(&TIMEOUT, a.timeout, f.timeout)?,
        max_sessions: src.count(&MAX_SESSIONS, a.max_sessions, f.max_sessions)? as usize,
        max_connections: src.count(&MAX_CONNECTIONS, a.max_connections, f.max_connections)?
            as usize,
        max_unauthenticated_per_address: src.count(
            &unauthenticated_rule(max_streams),
            a.max_unauthenticated_per_address,
            f.max_unauthenticated_per_address,
        )? as usize,
        max_streams,
        max_files: u32::try_from(src.count(&MAX_FILES, a.max_files, f.max_files)?)
            .expect("checked to fit in u32"),
        max_buffer_memory: src.size(
            "max_buffer_memory",
            a.max_buffer_memory,
            f.max_buffer_memory,
            4 << 30,
        )?,
        require_encryption: a.require_encryption
            || f.require_encryption.is_some_and(Spanned::into_inner),
        metrics: either(a.metrics.clone(), f.metrics),
        log_format: either(a.log_format, f.log_format).unwrap_or(LogFormatArg::Text),
        state_dir: either(a.state_dir.clone(), f.state_dir)
            .unwrap_or_else(crate::session::link::secret::default_state_dir),
        unsafe_links: either(a.unsafe_links, f.unsafe_links).unwrap_or(LinksArg::Keep),
        keep_setid: a.keep_setid || f.keep_setid.is_some_and(Spanned::into_inner),
        devices: a.devices || f.devices.is_some_and(Spanned::into_inner),
        pull_only: a.pull_only || f.pull_only.is_some_and(Spanned::into_inner),
        udp: a.udp || f.udp.is_some_and(Spanned::into_inner),
        udp_time_max: src.checked_duration(&UDP_TIME_MAX, a.udp_time_max, f.udp_time_max)?,
        cc: src.parsed("cc", a.cc.clone(), f.cc, parse::congestion, || {
            crate::datapath::tcp::Congestion::Auto
        })?,
        lanes: src.parsed(
            "lanes",
            a.lanes,
            f.lanes.map(Amount::spanned_text),
            parse::lanes,
            || crate::session::link::lanes::Lanes::Auto,
        )?,
        max_manifest_memory: src.size(
            "max_manifest_memory",
            a.max_manifest_memory,
            f.max_manifest_memory,
            2 << 30,
        )?,
        min_rate: src.parsed(
            "min_rate",
            a.min_rate,
            f.min_rate,
            parse::rate,
            min_rate_default,
        )?,
        part_max_age: src.duration(
            "part_max_age",
            a.part_max_age,
            f.part_max_age,
            Duration::from_secs(7 * 86400),
        )?,
        http,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(extra: &[&str]) -> RecvArgs {
        let cli =
            crate::cli::args::Cli::try_parse_from(["urmove", "recv"].iter().chain(extra.iter()))
                .unwrap();
        match cli.command {
            crate::cli::args::Command::Recv(a) => a,
            _ => unreachable!(),
        }
    }

    fn with_file(text: &str, extra: &[&str]) -> Result<RecvSettings, String> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("urmove.toml");
        std::fs::write(&p, text).unwrap();
        let mut all = vec!["--config", p.to_str().unwrap()];
        all.extend_from_slice(extra);
        resolve(&args(&all)).map_err(|e| e.replace(p.to_str().unwrap(), "FILE"))
    }

    #[test]
    fn the_file_fills_in_and_the_command_line_wins() {
        let s = with_file(
            "listen = \"127.0.0.1:9000\"\nroot = \"/srv/in\"\nkey_file = \"/etc/k\"\n\
             timeout = \"30s\"\nmax_buffer_memory = \"2G\"\nmax_streams = 8\n\
             require_encryption = true\nlog_format = \"json\"\nmetrics = \"127.0.0.1:9100\"\n",
            &["--listen", "127.0.0.1:9001", "--max-streams", "4"],
        )
        .unwrap();
        assert_eq!(s.listen, "127.0.0.1:9001");
        assert_eq!(s.root, PathBuf::from("/srv/in"));
        assert_eq!(s.timeout, Duration::from_secs(30));
        assert_eq!(s.max_buffer_memory, 2 << 30);
        assert_eq!(s.max_streams, 4);
        assert!(s.require_encryption);
        assert_eq!(s.log_format, LogFormatArg::Json);
        assert_eq!(s.metrics.as_deref(), Some("127.0.0.1:9100"));
        assert_eq!(s.max_sessions, 64, "defaults fill the rest");
    }

    #[test]
    fn a_bad_file_names_the_line_and_the_reason() {
        let base = "root = \"/srv\"\nkey_file = \"/k\"\n";
        for (extra, line, reason) in [
            ("colour = \"blue\"\n", 3, "unknown field `colour`"),
            ("timeout = \"soon\"\n", 3, "timeout"),
            ("max_streams = 999\n", 3, "must be 1 to 256"),
            ("direct = \"sometimes\"\n", 3, "unknown variant"),
            ("listen = \n", 3, ""),
            (
                "\n\nmax_buffer_memory = \"4 parsecs\"\n",
                5,
                "max_buffer_memory",
            ),
        ] {
            let e = with_file(&format!("{base}{extra}"), &[]).unwrap_err();
            assert!(e.starts_with(&format!("FILE, line {line}: ")), "{e}");
            assert!(e.contains(reason), "{e}");
        }
        let e = resolve(&args(&["--root", "/x"])).unwrap_err();
        assert!(e.contains("--key-file"), "{e}");
    }

    #[test]
    fn the_command_line_and_the_file_are_refused_alike() {
        let base = "root = \"/srv\"\nkey_file = \"/k\"\n";
        let count = "must be 1 to 1048576, not 0";
        let time = "must be more than 0 s and at most 24h, not";
        for (key, bad, reason) in [
            (
                "max_sessions",
                "0",
                format!("max_sessions (--max-sessions) {count}"),
            ),
            (
                "max_connections",
                "0",
                format!("max_connections (--max-connections) {count}"),
            ),
            (
                "max_unauthenticated_per_address",
                "0",
                format!(
                    "max_unauthenticated_per_address (--max-unauthenticated-per-address) {count}"
                ),
            ),
            (
                "max_streams",
                "257",
                "max_streams (--max-streams) must be 1 to 256, not 257".into(),
            ),
            (
                "max_streams",
                "0",
                "max_streams (--max-streams) must be 1 to 256, not 0".into(),
            ),
            (
                "max_files",
                "0",
                "max_files (--max-files) must be 1 to 4294967295, not 0".into(),
            ),
            ("timeout", "0", format!("timeout (--timeout) {time} 0 s")),
            (
                "handshake_timeout",
                "0",
                format!("handshake_timeout (--handshake-timeout) {time} 0 s"),
            ),
            (
                "timeout",
                "90000",
                format!("timeout (--timeout) {time} 90000 s"),
            ),
        ] {
            let flag = format!("--{}", key.replace('_', "-"));
            let cli = resolve(&args(&["--root", "/srv", "--key-file", "/k", &flag, bad]));
            assert_eq!(cli.unwrap_err(), reason, "{flag} {bad}");
            let file = with_file(&format!("{base}{key} = {bad}\n"), &[]);
            assert_eq!(
                file.unwrap_err(),
                format!("FILE, line 3: {reason}"),
                "{key} = {bad}"
            );
        }
        // Durations written with a unit are held to the same rule.
        let e = with_file(&format!("{base}\ntimeout = \"0ms\"\n"), &[]).unwrap_err();
        assert_eq!(e, format!("FILE, line 4: timeout (--timeout) {time} 0 s"));
    }

    #[test]
    fn limits_within_their_ranges_are_taken_from_either_source() {
        let s = with_file(
            "root = \"/srv\"\nkey_file = \"/k\"\nmax_unauthenticated_per_address = 3\n\
             handshake_timeout = \"500ms\"\nmax_streams = 256\n",
            &["--max-sessions", "1", "--timeout", "1ms"],
        )
        .unwrap();
        assert_eq!(s.max_unauthenticated_per_address, 3);
        assert_eq!(s.handshake_timeout, Duration::from_millis(500));
        assert_eq!(s.max_streams, 256);
        assert_eq!(s.max_sessions, 1);
        assert_eq!(s.timeout, Duration::from_millis(1));
        let d = resolve(&args(&["--root", "/srv", "--key-file", "/k"])).unwrap();
        assert_eq!(
            d.max_unauthenticated_per_address, 144,
            "the default: 2 x 64 streams + 16"
        );
        assert_eq!(d.handshake_timeout, Duration::from_secs(10));
        assert_eq!(d.timeout, Duration::from_secs(60));
    }

    /// The fields the parser takes, from serde's refusal of an unknown one
    /// ("unknown field `x`, expected one of `listen`, `root`, ...").
    fn parsed_keys() -> Vec<String> {
        let e = toml::from_str::<RecvFile>("not_a_key = 1\n").unwrap_err();
        let msg = e.message().to_string();
        let (_, list) = msg.split_once("expected one of").expect(&msg);
        list.split(',')
            .map(|k| k.trim().trim_matches('`').to_string())
            .collect()
    }

    #[test]
    fn the_key_table_is_the_parsers_and_its_defaults_are_the_daemons() {
        let table: Vec<&str> = KEYS.iter().map(|(k, _)| *k).collect();
        assert_eq!(
            parsed_keys(),
            table,
            "KEYS must list RecvFile's fields in order"
        );
        let cli = ["--root", "/srv", "--key-file", "/k"];
        let none = format!("{:?}", resolve(&args(&cli)).unwrap());
        for (key, default) in KEYS {
            let Some(value) = default else { continue };
            let s = with_file(&format!("{key} = {value}\n"), &cli).unwrap();
            assert_eq!(format!("{s:?}"), none, "{key} = {value} is not the default");
        }
    }

    #[test]
    fn recv_help_names_every_key() {
        use clap::CommandFactory;
        let cmd = crate::cli::args::Cli::command();
        let help = cmd.find_subcommand("recv").unwrap().get_after_help();
        let help = help.map(|h| h.to_string()).unwrap_or_default();
        let named: Vec<&str> = help
            .split(|c: char| !(c.is_ascii_lowercase() || c == '_'))
            .collect();
        for (key, _) in KEYS {
            assert!(named.contains(key), "recv --help does not name {key}");
        }
    }

    #[test]
    fn every_key_of_the_shipped_file_is_in_the_table() {
        let text = include_str!("../../tuning/urmove.toml");
        let shipped: Vec<&str> = text
            .lines()
            .map(|l| l.trim_start_matches(['#', ' ']))
            .filter_map(|l| l.split_once(" = ").map(|(k, _)| k))
            .filter(|k| k.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
            .collect();
        assert!(shipped.len() > 20, "{shipped:?}");
        for key in shipped {
            assert!(KEYS.iter().any(|(k, _)| *k == key), "{key} is not in KEYS");
        }
    }

    #[test]
    fn the_shipped_config_file_is_read_as_it_says() {
        let s = with_file(include_str!("../../tuning/urmove.toml"), &[]).unwrap();
        assert_eq!(s.root, PathBuf::from("/srv/urmove"));
        assert_eq!(s.max_buffer_memory, 2 << 30);
        assert_eq!(s.max_manifest_memory, 2 << 30);
        assert_eq!(s.min_rate.bytes_per_s, 1000.0);
        assert_eq!(s.state_dir, PathBuf::from("/var/lib/urmove"));
        assert_eq!(s.unsafe_links, LinksArg::Keep);
        assert!(!s.keep_setid && !s.pull_only);
        assert_eq!(s.part_max_age, Duration::from_secs(7 * 86400));
        assert_eq!(s.max_unauthenticated_per_address, 144);
    }
}
