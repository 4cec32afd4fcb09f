//! `urmove bench --net HOST --udp`: the command line of the UDP test
//! ([`crate::session::probe::udp`]): its options checked, its intervals and
//! summary printed as iperf3 -u and HPCBENCH users read them.

use std::time::Duration;

use crate::coord::units::{self, RateUnit};
use crate::protocol::control::ErrorCode;
use crate::session::client::config::SendConfig;
use crate::session::probe::udp::{run_udp, UdpFigures, UdpReport, UdpTest};
use crate::session::SessionError;

use super::args::BenchArgs;
use super::parse::Streams;
use super::render::{Format, Out};
use super::{interrupt_flag, keys, Failure};

fn usage(m: String) -> Failure {
    Failure::Usage(anyhow::anyhow!(m))
}

/// The options a UDP test does not take, with what to use instead.
fn refuse_tcp_options(a: &BenchArgs) -> Result<(), Failure> {
    let not = |what: &str, instead: &str| usage(format!("--udp takes no {what}{instead}"));
    if a.rate_limit.is_some() {
        return Err(not("--rate-limit", ": the datagrams are paced to --rate"));
    }
    if a.bs.is_some() {
        return Err(not("--bs", ": --size is the datagram's payload"));
    }
    if a.encrypt || a.verify {
        return Err(not(
            "--encrypt or --verify",
            " (datagrams are tagged, not sealed)",
        ));
    }
    if a.plot.is_some() {
        return Err(not("--plot", ""));
    }
    Ok(())
}

/// The test the options ask for.
fn test_of(a: &BenchArgs) -> Result<UdpTest, Failure> {
    refuse_tcp_options(a)?;
    let rate = a.rate.as_ref().map(|r| r.bytes_per_s);
    if rate.is_some_and(|r| r <= 0.0) {
        return Err(usage(
            "--rate must be above zero (leave it out to send as fast as this side can)".into(),
        ));
    }
    let flows = match a.streams {
        Streams::Auto => 1,
        Streams::Count(n) => n,
    };
    Ok(UdpTest {
        flows,
        size: a.size.map(|s| s as usize),
        rate,
        time: a.time.unwrap_or(Duration::from_secs(10)),
        interval: a.interval,
        reverse: a.reverse,
        lanes: a.lanes,
    })
}

/// `bench --net HOST --udp`.
pub fn bench_udp(a: BenchArgs) -> Result<u8, Failure> {
    let host = a.net.clone().expect("bench_udp is called with --net");
    let key_file = a
        .key_file
        .clone()
        .ok_or_else(|| usage("bench --net needs --key-file (the receiver's key)".into()))?;
    let mut t = test_of(&a)?;
    let key = keys::load(&key_file).map_err(Failure::Usage)?;
    let cfg = SendConfig {
        interval: a.interval,
        lanes: a.lanes,
        ..SendConfig::to(host, a.port, key)
    };
    // The size is checked against the path before anything is asked.
    let server = crate::session::probe::udp::resolve(&cfg).map_err(|e| Failure::Run(e.into()))?;
    let size = crate::session::probe::udp::datagram_size(server, t.size)
        .map_err(|e| usage(e.to_string()))?;
    t.size = Some(size);
    let format = Format::pick(a.json, a.json_stream);
    let mut out = Out::default();
    if format == Format::Human {
        out.line(&header(&cfg, &t, size, a.rate));
    }
    let interrupt = interrupt_flag().map_err(Failure::Run)?;
    let mut on = |f: &UdpFigures| print_interval(&mut Out::default(), format, f);
    match run_udp(&cfg, &t, &interrupt, &mut on) {
        Ok(r) => Ok(print_report(&mut out, format, &r)),
        Err(e) => Err(failure(e)),
    }
}

