//! rustls configurations from PEM files: the HTTP front's certificate chain
//! and key, and the certificate authorities a client (a third-party copy, a
//! JWKS fetch) trusts.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::HttpError;

/// Where the system keeps its trusted CAs, tried in order when no CA is given.
const SYSTEM_CA_FILES: [&str; 2] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
];
/// The grid's CA directory (IGTF), trusted too when it exists.
pub const GRID_CA_DIR: &str = "/etc/grid-security/certificates";

/// rustls on ring, the crypto urmove already builds on: rustls 0.23.48 calls
/// it deprecated for want of post-quantum key exchange, whose provider
/// (aws-lc-rs) needs a C and cmake build we do not take on.
#[allow(deprecated)]
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The server side: the certificate chain (leaf first) and its private key.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, HttpError> {
    let chain = read_certs(cert)?;
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| HttpError::Config(format!("{}: no private key: {e}", key.display())))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| HttpError::Tls(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| HttpError::Config(format!("{}: {e}", cert.display())))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The certificates of a PEM file.
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, HttpError> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| HttpError::Config(format!("{}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(HttpError::Config(format!(
            "{}: no certificate in it",
            path.display()
        )));
    }
    Ok(certs)
}

/// The CAs a client trusts: each given file or directory of PEM files,
/// else the system's bundle and the grid's CA directory.
pub fn client_config(cas: &[PathBuf]) -> Result<Arc<rustls::ClientConfig>, HttpError> {
    let mut roots = rustls::RootCertStore::empty();
    let given = !cas.is_empty();
    let mut sources: Vec<PathBuf> = cas.to_vec();
    if !given {
        sources.extend(SYSTEM_CA_FILES.iter().map(PathBuf::from));
        sources.push(PathBuf::from(GRID_CA_DIR));
    }
    for source in &sources {
        add_cas(&mut roots, source, given)?;
    }
    if roots.is_empty() {
        return Err(HttpError::Config(format!(
            "no trusted certificate authority found in {}",
            sources
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| HttpError::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Adds the CAs of a PEM file, or of every PEM file in a directory (the
/// grid's `*.pem`, OpenSSL's hashed `*.0` links). A missing source is an
/// error only when the admin named it.
fn add_cas(roots: &mut rustls::RootCertStore, source: &Path, named: bool) -> Result<(), HttpError> {
    let files: Vec<PathBuf> = match std::fs::read_dir(source) {
        Ok(dir) => dir
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                name.ends_with(".pem") || name.ends_with(".crt") || name.ends_with(".0")
            })
            .collect(),
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => vec![source.to_path_buf()],
        Err(e) if !named && e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(HttpError::io(format!("reading {}", source.display()), e)),
    };
    for file in files {
        // A directory may hold files that are not certificates (CRLs,
        // signing policies): only what parses as one counts.
        let Ok(certs) = read_certs(&file) else {
            continue;
        };
        for cert in certs {
            let _ = roots.add(cert);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_named_ca_is_an_error_and_a_missing_default_is_not() {
        let mut roots = rustls::RootCertStore::empty();
        let missing = Path::new("/nonexistent/ca.pem");
        assert!(add_cas(&mut roots, missing, true).is_err());
        assert!(add_cas(&mut roots, missing, false).is_ok());
    }

    #[test]
    fn a_file_without_certificates_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("empty.pem");
        std::fs::write(&p, "not a certificate\n").unwrap();
        let e = read_certs(&p).unwrap_err().to_string();
        assert!(e.contains("empty.pem"), "{e}");
    }
}
