//! End to end: TLS both ways. The HTTPS listener (HTTP/1.1 and HTTP/2 by ALPN, a certificate
//! swapped on reload, a bad file refused, handshakes that cannot starve the others) and `https`
//! origins (a private CA, SNI override, wrong names and expired certificates refused, pooling).
//! Certificates are made at test time with rcgen.

use crate::common;

use std::time::Duration;

use common::tls::{HttpsConnection, Pki, TlsFront, get_once};
use common::{Client, Origin, ProxyConfig, ProxyProcess, Reply, TempDir, has_member};
use http::StatusCode;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const BOTH: &[&[u8]] = &[b"h2", b"http/1.1"];
const H1: &[&[u8]] = &[b"http/1.1"];

fn quoted(path: &std::path::Path) -> String {
    format!("\"{}\"", path.display())
}

/// A proxy config with an HTTPS listener on the given certificate files.
fn with_tls(origin: &str, leaf: &common::tls::Leaf) -> ProxyConfig {
    let mut config = ProxyConfig::new(origin);
    config
        .set("server.tls", "listen", "\"127.0.0.1:0\"")
        .set("server.tls", "cert_file", &quoted(&leaf.cert_file))
        .set("server.tls", "key_file", &quoted(&leaf.key_file));
    config
}

fn tls_addr(proxy: &ProxyProcess) -> std::net::SocketAddr {
    proxy.tls_addr.expect("the proxy printed its https address")
}

#[tokio::test]
async fn https_clients_get_http1_and_h2_by_alpn_and_the_origin_hears_https() {
    let origin = Origin::start();
    origin.set(
        "/page",
        Reply::ok("over tls").header("cache-control", "max-age=60"),
    );
    let pki = Pki::new("alpn");
    let leaf = pki.leaf(&["localhost"]);
    let proxy = with_tls(&origin.url(), &leaf).mode("off").start();
    let addr = tls_addr(&proxy);

    let h1 = get_once(&pki, addr, H1, "/page").await;
    assert_eq!(h1.status, StatusCode::OK);
    assert_eq!(h1.alpn.as_deref(), Some(&b"http/1.1"[..]));
    assert_eq!(&h1.body[..], b"over tls");
    assert_eq!(h1.certificate.as_ref(), Some(&leaf.der));
    let received = origin.received("/page");
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].header("x-forwarded-proto"), Some("https"));

    let h2 = get_once(&pki, addr, BOTH, "/page").await;
    assert_eq!(h2.alpn.as_deref(), Some(&b"h2"[..]));
    assert_eq!(h2.status, StatusCode::OK);
    assert_eq!(&h2.body[..], b"over tls");
    let status = h2.header("cache-status").expect("Cache-Status");
    assert!(has_member(status, "hit"), "{status}");
    assert_eq!(origin.count("/page"), 1);

    // TLS 1.2 and 1.3 are both spoken.
    for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
        let tcp = TcpStream::connect(addr).await.expect("connect");
        let connector = tokio_rustls::TlsConnector::from(pki.client_config_for(H1, &[version]));
        let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
        let stream = connector.connect(name, tcp).await.expect("handshake");
        assert_eq!(stream.get_ref().1.protocol_version(), Some(version.version));
    }

    // The plain listener goes on serving beside it, and says http to the origin.
    let plain = Client::new().get(&proxy.url("/other")).await;
    assert_eq!(plain.status, StatusCode::NOT_FOUND);
    assert_eq!(
        origin.received("/other")[0].header("x-forwarded-proto"),
        Some("http")
    );
}

