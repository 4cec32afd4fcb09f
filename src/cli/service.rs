//! Running `urmove recv` as a service: log lines for journald or a
//! collector, readiness for systemd (`Type=notify`), and Prometheus metrics.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::session::daemon::DaemonStats;

use crate::session::daemon::log::{Level, Log};

use super::args::LogFormatArg;

/// `2026-11-30T12:34:56.789Z` for `t` (UTC).
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// `msg` with every control character written out (`\n`, `\r`, `\t`,
/// else `\x1b` for C0 and DEL, `\u{85}` for C1 and the Unicode line and
/// paragraph separators) and `\` doubled, so text
/// from a peer (its error messages, paths) can neither end a log line nor
/// start one with a journald priority such as `<3>`.
pub fn escape_controls(msg: &str) -> std::borrow::Cow<'_, str> {
    let special = |c: char| c.is_control() || matches!(c, '\\' | '\u{2028}' | '\u{2029}');
    if !msg.chars().any(special) {
        return msg.into();
    }
    let mut out = String::with_capacity(msg.len() + 8);
    for c in msg.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x80 && c.is_control() => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if special(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.into()
}

/// The daemon's log: one line per message on stderr, its control
/// characters escaped. As text under journald (`JOURNAL_STREAM` set) each
/// line starts with its syslog priority (`<6>`, `<4>`, `<3>`) and leaves the
/// time to the journal; elsewhere `urmove recv: ` leads. As JSON:
/// `{"time","level","msg"}`.
pub fn logger(format: LogFormatArg) -> Log {
    let journald = std::env::var_os("JOURNAL_STREAM").is_some();
    Arc::new(move |level: Level, msg: &str| {
        let msg = &*escape_controls(msg);
        let name = match level {
            Level::Info => "info",
            Level::Warn => "warning",
            Level::Error => "error",
        };
        let line = match format {
            LogFormatArg::Json => serde_json::json!({
                "time": rfc3339(SystemTime::now()),
                "level": name,
                "msg": msg,
            })
            .to_string(),
            LogFormatArg::Text if journald => {
                let prio = match level {
                    Level::Info => 6,
                    Level::Warn => 4,
                    Level::Error => 3,
                };
                format!("<{prio}>{msg}")
            }
            LogFormatArg::Text => match level {
                Level::Info => format!("urmove recv: {msg}"),
                _ => format!("urmove recv: {name}: {msg}"),
            },
        };
        let _ = writeln!(std::io::stderr(), "{line}");
    })
}

/// Tell systemd about our state (`READY=1`, `STOPPING=1`, `STATUS=...`)
/// when it asked (`NOTIFY_SOCKET`); otherwise do nothing. The protocol is
/// one datagram on a unix socket, abstract when the path starts with `@`.
pub fn sd_notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let Ok(sock) = std::os::unix::net::UnixDatagram::unbound() else {
        return;
    };
    let bytes = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str());
    let sent = match bytes.strip_prefix(b"@") {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            std::os::unix::net::SocketAddr::from_abstract_name(name)
                .and_then(|a| sock.send_to_addr(state.as_bytes(), &a))
        }
        None => sock.send_to(state.as_bytes(), &path),
    };
    let _ = sent;
}

/// The aggregate receive rate between scrapes.
struct RateState {
    at: Instant,
    bytes: u64,
    rate: f64,
}

/// Scrapes answered at once; a connection beyond them is closed at once.
const SCRAPES_AT_ONCE_MAX: usize = 8;
/// The whole request head must arrive within this, however slowly its
/// bytes trickle in.
const SCRAPE_REQUEST_DEADLINE: Duration = Duration::from_secs(5);
/// A scraper that takes nothing of the answer for this long is dropped.
const SCRAPE_WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest request head read; the path is in its first line.
const SCRAPE_HEAD_LEN_MAX: usize = 2048;

