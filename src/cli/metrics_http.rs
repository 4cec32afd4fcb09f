//! The HTTPS front's metrics (`recv --http`), beside the daemon's: requests,
//! bytes and answers per method, token refusals, and the third-party
//! copies (active, bytes moved and written, markers, outcomes).

use std::sync::atomic::Ordering;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::http::stats::{HttpStats, METHODS};

type Labels = Vec<(String, String)>;

/// Register the front's metrics in `reg`.
pub fn register(reg: &mut Registry, s: &HttpStats) {
    per_method(reg, s);
    let tpc = &s.tpc;
    let count = |reg: &mut Registry, name: &str, help: &str, v: u64| {
        let c = Counter::<u64>::default();
        c.inc_by(v);
        reg.register(name, help, c);
    };
    let active = Gauge::<i64>::default();
    active.set(tpc.active.load(Ordering::Relaxed) as i64);
    reg.register("http_tpc_active", "Third-party copies running now", active);
    let copies = Family::<Labels, Counter<u64>>::default();
    for (mode, v) in [
        ("pull", &tpc.pulls),
        ("push", &tpc.pushes),
        ("native", &tpc.native),
    ] {
        copies
            .get_or_create(&vec![("mode".into(), mode.into())])
            .inc_by(v.load(Ordering::Relaxed));
    }
    reg.register(
        "http_tpc_copies",
        "Third-party copies started, by mode (native: on urmove's own protocol, also counted as pull or push)",
        copies,
    );
    let outcomes = Family::<Labels, Counter<u64>>::default();
    for (o, v) in [("success", &tpc.succeeded), ("failure", &tpc.failed)] {
        outcomes
            .get_or_create(&vec![("outcome".into(), o.into())])
            .inc_by(v.load(Ordering::Relaxed));
    }
    reg.register(
        "http_tpc_done",
        "Third-party copies ended, by outcome",
        outcomes,
    );
    count(
        reg,
        "http_tpc_bytes",
        "Bytes third-party copies moved and wrote at the destination, as their markers said",
        tpc.bytes.load(Ordering::Relaxed),
    );
    count(
        reg,
        "http_tpc_markers",
        "Performance markers sent",
        tpc.markers.load(Ordering::Relaxed),
    );
    count(
        reg,
        "http_unauthorized",
        "Requests refused with 401 (no, a bad or an expired token)",
        s.unauthorized.load(Ordering::Relaxed),
    );
    count(
        reg,
        "http_forbidden",
        "Requests refused with 403 (a token whose scopes do not cover the request, or a path refused)",
        s.forbidden.load(Ordering::Relaxed),
    );
}

fn per_method(reg: &mut Registry, s: &HttpStats) {
    let requests = Family::<Labels, Counter<u64>>::default();
    let bytes = Family::<Labels, Counter<u64>>::default();
    for (i, method) in METHODS.iter().enumerate() {
        let m = &s.methods[i];
        for (class, n) in ["2xx", "3xx", "4xx", "5xx"].iter().zip(&m.status) {
            let n = n.load(Ordering::Relaxed);
            if n > 0 {
                requests
                    .get_or_create(&vec![
                        ("method".into(), method.to_string()),
                        ("status".into(), class.to_string()),
                    ])
                    .inc_by(n);
            }
        }
        for (dir, v) in [("in", &m.bytes_in), ("out", &m.bytes_out)] {
            let v = v.load(Ordering::Relaxed);
            if v > 0 {
                bytes
                    .get_or_create(&vec![
                        ("method".into(), method.to_string()),
                        ("direction".into(), dir.into()),
                    ])
                    .inc_by(v);
            }
        }
    }
    reg.register(
        "http_requests",
        "HTTPS front requests answered, by method and status class",
        requests,
    );
    reg.register(
        "http_bytes",
        "HTTPS front body bytes, by method and direction",
        bytes,
    );
}
