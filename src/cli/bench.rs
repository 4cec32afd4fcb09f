//! `urmove bench`: `--disk` resolved, run, shown and plotted here; `--net`
//! and `--udp` are handed to [`super::transfer`] and [`super::udp`].

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use anyhow::Context;

use crate::bench::disk::MinRate;
use crate::bench::sweep::{run_sweep, SweepSpec};
use crate::bench::{run_disk_bench, DiskBenchConfig, DiskReport, Mode, SizeRule};
use crate::coord::units::RateUnit;
use crate::datapath::DirectMode;

use super::args::{BenchArgs, DirectArg, ModeArg, UnitsArg};
use super::progress::Show;
use super::render::{self, Format, Out, Printer};
use super::{interrupt_flag, plot, transfer, udp, Failure, EXIT_FAILED};

fn ram_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kib| kib * 1024)
}

fn default_target() -> PathBuf {
    std::env::var_os("TMPDIR")
        .map(PathBuf::from)
        .filter(|p| p.is_dir())
        .unwrap_or_else(|| PathBuf::from("/var/tmp"))
}

/// Resolve `bench --disk` arguments into a config.
/// `--rate`: a recorder's sequential writes only, at a rate above zero,
/// for `--time` or `--size`; the file's size when only `--time` is given
/// (RATE x its length, in whole blocks).
fn recorder_size(
    a: &BenchArgs,
    modes: &[Mode],
    rate: Option<f64>,
    bs: u64,
) -> Result<Option<u64>, String> {
    let Some(rate) = rate else { return Ok(None) };
    if modes != [Mode::Write] || a.sweep {
        return Err("--rate paces a recorder's writes: use it with --mode write alone".into());
    }
    if rate <= 0.0 {
        return Err("--rate must be above zero".into());
    }
    match (a.size, a.time) {
        (Some(_), _) => Ok(None),
        (None, Some(t)) => {
            Ok(Some((rate * t.as_secs_f64()) as u64).map(|b| b.div_ceil(bs).max(1) * bs))
        }
        (None, None) => Err("--rate needs --time (or --size): how long the recording runs".into()),
    }
}

fn disk_config(a: &BenchArgs) -> Result<(DiskBenchConfig, Option<SweepSpec>), Failure> {
    let usage = |m: String| Failure::Usage(anyhow::anyhow!(m));
    let mut modes: Vec<Mode> = a
        .mode
        .iter()
        .map(|m| match m {
            ModeArg::Write => Mode::Write,
            ModeArg::Read => Mode::Read,
            ModeArg::Randread => Mode::RandRead,
            ModeArg::Randwrite => Mode::RandWrite,
            ModeArg::Rw => Mode::Rw,
        })
        .collect();
    modes.dedup();
    let bs_default: u64 = if modes
        .iter()
        .all(|m| matches!(m, Mode::RandRead | Mode::RandWrite | Mode::Rw))
    {
        4096
    } else {
        1 << 20
    };
    let bs = a.bs.unwrap_or(if a.sweep { 16 << 20 } else { bs_default });
    if bs == 0 || bs > u64::from(crate::datapath::disk::BS_MAX) {
        return Err(usage(format!(
            "--bs {bs} is out of range (1 to {} bytes)",
            crate::datapath::disk::BS_MAX
        )));
    }
    if a.interval.is_zero() {
        return Err(usage("--interval must be above zero".into()));
    }
    if a.window.is_zero() {
        return Err(usage("--window must be above zero".into()));
    }
    if a.time.is_some_and(|t| t.is_zero()) {
        return Err(usage("--time must be above zero".into()));
    }
    if a.size == Some(0) {
        return Err(usage("--size must be above zero".into()));
    }
    let targets = if a.targets.is_empty() {
        vec![default_target()]
    } else {
        a.targets.clone()
    };
    let rate = a.rate.as_ref().map(|r| r.bytes_per_s);
    let recorded = recorder_size(a, &modes, rate, bs).map_err(usage)?;
    let cfg = DiskBenchConfig {
        targets,
        modes,
        mix_read_pct: a.mix,
        bs: bs as u32,
        size: match a.size.or(recorded) {
            Some(s) => SizeRule::Given(s),
            None => SizeRule::Default {
                ram_bytes: ram_bytes(),
            },
        },
        rate,
        qd: a.qd.unwrap_or(if a.sweep { 1 } else { 32 }),
        time: a.time,
        ramp: a.ramp,
        interval: a.interval,
        direct: match a.direct {
            DirectArg::Auto => DirectMode::Auto,
            DirectArg::Required => DirectMode::Required,
            DirectArg::Off => DirectMode::Off,
        },
        fsync: a.fsync,
        verify: a.verify,
        seed: a.seed,
        // A recording stays for its copy.
        keep: a.keep || rate.is_some(),
        zeros: a.zeros,
        destroy: a.destroy,
        min_rate: a.min_rate.map(|r| MinRate {
            bytes_per_s: r.bytes_per_s,
            window: a.window,
        }),
    };
    let sweep = a.sweep.then(|| {
        let d = SweepSpec::default();
        SweepSpec {
            file_max: a.size.unwrap_or(d.file_max),
            record_max: bs as u32,
            file_min: d.file_min.min(a.size.unwrap_or(d.file_max)),
            record_min: d.record_min,
        }
    });
    Ok((cfg, sweep))
}

