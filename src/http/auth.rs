//! Who may do what on the HTTP front: every request carries a WLCG bearer
//! token (`token`), checked for the operation on the path it names.

use std::path::Path;
use std::time::SystemTime;

use super::client::Client;
use super::token::{Authorizer, TokenConfig};
use super::wire::Head;
use super::HttpError;

pub use super::token::Op;

/// Most bytes of an issuer's discovery document or JWKS taken.
const KEYS_BYTES_MAX: u64 = 1 << 20;

/// Who a request was let in as, for the access log (never the token).
#[derive(Debug, Clone, Default)]
pub struct Who {
    pub subject: String,
    /// A short hash of the token, to match log lines without it.
    pub token_id: String,
    /// The scope that allowed the request.
    pub scope: String,
}

/// A request refused: its status (400, 401, 403 or 503), the reason for
/// the log and the client, and the WWW-Authenticate value.
#[derive(Debug, Clone)]
pub struct Denial {
    pub status: u16,
    pub reason: String,
    pub challenge: Option<String>,
}

/// The token rules of this front.
pub struct Auth {
    authorizer: Authorizer,
}

impl Auth {
    /// The issuers file read; an issuer without a JWKS file has its keys
    /// fetched through `client` (its CA checked, as every copy's).
    pub fn load(issuers: &Path, client: &Client) -> Result<Auth, HttpError> {
        let config = TokenConfig::load(issuers)?;
        let client = client.clone();
        let fetch: super::token::Fetcher = Box::new(move |url: &str| {
            let url = super::url::Url::parse(url)?;
            let r = client.get(&url, &[])?.error_for_status()?;
            r.text(KEYS_BYTES_MAX).map(String::into_bytes)
        });
        Ok(Auth {
            authorizer: Authorizer::new(config, Some(fetch))?,
        })
    }

    /// Whether the request's token allows `op` on `rel` (beneath the root).
    pub fn check(&self, head: &Head, op: Op, rel: &str) -> Result<Who, Denial> {
        let path = format!("/{rel}");
        match self
            .authorizer
            .check(head.header("authorization"), op, &path, SystemTime::now())
        {
            Ok(g) => Ok(Who {
                subject: g.subject,
                token_id: g.token_id.to_string(),
                scope: g.scope,
            }),
            Err(d) => Err(Denial {
                status: d.status(),
                reason: d.reason.clone(),
                challenge: d.www_authenticate().map(str::to_string),
            }),
        }
    }
}
