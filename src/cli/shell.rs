//! `urmove completions SHELL` and `urmove man`: generated from the clap
//! definitions, so they never drift from `--help`. urmove(1) and
//! urmove-recv(1) add the config file's keys (from [`super::config::KEYS`]
//! and the options' help) and the files an installed daemon uses.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use clap::CommandFactory;
use clap_mangen::roff::{bold, roman, Roff};

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
        render_page(&cmd, &cmd, &mut page)
            .context("rendering the man page")
            .map_err(Failure::Run)?;
        return print(&page);
    };
    std::fs::create_dir_all(dir)
        .with_context(|| format!("--dir {}", dir.display()))
        .map_err(Failure::Usage)?;
    let mut written = Vec::new();
    write_pages(&cmd, &cmd, dir, &mut written)
        .with_context(|| format!("writing man pages into {}", dir.display()))
        .map_err(Failure::Run)?;
    let mut list = String::new();
    for p in written {
        list += &format!("{}\n", p.display());
    }
    print(list.as_bytes())
}

/// The page of `cmd`, then those of its visible subcommands, depth first
/// (`top` is urmove's own command, where `recv` is found).
fn write_pages(
    top: &clap::Command,
    cmd: &clap::Command,
    dir: &Path,
    written: &mut Vec<std::path::PathBuf>,
) -> std::io::Result<()> {
    let man = clap_mangen::Man::new(cmd.clone());
    let path = dir.join(man.get_filename());
    let mut page = Vec::new();
    render_page(top, cmd, &mut page)?;
    std::fs::write(&path, page)?;
    written.push(path);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(top, sub, dir, written)?;
    }
    Ok(())
}

/// The pages that also get CONFIGURATION FILE and FILES.
const DAEMON_PAGES: [&str; 2] = ["urmove", "urmove-recv"];

/// The page of `cmd` as clap_mangen renders it, with EXIT STATUS (and, on
/// [`DAEMON_PAGES`], CONFIGURATION FILE and FILES) before VERSION, as
/// clap_mangen orders its own.
fn render_page(top: &clap::Command, cmd: &clap::Command, w: &mut dyn Write) -> std::io::Result<()> {
    let man = clap_mangen::Man::new(cmd.clone());
    let name = cmd.get_display_name().unwrap_or(cmd.get_name());
    man.render_title(w)?;
    man.render_name_section(w)?;
    man.render_synopsis_section(w)?;
    man.render_description_section(w)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(w)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(w)?;
    }
    if cmd.get_after_long_help().is_some() || cmd.get_after_help().is_some() {
        man.render_extra_section(w)?;
    }
    if DAEMON_PAGES.contains(&name) {
        let recv = top
            .find_subcommand("recv")
            .expect("urmove has a recv command");
        config_section(recv).to_writer(w)?;
        files_section().to_writer(w)?;
    }
    exit_section().to_writer(w)?;
    if cmd.get_version().or(cmd.get_long_version()).is_some() {
        man.render_version_section(w)?;
    }
    if cmd.get_author().is_some() {
        man.render_authors_section(w)?;
    }
    Ok(())
}

/// CONFIGURATION FILE: each key with its default as written in the file
/// and the help of the `recv` option it sets.
fn config_section(recv: &clap::Command) -> Roff {
    let mut r = Roff::new();
    r.control("SH", ["CONFIGURATION FILE"]);
    r.text([roman(
        "urmove recv --config FILE reads a TOML file whose keys are the options of \
         urmove recv with underscores; an option on the command line wins over the file, \
         the file over the defaults. Sizes take units (4M, 2G), durations too (500ms, 30s, \
         7d). A bad key or value is refused at start with its line. Each key is shown with \
         its default as it would be written; one shown bare has none to write (it is \
         required, off, or worked out as its help says). The installed \
         /etc/urmove/urmove.toml sets some otherwise.",
    )]);
    for (key, default) in super::config::KEYS {
        let help = recv
            .get_arguments()
            .find(|a| a.get_id() == *key)
            .and_then(|a| a.get_long_help().or(a.get_help()))
            .map(|h| h.to_string())
            .unwrap_or_default();
        r.control("TP", []);
        match default {
            Some(v) => r.text([bold(*key), roman(format!(" = {v}"))]),
            None => r.text([bold(*key)]),
        };
        r.text([roman(help)]);
    }
    r
}

