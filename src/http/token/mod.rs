//! WLCG bearer tokens (issue 37): an `Authorization: Bearer` JWT checked
//! against the issuers the admin trusts (WLCG Common JWT Profiles 1.3), and
//! its storage scopes against the operation and path a request asks for.
//!
//! - `jws`: compact JWS, JWKS, signatures (ring).
//! - `claims`: issuer, audience, times, `wlcg.ver`.
//! - `scope`: `storage.{read,create,modify,stage}:/path` and what they cover.
//! - `config`: the issuers file.
//! - `keys`: keys from a file or fetched and cached.
//!
//! Refusals follow RFC 6750: no token is 401 with a bare `Bearer`
//! challenge; a malformed Authorization header 400 `invalid_request`; a token
//! that is malformed, badly signed, from an unknown issuer or key, expired,
//! not yet valid or for another audience 401 `invalid_token`; a good token
//! whose scopes do not cover the request 403 `insufficient_scope`. An issuer
//! whose keys cannot be fetched makes 503. The token's text is never kept in
//! any value this module returns, nor shown by any `Debug` or message: logs
//! name a token by [`token_id`].

pub mod claims;
pub mod config;
pub mod jws;
pub mod keys;
pub mod scope;

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

use claims::{ClaimError, Claims};
pub use config::{IssuerConfig, TokenConfig};
use jws::KeySet;
pub use keys::Fetcher;
use keys::KeySource;
pub use scope::Op;
use scope::{parse_scopes, split_path, SplitPath};

use crate::http::HttpError;

/// At most this many characters of a value from a token reach a message.
const SHOWN_CHARS_MAX: usize = 100;

/// A value from a token, made safe for a log line: control characters
/// escaped, cut at [`SHOWN_CHARS_MAX`] characters.
pub(crate) fn printable(text: &str) -> String {
    let mut out: String = text
        .chars()
        .take(SHOWN_CHARS_MAX)
        .flat_map(char::escape_debug)
        .collect();
    if text.chars().count() > SHOWN_CHARS_MAX {
        out.push_str("...");
    }
    out
}

/// A token's name in logs: the first 8 hex digits of its SHA-256, enough
/// for an admin to match log lines with a token they hold, never the token.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TokenId(String);

impl fmt::Display for TokenId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The log name of `token` (the credential after `Bearer `).
pub fn token_id(token: &str) -> TokenId {
    let digest = Sha256::digest(token.as_bytes());
    TokenId(digest[..4].iter().map(|b| format!("{b:02x}")).collect())
}

/// A request the token allows, for the access log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub issuer: String,
    pub subject: String,
    /// The scope that allowed it, e.g. `storage.create:/data`.
    pub scope: String,
    /// The token's `jti` claim, when it has one.
    pub jti: Option<String>,
    pub token_id: TokenId,
    /// The token's `exp`, seconds since the epoch.
    pub expires_at: i64,
}

/// Which refusal, as RFC 6750 and the WLCG profile class it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No bearer token (401, bare challenge).
    NoToken,
    /// An Authorization header that is not a well-formed bearer credential (400).
    BadRequest,
    /// Not a JWT this side reads: shape, base64, JSON, alg, kid (401).
    Malformed,
    /// A required claim missing or of the wrong type, a bad scope, wlcg.ver (401).
    BadClaims,
    UnknownIssuer,
    UnknownKey,
    BadSignature,
    Expired,
    NotYetValid,
    WrongAudience,
    /// The issuer's keys could not be had (503: try again later).
    KeysUnavailable,
    /// A good token whose scopes do not cover the request (403).
    Insufficient,
}

impl Refusal {
    /// The HTTP status to answer.
    pub fn status(self) -> u16 {
        match self {
            Refusal::BadRequest => 400,
            Refusal::Insufficient => 403,
            Refusal::KeysUnavailable => 503,
            _ => 401,
        }
    }

