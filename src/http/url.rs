//! The URLs the HTTP client speaks to: `https://host:port/path?query` and
//! `http://`, with gfal's spellings `davs://` (https) and `dav://` (http),
//! IPv6 literals in brackets and the default ports. The path and query are
//! kept as given, percent-encoding and all: this side never re-encodes what
//! another endpoint named.

use std::fmt;

use super::HttpError;

/// Whether a connection carries TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// An absolute http(s) URL.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Url {
    pub scheme: Scheme,
    /// The host as connected to: a name lowercased, or an IP address
    /// (an IPv6 one without its brackets).
    pub host: String,
    pub port: u16,
    /// The path and query as given, `/` when the URL had none (never empty,
    /// never a fragment).
    pub target: String,
}

/// The (scheme, host, port) of a URL: what a pooled connection is kept
/// under and what a redirect must keep for an `Authorization` to follow it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Origin {
    pub scheme: Scheme,
    pub host: String,
    pub port: u16,
}

impl Url {
    pub fn parse(text: &str) -> Result<Url, HttpError> {
        let bad = |why: &str| HttpError::Malformed(format!("URL {}: {why}", redact(text)));
        let (scheme_text, rest) = text.split_once("://").ok_or_else(|| bad("no scheme"))?;
        let scheme = match scheme_text.to_ascii_lowercase().as_str() {
            "https" | "davs" => Scheme::Https,
            "http" | "dav" => Scheme::Http,
            _ => return Err(bad("not http, https, dav or davs")),
        };
        let rest = rest.split('#').next().unwrap_or("");
        let cut = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, target) = rest.split_at(cut);
        if authority.contains('@') {
            return Err(bad("user information in a URL is not taken"));
        }
        let (host, port_text) = if let Some(inner) = authority.strip_prefix('[') {
            let (host, after) = inner.split_once(']').ok_or_else(|| bad("unclosed '['"))?;
            if host.parse::<std::net::Ipv6Addr>().is_err() {
                return Err(bad("not an IPv6 address in brackets"));
            }
            match after {
                "" => (host, None),
                _ => (
                    host,
                    Some(
                        after
                            .strip_prefix(':')
                            .ok_or_else(|| bad("junk after ']'"))?,
                    ),
                ),
            }
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        if host.is_empty() || host.contains(|c: char| c.is_whitespace() || c == '%') {
            return Err(bad("no host"));
        }
        let port = match port_text {
            None | Some("") => scheme.default_port(),
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|&p| p != 0)
                .ok_or_else(|| bad("bad port"))?,
        };
        if target.contains(|c: char| c.is_ascii_control() || c == ' ') {
            return Err(bad("spaces or control characters in the path"));
        }
        let target = match target {
            "" => "/".to_string(),
            t if t.starts_with('?') => format!("/{t}"),
            t => t.to_string(),
        };
        Ok(Url {
            scheme,
            host: host.to_ascii_lowercase(),
            port,
            target,
        })
    }

    /// A `Location` read against this URL: absolute (any of the schemes
    /// above), scheme-relative (`//host/p`), absolute-path or relative to
    /// this URL's directory.
    pub fn join(&self, location: &str) -> Result<Url, HttpError> {
        let location = location.trim();
        if let Some((scheme, _)) = location.split_once("://") {
            if !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphanumeric()) {
                return Url::parse(location);
            }
        }
        if let Some(rest) = location.strip_prefix("//") {
            return Url::parse(&format!("{}://{rest}", self.scheme.as_str()));
        }
        let target = if location.starts_with('/') {
            location.to_string()
        } else if location.starts_with('?') {
            format!("{}{location}", self.path())
        } else {
            let path = self.path();
            let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
            format!("{dir}{location}")
        };
        Url::parse(&format!(
            "{}://{}{}",
            self.scheme.as_str(),
            self.authority(),
            target
        ))
    }

    /// The path without its query.
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("/")
    }

    /// `host[:port]` as a `Host` header says it (the port only when not
    /// the scheme's default, an IPv6 address in brackets).
    pub fn authority(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == self.scheme.default_port() {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }

    pub fn origin(&self) -> Origin {
        Origin {
            scheme: self.scheme,
            host: self.host.clone(),
            port: self.port,
        }
    }

    /// The URL for errors and logs: query values that may carry a token
    /// (`authz=`, `access_token=`, `...token=`) replaced by `REDACTED`.
    pub fn redacted(&self) -> String {
        redact(&self.to_string())
    }
}

