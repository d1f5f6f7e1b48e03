//! The synthetic origin over real sockets: deterministic objects, 304s, counts, overrides.

use crate::origin_support;

use std::time::{Duration, Instant};

use bloomgate::cache::Head;
use bloomgate::traffic::origin::{LAST_MODIFIED, stored_head_bytes};
use bloomgate::traffic::pattern::object_bytes;
use bloomgate::traffic::{OriginOptions, start_origin};
use http::header::{HeaderMap, HeaderName, HeaderValue};
use origin_support::{RawConnection, get};

#[tokio::test]
async fn objects_are_deterministic_bytes_of_the_requested_size() {
    let origin = start_origin(OriginOptions::default()).await.unwrap();
    let first = get(origin.addr, "/obj/alpha?size=150000", &[]).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.content_length(), Some(150_000));
    assert_eq!(first.body, object_bytes("alpha", 150_000));
    assert_eq!(first.header("cache-control"), Some("public, max-age=3600"));
    assert_eq!(first.header("last-modified"), Some(LAST_MODIFIED));
    let etag = first.header("etag").unwrap();
    assert!(etag.starts_with('"') && etag.ends_with('"'), "{etag}");

    let again = get(origin.addr, "/obj/alpha?size=150000", &[]).await;
    assert_eq!(again.body, first.body);
    assert_eq!(again.header("etag"), Some(etag));

    let other = get(origin.addr, "/obj/beta?size=150000", &[]).await;
    assert_ne!(other.body, first.body);
    assert_ne!(other.header("etag"), Some(etag));
    let other_size = get(origin.addr, "/obj/alpha?size=10", &[]).await;
    assert_ne!(other_size.header("etag"), Some(etag));
}

#[tokio::test]
async fn percent_encoded_keys_are_decoded() {
    let origin = start_origin(OriginOptions::default()).await.unwrap();
    let response = get(origin.addr, "/obj/a%20b%2Fc?size=64", &[]).await;
    assert_eq!(response.body, object_bytes("a b/c", 64));
    assert_eq!(origin.stats.requests_for("a b/c"), 1);
}

#[tokio::test]
async fn conditional_requests_get_304_without_body() {
    let origin = start_origin(OriginOptions::default()).await.unwrap();
    let path = "/obj/cond?size=5000";
    let etag = get(origin.addr, path, &[])
        .await
        .header("etag")
        .unwrap()
        .to_owned();

    let mut connection = RawConnection::open(origin.addr).await;
    let wait = Duration::from_secs(5);
    let matching = connection
        .request("GET", path, &[("if-none-match", &etag)], wait)
        .await;
    assert_eq!(matching.status, 304);
    assert_eq!(matching.header("etag"), Some(etag.as_str()));
    assert!(matching.body.is_empty());

    let weak = connection
        .request(
            "GET",
            path,
            &[("if-none-match", &format!("\"x\", W/{etag}"))],
            wait,
        )
        .await;
    assert_eq!(weak.status, 304);

    let other = connection
        .request("GET", path, &[("if-none-match", "\"other\"")], wait)
        .await;
    assert_eq!(other.status, 200);
    assert_eq!(other.body.len(), 5000);

    let same_date = connection
        .request("GET", path, &[("if-modified-since", LAST_MODIFIED)], wait)
        .await;
    assert_eq!(same_date.status, 304);
    let later = connection
        .request(
            "GET",
            path,
            &[("if-modified-since", "Sat, 01 Jan 2022 00:00:00 GMT")],
            wait,
        )
        .await;
    assert_eq!(later.status, 304);
    let earlier = connection
        .request(
            "GET",
            path,
            &[("if-modified-since", "Wed, 31 Dec 2014 23:59:59 GMT")],
            wait,
        )
        .await;
    assert_eq!(earlier.status, 200);
    assert_eq!(earlier.body, object_bytes("cond", 5000));

    // If-None-Match wins: a non-matching tag means 200 whatever the date says.
    let both = connection
        .request(
            "GET",
            path,
            &[
                ("if-none-match", "\"other\""),
                ("if-modified-since", LAST_MODIFIED),
            ],
            wait,
        )
        .await;
    assert_eq!(both.status, 200);
}

