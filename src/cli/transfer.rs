//! `urmove recv` and `urmove send` on the command line.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::coord::units::{self, RateUnit};
use crate::datapath::net::ZeroCopy;
use crate::datapath::DirectMode;
use crate::session::client::config::SendConfig;
use crate::session::client::report::{NetInterval, SendObserver, SendReport};
use crate::session::client::send::run_send;
use crate::session::daemon::{serve, RecvConfig};
use crate::session::{SessionError, DEFAULT_PORT};

use super::args::{DirectArg, RecvArgs, SendArgs, ZeroCopyArg};
use super::plot::{self, PlotFile, RatePlot};
use super::progress::{self, Bar, Progress, Show};
use super::render::{self, Format, Out};
use super::{interrupt_flag, keys, Failure, EXIT_FAILED, EXIT_PARTIAL};

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
            printer.end_bar();
            if printer.format != Format::Human {
                // The core fields scripts rely on, also when nothing moved.
                let mut doc = serde_json::json!({
                    "schema": 1, "command": command, "status": e.code().name(), "error": e.to_string(),
                    "bytes": 0, "bytes_skipped": 0, "files": 0, "files_verified": 0,
                    "files_skipped": 0, "skipped": [], "elapsed_s": 0.0, "rate_bits_per_s": 0.0,
                    "interval_rate_min_bits_per_s": 0.0, "intervals_full": 0, "streams": printer.streams,
                });
                if let Some(s) = printer.shard {
                    doc["shard"] = serde_json::json!({"index": s.index, "count": s.count});
                }
                if printer.format == Format::JsonStream {
                    doc["type"] = "summary".into();
                }
                printer.out.line(&doc.to_string());
            }
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

/// The plot `--plot` asks for: a transfer's rates, per stream and in
/// aggregate, titled `urmove {what} HOST:PORT`.
fn net_plot(file: Option<PlotFile>, what: &str, cfg: &SendConfig) -> Option<(PlotFile, RatePlot)> {
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
    file.map(|f| (f, rates))
}