impl fmt::Display for Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}://{}{}",
            self.scheme.as_str(),
            self.authority(),
            self.target
        )
    }
}

/// Debug never shows a token a query may carry.
impl fmt::Debug for Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Url({})", self.redacted())
    }
}

impl std::str::FromStr for Url {
    type Err = HttpError;
    fn from_str(s: &str) -> Result<Url, HttpError> {
        Url::parse(s)
    }
}

/// A URL text with the values of its token-like query parameters hidden.
fn redact(text: &str) -> String {
    let Some((before, query)) = text.split_once('?') else {
        return text.to_string();
    };
    let params: Vec<String> = query
        .split('&')
        .map(|param| match param.split_once('=') {
            Some((name, _)) if secret_param(name) => format!("{name}=REDACTED"),
            _ => param.to_string(),
        })
        .collect();
    format!("{before}?{}", params.join("&"))
}

fn secret_param(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    name.contains("authz") || name.contains("token") || name.contains("signature")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    #[test]
    fn schemes_ports_and_targets() {
        let u = url("davs://Host.Example:1094/a/b%20c?x=1");
        assert_eq!(u.scheme, Scheme::Https);
        assert_eq!((u.host.as_str(), u.port), ("host.example", 1094));
        assert_eq!(u.target, "/a/b%20c?x=1");
        assert_eq!(u.path(), "/a/b%20c");
        let u = url("dav://h");
        assert_eq!(
            (u.scheme, u.port, u.target.as_str()),
            (Scheme::Http, 80, "/")
        );
        assert_eq!(url("https://h?q").target, "/?q");
        assert_eq!(url("https://h/p#frag").target, "/p");
        assert_eq!(url("https://h:443/p").to_string(), "https://h/p");
        assert_eq!(url("http://h:8080/p").to_string(), "http://h:8080/p");
    }

    #[test]
    fn ipv6_literals() {
        let u = url("https://[::1]:8443/x");
        assert_eq!((u.host.as_str(), u.port), ("::1", 8443));
        assert_eq!(u.authority(), "[::1]:8443");
        assert_eq!(url("https://[fe80::2]/").authority(), "[fe80::2]");
        for bad in ["https://[::1/x", "https://[zz]/", "https://[::1]x/"] {
            assert!(Url::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn refusals() {
        for bad in [
            "ftp://h/x",
            "h/x",
            "https://:80/x",
            "https://h:0/",
            "https://h:99999/",
            "https://u:p@h/",
            "https://h/a b",
        ] {
            assert!(Url::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn locations_resolve_against_the_url() {
        let base = url("https://a:1094/dir/file?x=1");
        assert_eq!(
            base.join("other").unwrap().to_string(),
            "https://a:1094/dir/other"
        );
        assert_eq!(base.join("/top").unwrap().to_string(), "https://a:1094/top");
        assert_eq!(
            base.join("?y=2").unwrap().to_string(),
            "https://a:1094/dir/file?y=2"
        );
        assert_eq!(base.join("//b/p").unwrap().to_string(), "https://b/p");
        assert_eq!(
            base.join("http://c:81/q").unwrap().to_string(),
            "http://c:81/q"
        );
        assert_eq!(
            base.join("/a?r=https://x").unwrap().target,
            "/a?r=https://x"
        );
    }

    #[test]
    fn tokens_in_queries_are_redacted() {
        let u = url("https://h/p?authz=Bearer%20secret&n=1&access_token=s2");
        let shown = format!("{} {:?}", u.redacted(), u);
        assert!(
            !shown.contains("secret") && !shown.contains("s2"),
            "{shown}"
        );
        assert!(shown.contains("n=1"), "{shown}");
    }
}
