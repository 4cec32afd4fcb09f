//! What a `send` or `pull` command line aims at: its `HOST:PATH`
//! arguments read as scp and rsync read them (a directory's contents as
//! `DIR/`, one file taking the name given), `--files-from` lists, and the
//! refusals that say what to give instead.

use std::path::PathBuf;

use anyhow::Context;

use crate::cli::args::{PullArgs, SendArgs};
use crate::cli::Failure;

use super::above_zero;

/// `HOST:DEST`, with `[v6]:DEST` for IPv6 literals; a `:` after a `/` is
/// part of a local path (`./a:b`), as scp reads it.
fn split_target(t: &str) -> Option<(String, String)> {
    if let Some(rest) = t.strip_prefix('[') {
        let (host, dest) = rest.split_once("]:")?;
        return Some((host.to_string(), dest.to_string()));
    }
    let (host, dest) = t.split_once(':')?;
    (!host.is_empty() && !host.contains('/')).then(|| (host.to_string(), dest.to_string()))
}

/// How a refusal names a path on the daemon: what the command line calls
/// it, and the side whose root it is under.
struct Remote {
    what: &'static str,
    whose: &'static str,
}

/// A send's `DEST`.
const SEND_DEST: Remote = Remote {
    what: "DEST",
    whose: "receiver",
};

/// A pull's `PATH`.
const PULL_PATH: Remote = Remote {
    what: "PATH",
    whose: "daemon",
};

/// `HOST:PATH` as the user wrote it, and the relative path to give
/// instead of an absolute one: urmove's paths are beneath the daemon's
/// root (`--root`), and the daemon refuses absolute ones.
fn beneath_root(host: &str, path: &str, remote: &Remote) -> Result<(), Failure> {
    if !path.starts_with('/') {
        return Ok(());
    }
    let host = match host.contains(':') {
        true => format!("[{host}]"),
        false => host.to_string(),
    };
    let rel = path.trim_start_matches('/');
    let instead = match rel {
        "" => format!("{host}: for the root itself"),
        rel => format!("{host}:{rel} for ROOT/{rel}"),
    };
    let Remote { what, whose } = remote;
    Err(Failure::Usage(anyhow::anyhow!(
        "{host}:{path}: an absolute path is refused: {what} is relative to the {whose}'s root (its --root); give {instead}"
    )))
}

/// The refusal of a `send` whose last argument is no `HOST:DEST`: when a
/// source names a host, the user meant `pull`.
fn no_target(target: &str, sources: &[String]) -> Failure {
    let remote = sources.iter().any(|s| split_target(s).is_some());
    Failure::Usage(anyhow::anyhow!(match remote {
        true => format!(
            "{target}: the last argument must be HOST:DEST, and {} names a host: to fetch from it into {target}, run `urmove pull {} {target}` (with the same options)",
            sources.iter().find(|s| split_target(s).is_some()).expect("one does"),
            sources.join(" ")
        ),
        false => format!("{target}: the last argument must be HOST:DEST (DEST may be empty)"),
    }))
}

/// The refusal of a `pull` argument that is no `HOST:PATH`: when the last
/// argument names a host, the user meant `send`.
fn no_source(arg: &str, remotes: &[String], local: &str) -> Failure {
    Failure::Usage(anyhow::anyhow!(match split_target(local) {
        Some(_) => format!(
            "{arg}: expected HOST:PATH, and the last argument {local} names a host: to push {arg} to it, run `urmove send {} {local}` (with the same options)",
            remotes.join(" ")
        ),
        None => format!("{arg}: expected HOST:PATH"),
    }))
}

/// What a send moves where.
pub(super) struct SendAim {
    /// The target as given (`HOST:DEST`).
    pub target: String,
    pub host: String,
    pub dest: String,
    pub sources: Vec<PathBuf>,
}

/// What `a` sends where, its rates checked; `over_ssh`, DEST may be
/// absolute (scp's way).
pub(super) fn send_what(a: &SendArgs, over_ssh: bool) -> Result<SendAim, Failure> {
    let usage = |m: String| Failure::Usage(anyhow::anyhow!(m));
    let (target, sources) = a.args.split_last().expect("clap requires two or more");
    let (host, dest) = split_target(target).ok_or_else(|| no_target(target, sources))?;
    if !over_ssh {
        beneath_root(&host, &dest, &SEND_DEST)?;
    }
    let mut sources: Vec<PathBuf> = sources.iter().map(PathBuf::from).collect();
    if let Some(list) = &a.transfer.files_from {
        // A listed path is itself: a trailing / changes nothing there.
        let listed = listed_paths(list)?.into_iter();
        sources.extend(listed.map(|p| PathBuf::from(p.trim_end_matches('/'))));
    }
    if sources.is_empty() {
        return Err(usage(
            "nothing to send: give SOURCE... or --files-from FILE before HOST:DEST".into(),
        ));
    }
    above_zero("--rate-limit", a.transfer.rate_limit)?;
    above_zero("--min-rate", a.min_rate)?;
    if a.window.is_zero() {
        return Err(usage("--window must be above zero".into()));
    }
    Ok(SendAim {
        target: target.clone(),
        host,
        dest,
        sources,
    })
}