pub(super) fn bench(a: BenchArgs) -> Result<u8, Failure> {
    if a.net.is_some() && a.udp {
        return udp::bench_udp(a);
    }
    if a.net.is_some() {
        return transfer::bench_net(a);
    }
    let format = Format::pick(a.json, a.json_stream);
    let result = bench_run(&a, format);
    if let Err(Failure::Usage(e) | Failure::Run(e)) = &result {
        // Machines get a document even when the run never started.
        if format != Format::Human {
            let mut doc =
                serde_json::json!({"schema": 1, "status": "error", "error": format!("{e:#}")});
            if format == Format::JsonStream {
                doc["type"] = "summary".into();
            }
            Out::default().line(&doc.to_string());
        }
    }
    result
}

fn bench_run(a: &BenchArgs, format: Format) -> Result<u8, Failure> {
    let (cfg, sweep) = disk_config(a)?;
    let plot_file = a.plot.as_deref().map(plot::PlotFile::check).transpose()?;
    let run = DiskRun {
        targets_shown: cfg
            .targets
            .iter()
            .map(|t| t.display().to_string())
            .collect::<Vec<_>>()
            .join(" "),
        units: match a.units {
            UnitsArg::Mb => RateUnit::Mb,
            UnitsArg::Mib => RateUnit::Mib,
            UnitsArg::Gbit => RateUnit::Gbit,
        },
        cfg,
        sweep,
        plot_file,
    };
    let mut printer = run.printer(a, format);
    let interrupt = interrupt_flag().map_err(Failure::Run)?;
    let mut rates = run.rate_plot();
    let result = run.run(&mut printer, rates.as_mut(), &interrupt);
    printer.end_bar();
    let report = result?;
    if let Some(r) = rates.as_mut() {
        r.title = run.plot_title(report.env.queue_depth);
    }
    if let (Some(path), Some(table)) = (&a.csv, &report.sweep) {
        write_csv(path, table, run.units).map_err(Failure::Run)?;
    }
    if let Some(r) = rates.as_mut() {
        r.mark_short_windows(&report.results);
    }
    let plotted = run.write_plot(&report, rates.as_ref(), &mut printer);
    finish(&mut printer, &report);
    if let Err(e) = &plotted {
        render::error(&format!("{e:#}"));
    }
    Ok(if report.status == "ok" && plotted.is_ok() {
        0
    } else {
        EXIT_FAILED
    })
}

