//! The namespaces, devices and threads of the line: set up with `ip` and
//! `tc` (iproute2), torn down when dropped, and one forwarding pair of
//! threads per direction (a reader that decides each packet's fate, a
//! writer that sends it on when it is due).

use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{Read, Write};
use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Instant;

use urmove::datapath::tun::open_tun_in;

use crate::line::{Fate, Loss, Rng, Shape};

/// Packets one direction holds at most (a bandwidth-delay product of 10
/// Gbit/s x 100 ms is 139,000 jumbo frames); more are dropped and counted.
const HELD_MAX: usize = 400_000;

/// What to build.
pub struct Plan {
    pub ns: [String; 2],
    pub addr: [Ipv4Addr; 2],
    pub mtu: u32,
    pub rate_bytes_per_s: Option<f64>,
    pub queue_bytes: u64,
}

/// Run `ip`/`tc` with `args`; its stderr in the error.
fn sh(prog: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(prog)
        .args(args)
        .output()
        .map_err(|e| format!("{prog}: {e} (install iproute2)"))?;
    if !out.status.success() {
        return Err(format!(
            "{prog} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

fn ns_exists(name: &str) -> bool {
    std::path::Path::new("/run/netns").join(name).exists()
}

/// The two namespaces with a TUN device each; removed when dropped.
pub struct Namespaces {
    made: Vec<String>,
    pub devices: [String; 2],
    tuns: Vec<File>,
}

impl Namespaces {
    pub fn create(plan: &Plan, replace: bool) -> Result<Namespaces, String> {
        let mut me = Namespaces {
            made: Vec::new(),
            devices: [0, 1].map(|i| format!("dl{}{}", std::process::id(), ["a", "b"][i])),
            tuns: Vec::new(),
        };
        for ns in &plan.ns {
            if ns_exists(ns) {
                if !replace {
                    return Err(format!(
                        "namespace {ns} exists (another line runs, or one was killed: pass --replace, or ip netns del {ns})"
                    ));
                }
                sh("ip", &["netns", "del", ns])?;
            }
            sh("ip", &["netns", "add", ns])?;
            me.made.push(ns.clone());
        }
        for i in 0..2 {
            me.configure(plan, i)?;
        }
        Ok(me)
    }

    /// Device `i` in namespace `i`, up, addressed to the other side, and
    /// rate-limited on its way out.
    fn configure(&mut self, plan: &Plan, i: usize) -> Result<(), String> {
        let (ns, dev) = (&plan.ns[i], self.devices[i].clone());
        let tun = open_tun_in(&std::path::Path::new("/run/netns").join(ns), &dev)
            .map_err(|e| e.to_string())?;
        self.tuns.push(tun);
        let (mtu, local, peer) = (
            plan.mtu.to_string(),
            plan.addr[i].to_string(),
            plan.addr[1 - i].to_string(),
        );
        sh("ip", &["-n", ns, "link", "set", "lo", "up"])?;
        sh(
            "ip",
            &[
                "-n",
                ns,
                "link",
                "set",
                &dev,
                "mtu",
                &mtu,
                "txqueuelen",
                "20000",
                "up",
            ],
        )?;
        sh(
            "ip",
            &["-n", ns, "addr", "add", &local, "peer", &peer, "dev", &dev],
        )?;
        if let Some(rate) = plan.rate_bytes_per_s {
            // tbf needs a bucket of at least one packet; 1 ms of the rate
            // keeps it smooth at high rates.
            let burst = ((rate / 1000.0) as u64).max(4 * u64::from(plan.mtu));
            let rate_bits = format!("{}bit", (rate * 8.0) as u64);
            let (burst, limit) = (burst.to_string(), plan.queue_bytes.to_string());
            sh(
                "tc",
                &[
                    "-n", ns, "qdisc", "replace", "dev", &dev, "root", "tbf", "rate", &rate_bits,
                    "burst", &burst, "limit", &limit,
                ],
            )?;
        }
        Ok(())
    }

    /// Start forwarding A -> B and B -> A, each direction shaped by its
    /// own `Shape` and generator.
    pub fn start(&self, shapes: [(Shape, Rng); 2]) -> Result<Line, String> {
        let cut = Arc::new(AtomicBool::new(false));
        let mut dirs = Vec::new();
        for (i, (shape, rng)) in shapes.into_iter().enumerate() {
            let from = self.tuns[i].try_clone().map_err(|e| e.to_string())?;
            let to = self.tuns[1 - i].try_clone().map_err(|e| e.to_string())?;
            let dir = Arc::new(Direction {
                shape: Mutex::new(shape),
                counts: Counts::default(),
            });
            let (tx, rx) = mpsc::sync_channel(HELD_MAX);
            let (d, c) = (Arc::clone(&dir), Arc::clone(&cut));
            std::thread::spawn(move || read_side(from, rng, &d, &c, tx));
            let d = Arc::clone(&dir);
            std::thread::spawn(move || write_side(to, &d, rx));
            dirs.push(dir);
        }
        Ok(Line { cut, dirs })
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for ns in &self.made {
            if let Err(e) = sh("ip", &["netns", "del", ns]) {
                eprintln!("urmove-delayline: removing namespace {ns}: {e}");
            }
        }
    }
}

#[derive(Default)]
struct Counts {
    passed: AtomicU64,
    bytes: AtomicU64,
    lost: AtomicU64,
    late: AtomicU64,
    cut: AtomicU64,
    overflow: AtomicU64,
}

struct Direction {
    shape: Mutex<Shape>,
    counts: Counts,
}

/// The running line.
pub struct Line {
    cut: Arc<AtomicBool>,
    dirs: Vec<Arc<Direction>>,
}

impl Line {
    /// Cut the line (every packet dropped both ways) or restore it.
    pub fn cut(&self, on: bool) {
        self.cut.store(on, Ordering::Relaxed);
    }

    pub fn set_loss(&self, rate: f64, burst: f64) {
        for d in &self.dirs {
            d.shape.lock().unwrap_or_else(|p| p.into_inner()).loss = Loss::new(rate, burst);
        }
    }

    /// One line of counters, per direction.
    pub fn stats(&self) -> String {
        let mut out = Vec::new();
        for (name, d) in ["a->b", "b->a"].iter().zip(&self.dirs) {
            let c = &d.counts;
            let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
            out.push(format!(
                "{name} passed={} bytes={} lost={} late={} cut={} overflow={}",
                get(&c.passed),
                get(&c.bytes),
                get(&c.lost),
                get(&c.late),
                get(&c.cut),
                get(&c.overflow)
            ));
        }
        out.join("; ")
    }
}

/// A packet waiting for its time; the earliest first, then in arrival
/// order.
struct Held {
    due: Instant,
    seq: u64,
    packet: Vec<u8>,
}

impl PartialEq for Held {
    fn eq(&self, o: &Self) -> bool {
        (self.due, self.seq) == (o.due, o.seq)
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Held {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        // BinaryHeap is a max-heap: reverse for the earliest first.
        (o.due, o.seq).cmp(&(self.due, self.seq))
    }
}

fn read_side(
    mut from: File,
    mut rng: Rng,
    dir: &Direction,
    cut: &AtomicBool,
    tx: mpsc::SyncSender<Held>,
) {
    let mut buf = vec![0u8; 65536];
    let mut seq = 0u64;
    let c = &dir.counts;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => return, // the device is gone: the line is ending
            Ok(n) => n,
        };
        if cut.load(Ordering::Relaxed) {
            c.cut.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let fate = {
            let mut shape = dir.shape.lock().unwrap_or_else(|p| p.into_inner());
            shape.decide(Instant::now(), &mut rng)
        };
        let Fate::At { due, late } = fate else {
            c.lost.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        c.late.fetch_add(u64::from(late), Ordering::Relaxed);
        seq += 1;
        let held = Held {
            due,
            seq,
            packet: buf[..n].to_vec(),
        };
        match tx.try_send(held) {
            Ok(()) => {}
            Err(mpsc::TrySendError::Full(_)) => {
                c.overflow.fetch_add(1, Ordering::Relaxed);
            }
            Err(mpsc::TrySendError::Disconnected(_)) => return,
        }
    }
}

fn write_side(mut to: File, dir: &Direction, rx: mpsc::Receiver<Held>) {
    let mut heap: BinaryHeap<Held> = BinaryHeap::new();
    let c = &dir.counts;
    loop {
        // Take what arrived; wait for the next arrival or the earliest due.
        let next = match heap.peek() {
            None => rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
            Some(h) => match h.due.checked_duration_since(Instant::now()) {
                None => Err(mpsc::RecvTimeoutError::Timeout),
                Some(wait) => rx.recv_timeout(wait),
            },
        };
        match next {
            Ok(h) => {
                heap.push(h);
                while let Ok(h) = rx.try_recv() {
                    heap.push(h);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
        let now = Instant::now();
        while heap.peek().is_some_and(|h| h.due <= now) {
            let h = heap.pop().expect("peeked");
            // A packet the stack refuses is lost, as on a wire.
            if to.write(&h.packet).is_ok() {
                c.passed.fetch_add(1, Ordering::Relaxed);
                c.bytes.fetch_add(h.packet.len() as u64, Ordering::Relaxed);
            }
        }
    }
}
