//! `urmove report`: the shards' reports of one sharded send merged and
//! told (see `session::merge`).

use crate::coord::units;
use crate::session::client::merge::{merge, Merged, ShardRun};

use super::args::ReportArgs;
use super::Failure;

/// Merge the reports; 0 when the whole transfer is committed, 1 when not.
pub fn report(a: ReportArgs) -> Result<u8, Failure> {
    let mut runs = Vec::new();
    // A report that cannot be read (a task killed while it wrote) is
    // something missing, not a usage error.
    let mut unread = Vec::new();
    for f in &a.files {
        let name = f.display().to_string();
        let read = std::fs::read_to_string(f).map_err(|e| format!("{name}: {e}"));
        match read.and_then(|text| ShardRun::parse(&name, &text).map_err(|e| e.to_string())) {
            Ok(run) => runs.push(run),
            Err(why) => unread.push(why),
        }
    }
    let mut m = merge(runs);
    if !unread.is_empty() {
        m.complete = false;
        m.problems.splice(0..0, unread);
    }
    if a.json {
        let text = serde_json::to_string_pretty(&m).map_err(|e| Failure::Run(e.into()))?;
        println!("{text}");
    } else {
        print!("{}", text(&m));
    }
    Ok(u8::from(!m.complete))
}

fn rate(bits: f64) -> String {
    units::rate(bits / 8.0, units::RateUnit::Gbit)
}

/// The merged report as a person reads it.
/// Files not committed named one a line in the text; the rest are counted.
const NAMED: usize = 20;

fn text(m: &Merged) -> String {
    let mut out = String::new();
    for s in &m.per_shard {
        out += &format!(
            "shard {} -> {}: {}, {} in {} ({})\n",
            s.index,
            s.receiver,
            s.status,
            units::bytes_binary(s.bytes),
            units::duration_s(s.elapsed_s),
            rate(s.rate_bits_per_s)
        );
    }
    out += &format!(
        "{} of {} shards: {} of {} files verified, {} of {} crossed in {} ({})\n",
        m.per_shard.len(),
        m.shards,
        m.files_verified,
        m.files,
        units::bytes_binary(m.bytes),
        units::bytes_binary(m.bytes_total),
        units::duration_s(m.elapsed_s),
        rate(m.rate_bits_per_s)
    );
    if let Some(s) = &m.slowest {
        out += &format!(
            "slowest: shard {} ({} at {})\n",
            s.index,
            units::duration_s(s.elapsed_s),
            rate(s.rate_bits_per_s)
        );
    }
    for p in &m.problems {
        out += &format!("missing: {p}\n");
    }
    for s in m.skipped_by_rule.iter().take(NAMED) {
        out += &format!("skipped by rule: {}: {}\n", s.path, s.reason);
    }
    if m.files_skipped_by_rule > NAMED as u64 {
        out += &format!(
            "skipped by rule: {} more (--json lists up to 1000 a shard)\n",
            m.files_skipped_by_rule - NAMED as u64
        );
    }
    for f in m.missing_files.iter().take(NAMED) {
        out += &format!("not committed: {f}\n");
    }
    if m.missing_files.len() > NAMED {
        out += &format!(
            "not committed: {} more (--json lists every one)\n",
            m.missing_files.len() - NAMED
        );
    }
    out += &match (m.complete, m.files_skipped_by_rule) {
        (true, 0) => "complete: every file of the manifest is committed and verified\n".to_string(),
        (true, n) => format!(
            "complete: every file of the manifest is committed and verified, but {} a rule left out (named above; running again cannot move them)\n",
            units::count(n, "file")
        ),
        (false, _) => "INCOMPLETE: mend what is named above and run its shards again (--resume is the default; what was verified is not sent again)\n".to_string(),
    };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Past the files it names, the text counts the rest (a 2,000-file
    /// share missing lists twenty, and says how many more).
    #[test]
    fn the_text_counts_the_files_it_does_not_name() {
        let m = Merged {
            missing_files: (0..25).map(|i| format!("f{i}")).collect(),
            ..Merged::default()
        };
        let t = text(&m);
        assert_eq!(t.matches("not committed: f").count(), NAMED);
        assert!(
            t.contains("not committed: 5 more (--json lists every one)"),
            "{t}"
        );
        assert!(t.contains("INCOMPLETE"), "{t}");
    }
}
