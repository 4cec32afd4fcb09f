//! The plots' tests: what the SVG documents hold.

use super::draw::{short_name, Marker, LEGEND_NAME_CHARS_MAX, PALETTE};
use super::sweep::{decade_label, decades, size_label, sweep_style};
use super::*;
use crate::bench::sweep::{SweepRow, SweepTable};
use crate::bench::ModeResult;
use crate::coord::Interval;

/// Whether the document has a `<text>` of exactly `t`.
fn has_text(svg: &str, t: &str) -> bool {
    svg.contains(&format!(">\n{t}\n</text>"))
}

fn iv(end_s: f64, len_s: f64, rate: f64) -> Interval {
    Interval {
        end_s,
        len_s,
        rate_bytes_per_s: rate,
        ..Interval::default()
    }
}

#[test]
fn a_rate_plot_has_a_line_and_a_legend_entry_per_series() {
    let mut p = RatePlot {
        title: "urmove send to a&b <test>".into(),
        unit: RateUnit::Gbit,
        time_axis: "time (s)",
        panels: Vec::new(),
        min_rate_bytes_per_s: Some(1e8),
        worst_windows: Vec::new(),
    };
    for s in 0..2 {
        p.add("", &format!("stream {s}"), &iv(1.0, 1.0, 5e8));
        p.add("", &format!("stream {s}"), &iv(1.5, 0.5, 4e8));
    }
    p.add("", AGGREGATE, &iv(1.0, 1.0, 1e9));
    assert_eq!(p.series_count(), 3);
    let svg = p.to_svg().unwrap();
    assert!(svg.starts_with("<svg"), "{}", &svg[..80]);
    assert!(svg.contains("a&amp;b &lt;test&gt;"), "the title is escaped");
    for name in ["stream 0", "stream 1", AGGREGATE, "min-rate 800 Mb/s"] {
        assert!(has_text(&svg, name), "legend entry {name}");
    }
    assert!(svg.contains("throughput (Gbit/s)"));
}

#[test]
fn a_short_tail_joins_the_step_before_it_with_its_bytes() {
    let mut p = RatePlot {
        title: "t".into(),
        unit: RateUnit::Mb,
        time_axis: "s",
        panels: Vec::new(),
        min_rate_bytes_per_s: None,
        worst_windows: Vec::new(),
    };
    p.add("", AGGREGATE, &iv(1.0, 1.0, 100.0));
    p.add("", AGGREGATE, &iv(1.5, 0.5, 300.0));
    p.add("", AGGREGATE, &iv(1.6, 0.1, 1000.0));
    let steps = &p.panels[0].series[0].steps;
    assert_eq!(steps.len(), 2, "{steps:?}");
    assert_eq!(steps[1].start_s, 1.0);
    assert!((steps[1].end_s - 1.6).abs() < 1e-9);
    // 150 + 100 bytes over 0.6 s.
    assert!((steps[1].rate_bytes_per_s - 250.0 / 0.6).abs() < 1e-9);
}

#[test]
fn many_series_share_one_legend_entry_and_long_names_keep_their_end() {
    let mut p = RatePlot {
        title: "t".into(),
        unit: RateUnit::Mb,
        time_axis: "s",
        panels: Vec::new(),
        min_rate_bytes_per_s: None,
        worst_windows: Vec::new(),
    };
    for s in 0..20 {
        p.add("write", &format!("stream {s}"), &iv(1.0, 1.0, 1e6));
    }
    let names: Vec<String> = p.legend().into_iter().map(|e| e.name).collect();
    assert_eq!(names, ["each of 20 series"]);
    let long = format!("/{}/target", "x".repeat(80));
    let s = short_name(&long);
    assert!(s.starts_with("...") && s.ends_with("/target"));
    assert_eq!(s.chars().count(), LEGEND_NAME_CHARS_MAX);
}

#[test]
fn an_empty_plot_still_draws() {
    let p = RatePlot {
        title: "t".into(),
        unit: RateUnit::Mb,
        time_axis: "s",
        panels: Vec::new(),
        min_rate_bytes_per_s: None,
        worst_windows: Vec::new(),
    };
    assert!(p.to_svg().unwrap().contains("no interval was measured"));
}