/// A `bench --disk` run as the command line set it up: what runs, in
/// which unit it is shown, and where it is plotted.
struct DiskRun {
    cfg: DiskBenchConfig,
    sweep: Option<SweepSpec>,
    units: RateUnit,
    /// The targets, as titles name them.
    targets_shown: String,
    plot_file: Option<plot::PlotFile>,
}

impl DiskRun {
    /// The printer for `format`, with the header a human sees; says
    /// `--rate` back.
    fn printer(&self, a: &BenchArgs, format: Format) -> Printer {
        let mut printer = Printer::new(format, self.units, Show::resolve(a.show, format));
        printer.min_rate_unit = a.min_rate.map(|r| r.unit);
        if let (Some(r), false) = (a.rate, printer.show.quiet) {
            render::info(&format!(
                "--rate {}: written as a recorder writes",
                r.echo()
            ));
        }
        if format == Format::Human && !printer.show.quiet {
            printer.header = Some(render::DiskHeader {
                what: if self.sweep.is_some() {
                    "sweep"
                } else {
                    "disk"
                },
                target_count: self.cfg.targets.len(),
                block_size_bytes: self.cfg.bs,
            });
        }
        printer
    }

    /// The rate plot's title at queue depth `qd`.
    fn plot_title(&self, qd: u32) -> String {
        let cfg = &self.cfg;
        format!(
            "urmove bench --disk {}: {} blocks, QD {qd}{} ({})",
            self.targets_shown,
            crate::coord::units::bytes_binary(u64::from(cfg.bs)),
            cfg.min_rate.map_or(String::new(), |m| format!(
                ", --min-rate over {} windows",
                crate::coord::units::duration_s(m.window.as_secs_f64())
            )),
            plot::host_and_date()
        )
    }

    /// The rate plot to record, when `--plot` asks for one.
    fn rate_plot(&self) -> Option<plot::RatePlot> {
        self.plot_file.as_ref().map(|_| plot::RatePlot {
            title: self.plot_title(self.cfg.qd),
            unit: self.units,
            time_axis: "time since the phase started (s)",
            panels: Vec::new(),
            min_rate_bytes_per_s: self.cfg.min_rate.map(|m| m.bytes_per_s),
            worst_windows: Vec::new(),
        })
    }

    /// Run the sweep, or the benchmark with `rates` recording it.
    fn run(
        &self,
        printer: &mut Printer,
        rates: Option<&mut plot::RatePlot>,
        interrupt: &AtomicBool,
    ) -> Result<DiskReport, Failure> {
        let cfg = &self.cfg;
        let result = match &self.sweep {
            Some(spec) => {
                let mut rows = Vec::new();
                let r = {
                    let mut on_row = |row: &crate::bench::sweep::SweepRow| rows.push(row.clone());
                    let mut sink = ErrSink(printer.header.take());
                    run_sweep(cfg, spec, interrupt, &mut sink, &mut on_row)
                };
                printer.sweep_header();
                for row in &rows {
                    printer.sweep_row(row);
                }
                r
            }
            None => {
                let mut recorder = plot::DiskRecorder {
                    inner: printer,
                    plot: rates,
                    single: (cfg.targets.len() == 1).then(|| cfg.targets[0].display().to_string()),
                };
                run_disk_bench(cfg, interrupt, &mut recorder)
            }
        };
        result.map_err(|e| {
            let usage = e.is_usage();
            // The typed error's message already names its cause.
            let e = anyhow::anyhow!("{e}");
            if usage {
                Failure::Usage(e)
            } else {
                Failure::Run(e)
            }
        })
    }

