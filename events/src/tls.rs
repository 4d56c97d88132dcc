//! TLS to PostgreSQL as libpq does it: the URL's `sslmode` (`disable`, `prefer`, `require`,
//! `verify-ca`, `verify-full`) with `sslrootcert`, `sslcert` and `sslkey`, over rustls with
//! ring's cryptography. tokio-postgres itself knows only `disable`, `prefer` and `require`
//! (and refuses the other parameters), so [`PgUrl::parse`] takes them out of the URL (pure)
//! and [`connector`] builds the rustls connector that checks what the mode asks. Every
//! connection berth makes to PostgreSQL goes through [`connect`] or [`pool_manager`]; `pg_dump`
//! and `pg_restore` are given the URL as it is (libpq reads the same parameters).

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::Socket;
use tokio_postgres_rustls::MakeRustlsConnect;

/// A connection's driving half, to spawn: what [`connect`] returns beside the client.
pub type Connection =
    tokio_postgres::Connection<Socket, <MakeRustlsConnect as MakeTlsConnect<Socket>>::Stream>;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("sslmode `{0}` is not one of disable, prefer, require, verify-ca, verify-full")]
    BadMode(String),
    #[error("the database URL: {0}")]
    BadUrl(String),
    #[error("sslmode={0} checks the server's certificate against a CA: set sslrootcert=<file> in the URL")]
    NoRootCert(&'static str),
    #[error("sslcert and sslkey go together: one is set without the other")]
    HalfClientCert,
    #[error("`{path}`: {why}")]
    File { path: PathBuf, why: String },
    #[error("TLS: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("database: {}", crate::fault::described(.0))]
    Database(#[from] tokio_postgres::Error),
}

/// libpq's `sslmode` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Plain only.
    Disable,
    /// TLS when the server offers it, unchecked; plain otherwise (libpq's default).
    Prefer,
    /// TLS, its certificate unchecked (checked against `sslrootcert` when one is given, as
    /// libpq does).
    Require,
    /// TLS, the certificate signed by the CA in `sslrootcert`, any host name.
    VerifyCa,
    /// TLS, the certificate signed by the CA and naming the host connected to.
    VerifyFull,
}

impl FromStr for SslMode {
    type Err = TlsError;
    fn from_str(s: &str) -> Result<SslMode, TlsError> {
        Ok(match s {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => return Err(TlsError::BadMode(other.to_owned())),
        })
    }
}

impl SslMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// A database URL split into what tokio-postgres reads and the TLS parameters berth reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgUrl {
    /// The URL without `sslmode`, `sslrootcert`, `sslcert` and `sslkey`.
    pub rest: String,
    pub mode: SslMode,
    pub root_cert: Option<PathBuf>,
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
}

const TLS_KEYS: [&str; 4] = ["sslmode", "sslrootcert", "sslcert", "sslkey"];

