//! `--exclude`, `--include` and `--exclude-from`, as rsync reads them: the
//! rules are tried in the order given and the first that matches decides;
//! an entry no rule matches is sent. A pattern is matched against the
//! entry's path in the manifest (`run42/raw/a.dat` for `send /data/run42`):
//! - without a `/` (a trailing one aside) it matches the last component,
//!   at any depth (`*.tmp`, `core`);
//! - with a leading `/` it is anchored at the top (`/run42/scratch`);
//! - with a `/` inside it matches the end of the path at a component
//!   boundary (`raw/*.dat`);
//! - a trailing `/` matches directories only;
//! - `*` matches within a component, `**` across components, `?` one
//!   character, `[...]` a class (`[!...]` or `[^...]` its complement).
//!
//! An excluded directory is not walked: nothing beneath it is sent.

/// Include or exclude.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Include,
    Exclude,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    verdict: Verdict,
    pattern: Vec<char>,
    anchored: bool,
    /// Matched against the whole path (a `/` inside), else the last name.
    whole: bool,
    dirs_only: bool,
}

/// The rules of one session, in the order given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    rules: Vec<Rule>,
}

impl Filter {
    /// Add a rule; an empty pattern is refused.
    pub fn push(&mut self, verdict: Verdict, pattern: &str) -> Result<(), String> {
        let anchored = pattern.starts_with('/');
        let dirs_only = pattern.ends_with('/') && pattern.len() > 1;
        let body = pattern.trim_start_matches('/').trim_end_matches('/');
        if body.is_empty() {
            return Err(format!("{pattern:?}: an empty pattern matches nothing"));
        }
        self.rules.push(Rule {
            verdict,
            pattern: body.chars().collect(),
            anchored,
            whole: anchored || body.contains('/') || body.contains("**"),
            dirs_only,
        });
        Ok(())
    }