/// Run a transfer with `printer` watching it, recording its intervals
/// into a plot when `--plot` asked for one; write the plot (also after a
/// failed run: it shows how far it got) and conclude.
fn run_plotted(
    printer: &mut SendPrinter,
    command: &str,
    plotting: Option<(PlotFile, RatePlot)>,
    run: impl FnOnce(&mut dyn SendObserver) -> Result<SendReport, crate::session::SessionError>,
) -> Result<u8, Failure> {
    let (file, mut rates) = plotting.unzip();
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

/// A frame size the receiver accepts: a multiple of 4096 up to the limit.
/// The limit is named first: a size above it is refused for that, even
/// when it is also no multiple of 4096.
fn check_block(flag: &str, block: u64) -> Result<(), Failure> {
    let max = u64::from(crate::protocol::frame::FRAME_PAYLOAD_MAX);
    let refuse = |why: String| Err(Failure::Usage(anyhow::anyhow!("{flag} {block}{why}")));
    if block > max {
        return refuse(format!(
            " ({}) is above the largest frame, {max} ({})",
            units::bytes_binary(block),
            units::bytes_binary(max)
        ));
    }
    if block == 0 || !block.is_multiple_of(4096) {
        return refuse(format!(
            " must be a multiple of 4096 (4 KiB), at most {max}"
        ));
    }
    Ok(())
}

fn zerocopy(z: ZeroCopyArg) -> ZeroCopy {
    match z {
        ZeroCopyArg::Auto => ZeroCopy::Auto,
        ZeroCopyArg::On => ZeroCopy::On,
        ZeroCopyArg::Off => ZeroCopy::Off,
    }
}

fn direct(d: DirectArg) -> DirectMode {
    match d {
        DirectArg::Auto => DirectMode::Auto,
        DirectArg::Required => DirectMode::Required,
        DirectArg::Off => DirectMode::Off,
    }
}

fn listen_addr(s: &str) -> anyhow::Result<SocketAddr> {
    let with_port = if s.parse::<SocketAddr>().is_ok()
        || s.rsplit_once(':')
            .is_some_and(|(h, p)| !h.ends_with(':') && p.parse::<u16>().is_ok() && !h.is_empty())
    {
        s.to_string()
    } else {
        format!("{s}:{DEFAULT_PORT}")
    };
    with_port
        .to_socket_addrs()
        .with_context(|| format!("--listen {s}"))?
        .next()
        .with_context(|| format!("--listen {s}: no address"))
}

pub fn recv(a: RecvArgs) -> Result<u8, Failure> {
    let usage = |e: anyhow::Error| Failure::Usage(e);
    let set = super::config::resolve(&a).map_err(|e| usage(anyhow::anyhow!(e)))?;
    let key = keys::load(&set.key_file).map_err(usage)?;
    let listen = listen_addr(&set.listen).map_err(usage)?;
    let stop = interrupt_flag().map_err(Failure::Run)?;
    let cfg = RecvConfig {
        listen,
        root: set.root.clone(),
        key,
        direct: direct(set.direct),
        handshake_timeout: set.handshake_timeout,
        stream_wait: Duration::from_secs(30),
        interval: (!set.interval.is_zero()).then_some(set.interval),
        timeout: set.timeout,
        limits: crate::session::daemon::Limits {
            sessions: set.max_sessions,
            connections: set.max_connections,
            unauthenticated_per_address: set.max_unauthenticated_per_address,
            streams: set.max_streams,
            files: set.max_files,
            buffer_bytes: set.max_buffer_memory,
            manifest_bytes: set.max_manifest_memory,
            min_rate_bytes_per_s: set.min_rate.bytes_per_s as u64,
        },
        require_encryption: set.require_encryption,
        state_dir: set.state_dir.clone(),
        keep_setid: set.keep_setid,
        devices: set.devices,
        unsafe_links: match set.unsafe_links {
            super::args::LinksArg::Keep => crate::session::sink::rules::LinkPolicy::Keep,
            super::args::LinksArg::Skip => crate::session::sink::rules::LinkPolicy::Skip,
            super::args::LinksArg::Refuse => crate::session::sink::rules::LinkPolicy::Refuse,
        },
        pull_only: set.pull_only,
        udp: set.udp,
        udp_time_max: set.udp_time_max,
        congestion: set.cc.clone(),
        lanes: set.lanes,
        part_max_age: (!set.part_max_age.is_zero()).then_some(set.part_max_age),
    };
    let log = super::service::logger(set.log_format);
    let stats = Arc::new(crate::session::daemon::DaemonStats::default());
    let metrics_stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    if let Some(addr) = &set.metrics {
        let bound =
            super::service::serve_metrics(addr, Arc::clone(&stats), Arc::clone(&metrics_stop))
                .map_err(|e| usage(anyhow::anyhow!(e)))?;
        log(
            crate::session::daemon::log::Level::Info,
            &format!("metrics at http://{bound}/metrics"),
        );
    }
    let served = serve(cfg, &stop, Arc::clone(&log), stats, &mut |addr| {
        listening(addr, set.min_rate, &log);
    });
    super::service::sd_notify("STOPPING=1");
    metrics_stop.store(true, std::sync::atomic::Ordering::Relaxed);
    served.map_err(|e| {
        let e = anyhow::anyhow!("{e}");
        Failure::Usage(e)
    })?;
    Ok(0)
}

/// The daemon listens on `addr`: systemd is told, and a `--min-rate`
/// other than the default is said back in the unit given.
fn listening(
    addr: SocketAddr,
    min_rate: super::parse::Rate,
    log: &crate::session::daemon::log::Log,
) {
    super::service::sd_notify(&format!("READY=1\nSTATUS=listening on {addr}"));
    if min_rate != super::config::min_rate_default() {
        log(
            crate::session::daemon::log::Level::Info,
            &format!(
                "--min-rate {}: a sender slower over a whole --timeout ends its session",
                min_rate.echo()
            ),
        );
    }
}

/// `HOST:DEST`, with `[v6]:DEST` for IPv6 literals; a `:` after a `/` is
/// part of a local path (`./a:b`), as scp reads it.
fn split_target(t: &str) -> Option<(String, String)> {
    if let Some(rest) = t.strip_prefix('[') {
        let (host, dest) = rest.split_once("]:")?;
        return Some((host.to_string(), dest.to_string()));
    }
    let (host, dest) = t.split_once(':')?;
    (!host.is_empty() && !host.contains('/')).then(|| (host.to_string(), dest.to_string()))
}

/// `HOST:PATH` as the user wrote it, and the relative path to give
/// instead of an absolute one: urmove's paths are beneath the daemon's
/// root (`--root`), and the daemon refuses absolute ones. `what` names the
/// path (DEST, PATH), `whose` the side whose root it is under.
fn beneath_root(host: &str, path: &str, (what, whose): (&str, &str)) -> Result<(), Failure> {
    if !path.starts_with('/') {
        return Ok(());
    }
    let host = match host.contains(':') {
        true => format!("[{host}]"),
        false => host.to_string(),
    };
    let rel = path.trim_start_matches('/');
    let instead = match rel {
        "" => format!("{host}: for the root itself"),
        rel => format!("{host}:{rel} for ROOT/{rel}"),
    };
    Err(Failure::Usage(anyhow::anyhow!(
        "{host}:{path}: an absolute path is refused: {what} is relative to the {whose}'s root (its --root); give {instead}"
    )))
}

/// The refusal of a `send` whose last argument is no `HOST:DEST`: when a
/// source names a host, the user meant `pull`.
fn no_target(target: &str, sources: &[String]) -> Failure {
    let remote = sources.iter().any(|s| split_target(s).is_some());
    Failure::Usage(anyhow::anyhow!(match remote {
        true => format!(
            "{target}: the last argument must be HOST:DEST, and {} names a host: to fetch from it into {target}, run `urmove pull {} {target}` (with the same options)",
            sources.iter().find(|s| split_target(s).is_some()).expect("one does"),
            sources.join(" ")
        ),
        false => format!("{target}: the last argument must be HOST:DEST (DEST may be empty)"),
    }))
}

/// The refusal of a `pull` argument that is no `HOST:PATH`: when the last
/// argument names a host, the user meant `send`.
fn no_source(arg: &str, remotes: &[String], local: &str) -> Failure {
    Failure::Usage(anyhow::anyhow!(match split_target(local) {
        Some(_) => format!(
            "{arg}: expected HOST:PATH, and the last argument {local} names a host: to push {arg} to it, run `urmove send {} {local}` (with the same options)",
            remotes.join(" ")
        ),
        None => format!("{arg}: expected HOST:PATH"),
    }))
}

/// Progress and summaries of `send`, `pull` and `bench --net`: interval
/// lines or a bar (human), or JSON.
pub(crate) struct SendPrinter {
    format: Format,
    show: Show,
    out: Out,
    /// The bar's label: `Net Out` or `Net In`.
    direction: &'static str,
    /// A run of fixed length (`bench --net`), in seconds: its bar counts time.
    time_s: Option<f64>,
    /// Files done (acknowledged) so far, and in all.
    files: Option<(Arc<AtomicU64>, u64)>,
    bar: Option<Bar>,
    last: Option<NetInterval>,
    /// The details printed so far (`-v`), each at most once per run.
    details: Vec<String>,
    /// The streams asked for (for the summary of a run that never started).
    pub(crate) streams: u16,
    /// `send --shard`: named also in the summary of a run that failed
    /// before its data, so `urmove report` says which shard it was.
    pub(crate) shard: Option<crate::session::plan::shard::Shard>,
}

impl SendPrinter {
    pub(crate) fn new(format: Format, show: Show) -> Self {
        SendPrinter {
            format,
            show,
            out: Out::default(),
            direction: "Net Out",
            time_s: None,
            files: None,
            bar: None,
            last: None,
            details: Vec::new(),
            streams: 0,
            shard: None,
        }
    }

    fn human_line(&self, l: &NetInterval) -> String {
        let iv = &l.interval;
        if l.total_bytes == 0 {
            // A memory-to-memory test has no total: no percent, no ETA.
            return format!(
                "{}  {}: {}  Avg: {}  {}",
                render::wall_clock(),
                self.direction,
                units::rate(iv.rate_bytes_per_s, RateUnit::Gbit),
                units::rate(iv.avg_rate_bytes_per_s, RateUnit::Gbit),
                units::bytes_decimal(iv.total_bytes)
            );
        }
        let pct = 100.0 * l.done_bytes() as f64 / l.total_bytes as f64;
        let left = l.total_bytes.saturating_sub(l.done_bytes()) as f64;
        let eta = if iv.avg_rate_bytes_per_s > 0.0 {
            left / iv.avg_rate_bytes_per_s
        } else {
            0.0
        };
        if let Some(lag) = l.lag {
            // Following files: the total grows, so no ETA; the lag instead.
            return format!(
                "{}  {}: {}  Avg: {}  {}  lag {} {:.2}s",
                render::wall_clock(),
                self.direction,
                units::rate(iv.rate_bytes_per_s, RateUnit::Gbit),
                units::rate(iv.avg_rate_bytes_per_s, RateUnit::Gbit),
                units::bytes_decimal(l.done_bytes()),
                units::bytes_decimal(lag.bytes),
                lag.seconds
            );
        }
        format!(
            "{}  {}: {}  Avg: {}  {pct:.1}%  ETA {}s",
            render::wall_clock(),
            self.direction,
            units::rate(iv.rate_bytes_per_s, RateUnit::Gbit),
            units::rate(iv.avg_rate_bytes_per_s, RateUnit::Gbit),
            eta.ceil() as u64
        )
    }

    /// The bar's fill and text: percent, ETA, rate, average, files done of
    /// all, bytes done (of the total); what matters most comes first, as a
    /// narrow terminal cuts the end.
    fn bar_text(&self, l: &NetInterval) -> (f64, String) {
        let iv = &l.interval;
        let (fraction, eta, of) = match self.time_s {
            Some(t) => (iv.end_s / t, t - iv.end_s, String::new()),
            None if l.total_bytes == 0 => (1.0, 0.0, String::new()),
            None => {
                let left = l.total_bytes.saturating_sub(l.done_bytes()) as f64;
                let eta = if iv.avg_rate_bytes_per_s > 0.0 {
                    left / iv.avg_rate_bytes_per_s
                } else {
                    0.0
                };
                (
                    l.done_bytes() as f64 / l.total_bytes as f64,
                    eta,
                    format!(" of {}", units::bytes_decimal(l.total_bytes)),
                )
            }
        };
        let mut text = format!(
            "{:5.1}%  {}  {}  avg {}",
            100.0 * fraction.min(1.0),
            progress::eta(eta),
            units::rate(iv.rate_bytes_per_s, RateUnit::Gbit),
            units::rate(iv.avg_rate_bytes_per_s, RateUnit::Gbit),
        );
        if let Some((done, total)) = &self.files {
            text += &format!("  {}/{total} files", done.load(Ordering::Relaxed));
        }
        text += &format!("  {}{of}", units::bytes_decimal(l.done_bytes()));
        (fraction, text)
    }

    fn draw(&mut self, l: &NetInterval) {
        let (fraction, text) = self.bar_text(l);
        let direction = self.direction;
        self.bar
            .get_or_insert_with(|| Bar::new(direction))
            .show(fraction, text);
    }

    /// Leave the bar with the run's last figures (acknowledgements go on
    /// arriving after the data), before the summary.
    fn end_bar(&mut self) {
        if let (Some(bar), Some(l)) = (&self.bar, &self.last) {
            let (fraction, text) = self.bar_text(l);
            bar.show(fraction, text);
            bar.finish();
        }
        self.bar = None;
    }

    /// A line on stderr that does not tear the bar.
    fn to_stderr(&self, f: impl FnOnce()) {
        match &self.bar {
            Some(bar) => bar.suspend(f),
            None => f(),
        }
    }
}

impl SendObserver for SendPrinter {
    fn interval(&mut self, l: &NetInterval) {
        let iv = &l.interval;
        match self.format {
            Format::Human => {
                self.last = Some(*l);
                match self.show.progress {
                    Progress::Lines => {
                        let line = self.human_line(l);
                        self.out.line(&line);
                    }
                    Progress::Bar => self.draw(l),
                    Progress::Off => {}
                }
            }
            Format::JsonStream => {
                let v = serde_json::json!({
                    "type": "interval",
                    "t_s": iv.end_s,
                    "interval_s": iv.len_s,
                    "bytes": iv.bytes,
                    "rate_bits_per_s": iv.rate_bytes_per_s * 8.0,
                    "avg_rate_bits_per_s": iv.avg_rate_bytes_per_s * 8.0,
                    "total_bytes": iv.total_bytes,
                    "unsent_bytes": l.unsent_bytes,
                    "expected_bytes": l.total_bytes,
                });
                let mut v = v;
                if let Some(lag) = l.lag {
                    v["lag_bytes"] = lag.bytes.into();
                    v["lag_s"] = lag.seconds.into();
                }
                self.out.line(&v.to_string());
            }
            Format::Json => {}
        }
    }

    fn notice(&mut self, message: &str) {
        self.to_stderr(|| render::warn(message));
    }

    fn info(&mut self, message: &str) {
        if !self.show.quiet {
            self.to_stderr(|| render::info(message));
        }
    }

    fn detail(&mut self, message: &str) {
        if self.show.verbose && !self.details.iter().any(|d| d == message) {
            self.details.push(message.to_string());
            self.to_stderr(|| render::info(message));
        }
    }

    fn files(&mut self, done: Arc<AtomicU64>, total: u64) {
        self.files = Some((done, total));
    }
}

/// A send's target as given (`HOST:DEST`), split, and its sources.
type Aim = (String, (String, String), Vec<PathBuf>);

/// What `a` sends where (see [`Aim`]), its rates checked.
fn send_what(a: &SendArgs) -> Result<Aim, Failure> {
    let usage = |m: String| Failure::Usage(anyhow::anyhow!(m));
    let (target, sources) = a.args.split_last().expect("clap requires two or more");
    let (host, dest) = split_target(target).ok_or_else(|| no_target(target, sources))?;
    beneath_root(&host, &dest, ("DEST", "receiver"))?;
    let mut sources: Vec<PathBuf> = sources.iter().map(PathBuf::from).collect();
    if let Some(list) = &a.files_from {
        // A listed path is itself: a trailing / changes nothing there.
        let listed = listed_paths(list)?.into_iter();
        sources.extend(listed.map(|p| PathBuf::from(p.trim_end_matches('/'))));
    }
    if sources.is_empty() {
        return Err(usage(
            "nothing to send: give SOURCE... or --files-from FILE before HOST:DEST".into(),
        ));
    }
    above_zero("--rate-limit", a.rate_limit)?;
    above_zero("--min-rate", a.min_rate)?;
    if a.window.is_zero() {
        return Err(usage("--window must be above zero".into()));
    }
    Ok((target.clone(), (host, dest), sources))
}

/// How rsync's habits shape a send of `sources` to `dest`: whether a
/// source is a directory's contents (`DIR/`), and whether one file may
/// take DEST's name (one source, no directory, DEST not ending in `/`;
/// the receiver renames it only where DEST is no directory). What urmove
/// does not do as rsync would is refused, saying so.
fn send_shape(a: &SendArgs, dest: &str, sources: &[PathBuf]) -> Result<(bool, bool), Failure> {
    use crate::session::plan::tree::is_contents;
    let usage = |m: String| Err(Failure::Usage(anyhow::anyhow!(m)));
    let contents = sources.iter().find(|s| is_contents(s));
    if let (Some(dir), true) = (contents, a.follow) {
        return usage(format!(
            "--follow takes each directory as itself, not its contents: give {} without the trailing / (it then arrives under DEST as itself)",
            dir.display()
        ));
    }
    let deletes = a.tree.delete || a.tree.delete_excluded;
    if contents.is_some() && deletes && matches!(dest.trim_matches('/'), "" | ".") {
        return usage(
            "--delete of a directory's contents (DIR/) into the receiver's root itself would remove everything else under the root: give HOST:DEST"
                .into(),
        );
    }
    let one_file = match sources {
        [one] => std::fs::symlink_metadata(one).is_ok_and(|m| !m.is_dir()) && !is_contents(one),
        _ => false,
    };
    Ok((
        contents.is_some(),
        one_file && !dest.is_empty() && !dest.ends_with('/'),
    ))
}

pub fn send(a: SendArgs, filter: crate::session::plan::filter::Filter) -> Result<u8, Failure> {
    let (target, (host, dest), sources) = send_what(&a)?;
    let (contents, one_file) = send_shape(&a, &dest, &sources)?;
    check_block("--block", a.block)?;
    let fixed = !(a.follow || a.tree.delete || a.tree.delete_excluded);
    let (host, shard) = shard_host(a.shard.as_deref(), fixed, &host)?;
    let plot_file = a.plot.as_deref().map(PlotFile::check).transpose()?;
    let key = keys::load(&a.key_file).map_err(Failure::Usage)?;
    let format = Format::pick(a.json, a.json_stream);
    let rate_limit = a.rate_limit.map(|r| r.bytes_per_s);
    let (streams, auto_streams) = auto_unless_limited(a.streams, rate_limit);
    let cfg = SendConfig {
        dest: dest.trim_end_matches('/').to_string(),
        sources,
        streams,
        auto_streams,
        block_size: a.block as u32,
        zerocopy: zerocopy(a.zerocopy),
        direct: direct(a.direct),
        interval: a.interval,
        sock_buf: a.sock_buf.map(|b| b as usize),
        rate_limit_bytes_per_s: rate_limit,
        congestion: a.cc.clone(),
        lanes: a.lanes,
        resume: !a.resume.ignore_times,
        checksum: a.resume.checksum,
        timeout: a.resume.timeout,
        encrypt: a.resume.encrypt,
        state_dir: a
            .state_dir
            .clone()
            .unwrap_or_else(crate::session::link::secret::default_state_dir),
        scan: scan_rules(filter, a.tree.keep),
        numeric_ids: a.tree.keep.numeric_ids,
        sparse: a.tree.keep.sparse,
        delete: a.tree.delete || a.tree.delete_excluded,
        delete_excluded: a.tree.delete_excluded,
        contents,
        one_file,
        min_rate: a.min_rate.map(|r| crate::session::client::config::MinRate {
            bytes_per_s: r.bytes_per_s,
            window: a.window,
        }),
        follow: follow_of(&a),
        shard,
        split_over: a.split_over,
        transfer: target.to_string(),
        ..SendConfig::to(host, a.port, key)
    };
    if a.tree.dry_run {
        return super::dry_run::show(&cfg, format);
    }
    let interrupt = interrupt_flag().map_err(Failure::Run)?;
    let mut printer = SendPrinter::new(format, Show::resolve(a.show, format));
    printer.streams = cfg.streams;
    printer.shard = cfg.shard;
    echo_rates(
        &mut printer,
        a.rate_limit,
        a.min_rate.map(|r| (r, a.window)),
    );
    let plot = net_plot(plot_file, "send to", &cfg);
    run_plotted(&mut printer, "send", plot, |obs| {
        fewer_if_refused(&cfg, obs, &mut |c, obs| run_send(c, &interrupt, obs))
    })
}

/// What `--follow` asks for, if given.
fn follow_of(a: &SendArgs) -> Option<crate::session::client::config::Follow> {
    a.follow.then(|| crate::session::client::config::Follow {
        idle: a.follow_idle,
        until: a
            .follow_until
            .clone()
            .unwrap_or(crate::session::client::send::FollowUntil::Files),
        live_parts: a.live_parts,
    })
}

/// The receiver of this send, and its shard (`--shard`): of a list of
/// hosts (`HOST1,HOST2:DEST`), shard K's is host K mod M.
fn shard_host(
    shard: Option<&str>,
    fixed: bool,
    host: &str,
) -> Result<(String, Option<crate::session::plan::shard::Shard>), Failure> {
    use crate::session::plan::shard::Shard;
    let usage = |m: String| Failure::Usage(anyhow::anyhow!(m));
    let hosts: Vec<&str> = host.split(',').collect();
    if hosts.iter().any(|h| h.is_empty()) {
        return Err(usage(format!(
            "{host}: an empty name in the list of receivers"
        )));
    }
    let Some(text) = shard else {
        if hosts.len() > 1 {
            return Err(usage(format!(
                "{host}: a list of receivers is for a sharded send (--shard K/N or auto)"
            )));
        }
        return Ok((host.to_string(), None));
    };
    let shard = Shard::parse(text, &|k| std::env::var(k).ok()).map_err(|e| usage(e.to_string()))?;
    if !fixed {
        return Err(usage(
            "--shard moves a share of a fixed manifest: it takes neither --follow nor --delete"
                .into(),
        ));
    }
    Ok((shard.pick(&hosts).to_string(), Some(shard)))
}

/// What `-P` resolves to: under `--rate-limit`, `auto` is `AUTO_START`
/// streams (paced streams gain nothing in number, and would seem to).
fn auto_unless_limited(p: super::parse::Streams, limit: Option<f64>) -> (u16, bool) {
    match p.resolve() {
        (_, true) if limit.is_some() => (crate::session::client::send::AUTO_START, false),
        chosen => chosen,
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

type Run<'a> =
    dyn FnMut(&SendConfig, &mut dyn SendObserver) -> Result<SendReport, SessionError> + 'a;

/// Run; when `-P auto` asked for more streams than the receiver takes,
/// say so and run again (nothing was sent yet) on what it takes, still
/// `auto` when that is more than `AUTO_START`.
fn fewer_if_refused(
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
    let held = crate::session::plan::held::held_text((
        r.files_unchanged,
        r.files_found_complete,
        r.files_continued,
    ));
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
            p.out
                .line(&format!("deleted {}", super::service::escape_controls(d)));
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
    let held = crate::session::plan::held::held_text((
        r.files_unchanged,
        r.files_found_complete,
        r.files_continued,
    ));
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

pub fn bench_net(a: super::args::BenchArgs) -> Result<u8, Failure> {
    let usage = |m: String| Failure::Usage(anyhow::anyhow!(m));
    let host = a.net.clone().expect("bench_net is called with --net");
    let key_file = a
        .key_file
        .clone()
        .ok_or_else(|| usage("bench --net needs --key-file (the receiver's key)".into()))?;
    if a.rate.is_some() {
        return Err(usage(
            "--rate paces --udp datagrams (and --disk writes); TCP streams take --rate-limit"
                .into(),
        ));
    }
    let block =
        a.bs.unwrap_or(crate::session::probe::bench_net::FRAME_DEFAULT);
    check_block("--bs", block)?;
    let rate_limit = above_zero("--rate-limit", a.rate_limit)?;
    let plot_file = a.plot.as_deref().map(PlotFile::check).transpose()?;
    let key = keys::load(&key_file).map_err(Failure::Usage)?;
    let format = Format::pick(a.json, a.json_stream);
    let (streams, auto_streams) = match auto_unless_limited(a.streams, rate_limit) {
        // Reversed, the daemon sends: it takes a fixed count.
        (_, true) if a.reverse => (crate::session::client::send::AUTO_START, false),
        chosen => chosen,
    };
    let cfg = SendConfig {
        streams,
        auto_streams,
        block_size: block as u32,
        zerocopy: zerocopy(a.zerocopy),
        direct: DirectMode::Off,
        interval: a.interval,
        encrypt: a.encrypt,
        congestion: a.cc.clone(),
        rate_limit_bytes_per_s: rate_limit,
        lanes: a.lanes,
        ..SendConfig::to(host, a.port, key)
    };
    let time = a.time.unwrap_or(Duration::from_secs(10));
    let interrupt = interrupt_flag().map_err(Failure::Run)?;
    let mut printer = SendPrinter::new(format, Show::resolve(a.show, format));
    printer.streams = cfg.streams;
    printer.time_s = Some(time.as_secs_f64());
    if a.reverse {
        printer.direction = "Net In";
    }
    echo_rates(&mut printer, a.rate_limit, None);
    let what = if a.reverse {
        "bench --net --reverse"
    } else {
        "bench --net"
    };
    let plot = net_plot(plot_file, what, &cfg);
    run_plotted(&mut printer, "bench --net", plot, |obs| {
        fewer_if_refused(&cfg, obs, &mut |c, obs| {
            crate::session::probe::bench_net::run_bench_net(
                c, time, a.verify, a.reverse, &interrupt, obs,
            )
        })
    })
}

/// What `a` pulls from where: the host, the paths under its root (a
/// directory's contents keep their trailing `/`), and whether one file may
/// take LOCAL's name (one path, neither it nor LOCAL ending in `/`; it
/// does where LOCAL is no directory).
fn pull_what(a: &super::args::PullArgs) -> Result<(String, Vec<String>, bool), Failure> {
    let (local, remotes) = a.args.split_last().expect("clap requires two or more");
    let mut host = None;
    let mut paths = Vec::new();
    for r in remotes {
        let (h, p) = split_target(r).ok_or_else(|| no_source(r, remotes, local))?;
        if host.as_ref().is_some_and(|prev| prev != &h) {
            return Err(Failure::Usage(anyhow::anyhow!(
                "all HOST:PATH arguments of one pull name the same host"
            )));
        }
        beneath_root(&h, &p, ("PATH", "daemon"))?;
        host = Some(h);
        let contents = if p.ends_with('/') { "/" } else { "" };
        paths.push(format!("{}{contents}", p.trim_end_matches('/')));
    }
    let one_file = matches!(paths.as_slice(), [p] if !p.ends_with('/')) && !local.ends_with('/');
    if let Some(list) = &a.files_from {
        // A listed path is itself: a trailing / changes nothing there.
        let listed = listed_paths(list)?;
        paths.extend(listed.iter().map(|p| p.trim_end_matches('/').to_string()));
    }
    let one_file = one_file && paths.len() == 1;
    Ok((host.expect("at least one HOST:PATH"), paths, one_file))
}

pub fn pull(
    a: super::args::PullArgs,
    filter: crate::session::plan::filter::Filter,
) -> Result<u8, Failure> {
    let (local, remotes) = a.args.split_last().expect("clap requires two or more");
    let rate_limit = above_zero("--rate-limit", a.rate_limit)?;
    let (host, paths, one_file) = pull_what(&a)?;
    check_block("--block", a.block)?;
    let delete = a.tree.delete || a.tree.delete_excluded;
    let (host, shard) = shard_host(a.shard.as_deref(), !delete, &host)?;
    let plot_file = a.plot.as_deref().map(PlotFile::check).transpose()?;
    let key = keys::load(&a.key_file).map_err(Failure::Usage)?;
    let format = Format::pick(a.json, a.json_stream);
    let into = std::path::absolute(local).unwrap_or_else(|_| PathBuf::from(local));
    let cfg = SendConfig {
        shard,
        split_over: a.split_over,
        transfer: format!("{} -> {}", remotes.join(" "), into.display()),
        streams: a.streams,
        rate_limit_bytes_per_s: rate_limit,
        sock_buf: a.sock_buf.map(|b| b as usize),
        block_size: a.block as u32,
        direct: direct(a.direct),
        interval: a.interval,
        congestion: a.cc.clone(),
        lanes: a.lanes,
        resume: !a.resume.ignore_times,
        checksum: a.resume.checksum,
        timeout: a.resume.timeout,
        encrypt: a.resume.encrypt,
        state_dir: a
            .state_dir
            .clone()
            .unwrap_or_else(crate::session::link::secret::default_state_dir),
        scan: scan_rules(filter, a.tree.keep),
        numeric_ids: a.tree.keep.numeric_ids,
        sparse: a.tree.keep.sparse,
        delete,
        delete_excluded: a.tree.delete_excluded,
        one_file,
        ..SendConfig::to(host, a.port, key)
    };
    let local = PathBuf::from(local);
    if a.tree.dry_run {
        return super::dry_run::show_pull(&cfg, (&paths, &local), format);
    }
    let interrupt = interrupt_flag().map_err(Failure::Run)?;
    let mut printer = SendPrinter::new(format, Show::resolve(a.show, format));
    printer.streams = cfg.streams;
    printer.shard = cfg.shard;
    printer.direction = "Net In";
    echo_rates(&mut printer, a.rate_limit, None);
    let plot = net_plot(plot_file, "pull from", &cfg);
    run_plotted(&mut printer, "pull", plot, |obs| {
        crate::session::client::pull::run_pull(&cfg, &paths, &local, &interrupt, obs)
    })
}

/// A rate option's value in bytes per second, refused unless above zero.
fn above_zero(flag: &str, r: Option<super::parse::Rate>) -> Result<Option<f64>, Failure> {
    match r.map(|r| r.bytes_per_s) {
        Some(b) if b <= 0.0 => Err(Failure::Usage(anyhow::anyhow!("{flag} must be above zero"))),
        b => Ok(b),
    }
}

/// Say the rates given back, each in the unit it was given in and the
/// other (`--rate-limit 8M` is 8 Mb/s, 1 MB/s).
fn echo_rates(
    printer: &mut SendPrinter,
    limit: Option<super::parse::Rate>,
    gate: Option<(super::parse::Rate, Duration)>,
) {
    if let Some(r) = limit {
        printer.info(&format!(
            "--rate-limit {} in all, each stream paced to its share",
            r.echo()
        ));
    }
    if let Some((r, window)) = gate {
        printer.info(&format!(
            "--min-rate {} over every {} window",
            r.echo(),
            units::duration_s(window.as_secs_f64())
        ));
    }
}

/// What a scan reads of each entry: `filter`'s choice of entries, and
/// what `keep` asks for besides their bytes.
fn scan_rules(
    filter: crate::session::plan::filter::Filter,
    keep: super::args::FidelityArgs,
) -> crate::session::plan::tree::ScanRules {
    crate::session::plan::tree::ScanRules {
        filter,
        hard_links: keep.hard_links,
        xattrs: keep.xattrs,
        acls: keep.acls,
        devices: keep.devices,
    }
}

/// The lines of a `--files-from` FILE: blank lines and `#` comments
/// skipped.
fn listed_paths(list: &std::path::Path) -> Result<Vec<String>, Failure> {
    let text = std::fs::read_to_string(list)
        .with_context(|| format!("--files-from {}", list.display()))
        .map_err(Failure::Usage)?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `HOST:PATH` as scp reads it: a `:` after a `/` is a local name's.
    #[test]
    fn a_colon_after_a_slash_is_a_local_name() {
        let split = |t: &str| split_target(t);
        assert_eq!(split("dtn2:in"), Some(("dtn2".into(), "in".into())));
        assert_eq!(split("dtn2:"), Some(("dtn2".into(), String::new())));
        assert_eq!(split("[::1]:a/b"), Some(("::1".into(), "a/b".into())));
        assert_eq!(split("./a:b"), None);
        assert_eq!(split("/data/a:b"), None);
        assert_eq!(split(":x"), None);
        assert_eq!(split("local"), None);
    }

    /// An absolute path is refused with the relative one to give.
    #[test]
    fn an_absolute_path_is_refused_saying_what_to_give() {
        let said = |host: &str, path: &str| match beneath_root(host, path, ("DEST", "receiver")) {
            Err(Failure::Usage(e)) => e.to_string(),
            other => panic!("{other:?}"),
        };
        assert!(beneath_root("h", "data/x", ("DEST", "receiver")).is_ok());
        assert!(said("h", "/data/x").ends_with("give h:data/x for ROOT/data/x"));
        assert!(said("h", "//").ends_with("give h: for the root itself"));
        assert!(said("::1", "/x").starts_with("[::1]:/x: an absolute path is refused"));
    }
}
