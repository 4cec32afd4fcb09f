//! What `send`, `pull` and `bench --net` say at the end: the summary
//! line (or the JSON document), what was held, skipped, deleted or left
//! out, the rate gate's verdict, a shard's share, and how to continue a
//! run that stopped.

use crate::coord::units::{self, RateUnit};
use crate::session::client::report::{SendObserver, SendReport};
use crate::session::SessionError;

use crate::cli::render::{self, Format};

use super::printer::SendPrinter;

pub(crate) fn finish_send(p: &mut SendPrinter, r: &SendReport) {
    p.end_bar();
    if let (Format::Human, Some(path)) = (p.format, &r.path) {
        // What iperf3 users read in its Retr column, on stderr beside the
        // notices: stdout keeps one summary line.
        p.info(&format!(
            "path: round trip {:.2} ms (least {:.2}), {} segments resent ({}), congestion control {}",
            path.rtt_ms,
            path.min_rtt_ms,
            path.retransmits,
            units::bytes_binary(path.bytes_retransmitted),
            path.congestion_control.as_deref().unwrap_or("unknown")
        ));
    }
    summarize(p, r);
    warn_untrusted(r);
    if p.format == Format::Human {
        human_extras(p, r);
    }
    for s in &r.skipped {
        render::warn(&format!("skipped {}: {}", s.path, s.reason));
    }
    if p.format == Format::Human && !r.skipped.is_empty() {
        // Beside the names, on the same stream.
        render::info(&format!(
            "{} skipped (named above); everything else verified",
            units::count(r.skipped.len() as u64, "entry")
        ));
    }
    if let Some(e) = &r.error {
        render::error(e);
    }
}

/// The summary of a run that failed before it had a report: nothing for
/// a human (the error says it), and for machines a document with the core
/// fields scripts rely on, also when nothing moved.
pub(super) fn finish_failed(p: &mut SendPrinter, command: &str, e: &SessionError) {
    p.end_bar();
    if p.format != Format::Human {
        let mut doc = serde_json::json!({
            "schema": 1, "command": command, "status": e.code().name(), "error": e.to_string(),
            "bytes": 0, "bytes_skipped": 0, "files": 0, "files_verified": 0,
            "files_skipped": 0, "skipped": [], "elapsed_s": 0.0, "rate_bits_per_s": 0.0,
            "interval_rate_min_bits_per_s": 0.0, "intervals_full": 0, "streams": p.streams,
        });
        if let Some(s) = p.shard {
            doc["shard"] = serde_json::json!({"index": s.index, "count": s.count});
        }
        // A limit of the receiver's, as its numbers (protocol 13 sends them).
        if let SessionError::Limit(l) = e {
            doc["limit"] = serde_json::json!({
                "name": l.limit.name(), "asked": l.asked, "max": l.max, "in_use": l.in_use,
            });
        }
        if p.format == Format::JsonStream {
            doc["type"] = "summary".into();
        }
        p.out.line(&doc.to_string());
    }
}

/// The run's summary: a JSON document, or the human line(s).
fn summarize(p: &mut SendPrinter, r: &SendReport) {
    match p.format {
        Format::Json => p
            .out
            .line(&serde_json::to_string_pretty(r).expect("reports serialize")),
        Format::JsonStream => {
            let mut v = serde_json::to_value(r).expect("reports serialize");
            v["type"] = "summary".into();
            p.out.line(&v.to_string());
        }
        Format::Human if r.command.starts_with("bench --net") => {
            // The summary first (scripts read the first line), then each
            // stream's.
            p.out.line(&bench_summary(r));
            for line in stream_lines(r) {
                p.out.line(&line);
            }
        }
        Format::Human if !matches!(r.status, "ok" | "partial") => {
            p.out.line(&stopped_summary(r));
        }
        Format::Human => {
            match nothing_moved(r) {
                Some(line) => p.out.line(&line),
                None => {
                    p.out.line(&moved_summary(r));
                    if let Some(line) = time_parts(r) {
                        p.out.line(&line);
                    }
                }
            }
            if let Some(s) = &r.shard {
                p.out.line(&shard_summary(s));
            }
        }
    }
}

