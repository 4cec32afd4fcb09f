//! Benchmark targets: resolving TARGET arguments into open files, choosing
//! and clamping sizes, fitting the buffers into locked memory, laying out
//! what a read would otherwise find missing, and cleaning up.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use crate::coord::units::bytes_decimal;
use crate::datapath::disk::{self, Limit, Pattern, PhaseSpec, VerifySpec};
use crate::datapath::file::{open_target, OpenSpec, TargetFile, TargetKind};
use crate::datapath::{direct, sys, Error};
use crate::protocol::block;

use super::disk::{DiskBenchConfig, Mode, Observer, SizeRule};
use super::phase::run_phase;
use super::report::{Environment, TargetEnv};

/// Default test size when O_DIRECT is in force: the page cache cannot
/// flatter it, so it only needs to be long enough to be steady.
pub const SIZE_DIRECT_DEFAULT: u64 = 2 << 30;
/// Leave this much free on a filesystem we write a test file to (or a
/// twentieth of what is free, on small filesystems).
pub const FREE_SPACE_RESERVE: u64 = 64 << 20;
/// Locked memory left per ring for its own SQ and CQ pages, which recent
/// kernels charge to RLIMIT_MEMLOCK beside the registered buffers.
const RING_MEMLOCK_SLACK: u64 = 512 << 10;

/// A target prepared for the run.
pub(crate) struct Prepared {
    pub(crate) file: TargetFile,
    /// The file did not exist before this run.
    pub(crate) created: bool,
    /// We named it (a TARGET directory): remove it at the end unless --keep.
    pub(crate) temporary: bool,
    /// The user's data may be overwritten: we created the file, or a write
    /// mode was asked for.
    pub(crate) may_write: bool,
    /// Bytes each phase addresses.
    pub(crate) region: u64,
    /// Seed of the data and of the block stamps on this target.
    pub(crate) seed: u64,
    /// Every block below `file.size` carries a stamp with `seed`.
    pub(crate) stamped: bool,
    pub(crate) laid_out: u64,
    pub(crate) core: Option<usize>,
}

/// Resolve each TARGET into an open file: a directory gets a new test file,
/// a file or block device is used as it is. Sizes are chosen and clamped to
/// the free space here. On error nothing this run created is left behind.
pub(crate) fn prepare_targets(
    cfg: &DiskBenchConfig,
    seed: u64,
    env: &mut Environment,
    obs: &mut dyn Observer,
) -> Result<Vec<Prepared>, Error> {
    let writes = cfg
        .modes
        .iter()
        .any(|m| !matches!(m, Mode::Read | Mode::RandRead));
    let mut out: Vec<Prepared> = Vec::with_capacity(cfg.targets.len());
    for (i, path) in cfg.targets.iter().enumerate() {
        match prepare_one(cfg, writes, seed, i, path, obs) {
            Ok(p) => {
                for f in &p.file.fallbacks {
                    obs.notice(f);
                }
                env.fallbacks.extend(p.file.fallbacks.iter().cloned());
                out.push(p);
            }
            Err(e) => {
                remove_created(&out);
                return Err(e);
            }
        }
    }
    Ok(out)
}

/// Remove every file this run created.
pub(crate) fn remove_created(targets: &[Prepared]) {
    for t in targets.iter().filter(|t| t.created) {
        let _ = std::fs::remove_file(&t.file.path);
    }
}

fn prepare_one(
    cfg: &DiskBenchConfig,
    writes: bool,
    seed: u64,
    index: usize,
    path: &Path,
    obs: &mut dyn Observer,
) -> Result<Prepared, Error> {
    let open_err = |path: &Path, source: std::io::Error| Error::Open {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path);
    let auto_named = meta.as_ref().is_ok_and(|m| m.is_dir());
    let (file_path, created) = match &meta {
        Ok(m) if m.is_dir() => (
            path.join(format!("urmove-bench-{}-{index}.dat", std::process::id())),
            true,
        ),
        Ok(_) => (path.to_path_buf(), false),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let parent = match path.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            if let Err(e) = std::fs::metadata(parent) {
                return Err(open_err(parent, e));
            }
            (path.to_path_buf(), true)
        }
        Err(e) => return Err(open_err(path, std::io::Error::new(e.kind(), e.to_string()))),
    };
    let opened = open_target(
        &file_path,
        &OpenSpec {
            write: writes || created,
            create: created,
            direct: cfg.direct,
            destroy: cfg.destroy,
        },
    );
    let file = match opened {
        Ok(f) => f,
        Err(e) => {
            // open(O_CREAT) may have made the file before refusing O_DIRECT.
            if created {
                let _ = std::fs::remove_file(&file_path);
            }
            return Err(e);
        }
    };
    let mut t = Prepared {
        region: 0,
        laid_out: 0,
        core: None,
        created,
        temporary: auto_named,
        may_write: writes || created,
        seed,
        stamped: false,
        file,
    };
    let checked = size_target(cfg, writes, &mut t, obs).and_then(|()| {
        disk::probe(&t.file)?;
        if cfg.verify && cfg.seed.is_none() && !created {
            adopt_stamp_seed(&mut t, cfg.bs);
        }
        Ok(())
    });
    if let Err(e) = checked {
        remove_created(std::slice::from_ref(&t));
        return Err(e);
    }
    Ok(t)
}

