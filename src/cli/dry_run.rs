//! `send --dry-run` and `pull --dry-run`: what a run would move, with
//! sizes, as the receiving side answers it (the daemon of a send; this
//! side of a pull, from the daemon's listing): the files it holds
//! unchanged, whole or in part are not counted as moved, what it would
//! refuse is named and, with `--delete`, what it would remove is listed.
//! Nothing is moved and nothing written on either side (the daemon is
//! asked with `REQ_DRY_RUN`).

use crate::coord::units;
use crate::protocol::manifest::EntryKind;
use crate::protocol::names;
use crate::session::client::config::SendConfig;
use crate::session::client::survey::{survey, survey_pull, Survey};
use crate::session::plan::held::Action;
use crate::session::plan::held::{held_text, HeldCounts};
use crate::session::plan::tree::{scan, Skipped, Tree};

use super::render::{self, Format, Out};
use super::{Failure, EXIT_PARTIAL};

#[derive(serde::Serialize)]
struct Listed {
    path: String,
    kind: &'static str,
    size: u64,
    action: Action,
    bytes_to_send: u64,
}

#[derive(serde::Serialize)]
struct RefusedEntry {
    path: String,
    reason: String,
}

#[derive(serde::Serialize)]
struct DryRun<'a> {
    schema: u32,
    command: &'static str,
    status: &'static str,
    dry_run: bool,
    dest: &'a str,
    /// A pull's paths under the daemon's root.
    #[serde(skip_serializing_if = "Option::is_none")]
    paths: Option<&'a [String]>,
    /// Files that would be sent, whole or their rest.
    files: u64,
    /// Bytes that would be sent.
    bytes: u64,
    bytes_total: u64,
    files_unchanged: u64,
    files_found_complete: u64,
    files_continued: u64,
    entries: Vec<Listed>,
    files_excluded: u64,
    files_skipped: usize,
    skipped: &'a [Skipped],
    refused: Vec<RefusedEntry>,
    files_deleted: usize,
    deleted: &'a [String],
}

fn kind_name(k: EntryKind) -> &'static str {
    k.name()
}

/// Ask the receiver what sending `cfg` would do, and say it; exit 0, or 23
/// when some entries could not be moved (as the real run would).
pub(crate) fn show(cfg: &SendConfig, format: Format) -> Result<u8, Failure> {
    let mut tree =
        scan(&cfg.sources, &cfg.scan).map_err(|e| Failure::Usage(anyhow::anyhow!("{e}")))?;
    // A shard's dry run shows its share.
    if let Some(s) = cfg.shard {
        let block = u64::from(cfg.block_size);
        crate::session::plan::shard::select(&mut tree, s, cfg.split_over, block);
    }
    let side = Side {
        command: "send",
        dest: &cfg.dest,
        paths: None,
    };
    let answer = match survey(cfg, &tree) {
        Ok(a) => a,
        Err(e) => return Err(refused(&side, format, &e)),
    };
    let run = dry_run(cfg, &tree, &answer, side);
    Ok(say(cfg, &run, format))
}

/// `pull --dry-run`: ask the daemon for its listing of `paths`, look here
/// at what a pull into `local` would do, and say it; exit 0, or 23 when
/// some entries could not be moved (as the real run would).
pub(crate) fn show_pull(
    cfg: &SendConfig,
    paths: &[String],
    local: &std::path::Path,
    format: Format,
) -> Result<u8, Failure> {
    let dest = local.display().to_string();
    let side = Side {
        command: "pull",
        dest: &dest,
        paths: Some(paths),
    };
    let (tree, answer) = match survey_pull(cfg, paths, local) {
        Ok(a) => a,
        Err(e) => return Err(refused(&side, format, &e)),
    };
    let run = dry_run(cfg, &tree, &answer, side);
    Ok(say(cfg, &run, format))
}

/// Which run a dry run is of: its command, where it lands (DEST under the
/// daemon's root, or a pull's LOCAL_DIR) and a pull's paths.
struct Side<'a> {
    command: &'static str,
    dest: &'a str,
    paths: Option<&'a [String]>,
}

/// Print a dry run; its exit code: 0, or 23 when entries would be
/// skipped or refused.
fn say(cfg: &SendConfig, run: &DryRun<'_>, format: Format) -> u8 {
    let mut out = Out::default();
    match format {
        Format::Human => print_human(&mut out, cfg, run),
        _ => out.line(&serde_json::to_string_pretty(run).expect("reports serialize")),
    }
    match run.files_skipped + run.refused.len() {
        0 => 0,
        _ => EXIT_PARTIAL,
    }
}

/// A dry run the daemon refused (or never answered): said as the run
/// says it, a JSON document for machines.
fn refused(side: &Side<'_>, format: Format, e: &crate::session::SessionError) -> Failure {
    if format != Format::Human {
        let doc = serde_json::json!({
            "schema": 1, "command": side.command, "status": e.code().name(), "error": e.to_string(),
            "dry_run": true, "dest": side.dest, "files": 0, "bytes": 0,
        });
        Out::default().line(&doc.to_string());
    }
    let why = anyhow::anyhow!("dry run: {e}");
    match e.is_usage() {
        true => Failure::Usage(why),
        false => Failure::Run(why),
    }
}

