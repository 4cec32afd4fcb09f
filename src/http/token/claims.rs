//! A WLCG access token's claims and the rules on them (WLCG Common JWT
//! Profiles 1.3, sections 2.1 and 4.3): `iss`, `sub`, `aud`, `exp`, `iat` and
//! `wlcg.ver` present; the audience one of ours or the WLCG "any" audience;
//! `exp` honoured exactly, `nbf` and `iat` with a minute of clock skew; a
//! `wlcg.ver` major version of 1. Other claims are ignored (the profile says
//! they MUST NOT be used in authorization decisions); `wlcg.groups` is among
//! them, since this endpoint authorizes by the storage scopes only.

use std::time::Duration;

/// The audience an issuer uses for a token meant for every relying party.
pub const ANY_AUDIENCE: &str = "https://wlcg.cern.ch/jwt/v1/any";
/// The clock skew allowed on `nbf` and `iat` (the profile's default).
pub const SKEW: Duration = Duration::from_secs(60);
/// The `wlcg.ver` major version this side understands.
const WLCG_VER_MAJOR: u64 = 1;

/// The claims of a token this side reads.
#[derive(Debug, Clone, PartialEq)]
pub struct Claims {
    pub iss: String,
    pub sub: String,
    pub aud: Vec<String>,
    /// Seconds since the epoch.
    pub exp: i64,
    pub nbf: Option<i64>,
    pub iat: i64,
    pub jti: Option<String>,
    /// The `scope` claim, space-separated; empty when absent.
    pub scope: String,
    pub wlcg_ver: String,
}

/// Why a token's claims are refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClaimError {
    #[error("token's claims are not a JSON object of the types JWT gives them")]
    Json,
    #[error("token has no {0} claim (the WLCG profile requires it)")]
    Missing(&'static str),
    #[error("token expired {0} s ago")]
    Expired(i64),
    #[error("token is not valid for another {0} s (nbf)")]
    NotYetValid(i64),
    #[error("token was issued {0} s in the future (iat; clocks out of step?)")]
    IssuedInFuture(i64),
    #[error("token's audience {0} is none of this endpoint's")]
    Audience(String),
    #[error("token's wlcg.ver {0} is not a 1.x version")]
    Version(String),
}

#[derive(serde::Deserialize)]
#[serde(untagged)]
enum Audience {
    One(String),
    Many(Vec<String>),
}

#[derive(serde::Deserialize)]
struct Raw {
    iss: Option<String>,
    sub: Option<String>,
    aud: Option<Audience>,
    exp: Option<serde_json::Number>,
    nbf: Option<serde_json::Number>,
    iat: Option<serde_json::Number>,
    jti: Option<String>,
    scope: Option<String>,
    #[serde(rename = "wlcg.ver")]
    wlcg_ver: Option<String>,
}

/// A JWT NumericDate (seconds, possibly fractional) as whole seconds.
fn seconds(n: &serde_json::Number) -> Option<i64> {
    if let Some(i) = n.as_i64() {
        return Some(i);
    }
    let f = n.as_f64()?.floor();
    (f.is_finite() && f.abs() < 1e15).then_some(f as i64)
}

impl Claims {
    /// Read the claims (the signature is checked apart); a duplicated claim
    /// or one of the wrong type refuses the token.
    pub fn parse(payload: &[u8]) -> Result<Claims, ClaimError> {
        let raw: Raw = serde_json::from_slice(payload).map_err(|_| ClaimError::Json)?;
        let time = |n: Option<serde_json::Number>, name| {
            seconds(&n.ok_or(ClaimError::Missing(name))?).ok_or(ClaimError::Json)
        };
        let aud = match raw.aud.ok_or(ClaimError::Missing("aud"))? {
            Audience::One(a) => vec![a],
            Audience::Many(v) => v,
        };
        Ok(Claims {
            iss: raw.iss.ok_or(ClaimError::Missing("iss"))?,
            sub: raw.sub.ok_or(ClaimError::Missing("sub"))?,
            aud,
            exp: time(raw.exp, "exp")?,
            nbf: match raw.nbf {
                Some(n) => Some(seconds(&n).ok_or(ClaimError::Json)?),
                None => None,
            },
            iat: time(raw.iat, "iat")?,
            jti: raw.jti,
            scope: raw.scope.unwrap_or_default(),
            wlcg_ver: raw.wlcg_ver.ok_or(ClaimError::Missing("wlcg.ver"))?,
        })
    }

    /// The profile's rules at `now` (seconds since the epoch) for an endpoint
    /// known by `audiences`.
    pub fn validate(&self, audiences: &[String], now: i64) -> Result<(), ClaimError> {
        check_version(&self.wlcg_ver)?;
        if now >= self.exp {
            return Err(ClaimError::Expired(now - self.exp));
        }
        let skew = SKEW.as_secs() as i64;
        if let Some(nbf) = self.nbf {
            if now + skew < nbf {
                return Err(ClaimError::NotYetValid(nbf - now));
            }
        }
        if now + skew < self.iat {
            return Err(ClaimError::IssuedInFuture(self.iat - now));
        }
        let ours = |a: &String| a == ANY_AUDIENCE || audiences.contains(a);
        if !self.aud.iter().any(ours) {
            let shown: Vec<String> = self.aud.iter().map(|a| super::printable(a)).collect();
            return Err(ClaimError::Audience(format!("[{}]", shown.join(", "))));
        }
        Ok(())
    }
}