/// A kept file from an earlier `--verify` run carries that run's seed: use
/// it, so reading (and rewriting) it checks against the seed it was written with.
fn adopt_stamp_seed(t: &mut Prepared, bs: u32) {
    let mut head = vec![0u8; bs as usize];
    // A plain buffered descriptor: the O_DIRECT one needs aligned buffers.
    let Ok(f) = std::fs::File::open(&t.file.path) else {
        return;
    };
    if f.read_exact_at(&mut head, 0).is_err() {
        return;
    }
    if let Ok(stamp) = block::open(&head) {
        t.seed = stamp.seed;
        t.stamped = true;
    }
}

fn size_target(
    cfg: &DiskBenchConfig,
    writes: bool,
    t: &mut Prepared,
    obs: &mut dyn Observer,
) -> Result<(), Error> {
    let f = &t.file;
    f.check_aligned("block size", u64::from(cfg.bs))?;
    if cfg.verify && (cfg.bs as usize) < block::STAMP_LEN {
        return Err(Error::Invalid {
            path: f.path.clone(),
            message: format!(
                "--verify needs blocks of at least {} bytes (its stamp); --bs is {}",
                block::STAMP_LEN,
                cfg.bs
            ),
        });
    }
    let bs = u64::from(cfg.bs);
    let read_as_is = !writes && !t.created && f.kind == TargetKind::File && f.size > 0;
    let mut region = match cfg.size {
        SizeRule::Given(s) => s,
        SizeRule::Default { .. } if read_as_is => f.size,
        SizeRule::Default { ram_bytes } => {
            if f.direct {
                SIZE_DIRECT_DEFAULT
            } else {
                ram_bytes.max(SIZE_DIRECT_DEFAULT)
            }
        }
    };
    if f.kind == TargetKind::BlockDevice {
        if region > f.size {
            if matches!(cfg.size, SizeRule::Given(_)) {
                obs.notice(&format!(
                    "size clamped to {}: the size of {}",
                    bytes_decimal(f.size),
                    f.path.display()
                ));
            }
            region = f.size;
        }
    } else if t.may_write {
        region = clamp_to_free_space(f, region, bs, obs)?;
    }
    if read_as_is && region <= f.size {
        // Reading a file as it is: the last read may end short at EOF.
    } else {
        region = f.align.round_down(region);
        if region < bs {
            return Err(Error::Misaligned {
                path: f.path.clone(),
                what: "size",
                value: region,
                align: cfg.bs,
                from: "the block size (size must hold at least one block)",
            });
        }
        let random = cfg
            .modes
            .iter()
            .any(|m| matches!(m, Mode::RandRead | Mode::RandWrite | Mode::Rw));
        if random || cfg.verify {
            region = region / bs * bs;
        }
    }
    t.region = region;
    Ok(())
}

/// `region` bytes of file `f` to write, within the free space of its
/// filesystem (less a reserve), in whole blocks of `bs`.
fn clamp_to_free_space(
    f: &TargetFile,
    region: u64,
    bs: u64,
    obs: &mut dyn Observer,
) -> Result<u64, Error> {
    // We will write up to `region`: keep it within the free space.
    let dir = match f.path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let free = sys::free_bytes(dir)
        .map_err(|e| Error::Open {
            path: dir.to_path_buf(),
            source: e,
        })?
        // A filesystem that reports no size (ramfs) cannot be clamped.
        .unwrap_or(u64::MAX / 4);
    let reserve = FREE_SPACE_RESERVE.min(free / 20);
    let avail = (free + f.size).saturating_sub(reserve);
    if region > avail {
        let clamped = avail / bs * bs;
        if clamped == 0 {
            return Err(Error::NoSpace {
                path: f.path.clone(),
                free,
            });
        }
        obs.notice(&format!(
            "size clamped from {} to {}: only {} free on {}",
            bytes_decimal(region),
            bytes_decimal(clamped),
            bytes_decimal(free),
            dir.display()
        ));
        return Ok(clamped);
    }
    Ok(region)
}

