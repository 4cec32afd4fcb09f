//! Live progress: which kind a run shows (`--progress`, `--quiet`) and the
//! bar itself (indicatif), drawn on stderr so stdout keeps only lines a
//! script may read (interval lines, summaries).

use std::io::IsTerminal;

use console::Term;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle, TermLike};

use super::args::{ProgressArg, ProgressArgs};
use super::render::Format;

/// What a run shows while it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    Bar,
    Lines,
    Off,
}

/// How a human run reports along the way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Show {
    pub progress: Progress,
    /// Only the summary (and warnings and errors): no notes either.
    pub quiet: bool,
    /// Details too (`-v`).
    pub verbose: bool,
}

impl Show {
    /// Interval lines and notes: what machines and tests have always had.
    pub const LINES: Show = Show {
        progress: Progress::Lines,
        quiet: false,
        verbose: false,
    };

    /// Resolve the flags against the format and the terminals. JSON formats
    /// ignore both flags: they print what they always print and never a bar.
    pub fn resolve(a: ProgressArgs, format: Format) -> Show {
        if format != Format::Human {
            return Show {
                verbose: a.verbose,
                ..Show::LINES
            };
        }
        if a.quiet {
            return Show {
                progress: Progress::Off,
                quiet: true,
                verbose: false,
            };
        }
        let progress = match a.progress {
            ProgressArg::Auto => Show::auto().progress,
            ProgressArg::Bar => Progress::Bar,
            ProgressArg::Lines => Progress::Lines,
            ProgressArg::Off => Progress::Off,
        };
        Show {
            progress,
            quiet: false,
            verbose: a.verbose,
        }
    }

    /// A bar where a person watches (stdout and stderr are terminals),
    /// interval lines otherwise.
    pub fn auto() -> Show {
        let tty = std::io::stdout().is_terminal() && std::io::stderr().is_terminal();
        Show {
            progress: if tty { Progress::Bar } else { Progress::Lines },
            quiet: false,
            verbose: false,
        }
    }
}

/// Steps of a full bar: the position is a fraction of the run.
const BAR_STEPS: u64 = 1000;

/// Columns of a bar forced onto a stderr that is no terminal (a log keeps
/// the whole text rather than the 80 columns a terminal is assumed to have).
const WIDTH_NOT_A_TERMINAL: u16 = 160;

/// stderr as indicatif's terminal, drawn on whether or not it is one.
#[derive(Debug)]
struct Stderr(Term);

impl TermLike for Stderr {
    fn width(&self) -> u16 {
        self.0
            .size_checked()
            .map_or(WIDTH_NOT_A_TERMINAL, |(_, w)| w)
    }
    fn height(&self) -> u16 {
        self.0.size_checked().map_or(24, |(h, _)| h)
    }
    fn move_cursor_up(&self, n: usize) -> std::io::Result<()> {
        self.0.move_cursor_up(n)
    }
    fn move_cursor_down(&self, n: usize) -> std::io::Result<()> {
        self.0.move_cursor_down(n)
    }
    fn move_cursor_right(&self, n: usize) -> std::io::Result<()> {
        self.0.move_cursor_right(n)
    }
    fn move_cursor_left(&self, n: usize) -> std::io::Result<()> {
        self.0.move_cursor_left(n)
    }
    fn write_line(&self, s: &str) -> std::io::Result<()> {
        self.0.write_line(s)
    }
    fn write_str(&self, s: &str) -> std::io::Result<()> {
        self.0.write_str(s)
    }
    fn clear_line(&self) -> std::io::Result<()> {
        self.0.clear_line()
    }
    fn flush(&self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// One live bar on stderr.
#[derive(Debug)]
pub struct Bar {
    bar: ProgressBar,
    prefix: String,
}

impl Bar {
    /// A bar on stderr. It is drawn whether or not stderr is a terminal:
    /// `auto` checked for one, and `--progress bar` asks for it regardless
    /// (indicatif's own stderr target would hide it from a pipe).
    pub fn new(prefix: &str) -> Bar {
        let target = ProgressDrawTarget::term_like(Box::new(Stderr(Term::stderr())));
        // The text is cut, not wrapped, where the terminal is narrow.
        let style = ProgressStyle::with_template("{prefix} [{bar:20}] {wide_msg}")
            .expect("the bar's template is valid")
            .progress_chars("=> ");
        let bar = ProgressBar::with_draw_target(Some(BAR_STEPS), target)
            .with_style(style)
            .with_prefix(prefix.to_string());
        Bar {
            bar,
            prefix: prefix.to_string(),
        }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Show `fraction` (0 to 1) of the run done and `text` beside the bar.
    pub fn show(&self, fraction: f64, text: String) {
        let pos = (fraction.clamp(0.0, 1.0) * BAR_STEPS as f64).round() as u64;
        self.bar.set_position(pos);
        self.bar.set_message(text);
    }

    /// Print something (on stderr) without tearing the bar.
    pub fn suspend(&self, f: impl FnOnce()) {
        self.bar.suspend(f)
    }

    /// Leave the last frame on the screen as it is (an interrupted run's
    /// bar stays part full); what follows starts below it.
    pub fn finish(&self) {
        self.bar.abandon()
    }
}

/// Seconds left, rounded up, as the interval lines say them.
pub fn eta(seconds: f64) -> String {
    format!("ETA {}s", seconds.max(0.0).ceil() as u64)
}