impl PgUrl {
    /// Reads a URL (`postgres://user@host/db?sslmode=verify-full&sslrootcert=/etc/ca.pem`) or
    /// a key=value string (`host=db sslmode=require`, values without spaces). Pure.
    pub fn parse(url: &str) -> Result<PgUrl, TlsError> {
        let mut found: Vec<(String, String)> = Vec::new();
        let rest = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let (head, query) = match url.split_once('?') {
                Some((head, query)) => (head, query),
                None => (url, ""),
            };
            let mut kept = Vec::new();
            for pair in query.split('&').filter(|p| !p.is_empty()) {
                let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                if TLS_KEYS.contains(&key) {
                    found.push((key.to_owned(), percent_decode(value)?));
                } else {
                    kept.push(pair);
                }
            }
            if kept.is_empty() {
                head.to_owned()
            } else {
                format!("{head}?{}", kept.join("&"))
            }
        } else {
            let mut kept = Vec::new();
            for word in url.split_whitespace() {
                match word.split_once('=') {
                    Some((key, value)) if TLS_KEYS.contains(&key.trim()) => {
                        found.push((key.trim().to_owned(), value.trim_matches('\'').to_owned()))
                    }
                    _ => kept.push(word),
                }
            }
            kept.join(" ")
        };
        let value = |key: &str| {
            found
                .iter()
                .rev()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
        };
        let mode = match value("sslmode") {
            Some(mode) => mode.parse()?,
            None => SslMode::Prefer,
        };
        let parsed = PgUrl {
            rest,
            mode,
            root_cert: value("sslrootcert").map(PathBuf::from),
            client_cert: value("sslcert").map(PathBuf::from),
            client_key: value("sslkey").map(PathBuf::from),
        };
        if parsed.client_cert.is_some() != parsed.client_key.is_some() {
            return Err(TlsError::HalfClientCert);
        }
        Ok(parsed)
    }

    /// The check the server's certificate gets: libpq's `require` with a root certificate is
    /// `verify-ca`.
    pub fn effective_mode(&self) -> SslMode {
        match (self.mode, &self.root_cert) {
            (SslMode::Require, Some(_)) => SslMode::VerifyCa,
            (mode, _) => mode,
        }
    }

    /// Whether connections are encrypted for sure (not `disable`, not `prefer`).
    pub fn encrypts(&self) -> bool {
        !matches!(self.mode, SslMode::Disable | SslMode::Prefer)
    }

    /// tokio-postgres's configuration for the URL, its `sslmode` the one it knows that
    /// matches (`verify-*`: `require`).
    pub fn config(&self) -> Result<tokio_postgres::Config, TlsError> {
        let mut config = tokio_postgres::Config::from_str(&self.rest)
            .map_err(|e| TlsError::BadUrl(e.to_string()))?;
        config.ssl_mode(match self.mode {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            _ => tokio_postgres::config::SslMode::Require,
        });
        Ok(config)
    }

    /// The rustls connector for this URL: reads `sslrootcert`, `sslcert` and `sslkey`.
    pub fn connector(&self) -> Result<MakeRustlsConnect, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?;
        let verifier: Arc<dyn ServerCertVerifier> = match self.effective_mode() {
            SslMode::Disable | SslMode::Prefer | SslMode::Require => {
                Arc::new(Unchecked(provider.clone()))
            }
            mode @ (SslMode::VerifyCa | SslMode::VerifyFull) => {
                let name = if mode == SslMode::VerifyCa {
                    "verify-ca"
                } else {
                    "verify-full"
                };
                let file = self
                    .root_cert
                    .as_deref()
                    .ok_or(TlsError::NoRootCert(name))?;
                let roots = Arc::new(root_store(file)?);
                let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
                    .build()
                    .map_err(|e| TlsError::File {
                        path: file.to_owned(),
                        why: e.to_string(),
                    })?;
                if mode == SslMode::VerifyCa {
                    Arc::new(AnyName(webpki))
                } else {
                    webpki
                }
            }
        };
        let builder = builder
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let config = match (&self.client_cert, &self.client_key) {
            (Some(cert), Some(key)) => {
                builder.with_client_auth_cert(certificates(cert)?, private_key(key)?)?
            }
            _ => builder.with_no_client_auth(),
        };
        Ok(MakeRustlsConnect::new(config))
    }
}

/// Installs ring as the process's rustls provider, for the libraries that build their TLS
/// from it (reqwest, the OTLP exporter): call it at the start of every process that speaks
/// HTTP. A second call changes nothing.
pub fn use_ring() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Connects to the database at `url` as its `sslmode` says; the connection is the caller's
/// to drive (spawn it).
pub async fn connect(url: &str) -> Result<(tokio_postgres::Client, Connection), TlsError> {
    let url = PgUrl::parse(url)?;
    Ok(url.config()?.connect(url.connector()?).await?)
}

/// Connects with `config` (the one [`PgUrl::config`] made, perhaps changed) and `url`'s TLS.
pub async fn connect_with(
    url: &PgUrl,
    config: &tokio_postgres::Config,
) -> Result<(tokio_postgres::Client, Connection), TlsError> {
    Ok(config.connect(url.connector()?).await?)
}

/// A deadpool manager for the database at `url`, its connections made as `sslmode` says.
pub fn pool_manager(
    url: &str,
    manager: deadpool_postgres::ManagerConfig,
) -> Result<deadpool_postgres::Manager, TlsError> {
    let url = PgUrl::parse(url)?;
    Ok(deadpool_postgres::Manager::from_config(
        url.config()?,
        url.connector()?,
        manager,
    ))
}

/// Whether `url` names a host other than this one (loopback, a Unix socket) and its
/// connections are not sure to be encrypted: berth says so once at start. Pure.
pub fn plain_off_host(url: &str) -> bool {
    let Ok(parsed) = PgUrl::parse(url) else {
        return false;
    };
    let Ok(config) = parsed.config() else {
        return false;
    };
    !parsed.encrypts()
        && config.get_hosts().iter().any(|host| match host {
            tokio_postgres::config::Host::Tcp(name) => !is_loopback(name),
            #[cfg(unix)]
            tokio_postgres::config::Host::Unix(_) => false,
        })
}

/// Whether `host` (a name or an address) is this machine. Pure.
pub fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn percent_decode(value: &str) -> Result<String, TlsError> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = value
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| TlsError::BadUrl(format!("bad percent-encoding in `{value}`")))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|e| TlsError::BadUrl(e.to_string()))
}

fn file_error(path: &Path, why: impl std::fmt::Display) -> TlsError {
    TlsError::File {
        path: path.to_owned(),
        why: why.to_string(),
    }
}

