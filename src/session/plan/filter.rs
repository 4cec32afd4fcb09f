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
    /// The pattern as given, to be handed on (a `--delete` push gives its
    /// rules to the receiver).
    given: String,
    tokens: Vec<Tok>,
    anchored: bool,
    /// Matched against the whole path (a `/` inside), else the last name.
    whole: bool,
    dirs_only: bool,
}

/// One step of a pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Lit(char),
    /// `?`: one character, not `/`.
    One,
    /// `*`: any run within a name.
    Star,
    /// `**`: any run, across names.
    Stars,
    /// `[...]`: one character (not `/`) in the class, or out of it.
    Class {
        negated: bool,
        members: Vec<char>,
    },
}

/// A pattern with nothing to match once its anchoring slashes are off.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?}: an empty pattern matches nothing")]
pub struct EmptyPattern(pub String);

/// The rules of one session, in the order given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    rules: Vec<Rule>,
}

impl Filter {
    /// Add a rule; an empty pattern is refused.
    pub fn push(&mut self, verdict: Verdict, pattern: &str) -> Result<(), EmptyPattern> {
        let anchored = pattern.starts_with('/');
        let dirs_only = pattern.ends_with('/') && pattern.len() > 1;
        let body = pattern.trim_start_matches('/').trim_end_matches('/');
        if body.is_empty() {
            return Err(EmptyPattern(pattern.to_owned()));
        }
        self.rules.push(Rule {
            verdict,
            given: pattern.to_owned(),
            tokens: tokens(&body.chars().collect::<Vec<_>>()),
            anchored,
            whole: anchored || body.contains('/') || body.contains("**"),
            dirs_only,
        });
        Ok(())
    }

    /// Add the patterns of an `--exclude-from` file: one per line, blank
    /// lines and lines starting with `#` or `;` skipped; a line starting
    /// with `+ ` includes, `- ` excludes.
    pub fn push_file(&mut self, text: &str) -> Result<(), EmptyPattern> {
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

    /// The rules as given, in order.
    pub fn rules(&self) -> impl Iterator<Item = (Verdict, &str)> {
        self.rules.iter().map(|r| (r.verdict, r.given.as_str()))
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
    /// Whether the pattern matches the whole path (anchored), a suffix of
    /// it that starts a name (with a `/` inside), or its last name. One
    /// pass over the path, whatever the pattern: the receiver matches
    /// rules a peer gave it.
    fn matches(&self, path: &[char]) -> bool {
        let last = path.iter().rposition(|&c| c == '/').map_or(0, |i| i + 1);
        let starts_at = |j: usize| match (self.anchored, self.whole) {
            (true, _) => j == 0,
            (false, true) => j == 0 || path[j - 1] == '/',
            (false, false) => j == last,
        };
        let n = self.tokens.len();
        let (mut live, mut next) = (vec![false; n + 1], vec![false; n + 1]);
        for j in 0..=path.len() {
            live[0] |= starts_at(j);
            self.close(&mut live);
            let Some(&c) = path.get(j) else { break };
            self.step(&live, c, &mut next);
            std::mem::swap(&mut live, &mut next);
        }
        live[n]
    }

    /// Let every live `*` and `**` match nothing.
    fn close(&self, live: &mut [bool]) {
        for (i, t) in self.tokens.iter().enumerate() {
            if live[i] && matches!(t, Tok::Star | Tok::Stars) {
                live[i + 1] = true;
            }
        }
    }

    /// The states live after character `c`, into `next`.
    fn step(&self, live: &[bool], c: char, next: &mut [bool]) {
        next.fill(false);
        for (i, t) in self.tokens.iter().enumerate().filter(|(i, _)| live[*i]) {
            match t {
                Tok::Star if c != '/' => next[i] = true,
                Tok::Stars => next[i] = true,
                Tok::Lit(l) if *l == c => next[i + 1] = true,
                Tok::One if c != '/' => next[i + 1] = true,
                Tok::Class { negated, members } if c != '/' => {
                    next[i + 1] |= in_class(members, c) != *negated;
                }
                _ => {}
            }
        }
    }
}

/// A pattern's steps: `\x` is a plain `x`, a `[` never closed a plain `[`.
fn tokens(pat: &[char]) -> Vec<Tok> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < pat.len() {
        let (tok, used) = match (pat[i], pat.get(i + 1)) {
            ('*', Some('*')) => (Tok::Stars, 2),
            ('*', _) => (Tok::Star, 1),
            ('?', _) => (Tok::One, 1),
            ('\\', Some(&c)) => (Tok::Lit(c), 2),
            ('[', _) => class(&pat[i + 1..]).map_or((Tok::Lit('['), 1), |(t, n)| (t, n + 1)),
            (c, _) => (Tok::Lit(c), 1),
        };
        out.push(tok);
        i += used;
    }
    out
}

/// A `[...]` class (`pat` starts after the `[`) and how many pattern
/// characters it spans (its `]` included); None when it is not closed.
/// A `]` first in the class is a member.
fn class(pat: &[char]) -> Option<(Tok, usize)> {
    let negated = matches!(pat.first(), Some('!' | '^'));
    let start = usize::from(negated);
    let close = pat
        .get(start + 1..)?
        .iter()
        .position(|&x| x == ']')
        .map(|p| start + 1 + p)?;
    let members = pat[start..close].to_vec();
    Some((Tok::Class { negated, members }, close + 1))
}

fn in_class(members: &[char], c: char) -> bool {
    members
        .windows(3)
        .any(|w| w[1] == '-' && w[0] <= c && c <= w[2])
        || members.contains(&c)
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

    #[test]
    fn a_pattern_built_to_backtrack_is_matched_in_one_pass() {
        // Exponential for a backtracking matcher: 2^20 ways to split.
        let pat = format!("/{}b", "*a".repeat(20));
        let f = filter(&[
            (Verdict::Exclude, &pat),
            (Verdict::Exclude, "**a**a**a**a**c"),
        ]);
        let long = "a".repeat(4000);
        let t = std::time::Instant::now();
        assert!(f.admits(&long, false));
        assert!(!f.admits(&format!("{long}b"), false));
        assert!(
            t.elapsed() < std::time::Duration::from_secs(2),
            "{:?}",
            t.elapsed()
        );
        let rules: Vec<_> = f.rules().collect();
        assert_eq!(rules[1], (Verdict::Exclude, "**a**a**a**a**c"));
    }

    #[test]
    fn classes_escapes_and_unclosed_brackets_read_as_before() {
        let f = filter(&[
            (Verdict::Exclude, "[]x]1"),
            (Verdict::Exclude, "a\\*"),
            (Verdict::Exclude, "q[r"),
        ]);
        assert!(!f.admits("d/]1", false) && !f.admits("d/x1", false));
        assert!(f.admits("d/y1", false));
        assert!(!f.admits("d/a*", false) && f.admits("d/ab", false));
        assert!(!f.admits("d/q[r", false));
    }
}