/// The files an installed daemon uses: (path, what it is).
const FILES: &[(&str, &str)] = &[
    (
        "/etc/urmove/urmove.toml",
        "The daemon's settings (see CONFIGURATION FILE), read by urmove recv --config; the \
         unit passes this path. A conffile of the Debian package.",
    ),
    (
        "/etc/urmove/key",
        "The pre-shared key the shipped config names (key_file): written by urmove keygen \
         FILE, mode 0600, readable by the urmove user. Senders hold a copy.",
    ),
    (
        "/var/lib/urmove",
        "The daemon's state directory (state_dir; StateDirectory= in the unit): the secret \
         that authenticates its resume journals and stamps. Owned by urmove, mode 0700.",
    ),
    (
        "/srv/urmove",
        "Where received files land (root in the shipped config; ReadWritePaths= in the unit).",
    ),
    (
        "/usr/lib/systemd/system/urmove-recv.service",
        "The hardened systemd unit (scripts/install.sh puts it in /etc/systemd/system).",
    ),
    (
        "/usr/lib/sysctl.d/90-urmove.conf",
        "The host profile for fast transfers, loaded at the next boot or now with sysctl -p \
         FILE (scripts/install.sh puts it in /etc/sysctl.d).",
    ),
];

/// EXIT STATUS, from [`super::EXIT_CODES`].
fn exit_section() -> Roff {
    let mut r = Roff::new();
    r.control("SH", ["EXIT STATUS"]);
    for (code, what) in super::EXIT_CODES {
        r.control("TP", []);
        r.text([bold(*code)]);
        r.text([roman(*what)]);
    }
    r
}

/// FILES, from [`FILES`].
fn files_section() -> Roff {
    let mut r = Roff::new();
    r.control("SH", ["FILES"]);
    for (path, what) in FILES {
        r.control("TP", []);
        r.text([bold(*path)]);
        r.text([roman(*what)]);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every page lists every exit code, and `--help` names each.
    #[test]
    fn every_page_and_the_help_list_the_exit_codes() {
        let help = Cli::command().get_long_about().unwrap().to_string();
        for (code, _) in crate::cli::EXIT_CODES {
            let code = if *code == "other" { "any other" } else { code };
            assert!(help.contains(code), "--help lacks exit code {code}");
        }
        for name in ["urmove", "send", "pull", "report", "recv", "bench"] {
            let text = page(name);
            let exit = section(&text, "\"EXIT STATUS\"");
            for (code, _) in crate::cli::EXIT_CODES {
                assert!(
                    exit.contains(&format!("\\fB{code}\\fR")),
                    "{name}: {code}: {exit}"
                );
            }
        }
    }

    fn page(name: &str) -> String {
        let mut top = Cli::command().disable_help_subcommand(true);
        top.build();
        let cmd = match name {
            "urmove" => top.clone(),
            _ => top.find_subcommand(name).unwrap().clone(),
        };
        let mut out = Vec::new();
        render_page(&top, &cmd, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    /// The text of section `title` of `page`, up to the next section.
    fn section<'a>(page: &'a str, title: &str) -> &'a str {
        let head = format!(".SH {title}\n");
        let start = page.find(&head).unwrap_or_else(|| panic!("no {title}")) + head.len();
        let len = page[start..].find("\n.SH ").unwrap_or(page.len() - start);
        &page[start..start + len]
    }

    #[test]
    fn the_daemon_pages_list_every_config_key_and_the_files() {
        for name in ["urmove", "recv"] {
            let page = page(name);
            let config = section(&page, "\"CONFIGURATION FILE\"");
            for (key, default) in crate::cli::config::KEYS {
                let tag = format!("\\fB{key}\\fR");
                let at = config
                    .find(&tag)
                    .unwrap_or_else(|| panic!("{name}: no {key}"));
                let entry =
                    &config[at..config[at..].find("\n.TP").map_or(config.len(), |n| at + n)];
                assert!(
                    entry.lines().count() >= 2,
                    "{name}: {key} has no help: {entry}"
                );
                if let Some(v) = default {
                    assert!(entry.contains(&format!(" = {v}")), "{name}: {key}: {entry}");
                }
            }
            let files = section(&page, "FILES");
            for (path, _) in FILES {
                let roff = path.replace('-', "\\-");
                assert!(files.contains(&roff), "{name}: FILES lacks {path}");
            }
            if let Some(version) = page.find(".SH VERSION") {
                assert!(page.find(".SH FILES").unwrap() < version, "{name}");
            }
        }
        assert!(
            !page("send").contains(".SH FILES"),
            "only the daemon's pages"
        );
    }
}