/// A transfer that moved data: files, bytes and the wall time; the rate
/// while the data flowed (over how long), its slowest interval (not for
/// a follow, whose writers pause: its lag says how it kept up), streams;
/// what was verified.
fn moved_summary(r: &SendReport) -> String {
    let (verb, checked) = if r.command == "pull" {
        ("pulled", "verified against the sender")
    } else {
        ("sent", "verified by the receiver")
    };
    let unchanged = match r.files_unchanged {
        0 => String::new(),
        n => format!(", {n} unchanged"),
    };
    let slowest = match r.kept_up {
        Some(_) => String::new(),
        None => format!(", {}", min_interval(r)),
    };
    format!(
        "{verb} {}, {} in {}: {} over {} of data{slowest}, {}; {} of {} {checked}{unchanged}",
        units::count(r.files, "file"),
        units::bytes_both(r.bytes),
        units::duration_s(r.wall_s.max(r.elapsed_s)),
        units::rate(r.rate_bits_per_s / 8.0, RateUnit::Gbit),
        units::duration_s(r.elapsed_s),
        streams_text(r),
        r.files_verified,
        units::count(r.files, "file"),
    )
}

/// A run that found everything at the other side already (nothing
/// crossed, nothing written): said as that, with how it knew, not as a
/// transfer of 0 bytes.
fn nothing_moved(r: &SendReport) -> Option<String> {
    let nothing = r.bytes == 0
        && r.files_verified == r.files_found_complete
        && r.files_continued == 0
        && matches!(r.status, "ok" | "partial");
    if !nothing {
        return None;
    }
    let (what, place) = match r.command {
        "pull" => ("pull", "here"),
        _ => ("send", "at the receiver"),
    };
    let held = crate::session::plan::held::held_text(r.held());
    let hint = match r.files_unchanged {
        0 => "",
        _ => " (--checksum compares them by content, --ignore-times sends them again)",
    };
    Some(format!(
        "nothing to {what}: {} of {} already {place}: {held}; checked in {}{hint}",
        units::count(r.files, "file"),
        units::bytes_decimal(r.bytes_skipped),
        units::duration_s(r.wall_s.max(r.elapsed_s)),
    ))
}

/// Where the wall time went, when a second or more of it was not the data
/// (a long scan, a `--checksum` reading both sides, slow commits): every
/// part.
fn time_parts(r: &SendReport) -> Option<String> {
    let ph = r.phases?;
    if r.wall_s - ph.data_s < 1.0 {
        return None;
    }
    // (A pull's scan is the daemon's, within its compare.)
    Some(format!(
        "time: {} in all: scan {}, connect {}, compare {}, data {}, commit {}",
        units::duration_s(r.wall_s),
        units::duration_s(ph.scan_s),
        units::duration_s(ph.connect_s),
        units::duration_s(ph.compare_s),
        units::duration_s(ph.data_s),
        units::duration_s(ph.commit_s),
    ))
}

/// What a human reads after the summary: what was held, the lag of a
/// follow, the rate gate, what --delete removed and --exclude left out.
fn human_extras(p: &mut SendPrinter, r: &SendReport) {
    if r.bytes_skipped > 0 && nothing_moved(r).is_none() {
        p.out.line(&held_summary(r));
    }
    if let Some(lag) = r.lag_max {
        p.out.line(&lag_summary(lag, r.kept_up == Some(true)));
    }
    if let Some(g) = r.min_rate {
        p.out.line(&min_rate_summary(&g));
    }
    if r.files_deleted > 0 {
        for d in &r.deleted {
            // The receiver's text: its control characters written out.
            p.out.line(&format!(
                "deleted {}",
                crate::cli::service::escape_controls(d)
            ));
        }
        p.out.line(&format!(
            "--delete removed {} the sources do not have from the receiver",
            units::count(r.files_deleted, "entry")
        ));
    }
    if r.bytes_apparent > r.bytes_total {
        p.out.line(&format!(
            "the files hold {} of holes, which do not cross (their sizes add up to {}); every total above counts data",
            units::bytes_decimal(r.bytes_apparent - r.bytes_total),
            units::bytes_decimal(r.bytes_apparent)
        ));
    }
    if r.files_excluded > 0 {
        p.out.line(&format!(
            "left out {} matching --exclude (nothing beneath an excluded directory was looked at)",
            units::count(r.files_excluded, "entry")
        ));
    }
    if r.devices_left_out > 0 {
        p.out.line(&format!(
            "left out {} (-D sends them)",
            units::count(r.devices_left_out, "device node")
        ));
    }
}