/// `MAJOR.MINOR`, digits only, MAJOR 1 (newer minors accepted).
fn check_version(ver: &str) -> Result<(), ClaimError> {
    let bad = || ClaimError::Version(super::printable(ver));
    let (major, minor) = ver.split_once('.').ok_or_else(bad)?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(major) || !digits(minor) || major.parse::<u64>().ok() != Some(WLCG_VER_MAJOR) {
        return Err(bad());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000;

    /// A good token's claims, with those in `extra` (JSON members) added
    /// or replaced.
    fn claims(extra: &str) -> String {
        let mut base = serde_json::json!({
            "iss": "https://i.example", "sub": "s1", "aud": "https://dtn.example",
            "exp": NOW + 600, "iat": NOW - 10, "jti": "j1", "wlcg.ver": "1.0",
            "scope": "storage.read:/",
        });
        let extra: serde_json::Value = serde_json::from_str(&format!("{{{extra}}}")).unwrap();
        for (k, v) in extra.as_object().unwrap() {
            base[k] = v.clone();
        }
        base.to_string()
    }

    fn ours() -> Vec<String> {
        vec!["https://dtn.example".to_string()]
    }

    #[test]
    fn a_good_token_parses_and_validates() {
        let c = Claims::parse(claims("").as_bytes()).unwrap();
        assert_eq!(c.iss, "https://i.example");
        assert_eq!(c.sub, "s1");
        assert_eq!(c.aud, ["https://dtn.example"]);
        assert_eq!(c.jti.as_deref(), Some("j1"));
        assert_eq!(c.scope, "storage.read:/");
        c.validate(&ours(), NOW).unwrap();
    }

    #[test]
    fn each_required_claim_is_required() {
        for name in ["iss", "sub", "aud", "exp", "iat", "wlcg.ver"] {
            let mut v: serde_json::Value = serde_json::from_str(&claims("")).unwrap();
            v.as_object_mut().unwrap().remove(name);
            let e = Claims::parse(v.to_string().as_bytes()).unwrap_err();
            assert_eq!(e, ClaimError::Missing(name));
        }
        let mut v: serde_json::Value = serde_json::from_str(&claims("")).unwrap();
        v.as_object_mut().unwrap().remove("jti");
        assert!(Claims::parse(v.to_string().as_bytes()).is_ok());
    }

    #[test]
    fn wrong_types_and_duplicates_are_refused() {
        for bad in [
            r#"{"iss":1}"#.to_string(),
            claims(r#""exp":"soon""#),
            claims(r#""nbf":true"#),
            claims(r#""aud":[1]"#),
            claims(r#""scope":["storage.read:/"]"#),
            "[]".to_string(),
            "not json".to_string(),
            // A duplicated claim: which one counts is not for this side to guess.
            claims("").replace(r#""sub":"s1""#, r#""sub":"s1","sub":"root""#),
        ] {
            assert_eq!(
                Claims::parse(bad.as_bytes()),
                Err(ClaimError::Json),
                "{bad}"
            );
        }
    }

    #[test]
    fn times_are_honoured_with_skew_on_nbf_and_iat_only() {
        let at = |extra: &str| Claims::parse(claims(extra).as_bytes()).unwrap();
        let c = at("");
        assert_eq!(c.validate(&ours(), NOW + 600), Err(ClaimError::Expired(0)));
        assert!(c.validate(&ours(), NOW + 599).is_ok());
        let c = at(&format!(r#""nbf":{}"#, NOW + 61));
        assert_eq!(c.validate(&ours(), NOW), Err(ClaimError::NotYetValid(61)));
        let c = at(&format!(r#""nbf":{}"#, NOW + 60));
        assert!(c.validate(&ours(), NOW).is_ok());
        let c = at(&format!(r#""iat":{}"#, NOW + 120));
        assert_eq!(
            c.validate(&ours(), NOW),
            Err(ClaimError::IssuedInFuture(120))
        );
        let c = at(&format!(r#""exp":{}.75"#, NOW + 1));
        assert_eq!(c.exp, NOW + 1);
    }

    #[test]
    fn the_audience_is_ours_or_any() {
        let at = |aud: &str| Claims::parse(claims(&format!(r#""aud":{aud}"#)).as_bytes()).unwrap();
        assert!(at(r#"["x","https://dtn.example"]"#)
            .validate(&ours(), NOW)
            .is_ok());
        assert!(at(r#""https://wlcg.cern.ch/jwt/v1/any""#)
            .validate(&ours(), NOW)
            .is_ok());
        for wrong in [
            r#""https://DTN.example""#,
            r#"[]"#,
            r#""https://dtn.example/""#,
        ] {
            assert!(matches!(
                at(wrong).validate(&ours(), NOW),
                Err(ClaimError::Audience(_))
            ));
        }
    }

    #[test]
    fn wlcg_ver_must_be_major_one() {
        for (ver, ok) in [
            ("1.0", true),
            ("1.3", true),
            ("1.12", true),
            ("2.0", false),
            ("1", false),
            ("1.x", false),
            ("01.0", true),
            ("scitoken:2.0", false),
        ] {
            let c = Claims::parse(claims(&format!(r#""wlcg.ver":"{ver}""#)).as_bytes()).unwrap();
            assert_eq!(c.validate(&ours(), NOW).is_ok(), ok, "{ver}");
        }
    }
}
