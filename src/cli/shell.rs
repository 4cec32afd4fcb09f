//! `urmove completions SHELL` and `urmove man`: generated from the clap
//! definitions, so they never drift from `--help`.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use clap::CommandFactory;

use super::args::Cli;
use super::Failure;

/// Write `bytes` to stdout; a reader that went away early is not an error.
fn print(bytes: &[u8]) -> Result<u8, Failure> {
    let mut so = std::io::stdout().lock();
    match so.write_all(bytes).and_then(|()| so.flush()) {
        Ok(()) => Ok(0),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(0),
        Err(e) => Err(Failure::Run(
            anyhow::Error::new(e).context("writing to stdout"),
        )),
    }
}

/// The completion script for `shell` on stdout.
pub fn completions(shell: clap_complete::Shell) -> Result<u8, Failure> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "urmove", &mut script);
    print(&script)
}

/// urmove.1 on stdout, or every page (urmove.1, urmove-send.1, ...) in `dir`.
pub fn man(dir: Option<&Path>) -> Result<u8, Failure> {
    // As clap_mangen does: no `help` subcommand pages, then build once so
    // every subcommand knows its full name (urmove-send).
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    let Some(dir) = dir else {
        let mut page = Vec::new();
        clap_mangen::Man::new(cmd)
            .render(&mut page)
            .context("rendering the man page")
            .map_err(Failure::Run)?;
        return print(&page);
    };
    std::fs::create_dir_all(dir)
        .with_context(|| format!("--dir {}", dir.display()))
        .map_err(Failure::Usage)?;
    let mut written = Vec::new();
    write_pages(&cmd, dir, &mut written)
        .with_context(|| format!("writing man pages into {}", dir.display()))
        .map_err(Failure::Run)?;
    let mut list = String::new();
    for p in written {
        list += &format!("{}\n", p.display());
    }
    print(list.as_bytes())
}

/// The page of `cmd`, then those of its visible subcommands, depth first.
fn write_pages(
    cmd: &clap::Command,
    dir: &Path,
    written: &mut Vec<std::path::PathBuf>,
) -> std::io::Result<()> {
    written.push(clap_mangen::Man::new(cmd.clone()).generate_to(dir)?);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, dir, written)?;
    }
    Ok(())
}
