//! L3: the HTTP front of `urmove recv` (issue 37): an HTTPS WebDAV endpoint
//! gfal2 and FTS3 drive, with HTTP third-party copy (`COPY`), the checksums
//! storage systems speak and WLCG bearer tokens. It may use `session` (whose
//! engine does the copies), `datapath`, `protocol` and `coord`.
//!
//! - the server: `server` (TLS connections, a thread each), `wire` (HTTP/1.1
//!   heads and bodies), `path` (a request's path beneath the root), `dav`
//!   (the methods and the access log), `propfind`, `store` (PUT into an
//!   unnamed O_DIRECT file named once whole, DELETE, MKCOL), `stats`;
//! - `tpc`: third-party copy, its markers, and `tpc::native` between two
//!   urmove endpoints;
//! - checksums: `sums` (computed as bytes arrive, checked, answered) and
//!   `kept` (kept with the file under its stamp, so a later `Want-Digest`
//!   does not read it again);
//! - who may: `auth` over `token` (WLCG JWT access tokens: signatures
//!   against trusted issuers' keys, audience, expiry, and the storage
//!   scopes bound to path prefixes);
//! - the other side: `client` (HTTPS/1.1 with a pool of kept-alive
//!   connections: copies, JWKS fetches), `url`, `tls` (rustls configs from
//!   PEM files).

pub mod auth;
pub mod client;
pub mod dav;
pub mod deadline;
pub mod path;
pub mod propfind;
pub mod server;
pub mod stats;
pub mod store;
pub mod sums;
pub mod tls;
pub mod token;
pub mod tpc;
pub mod url;
pub mod wire;

/// A file's storage checksums kept with it (`session::sink::kept`: the
/// receiver's commit keeps them too).
pub use crate::session::sink::kept;

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