/// `bench --net`'s summary line: what the peer had by the test's end, in
/// its time (iperf3's count), then the whole run the receiver counted.
fn bench_summary(r: &SendReport) -> String {
    let (bytes, secs) = match (r.bytes_in_test, r.test_s) {
        (Some(b), Some(t)) => (b, t),
        _ => (r.bytes, r.elapsed_s),
    };
    let counted = match r.drain_s {
        _ if r.bytes == 0 => "nothing crossed: the receiver counted no byte".to_string(),
        Some(d) => format!(
            "the receiver counted every byte ({} in all, the last {} after the test's end)",
            units::bytes_decimal(r.bytes),
            units::duration_s(d)
        ),
        None => "the receiver counted every byte".to_string(),
    };
    format!(
        "bench --net: {} in {}: {}, {}, {}, {} frames; {counted}",
        units::bytes_both(bytes),
        units::duration_s(secs),
        units::rate(r.rate_bits_per_s / 8.0, RateUnit::Gbit),
        min_interval(r),
        streams_text(r),
        units::bytes_binary(u64::from(r.block_size_bytes))
    )
}

/// iperf3's per-stream summary: each sending stream's bytes, rate over
/// the run, segments resent (TCP_INFO) and round trip; nothing for one
/// stream (the summary is its line) or when this side only received.
fn stream_lines(r: &SendReport) -> Vec<String> {
    let Some(path) = r.path.as_ref().filter(|p| p.streams.len() > 1) else {
        return Vec::new();
    };
    let secs = r.test_s.unwrap_or(r.elapsed_s).max(1e-9);
    path.streams
        .iter()
        .map(|s| {
            format!(
                "  stream {:>3}: {:>10}  {:>11}  {:>6} resent  rtt {:.2} ms",
                s.stream,
                units::bytes_decimal(s.bytes_sent),
                units::rate(s.bytes_sent as f64 / secs, RateUnit::Gbit),
                s.retransmits,
                s.rtt_ms
            )
        })
        .collect()
}

/// The slowest interval of a run, or why there is none to name.
fn min_interval(r: &SendReport) -> String {
    let rate = units::rate(r.interval_rate_min_bits_per_s / 8.0, RateUnit::Gbit);
    render::min_interval(r.intervals_full, &rate)
}

/// "4 streams", or what `-P auto` chose of those it opened; and the
/// lanes (threads with a ring each) that carried them, when more than one.
fn streams_text(r: &SendReport) -> String {
    let streams = if r.streams_auto {
        format!(
            "{} (-P auto, {} open)",
            units::count(r.streams.into(), "stream"),
            r.streams_opened
        )
    } else {
        units::count(r.streams.into(), "stream")
    };
    match r.lanes.len() {
        0 | 1 => streams,
        n => format!("{streams} on {n} lanes"),
    }
}

/// What a shard's run says of its share: a piece verified is not its file
/// committed (that waits for every piece, on whichever shard brings the
/// last), and only `urmove report` over every shard tells the transfer.
fn shard_summary(s: &crate::session::client::shard_report::ShardReport) -> String {
    let whole = s.share_files - s.pending_count.min(s.share_files);
    let pieces = s
        .pieces
        .iter()
        .filter(|p| p.digest.is_some() || p.held)
        .count();
    let committed = s
        .pieces
        .iter()
        .filter(|p| p.committed.is_some() || p.held)
        .count();
    format!(
        "shard {} of {}: {whole} of {} whole files verified; {pieces} of {} pieces of split files verified, {committed} of those files committed whole here (the others once every piece is); `urmove report` over every shard's --json tells the whole transfer",
        s.index,
        s.count,
        s.share_files,
        s.pieces.len()
    )
}

/// A split file the shard's receiver cannot commit: the journal of another
/// piece there was made with another secret (running again cannot help).
fn warn_untrusted(r: &SendReport) {
    for piece in r.shard.iter().flat_map(|s| &s.pieces) {
        if let Some(k) = piece.untrusted {
            render::warn(&format!(
                "{}: the receiver found piece {k}'s journal made with another secret and cannot commit the file: receivers sharing a root must run with one secret (the same --state-dir, or its secret file copied)",
                piece.path
            ));
        }
    }
}

