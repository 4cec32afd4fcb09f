//! Where `--plot` writes ([`PlotFile`]), checked before a run starts,
//! and the host and date its titles name.

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::cli::Failure;

/// Where `--plot` writes, checked before the run starts.
#[derive(Debug, Clone)]
pub struct PlotFile {
    path: PathBuf,
}

impl PlotFile {
    /// A usage error unless `path` ends in `.svg` and can be written:
    /// an existing regular file we may write, or a new name in an existing
    /// directory we may create files in. Nothing is left behind.
    pub(crate) fn check(path: &Path) -> Result<PlotFile, Failure> {
        let usage = |m: String| Failure::Usage(anyhow::anyhow!(m));
        let shown = path.display();
        if !path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("svg"))
        {
            return Err(usage(format!(
                "--plot {shown}: the picture is SVG, so FILE must end in .svg"
            )));
        }
        match std::fs::metadata(path) {
            Ok(m) if !m.is_file() => {
                return Err(usage(format!("--plot {shown}: not a regular file")));
            }
            Ok(_) => {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(path)
                    .map_err(|e| usage(format!("--plot {shown}: {e}")))?;
            }
            Err(_) => {
                let parent = match path.parent() {
                    Some(p) if !p.as_os_str().is_empty() => p,
                    _ => Path::new("."),
                };
                if !parent.is_dir() {
                    return Err(usage(format!(
                        "--plot {shown}: directory {} does not exist",
                        parent.display()
                    )));
                }
                let probe = parent.join(format!(".urmove-plot-{}.tmp", std::process::id()));
                std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&probe)
                    .map_err(|e| {
                        usage(format!(
                            "--plot {shown}: cannot create files in {}: {e}",
                            parent.display()
                        ))
                    })?;
                let _ = std::fs::remove_file(&probe);
            }
        }
        Ok(PlotFile {
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Write the document (whole, through a temporary name beside it).
    pub fn write(&self, svg: &str) -> anyhow::Result<()> {
        let mut tmp = self.path.as_os_str().to_owned();
        tmp.push(".urmove.tmp");
        let tmp = PathBuf::from(tmp);
        std::fs::write(&tmp, svg)
            .and_then(|()| std::fs::rename(&tmp, &self.path))
            .inspect_err(|_| {
                let _ = std::fs::remove_file(&tmp);
            })
            .with_context(|| format!("writing the plot {}", self.path.display()))
    }
}

/// "on HOST, YYYY-MM-DD HH:MM", for titles.
pub fn host_and_date() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let date = crate::datapath::sys::local_date_time();
    if host.is_empty() {
        date
    } else {
        format!("{host}, {date}")
    }
}