    /// Add the patterns of an `--exclude-from` file: one per line, blank
    /// lines and lines starting with `#` or `;` skipped; a line starting
    /// with `+ ` includes, `- ` excludes.
    pub fn push_file(&mut self, text: &str) -> Result<(), String> {
        for line in text.lines() {
            let line = line.trim_end_matches('\r');
            if line.trim().is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            match (line.strip_prefix("+ "), line.strip_prefix("- ")) {
                (Some(p), _) => self.push(Verdict::Include, p)?,
                (_, Some(p)) => self.push(Verdict::Exclude, p)?,
                _ => self.push(Verdict::Exclude, line)?,
            }
        }
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether the entry at manifest path `path` is sent.
    pub fn admits(&self, path: &str, is_dir: bool) -> bool {
        let path: Vec<char> = path.chars().collect();
        for r in &self.rules {
            if r.dirs_only && !is_dir {
                continue;
            }
            if r.matches(&path) {
                return r.verdict == Verdict::Include;
            }
        }
        true
    }
}

impl Rule {
    fn matches(&self, path: &[char]) -> bool {
        if self.anchored {
            return glob(&self.pattern, path);
        }
        // Every suffix that starts a component: the whole path, then after
        // each `/`. A pattern without `/` can only match the last one.
        let starts = std::iter::once(0).chain(
            path.iter()
                .enumerate()
                .filter(|(_, &c)| c == '/')
                .map(|(i, _)| i + 1),
        );
        let mut starts: Vec<usize> = starts.collect();
        if !self.whole {
            starts = starts.split_off(starts.len() - 1);
        }
        starts.into_iter().any(|s| glob(&self.pattern, &path[s..]))
    }
}

/// Whether `text` matches glob `pat` whole.
fn glob(pat: &[char], text: &[char]) -> bool {
    match pat.split_first() {
        None => text.is_empty(),
        Some(('*', rest)) if rest.first() == Some(&'*') => {
            let rest = &rest[1..];
            (0..=text.len()).any(|i| glob(rest, &text[i..]))
        }
        Some(('*', rest)) => {
            let span = text.iter().position(|&c| c == '/').unwrap_or(text.len());
            (0..=span).any(|i| glob(rest, &text[i..]))
        }
        Some(('?', rest)) => text.first().is_some_and(|&c| c != '/') && glob(rest, &text[1..]),
        Some(('[', rest)) => match (class(rest, text.first().copied()), text.first()) {
            (Some((true, after)), Some(_)) => glob(&rest[after..], &text[1..]),
            (Some(_), _) => false,
            // No closing `]`: a plain `[`.
            (None, Some('[')) => glob(rest, &text[1..]),
            (None, _) => false,
        },
        Some(('\\', rest)) if !rest.is_empty() => {
            text.first() == Some(&rest[0]) && glob(&rest[1..], &text[1..])
        }
        Some((&c, rest)) => text.first() == Some(&c) && glob(rest, &text[1..]),
    }
}

/// A `[...]` class (`pat` starts after the `[`): whether `c` is in it, and
/// how many pattern characters it spans (its `]` included); None when it
/// is not closed.
fn class(pat: &[char], c: Option<char>) -> Option<(bool, usize)> {
    let negated = matches!(pat.first(), Some('!' | '^'));
    let start = usize::from(negated);
    // A `]` first in the class is a member.
    let close = pat[start..]
        .iter()
        .skip(1)
        .position(|&x| x == ']')
        .map(|p| start + 1 + p)?;
    let members = &pat[start..close];
    let hit = c.is_some_and(|c| {
        c != '/'
            && (members
                .windows(3)
                .any(|w| w[1] == '-' && w[0] <= c && c <= w[2])
                || members.contains(&c))
    });
    Some((hit != negated, close + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(rules: &[(Verdict, &str)]) -> Filter {
        let mut f = Filter::default();
        for (v, p) in rules {
            f.push(*v, p).unwrap();
        }
        f
    }

    #[test]
    fn a_name_pattern_matches_at_any_depth_and_an_anchored_one_at_the_top() {
        let f = filter(&[
            (Verdict::Exclude, "*.tmp"),
            (Verdict::Exclude, "/run/scratch"),
        ]);
        assert!(!f.admits("run/a.tmp", false));
        assert!(!f.admits("run/x/y/b.tmp", false));
        assert!(f.admits("run/a.tmp.keep", false));
        assert!(!f.admits("run/scratch", true));
        assert!(f.admits("run/x/scratch", true));
        assert!(f.admits("run/a.dat", false));
    }

    #[test]
    fn first_match_wins_and_a_trailing_slash_means_directories() {
        let f = filter(&[(Verdict::Include, "keep.log"), (Verdict::Exclude, "*.log")]);
        assert!(f.admits("r/keep.log", false));
        assert!(!f.admits("r/other.log", false));
        let d = filter(&[(Verdict::Exclude, "cache/")]);
        assert!(!d.admits("r/cache", true));
        assert!(d.admits("r/cache", false));
    }

    #[test]
    fn inner_slashes_match_the_end_at_a_boundary_and_double_stars_cross_names() {
        let f = filter(&[(Verdict::Exclude, "raw/*.dat")]);
        assert!(!f.admits("run/raw/a.dat", false));
        assert!(f.admits("run/raw/sub/a.dat", false));
        assert!(f.admits("run/xraw/a.dat", false));
        let g = filter(&[(Verdict::Exclude, "/run/**/core")]);
        assert!(!g.admits("run/a/b/core", false));
        assert!(g.admits("other/a/core", false));
        let h = filter(&[(Verdict::Exclude, "file[0-9]?.[!c]*")]);
        assert!(!h.admits("d/file12.dat", false));
        assert!(h.admits("d/file12.cat", false));
        assert!(h.admits("d/fileX2.dat", false));
    }

    #[test]
    fn an_exclude_file_takes_comments_prefixes_and_refuses_empty_patterns() {
        let mut f = Filter::default();
        f.push_file("# comment\n\n; also\n+ *.keep\n- *.tmp\ncore\r\n")
            .unwrap();
        assert!(f.admits("a/x.keep", false));
        assert!(!f.admits("a/x.tmp", false));
        assert!(!f.admits("a/core", false));
        assert!(Filter::default().push(Verdict::Exclude, "/").is_err());
    }
}
