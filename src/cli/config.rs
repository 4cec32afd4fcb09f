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
    pub max_streams: u16,
    pub max_files: u32,
    pub max_buffer_memory: u64,
    pub require_encryption: bool,
    pub metrics: Option<String>,
    pub log_format: LogFormatArg,
    pub state_dir: PathBuf,
    pub unsafe_links: LinksArg,
    pub keep_setid: bool,
    pub pull_only: bool,
    pub max_manifest_memory: u64,
    pub min_rate_bytes_per_s: u64,
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
    max_streams: Option<Spanned<u64>>,
    max_files: Option<Spanned<u64>>,
    max_buffer_memory: Option<Spanned<Amount>>,
    require_encryption: Option<Spanned<bool>>,
    metrics: Option<Spanned<String>>,
    log_format: Option<Spanned<LogFormatArg>>,
    state_dir: Option<Spanned<PathBuf>>,
    unsafe_links: Option<Spanned<LinksArg>>,
    keep_setid: Option<Spanned<bool>>,
    pull_only: Option<Spanned<bool>>,
    max_manifest_memory: Option<Spanned<Amount>>,
    min_rate: Option<Spanned<String>>,
}

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

fn count<T: TryFrom<u64>>(
    path: &Path,
    text: &str,
    key: &str,
    v: Spanned<u64>,
    min: u64,
    max: u64,
) -> Result<T, String> {
    let span = v.span();
    let n = v.into_inner();
    if n < min || n > max {
        return Err(at(
            path,
            text,
            span,
            format!("{key} = {n}: must be {min} to {max}"),
        ));
    }
    T::try_from(n).map_err(|_| at(path, text, span, format!("{key} = {n}: out of range")))
}

/// Read and check `path`.
fn load(path: &Path) -> Result<(RecvFile, String), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let file: RecvFile = toml::from_str(&text).map_err(|e| match e.span() {
        Some(span) => at(path, &text, span, e.message()),
        None => format!("{}: {}", path.display(), e.message()),
    })?;
    Ok((file, text))
}

/// Merge the command line `a` over its `--config` file over the defaults.
pub fn resolve(a: &RecvArgs) -> Result<RecvSettings, String> {
    let (f, text, path) = match &a.config {
        Some(p) => {
            let (f, text) = load(p)?;
            (f, text, p.clone())
        }
        None => (RecvFile::default(), String::new(), PathBuf::new()),
    };
    let (p, t) = (path.as_path(), text.as_str());
    let inner = |v: Option<Spanned<String>>| v.map(Spanned::into_inner);
    let root = match (&a.root, f.root) {
        (Some(r), _) => r.clone(),
        (None, Some(r)) => r.into_inner(),
        (None, None) => {
            return Err("--root DIR is required (or `root` in the --config file)".into())
        }
    };
    let key_file = match (&a.key_file, f.key_file) {
        (Some(k), _) => k.clone(),
        (None, Some(k)) => k.into_inner(),
        (None, None) => {
            return Err("--key-file FILE is required (or `key_file` in the --config file)".into())
        }
    };
    let dur =
        |cli: Option<Duration>, v: Option<Spanned<Amount>>, key: &str, default: u64| match (cli, v)
        {
            (Some(d), _) => Ok(d),
            (None, Some(v)) => duration(p, t, key, v),
            (None, None) => Ok(Duration::from_secs(default)),
        };
    Ok(RecvSettings {
        listen: a
            .listen
            .clone()
            .or(inner(f.listen))
            .unwrap_or_else(|| "0.0.0.0:7878".into()),
        root,
        key_file,
        direct: a
            .direct
            .or(f.direct.map(Spanned::into_inner))
            .unwrap_or(DirectArg::Auto),
        interval: dur(a.interval, f.interval, "interval", 5)?,
        handshake_timeout: dur(
            a.handshake_timeout,
            f.handshake_timeout,
            "handshake_timeout",
            10,
        )?,
        timeout: dur(a.timeout, f.timeout, "timeout", 60)?,
        max_sessions: match (a.max_sessions, f.max_sessions) {
            (Some(n), _) => n,
            (None, Some(v)) => count(p, t, "max_sessions", v, 1, 1 << 20)?,
            (None, None) => 64,
        },
        max_connections: match (a.max_connections, f.max_connections) {
            (Some(n), _) => n,
            (None, Some(v)) => count(p, t, "max_connections", v, 1, 1 << 20)?,
            (None, None) => 1024,
        },
        max_streams: match (a.max_streams, f.max_streams) {
            (Some(n), _) => n,
            (None, Some(v)) => count(p, t, "max_streams", v, 1, 256)?,
            (None, None) => 64,
        },
        max_files: match (a.max_files, f.max_files) {
            (Some(n), _) => n,
            (None, Some(v)) => count(p, t, "max_files", v, 1, u64::from(u32::MAX))?,
            (None, None) => 10_000_000,
        },
        max_buffer_memory: match (a.max_buffer_memory, f.max_buffer_memory) {
            (Some(n), _) => n,
            (None, Some(v)) => size(p, t, "max_buffer_memory", v)?,
            (None, None) => 4 << 30,
        },
        require_encryption: a.require_encryption
            || f.require_encryption.is_some_and(Spanned::into_inner),
        metrics: a.metrics.clone().or(inner(f.metrics)),
        log_format: a
            .log_format
            .or(f.log_format.map(Spanned::into_inner))
            .unwrap_or(LogFormatArg::Text),
        state_dir: a
            .state_dir
            .clone()
            .or(f.state_dir.map(Spanned::into_inner))
            .unwrap_or_else(crate::session::secret::default_state_dir),
        unsafe_links: a
            .unsafe_links
            .or(f.unsafe_links.map(Spanned::into_inner))
            .unwrap_or(LinksArg::Keep),
        keep_setid: a.keep_setid || f.keep_setid.is_some_and(Spanned::into_inner),
        pull_only: a.pull_only || f.pull_only.is_some_and(Spanned::into_inner),
        max_manifest_memory: match (a.max_manifest_memory, f.max_manifest_memory) {
            (Some(n), _) => n,
            (None, Some(v)) => size(p, t, "max_manifest_memory", v)?,
            (None, None) => 1 << 30,
        },
        min_rate_bytes_per_s: match (a.min_rate, f.min_rate) {
            (Some(r), _) => r as u64,
            (None, Some(v)) => {
                let span = v.span();
                parse::rate(v.get_ref()).map_err(|e| at(p, t, span, format!("min_rate: {e}")))?
                    as u64
            }
            (None, None) => crate::session::MIN_RATE_BYTES_PER_S,
        },
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
}
