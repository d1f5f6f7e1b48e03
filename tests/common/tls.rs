//! TLS for the tests: certificates made at test time (rcgen), an HTTPS client of either protocol
//! with its own trust, and a TLS front for the plain test origin (so an `https` origin has every
//! behaviour of [`super::Origin`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::TempDir;

/// A private certificate authority, and the certificates it issues, written as PEM files.
pub struct Pki {
    pub dir: TempDir,
    issuer: Issuer<'static, KeyPair>,
    ca_der: CertificateDer<'static>,
    issued: AtomicUsize,
}

/// A leaf certificate's files, and its DER to compare with what a server presents.
pub struct Leaf {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub der: CertificateDer<'static>,
    cert_pem: String,
    key_pem: String,
}

impl Leaf {
    /// Writes this certificate and key over the files of `other` (a renewal in place).
    pub fn copy_over(&self, other: &Leaf) {
        std::fs::write(&other.cert_file, &self.cert_pem).expect("write cert");
        std::fs::write(&other.key_file, &self.key_pem).expect("write key");
    }
}

impl Pki {
    pub fn new(name: &str) -> Pki {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(
            rcgen::DnType::CommonName,
            format!("bloomgate test CA {name}"),
        );
        let key = KeyPair::generate().expect("CA key");
        let certificate = params.self_signed(&key).expect("CA certificate");
        let dir = TempDir::new(&format!("tls-{name}"));
        std::fs::write(dir.join("ca.pem"), certificate.pem()).expect("write CA");
        Pki {
            dir,
            ca_der: certificate.der().clone(),
            issuer: Issuer::new(params, key),
            issued: AtomicUsize::new(0),
        }
    }

    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// A certificate for `names`, valid now.
    pub fn leaf(&self, names: &[&str]) -> Leaf {
        self.leaf_with(names, |_| {})
    }

    /// A certificate for `names` whose validity ended in 2001.
    pub fn expired_leaf(&self, names: &[&str]) -> Leaf {
        self.leaf_with(names, |params| {
            params.not_before = rcgen::date_time_ymd(2000, 1, 1);
            params.not_after = rcgen::date_time_ymd(2001, 1, 1);
        })
    }

    fn leaf_with(&self, names: &[&str], adjust: impl FnOnce(&mut CertificateParams)) -> Leaf {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).expect("leaf params");
        adjust(&mut params);
        let key = KeyPair::generate().expect("leaf key");
        let certificate = params.signed_by(&key, &self.issuer).expect("leaf");
        let n = self.issued.fetch_add(1, Ordering::Relaxed);
        let cert_file = self.dir.join(&format!("leaf-{n}.pem"));
        let key_file = self.dir.join(&format!("leaf-{n}.key"));
        let (cert_pem, key_pem) = (certificate.pem(), key.serialize_pem());
        std::fs::write(&cert_file, &cert_pem).expect("write leaf");
        std::fs::write(&key_file, &key_pem).expect("write key");
        Leaf {
            cert_file,
            key_file,
            der: certificate.der().clone(),
            cert_pem,
            key_pem,
        }
    }

    /// A client configuration that trusts this CA only, offering `alpn`.
    pub fn client_config(&self, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
        self.client_config_for(alpn, rustls::DEFAULT_VERSIONS)
    }

    /// Like [`Pki::client_config`], offering only the TLS `versions` given.
    pub fn client_config_for(
        &self,
        alpn: &[&[u8]],
        versions: &[&'static rustls::SupportedProtocolVersion],
    ) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca_der.clone()).expect("CA root");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(versions)
            .expect("protocol versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Arc::new(config)
    }
}

/// An HTTPS connection to `addr` (name `localhost`) that trusts `pki`, offering `alpn`.
pub async fn connect(
    pki: &Pki,
    addr: SocketAddr,
    alpn: &[&[u8]],
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let connector = TlsConnector::from(pki.client_config(alpn));
    let name = ServerName::try_from("localhost").expect("name");
    connector.connect(name, tcp).await
}

/// What one HTTPS request saw: the response, the protocol ALPN chose and the server's certificate.
pub struct HttpsReply {
    pub status: StatusCode,
    pub headers: http::HeaderMap,
    pub body: Bytes,
    pub alpn: Option<Vec<u8>>,
    pub certificate: Option<CertificateDer<'static>>,
}