    /// Write the plot `--plot` asks for: the sweep's matrix, or `rates`.
    fn write_plot(
        &self,
        report: &DiskReport,
        rates: Option<&plot::RatePlot>,
        printer: &mut Printer,
    ) -> anyhow::Result<()> {
        let Some(file) = &self.plot_file else {
            return Ok(());
        };
        let svg = match (&report.sweep, rates) {
            (Some(table), _) => plot::sweep_svg(
                &format!(
                    "urmove bench --disk --sweep {}: rate by record and file size, QD {} ({})",
                    self.targets_shown,
                    table.queue_depth,
                    plot::host_and_date()
                ),
                table,
                self.units,
            ),
            (None, Some(r)) => r.to_svg(),
            (None, None) => unreachable!("a rate plot is recorded whenever --plot is given"),
        };
        svg.and_then(|svg| file.write(&svg))?;
        if printer.format == Format::Human {
            printer
                .out
                .line(&format!("plot written to {}", file.path().display()));
        }
        Ok(())
    }
}

/// Print the summary document (JSON) or the closing words (human).
fn finish(printer: &mut Printer, report: &DiskReport) {
    match printer.format {
        Format::Json => {
            let doc = serde_json::to_string_pretty(report).expect("reports serialize");
            printer.out.line(&doc);
        }
        Format::JsonStream => {
            let mut v = serde_json::to_value(report).expect("reports serialize");
            v["type"] = "summary".into();
            printer.out.line(&v.to_string());
        }
        Format::Human => {
            for f in &report.env.fallbacks {
                printer.out.line(&format!("fallback: {f}"));
            }
        }
    }
    if let Some(e) = &report.error {
        eprintln!("urmove: error: {e}");
    }
    if report.min_rate_ok == Some(false) {
        eprintln!("urmove: error: {}", gate_failed(printer, report));
    }
}

/// Why the --min-rate gate failed, whole in itself: under --json no
/// summary line stands above it.
fn gate_failed(printer: &Printer, report: &DiskReport) -> String {
    let failed: Vec<String> = report
        .results
        .iter()
        .filter_map(|r| r.min_rate.as_ref().filter(|g| !g.ok).map(|g| (r, g)))
        .map(|(r, g)| {
            format!(
                "in {} the worst {} window was {} at {:.2} s",
                r.mode,
                crate::coord::units::duration_s(g.window_s),
                crate::coord::units::rate(g.worst_window_bytes_per_s, printer.units),
                g.worst_window_at_s
            )
        })
        .collect();
    let gate = report.results.iter().find_map(|r| r.min_rate.as_ref());
    format!(
        "the sustained rate fell below --min-rate {}: {}",
        gate.map_or(String::new(), |g| printer
            .min_rate_text(g.min_rate_bytes_per_s)),
        failed.join("; ")
    )
}

/// Sweep cells print as rows; notices still go to stderr, and the header
/// (if any) once the queue depth is known.
struct ErrSink(Option<render::DiskHeader>);

impl crate::bench::Observer for ErrSink {
    fn notice(&mut self, message: &str) {
        render::warn(message);
    }
    fn started(&mut self, queue_depth: u32) {
        if let Some(h) = self.0.take() {
            Out::default().line(&h.text(queue_depth));
        }
    }
    fn interval(&mut self, _: &crate::bench::IntervalLine, _: &[crate::bench::IntervalLine]) {}
    fn phase_done(&mut self, _: &[crate::bench::ModeResult]) {}
}

fn write_csv(
    path: &std::path::Path,
    table: &crate::bench::sweep::SweepTable,
    units: RateUnit,
) -> anyhow::Result<()> {
    let unit = render::rate_unit_name(units).replace('/', "_per_");
    let mut s = String::from("file_bytes,record_bytes");
    for t in &table.tests {
        s += &format!(",{t}_{unit}");
    }
    s.push('\n');
    for row in &table.rows {
        s += &format!("{},{}", row.file_bytes, row.record_bytes);
        for r in &row.rates_bytes_per_s {
            s += &format!(",{:.3}", render::rate_in(*r, units));
        }
        s.push('\n');
    }
    std::fs::write(path, s).with_context(|| format!("writing {}", path.display()))
}
