//! `--plot FILE.svg` as a user runs it: the real binary on real files and
//! against a real daemon. Every picture must be well-formed XML, render
//! (resvg) to a PNG with real content, and hold a visible line per target
//! or stream plus the aggregate (and the --min-rate line when set), each
//! named in the legend.

use std::collections::BTreeMap;
use std::path::Path;

use resvg::{tiny_skia, usvg};

use urmove::bench::sweep::{cells, SweepRow, SweepSpec, SweepTable, TESTS};
use urmove::coord::units::RateUnit;

use crate::transfer::Daemon;
use crate::util::{run, stderr, stdout, urmove};

/// The colour of a failed gate's worst-window mark.
const WORST: &str = "#FF00AA";

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir_in("/var/tmp").unwrap()
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// What a picture shows.
struct Picture {
    /// Every `<text>`: title, axis labels, panel captions, legend.
    texts: Vec<String>,
    /// Pixels of the rendered PNG per colour of a drawn line (a polyline
    /// at least 2 px wide: series, their legend samples, the gate).
    line_pixels: BTreeMap<String, usize>,
    /// Pixels that are not the white background, of `pixels`.
    inked: usize,
    pixels: usize,
    /// Every pixel of the PNG.
    px: Vec<(i32, i32, i32)>,
}

impl Picture {
    fn has_text(&self, t: &str) -> bool {
        self.texts.iter().any(|x| x == t)
    }

    /// Pixels within a small distance of `rgb`.
    fn band_pixels(&self, (r0, g0, b0): (i32, i32, i32)) -> usize {
        self.px
            .iter()
            .filter(|&&(r, g, b)| (r - r0).abs() + (g - g0).abs() + (b - b0).abs() < 8)
            .count()
    }

    fn has_text_containing(&self, t: &str) -> bool {
        self.texts.iter().any(|x| x.contains(t))
    }

    /// Line colours, each of which must show in the PNG.
    fn lines(&self) -> usize {
        for (colour, &n) in &self.line_pixels {
            assert!(n >= 40, "the line in {colour} shows only {n} pixels");
        }
        self.line_pixels.len()
    }
}

fn rgb(hex: &str) -> (i32, i32, i32) {
    let h = hex.trim_start_matches('#');
    let c = |i: usize| i32::from_str_radix(&h[i..i + 2], 16).unwrap();
    (c(0), c(2), c(4))
}

/// Parse, render to PNG (written beside the SVG), decode and look.
fn look_at(svg_path: &Path) -> Picture {
    let text =
        std::fs::read_to_string(svg_path).unwrap_or_else(|e| panic!("{}: {e}", svg_path.display()));
    // roxmltree is a strict XML parser: this is the well-formedness check.
    let doc = usvg::roxmltree::Document::parse(&text)
        .unwrap_or_else(|e| panic!("{} is not well-formed XML: {e}", svg_path.display()));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let texts: Vec<String> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(|t| t.trim().to_string())
        .collect();
    let mut colours: Vec<String> = doc
        .descendants()
        .filter(|n| n.has_tag_name("polyline"))
        .filter(|n| {
            n.attribute("stroke-width")
                .and_then(|w| w.parse::<f64>().ok())
                .is_some_and(|w| w >= 2.0)
        })
        .filter_map(|n| n.attribute("stroke"))
        .map(|c| c.to_ascii_uppercase())
        .collect();
    colours.sort();
    colours.dedup();

    let tree = usvg::Tree::from_str(&text, &usvg::Options::default())
        .unwrap_or_else(|e| panic!("{}: not SVG usvg accepts: {e}", svg_path.display()));
    let size = tree.size().to_int_size();
    let mut pixmap = tiny_skia::Pixmap::new(size.width(), size.height()).unwrap();
    pixmap.fill(tiny_skia::Color::WHITE);
    resvg::render(&tree, tiny_skia::Transform::default(), &mut pixmap.as_mut());
    let png = pixmap.encode_png().unwrap();
    std::fs::write(svg_path.with_extension("png"), &png).unwrap();
    let back = tiny_skia::Pixmap::decode_png(&png).unwrap();
    assert_eq!((back.width(), back.height()), (size.width(), size.height()));

    let px: Vec<(i32, i32, i32)> = back
        .pixels()
        .iter()
        .map(|c| {
            (
                i32::from(c.red()),
                i32::from(c.green()),
                i32::from(c.blue()),
            )
        })
        .collect();
    let inked = px
        .iter()
        .filter(|&&(r, g, b)| r < 245 || g < 245 || b < 245)
        .count();
    let line_pixels = colours
        .iter()
        .map(|c| {
            let (r0, g0, b0) = rgb(c);
            let n = px
                .iter()
                .filter(|&&(r, g, b)| (r - r0).abs() + (g - g0).abs() + (b - b0).abs() < 24)
                .count();
            (c.clone(), n)
        })
        .collect();
    Picture {
        texts,
        line_pixels,
        inked,
        pixels: px.len(),
        px,
    }
}