#[tokio::test]
async fn with_the_scheme_in_the_key_a_plain_client_claiming_https_cannot_reach_https_entries() {
    let origin = Origin::start();
    origin.set(
        "/account",
        Reply::ok("https copy").header("cache-control", "max-age=60"),
    );
    let pki = Pki::new("scheme");
    let leaf = pki.leaf(&["localhost"]);
    let mut config = with_tls(&origin.url(), &leaf);
    config
        .mode("off")
        .set("cache.key", "include_scheme", "true");
    let proxy = config.start();
    let stored = get_once(&pki, tls_addr(&proxy), H1, "/account").await;
    assert_eq!(stored.status, StatusCode::OK);
    assert_eq!(origin.count("/account"), 1);

    // Absolute form over plain TCP names https: the key must still say http.
    let request =
        b"GET https://localhost/account HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    let raw = common::raw_exchange(proxy.addr, request, Duration::from_secs(3)).await;
    assert_eq!(common::raw_status(&raw), Some(200), "{raw}");
    assert!(
        raw.to_ascii_lowercase().contains("fwd=miss"),
        "a plain request was answered from the https entry:\n{raw}"
    );
    assert_eq!(origin.count("/account"), 2);
    let again = get_once(&pki, tls_addr(&proxy), H1, "/account").await;
    assert!(has_member(
        again.header("cache-status").unwrap_or(""),
        "hit"
    ));
}

#[tokio::test]
async fn a_reload_swaps_the_certificate_and_open_connections_go_on() {
    let origin = Origin::start();
    origin.set("/x", Reply::ok("x"));
    let pki = Pki::new("reload");
    let first = pki.leaf(&["localhost"]);
    let second = pki.leaf(&["localhost"]);
    let dir = TempDir::new("tls-reload");
    let path = dir.join("bloomgate.toml");
    let proxy = with_tls(&origin.url(), &first).start_with_file(&path);
    let addr = tls_addr(&proxy);
    let mut open = HttpsConnection::open(&pki, addr, H1).await;
    assert_eq!(open.get("/x").await.certificate.as_ref(), Some(&first.der));

    // A renewal in place: same paths, new files.
    second.copy_over(&first);
    let client = Client::new();
    let reloaded = common::reload(&client, &proxy).await;
    assert_eq!(reloaded.status, StatusCode::OK, "{}", reloaded.text());
    assert!(
        reloaded.text().contains("server.tls.certificate"),
        "{}",
        reloaded.text()
    );

    let fresh = get_once(&pki, addr, H1, "/x").await;
    assert_eq!(fresh.certificate.as_ref(), Some(&second.der));
    // The same files again: read, and said to be unchanged.
    let again = common::reload(&client, &proxy).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.text());
    assert!(
        !again.text().contains("server.tls.certificate"),
        "{}",
        again.text()
    );
    let on_old = open.get("/x").await;
    assert_eq!(on_old.status, StatusCode::OK);
    assert_eq!(on_old.certificate.as_ref(), Some(&first.der));
}

#[tokio::test]
async fn a_bad_certificate_file_at_reload_keeps_the_old_one_and_the_error_names_the_file() {
    let origin = Origin::start();
    origin.set("/x", Reply::ok("x"));
    let pki = Pki::new("badreload");
    let leaf = pki.leaf(&["localhost"]);
    let other = pki.leaf(&["localhost"]);
    let dir = TempDir::new("tls-badreload");
    let path = dir.join("bloomgate.toml");
    let proxy = with_tls(&origin.url(), &leaf).start_with_file(&path);
    let addr = tls_addr(&proxy);
    let client = Client::new();

    std::fs::write(
        &leaf.cert_file,
        "-----BEGIN CERTIFICATE-----\nnot base64!\n",
    )
    .expect("write");
    let refused = common::reload(&client, &proxy).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    let text = refused.text();
    assert!(
        text.contains(&leaf.cert_file.display().to_string()),
        "{text}"
    );
    let served = get_once(&pki, addr, H1, "/x").await;
    assert_eq!(served.certificate.as_ref(), Some(&leaf.der));

    // A key that belongs to another certificate: both files named, the old pair kept.
    std::fs::copy(&other.cert_file, &leaf.cert_file).expect("copy cert");
    let mismatch = common::reload(&client, &proxy).await;
    assert_eq!(mismatch.status, StatusCode::BAD_REQUEST);
    let text = mismatch.text();
    assert!(text.contains("does not belong"), "{text}");
    assert!(
        text.contains(&leaf.key_file.display().to_string()),
        "{text}"
    );
    let served = get_once(&pki, addr, H1, "/x").await;
    assert_eq!(served.certificate.as_ref(), Some(&leaf.der));
}

