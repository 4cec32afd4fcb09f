//! `urmove send`, `urmove pull` and `urmove bench --net` on the command
//! line: each resolves its arguments into a [`SendConfig`] and runs it
//! with a printer watching; `urmove recv`, the daemon they talk to, is
//! resolved in [`recv`]. What the arguments aim at is read in [`aim`],
//! a run is watched and concluded in [`run`], and what it shows while
//! it runs and at its end is in [`printer`] and [`summary`].

mod aim;
mod http;
mod printer;
mod recv;
mod run;
mod ssh;
mod summary;

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use crate::coord::units;
use crate::datapath::net::ZeroCopy;
use crate::datapath::DirectMode;
use crate::session::client::config::SendConfig;
use crate::session::client::report::SendObserver;
use crate::session::client::send::run_send;
use crate::session::plan::filter::Filter;

use super::args::{DirectArg, ProgressArgs, PullArgs, SendArgs, TransferArgs, ZeroCopyArg};
use super::plot::PlotFile;
use super::progress::Show;
use super::render::Format;
use super::{interrupt_flag, Failure};
use aim::{pull_what, send_shape, send_what};
use run::{fewer_if_refused, net_plot, run_plotted};

pub(crate) use printer::SendPrinter;
pub use recv::recv;
pub use ssh::serve;

use crate::session::client::ssh::SshRemote;
pub(crate) use summary::finish_send;

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

pub(super) fn direct(d: DirectArg) -> DirectMode {
    match d {
        DirectArg::Auto => DirectMode::Auto,
        DirectArg::Required => DirectMode::Required,
        DirectArg::Off => DirectMode::Off,
    }
}

/// What `send` and `pull` resolve alike from the options they share.
struct Shared {
    /// The fields both set; each command adds its own.
    cfg: SendConfig,
    plot_file: Option<PlotFile>,
    format: Format,
}

/// Resolve `t` for a transfer with `host` (a list of hosts when sharded;
/// `fixed` when its manifest is, as `--shard` needs), in this order: the
/// block size, the shard and its host, the plot's file, the key.
fn shared(
    t: &TransferArgs,
    filter: Filter,
    host: &str,
    fixed: bool,
    remote: Option<&SshRemote>,
) -> Result<Shared, Failure> {
    check_block("--block", t.block)?;
    let (host, shard) = shard_host(t.shard.as_deref(), fixed, host)?;
    let plot_file = t.plot.as_deref().map(PlotFile::check).transpose()?;
    let daemon = ssh::Daemon {
        host: &host,
        port: t.port,
        key_file: t.key_file.as_deref(),
    };
    let (to, block) = ssh::peer(remote, daemon, t.block as u32)?;
    if remote.is_some() && t.resume.no_encrypt {
        eprintln!("urmove: --no-encrypt: the data frames cross the network unsealed (the control connection stays sealed)");
    }
    let cfg = SendConfig {
        block_size: block,
        direct: direct(t.direct),
        interval: t.interval,
        sock_buf: t.sock_buf.map(|b| b as usize),
        rate_limit_bytes_per_s: t.rate_limit.map(|r| r.bytes_per_s),
        congestion: t.cc.clone(),
        lanes: t.lanes,
        resume: !t.resume.ignore_times,
        checksum: t.resume.checksum,
        timeout: t.resume.timeout,
        // Through ssh, sealed unless --no-encrypt (scp users expect it),
        // or inside ssh's own encryption (--through-ssh).
        encrypt: t.resume.encrypt
            || (remote.is_some() && !t.resume.no_encrypt && !t.ssh.through_ssh),
        state_dir: t
            .state_dir
            .clone()
            .unwrap_or_else(crate::session::link::secret::default_state_dir),
        scan: scan_rules(filter, t.tree.keep),
        numeric_ids: t.tree.keep.numeric_ids,
        sparse: t.tree.keep.sparse,
        delete: deletes(t),
        delete_excluded: t.tree.delete_excluded,
        shard,
        split_over: t.split_over,
        ..to
    };
    let format = Format::pick(t.json, t.json_stream);
    Ok(Shared {
        cfg,
        plot_file,
        format,
    })
}

