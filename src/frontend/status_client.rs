//! The client side of `cdcfusion status`: a connection to a running engine's front end, over
//! TLS when the URL's `sslmode` asks for it (`prefer`, the default, as libpq's, or `require`).
//!
//! # Invariant
//! A server certificate is verified (chain and host name) exactly when a root certificate is
//! given (`--ssl-root-cert`, what libpq calls `verify-full`); without one, TLS encrypts the
//! session but does not authenticate the server, as libpq's `prefer` and `require` do, so a
//! self-signed certificate works without a flag. Nothing is ever sent unencrypted to a server
//! that requires TLS: `prefer` asks for TLS first.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

/// Why `cdcfusion status` could not connect.
#[derive(Debug, thiserror::Error)]
pub enum StatusClientError {
    #[error("--url {url:?}: {source}")]
    Url {
        url: String,
        #[source]
        source: tokio_postgres::Error,
    },
    #[error("--ssl-root-cert {path}: {message}")]
    RootCert { path: String, message: String },
    #[error("TLS: {0}")]
    Tls(String),
    #[error("connecting to {url}: {source}")]
    Connect {
        url: String,
        #[source]
        source: tokio_postgres::Error,
    },
}

/// Accepts any server certificate but still checks the handshake's signatures: encryption
/// without authentication, as libpq's `sslmode=require` without a root certificate.
#[derive(Debug)]
struct EncryptOnly(Arc<CryptoProvider>);

impl ServerCertVerifier for EncryptOnly {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The rustls client configuration: verifying against `root_cert` when given, else
/// encrypting only.
fn tls_config(root_cert: Option<&Path>) -> Result<rustls::ClientConfig, StatusClientError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| StatusClientError::Tls(e.to_string()))?;
    let config = match root_cert {
        Some(path) => {
            let bad = |message: String| StatusClientError::RootCert {
                path: path.display().to_string(),
                message,
            };
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(path).map_err(|e| bad(e.to_string()))? {
                roots
                    .add(cert.map_err(|e| bad(e.to_string()))?)
                    .map_err(|e| bad(e.to_string()))?;
            }
            if roots.is_empty() {
                return Err(bad("holds no certificate".into()));
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(EncryptOnly(provider)))
            .with_no_client_auth(),
    };
    Ok(config)
}

/// Connects to the front end at `url` (a libpq URL or key/value string) as the user it
/// names, else `PGUSER`, else the login name; the password from the URL, else
/// `PGPASSWORD`. TLS as the URL's `sslmode` says (see the module docs).
pub async fn connect(
    url: &str,
    root_cert: Option<&Path>,
) -> Result<tokio_postgres::Client, StatusClientError> {
    let mut config: tokio_postgres::Config =
        url.parse().map_err(|source| StatusClientError::Url {
            url: url.to_string(),
            source,
        })?;
    if config.get_user().is_none() {
        let user = std::env::var("PGUSER")
            .or_else(|_| std::env::var("USER"))
            .unwrap_or_else(|_| "postgres".into());
        config.user(user);
    }
    if config.get_password().is_none() {
        if let Ok(password) = std::env::var("PGPASSWORD") {
            config.password(password);
        }
    }
    let failed = |source| StatusClientError::Connect {
        url: url.to_string(),
        source,
    };
    if config.get_ssl_mode() == SslMode::Disable {
        let (client, connection) = config
            .connect(tokio_postgres::NoTls)
            .await
            .map_err(failed)?;
        tokio::spawn(connection);
        return Ok(client);
    }
    let tls = MakeRustlsConnect::new(tls_config(root_cert)?);
    let (client, connection) = config.connect(tls).await.map_err(failed)?;
    tokio::spawn(connection);
    Ok(client)
}