#[test]
fn a_missing_certificate_at_start_stops_the_proxy_naming_the_file() {
    let dir = TempDir::new("tls-missing");
    let config = dir.join("bloomgate.toml");
    let missing = dir.join("nowhere.pem");
    let text = ProxyConfig::new("http://127.0.0.1:9")
        .set("server.tls", "listen", "\"127.0.0.1:0\"")
        .set("server.tls", "cert_file", &quoted(&missing))
        .set("server.tls", "key_file", &quoted(&missing))
        .text();
    std::fs::write(&config, text).expect("write config");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_bloomgate"))
        .args(["serve", "--config"])
        .arg(&config)
        .output()
        .expect("run bloomgate");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(&missing.display().to_string()), "{stderr}");

    let check = std::process::Command::new(env!("CARGO_BIN_EXE_bloomgate"))
        .arg("check-config")
        .arg(&config)
        .output()
        .expect("run check-config");
    assert!(!check.status.success());
    let stderr = String::from_utf8_lossy(&check.stderr);
    assert!(
        stderr.contains("server.tls") && stderr.contains(&missing.display().to_string()),
        "{stderr}"
    );
}

#[tokio::test]
async fn stalled_handshakes_are_cut_off_and_do_not_starve_other_clients() {
    let origin = Origin::start();
    origin.set("/x", Reply::ok("served"));
    let pki = Pki::new("flood");
    let leaf = pki.leaf(&["localhost"]);
    let mut config = with_tls(&origin.url(), &leaf);
    config.set("server", "header_read_timeout", "\"1s\"");
    let proxy = config.start();
    let addr = tls_addr(&proxy);

    // Half a ClientHello on some, nothing at all on others: none of them will ever finish.
    let mut stalled = Vec::new();
    for n in 0..200 {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        if n % 2 == 0 {
            stream
                .write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00])
                .await
                .expect("partial hello");
        }
        stalled.push(stream);
    }
    // Were handshakes done one at a time, this would wait for 200 of them to time out (200 s).
    let served = tokio::time::timeout(Duration::from_secs(10), get_once(&pki, addr, H1, "/x"))
        .await
        .expect("a good client is served while 200 handshakes stall");
    assert_eq!(&served.body[..], b"served");
    let closed = common::client::closed_within(&mut stalled[0], Duration::from_secs(8)).await;
    assert!(closed.is_some(), "a stalled handshake was never cut off");
    let scrape = common::scrape_until(&Client::new(), &proxy, |scrape| {
        common::metric(
            scrape,
            "bloomgate_tls_handshakes_total{outcome=\"timeout\"}",
        ) >= 1.0
    })
    .await;
    assert!(
        common::metric(
            &scrape,
            "bloomgate_tls_handshakes_total{outcome=\"timeout\"}"
        ) >= 1.0
    );
    assert!(common::metric(&scrape, "bloomgate_tls_handshakes_total{outcome=\"ok\"}") >= 1.0);
}

/// A proxy in front of `front` (an `https` origin), trusting `pki`'s CA.
fn https_origin_proxy(url: &str, pki: &Pki, server_name: Option<&str>) -> ProxyProcess {
    let mut config = ProxyConfig::new(url);
    config
        .mode("off")
        .set("origin", "ca_file", &quoted(&pki.ca_file()));
    if let Some(name) = server_name {
        config.set("origin", "tls_server_name", &format!("\"{name}\""));
    }
    config.start()
}