impl HttpsReply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// An open HTTPS connection speaking HTTP/1.1 or HTTP/2 (whichever ALPN chose).
pub struct HttpsConnection {
    sender: Sender,
    alpn: Option<Vec<u8>>,
    certificate: Option<CertificateDer<'static>>,
}

enum Sender {
    H1(hyper::client::conn::http1::SendRequest<Empty<Bytes>>),
    H2(hyper::client::conn::http2::SendRequest<Empty<Bytes>>),
}

impl HttpsConnection {
    /// Connects and completes the handshake; HTTP/2 when `h2` was offered and chosen.
    pub async fn open(pki: &Pki, addr: SocketAddr, alpn: &[&[u8]]) -> HttpsConnection {
        let stream = connect(pki, addr, alpn).await.expect("TLS handshake");
        let (_, session) = stream.get_ref();
        let chosen = session.alpn_protocol().map(<[u8]>::to_vec);
        let certificate = session
            .peer_certificates()
            .and_then(|chain| chain.first())
            .map(|c| c.clone().into_owned());
        let io = TokioIo::new(stream);
        let sender = if chosen.as_deref() == Some(b"h2") {
            let (sender, connection) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                    .await
                    .expect("h2 handshake");
            tokio::spawn(connection);
            Sender::H2(sender)
        } else {
            let (sender, connection) = hyper::client::conn::http1::handshake(io)
                .await
                .expect("h1 handshake");
            tokio::spawn(connection);
            Sender::H1(sender)
        };
        HttpsConnection {
            sender,
            alpn: chosen,
            certificate,
        }
    }

    /// GET `path` with Host `localhost`.
    pub async fn get(&mut self, path: &str) -> HttpsReply {
        let h2 = matches!(self.sender, Sender::H2(_));
        let uri = match h2 {
            true => format!("https://localhost{path}"),
            false => path.to_owned(),
        };
        let mut builder = Request::get(uri);
        if !h2 {
            builder = builder.header("host", "localhost");
        }
        let request = builder.body(Empty::new()).expect("request");
        let response = match &mut self.sender {
            Sender::H1(sender) => {
                sender.ready().await.expect("connection ready");
                sender.send_request(request).await
            }
            Sender::H2(sender) => {
                sender.ready().await.expect("connection ready");
                sender.send_request(request).await
            }
        }
        .expect("response");
        let (head, body) = response.into_parts();
        let body = body.collect().await.expect("body").to_bytes();
        HttpsReply {
            status: head.status,
            headers: head.headers,
            body,
            alpn: self.alpn.clone(),
            certificate: self.certificate.clone(),
        }
    }
}

/// One request on a new HTTPS connection.
pub async fn get_once(pki: &Pki, addr: SocketAddr, alpn: &[&[u8]], path: &str) -> HttpsReply {
    HttpsConnection::open(pki, addr, alpn).await.get(path).await
}

/// A TLS front for a plain origin: terminates TLS with `leaf` and relays the bytes to `upstream`.
/// Counts the handshakes it completed, to tell a pooled connection from a new one.
pub struct TlsFront {
    pub addr: SocketAddr,
    handshakes: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl TlsFront {
    pub async fn start(leaf: &Leaf, upstream: SocketAddr) -> TlsFront {
        let chain = vec![leaf.der.clone()];
        let key = PrivateKeyDer::from_pem_file(&leaf.key_file).expect("leaf key");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .expect("server config");
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind front");
        let addr = listener.local_addr().expect("front address");
        let handshakes = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn({
            let handshakes = Arc::clone(&handshakes);
            async move {
                while let Ok((tcp, _)) = listener.accept().await {
                    let acceptor = acceptor.clone();
                    let handshakes = Arc::clone(&handshakes);
                    tokio::spawn(async move {
                        let Ok(mut tls) = acceptor.accept(tcp).await else {
                            return;
                        };
                        handshakes.fetch_add(1, Ordering::Relaxed);
                        let Ok(mut plain) = TcpStream::connect(upstream).await else {
                            return;
                        };
                        let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                    });
                }
            }
        });
        TlsFront {
            addr,
            handshakes,
            task,
        }
    }

    pub fn handshakes(&self) -> usize {
        self.handshakes.load(Ordering::Relaxed)
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}