    /// The `WWW-Authenticate` value to send with the status, if any.
    pub fn www_authenticate(self) -> Option<&'static str> {
        match self {
            Refusal::NoToken => Some("Bearer"),
            Refusal::BadRequest => Some("Bearer error=\"invalid_request\""),
            Refusal::Insufficient => Some("Bearer error=\"insufficient_scope\""),
            Refusal::KeysUnavailable => None,
            _ => Some("Bearer error=\"invalid_token\""),
        }
    }
}

/// A request refused, with a reason an admin can read in the log (it never
/// holds the token; values from it are cut short and escaped).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct Denied {
    pub refusal: Refusal,
    pub reason: String,
    /// The token's log name, when there was a token.
    pub token_id: Option<TokenId>,
}

impl Denied {
    pub fn status(&self) -> u16 {
        self.refusal.status()
    }

    pub fn www_authenticate(&self) -> Option<&'static str> {
        self.refusal.www_authenticate()
    }
}

struct Issuer {
    config: IssuerConfig,
    keys: KeySource,
}

/// Checks bearer tokens against the issuers file.
pub struct Authorizer {
    audiences: Vec<String>,
    issuers: Vec<Issuer>,
    fetch: Fetcher,
}

impl fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let iss: Vec<&str> = self.issuers.iter().map(|i| i.config.iss.as_str()).collect();
        f.debug_struct("Authorizer")
            .field("audiences", &self.audiences)
            .field("issuers", &iss)
            .finish_non_exhaustive()
    }
}

impl Authorizer {
    /// Read each issuer's JWKS file now (a bad one is a configuration error);
    /// issuers without one have their keys fetched through `fetch` when a
    /// token first needs them.
    pub fn new(config: TokenConfig, fetch: Option<Fetcher>) -> Result<Authorizer, HttpError> {
        let mut issuers = Vec::with_capacity(config.issuers.len());
        for issuer in config.issuers {
            let keys =
                match &issuer.jwks {
                    Some(path) => {
                        let text = std::fs::read(path).map_err(|e| {
                            HttpError::io(format!("JWKS of {}: {}", issuer.iss, path.display()), e)
                        })?;
                        KeySource::File(KeySet::parse(&text).map_err(|e| {
                            HttpError::Config(format!("JWKS {}: {e}", path.display()))
                        })?)
                    }
                    None if fetch.is_none() => {
                        return Err(HttpError::Config(format!(
                    "issuer {} has no jwks file and this endpoint cannot fetch keys: give it one",
                    issuer.iss
                )))
                    }
                    None => KeySource::fetched(),
                };
            issuers.push(Issuer {
                config: issuer,
                keys,
            });
        }
        let fetch = fetch.unwrap_or_else(|| Box::new(|_: &str| unreachable_fetch()));
        Ok(Authorizer {
            audiences: config.audiences,
            issuers,
            fetch,
        })
    }

    /// How many key fetches the issuer `iss` has tried (0 for a JWKS file).
    pub fn fetch_count(&self, iss: &str) -> u64 {
        self.issuers
            .iter()
            .find(|i| i.config.iss == iss)
            .map_or(0, |i| i.keys.fetch_count())
    }

