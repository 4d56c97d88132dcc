//! The gateway's TLS: a rustls server configuration (ring's cryptography) from a PEM
//! certificate chain and key, which [`crate::run::Listener::with_tls`] serves with.

use std::path::Path;
use std::sync::Arc;

/// Why the gateway's certificate cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error(transparent)]
    Files(#[from] events::tls::TlsError),
    #[error("the certificate and key do not go together: {0}")]
    Rustls(#[from] rustls::Error),
}

/// A server configuration presenting the chain in `cert` with the key in `key`, for HTTP/1.1.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(
            events::tls::certificates(cert)?,
            events::tls::private_key(key)?,
        )?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