#[test]
fn the_sweep_has_a_panel_per_test_and_a_legend_entry_per_file_size() {
    let rows = [(1u64 << 20, 4096u32), (1 << 20, 65536), (4 << 20, 4096)]
        .iter()
        .map(|&(f, r)| SweepRow {
            file_bytes: f,
            record_bytes: r,
            rates_bytes_per_s: vec![1e8; 6],
        })
        .collect();
    let table = SweepTable {
        tests: crate::bench::sweep::TESTS.to_vec(),
        queue_depth: 1,
        rows,
    };
    let svg = sweep_svg("sweep", &table, RateUnit::Mib).unwrap();
    for t in crate::bench::sweep::TESTS {
        assert!(has_text(&svg, t), "panel {t}");
    }
    assert!(has_text(&svg, "file 1M") && has_text(&svg, "file 4M"));
    assert!(has_text(&svg, "64K"), "record sizes label the axis");
}

#[test]
fn a_log_axis_spans_whole_decades_and_labels_only_their_powers() {
    assert_eq!(decades([0.0, 3.0, 450.0].into_iter()), (1.0, 1000.0));
    assert_eq!(decades([0.5].into_iter()), (0.1, 1.0));
    assert_eq!(decades(std::iter::empty()), (1.0, 10.0));
    assert_eq!(decade_label(&1000.0), "1000");
    assert_eq!(decade_label(&0.01), "0.01");
    assert_eq!(decade_label(&2000.0), "");
}

#[test]
fn sweep_series_past_the_palette_are_dashed_with_other_markers() {
    let styles: Vec<_> = (0..2 * PALETTE.len()).map(sweep_style).collect();
    for (i, a) in styles.iter().enumerate() {
        assert!(!styles[..i].contains(a), "series {i} is drawn like another");
    }
    assert_eq!(styles[0], (PALETTE[0], Marker::Circle, false));
    assert_eq!(styles[PALETTE.len()], (PALETTE[0], Marker::Square, true));
}

#[test]
fn only_a_failed_gate_marks_its_worst_window() {
    use crate::coord::gate::GateResult;
    let mut p = RatePlot {
        title: "t".into(),
        unit: RateUnit::Mb,
        time_axis: "s",
        panels: Vec::new(),
        min_rate_bytes_per_s: Some(2e6),
        worst_windows: Vec::new(),
    };
    p.add("write", AGGREGATE, &iv(1.0, 1.0, 1e6));
    let gate = |ok| GateResult {
        ok,
        min_rate_bytes_per_s: 2e6,
        window_s: 0.5,
        worst_window_bytes_per_s: 1e6,
        worst_window_at_s: 0.25,
        windows_short: u64::from(!ok),
        windows_total: 10,
        run_shorter_than_window: false,
    };
    let result = |ok| ModeResult {
        mode: "write",
        target: AGGREGATE.into(),
        bytes: 0,
        elapsed_s: 1.0,
        rate_bytes_per_s: 0.0,
        iops: 0.0,
        ops: 0,
        latency_us: Default::default(),
        interval_rate_min_bytes_per_s: 0.0,
        intervals_full: 0,
        interval_rate_median_bytes_per_s: None,
        region_bytes: 0,
        passes: 0.0,
        block_size_bytes: 4096,
        queue_depth: 1,
        short_ops: 0,
        retried_ops: 0,
        ramp_bytes: 0,
        fsync_s: None,
        verified_blocks: None,
        min_rate: Some(gate(ok)),
    };
    p.mark_short_windows(&[result(true)]);
    assert!(p.worst_windows.is_empty());
    p.mark_short_windows(&[result(false)]);
    let names: Vec<String> = p.legend().into_iter().map(|e| e.name).collect();
    assert_eq!(
        names.last().map(String::as_str),
        Some("worst 500 ms window: 1.00 MB/s at 0.25 s")
    );
    assert!(has_text(
        &p.to_svg().unwrap(),
        "worst 500 ms window: 1.00 MB/s at 0.25 s"
    ));
}

#[test]
fn sizes_are_labelled_compactly() {
    assert_eq!(size_label(4096.0), "4K");
    assert_eq!(size_label((16u64 << 20) as f64), "16M");
    assert_eq!(size_label(1000.0), "1000");
}