#[tokio::test]
async fn requests_are_counted_per_key_and_exposed() {
    let origin = start_origin(OriginOptions::default()).await.unwrap();
    let mut connection = RawConnection::open(origin.addr).await;
    let wait = Duration::from_secs(5);
    for expected_count in 1..=3 {
        let response = connection
            .request("GET", "/obj/a?size=100", &[], wait)
            .await;
        assert_eq!(
            response.header("x-origin-count"),
            Some(expected_count.to_string().as_str())
        );
    }
    connection.request("GET", "/obj/b?size=50", &[], wait).await;

    assert_eq!(origin.stats.requests(), 4);
    assert_eq!(origin.stats.requests_for("a"), 3);
    assert_eq!(origin.stats.requests_for("b"), 1);
    assert_eq!(origin.stats.requests_for("never"), 0);
    assert_eq!(origin.stats.bytes(), 350);

    let count = connection
        .request("GET", "/_origin/count/a", &[], wait)
        .await;
    assert_eq!(String::from_utf8(count.body).unwrap().trim(), "3");
    let stats = connection.request("GET", "/_origin/stats", &[], wait).await;
    let stats: serde_json::Value = serde_json::from_slice(&stats.body).unwrap();
    assert_eq!(
        stats,
        serde_json::json!({ "requests": 4, "bytes": 350, "taken_bytes": 350 })
    );
    // Asking for the counts is not itself counted.
    assert_eq!(origin.stats.requests(), 4);
}

#[tokio::test]
async fn head_sends_the_headers_and_keeps_the_connection() {
    let origin = start_origin(OriginOptions::default()).await.unwrap();
    let mut connection = RawConnection::open(origin.addr).await;
    let wait = Duration::from_secs(5);
    let head = connection
        .request("HEAD", "/obj/h?size=777", &[], wait)
        .await;
    assert_eq!(head.status, 200);
    assert_eq!(head.content_length(), Some(777));
    assert!(head.body.is_empty());
    let get = connection
        .request("GET", "/obj/h?size=777", &[], wait)
        .await;
    assert_eq!(get.body, object_bytes("h", 777));
    assert_eq!(get.header("etag"), head.header("etag"));
}

#[tokio::test]
async fn max_age_and_default_size_are_configurable() {
    let options = OriginOptions {
        max_age: 60,
        default_size: 321,
        ..OriginOptions::default()
    };
    let origin = start_origin(options).await.unwrap();
    let object = get(origin.addr, "/obj/m?size=1", &[]).await;
    assert_eq!(object.header("cache-control"), Some("public, max-age=60"));
    let by_path = get(origin.addr, "/images/x.png?w=2", &[]).await;
    assert_eq!(by_path.status, 200);
    assert_eq!(by_path.body, object_bytes("/images/x.png?w=2", 321));
    assert_eq!(origin.stats.requests_for("/images/x.png?w=2"), 1);
}

#[tokio::test]
async fn query_parameters_override_the_response() {
    let origin = start_origin(OriginOptions::default()).await.unwrap();
    let custom = get(
        origin.addr,
        "/obj/o?size=10&cc=private%2C%20max-age%3D5&etag=v7",
        &[],
    )
    .await;
    assert_eq!(custom.header("cache-control"), Some("private, max-age=5"));
    assert_eq!(custom.header("etag"), Some("\"v7\""));
    let no_cc = get(origin.addr, "/obj/o?size=10&cc=", &[]).await;
    assert_eq!(no_cc.header("cache-control"), None);

    let unavailable = get(origin.addr, "/obj/o?size=10&status=503", &[]).await;
    assert_eq!(unavailable.status, 503);
    assert_eq!(unavailable.body.len(), 10);
    // A 503 is not turned into a 304 by a matching validator.
    let conditional = get(
        origin.addr,
        "/obj/o?size=10&status=503&etag=v7",
        &[("if-none-match", "\"v7\"")],
    )
    .await;
    assert_eq!(conditional.status, 503);

    let gzip = get(
        origin.addr,
        "/obj/v?size=300&vary=accept-encoding",
        &[("accept-encoding", "gzip")],
    )
    .await;
    let plain = get(origin.addr, "/obj/v?size=300&vary=accept-encoding", &[]).await;
    assert_eq!(gzip.header("vary"), Some("accept-encoding"));
    assert_eq!(gzip.body, object_bytes("v|gzip", 300));
    assert_eq!(plain.body, object_bytes("v|", 300));
    assert_ne!(gzip.header("etag"), plain.header("etag"));
    assert_eq!(origin.stats.requests_for("v"), 2);
}

#[tokio::test]
async fn delay_ms_delays_the_answer() {
    let origin = start_origin(OriginOptions::default()).await.unwrap();
    let started = Instant::now();
    let response = get(origin.addr, "/obj/slow?size=1&delay-ms=200", &[]).await;
    assert_eq!(response.status, 200);
    // A lower bound only: the sleep guarantees it however loaded the machine is.
    assert!(started.elapsed() >= Duration::from_millis(200));
}