/// The `--min-rate` gate's verdict.
fn min_rate_summary(g: &crate::coord::GateResult) -> String {
    format!(
        "--min-rate {} over {} windows: {} (worst {} at {:.2} s; {} of {} windows short{})",
        units::rate(g.min_rate_bytes_per_s, RateUnit::Gbit),
        units::duration_s(g.window_s),
        if g.ok { "OK" } else { "FAILED" },
        units::rate(g.worst_window_bytes_per_s, RateUnit::Gbit),
        g.worst_window_at_s,
        g.windows_short,
        g.windows_total,
        if g.windows_total == 0 {
            "; no window had that much waiting"
        } else {
            ""
        }
    )
}

/// A transfer that did not finish: how far it got, what is done and what
/// is not, and the command that continues it (every run resumes).
fn stopped_summary(r: &SendReport) -> String {
    let why = match r.status {
        "interrupted" => "interrupted".to_string(),
        "shutting_down" => "the daemon is shutting down".to_string(),
        code => format!("failed: {code}"),
    };
    let (verb, checked) = match r.command {
        "pull" => ("pulled", "verified against the sender"),
        _ => ("sent", "committed and verified by the receiver"),
    };
    let settled = r.files_verified + r.files_unchanged + r.files_skipped;
    let unfinished = r.files.saturating_sub(settled);
    let to_move = r.bytes_total.saturating_sub(r.bytes_skipped);
    // Frames of a lost stream go again: the wire may have carried more.
    let moved = match r.bytes > to_move {
        false => format!(
            "{} of {} to move",
            units::bytes_decimal(r.bytes),
            units::bytes_decimal(to_move)
        ),
        true => format!(
            "{} on the wire for {} to move (the frames of lost streams went again)",
            units::bytes_decimal(r.bytes),
            units::bytes_decimal(to_move)
        ),
    };
    format!(
        "stopped after {} ({why}): {verb} {moved} at {}; {} of {} {checked}{}, {} not finished; {}\nto continue where it stopped, run the same command again: {}",
        units::duration_s(r.elapsed_s),
        units::rate(r.rate_bits_per_s / 8.0, RateUnit::Gbit),
        r.files_verified,
        units::count(r.files, "file"),
        match r.files_unchanged {
            0 => String::new(),
            n => format!(", {n} unchanged"),
        },
        unfinished,
        kept_text(r),
        render::command_line(),
    )
}

/// What an unfinished run left for the next one to continue, as far as
/// this side knows.
fn kept_text(r: &SendReport) -> String {
    let whose = match r.command {
        "pull" => "this side",
        _ => "the receiver",
    };
    match r.kept {
        Some(k) if k.files > 0 => format!(
            "{whose} kept the verified blocks of {} ({}), which the next run does not send again",
            units::count(k.files, "unfinished file"),
            units::bytes_decimal(k.bytes)
        ),
        Some(_) => {
            format!("{whose} kept nothing of the unfinished files: the next run sends them whole")
        }
        None => format!("{whose} keeps what it journaled (about once a second) for the next run"),
    }
}

/// A follow's lag behind the writers, at its largest.
fn lag_summary(lag: crate::session::client::report::Lag, kept_up: bool) -> String {
    let verdict = match kept_up {
        true => "the link kept up",
        false => "the link fell behind the writers",
    };
    format!(
        "followed: the copy was at most {} and {:.2} s behind the writers; {verdict}",
        units::bytes_both(lag.bytes),
        lag.seconds
    )
}

/// What a run found at the receiver and did not send again, and why.
fn held_summary(r: &SendReport) -> String {
    let held = crate::session::plan::held::held_text(r.held());
    let nothing = match r.bytes == 0 && r.status == "ok" {
        true => "; nothing else to send",
        false => "",
    };
    let hint = match r.files_unchanged {
        0 => "",
        _ => " (--checksum compares them by content, --ignore-times sends them again)",
    };
    let place = match r.command {
        "pull" => "here",
        _ => "at the receiver",
    };
    format!(
        "skipped {} already {place}: {held}{nothing}{hint}",
        units::bytes_both(r.bytes_skipped),
    )
}
