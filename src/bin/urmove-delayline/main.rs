//! urmove-delayline: a long, lossy path between two network namespaces on
//! one machine, for the tests and `scripts/bench-wan.sh` (this kernel has
//! no netem).
//!
//! It makes namespaces A and B, a TUN device in each (point to point,
//! ADDR_A <-> ADDR_B), and moves every packet from one device to the other
//! after the one-way delay, dropping (at random or in bursts) and holding
//! some late (reordering) as asked; the rate is `tbf` on each device's way
//! out. Commands on stdin change it while it runs (`cut`, `restore`,
//! `loss P [BURST]`, `stats`, `quit`); when stdin ends (the script or test
//! that started it is gone) it removes its namespaces and exits, as it
//! does on SIGINT, SIGTERM and SIGHUP and when setting up fails.

mod line;
mod net;

use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use clap::Parser;
use urmove::cli::parse;

use line::{Loss, Shape};
use net::{Namespaces, Plan};

/// A long, lossy path between two network namespaces (a user-space delay
/// line over TUN; the rate is tbf).
#[derive(Parser, Debug)]
#[command(
    name = "urmove-delayline",
    after_help = "Examples:\n  urmove-delayline --rtt 100ms --rate 1Gbit                 # FDT's 1 Gbit/s x 100 ms\n  urmove-delayline --rtt 50ms --loss 0.01 --reorder 0.01   # lossy and reordering\n\nIt runs until stdin ends or it is signalled, then removes its namespaces.\nCommands on stdin: cut | restore | loss P [BURST] | stats | quit"
)]
struct Args {
    /// Namespace of side A (made now; removed on exit).
    #[arg(long, default_value = "urm-wan-a")]
    ns_a: String,
    /// Namespace of side B.
    #[arg(long, default_value = "urm-wan-b")]
    ns_b: String,
    /// Address of side A.
    #[arg(long, default_value = "10.77.0.1")]
    addr_a: std::net::Ipv4Addr,
    /// Address of side B.
    #[arg(long, default_value = "10.77.0.2")]
    addr_b: std::net::Ipv4Addr,
    /// Round-trip time the line adds (half each way).
    #[arg(long, default_value = "100ms", value_parser = parse::duration)]
    rtt: Duration,
    /// Rate of each direction (tbf on each device), as 1Gbit (bits unless
    /// a B says bytes, as urmove reads rates); none: as fast as the line
    /// moves packets.
    #[arg(long, value_parser = parse::rate)]
    rate: Option<parse::Rate>,
    /// Bytes tbf queues before it drops (the bottleneck's buffer); default
    /// one bandwidth-delay product, at least 1 MiB.
    #[arg(long, value_parser = parse::size)]
    queue: Option<u64>,
    /// Share of packets lost, each direction (0.015 = 1.5%).
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Mean run of lost packets (1: independent losses).
    #[arg(long, default_value_t = 1.0)]
    burst: f64,
    /// Share of packets held back so that later ones overtake them.
    #[arg(long, default_value_t = 0.0)]
    reorder: f64,
    /// How much longer a held-back packet waits.
    #[arg(long, default_value = "1ms", value_parser = parse::duration)]
    reorder_gap: Duration,
    /// MTU of both devices (jumbo frames, as data-transfer nodes use).
    #[arg(long, default_value_t = 9000)]
    mtu: u32,
    /// Seed of the loss and reorder decisions.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Remove namespaces of these names first (left by a line that was
    /// killed).
    #[arg(long)]
    replace: bool,
}

impl Args {
    fn check(&self) -> Result<(), String> {
        for (what, p) in [("--loss", self.loss), ("--reorder", self.reorder)] {
            if !(0.0..=1.0).contains(&p) {
                return Err(format!("{what} {p} is not a share between 0 and 1"));
            }
        }
        if !(1.0..=1e6).contains(&self.burst) {
            return Err(format!("--burst {} must be 1 or more packets", self.burst));
        }
        if !(576..=65535).contains(&self.mtu) {
            return Err(format!("--mtu {} must be 576-65535", self.mtu));
        }
        if self.ns_a == self.ns_b || self.addr_a == self.addr_b {
            return Err("sides A and B need different namespaces and addresses".into());
        }
        Ok(())
    }

    fn shape(&self, seed_offset: u64) -> (Shape, line::Rng) {
        let shape = Shape {
            delay: self.rtt / 2,
            loss: Loss::new(self.loss, self.burst),
            reorder: self.reorder,
            reorder_gap: self.reorder_gap,
        };
        (shape, line::Rng::new(self.seed.wrapping_add(seed_offset)))
    }

