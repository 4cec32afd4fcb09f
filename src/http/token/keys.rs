//! Where an issuer's signing keys come from: a JWKS file read once at start,
//! or fetched through the issuer's OpenID discovery document (WLCG Common
//! JWT Profiles 1.3, section 4.2) and cached. A cache is refreshed after an
//! hour (the profile's minimum), kept for a day when its issuer cannot be
//! reached (the profile's "key cache expiration"), and refetched when a token
//! names a key it lacks, at most once a minute whatever tokens arrive.

use std::sync::Mutex;
use std::time::Duration;

use super::jws::{Jwk, KeySet, JWKS_BYTES_MAX};
use crate::http::HttpError;

/// Fetch a URL's body (an HTTPS GET whose certificate the caller checks).
pub type Fetcher = Box<dyn Fn(&str) -> Result<Vec<u8>, HttpError> + Send + Sync>;

/// Fetched keys are refetched once this old.
pub const KEYS_REFRESH: Duration = Duration::from_secs(3600);
/// Fetched keys are still used this long while their issuer cannot be reached.
pub const KEYS_EXPIRE: Duration = Duration::from_secs(24 * 3600);
/// No issuer is asked for its keys more often than this.
pub const FETCH_INTERVAL_MIN: Duration = Duration::from_secs(60);

/// Why no key verifies a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("issuer {iss} has no key {kid}")]
    UnknownKid { iss: String, kid: String },
    #[error("issuer {iss}'s keys could not be fetched: {why}")]
    Unavailable { iss: String, why: String },
}

#[derive(Debug, Default)]
pub struct Cache {
    keys: Option<KeySet>,
    /// When `keys` were fetched (seconds since the epoch).
    fetched_at: i64,
    /// When a fetch was last tried, whatever came of it.
    tried_at: Option<i64>,
    /// Why the last fetch failed, if it did.
    last_error: Option<String>,
    /// Fetches tried (for tests and metrics).
    fetch_count: u64,
}

/// One issuer's keys.
#[derive(Debug)]
pub enum KeySource {
    File(KeySet),
    Fetched {
        cache: Mutex<Cache>,
        /// Held while a fetch is under way, so one runs at a time.
        fetching: Mutex<()>,
    },
}

fn secs(d: Duration) -> i64 {
    d.as_secs() as i64
}

impl KeySource {
    pub fn fetched() -> KeySource {
        KeySource::Fetched {
            cache: Mutex::new(Cache::default()),
            fetching: Mutex::new(()),
        }
    }

    /// How many fetches this source has tried.
    pub fn fetch_count(&self) -> u64 {
        match self {
            KeySource::File(_) => 0,
            KeySource::Fetched { cache, .. } => lock(cache).fetch_count,
        }
    }

    /// The key `kid` of issuer `iss` at `now` (seconds since the epoch).
    pub fn key(&self, iss: &str, kid: &str, now: i64, fetch: &Fetcher) -> Result<Jwk, KeyError> {
        let unknown = || KeyError::UnknownKid {
            iss: super::printable(iss),
            kid: super::printable(kid),
        };
        let (cache, fetching) = match self {
            KeySource::File(set) => return set.find(kid).cloned().ok_or_else(unknown),
            KeySource::Fetched { cache, fetching } => (cache, fetching),
        };
        let (found, wanted, have_keys) = {
            let c = lock(cache);
            let usable = c
                .keys
                .as_ref()
                .filter(|_| now - c.fetched_at < secs(KEYS_EXPIRE));
            let found = usable.and_then(|k| k.find(kid)).cloned();
            let fresh = usable.is_some() && now - c.fetched_at < secs(KEYS_REFRESH);
            let wanted = (found.is_none() || !fresh) && may_try(&c, now);
            (found, wanted, usable.is_some())
        };
        if wanted {
            // Without keys at all, wait for a fetch under way; with some, use them meanwhile.
            let guard = if have_keys {
                fetching.try_lock().ok()
            } else {
                Some(fetching.lock().unwrap_or_else(|p| p.into_inner()))
            };
            if let Some(_guard) = guard {
                self.refresh(iss, now, fetch);
            }
        } else if let Some(key) = found {
            return Ok(key);
        } else if !have_keys {
            // Another request's fetch may be under way (it marked the try
            // before it ended): wait for it before reading what it got.
            drop(fetching.lock().unwrap_or_else(|p| p.into_inner()));
        }
        let c = lock(cache);
        let usable = c
            .keys
            .as_ref()
            .filter(|_| now - c.fetched_at < secs(KEYS_EXPIRE));
        match (usable, &c.last_error) {
            (Some(keys), _) => keys.find(kid).cloned().ok_or_else(unknown),
            (None, Some(why)) => Err(KeyError::Unavailable {
                iss: super::printable(iss),
                why: why.clone(),
            }),
            (None, None) => Err(KeyError::Unavailable {
                iss: super::printable(iss),
                why: "not fetched yet (tried less than a minute ago)".into(),
            }),
        }
    }

    /// Fetch the keys unless another thread just did; the caller holds `fetching`.
    fn refresh(&self, iss: &str, now: i64, fetch: &Fetcher) {
        let KeySource::Fetched { cache, .. } = self else {
            return;
        };
        {
            let mut c = lock(cache);
            if !may_try(&c, now) {
                return;
            }
            c.tried_at = Some(now);
            c.fetch_count += 1;
        }
        let got = fetch_keys(iss, fetch);
        let mut c = lock(cache);
        match got {
            Ok(keys) => {
                c.keys = Some(keys);
                c.fetched_at = now;
                c.last_error = None;
            }
            Err(e) => c.last_error = Some(e.to_string()),
        }
    }
}

/// Whether a fetch may be tried at `now` (a clock gone backwards allows one).
fn may_try(c: &Cache, now: i64) -> bool {
    c.tried_at
        .is_none_or(|t| now - t >= secs(FETCH_INTERVAL_MIN) || now < t)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The URL of an issuer's OpenID discovery document.
pub fn discovery_url(iss: &str) -> String {
    format!(
        "{}/.well-known/openid-configuration",
        iss.trim_end_matches('/')
    )
}

/// Fetch an issuer's discovery document, then the JWKS it names.
fn fetch_keys(iss: &str, fetch: &Fetcher) -> Result<KeySet, HttpError> {
    let url = discovery_url(iss);
    let doc = fetch(&url)?;
    if doc.len() > JWKS_BYTES_MAX {
        return Err(HttpError::Malformed(format!(
            "{url}: over {JWKS_BYTES_MAX} bytes"
        )));
    }
    #[derive(serde::Deserialize)]
    struct Discovery {
        issuer: Option<String>,
        jwks_uri: String,
    }
    let d: Discovery = serde_json::from_slice(&doc)
        .map_err(|e| HttpError::Malformed(format!("{url}: not a discovery document: {e}")))?;
    if d.issuer.as_deref().is_some_and(|i| i != iss) {
        return Err(HttpError::Malformed(format!(
            "{url}: names issuer {}, not {iss}",
            super::printable(d.issuer.as_deref().unwrap_or_default())
        )));
    }
    if !d.jwks_uri.starts_with("https://") {
        return Err(HttpError::Malformed(format!(
            "{url}: jwks_uri {} is not https",
            super::printable(&d.jwks_uri)
        )));
    }
    let body = fetch(&d.jwks_uri)?;
    KeySet::parse(&body).map_err(|e| HttpError::Malformed(format!("{}: {e}", d.jwks_uri)))
}
