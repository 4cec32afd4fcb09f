//! `urmove demo`: the main job on built-in defaults. Starts a receiver on
//! 127.0.0.1, generates test files in a temporary directory, sends them over
//! parallel streams with live progress, checks every received file against
//! its source, prints the summary and cleans up.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::coord::units;
use crate::datapath::disk::fill_random;
use crate::datapath::sys;
use crate::session::client::config::SendConfig;
use crate::session::client::send::run_send;
use crate::session::daemon::{serve, RecvConfig};

use super::args::DemoArgs;
use super::render::{Format, Out};
use super::{interrupt_flag, Failure, EXIT_FAILED};

/// Write `total` bytes of incompressible test data as a few large files and
/// a tree of small ones under `dir/run`.
fn generate(dir: &Path, total: u64) -> anyhow::Result<PathBuf> {
    let top = dir.join("run");
    let small_dir = top.join("small");
    std::fs::create_dir_all(&small_dir)?;
    let small_count = 500u64;
    let small_size = 64u64 << 10;
    let small_total = (small_count * small_size).min(total / 8);
    let large_total = total - small_total;
    let mut buf = vec![0u8; 4 << 20];
    let mut write = |path: &Path, size: u64, seed: u64| -> anyhow::Result<()> {
        let mut f = std::fs::File::create(path).with_context(|| path.display().to_string())?;
        let mut left = size;
        let mut at = 0u64;
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            fill_random(&mut buf[..n], seed, at, 0);
            f.write_all(&buf[..n])?;
            left -= n as u64;
            at += n as u64;
        }
        Ok(())
    };
    let large_files = 4u64;
    for i in 0..large_files {
        // Uneven sizes, so tails are not block-aligned.
        let size = large_total / large_files - i * 4099;
        write(&top.join(format!("large-{i}.dat")), size, i)?;
    }
    for i in 0..small_total / small_size {
        write(
            &small_dir.join(format!("s{i:04}.dat")),
            small_size - i % 1000,
            100 + i,
        )?;
    }
    Ok(top)
}

/// Compare every file under `a` with its copy under `b`; returns the count.
fn compare(a: &Path, b: &Path) -> anyhow::Result<u64> {
    let mut n = 0;
    for e in std::fs::read_dir(a)? {
        let e = e?;
        let (pa, pb) = (e.path(), b.join(e.file_name()));
        if e.file_type()?.is_dir() {
            n += compare(&pa, &pb)?;
        } else {
            let same = std::fs::read(&pa)?
                == std::fs::read(&pb).with_context(|| format!("{} is missing", pb.display()))?;
            anyhow::ensure!(same, "{} differs from its source", pb.display());
            n += 1;
        }
    }
    Ok(n)
}

pub fn demo(a: DemoArgs) -> Result<u8, Failure> {
    let run = |e: anyhow::Error| Failure::Run(e);
    let base = std::env::var_os("TMPDIR")
        .map(PathBuf::from)
        .filter(|p| p.is_dir())
        .unwrap_or_else(|| "/var/tmp".into());
    let work = tempfile_dir(&base).map_err(run)?;
    let result = demo_in(&a, &work);
    if !a.keep {
        let _ = std::fs::remove_dir_all(&work);
    } else {
        super::render::warn(&format!("kept {}", work.display()));
    }
    result
}

fn tempfile_dir(base: &Path) -> anyhow::Result<PathBuf> {
    let mut r = [0u8; 6];
    sys::random_bytes(&mut r)?;
    let name: String = r.iter().map(|b| format!("{b:02x}")).collect();
    let p = base.join(format!("urmove-demo-{name}"));
    std::fs::create_dir(&p).with_context(|| format!("creating {}", p.display()))?;
    Ok(p)
}

fn demo_in(a: &DemoArgs, work: &Path) -> Result<u8, Failure> {
    let run = |e: anyhow::Error| Failure::Run(e);
    let mut out = Out::default();
    let root = work.join("received");
    std::fs::create_dir(&root).map_err(|e| run(e.into()))?;
    let free = sys::free_bytes(work).ok().flatten().unwrap_or(u64::MAX);
    if free / 3 <= a.size {
        return Err(run(anyhow::anyhow!(
            "{} needs about {} free for the demo (source and copy); {} is free. Try --size 256M",
            work.display(),
            units::bytes_decimal(a.size * 2),
            units::bytes_decimal(free)
        )));
    }
    out.line(&format!(
        "urmove demo: generating {} of test files in {}",
        units::bytes_decimal(a.size),
        work.display()
    ));
    let src = generate(&work.join("source").tap_create().map_err(run)?, a.size).map_err(run)?;

    let mut key = [0u8; 32];
    sys::random_bytes(&mut key).map_err(|e| run(e.into()))?;
    let stop = Arc::new(AtomicBool::new(false));
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    // The receiver's secret lives beside its root, and goes with the demo.
    let state_dir = work.join("state");
    let listen = "127.0.0.1:0".parse().expect("a valid address");
    let recv_cfg = RecvConfig::private(listen, root.clone(), key, state_dir.clone());
    let daemon_stop = Arc::clone(&stop);
    let daemon = std::thread::spawn(move || {
        let log: crate::session::daemon::log::Log = Arc::new(|_, m: &str| {
            let _ = writeln!(std::io::stderr(), "urmove recv: {m}");
        });
        let stats = Arc::default();
        serve(recv_cfg, &daemon_stop, log, stats, &mut |addr| {
            let _ = addr_tx.send(addr);
        })
    });
    let addr = addr_rx
        .recv_timeout(Duration::from_secs(10))
        .context("the demo receiver did not start")
        .map_err(run)?;
    out.line(&format!(
        "urmove demo: receiver on {addr}; sending with {} streams",
        a.streams
    ));
    let cfg = SendConfig {
        dest: "demo".into(),
        sources: vec![src.clone()],
        streams: a.streams,
        ..SendConfig::to(addr.ip().to_string(), addr.port(), key)
    };

    let interrupt = interrupt_flag().map_err(run)?;
    let mut printer =
        super::transfer::SendPrinter::new(Format::Human, super::progress::Show::auto());
    let report = run_send(&cfg, &interrupt, &mut printer);
    stop.store(true, Ordering::Relaxed);
    let _ = daemon.join();
    let report = report.map_err(|e| run(anyhow::anyhow!("{e}")))?;
    super::transfer::finish_send(&mut printer, &report);
    if report.status != "ok" {
        return Ok(EXIT_FAILED);
    }
    let checked = compare(&src, &root.join("demo/run")).map_err(run)?;
    out.line(&format!(
        "urmove demo: {checked} files compared byte for byte with their sources: identical"
    ));
    Ok(0)
}

trait TapCreate {
    fn tap_create(self) -> anyhow::Result<PathBuf>;
}

impl TapCreate for PathBuf {
    fn tap_create(self) -> anyhow::Result<PathBuf> {
        std::fs::create_dir_all(&self).with_context(|| self.display().to_string())?;
        Ok(self)
    }
}
