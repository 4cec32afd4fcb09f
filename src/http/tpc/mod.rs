//! Third-party copy (COPY with `Source:` or `Destination:`).

use super::dav::{Answer, Request};
use super::server::Conn;

/// Answer a COPY.
pub fn copy(_req: &mut Request, _conn: &mut Conn) -> Result<Answer, Answer> {
    Err(Answer::text(501, "COPY: not yet"))
}
