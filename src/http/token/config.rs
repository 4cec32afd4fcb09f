//! The issuers file an admin points `recv` at: the audiences this endpoint
//! answers to and the token issuers it trusts, each with where its keys come
//! from and where its scope paths begin beneath recv's root.
//!
//! ```toml
//! audiences = ["https://dtn1.example.org:8443"]
//! [[issuer]]
//! iss = "https://tokens.example.org"
//! jwks = "/etc/urmove/tokens.example.org.jwks"  # optional: else fetched
//! base_path = "/vo"                               # optional, default "/"
//! ```

use std::path::{Path, PathBuf};

use super::scope::split_path;
use crate::http::HttpError;

/// The issuers file, read and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenConfig {
    /// The audiences (besides the WLCG "any" one) a token may name.
    pub audiences: Vec<String>,
    pub issuers: Vec<IssuerConfig>,
}

/// One trusted issuer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuerConfig {
    /// The `iss` claim, compared exactly.
    pub iss: String,
    /// A JWKS file; without it the keys are fetched through the issuer's
    /// `/.well-known/openid-configuration`.
    pub jwks: Option<PathBuf>,
    /// Where the issuer's scope paths begin, beneath recv's root: its
    /// components ("/" is none).
    pub base: Vec<String>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    audiences: Vec<String>,
    #[serde(default)]
    issuer: Vec<IssuerEntry>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct IssuerEntry {
    iss: String,
    jwks: Option<PathBuf>,
    base_path: Option<String>,
}

impl TokenConfig {
    /// Read the issuers file at `path`; a relative `jwks` is taken beside it.
    pub fn load(path: &Path) -> Result<TokenConfig, HttpError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| HttpError::io(format!("issuers file {}", path.display()), e))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        TokenConfig::parse(&text, dir)
            .map_err(|e| HttpError::Config(format!("issuers file {}: {e}", path.display())))
    }

    /// Read an issuers file's text; a relative `jwks` is taken under `dir`.
    pub fn parse(text: &str, dir: &Path) -> Result<TokenConfig, HttpError> {
        let file: File = toml::from_str(text).map_err(|e| HttpError::Config(e.to_string()))?;
        let bad = |what: String| Err(HttpError::Config(what));
        if file.audiences.is_empty() || file.audiences.iter().any(|a| a.is_empty()) {
            return bad(
                "audiences: name at least one (this endpoint's https://host[:port])".into(),
            );
        }
        if file.issuer.is_empty() {
            return bad("no [[issuer]]: name at least one trusted token issuer".into());
        }
        let mut issuers: Vec<IssuerConfig> = Vec::new();
        for entry in file.issuer {
            if !entry.iss.starts_with("https://") || entry.iss.len() <= "https://".len() {
                return bad(format!(
                    "issuer {:?}: iss must be an https:// URL",
                    entry.iss
                ));
            }
            if issuers.iter().any(|i| i.iss == entry.iss) {
                return bad(format!("issuer {:?} is named twice", entry.iss));
            }
            let base_path = entry.base_path.as_deref().unwrap_or("/");
            let Some(base) = split_path(base_path, false) else {
                return bad(format!(
                    "issuer {:?}: base_path {base_path:?} must be absolute, without . or ..",
                    entry.iss
                ));
            };
            issuers.push(IssuerConfig {
                iss: entry.iss,
                jwks: entry.jwks.map(|p| dir.join(p)),
                base: base.components,
            });
        }
        Ok(TokenConfig {
            audiences: file.audiences,
            issuers,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<TokenConfig, HttpError> {
        TokenConfig::parse(text, Path::new("/etc/urmove"))
    }

    #[test]
    fn the_documented_file_reads() {
        let c = parse(
            r#"
            audiences = ["https://dtn1.example.org:8443", "https://dtn.example.org"]
            [[issuer]]
            iss = "https://tokens.example.org"
            jwks = "tokens.jwks"
            base_path = "/vo//data/"
            [[issuer]]
            iss = "https://other.example.org/vo"
            "#,
        )
        .unwrap();
        assert_eq!(c.audiences.len(), 2);
        assert_eq!(
            c.issuers[0].jwks.as_deref(),
            Some(Path::new("/etc/urmove/tokens.jwks"))
        );
        assert_eq!(c.issuers[0].base, ["vo", "data"]);
        assert_eq!(c.issuers[1].jwks, None);
        assert!(c.issuers[1].base.is_empty());
    }

    #[test]
    fn mistakes_are_refused_with_what_to_change() {
        let issuer = "[[issuer]]\niss = \"https://t.example\"\n";
        for (text, says) in [
            (format!("audiences = []\n{issuer}"), "audiences"),
            ("audiences = [\"https://d\"]\n".to_string(), "no [[issuer]]"),
            (
                "audiences = [\"https://d\"]\n[[issuer]]\niss = \"http://t\"\n".to_string(),
                "https://",
            ),
            (
                format!("audiences = [\"https://d\"]\n{issuer}{issuer}"),
                "twice",
            ),
            (
                format!("audiences = [\"https://d\"]\n{issuer}base_path = \"vo\"\n"),
                "base_path",
            ),
            (
                format!("audiences = [\"https://d\"]\n{issuer}base_path = \"/vo/../etc\"\n"),
                "base_path",
            ),
            (
                format!("audiences = [\"https://d\"]\n{issuer}jwks_file = \"x\"\n"),
                "jwks_file",
            ),
        ] {
            let e = parse(&text).unwrap_err().to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn a_missing_file_names_itself() {
        let e = TokenConfig::load(Path::new("/nonexistent/issuers.toml")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/issuers.toml"), "{e}");
    }
}
