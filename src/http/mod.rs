//! L3: the HTTP front of `urmove recv` (issue 37): an HTTPS WebDAV endpoint
//! gfal2 and FTS3 drive, with HTTP third-party copy (`COPY`), the checksums
//! storage systems speak and WLCG bearer tokens. It may use `session` (whose
//! engine does the copies), `datapath`, `protocol` and `coord`.
//!
//! - `tls`: rustls configs from PEM files (the server's certificate and key,
//!   the CAs a client trusts).
//! - `client`: an HTTPS/1.1 client with a pool of kept-alive connections
//!   (third-party copies, JWKS fetches).
//! - `kept`: a file's storage checksums kept with it under its stamp, so a
//!   later `Want-Digest` does not read it again.
//! - `token`: WLCG JWT access tokens: signatures against trusted issuers'
//!   keys, audience, expiry, and the storage scopes bound to path prefixes.

pub mod client;
pub mod kept;
pub mod tls;
pub mod token;

/// Why an HTTP-front operation failed.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("TLS: {0}")]
    Tls(String),
    /// A message from the peer that is not HTTP as this side reads it.
    #[error("HTTP: {0}")]
    Malformed(String),
    /// The peer answered with a status this side cannot go on from.
    #[error("{url}: HTTP {status} {reason}")]
    Status {
        url: String,
        status: u16,
        reason: String,
    },
    /// A configuration file (certificate, key, JWKS, issuers) that does not read.
    #[error("{0}")]
    Config(String),
}

impl HttpError {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        HttpError::Io {
            context: context.into(),
            source,
        }
    }
}
