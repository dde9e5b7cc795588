//! The client side of `cdcfusion status`: a connection to a running engine's front end, over
//! TLS when the URL's `sslmode` asks for it (`prefer`, the default, as libpq's, or `require`).
//!
//! # Invariant
//! A server certificate is verified (chain and host name) exactly when a root certificate is
//! given (`--ssl-root-cert`, what libpq calls `verify-full`); without one, TLS encrypts the
//! session but does not authenticate the server, as libpq's `prefer` and `require` do, so a
//! self-signed certificate works without a flag. A self-signed certificate given as its own
//! root is trusted for the names it carries, as OpenSSL under libpq trusts it (webpki alone
//! refuses a CA certificate as a server's). Nothing is ever sent unencrypted to a server that
//! requires TLS: `prefer` asks for TLS first.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{verify_server_name, WebPkiServerVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
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

/// Verifies a server's certificate against the given roots, trusting a root presented as the
/// server's own certificate (a self-signed one) for the names it carries.
#[derive(Debug)]
struct AgainstRoots {
    chains: Arc<WebPkiServerVerifier>,
    roots: Vec<CertificateDer<'static>>,
}

impl ServerCertVerifier for AgainstRoots {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if self
            .roots
            .iter()
            .any(|root| root.as_ref() == end_entity.as_ref())
        {
            verify_server_name(&ParsedCertificate::try_from(end_entity)?, server_name)?;
            return Ok(ServerCertVerified::assertion());
        }
        self.chains
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.chains.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.chains.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.chains.supported_verify_schemes()
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
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| bad(e.to_string()))?;
            let mut store = rustls::RootCertStore::empty();
            for cert in &certs {
                store.add(cert.clone()).map_err(|e| bad(e.to_string()))?;
            }
            if store.is_empty() {
                return Err(bad("holds no certificate".into()));
            }
            let chains =
                WebPkiServerVerifier::builder_with_provider(Arc::new(store), Arc::clone(&provider))
                    .build()
                    .map_err(|e| bad(e.to_string()))?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AgainstRoots {
                    chains,
                    roots: certs,
                }))
                .with_no_client_auth()
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