/// How rsync's habits shape a send.
pub(super) struct Shape {
    /// A source is a directory's contents (`DIR/`).
    pub contents: bool,
    /// One file may take DEST's name (one source, no directory, DEST not
    /// ending in `/`; the receiver renames it only where DEST is no
    /// directory).
    pub one_file: bool,
}

/// The [`Shape`] of a send of `aim`. What urmove does not do as rsync
/// would is refused, saying so.
pub(super) fn send_shape(a: &SendArgs, aim: &SendAim) -> Result<Shape, Failure> {
    use crate::session::plan::tree::is_contents;
    let (dest, sources) = (aim.dest.as_str(), aim.sources.as_slice());
    let usage = |m: String| Err(Failure::Usage(anyhow::anyhow!(m)));
    let contents = sources.iter().find(|s| is_contents(s));
    if let (Some(dir), true) = (contents, a.follow) {
        return usage(format!(
            "--follow takes each directory as itself, not its contents: give {} without the trailing / (it then arrives under DEST as itself)",
            dir.display()
        ));
    }
    let deletes = super::deletes(&a.transfer);
    if contents.is_some() && deletes && matches!(dest.trim_matches('/'), "" | ".") {
        return usage(
            "--delete of a directory's contents (DIR/) into the receiver's root itself would remove everything else under the root: give HOST:DEST"
                .into(),
        );
    }
    let one_file = match sources {
        [one] => std::fs::symlink_metadata(one).is_ok_and(|m| !m.is_dir()) && !is_contents(one),
        _ => false,
    };
    Ok(Shape {
        contents: contents.is_some(),
        one_file: one_file && !dest.is_empty() && !dest.ends_with('/'),
    })
}

/// What a pull fetches from where.
pub(super) struct PullAim {
    pub host: String,
    /// The paths under the daemon's root (a directory's contents keep
    /// their trailing `/`).
    pub paths: Vec<String>,
    /// One file may take LOCAL's name (one path, neither it nor LOCAL
    /// ending in `/`; it does where LOCAL is no directory).
    pub one_file: bool,
}

/// What `a` pulls from where; `over_ssh`, a PATH may be absolute.
pub(super) fn pull_what(a: &PullArgs, over_ssh: bool) -> Result<PullAim, Failure> {
    let (local, remotes) = a.args.split_last().expect("clap requires two or more");
    let mut host = None;
    let mut paths = Vec::new();
    for r in remotes {
        let (h, p) = split_target(r).ok_or_else(|| no_source(r, remotes, local))?;
        if host.as_ref().is_some_and(|prev| prev != &h) {
            return Err(Failure::Usage(anyhow::anyhow!(
                "all HOST:PATH arguments of one pull name the same host"
            )));
        }
        if !over_ssh {
            beneath_root(&h, &p, &PULL_PATH)?;
        }
        host = Some(h);
        let contents = if p.ends_with('/') { "/" } else { "" };
        paths.push(format!("{}{contents}", p.trim_end_matches('/')));
    }
    let one_file = matches!(paths.as_slice(), [p] if !p.ends_with('/')) && !local.ends_with('/');
    if let Some(list) = &a.transfer.files_from {
        // A listed path is itself: a trailing / changes nothing there.
        let listed = listed_paths(list)?;
        paths.extend(listed.iter().map(|p| p.trim_end_matches('/').to_string()));
    }
    let one_file = one_file && paths.len() == 1;
    Ok(PullAim {
        host: host.expect("at least one HOST:PATH"),
        paths,
        one_file,
    })
}

/// The lines of a `--files-from` FILE: blank lines and `#` comments
/// skipped.
fn listed_paths(list: &std::path::Path) -> Result<Vec<String>, Failure> {
    let text = std::fs::read_to_string(list)
        .with_context(|| format!("--files-from {}", list.display()))
        .map_err(Failure::Usage)?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `HOST:PATH` as scp reads it: a `:` after a `/` is a local name's.
    #[test]
    fn a_colon_after_a_slash_is_a_local_name() {
        let split = |t: &str| split_target(t);
        assert_eq!(split("dtn2:in"), Some(("dtn2".into(), "in".into())));
        assert_eq!(split("dtn2:"), Some(("dtn2".into(), String::new())));
        assert_eq!(split("[::1]:a/b"), Some(("::1".into(), "a/b".into())));
        assert_eq!(split("./a:b"), None);
        assert_eq!(split("/data/a:b"), None);
        assert_eq!(split(":x"), None);
        assert_eq!(split("local"), None);
    }

    /// An absolute path is refused with the relative one to give.
    #[test]
    fn an_absolute_path_is_refused_saying_what_to_give() {
        let said = |host: &str, path: &str| match beneath_root(host, path, &SEND_DEST) {
            Err(Failure::Usage(e)) => e.to_string(),
            other => panic!("{other:?}"),
        };
        assert!(beneath_root("h", "data/x", &SEND_DEST).is_ok());
        assert!(said("h", "/data/x").ends_with("give h:data/x for ROOT/data/x"));
        assert!(said("h", "//").ends_with("give h: for the root itself"));
        assert!(said("::1", "/x").starts_with("[::1]:/x: an absolute path is refused"));
    }
}
