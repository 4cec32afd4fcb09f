//! `recv --http`: the HTTPS front's settings checked and resolved, and the
//! front run on a thread beside the daemon.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{bail, Context};

use crate::cli::config::RecvSettings;
use crate::http::server::{Front, HttpConfig};
use crate::http::stats::HttpStats;
use crate::session::daemon::log::{Level, Log};
use crate::session::daemon::RecvConfig;

/// Connections the front keeps open at once.
const CONNECTIONS_MAX: usize = 512;

/// The front `set` asks for (None without `--http`), read and checked
/// before the daemon listens.
pub(super) fn front(
    set: &RecvSettings,
    cfg: &RecvConfig,
    log: &Log,
) -> anyhow::Result<Option<Front>> {
    let h = &set.http;
    let Some(addr) = &h.listen else {
        for (given, name) in [
            (h.cert.is_some(), "--http-cert"),
            (h.key.is_some(), "--http-key"),
            (h.token_issuers.is_some(), "--token-issuers"),
        ] {
            if given {
                bail!("{name} is for the HTTPS front: give --http ADDR:PORT too");
            }
        }
        return Ok(None);
    };
    let need = |v: &Option<std::path::PathBuf>, name: &str| {
        v.clone()
            .with_context(|| format!("--http {addr} needs {name}"))
    };
    let listen: SocketAddr = addr
        .to_socket_addrs()
        .with_context(|| format!("--http {addr}"))?
        .next()
        .with_context(|| format!("--http {addr}: no address"))?;
    let config = HttpConfig {
        listen,
        cert: need(&h.cert, "--http-cert (its certificate chain, PEM)")?,
        key: need(&h.key, "--http-key (the certificate's key, PEM)")?,
        cas: h.ca.iter().cloned().collect(),
        issuers: need(
            &h.token_issuers,
            "--token-issuers (the WLCG token issuers it trusts)",
        )?,
        root: cfg.root.clone(),
        state_dir: cfg.state_dir.clone(),
        direct: cfg.direct,
        connections_max: CONNECTIONS_MAX,
        daemon: cfg.listen,
    };
    let front = Front::new(config, Arc::clone(log), Arc::new(HttpStats::default()))
        .map_err(|e| anyhow::anyhow!("--http {addr}: {e}"))?;
    Ok(Some(front))
}

/// The front served on a thread of `scope` until `stop`.
pub(super) fn spawn<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    front: Front,
    stop: &'scope AtomicBool,
    log: &Log,
) -> std::thread::ScopedJoinHandle<'scope, ()> {
    let log = Arc::clone(log);
    scope.spawn(move || {
        let said = Arc::clone(&log);
        let served = crate::http::server::serve(front, stop, &mut |addr| {
            said(
                Level::Info,
                &format!("https front (WebDAV, third-party copy) on {addr}"),
            );
        });
        if let Err(e) = served {
            log(Level::Error, &format!("the https front stopped: {e}"));
            // A front that cannot serve stops the daemon with it: an admin
            // who asked for it would otherwise not notice.
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    })
}