/// A picture with content: more than a frame and a few labels.
fn assert_drawn(pic: &Picture) {
    assert!(
        pic.inked * 100 > pic.pixels * 2,
        "only {} of {} pixels are not background",
        pic.inked,
        pic.pixels
    );
}

#[test]
fn bench_disk_plots_a_line_per_phase_and_one_with_the_gate() {
    let dir = tmp();
    let svg = dir.path().join("disk.svg");
    let target = dir.path().join("t");
    std::fs::create_dir(&target).unwrap();
    let o = run(&[
        "bench",
        "--disk",
        p(&target),
        "--size",
        "64M",
        "--interval",
        "20ms",
        "--plot",
        p(&svg),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("plot written to"), "{}", stdout(&o));
    let pic = look_at(&svg);
    assert_drawn(&pic);
    // One target: its line is the aggregate, named after it; a panel per
    // mode; units on the axis; the command and target in the title.
    assert_eq!(pic.lines(), 1, "{:?}", pic.line_pixels);
    assert!(pic.has_text(p(&target)), "{:?}", pic.texts);
    assert!(
        pic.has_text("write") && pic.has_text("read"),
        "{:?}",
        pic.texts
    );
    assert!(pic.has_text("throughput (MB/s)"), "{:?}", pic.texts);
    assert!(
        pic.has_text_containing(&format!("urmove bench --disk {}", p(&target))),
        "{:?}",
        pic.texts
    );

    // Two targets, binary units and a gate: a line each, the aggregate
    // and the dashed minimum.
    let other = dir.path().join("u");
    std::fs::create_dir(&other).unwrap();
    let gated = dir.path().join("gated.svg");
    let o = run(&[
        "bench",
        "--disk",
        p(&target),
        p(&other),
        "--mode",
        "write",
        "--size",
        "64M",
        "--interval",
        "20ms",
        "--units",
        "MiB",
        "--min-rate",
        "1MB",
        // Wide enough that a stall of this shared machine's disk does not
        // fail the gate (a 50 ms window, then under CI's parallel tests a
        // 200 ms one at the start, saw none of the bytes): the picture is
        // under test here. A run shorter than the window is one window.
        "--window",
        "1s",
        "--json",
        "--plot",
        p(&gated),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(crate::util::json(&o)["min_rate_ok"], true);
    let pic = look_at(&gated);
    assert_drawn(&pic);
    assert_eq!(pic.lines(), 4, "{:?}", pic.line_pixels);
    assert!(pic.has_text("aggregate"), "{:?}", pic.texts);
    assert!(pic.has_text("min-rate 977 KiB/s"), "{:?}", pic.texts);
    assert!(pic.has_text("throughput (MiB/s)"), "{:?}", pic.texts);
    // The gate held: no worst window is marked.
    assert!(!pic.has_text_containing("worst"), "{:?}", pic.texts);
    assert!(
        !pic.line_pixels.contains_key(WORST),
        "{:?}",
        pic.line_pixels
    );
    let per_target = pic
        .texts
        .iter()
        .filter(|t| t.contains("urmove-bench-"))
        .count();
    assert_eq!(per_target, 2, "{:?}", pic.texts);
}

#[test]
fn bench_disk_sweep_plots_the_matrix() {
    let dir = tmp();
    let svg = dir.path().join("sweep.svg");
    let o = run(&[
        "bench",
        "--disk",
        p(dir.path()),
        "--sweep",
        "--size",
        "256k",
        "--bs",
        "64k",
        "--plot",
        p(&svg),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let pic = look_at(&svg);
    assert_drawn(&pic);
    // A panel per test, a line per file size (64k, 128k, 256k), record
    // sizes on the axis.
    for t in [
        "write",
        "rewrite",
        "read",
        "reread",
        "randread",
        "randwrite",
    ] {
        assert!(pic.has_text(t), "panel {t}: {:?}", pic.texts);
    }
    for f in ["file 64K", "file 128K", "file 256K"] {
        assert!(pic.has_text(f), "legend {f}: {:?}", pic.texts);
    }
    assert!(pic.has_text("4K") && pic.has_text("64K"), "{:?}", pic.texts);
    assert_eq!(pic.lines(), 3, "{:?}", pic.line_pixels);
    assert_log_rate_axis(&pic, "rate (MB/s, log scale)");
}

/// The sweep's rate axis is logarithmic: so named, and its numbers are
/// powers of 10 spanning at least one decade in every panel.
fn assert_log_rate_axis(pic: &Picture, desc: &str) {
    let panels = pic.texts.iter().filter(|t| *t == desc).count();
    assert_eq!(panels, 6, "{desc}: {:?}", pic.texts);
    let numbers: Vec<f64> = pic.texts.iter().filter_map(|t| t.parse().ok()).collect();
    assert!(numbers.len() >= 2 * panels, "{:?}", pic.texts);
    for n in &numbers {
        let e = n.log10();
        assert!((e - e.round()).abs() < 1e-9, "{n} is no power of 10");
    }
    let (lo, hi) = numbers
        .iter()
        .fold((f64::MAX, 0.0f64), |(lo, hi), &n| (lo.min(n), hi.max(n)));
    assert!(hi >= 10.0 * lo, "one decade at least: {numbers:?}");
}

/// The default sweep's cells (64 KiB to `file_max` files, 4 KiB to
/// 16 MiB records), each file size's rates a decade or so above the last.
fn sweep_table(file_max: u64) -> SweepTable {
    let spec = SweepSpec {
        file_max,
        ..SweepSpec::default()
    };
    let rows = cells(&spec)
        .into_iter()
        .map(|(file, record)| {
            let i = f64::from(file.trailing_zeros() - 16);
            let base = 2e5 * 10f64.powf(i / 2.0) * f64::from(record).log2() / 12.0;
            SweepRow {
                file_bytes: file,
                record_bytes: record,
                rates_bytes_per_s: (0..6).map(|t| base * (1.0 + 0.05 * t as f64)).collect(),
            }
        })
        .collect();
    SweepTable {
        tests: TESTS.to_vec(),
        queue_depth: 1,
        rows,
    }
}

fn draw_sweep(dir: &Path, name: &str, table: &SweepTable) -> (Picture, String) {
    let svg = urmove::cli::plot::sweep_svg("sweep", table, RateUnit::Mb).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, &svg).unwrap();
    (look_at(&path), svg)
}

#[test]
fn every_file_size_of_a_default_sweep_has_its_own_colour_and_the_rate_axis_is_logarithmic() {
    let dir = tmp();
    // 64K to 512M: 14 file sizes, rates over seven decades.
    let (pic, svg) = draw_sweep(dir.path(), "default.svg", &sweep_table(512 << 20));
    assert_drawn(&pic);
    let files: Vec<&String> = pic
        .texts
        .iter()
        .filter(|t| t.starts_with("file "))
        .collect();
    assert_eq!(files.len(), 14, "{files:?}");
    assert!(
        pic.has_text("file 64K") && pic.has_text("file 64M"),
        "{files:?}"
    );
    // A colour each (64K and 64M once shared blue), each line visible.
    assert_eq!(pic.lines(), 14, "{:?}", pic.line_pixels);
    assert_log_rate_axis(&pic, "rate (MB/s, log scale)");
    assert!(
        pic.has_text("1") && pic.has_text("1000000"),
        "decades apart: {:?}",
        pic.texts
    );
    // Within the palette every point is a circle.
    assert_eq!(squares(&svg), 0);

    // Past the palette (18 sizes, to 8G): colours come round again, with
    // square markers, so no two series are drawn alike.
    let (pic, svg) = draw_sweep(dir.path(), "big.svg", &sweep_table(8 << 30));
    assert_eq!(pic.lines(), 16, "{:?}", pic.line_pixels);
    let files = pic.texts.iter().filter(|t| t.starts_with("file ")).count();
    assert_eq!(files, 18);
    // Two series of squares: a marker per record size in each of 6 panels,
    // one in each of their legend samples.
    assert!(squares(&svg) >= 2 * 6 + 2, "{} squares", squares(&svg));
}

/// Filled 6 px squares (the sweep's second marker) in `svg`.
fn squares(svg: &str) -> usize {
    svg.split("<rect")
        .skip(1)
        .filter(|r| r.contains(r#"width="6" height="6""#))
        .count()
}

#[test]
fn a_failed_min_rate_gate_marks_its_worst_window() {
    let dir = tmp();
    let svg = dir.path().join("failed.svg");
    let target = dir.path().join("t");
    std::fs::create_dir(&target).unwrap();
    // No disk here writes 1000 GB/s: every window falls short.
    let o = run(&[
        "bench",
        "--disk",
        p(&target),
        "--mode",
        "write",
        "--size",
        "32M",
        "--time",
        "400ms",
        "--interval",
        "20ms",
        "--min-rate",
        "1000GB",
        "--window",
        "50ms",
        "--json",
        "--plot",
        p(&svg),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let v = crate::util::json(&o);
    assert_eq!(v["min_rate_ok"], false);
    let gate = &v["results"][0]["min_rate"];
    let at = gate["worst_window_at_s"].as_f64().unwrap();
    let pic = look_at(&svg);
    assert_drawn(&pic);
    // The target, the gate and the worst window's rate line.
    assert_eq!(pic.lines(), 3, "{:?}", pic.line_pixels);
    assert!(pic.line_pixels.contains_key(WORST), "{:?}", pic.line_pixels);
    let entry = pic
        .texts
        .iter()
        .find(|t| t.starts_with("worst "))
        .unwrap_or_else(|| panic!("no legend entry: {:?}", pic.texts));
    assert!(entry.starts_with("worst 50 ms window: "), "{entry}");
    assert!(entry.ends_with(&format!(" at {at:.2} s")), "{entry}");
    assert!(entry.contains("B/s"), "its rate: {entry}");
    // Its band: the mark's colour at 15% over white, in the chart and the
    // legend.
    let band = pic.band_pixels((255, 217, 242));
    assert!(band > 500, "{band} pixels of the band");
}

#[test]
fn bench_net_and_send_plot_every_stream_and_the_aggregate() {
    let d = Daemon::start();
    let dir = tmp();
    let svg = dir.path().join("net.svg");
    let o = urmove()
        .args(["bench", "--net", "127.0.0.1", "-p", &d.port.to_string()])
        .args(["-P", "3", "--time", "1s", "--interval", "100ms", "--plot"])
        .arg(&svg)
        .arg("--key-file")
        .arg(&d.key)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let pic = look_at(&svg);
    assert_drawn(&pic);
    assert_eq!(pic.lines(), 4, "{:?}", pic.line_pixels);
    for name in ["stream 0", "stream 1", "stream 2", "aggregate"] {
        assert!(pic.has_text(name), "legend {name}: {:?}", pic.texts);
    }
    assert!(pic.has_text("throughput (Gbit/s)"), "{:?}", pic.texts);
    assert!(
        pic.has_text_containing("urmove bench --net 127.0.0.1:"),
        "{:?}",
        pic.texts
    );

    // send, two streams, a file large enough to keep both busy.
    let src = dir.path().join("big.dat");
    std::fs::write(&src, crate::util::noise(48 << 20, 7)).unwrap();
    let svg = dir.path().join("send.svg");
    let o = d.send(
        &[
            "-P",
            "2",
            "--block",
            "1M",
            "--interval",
            "50ms",
            "--plot",
            p(&svg),
        ],
        &[p(&src), "127.0.0.1:plotted"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let pic = look_at(&svg);
    assert_drawn(&pic);
    assert_eq!(pic.lines(), 3, "{:?}", pic.line_pixels);
    for name in ["stream 0", "stream 1", "aggregate"] {
        assert!(pic.has_text(name), "legend {name}: {:?}", pic.texts);
    }
    assert!(
        pic.has_text_containing("urmove send to 127.0.0.1:"),
        "{:?}",
        pic.texts
    );
}

#[test]
fn a_bad_plot_path_is_a_usage_error_before_anything_runs() {
    let dir = tmp();
    let target = dir.path().join("t");
    std::fs::create_dir(&target).unwrap();
    let missing = dir.path().join("no/such/dir/x.svg");
    let not_svg = dir.path().join("x.png");
    // A directory where the file should go.
    let a_dir = dir.path().join("t.svg");
    std::fs::create_dir(&a_dir).unwrap();
    for bad in [&missing, &not_svg, &a_dir] {
        let o = run(&[
            "bench",
            "--disk",
            p(&target),
            "--size",
            "64M",
            "--plot",
            p(bad),
        ]);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains("--plot"), "{}", stderr(&o));
        assert!(stdout(&o).is_empty(), "nothing ran: {}", stdout(&o));
        assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0);
    }
    // send and bench --net refuse it before they connect: nothing listens
    // on port 1, and the key file does not exist either.
    let key = dir.path().join("no-key");
    let o = urmove()
        .args([
            "send",
            "-p",
            "1",
            "--plot",
            p(&missing),
            "--key-file",
            p(&key),
        ])
        .args([p(&target), "127.0.0.1:x"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--plot"), "{}", stderr(&o));
    let o = urmove()
        .args([
            "bench",
            "--net",
            "127.0.0.1",
            "-p",
            "1",
            "--plot",
            p(&not_svg),
        ])
        .args(["--key-file", p(&key)])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--plot"), "{}", stderr(&o));
    // Nothing was left behind by the checks.
    let mut left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ["t", "t.svg"]);
}