/// What the scrapes share: the daemon's figures, the rate between scrapes
/// and how many are being answered now.
struct Scrapes {
    stats: Arc<DaemonStats>,
    /// The HTTPS front's, when it runs.
    http: Option<Arc<crate::http::stats::HttpStats>>,
    rate: Mutex<RateState>,
    busy: AtomicUsize,
}

/// One scrape being answered; its place is free again when it drops.
struct Scrape {
    shared: Arc<Scrapes>,
}

impl Scrape {
    fn take(shared: &Arc<Scrapes>) -> Option<Scrape> {
        shared
            .busy
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < SCRAPES_AT_ONCE_MAX).then_some(n + 1)
            })
            .ok()
            .map(|_| Scrape {
                shared: Arc::clone(shared),
            })
    }
}

impl Drop for Scrape {
    fn drop(&mut self) {
        self.shared.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Serve `stats` as Prometheus text on `addr` (`GET /metrics`) from a
/// thread of its own, until `stop`; each scrape is answered on a thread of
/// its own, at most [`SCRAPES_AT_ONCE_MAX`] at once, so a slow scraper
/// holds up nobody else. Returns the bound address.
pub fn serve_metrics(
    addr: &str,
    stats: Arc<DaemonStats>,
    http: Option<Arc<crate::http::stats::HttpStats>>,
    stop: Arc<AtomicBool>,
) -> Result<SocketAddr, String> {
    let listener = TcpListener::bind(addr).map_err(|e| format!("--metrics {addr}: {e}"))?;
    let bound = listener
        .local_addr()
        .map_err(|e| format!("--metrics {addr}: {e}"))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("--metrics {addr}: {e}"))?;
    let shared = Arc::new(Scrapes {
        stats,
        http,
        rate: Mutex::new(RateState {
            at: Instant::now(),
            bytes: 0,
            rate: 0.0,
        }),
        busy: AtomicUsize::new(0),
    });
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((s, _)) => start_scrape(s, &shared),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    });
    Ok(bound)
}

/// Answer `s` on a thread of its own, or close it at once when enough
/// scrapes are being answered (or no thread can be had).
fn start_scrape(s: TcpStream, shared: &Arc<Scrapes>) {
    let Some(scrape) = Scrape::take(shared) else {
        return;
    };
    let _ = std::thread::Builder::new()
        .name("urmove-metrics".into())
        .spawn(move || answer(s, &scrape.shared));
}

/// The request head, read until its blank line, [`SCRAPE_HEAD_LEN_MAX`]
/// bytes or [`SCRAPE_REQUEST_DEADLINE`], whichever comes first.
fn read_head(s: &mut TcpStream) -> String {
    let deadline = Instant::now() + SCRAPE_REQUEST_DEADLINE;
    let mut req = [0u8; SCRAPE_HEAD_LEN_MAX];
    let mut got = 0;
    while got < req.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || s.set_read_timeout(Some(left)).is_err() {
            break;
        }
        match s.read(&mut req[got..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                got += n;
                if req[..got].windows(4).any(|w| w == b"\r\n\r\n") {
                    break;
                }
            }
        }
    }
    String::from_utf8_lossy(&req[..got]).into_owned()
}

