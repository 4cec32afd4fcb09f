//! The WLCG profile's storage scopes (`storage.read:/p`, `storage.create:/p`,
//! `storage.modify:/p`, `storage.stage:/p`) and how they cover an operation
//! on a path (WLCG Common JWT Profiles 1.3, section 2.2.1).
//!
//! A scope's path is relative to the issuer's base path and matches by whole
//! components: `/a` covers `/a` and `/a/b`, never `/ab`. A path with a
//! trailing `/` names a directory: `/a/` covers what is beneath `/a` and the
//! directory `/a` itself, not a file `/a`. `storage.create` also allows the
//! creation of the leading directories its path needs. Every `storage.*`
//! scope must carry a path; a token with one that does not is rejected.

use std::fmt;

/// What a request does to its path, as the profile's scopes grant it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Read data: GET, PROPFIND depth 1 (a listing), COPY as the source.
    Read,
    /// Read metadata only: HEAD (size, checksum), PROPFIND depth 0. Any of
    /// read, create, modify or stage on the path allows it.
    Stat,
    /// Write a file that does not exist yet: PUT, COPY as the destination.
    Create,
    /// Make a directory: MKCOL. `storage.create:/a/b` allows `/a` too.
    CreateDir,
    /// Replace or remove what exists: PUT or COPY over a file, DELETE.
    Modify,
}

/// The authorization a storage scope names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Authz {
    Read,
    Create,
    Modify,
    Stage,
}

impl Authz {
    fn name(self) -> &'static str {
        match self {
            Authz::Read => "storage.read",
            Authz::Create => "storage.create",
            Authz::Modify => "storage.modify",
            Authz::Stage => "storage.stage",
        }
    }

    /// Whether this authorization allows `op` (modify is a strict superset
    /// of create; all four allow a stat).
    fn allows(self, op: Op) -> bool {
        match op {
            Op::Stat => true,
            Op::Read => self == Authz::Read,
            Op::Create | Op::CreateDir => matches!(self, Authz::Create | Authz::Modify),
            Op::Modify => self == Authz::Modify,
        }
    }
}

/// One storage scope of a token: its authorization and its path, split into
/// percent-decoded components.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    pub authz: Authz,
    components: Vec<String>,
    /// The path had a trailing `/`: it names a directory.
    dir: bool,
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Escaped: a decoded path may hold a newline, and this goes to logs.
        let path: String = self
            .components
            .join("/")
            .chars()
            .flat_map(char::escape_debug)
            .collect();
        write!(f, "{}:/{path}", self.authz.name())?;
        if self.dir {
            write!(f, "/")?;
        }
        Ok(())
    }
}

/// Why a token's `scope` claim is refused (the token is then invalid).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScopeError {
    #[error("scope {0} has no path (the WLCG profile requires one)")]
    NoPath(String),
    #[error("scope {0} has a path that is not absolute and normalized")]
    BadPath(String),
}

/// The storage scopes in a `scope` claim; other scopes (openid, wlcg,
/// compute.*, storage.poll with a path) are not ours and are skipped.
pub fn parse_scopes(claim: &str) -> Result<Vec<Scope>, ScopeError> {
    let mut out = Vec::new();
    for word in claim.split(' ').filter(|w| !w.is_empty()) {
        let (name, path) = match word.split_once(':') {
            Some((name, path)) => (name, Some(path)),
            None => (word, None),
        };
        if !name.starts_with("storage.") {
            continue;
        }
        let shown = || super::printable(word);
        let Some(path) = path else {
            return Err(ScopeError::NoPath(shown()));
        };
        let authz = match name {
            "storage.read" => Authz::Read,
            "storage.create" => Authz::Create,
            "storage.modify" => Authz::Modify,
            "storage.stage" => Authz::Stage,
            _ => continue,
        };
        let parsed = split_path(path, true).ok_or_else(|| ScopeError::BadPath(shown()))?;
        out.push(Scope {
            authz,
            components: parsed.components,
            dir: parsed.dir,
        });
    }
    Ok(out)
}

/// A path split into components, with whether it ended in `/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitPath {
    pub components: Vec<String>,
    pub dir: bool,
}

/// Split an absolute path into its components: empty ones (`//`) are
/// dropped, `.` and `..` refuse the whole path. With `decode`, each
/// component is percent-decoded (a scope's path is URL-escaped) and one
/// that decodes to `/`, NUL, `.` or `..` refuses it too.
pub fn split_path(path: &str, decode: bool) -> Option<SplitPath> {
    let rest = path.strip_prefix('/')?;
    let mut components = Vec::new();
    for raw in rest.split('/').filter(|c| !c.is_empty()) {
        let c = if decode {
            crate::http::path::percent_decode(raw)?
        } else {
            raw.to_string()
        };
        if c == "." || c == ".." || c.contains(['/', '\0']) {
            return None;
        }
        components.push(c);
    }
    // The root is a directory whatever its spelling.
    let dir = path.ends_with('/') && !components.is_empty();
    Some(SplitPath { components, dir })
}

