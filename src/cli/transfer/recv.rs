//! `urmove recv`: the daemon's settings (the command line over its
//! `--config` file) resolved into a [`RecvConfig`], its log, metrics and
//! systemd readiness started, and the daemon served until it is stopped.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::cli::args::{LinksArg, RecvArgs};
use crate::cli::parse::Rate;
use crate::cli::{config, interrupt_flag, keys, service, Failure};
use crate::session::daemon::{serve, RecvConfig};
use crate::session::DEFAULT_PORT;

use super::direct;

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
    let set = config::resolve(&a).map_err(|e| usage(anyhow::anyhow!(e)))?;
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
            LinksArg::Keep => crate::session::sink::rules::LinkPolicy::Keep,
            LinksArg::Skip => crate::session::sink::rules::LinkPolicy::Skip,
            LinksArg::Refuse => crate::session::sink::rules::LinkPolicy::Refuse,
        },
        pull_only: set.pull_only,
        udp: set.udp,
        udp_time_max: set.udp_time_max,
        congestion: set.cc.clone(),
        lanes: set.lanes,
        part_max_age: (!set.part_max_age.is_zero()).then_some(set.part_max_age),
        over_ssh: false,
        only_from: None,
        keep_sums: false,
    };
    let log = service::logger(set.log_format);
    let stats = Arc::new(crate::session::daemon::DaemonStats::default());
    let metrics_stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let front = super::http::front(&set, &cfg, &log).map_err(usage)?;
    let http_stats = front.as_ref().map(|f| Arc::clone(&f.stats));
    if let Some(addr) = &set.metrics {
        let bound = service::serve_metrics(
            addr,
            Arc::clone(&stats),
            http_stats,
            Arc::clone(&metrics_stop),
        )
        .map_err(|e| usage(anyhow::anyhow!(e)))?;
        log(
            crate::session::daemon::log::Level::Info,
            &format!("metrics at http://{bound}/metrics"),
        );
    }
    let served = std::thread::scope(|scope| {
        let http = front.map(|front| super::http::spawn(scope, front, &stop, &log));
        let served = serve(cfg, &stop, Arc::clone(&log), stats, &mut |addr| {
            listening(addr, set.min_rate, &log);
        });
        // The daemon ended (stopped, or failed to start): so does the front.
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(h) = http {
            let _ = h.join();
        }
        served
    });
    service::sd_notify("STOPPING=1");
    metrics_stop.store(true, std::sync::atomic::Ordering::Relaxed);
    served.map_err(|e| {
        let e = anyhow::anyhow!("{e}");
        Failure::Usage(e)
    })?;
    Ok(0)
}

/// The daemon listens on `addr`: systemd is told, and a `--min-rate`
/// other than the default is said back in the unit given.
fn listening(addr: SocketAddr, min_rate: Rate, log: &crate::session::daemon::log::Log) {
    service::sd_notify(&format!("READY=1\nSTATUS=listening on {addr}"));
    if min_rate != config::min_rate_default() {
        log(
            crate::session::daemon::log::Level::Info,
            &format!(
                "--min-rate {}: a sender slower over a whole --timeout ends its session",
                min_rate.echo()
            ),
        );
    }
}