/// Registered buffers are locked memory: without CAP_IPC_LOCK they must fit
/// RLIMIT_MEMLOCK. Lower the queue depth to fit (and say so), or refuse with
/// the exact remedy. Buffers never take more than half the RAM.
pub(crate) fn fit_buffers(
    cfg: &DiskBenchConfig,
    bs: u32,
    target_count: usize,
    ram_bytes: u64,
    env: &mut Environment,
    obs: &mut dyn Observer,
) -> Result<u32, Error> {
    let buf = direct::round_up(u64::from(bs), crate::datapath::arena::BUF_ALIGN as u64);
    let per_depth = buf * target_count as u64;
    let need = per_depth * u64::from(cfg.qd);
    if ram_bytes > 0 && need > ram_bytes / 2 {
        return Err(Error::TooMuchMemory {
            bytes: need,
            ram_bytes,
        });
    }
    if sys::has_cap_ipc_lock() {
        return Ok(cfg.qd);
    }
    let Some(limit) = sys::memlock_limit() else {
        return Ok(cfg.qd);
    };
    let usable = limit.saturating_sub(RING_MEMLOCK_SLACK * target_count as u64);
    if need <= usable {
        return Ok(cfg.qd);
    }
    let qd = (usable / per_depth).min(u64::from(cfg.qd)) as u32;
    let remedy = format!(
        "{}, or lower --qd / --bs",
        crate::datapath::ring::memlock_remedy_text(need + RING_MEMLOCK_SLACK * target_count as u64)
    );
    if qd == 0 {
        return Err(Error::Register {
            what: "I/O buffers",
            source: std::io::Error::from_raw_os_error(libc::ENOMEM),
            remedy,
        });
    }
    let msg = format!(
        "queue depth lowered from {} to {qd}: RLIMIT_MEMLOCK is {} KiB; {remedy}",
        cfg.qd,
        limit / 1024
    );
    obs.notice(&msg);
    env.fallbacks.push(msg);
    Ok(qd)
}

/// Before a mode that reads (or writes at random), make sure every block of
/// the region holds written data, so no read hits a hole. Files we created
/// or may overwrite are laid out; a user's file we may not write is refused.
pub(crate) fn ensure_laid_out(
    cfg: &DiskBenchConfig,
    qd: u32,
    index: usize,
    t: &mut Prepared,
    interrupt: &AtomicBool,
    obs: &mut dyn Observer,
) -> Result<(), Error> {
    if t.file.kind != TargetKind::File {
        return Ok(());
    }
    if let Ok(m) = t.file.file.metadata() {
        t.file.size = m.len();
    }
    let hole = t.file.first_hole();
    if hole >= t.region && (t.stamped || !cfg.verify) {
        return Ok(());
    }
    if !t.may_write {
        return Err(Error::ShortTarget {
            path: t.file.path.clone(),
            data_bytes: hole,
            region_bytes: t.region,
        });
    }
    // With --verify every block must carry this target's seed: unless the
    // file already does, lay out all of it; otherwise only what is missing.
    let bs = u64::from(cfg.bs);
    let start = if cfg.verify && !t.stamped {
        0
    } else {
        hole.min(t.region) / bs * bs
    };
    obs.notice(&format!(
        "laying out {} of {} before reading it",
        bytes_decimal(t.region - start),
        t.file.path.display()
    ));
    let spec = PhaseSpec {
        pattern: Pattern::SeqWrite,
        bs: cfg.bs,
        qd,
        region_start: start,
        region_end: t.region,
        eof: u64::MAX,
        limit: Limit::Bytes(t.region - start),
        ramp: Duration::ZERO,
        zeros: cfg.zeros,
        verify: cfg.verify.then_some(VerifySpec {
            target: index as u32,
            seed: Some(t.seed),
        }),
        seed: t.seed,
        fsync: true,
        rate: None,
    };
    let run = run_phase(
        std::slice::from_mut(t),
        &[spec],
        cfg.interval,
        interrupt,
        None,
        &mut |_, _| {},
    )?;
    if run.interrupted {
        return Err(Error::Interrupted);
    }
    t.laid_out += t.region - start;
    t.file.size = t.file.size.max(t.region);
    t.stamped = t.stamped || cfg.verify;
    Ok(())
}

/// Remove temporary files (unless --keep) and describe each target.
pub(crate) fn finish_targets(
    cfg: &DiskBenchConfig,
    targets: &[Prepared],
    obs: &mut dyn Observer,
) -> Vec<TargetEnv> {
    let mut out = Vec::with_capacity(targets.len());
    for t in targets {
        let kept = !t.temporary || cfg.keep;
        if t.temporary {
            if cfg.keep {
                obs.notice(&format!("kept {}", t.file.path.display()));
            } else {
                let _ = std::fs::remove_file(&t.file.path);
            }
        }
        out.push(TargetEnv {
            path: t.file.path.display().to_string(),
            kind: match t.file.kind {
                TargetKind::File => "file",
                TargetKind::BlockDevice => "block device",
            },
            filesystem: t.file.fs_type,
            device: t.file.device.clone(),
            direct_io: t.file.direct,
            dio_mem_align_bytes: t.file.align.mem,
            dio_offset_align_bytes: t.file.align.offset,
            dio_align_from: t.file.align.from,
            size_bytes: t.region,
            created: t.created,
            kept,
            laid_out_bytes: t.laid_out,
            core: t.core,
            seed: t.seed,
        });
    }
    out
}

/// Paths of the targets, for messages and results.
pub(crate) fn names(targets: &[Prepared]) -> Vec<String> {
    targets
        .iter()
        .map(|t| t.file.path.display().to_string())
        .collect()
}