/// The report of a dry run of `tree`, from the receiving side's `answer`.
fn dry_run<'a>(
    cfg: &'a SendConfig,
    tree: &'a Tree,
    answer: &'a Survey,
    side: Side<'a>,
) -> DryRun<'a> {
    let entries: Vec<Listed> = tree
        .entries
        .iter()
        .zip(&answer.actions)
        .map(|(e, &(action, bytes_to_send))| Listed {
            path: names::shown(&e.path).into_owned(),
            kind: kind_name(e.kind),
            size: e.size,
            action,
            bytes_to_send,
        })
        .collect();
    let count = |a: Action| entries.iter().filter(|e| e.action == a).count() as u64;
    let moving = |e: &&Listed| matches!(e.action, Action::Send | Action::Continue);
    let refused = answer.refused.iter().map(|(i, why)| RefusedEntry {
        path: names::shown(&tree.entries[*i as usize].path).into_owned(),
        reason: why.clone(),
    });
    DryRun {
        schema: 1,
        command: side.command,
        status: "dry-run",
        dry_run: true,
        dest: side.dest,
        paths: side.paths,
        files: entries
            .iter()
            .filter(moving)
            .filter(|e| e.kind == "file")
            .count() as u64,
        bytes: entries.iter().map(|e| e.bytes_to_send).sum(),
        bytes_total: tree.file_bytes_in(u64::from(cfg.block_size)),
        files_unchanged: count(Action::Unchanged),
        files_found_complete: count(Action::Complete),
        files_continued: count(Action::Continue),
        files_excluded: tree.excluded,
        files_skipped: tree.skipped.len(),
        skipped: &tree.skipped,
        refused: refused.collect(),
        files_deleted: answer.deleted.len(),
        deleted: &answer.deleted,
        entries,
    }
}

fn print_human(out: &mut Out, cfg: &SendConfig, run: &DryRun<'_>) {
    for e in &run.entries {
        let (size, note) = match (e.kind, e.action) {
            ("file", Action::Continue) => (
                units::bytes_decimal(e.bytes_to_send),
                format!(
                    "  (the rest: the receiver holds {})",
                    units::bytes_decimal(e.size - e.bytes_to_send)
                ),
            ),
            ("file", Action::Send) => (units::bytes_decimal(e.size), String::new()),
            (k, Action::Send) => (k.to_string(), String::new()),
            _ => continue,
        };
        out.line(&format!("{size:>12}  {}{note}", e.path));
    }
    for path in run.deleted {
        out.line(&format!("{:>12}  {}", "delete", names::shown(path)));
    }
    for s in run.skipped {
        render::warn(&format!("would skip {}: {}", s.path, s.reason));
    }
    let receiver = match run.command {
        "pull" => "this side",
        _ => "the receiver",
    };
    for r in &run.refused {
        render::warn(&format!("{receiver} would refuse {}: {}", r.path, r.reason));
    }
    out.line(&summary(cfg, run));
}

/// The dry run's last line: what would cross, what the receiving side
/// holds and would delete, and that nothing was done.
fn summary(cfg: &SendConfig, run: &DryRun<'_>) -> String {
    let left_out = match run.files_excluded {
        0 => String::new(),
        n => format!(", {} left out by --exclude", units::count(n, "entry")),
    };
    let held = HeldCounts {
        unchanged: run.files_unchanged,
        found: run.files_found_complete,
        continued: run.files_continued,
    };
    let held = match (held, run.command) {
        (h, _) if h.is_empty() => String::new(),
        (h, "pull") => format!(
            "; this side holds {}",
            held_text(h).replace("the receiver's", "its")
        ),
        (h, _) => format!("; the receiver holds {}", held_text(h)),
    };
    let deleted = match run.files_deleted {
        0 => String::new(),
        n => format!("; would delete {}", units::count(n as u64, "entry")),
    };
    let files = units::count(run.files, "file");
    let bytes = units::bytes_both(run.bytes);
    // Through ssh the paths are the remote's own, from its `/`.
    let (host, lead) = match &cfg.login {
        Some(login) => (login.as_str(), "/"),
        None => (cfg.host.as_str(), ""),
    };
    let whither = match (run.command, run.paths) {
        ("pull", Some(paths)) => format!(
            "would pull {files}, {bytes} from {host}:{} into {}",
            paths
                .iter()
                .map(|p| format!("{lead}{p}"))
                .collect::<Vec<_>>()
                .join(" "),
            run.dest
        ),
        _ => format!(
            "would send {files}, {bytes} to {host}:{}",
            match (run.dest.is_empty(), lead) {
                (true, "") => "(its root)".to_string(),
                _ => format!("{lead}{}", run.dest),
            }
        ),
    };
    format!("dry run: {whither}{left_out}{held}{deleted}; nothing was sent or written")
}