/// A refusal of what was asked (no UDP at the daemon, a size its path
/// cannot carry) is a usage error, exit 2; anything else a failure.
fn failure(e: SessionError) -> Failure {
    let asked_wrong = matches!(
        &e,
        SessionError::Refused {
            code: ErrorCode::BadRequest,
            ..
        } | SessionError::Local {
            code: ErrorCode::BadRequest,
            ..
        }
    );
    if asked_wrong {
        Failure::Usage(e.into())
    } else {
        Failure::Run(e.into())
    }
}

fn header(cfg: &SendConfig, t: &UdpTest, size: usize, rate: Option<super::parse::Rate>) -> String {
    let way = if t.reverse { "from" } else { "to" };
    let pace = match rate {
        Some(r) => format!("at {}", r.echo()),
        None => "as fast as the sender can".into(),
    };
    format!(
        "UDP {way} {}:{}, {}, {size}-byte datagrams, {pace}, for {}",
        cfg.host,
        cfg.port,
        units::count(u64::from(t.flows), "flow"),
        units::duration_s(t.time.as_secs_f64())
    )
}

/// One line of figures, as iperf3 -u prints an interval.
fn human(f: &UdpFigures) -> String {
    format!(
        "[{:>6.1}-{:>6.1} s] offered {:>11}  received {:>11}  sent {:>9}  received {:>9}  lost {:>7} ({:.3}%)  late {}  twice {}  jitter {:.3} ms",
        f.start_s,
        f.end_s,
        units::rate(f.offered_bits_per_s / 8.0, RateUnit::Gbit),
        units::rate(f.received_bits_per_s / 8.0, RateUnit::Gbit),
        f.sent,
        f.received,
        f.lost,
        f.loss_percent,
        f.out_of_order,
        f.duplicates,
        f.jitter_ms
    )
}

fn print_interval(out: &mut Out, format: Format, f: &UdpFigures) {
    match format {
        Format::Human => out.line(&human(f)),
        Format::JsonStream => {
            let mut v = serde_json::to_value(f).expect("figures serialize");
            v["type"] = "interval".into();
            out.line(&v.to_string());
        }
        Format::Json => {}
    }
}

/// The summary (or the JSON document); the exit code.
fn print_report(out: &mut Out, format: Format, r: &UdpReport) -> u8 {
    let code = if r.status == "ok" {
        0
    } else {
        super::EXIT_FAILED
    };
    if format != Format::Human {
        let mut v = serde_json::to_value(r).expect("the report serializes");
        v["schema"] = 1.into();
        if format == Format::JsonStream {
            v["type"] = "summary".into();
        }
        out.line(&v.to_string());
        return code;
    }
    if r.per_flow.len() > 1 {
        for (k, f) in r.per_flow.iter().enumerate() {
            out.line(&format!("flow {k}: {}", human(f)));
        }
    }
    let s = &r.summary;
    let writes = match (r.gso, r.datagrams_per_write) {
        (Some(true), Some(n)) => format!("GSO writes of {}", units::count(n as u64, "datagram")),
        (Some(false), _) => "one datagram a write (no GSO)".into(),
        _ => "sent by the daemon".into(),
    };
    out.line(&format!(
        "summary: offered {}, received {} over {}: {} sent, {} received, {} lost ({:.3}%), {} out of order, {} duplicates, jitter {:.3} ms; {}; {} on {}",
        units::rate(s.offered_bits_per_s / 8.0, RateUnit::Gbit),
        units::rate(s.received_bits_per_s / 8.0, RateUnit::Gbit),
        units::duration_s(s.end_s - s.start_s),
        units::count(s.sent, "datagram"),
        s.received,
        s.lost,
        s.loss_percent,
        s.out_of_order,
        s.duplicates,
        s.jitter_ms,
        units::count(r.foreign, "foreign datagram") + " ignored",
        writes,
        units::count(r.lanes as u64, "lane"),
    ));
    if let Some(e) = &r.error {
        super::render::error(e);
    }
    code
}
