//! Fuzz target: the translation of a client's request head into the cache key and the request the
//! origin receives (`bloomgate::proxy::translate`). The input is parsed as an HTTP/1.1 request head
//! by httparse, as hyper's server parses it. Never panics, and whatever is forwarded keeps the
//! rules of issue 8: a key only for a valid authority, no framing without a body, one Host, no
//! hop-by-hop or untrusted forwarding fields, and the origin asked for exactly the path and query the key names (a pass: as the client sent them).

#![no_main]

use std::sync::{Arc, LazyLock};

use bloomgate::admission::probation::Mode;
use bloomgate::config::{Config, FORWARDING_HEADERS};
use bloomgate::proxy::{Live, Route, translate};
use libfuzzer_sys::fuzz_target;

static LIVE: LazyLock<Arc<Live>> = LazyLock::new(|| {
    let mut config = Config::defaults();
    config.origin.preserve_host = true;
    config.admission.mode = Mode::Off;
    Arc::new(Live::new(config).expect("a plain-HTTP origin needs no TLS files"))
});

const NEVER_FORWARDED: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "proxy-authorization",
];

fuzz_target!(|data: &[u8]| {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut parsed = httparse::Request::new(&mut headers);
    let Ok(httparse::Status::Complete(_)) = parsed.parse(data) else {
        return;
    };
    let (Some(method), Some(path)) = (parsed.method, parsed.path) else {
        return;
    };
    let mut builder = http::Request::builder().method(method).uri(path);
    for header in parsed.headers.iter() {
        builder = builder.header(header.name, header.value);
    }
    let Ok(request) = builder.body(()) else {
        return;
    };
    let (parts, ()) = request.into_parts();
    let client_target = parts.uri.path_and_query().map(|pq| pq.as_str().to_owned());
    let peer = "192.0.2.1:4000".parse().expect("address");
    let Ok((key, route, head)) = translate(&LIVE, parts, peer, Some(3)) else {
        return;
    };
    let key = key.as_str();
    assert!(
        !key.bytes().any(|b| b.is_ascii_whitespace() || b.is_ascii_control()),
        "key {key:?}"
    );
    let host_part = key.split('/').next().unwrap_or_default();
    assert!(!host_part.contains(['?', '#', '@']), "key {key:?}");
    let sent = head.headers();
    assert_eq!(sent.get_all("host").iter().count(), 1, "{sent:?}");
    assert_eq!(
        sent.get("host").map(|h| h.as_bytes()),
        Some(host_part.as_bytes()),
        "the origin must be asked for the host the key names"
    );
    for name in NEVER_FORWARDED {
        assert!(sent.get(*name).is_none(), "{name} forwarded: {sent:?}");
    }
    for name in FORWARDING_HEADERS {
        if *name != "x-forwarded-proto" {
            assert!(sent.get(*name).is_none(), "{name} forwarded: {sent:?}");
        }
    }
    let forwarded_target = head.uri().path_and_query().map(|pq| pq.as_str().to_owned());
    match route {
        Route::Cache => {
            assert_eq!(head.method(), http::Method::GET);
            assert!(sent.get("content-length").is_none(), "{sent:?}");
            assert!(sent.get("expect").is_none(), "{sent:?}");
            // The cache fetches whole objects and cuts ranges from them itself.
            assert!(sent.get("range").is_none(), "{sent:?}");
            // The origin is asked for exactly what the key names.
            let keyed_target = &key[host_part.len()..];
            assert_eq!(forwarded_target.as_deref(), Some(keyed_target));
        }
        Route::Pass(_) => {
            let lengths: Vec<_> = sent.get_all("content-length").iter().collect();
            assert_eq!(lengths, ["3"], "the passed body is 3 bytes: {sent:?}");
            assert_eq!(forwarded_target, client_target);
        }
    }
});
