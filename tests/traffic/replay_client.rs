//! The replay client over real sockets: against the synthetic origin and a fake proxy.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bloomgate::trace::{ByteRange, Request, SyntheticTrace};
use bloomgate::traffic::object_path::PathMode;
use bloomgate::traffic::replay::{ReplayArgs, run};
use bloomgate::traffic::{OriginOptions, ReplayOptions, TrafficError, replay, start_origin};
use bytes::Bytes;
use clap::Parser;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;

fn requests(keys: &[(&str, u64)]) -> Vec<Request> {
    keys.iter()
        .enumerate()
        .map(|(i, (key, size))| Request {
            time: i as f64,
            key: (*key).to_owned(),
            size: *size,
            range: None,
        })
        .collect()
}

fn options(target: String) -> ReplayOptions {
    ReplayOptions {
        target,
        concurrency: 8,
        ..ReplayOptions::default()
    }
}

#[tokio::test]
async fn replay_against_the_origin_counts_every_request_and_no_hits() {
    let origin = start_origin(OriginOptions::default()).await.unwrap();
    let trace = SyntheticTrace {
        requests: 2000,
        objects: 500,
        size_median: 2000,
        ..SyntheticTrace::default()
    };
    let total_bytes: u64 = trace.iter().map(|r| r.size).sum();

    let report = replay(trace.iter(), options(origin.url())).await.unwrap();
    assert_eq!(report.requests, 2000);
    assert_eq!(report.responses, 2000);
    assert_eq!(report.latency_ms.count, 2000);
    assert_eq!(report.hits, 0);
    assert_eq!(report.hit_ratio, 0.0);
    assert_eq!(report.without_cache_status, 2000);
    assert_eq!(report.errors.total, 0);
    assert_eq!(report.bytes, total_bytes);
    assert_eq!(origin.stats.requests(), 2000);
    assert_eq!(origin.stats.bytes(), total_bytes);
    assert!(
        report.latency_ms.p50 <= report.latency_ms.p99
            && report.latency_ms.p99 <= report.latency_ms.max
    );
}

#[tokio::test]
async fn a_request_with_a_range_asks_for_those_bytes_only() {
    let origin = start_origin(OriginOptions::default()).await.unwrap();
    let mut trace = requests(&[("video", 10_000), ("video", 10_000), ("whole", 500)]);
    trace[0].range = Some(ByteRange {
        first: 0,
        last: 999,
    });
    trace[1].range = Some(ByteRange {
        first: 9_900,
        last: 9_999,
    });
    let report = replay(trace.into_iter(), options(origin.url()))
        .await
        .unwrap();
    assert_eq!(report.responses, 3);
    assert_eq!(report.bytes, 1000 + 100 + 500);
    assert_eq!(origin.stats.bytes(), 1000 + 100 + 500);
}

#[tokio::test]
async fn limit_stops_the_replay() {
    let origin = start_origin(OriginOptions::default()).await.unwrap();
    let trace = SyntheticTrace {
        requests: 5000,
        ..SyntheticTrace::default()
    };
    let opts = ReplayOptions {
        limit: Some(120),
        ..options(origin.url())
    };
    let report = replay(trace.iter(), opts).await.unwrap();
    assert_eq!(report.requests, 120);
    assert_eq!(origin.stats.requests(), 120);
}

#[tokio::test]
async fn keys_reach_the_origin_intact_in_both_path_modes() {
    let origin = start_origin(OriginOptions::default()).await.unwrap();
    let keys = requests(&[("plain", 10), ("with space/and?query", 20), ("plain", 10)]);
    replay(keys.clone().into_iter(), options(origin.url()))
        .await
        .unwrap();
    assert_eq!(origin.stats.requests_for("plain"), 2);
    assert_eq!(origin.stats.requests_for("with space/and?query"), 1);

    let opts = ReplayOptions {
        path_mode: PathMode::Key,
        ..options(origin.url())
    };
    let report = replay(
        requests(&[("/img/a.png?w=1", 0), ("42", 0)]).into_iter(),
        opts,
    )
    .await
    .unwrap();
    assert_eq!(report.errors.total, 0);
    assert_eq!(origin.stats.requests_for("/img/a.png?w=1"), 1);
    assert_eq!(origin.stats.requests_for("/42"), 1);
}

/// A stand-in for the proxy: answers by key prefix with a fixed Cache-Status or status.
async fn start_fake_proxy() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let service = service_fn(
                |request: hyper::Request<hyper::body::Incoming>| async move {
                    let key = request.uri().path().trim_start_matches("/obj/").to_owned();
                    let body = Full::new(Bytes::from(vec![b'x'; 100]));
                    let mut response = hyper::Response::new(body);
                    let cache_status = match key.split('-').next().unwrap() {
                        "hit" => "bloomgate; hit",
                        "first" => "bloomgate; fwd=miss; detail=first-hit",
                        "stored" => "bloomgate; fwd=miss; stored",
                        "nostore" => "Upstream; hit, bloomgate; fwd=miss; detail=no-store",
                        "broken" => {
                            *response.status_mut() = http::StatusCode::BAD_GATEWAY;
                            "bloomgate; fwd=miss; detail=origin-error"
                        }
                        _ => return Ok::<_, Infallible>(response),
                    };
                    response
                        .headers_mut()
                        .insert("cache-status", cache_status.parse().unwrap());
                    Ok(response)
                },
            );
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), service),
            );
        }
    });
    addr
}