    fn plan(&self) -> Plan {
        Plan {
            ns: [self.ns_a.clone(), self.ns_b.clone()],
            addr: [self.addr_a, self.addr_b],
            mtu: self.mtu,
            rate_bytes_per_s: self.rate.map(|r| r.bytes_per_s),
            queue_bytes: self.queue.unwrap_or_else(|| {
                let rate = self.rate.map_or(0.0, |r| r.bytes_per_s);
                let bdp = rate * self.rtt.as_secs_f64();
                (bdp as u64).max(1 << 20)
            }),
        }
    }
}

/// What stdin and signals ask of the line.
#[derive(Debug)]
enum Command {
    Cut(bool),
    Loss(f64, f64),
    Stats,
    Quit(&'static str),
}

fn parse_command(line: &str) -> Result<Command, String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let share = |w: &str| {
        w.parse::<f64>()
            .ok()
            .filter(|p| (0.0..=1.0).contains(p))
            .ok_or_else(|| format!("{w:?} is not a share between 0 and 1"))
    };
    match words.as_slice() {
        ["cut"] => Ok(Command::Cut(true)),
        ["restore"] => Ok(Command::Cut(false)),
        ["loss", p] => Ok(Command::Loss(share(p)?, 1.0)),
        ["loss", p, b] => {
            let b = b
                .parse::<f64>()
                .ok()
                .filter(|b| *b >= 1.0)
                .ok_or_else(|| format!("burst {b:?} must be 1 or more"))?;
            Ok(Command::Loss(share(p)?, b))
        }
        ["stats"] => Ok(Command::Stats),
        ["quit"] => Ok(Command::Quit("quit")),
        _ => Err(format!(
            "unknown command {line:?} (cut | restore | loss P [BURST] | stats | quit)"
        )),
    }
}

/// Read commands until stdin ends (which ends the line too).
fn read_commands(tx: mpsc::Sender<Command>) {
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        match parse_command(&line) {
            Ok(c) => {
                if tx.send(c).is_err() {
                    return;
                }
            }
            Err(e) => eprintln!("urmove-delayline: {e}"),
        }
    }
    let _ = tx.send(Command::Quit("stdin ended"));
}

fn run(args: &Args) -> Result<(), String> {
    args.check()?;
    let term = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(sig, Arc::clone(&term)).map_err(|e| e.to_string())?;
    }
    let plan = args.plan();
    // Dropped (on every return, a failed set-up included) it removes them.
    let spaces = Namespaces::create(&plan, args.replace)?;
    let line = spaces.start([args.shape(0), args.shape(1)])?;
    println!(
        "ready ns_a={} ns_b={} addr_a={} addr_b={} dev_a={} dev_b={} rtt_ms={} mtu={}",
        plan.ns[0],
        plan.ns[1],
        plan.addr[0],
        plan.addr[1],
        spaces.devices[0],
        spaces.devices[1],
        args.rtt.as_millis(),
        plan.mtu
    );
    let _ = std::io::stdout().flush();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || read_commands(tx));
    let why = loop {
        if term.load(Ordering::Relaxed) {
            break "signalled";
        }
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(Command::Cut(on)) => line.cut(on),
            Ok(Command::Loss(p, b)) => line.set_loss(p, b),
            Ok(Command::Stats) => {
                println!("{}", line.stats());
                let _ = std::io::stdout().flush();
            }
            Ok(Command::Quit(why)) => break why,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break "stdin ended",
        }
    };
    eprintln!("urmove-delayline: {why}; {}", line.stats());
    drop(spaces);
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("urmove-delayline: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_parse_and_bad_ones_say_why() {
        assert!(matches!(parse_command("cut"), Ok(Command::Cut(true))));
        assert!(matches!(
            parse_command(" restore "),
            Ok(Command::Cut(false))
        ));
        assert!(
            matches!(parse_command("loss 0.01"), Ok(Command::Loss(p, b)) if p == 0.01 && b == 1.0)
        );
        assert!(matches!(parse_command("loss 0.01 8"), Ok(Command::Loss(_, b)) if b == 8.0));
        assert!(parse_command("loss 2").unwrap_err().contains("share"));
        assert!(parse_command("loss 0.1 0").unwrap_err().contains("burst"));
        assert!(parse_command("jump")
            .unwrap_err()
            .contains("unknown command"));
    }

    #[test]
    fn bad_arguments_are_refused() {
        let a = Args::parse_from(["x", "--loss", "1.5"]);
        assert!(a.check().unwrap_err().contains("--loss"));
        let a = Args::parse_from(["x", "--ns-b", "urm-wan-a"]);
        assert!(a.check().is_err());
        let a = Args::parse_from(["x", "--rate", "1Gbit", "--rtt", "100ms"]);
        assert_eq!(a.plan().queue_bytes, 12_500_000);
    }
}
