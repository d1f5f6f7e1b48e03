//! Each fault of the synthetic origin does what it says, seen on a raw socket and by hyper.

use crate::origin_support;

use std::time::Duration;

use bloomgate::traffic::pattern::object_bytes;
use bloomgate::traffic::{OriginOptions, start_origin};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use origin_support::{Ending, RawConnection, get};

/// Long enough for anything the origin sends promptly to arrive, short enough to keep tests fast.
const QUIET: Duration = Duration::from_millis(300);

/// Fetches `path` with hyper's client; returns the status, or the error hyper reports.
async fn fetch_with_hyper(addr: std::net::SocketAddr, path: &str) -> Result<(u16, Bytes), String> {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let request = http::Request::get(path)
        .header("host", "origin.test")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("body: {e}"))?;
    Ok((status, body.to_bytes()))
}

#[tokio::test]
async fn reset_mid_body_sends_half_then_resets() {
    let origin = start_origin(OriginOptions::default()).await.unwrap();
    let path = "/obj/r?size=10000&fault=reset-mid-body";
    let response = RawConnection::open(origin.addr)
        .await
        .request("GET", path, &[], QUIET)
        .await;
    assert_eq!(response.status, 200);
    assert_eq!(response.content_length(), Some(10_000));
    assert_eq!(response.ending, Ending::Reset);
    assert!(response.body.len() < 10_000);
    assert_eq!(
        response.body[..],
        object_bytes("r", 10_000)[..response.body.len()]
    );

    let error = fetch_with_hyper(origin.addr, path).await.unwrap_err();
    assert!(error.starts_with("body:"), "{error}");
    assert_eq!(origin.stats.requests_for("r"), 2);
}

#[tokio::test]
async fn short_body_sends_half_of_content_length_then_closes() {
    let origin = start_origin(OriginOptions::default()).await.unwrap();
    let path = "/obj/s?size=10000&fault=short-body";
    let response = RawConnection::open(origin.addr)
        .await
        .request("GET", path, &[], QUIET)
        .await;
    assert_eq!(response.content_length(), Some(10_000));
    assert_eq!(response.ending, Ending::Eof);
    assert_eq!(response.body, object_bytes("s", 10_000)[..5000]);
    assert!(
        fetch_with_hyper(origin.addr, path)
            .await
            .unwrap_err()
            .starts_with("body:")
    );
}

#[tokio::test]
async fn bad_chunked_breaks_the_framing_then_closes() {
    let origin = start_origin(OriginOptions::default()).await.unwrap();
    let path = "/obj/c?size=10000&fault=bad-chunked";
    let mut connection = RawConnection::open(origin.addr).await;
    let response = connection.request("GET", path, &[], QUIET).await;
    assert_eq!(response.header("transfer-encoding"), Some("chunked"));
    assert_eq!(response.content_length(), None);
    assert_eq!(response.ending, Ending::Eof);
    let body = String::from_utf8_lossy(&response.body);
    assert!(body.starts_with("400\r\n"), "{body:?}");
    assert!(body.ends_with("\r\nzz-not-a-size\r\n"), "{body:?}");
    assert!(
        fetch_with_hyper(origin.addr, path)
            .await
            .unwrap_err()
            .starts_with("body:")
    );
}

#[tokio::test]
async fn silence_reads_the_request_and_never_answers() {
    let origin = start_origin(OriginOptions::default()).await.unwrap();
    let mut connection = RawConnection::open(origin.addr).await;
    connection
        .send("GET", "/obj/q?size=10&fault=silence", &[])
        .await;
    let (received, ending) = connection.read_raw(QUIET).await;
    assert!(received.is_empty());
    assert_eq!(ending, Ending::Silent);
    // The request did reach the origin, and the origin keeps serving others.
    assert_eq!(origin.stats.requests_for("q"), 1);
    assert_eq!(get(origin.addr, "/obj/q?size=10", &[]).await.status, 200);
}

#[tokio::test]
async fn trickle_sends_a_few_bytes_then_stalls() {
    let origin = start_origin(OriginOptions::default()).await.unwrap();
    let mut connection = RawConnection::open(origin.addr).await;
    let response = connection
        .request("GET", "/obj/t?size=10000&fault=trickle", &[], QUIET)
        .await;
    assert_eq!(response.content_length(), Some(10_000));
    assert_eq!(response.ending, Ending::Silent);
    assert_eq!(response.body, object_bytes("t", 10_000)[..16]);
}

#[tokio::test]
async fn a_fault_on_a_reused_connection_still_happens() {
    let origin = start_origin(OriginOptions::default()).await.unwrap();
    let mut connection = RawConnection::open(origin.addr).await;
    let healthy = connection
        .request("GET", "/obj/k?size=3000", &[], QUIET)
        .await;
    assert_eq!(healthy.body, object_bytes("k", 3000));
    assert_eq!(healthy.ending, Ending::Complete);
    let broken = connection
        .request("GET", "/obj/k?size=3000&fault=short-body", &[], QUIET)
        .await;
    assert_eq!(broken.body.len(), 1500);
    assert_eq!(broken.ending, Ending::Eof);
}

#[tokio::test]
async fn faulty_responses_carry_the_requested_headers() {
    let origin = start_origin(OriginOptions::default()).await.unwrap();
    let path = "/obj/h?size=100&fault=short-body&status=503&cc=max-age%3D9&etag=e1";
    let response = RawConnection::open(origin.addr)
        .await
        .request("GET", path, &[], QUIET)
        .await;
    assert_eq!(response.status, 503);
    assert_eq!(response.header("cache-control"), Some("max-age=9"));
    assert_eq!(response.header("etag"), Some("\"e1\""));
}
