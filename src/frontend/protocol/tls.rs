//! TLS for the front end: the configured PEM certificate chain and private key as a rustls
//! acceptor (ring provider, TLS 1.2 and 1.3). With it, clients asking for `sslmode=require`
//! get an encrypted session; without it they are told TLS is not available.

use std::path::Path;
use std::sync::Arc;

use pgwire::tokio::tokio_rustls::rustls;
use pgwire::tokio::TlsAcceptor;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::frontend::protocol::error::FrontendError;

/// The ALPN protocol name of PostgreSQL's direct TLS connections (PostgreSQL 17 clients).
const ALPN_POSTGRESQL: &[u8] = b"postgresql";

/// A TLS acceptor serving `cert` (PEM chain) with `key` (PEM private key).
pub fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, FrontendError> {
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| FrontendError::Tls(format!("certificate {}: {e}", cert.display())))?;
    if certs.is_empty() {
        return Err(FrontendError::Tls(format!(
            "certificate {} holds no certificate",
            cert.display()
        )));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| FrontendError::Tls(format!("private key {}: {e}", key.display())))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| FrontendError::Tls(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| FrontendError::Tls(format!("certificate and key do not match: {e}")))?;
    config.alpn_protocols = vec![ALPN_POSTGRESQL.to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
