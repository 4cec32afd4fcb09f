//! `--plot FILE.svg` as a user runs it: the real binary on real files and
//! against a real daemon. Every picture must be well-formed XML, render
//! (resvg) to a PNG with real content, and hold a visible line per target
//! or stream plus the aggregate (and the --min-rate line when set), each
//! named in the legend.

use std::collections::BTreeMap;
use std::path::Path;

use resvg::{tiny_skia, usvg};

use crate::transfer::Daemon;
use crate::util::{run, stderr, stdout, urmove};

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
}

impl Picture {
    fn has_text(&self, t: &str) -> bool {
        self.texts.iter().any(|x| x == t)
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
        // Wide enough that a stall of this shared machine's disk (a 50 ms
        // window once saw none of the bytes) does not fail the gate: the
        // picture is under test here.
        "--window",
        "200ms",
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
    assert!(pic.has_text("rate (MB/s)"), "{:?}", pic.texts);
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