/// The certificates in the PEM file at `path`.
pub fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(path, e))?;
    if certs.is_empty() {
        return Err(file_error(path, "holds no PEM certificate"));
    }
    Ok(certs)
}

/// The private key in the PEM file at `path`.
pub fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| file_error(path, e))
}

/// The CA certificates in the PEM file at `path`, as roots.
pub fn root_store(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(path)? {
        roots.add(cert).map_err(|e| file_error(path, e))?;
    }
    Ok(roots)
}

/// `sslmode=require` (and `prefer`): encrypted, the certificate not checked, its signature on
/// the handshake still verified.
#[derive(Debug)]
struct Unchecked(Arc<CryptoProvider>);

impl ServerCertVerifier for Unchecked {
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

/// `sslmode=verify-ca`: the chain checked against the CA, the host name not.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            checked => checked,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_without_tls_parameters_is_kept_and_prefers_tls() {
        let url = PgUrl::parse("postgres://berth@db:5432/berth?connect_timeout=5").unwrap();
        assert_eq!(url.rest, "postgres://berth@db:5432/berth?connect_timeout=5");
        assert_eq!(url.mode, SslMode::Prefer);
        assert!(!url.encrypts());
        assert_eq!(url.root_cert, None);
    }

    #[test]
    fn the_tls_parameters_are_taken_out_of_a_url() {
        let url = PgUrl::parse(
            "postgresql://u:p@db/berth?sslmode=verify-full&application_name=x&sslrootcert=%2Fetc%2Fca.pem&sslcert=/c.pem&sslkey=/k.pem",
        )
        .unwrap();
        assert_eq!(url.rest, "postgresql://u:p@db/berth?application_name=x");
        assert_eq!(url.mode, SslMode::VerifyFull);
        assert_eq!(url.root_cert.as_deref(), Some(Path::new("/etc/ca.pem")));
        assert_eq!(url.client_cert.as_deref(), Some(Path::new("/c.pem")));
        assert_eq!(url.client_key.as_deref(), Some(Path::new("/k.pem")));
        assert!(url.encrypts());
        url.config().expect("tokio-postgres takes what is left");
    }

    #[test]
    fn the_tls_parameters_are_taken_out_of_key_value_form() {
        let url =
            PgUrl::parse("host=db user=berth sslmode=verify-ca sslrootcert='/ca.pem'").unwrap();
        assert_eq!(url.rest, "host=db user=berth");
        assert_eq!(url.mode, SslMode::VerifyCa);
        assert_eq!(url.root_cert.as_deref(), Some(Path::new("/ca.pem")));
    }

    #[test]
    fn every_mode_is_read_and_an_unknown_one_is_refused() {
        for mode in ["disable", "prefer", "require", "verify-ca", "verify-full"] {
            let url = PgUrl::parse(&format!("postgres://h/d?sslmode={mode}")).unwrap();
            assert_eq!(url.mode.as_str(), mode);
        }
        let refused = PgUrl::parse("postgres://h/d?sslmode=allow-maybe").unwrap_err();
        assert!(refused.to_string().contains("allow-maybe"), "{refused}");
    }

    #[test]
    fn require_with_a_root_certificate_checks_the_ca_as_libpq_does() {
        let url = PgUrl::parse("postgres://h/d?sslmode=require&sslrootcert=/ca.pem").unwrap();
        assert_eq!(url.effective_mode(), SslMode::VerifyCa);
        let url = PgUrl::parse("postgres://h/d?sslmode=require").unwrap();
        assert_eq!(url.effective_mode(), SslMode::Require);
    }

    #[test]
    fn a_client_certificate_without_its_key_is_refused() {
        assert!(matches!(
            PgUrl::parse("postgres://h/d?sslcert=/c.pem"),
            Err(TlsError::HalfClientCert)
        ));
    }

    #[test]
    fn verifying_without_a_root_certificate_is_refused_naming_the_parameter() {
        let url = PgUrl::parse("postgres://h/d?sslmode=verify-full").unwrap();
        let refused = url.connector().err().expect("no CA to check against");
        assert!(refused.to_string().contains("sslrootcert"), "{refused}");
    }

    #[test]
    fn only_plain_connections_off_this_host_are_flagged() {
        assert!(plain_off_host("postgres://u@db.example:5432/berth"));
        assert!(plain_off_host("postgres://u@10.0.0.5/berth?sslmode=prefer"));
        assert!(!plain_off_host("postgres://u@127.0.0.1:5432/berth"));
        assert!(!plain_off_host("postgres://u@localhost/berth"));
        assert!(!plain_off_host("postgres://u@[::1]/berth"));
        assert!(!plain_off_host(
            "postgres://u@db.example/berth?sslmode=require"
        ));
    }
}
