//! `send --dry-run`: the manifest a send would move, with sizes, and what
//! it would leave out, read from this side only. Nothing is sent, nothing
//! written, and the receiver is not contacted.

use crate::coord::units;
use crate::protocol::manifest::EntryKind;
use crate::protocol::names;
use crate::session::send::SendConfig;
use crate::session::tree::{scan, Skipped};

use super::render::{self, Format, Out};
use super::{Failure, EXIT_PARTIAL};

#[derive(serde::Serialize)]
struct Listed {
    path: String,
    kind: &'static str,
    size: u64,
}

#[derive(serde::Serialize)]
struct DryRun<'a> {
    schema: u32,
    command: &'static str,
    status: &'static str,
    dry_run: bool,
    dest: &'a str,
    files: u64,
    bytes: u64,
    entries: Vec<Listed>,
    files_excluded: u64,
    files_skipped: usize,
    skipped: &'a [Skipped],
}

fn kind_name(k: EntryKind) -> &'static str {
    match k {
        EntryKind::File => "file",
        EntryKind::Dir => "dir",
        EntryKind::Symlink => "symlink",
        EntryKind::HardLink => "hard link",
    }
}

/// List what `cfg` would send; exit 0, or 23 when some entries could not
/// be moved (as the real run would).
pub(crate) fn show(cfg: &SendConfig, format: Format) -> Result<u8, Failure> {
    let tree = scan(&cfg.sources, &cfg.scan).map_err(|e| Failure::Usage(anyhow::anyhow!("{e}")))?;
    let entries: Vec<Listed> = tree
        .entries
        .iter()
        .map(|e| Listed {
            path: names::shown(&e.path).into_owned(),
            kind: kind_name(e.kind),
            size: e.size,
        })
        .collect();
    let run = DryRun {
        schema: 1,
        command: "send",
        status: "dry-run",
        dry_run: true,
        dest: &cfg.dest,
        files: tree.file_count() as u64,
        bytes: tree.file_bytes(),
        entries,
        files_excluded: tree.excluded,
        files_skipped: tree.skipped.len(),
        skipped: &tree.skipped,
    };
    let mut out = Out::default();
    match format {
        Format::Human => print_human(&mut out, cfg, &run),
        _ => out.line(&serde_json::to_string_pretty(&run).expect("reports serialize")),
    }
    Ok(if tree.skipped.is_empty() {
        0
    } else {
        EXIT_PARTIAL
    })
}

fn print_human(out: &mut Out, cfg: &SendConfig, run: &DryRun<'_>) {
    for e in &run.entries {
        let size = match e.kind {
            "file" => units::bytes_decimal(e.size),
            k => k.to_string(),
        };
        out.line(&format!("{size:>12}  {}", e.path));
    }
    for s in run.skipped {
        render::warn(&format!("would skip {}: {}", s.path, s.reason));
    }
    let left_out = match run.files_excluded {
        0 => String::new(),
        n => format!(", {} left out by --exclude", units::count(n, "entry")),
    };
    out.line(&format!(
        "dry run: would send {}, {} to {}:{}{left_out}; nothing was sent or written, and the receiver was not asked what it holds (a real run skips the files it has unchanged)",
        units::count(run.files, "file"),
        units::bytes_both(run.bytes),
        cfg.host,
        if cfg.dest.is_empty() { "(its root)" } else { &cfg.dest },
    ));
}