/// Whether the run removes at the receiving side (`--delete`, or
/// `--delete-excluded`, which implies it).
fn deletes(t: &TransferArgs) -> bool {
    t.tree.delete || t.tree.delete_excluded
}

/// The printer of a send or pull of `cfg`, and the interrupt flag it runs
/// under.
fn watch(
    show: ProgressArgs,
    format: Format,
    cfg: &SendConfig,
) -> Result<(SendPrinter, Arc<AtomicBool>), Failure> {
    let interrupt = interrupt_flag().map_err(Failure::Run)?;
    let mut printer = SendPrinter::new(format, Show::resolve(show, format));
    printer.streams = cfg.streams;
    printer.shard = cfg.shard;
    Ok((printer, interrupt))
}

pub fn send(a: SendArgs, filter: Filter) -> Result<u8, Failure> {
    let t = &a.transfer;
    let over = ssh::wanted(t.key_file.as_deref(), &t.ssh);
    let aim = send_what(&a, over)?;
    ssh::no_login_unless(over, &aim.host)?;
    if over && t.shard.is_some() {
        return Err(Failure::Usage(anyhow::anyhow!(
            "--shard spreads a transfer over daemons (--key-file): through ssh, run one send per host"
        )));
    }
    let shape = send_shape(&a, &aim)?;
    let fixed = !(a.follow || deletes(t));
    let remote = over.then(|| ssh::start(&t.ssh, &aim.host)).transpose()?;
    let Shared {
        cfg,
        plot_file,
        format,
    } = shared(t, filter, &aim.host, fixed, remote.as_ref())?;
    let dest = match &remote {
        Some(r) => ssh::remote_path(&r.ready.home, &aim.dest)?,
        None => aim.dest.clone(),
    };
    let (streams, auto_streams) = auto_unless_limited(a.streams, cfg.rate_limit_bytes_per_s);
    let cfg = SendConfig {
        dest: dest.trim_end_matches('/').to_string(),
        sources: aim.sources,
        streams,
        auto_streams,
        zerocopy: zerocopy(a.zerocopy),
        contents: shape.contents,
        one_file: shape.one_file,
        min_rate: a.min_rate.map(|r| crate::session::client::config::MinRate {
            bytes_per_s: r.bytes_per_s,
            window: a.window,
        }),
        follow: follow_of(&a),
        transfer: aim.target,
        ..cfg
    };
    if t.tree.dry_run {
        return super::dry_run::show(&cfg, format);
    }
    let (mut printer, interrupt) = watch(t.show, format, &cfg)?;
    echo_limit(&mut printer, t.rate_limit);
    if let Some(r) = a.min_rate {
        echo_gate(&mut printer, r, a.window);
    }
    let plot = net_plot(plot_file, "send to", &cfg);
    let ran = run_plotted(&mut printer, "send", plot, |obs| {
        fewer_if_refused(&cfg, obs, &mut |c, obs| run_send(c, &interrupt, obs))
            .map_err(|e| ssh::explained(remote.as_ref(), e))
    });
    ssh::after(remote, &ran);
    ran
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

pub fn bench_net(a: super::args::BenchArgs) -> Result<u8, Failure> {
    let usage = |m: String| Failure::Usage(anyhow::anyhow!(m));
    let host = a.net.clone().expect("bench_net is called with --net");

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
    let over = ssh::wanted(a.key_file.as_deref(), &a.ssh);
    ssh::no_login_unless(over, &host)?;
    let remote = over.then(|| ssh::start(&a.ssh, &host)).transpose()?;
    let daemon = ssh::Daemon {
        host: &host,
        port: a.port,
        key_file: a.key_file.as_deref(),
    };
    let (to, block) = ssh::peer(remote.as_ref(), daemon, block as u32)?;
    let format = Format::pick(a.json, a.json_stream);
    let (streams, auto_streams) = match auto_unless_limited(a.streams, rate_limit) {
        // Reversed, the daemon sends: it takes a fixed count.
        (_, true) if a.reverse => (crate::session::client::send::AUTO_START, false),
        chosen => chosen,
    };
    let cfg = SendConfig {
        streams,
        auto_streams,
        block_size: block,
        zerocopy: zerocopy(a.zerocopy),
        direct: DirectMode::Off,
        interval: a.interval,
        encrypt: a.encrypt,
        congestion: a.cc.clone(),
        rate_limit_bytes_per_s: rate_limit,
        lanes: a.lanes,
        ..to
    };
    let time = a.time.unwrap_or(Duration::from_secs(10));
    let interrupt = interrupt_flag().map_err(Failure::Run)?;
    let mut printer = SendPrinter::new(format, Show::resolve(a.show, format));
    printer.streams = cfg.streams;
    printer.time_s = Some(time.as_secs_f64());
    if a.reverse {
        printer.direction = "Net In";
    }
    echo_limit(&mut printer, a.rate_limit);
    let what = if a.reverse {
        "bench --net --reverse"
    } else {
        "bench --net"
    };
    let plot = net_plot(plot_file, what, &cfg);
    let ran = run_plotted(&mut printer, "bench --net", plot, |obs| {
        fewer_if_refused(&cfg, obs, &mut |c, obs| {
            crate::session::probe::bench_net::run_bench_net(
                c, time, a.verify, a.reverse, &interrupt, obs,
            )
        })
        .map_err(|e| ssh::explained(remote.as_ref(), e))
    });
    ssh::after(remote, &ran);
    ran
}

pub fn pull(a: PullArgs, filter: Filter) -> Result<u8, Failure> {
    let t = &a.transfer;
    let (local, remotes) = a.args.split_last().expect("clap requires two or more");
    above_zero("--rate-limit", t.rate_limit)?;
    let over = ssh::wanted(t.key_file.as_deref(), &t.ssh);
    let mut aim = pull_what(&a, over)?;
    ssh::no_login_unless(over, &aim.host)?;
    let remote = over.then(|| ssh::start(&t.ssh, &aim.host)).transpose()?;
    if let Some(r) = &remote {
        aim.paths = (aim.paths.iter())
            .map(|p| ssh::remote_path(&r.ready.home, p))
            .collect::<Result<_, _>>()?;
    }
    let Shared {
        cfg,
        plot_file,
        format,
    } = shared(t, filter, &aim.host, !deletes(t), remote.as_ref())?;
    let into = std::path::absolute(local).unwrap_or_else(|_| PathBuf::from(local));
    let cfg = SendConfig {
        transfer: format!("{} -> {}", remotes.join(" "), into.display()),
        streams: a.streams,
        one_file: aim.one_file,
        ..cfg
    };
    let local = PathBuf::from(local);
    if t.tree.dry_run {
        return super::dry_run::show_pull(&cfg, &aim.paths, &local, format);
    }
    let (mut printer, interrupt) = watch(t.show, format, &cfg)?;
    printer.direction = "Net In";
    echo_limit(&mut printer, t.rate_limit);
    let plot = net_plot(plot_file, "pull from", &cfg);
    let ran = run_plotted(&mut printer, "pull", plot, |obs| {
        crate::session::client::pull::run_pull(&cfg, &aim.paths, &local, &interrupt, obs)
            .map_err(|e| ssh::explained(remote.as_ref(), e))
    });
    ssh::after(remote, &ran);
    ran
}

/// A rate option's value in bytes per second, refused unless above zero.
pub(super) fn above_zero(
    flag: &str,
    r: Option<super::parse::Rate>,
) -> Result<Option<f64>, Failure> {
    match r.map(|r| r.bytes_per_s) {
        Some(b) if b <= 0.0 => Err(Failure::Usage(anyhow::anyhow!("{flag} must be above zero"))),
        b => Ok(b),
    }
}

/// Say `--rate-limit` back, in the unit it was given in and the other
/// (`--rate-limit 8M` is 8 Mb/s, 1 MB/s).
fn echo_limit(printer: &mut SendPrinter, limit: Option<super::parse::Rate>) {
    if let Some(r) = limit {
        printer.info(&format!(
            "--rate-limit {} in all, each stream paced to its share",
            r.echo()
        ));
    }
}

/// Say the `--min-rate` gate back, as [`echo_limit`] says its rate.
fn echo_gate(printer: &mut SendPrinter, gate: super::parse::Rate, window: Duration) {
    printer.info(&format!(
        "--min-rate {} over every {} window",
        gate.echo(),
        units::duration_s(window.as_secs_f64())
    ));
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
