//! Running a resolved transfer: a printer watches it, a plot records it
//! when `--plot` asks, and its outcome becomes an exit code; a `-P auto`
//! refused as too many streams runs again on what the receiver takes.

use crate::coord::units::RateUnit;
use crate::session::client::config::SendConfig;
use crate::session::client::report::{SendObserver, SendReport};
use crate::session::SessionError;

use crate::cli::plot::{self, PlotFile, RatePlot};
use crate::cli::render::{self, Format};
use crate::cli::{Failure, EXIT_FAILED, EXIT_PARTIAL};

use super::printer::SendPrinter;
use super::summary::{finish_failed, finish_send};

/// Print the outcome of a transfer (or why it never started) and turn it
/// into an exit code: machines get a JSON document either way.
fn conclude(
    printer: &mut SendPrinter,
    command: &str,
    result: Result<SendReport, crate::session::SessionError>,
) -> Result<u8, Failure> {
    match result {
        Ok(report) => {
            finish_send(printer, &report);
            Ok(match report.status {
                "ok" => 0,
                "partial" => EXIT_PARTIAL,
                _ => EXIT_FAILED,
            })
        }
        Err(e) => {
            finish_failed(printer, command, &e);
            let usage = e.is_usage();
            let e = anyhow::anyhow!("{e}");
            Err(if usage {
                Failure::Usage(e)
            } else {
                Failure::Run(e)
            })
        }
    }
}

/// Where `--plot` writes, and the rates it records there.
pub(super) struct NetPlot {
    file: PlotFile,
    rates: RatePlot,
}

/// The plot `--plot` asks for: a transfer's rates, per stream and in
/// aggregate, titled `urmove {what} HOST:PORT`.
pub(super) fn net_plot(file: Option<PlotFile>, what: &str, cfg: &SendConfig) -> Option<NetPlot> {
    let rates = RatePlot {
        title: format!(
            "urmove {what} {}:{}, {} streams ({})",
            cfg.host,
            cfg.port,
            cfg.streams,
            plot::host_and_date()
        ),
        unit: RateUnit::Gbit,
        time_axis: "time since the data started (s)",
        panels: Vec::new(),
        min_rate_bytes_per_s: None,
        worst_windows: Vec::new(),
    };
    file.map(|file| NetPlot { file, rates })
}

/// Run a transfer with `printer` watching it, recording its intervals
/// into a plot when `--plot` asked for one; write the plot (also after a
/// failed run: it shows how far it got) and conclude.
pub(super) fn run_plotted(
    printer: &mut SendPrinter,
    command: &str,
    plotting: Option<NetPlot>,
    run: impl FnOnce(&mut dyn SendObserver) -> Result<SendReport, crate::session::SessionError>,
) -> Result<u8, Failure> {
    let (file, mut rates) = plotting.map(|p| (p.file, p.rates)).unzip();
    let mut recorder = plot::NetRecorder::new(printer, rates.as_mut());
    let result = run(&mut recorder);
    recorder.finish();
    let (Some(file), Some(rates), Ok(_)) = (file, rates, &result) else {
        return conclude(printer, command, result);
    };
    let plotted = rates.to_svg().and_then(|svg| file.write(&svg));
    if plotted.is_ok() && printer.format == Format::Human {
        printer
            .out
            .line(&format!("plot written to {}", file.path().display()));
    }
    let code = conclude(printer, command, result)?;
    match plotted {
        Ok(()) => Ok(code),
        Err(e) => {
            render::error(&format!("{e:#}"));
            Ok(EXIT_FAILED)
        }
    }
}

type Run<'a> =
    dyn FnMut(&SendConfig, &mut dyn SendObserver) -> Result<SendReport, SessionError> + 'a;

/// Run; when `-P auto` asked for more streams than the receiver takes,
/// say so and run again (nothing was sent yet) on what it takes, still
/// `auto` when that is more than `AUTO_START`.
pub(super) fn fewer_if_refused(
    cfg: &SendConfig,
    obs: &mut dyn SendObserver,
    run: &mut Run<'_>,
) -> Result<SendReport, SessionError> {
    use crate::session::client::send::AUTO_START;
    match run(cfg, obs) {
        // The daemon's refusal names the most it takes, as a field.
        Err(SessionError::TooManyStreams {
            max, ours: false, ..
        }) if cfg.auto_streams => {
            let most = max.max(1);
            obs.notice(&format!(
                "-P auto: the receiver takes at most {most} streams; going on with {most}"
            ));
            let fewer = SendConfig {
                streams: most,
                auto_streams: most > AUTO_START,
                ..cfg.clone()
            };
            run(&fewer, obs)
        }
        other => other,
    }
}
