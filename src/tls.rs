//! TLS both ways, with rustls (ring): the HTTPS listener's certificate, swapped on reload without
//! dropping a connection, and the verification of an `https` origin.
//!
//! Nothing here is tunable on purpose: TLS 1.3 and 1.2 only with rustls' cipher suites (all AEAD,
//! forward secret), no renegotiation, no compression, certificate verification always on.
//!
//! It reads the files the configuration names, but knows nothing of the configuration itself, so
//! that `check-config` reads them as `serve` does.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// What went wrong with a TLS file or setting; every variant names the file or key at fault.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {problem}")]
    File { path: PathBuf, problem: String },
    #[error("{cert}, {key}: the key does not belong to the certificate ({problem})")]
    Mismatch {
        cert: PathBuf,
        key: PathBuf,
        problem: String,
    },
    #[error(
        "origin.url: no usable root certificates on this system to verify the origin with ({problem}); set origin.ca_file"
    )]
    NoSystemRoots { problem: String },
    #[error("origin.tls_server_name: {0:?} is not a DNS name or an IP address")]
    ServerName(String),
    #[error("TLS: {0}")]
    Rustls(#[from] rustls::Error),
}

impl TlsError {
    fn file(path: &Path, problem: impl ToString) -> TlsError {
        TlsError::File {
            path: path.to_owned(),
            problem: problem.to_string(),
        }
    }
}

/// The one cryptographic provider: ring (no C toolchain beyond a C compiler, no OpenSSL).
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

const PROTOCOLS: &[&rustls::SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];

/// Reads the certificates of a PEM file, in order; an empty file or one with no certificate is an
/// error naming it.
fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certificates = CertificateDer::pem_file_iter(path)
        .map_err(|error| TlsError::file(path, pem_problem(&error)))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| TlsError::file(path, pem_problem(&error)))?;
    if certificates.is_empty() {
        return Err(TlsError::file(path, "no PEM certificate in the file"));
    }
    Ok(certificates)
}

fn pem_problem(error: &rustls_pki_types::pem::Error) -> String {
    match error {
        rustls_pki_types::pem::Error::Io(io) => io.to_string(),
        rustls_pki_types::pem::Error::NoItemsFound => "no PEM item of the expected kind".to_owned(),
        other => format!("not valid PEM ({other:?})"),
    }
}

/// The listener's certificate chain (`server.tls.cert_file`) and key (`server.tls.key_file`),
/// checked to belong together.
fn read_certified_key(cert_file: &Path, key_file: &Path) -> Result<CertifiedKey, TlsError> {
    let chain = read_certificates(cert_file)?;
    let key = PrivateKeyDer::from_pem_file(key_file)
        .map_err(|error| TlsError::file(key_file, pem_problem(&error)))?;
    CertifiedKey::from_der(chain, key, &provider()).map_err(|error| match error {
        rustls::Error::InconsistentKeys(_) => TlsError::Mismatch {
            cert: cert_file.to_owned(),
            key: key_file.to_owned(),
            problem: error.to_string(),
        },
        other => TlsError::file(key_file, other),
    })
}

/// The HTTPS listener's certificate: read at start, read again on every reload. A handshake uses
/// whichever certificate is current when it starts; connections already open keep theirs.
#[derive(Debug)]
pub struct Certificates {
    current: ArcSwap<CertifiedKey>,
}

impl Certificates {
    pub fn load(cert_file: &Path, key_file: &Path) -> Result<Certificates, TlsError> {
        Ok(Certificates {
            current: ArcSwap::from_pointee(read_certified_key(cert_file, key_file)?),
        })
    }

    /// Reads a certificate and key for [`Certificates::install`], checked to belong together.
    pub fn read(cert_file: &Path, key_file: &Path) -> Result<CertifiedKey, TlsError> {
        read_certified_key(cert_file, key_file)
    }

    /// Makes `fresh` the certificate of every handshake from now on; returns whether its chain
    /// differs from the one it replaces.
    pub fn install(&self, fresh: CertifiedKey) -> bool {
        let changed = self.current.load().cert != fresh.cert;
        self.current.store(Arc::new(fresh));
        changed
    }

    /// The rustls configuration of the listener: this certificate store, ALPN `h2` then
    /// `http/1.1`, TLS 1.3 and 1.2.
    pub fn server_config(self: &Arc<Self>) -> Result<Arc<ServerConfig>, rustls::Error> {
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(PROTOCOLS)?
            .with_no_client_auth()
            .with_cert_resolver(Arc::clone(self) as Arc<dyn ResolvesServerCert>);
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

impl ResolvesServerCert for Certificates {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// The rustls configuration for an `https` origin: its certificate verified against `ca_file`
/// (`origin.ca_file`), or the system's roots when there is none. (The connector offers ALPN
/// `http/1.1` itself: the origin client speaks HTTP/1.1.)
pub fn origin_client_config(ca_file: Option<&Path>) -> Result<ClientConfig, TlsError> {
    let mut roots = RootCertStore::empty();
    match ca_file {
        Some(path) => {
            for certificate in read_certificates(path)? {
                roots
                    .add(certificate)
                    .map_err(|error| TlsError::file(path, error))?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for error in &found.errors {
                tracing::warn!(%error, "a system root certificate could not be read");
            }
            let (_added, _ignored) = roots.add_parsable_certificates(found.certs);
            if roots.is_empty() {
                let problem = match found.errors.first() {
                    Some(error) => error.to_string(),
                    None => "none found".to_owned(),
                };
                return Err(TlsError::NoSystemRoots { problem });
            }
        }
    }
    Ok(ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(PROTOCOLS)?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// A client configuration that trusts nothing, for the TLS layer of a plain-HTTP origin's client,
/// which never makes a TLS connection.
pub fn no_roots_client_config() -> Result<ClientConfig, TlsError> {
    Ok(ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(PROTOCOLS)?
        .with_root_certificates(RootCertStore::empty())
        .with_no_client_auth())
}