    /// Whether the request's `Authorization` header value allows `op` on
    /// `path` (beneath recv's root, percent-decoded, `/`-separated; a
    /// trailing `/` names a directory) at `now`.
    pub fn check(
        &self,
        authorization: Option<&str>,
        op: Op,
        path: &str,
        now: SystemTime,
    ) -> Result<Grant, Denied> {
        let token = bearer(authorization)?;
        let id = token_id(token);
        let deny = |refusal, reason: String| Denied {
            refusal,
            reason: format!("token {id}: {reason}"),
            token_id: Some(id.clone()),
        };
        let now = match now.duration_since(UNIX_EPOCH) {
            Ok(d) => d.as_secs() as i64,
            Err(e) => -(e.duration().as_secs() as i64),
        };
        let jws = jws::parse(token).map_err(|e| deny(Refusal::Malformed, e.to_string()))?;
        let claims =
            Claims::parse(&jws.payload).map_err(|e| deny(Refusal::BadClaims, e.to_string()))?;
        let Some(issuer) = self.issuers.iter().find(|i| i.config.iss == claims.iss) else {
            let why = format!("issuer {} is not trusted here", printable(&claims.iss));
            return Err(deny(Refusal::UnknownIssuer, why));
        };
        let key = issuer
            .keys
            .key(&claims.iss, &jws.kid, now, &self.fetch)
            .map_err(|e| match e {
                keys::KeyError::UnknownKid { .. } => deny(Refusal::UnknownKey, e.to_string()),
                keys::KeyError::Unavailable { .. } => deny(Refusal::KeysUnavailable, e.to_string()),
            })?;
        key.verify(&jws)
            .map_err(|e| deny(Refusal::BadSignature, e.to_string()))?;
        claims
            .validate(&self.audiences, now)
            .map_err(|e| deny(claim_refusal(&e), e.to_string()))?;
        let scopes =
            parse_scopes(&claims.scope).map_err(|e| deny(Refusal::BadClaims, e.to_string()))?;
        let who = format!("subject {} of {}", printable(&claims.sub), claims.iss);
        let insufficient = |why: String| deny(Refusal::Insufficient, format!("{who}: {why}"));
        let target = split_path(path, false)
            .ok_or_else(|| insufficient(format!("path {} is not normalized", printable(path))))?;
        let base = &issuer.config.base;
        if !target.components.starts_with(base) {
            let why = format!(
                "{} is outside the issuer's base_path /{}",
                printable(path),
                base.join("/")
            );
            return Err(insufficient(why));
        }
        let relative = SplitPath {
            components: target.components[base.len()..].to_vec(),
            dir: target.dir,
        };
        let Some(allowing) = scopes.iter().find(|s| s.covers(op, &relative)) else {
            let held: Vec<String> = scopes.iter().map(|s| s.to_string()).collect();
            let why = format!(
                "no scope allows {op:?} on {} (scopes: {})",
                printable(path),
                if held.is_empty() {
                    "none".to_string()
                } else {
                    held.join(" ")
                }
            );
            return Err(insufficient(why));
        };
        Ok(Grant {
            issuer: claims.iss.clone(),
            subject: claims.sub.clone(),
            scope: allowing.to_string(),
            jti: claims.jti.clone(),
            token_id: id.clone(),
            expires_at: claims.exp,
        })
    }
}

fn unreachable_fetch() -> Result<Vec<u8>, HttpError> {
    Err(HttpError::Config("no key fetcher configured".into()))
}

fn claim_refusal(e: &ClaimError) -> Refusal {
    match e {
        ClaimError::Expired(_) => Refusal::Expired,
        ClaimError::NotYetValid(_) | ClaimError::IssuedInFuture(_) => Refusal::NotYetValid,
        ClaimError::Audience(_) => Refusal::WrongAudience,
        _ => Refusal::BadClaims,
    }
}

/// The token of an `Authorization: Bearer <token>` header (RFC 6750 2.1).
fn bearer(header: Option<&str>) -> Result<&str, Denied> {
    let refuse = |refusal, reason: &str| Denied {
        refusal,
        reason: reason.to_string(),
        token_id: None,
    };
    let Some(value) = header else {
        return Err(refuse(Refusal::NoToken, "no bearer token"));
    };
    let value = value.trim_matches([' ', '\t']);
    let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(refuse(Refusal::NoToken, "no bearer token (another scheme)"));
    }
    let token = rest.trim_start_matches(' ');
    let body = token.trim_end_matches('=');
    let b64token = |c: char| c.is_ascii_alphanumeric() || "-._~+/".contains(c);
    if body.is_empty() || !body.chars().all(b64token) {
        let why = "Authorization: Bearer without a well-formed token";
        return Err(refuse(Refusal::BadRequest, why));
    }
    Ok(token)
}

#[cfg(test)]
mod tests;