/// Answer one HTTP request: `/metrics` gets the text format, `/` a pointer
/// to it, anything else 404.
fn answer(mut s: TcpStream, shared: &Scrapes) {
    let _ = s.set_nonblocking(false);
    let _ = s.set_write_timeout(Some(SCRAPE_WRITE_TIMEOUT));
    let head = read_head(&mut s);
    let path = head.split_whitespace().nth(1).unwrap_or("");
    let (status, kind, body) = match path {
        "/metrics" => (
            "200 OK",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            exposition(&shared.stats, &shared.rate, shared.http.as_deref()),
        ),
        "/" => (
            "200 OK",
            "text/plain; charset=utf-8",
            "urmove recv: metrics at /metrics\n".to_string(),
        ),
        _ => ("404 Not Found", "text/plain", "not found\n".to_string()),
    };
    let _ = write!(
        s,
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

fn counter(reg: &mut Registry, name: &str, help: &str, v: u64) {
    let c = Counter::<u64>::default();
    c.inc_by(v);
    reg.register(name, help, c);
}

fn gauge(reg: &mut Registry, name: &str, help: &str, v: i64) {
    let g = Gauge::<i64>::default();
    g.set(v);
    reg.register(name, help, g);
}

/// The metrics now, in the Prometheus text format.
fn exposition(
    stats: &DaemonStats,
    state: &Mutex<RateState>,
    http: Option<&crate::http::stats::HttpStats>,
) -> String {
    let mut reg = Registry::with_prefix("urmove");
    let received = stats.bytes_received.load(Ordering::Relaxed);
    moved(&mut reg, stats, received);
    connections(&mut reg, stats);
    buffers(&mut reg, stats);
    gauge(
        &mut reg,
        "receive_rate_bits_per_second",
        "Aggregate receive rate between the last two scrapes (1 s apart at least)",
        scrape_rate(state, received) as i64,
    );
    by_kind(
        &mut reg,
        "session_errors",
        "Failed sessions and refused connections, by error kind: the daemon's own errors",
        stats.errors(),
    );
    by_kind(
        &mut reg,
        "sessions_aborted_by_peer",
        "Sessions the peer ended with its own error message, by the kind it gave",
        stats.aborted_by_peer(),
    );
    by_kind(
        &mut reg,
        "connections_failed_before_auth",
        "Connections that failed before they proved they hold the key (strangers, scanners, a wrong key), by kind: apart from session_errors",
        stats.preauth_failures(),
    );
    per_session(&mut reg, stats);
    if let Some(h) = http {
        super::metrics_http::register(&mut reg, h);
    }
    let mut out = String::new();
    if encode(&mut out, &reg).is_err() {
        let _ = writeln!(out, "# encoding failed");
    }
    out
}

/// What the daemon moved since it started (`received` bytes of it), and
/// how many sessions it ran.
fn moved(reg: &mut Registry, stats: &DaemonStats, received: u64) {
    counter(
        reg,
        "received_bytes",
        "Payload bytes received by push sessions and benchmarks",
        received,
    );
    counter(
        reg,
        "sent_bytes",
        "Payload bytes sent by pull sessions",
        stats.bytes_sent.load(Ordering::Relaxed),
    );
    counter(
        reg,
        "received_files",
        "Files received, verified, synced and renamed",
        stats.files_received.load(Ordering::Relaxed),
    );
    counter(
        reg,
        "sent_files",
        "Files sent by pull sessions",
        stats.files_sent.load(Ordering::Relaxed),
    );
    counter(
        reg,
        "sessions",
        "Sessions started",
        stats.sessions_total.load(Ordering::Relaxed),
    );
}

/// The sessions and connections open now, and those refused for want of
/// authentication.
fn connections(reg: &mut Registry, stats: &DaemonStats) {
    gauge(
        reg,
        "sessions_active",
        "Sessions running now",
        stats.sessions_active.load(Ordering::Relaxed) as i64,
    );
    gauge(
        reg,
        "connections_open",
        "Connections open now (sessions, data streams, handshakes)",
        stats.connections_open.load(Ordering::Relaxed) as i64,
    );
    gauge(
        reg,
        "connections_unauthenticated",
        "Connections open now that have not proved they hold the key yet",
        stats.connections_unauthenticated() as i64,
    );
    counter(
        reg,
        "unauthenticated_refused",
        "Connections refused at once: their address had --max-unauthenticated-per-address unauthenticated connections open",
        stats.unauthenticated_refused.load(Ordering::Relaxed),
    );
}

/// Registered buffer memory: reserved now, and the limit.
fn buffers(reg: &mut Registry, stats: &DaemonStats) {
    gauge(
        reg,
        "buffer_bytes_in_use",
        "Registered buffer memory reserved by running sessions",
        stats.buffer_bytes.load(Ordering::Relaxed) as i64,
    );
    gauge(
        reg,
        "buffer_bytes_limit",
        "Registered buffer memory all sessions may reserve (--max-buffer-memory)",
        stats.buffer_bytes_limit.load(Ordering::Relaxed) as i64,
    );
}

/// The aggregate rate since the previous scrape (at least a second apart),
/// in bits per second, with `received` bytes now.
fn scrape_rate(state: &Mutex<RateState>, received: u64) -> f64 {
    let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
    let dt = st.at.elapsed().as_secs_f64();
    if dt >= 1.0 {
        st.rate = received.saturating_sub(st.bytes) as f64 * 8.0 / dt;
        st.at = Instant::now();
        st.bytes = received;
    }
    st.rate
}

/// A counter family `name` labelled by `kind`, one counter per kind.
fn by_kind(reg: &mut Registry, name: &str, help: &str, counts: Vec<(&'static str, u64)>) {
    let family = Family::<Vec<(String, String)>, Counter<u64>>::default();
    for (kind, n) in counts {
        family
            .get_or_create(&vec![("kind".to_string(), kind.to_string())])
            .inc_by(n);
    }
    reg.register(name, help, family);
}

/// Each running session's bytes so far and rate, labelled by its peer and
/// direction.
fn per_session(reg: &mut Registry, stats: &DaemonStats) {
    let bytes = Family::<Vec<(String, String)>, Gauge<i64>>::default();
    let rates = Family::<Vec<(String, String)>, Gauge<i64>>::default();
    for s in stats.sessions() {
        let labels = vec![
            ("peer".to_string(), s.peer.to_string()),
            ("direction".to_string(), s.direction.to_string()),
        ];
        bytes.get_or_create(&labels).set(s.bytes as i64);
        rates
            .get_or_create(&labels)
            .set((s.rate_bytes_per_s * 8.0) as i64);
    }
    reg.register(
        "session_bytes",
        "Payload bytes each running session moved so far",
        bytes,
    );
    reg.register(
        "session_rate_bits_per_second",
        "Rate of each running session over its last full second",
        rates,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_written_out_and_plain_text_is_untouched() {
        assert_eq!(escape_controls("127.0.0.1:5: done"), "127.0.0.1:5: done");
        assert_eq!(
            escape_controls("x\n<3>forged\r\tline"),
            "x\\n<3>forged\\r\\tline"
        );
        assert_eq!(escape_controls("\x1b[31m\x00\x7f"), "\\x1b[31m\\x00\\x7f");
        assert_eq!(
            escape_controls("a\u{85}b\u{9b}c\u{2028}"),
            "a\\u{85}b\\u{9b}c\\u{2028}"
        );
        assert_eq!(
            escape_controls("C:\\n"),
            "C:\\\\n",
            "a backslash is doubled"
        );
        assert_eq!(escape_controls("grüße"), "grüße");
    }

    #[test]
    fn rfc3339_dates_are_civil_dates() {
        let at = |s: u64| rfc3339(SystemTime::UNIX_EPOCH + Duration::from_secs(s));
        assert_eq!(at(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at(951_782_400), "2000-02-29T00:00:00.000Z");
        assert_eq!(at(1_796_040_000), "2026-11-30T12:00:00.000Z");
    }

    #[test]
    fn the_exposition_names_every_metric() {
        let stats = DaemonStats::default();
        stats.bytes_received.store(123, Ordering::Relaxed);
        let state = Mutex::new(RateState {
            at: Instant::now(),
            bytes: 0,
            rate: 0.0,
        });
        let text = exposition(&stats, &state, None);
        for name in [
            "urmove_received_bytes_total 123",
            "urmove_sessions_active 0",
            "urmove_buffer_bytes_limit",
            "# TYPE urmove_session_errors counter",
            "# TYPE urmove_sessions_aborted_by_peer counter",
            "urmove_connections_unauthenticated 0",
            "urmove_unauthenticated_refused_total 0",
            "# EOF",
        ] {
            assert!(text.contains(name), "{name} missing in:\n{text}");
        }
    }
}
