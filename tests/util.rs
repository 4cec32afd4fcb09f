//! Helpers shared by the integration tests: the binary, temporary
//! directories, loop-mounted filesystems and kernel I/O counters.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

/// Skip a test with a printed reason when the machine cannot run it.
#[macro_export]
macro_rules! require {
    ($cond:expr, $why:expr) => {
        if !$cond {
            eprintln!("skipped: {}", $why);
            return;
        }
    };
}

pub fn urmove() -> Command {
    Command::new(env!("CARGO_BIN_EXE_urmove"))
}

/// Run urmove with `args`, returning its output.
pub fn run(args: &[&str]) -> Output {
    urmove().args(args).output().expect("running urmove")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Parse stdout as exactly one JSON document.
pub fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON document ({e}):\n{}\nstderr: {}",
            stdout(o),
            stderr(o)
        )
    })
}

pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(|u| u.split_whitespace().next() == Some("0"))
        })
        .unwrap_or(false)
}

pub fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Random bytes from a simple generator (deterministic per seed).
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 24) as u8
        })
        .collect()
}

static LOOP_SETUP: Mutex<()> = Mutex::new(());

fn sh(cmd: &mut Command) -> Result<String, String> {
    let o = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !o.status.success() {
        return Err(format!("{cmd:?}: {}", String::from_utf8_lossy(&o.stderr)));
    }
    Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
}

/// A loop device over a sparse image file, detached on drop.
pub struct LoopDev {
    pub dev: PathBuf,
    _dir: tempfile::TempDir,
}

impl LoopDev {
    /// `size_mib` MiB image; `sector` is the logical block size (512 or 4096).
    pub fn new(size_mib: u64, sector: u32) -> Result<Self, String> {
        let dir = tempfile::tempdir_in("/var/tmp").map_err(|e| e.to_string())?;
        let img = dir.path().join("disk.img");
        let f = std::fs::File::create(&img).map_err(|e| e.to_string())?;
        f.set_len(size_mib << 20).map_err(|e| e.to_string())?;
        drop(f);
        let _guard = LOOP_SETUP.lock().unwrap_or_else(|p| p.into_inner());
        let mut last = String::new();
        for _ in 0..5 {
            match sh(Command::new("losetup")
                .args(["--find", "--show", "--sector-size", &sector.to_string()])
                .arg(&img))
            {
                Ok(dev) => {
                    return Ok(LoopDev {
                        dev: PathBuf::from(dev),
                        _dir: dir,
                    })
                }
                Err(e) => last = e,
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        Err(last)
    }

    pub fn name(&self) -> String {
        self.dev.file_name().unwrap().to_string_lossy().into_owned()
    }

    /// (sectors read, sectors written) as the kernel counted them.
    pub fn sectors(&self) -> (u64, u64) {
        let stat =
            std::fs::read_to_string(format!("/sys/block/{}/stat", self.name())).expect("loop stat");
        let f: Vec<u64> = stat
            .split_whitespace()
            .map(|v| v.parse().unwrap())
            .collect();
        (f[2], f[6])
    }
}

impl Drop for LoopDev {
    fn drop(&mut self) {
        // Right after an umount the device can still be busy for a moment:
        // retry, so no loop device outlives its test.
        for _ in 0..20 {
            let ok = Command::new("losetup")
                .arg("-d")
                .arg(&self.dev)
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok || !self.attached() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

impl LoopDev {
    /// Whether the device still has a backing file.
    fn attached(&self) -> bool {
        Path::new("/sys/block")
            .join(self.name())
            .join("loop/backing_file")
            .exists()
    }
}

/// A filesystem on a loop device, mounted on a temporary directory.
pub struct LoopFs {
    pub mnt: tempfile::TempDir,
    pub dev: LoopDev,
}

impl LoopFs {
    /// `fs` is "xfs" or "ext4".
    pub fn new(fs: &str, size_mib: u64, sector: u32, ro: bool) -> Result<Self, String> {
        let dev = LoopDev::new(size_mib, sector)?;
        match fs {
            "xfs" => sh(Command::new("mkfs.xfs").args(["-q", "-f"]).arg(&dev.dev))?,
            _ => sh(Command::new("mkfs.ext4")
                .args(["-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0"])
                .arg(&dev.dev))?,
        };
        let mnt = tempfile::tempdir_in("/var/tmp").map_err(|e| e.to_string())?;
        let mut mount = Command::new("mount");
        if ro {
            mount.args(["-o", "ro"]);
        }
        sh(mount.arg(&dev.dev).arg(mnt.path()))?;
        Ok(LoopFs { mnt, dev })
    }

    pub fn path(&self) -> &Path {
        self.mnt.path()
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        for _ in 0..20 {
            let ok = Command::new("umount")
                .arg(self.mnt.path())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

/// Whether loop devices can be made here (root, losetup, mkfs).
pub fn can_loop(fs: &str) -> bool {
    is_root() && have("losetup") && have(if fs == "xfs" { "mkfs.xfs" } else { "mkfs.ext4" })
}