impl Scope {
    /// Whether this scope allows `op` on `target` (a path relative to the
    /// issuer's base path).
    pub fn covers(&self, op: Op, target: &SplitPath) -> bool {
        if !self.authz.allows(op) {
            return false;
        }
        let mine = &self.components;
        let theirs = &target.components;
        if theirs.len() > mine.len() {
            return theirs.starts_with(mine);
        }
        if theirs == mine {
            // A directory scope covers its directory, never a file of that name.
            return !self.dir || target.dir || op == Op::CreateDir;
        }
        // The leading directories a create scope's path needs.
        op == Op::CreateDir && mine.starts_with(theirs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(p: &str) -> SplitPath {
        split_path(p, false).unwrap()
    }

    fn one(s: &str) -> Scope {
        let mut v = parse_scopes(s).unwrap();
        assert_eq!(v.len(), 1, "{s}");
        v.pop().unwrap()
    }

    #[test]
    fn scopes_parse_and_foreign_ones_are_skipped() {
        let v = parse_scopes("openid  storage.read:/a storage.modify:/b/c/ compute.create wlcg:1.0 storage.poll:/x storage.stage:/t").unwrap();
        let shown: Vec<String> = v.iter().map(|s| s.to_string()).collect();
        assert_eq!(
            shown,
            [
                "storage.read:/a",
                "storage.modify:/b/c/",
                "storage.stage:/t"
            ]
        );
        assert_eq!(one("storage.read:/").to_string(), "storage.read:/");
        assert_eq!(parse_scopes("").unwrap(), vec![]);
    }

    #[test]
    fn a_storage_scope_without_a_path_or_with_a_bad_one_is_refused() {
        assert!(matches!(
            parse_scopes("storage.read:/a storage.create"),
            Err(ScopeError::NoPath(_))
        ));
        assert!(matches!(
            parse_scopes("storage.poll"),
            Err(ScopeError::NoPath(_))
        ));
        for bad in [
            "storage.read:a",
            "storage.read:",
            "storage.read:/a/../b",
            "storage.read:/a/./b",
            "storage.read:/a/%2e%2e/b",
            "storage.read:/a%2fb",
            "storage.read:/a%zz",
            "storage.read:/a%2",
            "storage.read:/a%00",
        ] {
            assert!(
                matches!(parse_scopes(bad), Err(ScopeError::BadPath(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn scope_paths_are_percent_decoded_and_normalized() {
        let s = one("storage.read://data%20set//run");
        assert_eq!(s.to_string(), "storage.read:/data set/run");
        assert!(s.covers(Op::Read, &path("/data set/run/f")));
        assert!(!s.covers(Op::Read, &path("/data%20set/run/f")));
        assert_eq!(
            one("storage.read:/a%0Ab").to_string(),
            "storage.read:/a\\nb"
        );
    }

    #[test]
    fn paths_match_by_whole_components() {
        let s = one("storage.read:/a");
        assert!(s.covers(Op::Read, &path("/a")));
        assert!(s.covers(Op::Read, &path("/a/")));
        assert!(s.covers(Op::Read, &path("/a/b")));
        assert!(s.covers(Op::Read, &path("/a//b/c")));
        assert!(!s.covers(Op::Read, &path("/ab")));
        assert!(!s.covers(Op::Read, &path("/")));
        assert!(!s.covers(Op::Read, &path("/b/a")));
        let root = one("storage.read:/");
        assert!(root.covers(Op::Read, &path("/")));
        assert!(root.covers(Op::Read, &path("/anything/at/all")));
    }

    #[test]
    fn a_trailing_slash_names_a_directory() {
        let s = one("storage.create:/foo/bar/");
        assert!(!s.covers(Op::Create, &path("/foo/bar")));
        assert!(s.covers(Op::CreateDir, &path("/foo/bar")));
        assert!(s.covers(Op::Create, &path("/foo/bar/f")));
        assert!(s.covers(Op::Stat, &path("/foo/bar/")));
        assert!(!s.covers(Op::Create, &path("/foo/bargain")));
    }

    #[test]
    fn create_allows_the_leading_directories_and_nothing_else_above() {
        let s = one("storage.create:/foo/bar");
        assert!(s.covers(Op::CreateDir, &path("/foo")));
        assert!(s.covers(Op::CreateDir, &path("/")));
        assert!(!s.covers(Op::Create, &path("/foo")));
        assert!(s.covers(Op::Create, &path("/foo/bar")));
        assert!(s.covers(Op::CreateDir, &path("/foo/bar/qux")));
        assert!(!s.covers(Op::CreateDir, &path("/foo/bargain")));
        assert!(!s.covers(Op::Stat, &path("/foo")));
    }

    #[test]
    fn each_authorization_allows_its_operations() {
        let p = path("/d/f");
        let table = [
            ("storage.read:/d", [true, true, false, false, false]),
            ("storage.create:/d", [false, true, true, true, false]),
            ("storage.modify:/d", [false, true, true, true, true]),
            ("storage.stage:/d", [false, true, false, false, false]),
        ];
        let ops = [Op::Read, Op::Stat, Op::Create, Op::CreateDir, Op::Modify];
        for (scope, want) in table {
            let s = one(scope);
            for (op, w) in ops.iter().zip(want) {
                assert_eq!(s.covers(*op, &p), w, "{scope} {op:?}");
            }
        }
    }

    #[test]
    fn request_paths_split_without_decoding() {
        assert_eq!(path("/a//b/").components, ["a", "b"]);
        assert!(path("/a/").dir);
        assert!(split_path("a/b", false).is_none());
        assert!(split_path("/a/../b", false).is_none());
        assert!(split_path("/a/./b", false).is_none());
        assert_eq!(path("/a%2fb").components, ["a%2fb"]);
    }
}