#[tokio::test]
async fn cache_status_splits_hits_and_misses_by_reason() {
    let proxy = start_fake_proxy().await;
    let trace = requests(&[
        ("hit-1", 100),
        ("hit-2", 100),
        ("hit-3", 100),
        ("first-1", 100),
        ("first-2", 100),
        ("stored-1", 100),
        ("nostore-1", 100),
        ("plain-1", 100),
        ("broken-1", 100),
    ]);
    let report = replay(trace.into_iter(), options(format!("http://{proxy}")))
        .await
        .unwrap();
    assert_eq!(report.requests, 9);
    assert_eq!(report.responses, 8);
    assert_eq!(report.hits, 3);
    assert_eq!(report.misses, 4);
    assert_eq!(report.without_cache_status, 1);
    assert_eq!(report.stored, 1);
    assert_eq!(report.hit_ratio, 3.0 / 8.0);
    assert_eq!(report.byte_hit_ratio, 300.0 / 800.0);
    let reasons: Vec<(&str, u64)> = report
        .misses_by_reason
        .iter()
        .map(|(r, n)| (r.as_str(), *n))
        .collect();
    assert_eq!(reasons, [("first-hit", 2), ("no-store", 1), ("stored", 1)]);
    assert_eq!(report.errors.total, 1);
    assert_eq!(report.errors.by_status.get(&502), Some(&1));
    // Every request got a response, the 502 too.
    assert_eq!(report.latency_ms.count, 9);
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["misses_by_reason"]["first-hit"], 2);
    assert!(report.to_string().contains("first-hit"));
}

#[tokio::test]
async fn an_unreachable_target_gives_transport_errors() {
    // Held with nothing listening: refused, and no test beside this one can be given the port.
    let refusing = crate::refusing::RefusingPort::new();
    let port = refusing.addr.port();
    let trace = requests(&[("a", 1), ("b", 1), ("c", 1)]);
    let report = replay(
        trace.into_iter(),
        options(format!("http://127.0.0.1:{port}")),
    )
    .await
    .unwrap();
    assert_eq!(report.requests, 3);
    assert_eq!(report.errors.transport, 3);
    assert_eq!(report.errors.total, 3);
    assert_eq!(report.latency_ms.count, 0);
}

#[tokio::test]
async fn rate_spaces_the_requests() {
    let origin = start_origin(OriginOptions::default()).await.unwrap();
    let trace = SyntheticTrace {
        requests: 21,
        ..SyntheticTrace::default()
    };
    let opts = ReplayOptions {
        rate: Some(100.0),
        ..options(origin.url())
    };
    let started = Instant::now();
    let report = replay(trace.iter(), opts).await.unwrap();
    assert_eq!(report.requests, 21);
    // Request 20 may not leave before 20 / 100 s: a lower bound, whatever the machine's load.
    assert!(started.elapsed() >= Duration::from_millis(200));
}

#[tokio::test]
async fn bad_options_are_named() {
    let trace = || requests(&[("a", 1)]).into_iter();
    for (target, reason) in [
        ("https://x", "only http://"),
        ("127.0.0.1:80", "http://"),
        ("not a url", "URL"),
    ] {
        let error = replay(trace(), options(target.to_owned()))
            .await
            .unwrap_err();
        assert!(matches!(error, TrafficError::Target { .. }), "{error}");
        assert!(error.to_string().contains(reason), "{target}: {error}");
    }
    let error = replay(
        trace(),
        ReplayOptions {
            rate: Some(0.0),
            ..options("http://127.0.0.1:1".into())
        },
    )
    .await
    .unwrap_err();
    assert!(error.to_string().contains("rate"), "{error}");
}

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    replay: ReplayArgs,
}

#[tokio::test]
async fn a_bad_trace_line_stops_the_replay_naming_the_line() {
    let origin = start_origin(OriginOptions::default()).await.unwrap();
    let path =
        std::env::temp_dir().join(format!("bloomgate-replay-bad-{}.csv", std::process::id()));
    std::fs::write(&path, "time,key,size\n1,a,10\n2,b,ten\n3,c,10\n").unwrap();
    let cli = Cli::parse_from([
        "replay",
        "--trace",
        path.to_str().unwrap(),
        "--target",
        &origin.url(),
        "--json",
    ]);
    let error = run(cli.replay).await.unwrap_err();
    std::fs::remove_file(&path).unwrap();
    assert!(matches!(error, TrafficError::Trace(_)), "{error}");
    assert!(error.to_string().contains(":3:"), "{error}");
    assert_eq!(origin.stats.requests_for("a"), 1);
    assert_eq!(origin.stats.requests_for("c"), 0);
}
