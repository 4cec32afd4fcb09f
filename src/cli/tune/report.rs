//! What `urmove tune` prints: the `--json` document, and for a human the
//! table of checks and what `--apply` changed.

use std::path::Path;

use serde::Serialize;

use super::apply::Applied;
use super::profile::{self, size};
use super::{Check, Scene, SYSCTL_FILE};
use crate::cli::render::Out;
use crate::datapath::host::Route;

/// The `--json` document (fields in this order).
#[derive(Serialize)]
pub(super) struct Report<'a> {
    pub(super) schema: u32,
    pub(super) status: &'static str,
    pub(super) link: &'static str,
    pub(super) link_bits_per_s: u64,
    pub(super) rtt_ms: f64,
    pub(super) bdp_bytes: u64,
    pub(super) peer: Option<&'a str>,
    pub(super) route: Option<&'a Route>,
    pub(super) target: Option<&'a Path>,
    pub(super) checks: &'a [Check],
    pub(super) summary: Summary,
    pub(super) applied: Option<&'a Applied>,
}

#[derive(Serialize)]
pub(super) struct Summary {
    pub(super) ok: usize,
    pub(super) not_ok: usize,
    pub(super) unknown: usize,
}

pub(super) fn human(out: &mut Out, s: &Scene, checks: &[Check], applying: bool) {
    let p = &s.plan;
    out.line(&format!(
        "urmove tune: {} link, paths up to {} RTT: bandwidth-delay product {:.1} MB ({})",
        p.link.name,
        profile::ms(p.rtt),
        p.bdp_bytes as f64 / 1e6,
        size(p.bdp_bytes)
    ));
    let net = match &s.route {
        Ok(r) => format!("{} ({})", r.dev, r.what),
        Err(e) => format!("not found ({e})"),
    };
    let disk = match (&s.disk, s.target) {
        (Some(Ok(d)), Some(t)) => format!("{} behind {}", d.name, t.display()),
        (Some(Err(_)), Some(t)) => format!("not found behind {}", t.display()),
        _ => "none given (--target PATH)".into(),
    };
    out.line(&format!("network: {net}; disk: {disk}"));
    out.line("");
    // Each column as wide as its widest cell, so the OK column lines up.
    let cap = |v: usize| v;
    let name_w = checks.iter().map(|c| c.name.len()).max().unwrap_or(10);
    let cur_w = cap(checks
        .iter()
        .map(|c| c.current.as_deref().map_or(1, str::len))
        .max()
        .unwrap_or(10));
    let rec_w = cap(checks
        .iter()
        .map(|c| c.recommended.len())
        .max()
        .unwrap_or(10));
    out.line(&format!(
        "{:name_w$}  {:cur_w$}  {:rec_w$}  OK",
        "CHECK", "CURRENT", "RECOMMENDED"
    ));
    for c in checks {
        let ok = match c.ok {
            Some(true) => "ok",
            Some(false) => "NO",
            None => "?",
        };
        out.line(&format!(
            "{:name_w$}  {:cur_w$}  {:rec_w$}  {ok}",
            c.name,
            c.current.as_deref().unwrap_or("-"),
            c.recommended
        ));
        out.line(&format!("    {} [{}]", c.why, c.source));
    }
    let count = |want: Option<bool>| checks.iter().filter(|c| c.ok == want).count();
    out.line("");
    let mut end = format!(
        "{} ok, {} to change, {} not visible or not applicable.",
        count(Some(true)),
        count(Some(false)),
        count(None)
    );
    if !applying && count(Some(false)) > 0 {
        end += &format!(
            " `urmove tune --apply{}` (root) writes {SYSCTL_FILE} and loads it{}.",
            if p.link.name == "10G" {
                String::new()
            } else {
                format!(" --link {}", p.link.name)
            },
            if s.disk.is_some() {
                ", and sets the disk's scheduler and read-ahead"
            } else {
                ""
            }
        );
    }
    out.line(&end);
}

pub(super) fn human_applied(out: &mut Out, ap: &Applied) {
    out.line("");
    let file = ap.sysctl_file.display();
    out.line(&if !ap.file_written {
        format!("urmove tune --apply: could not write {file}")
    } else if ap.loaded {
        format!("urmove tune --apply: wrote {file} and loaded it")
    } else {
        format!("urmove tune --apply: wrote {file}; not loaded (--no-load)")
    });
    let w = ap.changes.iter().map(|c| c.name.len()).max().unwrap_or(0);
    for c in &ap.changes {
        let old = c.old.as_deref().unwrap_or("?");
        let tail = match (&c.error, c.changed) {
            (Some(e), _) => format!("  FAILED: {e}"),
            (None, true) => String::new(),
            (None, false) => "  (not loaded)".into(),
        };
        out.line(&format!("  {:w$}  {old} -> {}{tail}", c.name, c.new));
    }
    if !ap.unchanged.is_empty() {
        out.line(&format!("  unchanged: {}", ap.unchanged.join("; ")));
    }
    for n in &ap.notes {
        out.line(&format!("note: {n}"));
    }
}