#[tokio::test]
async fn bad_requests_get_400_naming_the_parameter() {
    let origin = start_origin(OriginOptions::default()).await.unwrap();
    for (path, named) in [
        ("/obj/k", "size"),
        ("/obj/k?size=ten", "size=\"ten\""),
        ("/obj/k?size=1&fault=explode", "fault=\"explode\""),
        ("/obj/k?size=1&status=42", "status=\"42\""),
        ("/obj/%zz?size=1", "%zz"),
    ] {
        let response = get(origin.addr, path, &[]).await;
        assert_eq!(response.status, 400, "{path}");
        let body = String::from_utf8(response.body).unwrap();
        assert!(body.contains(named), "{path}: {body}");
    }
}

#[tokio::test]
async fn shutdown_stops_accepting() {
    let origin = start_origin(OriginOptions::default()).await.unwrap();
    let addr = origin.addr;
    assert_eq!(get(addr, "/obj/s?size=1", &[]).await.status, 200);
    origin.shutdown().await;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

/// A `bloomgate origin` process, killed when dropped.
struct OriginCommand(std::process::Child);

impl Drop for OriginCommand {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_origin_command_logs_what_rust_log_asks_for() {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::process::{Command, Stdio};

    let mut child = Command::new(env!("CARGO_BIN_EXE_bloomgate"))
        .args(["origin", "--listen", "127.0.0.1:0"])
        .env("RUST_LOG", "bloomgate=debug")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let _origin = OriginCommand(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let addr = line
        .trim_end()
        .strip_prefix("origin listening on http://")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"));

    // Bytes that are not HTTP end the connection with an error, which the origin logs at debug.
    let mut connection = std::net::TcpStream::connect(addr).unwrap();
    connection.write_all(b"NOT HTTP\r\n\r\n").unwrap();
    let _ = connection.read_to_end(&mut Vec::new());

    let (lines, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match received.recv_timeout(left) {
            Ok(line) if line.contains("origin: connection ended with an error") => return,
            Ok(line) => seen.push(line),
            Err(_) => break,
        }
    }
    panic!("no tracing line on stderr within 10 s; stderr so far: {seen:?}");
}

#[tokio::test]
async fn a_body_the_client_hangs_up_on_counts_only_what_the_connection_took() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let origin = start_origin(OriginOptions::default()).await.unwrap();
    let size: u64 = 256 << 20;
    let mut stream = tokio::net::TcpStream::connect(origin.addr).await.unwrap();
    let request = format!("GET /obj/big?size={size} HTTP/1.1\r\nHost: origin\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut head = [0u8; 4096];
    let read = stream.read(&mut head).await.unwrap();
    assert!(head[..read].starts_with(b"HTTP/1.1 200"));
    drop(stream);
    // Wait for the origin to notice: the count stops moving once its writes fail.
    let mut last = u64::MAX;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = origin.stats.taken_bytes();
        if now == last {
            break;
        }
        last = now;
    }
    assert_eq!(origin.stats.bytes(), size);
    assert!(
        origin.stats.taken_bytes() < size / 2,
        "{}",
        origin.stats.taken_bytes()
    );

    // A range counts its own bytes, read to the end.
    let before = origin.stats.taken_bytes();
    let range = get(
        origin.addr,
        "/obj/big?size=1000",
        &[("range", "bytes=0-99")],
    )
    .await;
    assert_eq!(range.status, 206);
    assert_eq!(origin.stats.taken_bytes(), before + 100);
}

/// `simulate --weigh proxy` weighs each object's head by `stored_head_bytes`: it must be the block
/// a proxy stores from what this origin sends over the wire (hyper's `Date` included).
#[tokio::test]
async fn stored_head_bytes_is_the_block_of_the_fields_sent() {
    let origin = start_origin(OriginOptions::default()).await.unwrap();
    for size in [0, 7, 1_000, 123_456, 10_000_000] {
        let response = get(origin.addr, &format!("/obj/head-{size}?size={size}"), &[]).await;
        assert!(response.header("date").is_some(), "hyper adds a Date");
        let mut fields = HeaderMap::new();
        for (name, value) in &response.headers {
            assert!(
                !["connection", "keep-alive", "transfer-encoding"]
                    .contains(&name.to_ascii_lowercase().as_str()),
                "a hop-by-hop field the proxy would drop: {name}"
            );
            fields.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        assert_eq!(
            Head::of(&fields).len(),
            stored_head_bytes(size, OriginOptions::default().max_age),
            "size {size}: {:?}",
            response.headers
        );
    }
}
