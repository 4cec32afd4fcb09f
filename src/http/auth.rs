//! Who may do what on the HTTP front: every request carries a WLCG bearer
//! token (`token`), checked for the operation on the path it names.

use std::path::Path;

use super::client::Client;
use super::wire::Head;
use super::HttpError;

/// What a request does to a path, as the WLCG scopes divide it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// GET, HEAD, PROPFIND, being the source of a third-party copy.
    Read,
    /// A new file or directory (PUT, MKCOL, a copy's new destination).
    Create,
    /// Changing or removing what exists (overwrite, DELETE).
    Modify,
}

/// Who a request was let in as, for the access log (never the token).
#[derive(Debug, Clone, Default)]
pub struct Who {
    pub subject: String,
    /// A short hash of the token, to match log lines without it.
    pub token_id: String,
    /// The scope that allowed the request.
    pub scope: String,
}

/// A request refused: its status (401 or 403), the reason for the log and
/// the client, and the WWW-Authenticate value with a 401.
#[derive(Debug, Clone)]
pub struct Denial {
    pub status: u16,
    pub reason: String,
    pub challenge: Option<String>,
}

/// The token rules of this front.
pub struct Auth {
    authorizer: super::token::Authorizer,
}

impl Auth {
    /// The issuers file read (its JWKS fetched through `client` where it
    /// names none).
    pub fn load(issuers: &Path, client: &Client) -> Result<Auth, HttpError> {
        let authorizer = super::token::Authorizer::load(issuers, client)?;
        Ok(Auth { authorizer })
    }

    /// Whether the request's token allows `op` on `rel` (beneath the root).
    pub fn check(&self, head: &Head, op: Op, rel: &str) -> Result<Who, Denial> {
        self.authorizer
            .allows(head.header("authorization"), op, rel)
    }
}
