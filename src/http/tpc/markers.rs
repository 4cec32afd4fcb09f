//! The answer to a COPY: a `text/perf-marker-stream`, one marker every
//! [`EVERY`] while the copy runs (the bytes moved and written so far, and
//! the connections to the other endpoint), then `success: Created` or
//! `failure: ...`, as davix and FTS3 read them.

use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::Progress;
use crate::http::server::Conn;
use crate::http::stats::HttpStats;
use crate::http::wire::{self, Chunked};

/// How often a marker goes (the spec asks at least every 5 s).
pub const EVERY: Duration = Duration::from_secs(2);

/// Run `work` while markers go to `conn`; the body's bytes written and
/// whether the copy succeeded.
pub fn run(
    conn: &mut Conn,
    progress: &Progress,
    stats: &HttpStats,
    work: impl FnOnce() -> Result<(), super::CopyError> + Send,
) -> std::io::Result<(u64, bool)> {
    let headers = vec![
        (
            "Content-Type".to_string(),
            "text/perf-marker-stream".to_string(),
        ),
        ("Transfer-Encoding".to_string(), "chunked".to_string()),
        (
            "Server".to_string(),
            format!("urmove/{}", env!("CARGO_PKG_VERSION")),
        ),
    ];
    let w = conn.get_mut();
    wire::write_head(w, 202, &headers)?;
    w.flush()?;
    std::thread::scope(|scope| {
        // The worker says when it is done: markers go every EVERY until
        // then, and the end goes at once.
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let worker = scope.spawn(move || {
            let r = work();
            let _ = done_tx.send(());
            r
        });
        let mut out = Chunked::new(conn.get_mut());
        let mut written = 0u64;
        let mut last = 0u64;
        let mut said: std::io::Result<()> = Ok(());
        loop {
            if said.is_ok() {
                let bytes = progress.bytes.load(Ordering::Relaxed);
                said = say(&mut out, &marker(progress, bytes), &mut written);
                stats.tpc.markers.fetch_add(1, Ordering::Relaxed);
                stats.tpc.bytes.fetch_add(bytes - last, Ordering::Relaxed);
                last = bytes;
                if said.is_err() {
                    // The client went away: the copy stops, nothing named.
                    progress.cancel.store(true, Ordering::Relaxed);
                }
            }
            match done_rx.recv_timeout(EVERY) {
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
                _ => break,
            }
        }
        let result = worker
            .join()
            .unwrap_or_else(|_| Err("the copy panicked".into()));
        let bytes = progress.bytes.load(Ordering::Relaxed);
        stats
            .tpc
            .bytes
            .fetch_add(bytes.saturating_sub(last), Ordering::Relaxed);
        said?;
        let end = match &result {
            Ok(()) => format!("{}success: Created\n", marker(progress, bytes)),
            Err(e) => format!("failure: {}\n", one_line(&e.to_string())),
        };
        say(&mut out, &end, &mut written)?;
        out.finish()?;
        Ok((written, result.is_ok()))
    })
}

fn say<W: Write>(out: &mut Chunked<'_, W>, text: &str, written: &mut u64) -> std::io::Result<()> {
    out.write_all(text.as_bytes())?;
    out.flush()?;
    *written += text.len() as u64;
    Ok(())
}

/// One marker, as GridFTP's and XRootD's read.
pub fn marker(progress: &Progress, bytes: u64) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let connections = progress
        .connections
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .join(",");
    format!(
        "Perf Marker\nTimestamp: {now}\nStripe Index: 0\nStripe Bytes Transferred: {bytes}\nTotal Stripe Count: 1\nRemoteConnections: {connections}\nEnd\n"
    )
}

fn one_line(text: &str) -> String {
    text.replace(['\n', '\r'], " ")
}