#[tokio::test]
async fn an_https_origin_is_verified_against_its_ca_and_its_connections_are_pooled() {
    let origin = Origin::start();
    for path in ["/one", "/two", "/three"] {
        origin.set(path, Reply::ok(path).header("cache-control", "no-store"));
    }
    let pki = Pki::new("origin-ok");
    let front = TlsFront::start(&pki.leaf(&["localhost"]), origin.addr).await;
    let url = format!("https://localhost:{}", front.addr.port());
    let proxy = https_origin_proxy(&url, &pki, None);
    let client = Client::new();
    for path in ["/one", "/two", "/three"] {
        let reply = client.get(&proxy.url(path)).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
        assert_eq!(reply.text(), path);
    }
    assert_eq!(
        front.handshakes(),
        1,
        "keep-alive connections to the origin are reused"
    );
    assert_eq!(origin.count("/two"), 1);
}

#[tokio::test]
async fn tls_server_name_sets_the_name_checked_for_an_origin_reached_by_address() {
    let origin = Origin::start();
    origin.set("/", Reply::ok("by name"));
    let pki = Pki::new("origin-sni");
    let front = TlsFront::start(&pki.leaf(&["origin.internal"]), origin.addr).await;
    let url = format!("https://127.0.0.1:{}", front.addr.port());
    let named = https_origin_proxy(&url, &pki, Some("origin.internal"));
    let reply = Client::new().get(&named.url("/")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    assert_eq!(reply.text(), "by name");
    // Without it, the address is the name, and the certificate does not carry it.
    let unnamed = https_origin_proxy(&url, &pki, None);
    let refused = Client::new().get(&unnamed.url("/")).await;
    assert_eq!(refused.status, StatusCode::BAD_GATEWAY);
}

/// An https origin (a TLS front made by `leaf` from `pki`) that the proxy must refuse: a 502 that
/// says the origin's TLS failed, a log line with `why`, and the origin never asked. With
/// `trust_ca` the proxy trusts `pki` through `origin.ca_file`; without, only the system's roots.
async fn assert_origin_refused(
    name: &str,
    leaf: impl FnOnce(&Pki) -> common::tls::Leaf,
    trust_ca: bool,
    why: &str,
) {
    let origin = Origin::start();
    origin.set("/", Reply::ok("must not be seen"));
    let pki = Pki::new(name);
    let front = TlsFront::start(&leaf(&pki), origin.addr).await;
    let url = format!("https://localhost:{}", front.addr.port());
    let proxy = match trust_ca {
        true => https_origin_proxy(&url, &pki, None),
        false => ProxyConfig::new(&url).start(),
    };
    let reply = Client::new().get(&proxy.url("/")).await;
    assert_eq!(reply.status, StatusCode::BAD_GATEWAY, "{}", reply.text());
    assert!(
        has_member(reply.cache_status(), "detail=origin-tls-error"),
        "{}\n{}",
        reply.cache_status(),
        proxy.log()
    );
    assert_eq!(reply.text(), "origin TLS handshake failed\n");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !proxy.log().contains(why) {
        assert!(
            std::time::Instant::now() < deadline,
            "no log line with {why:?}:\n{}",
            proxy.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(origin.count("/"), 0);
}

#[tokio::test]
async fn an_origin_certificate_for_another_name_is_refused_with_a_502() {
    let leaf = |pki: &Pki| pki.leaf(&["other.example"]);
    assert_origin_refused("origin-name", leaf, true, "not valid for name").await;
}

#[tokio::test]
async fn an_expired_origin_certificate_is_refused_with_a_502() {
    let leaf = |pki: &Pki| pki.expired_leaf(&["localhost"]);
    assert_origin_refused("origin-expired", leaf, true, "expired").await;
}

#[tokio::test]
async fn without_ca_file_a_private_ca_is_not_trusted() {
    // The system's roots come from Debian's ca-certificates; without any, the proxy refuses to
    // start with an https origin and no ca_file.
    if !std::path::Path::new("/etc/ssl/certs/ca-certificates.crt").exists() {
        eprintln!("skipped: no system root certificates (/etc/ssl/certs/ca-certificates.crt)");
        return;
    }
    let leaf = |pki: &Pki| pki.leaf(&["localhost"]);
    assert_origin_refused("origin-roots", leaf, false, "UnknownIssuer").await;
}
