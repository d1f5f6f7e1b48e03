//! End to end: what a conformance suite checks of range requests (RFC 9110 section 14), the 206
//! and 416 they get (sections 15.3.7 and 15.5.17), the framing of bodiless answers (RFC 9112
//! section 6) and `103 Early Hints`, asked the same way of an object stored whole and of one
//! stored in slices, so that the two paths answer alike.

use crate::common;

use std::time::{Duration, SystemTime};

use common::client::{closed_within, raw_exchange_bytes, read_available_bytes};
use common::wire::{WireResponse, parse_responses};
use common::{Client, ClientReply, Origin, ProxyConfig, ProxyProcess, Reply};
use http::{Method, StatusCode};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// 64 KiB slices (the smallest allowed), objects above 100 KiB sliced.
const SLICE: usize = 64 << 10;

/// Five slices, the last one short; stored whole when slicing is off.
const LENGTH: usize = 4 * SLICE + 1000;

/// `n` bytes in which every offset below 251 * 256 holds a different pair of neighbours, so that
/// a part taken at the wrong offset never passes for the right one.
fn object(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8 ^ (i / 251) as u8).collect()
}

/// How the proxy under test keeps a large object.
#[derive(Clone, Copy, Debug)]
enum Keeping {
    Whole,
    Sliced,
}

const BOTH: [Keeping; 2] = [Keeping::Whole, Keeping::Sliced];

struct Setup {
    origin: Origin,
    proxy: ProxyProcess,
    client: Client,
    keeping: Keeping,
}

impl Setup {
    /// A proxy that stores every storable response on its first request, whole or in slices.
    fn keeping(keeping: Keeping) -> Setup {
        Setup::with(keeping, |_| {})
    }

    fn with(keeping: Keeping, configure: impl FnOnce(&mut ProxyConfig)) -> Setup {
        let origin = Origin::start();
        let mut config = ProxyConfig::new(&origin.url());
        config
            .mode("off")
            .set("cache", "max_object_bytes", "\"1MiB\"");
        if let Keeping::Sliced = keeping {
            config.set("cache", "slice_above", "\"100KiB\"").set(
                "cache",
                "slice_bytes",
                "\"64KiB\"",
            );
        }
        configure(&mut config);
        Setup {
            proxy: config.start(),
            origin,
            client: Client::new(),
            keeping,
        }
    }

    async fn get(&self, path: &str, headers: &[(&str, &str)]) -> ClientReply {
        self.client.get_with(&self.proxy.url(path), headers).await
    }

    async fn send(&self, method: Method, path: &str, headers: &[(&str, &str)]) -> ClientReply {
        self.client
            .send(method.clone(), &self.proxy.url(path), headers)
            .await
            .unwrap_or_else(|error| panic!("{:?} {method} {path}: {error}", self.keeping))
    }

    /// Has the origin answer `path` with `reply` (ranges served) and asks for it whole once, so
    /// that the proxy knows and stores it.
    async fn known(&self, path: &str, reply: Reply) -> ClientReply {
        self.origin.set(path, reply.serves_ranges());
        let first = self.get(path, &[]).await;
        assert_eq!(first.status, StatusCode::OK, "{:?}", self.keeping);
        first
    }
}

/// The origin's answer: `body`, storable, with a strong ETag.
fn storable(body: &[u8]) -> Reply {
    Reply::bytes(body)
        .header("cache-control", "max-age=600")
        .header("etag", "\"v1\"")
}

/// `bytes first-last/complete` read back.
fn named_range(content_range: &str) -> (usize, usize, usize) {
    let parse = || {
        let (range, complete) = content_range.strip_prefix("bytes ")?.split_once('/')?;
        let (first, last) = range.split_once('-')?;
        Some((
            first.parse().ok()?,
            last.parse().ok()?,
            complete.parse().ok()?,
        ))
    };
    parse().unwrap_or_else(|| panic!("not a byte range: {content_range:?}"))
}

/// The parts a 206 carries (one, or several as multipart), each as its first and last byte;
/// panics unless each part is exactly those bytes of `body`, the parts are within it and
/// ascending without overlap (RFC 9110 section 14.2 lets a server coalesce, not reorder into
/// overlaps), and `Content-Length` is the number of bytes sent.
fn parts_of(reply: &ClientReply, body: &[u8], context: &str) -> Vec<(usize, usize)> {
    assert_eq!(
        reply.header("content-length"),
        Some(reply.body.len().to_string().as_str()),
        "{context}: Content-Length is not the bytes sent"
    );
    let parts = match reply.header("content-range") {
        Some(content_range) => vec![(content_range.to_owned(), reply.body.to_vec())],
        None => reply.multipart_parts(),
    };
    let mut after = 0;
    let mut named = Vec::new();
    for (index, (content_range, bytes)) in parts.iter().enumerate() {
        let (first, last, complete) = named_range(content_range);
        assert_eq!(complete, body.len(), "{context}: {content_range}");
        assert!(
            first <= last && last < body.len(),
            "{context}: {content_range}"
        );
        assert!(
            index == 0 || first >= after,
            "{context}: parts out of order"
        );
        assert!(
            bytes[..] == body[first..=last],
            "{context}: {content_range}"
        );
        after = last + 1;
        named.push((first, last));
    }
    named
}

/// Panics unless `reply` is a 416 for an object of `length` bytes.
fn assert_unsatisfiable(reply: &ClientReply, length: usize, context: &str) {
    assert_eq!(
        reply.status,
        StatusCode::RANGE_NOT_SATISFIABLE,
        "{context}: {:?}",
        reply.headers
    );
    assert_eq!(
        reply.header("content-range"),
        Some(format!("bytes */{length}").as_str()),
        "{context}"
    );
    assert!(reply.body.is_empty(), "{context}: a 416 with a body");
}

/// Panics unless `reply` is the whole object.
fn assert_whole(reply: &ClientReply, body: &[u8], context: &str) {
    assert_eq!(
        reply.status,
        StatusCode::OK,
        "{context}: {:?}",
        reply.headers
    );
    assert_eq!(reply.header("content-range"), None, "{context}");
    assert!(
        reply.body[..] == body[..],
        "{context}: not the whole object"
    );
}

#[tokio::test]
async fn single_suffix_and_open_ranges_are_answered_alike_whole_and_sliced() {
    let body = object(LENGTH);
    let end = LENGTH - 1;
    for keeping in BOTH {
        let s = Setup::keeping(keeping);
        s.known("/obj", storable(&body)).await;
        for (range, first, last) in [
            ("bytes=0-0", 0, 0),
            ("bytes=100-199", 100, 199),
            // Across a slice boundary, and up to the last byte of a full slice.
            ("bytes=65530-65545", 65530, 65545),
            ("bytes=65536-131071", 65536, 131071),
            ("bytes=-100", LENGTH - 100, end),
            ("bytes=-1", end, end),
            ("bytes=200000-", 200000, end),
            ("bytes=0-", 0, end),
            (&format!("bytes={end}-{}", end + 50), end, end),
            (&format!("bytes=-{}", LENGTH + 7), 0, end),
            ("bytes=1-99999999999999999999999", 1, end),
        ] {
            let context = format!("{keeping:?} {range}");
            let reply = s.get("/obj", &[("range", range)]).await;
            assert_eq!(reply.status, StatusCode::PARTIAL_CONTENT, "{context}");
            assert_eq!(
                parts_of(&reply, &body, &context),
                [(first, last)],
                "{context}"
            );
        }
    }
}

#[tokio::test]
async fn unsatisfiable_ranges_get_416_naming_the_length_whole_and_sliced() {
    let body = object(LENGTH);
    for keeping in BOTH {
        let s = Setup::keeping(keeping);
        s.known("/obj", storable(&body)).await;
        for range in [
            format!("bytes={LENGTH}-"),
            format!("bytes={LENGTH}-{}", LENGTH + 10),
            "bytes=99999999999999999999999-".to_owned(),
            "bytes=-0".to_owned(),
            format!("bytes=-0, {}-", LENGTH + 1),
        ] {
            let reply = s.get("/obj", &[("range", &range)]).await;
            assert_unsatisfiable(&reply, LENGTH, &format!("{keeping:?} {range}"));
        }
    }
}

#[tokio::test]
async fn invalid_ranges_other_units_and_other_methods_get_the_whole_object() {
    let body = object(LENGTH);
    for keeping in BOTH {
        let s = Setup::keeping(keeping);
        s.known("/obj", storable(&body)).await;
        for range in [
            "bytes=5-1",
            "bytes=-",
            "bytes=1-2-3",
            "bytes=0x10-20",
            "bytes = 0-1",
            "bytes 0-1",
            "items=0-1",
            "bytes=0-1, bytes=2-3",
        ] {
            let reply = s.get("/obj", &[("range", range)]).await;
            assert_whole(&reply, &body, &format!("{keeping:?} {range}"));
        }
        // HEAD: the whole object's head, its length, no body (RFC 9110 section 14.2: Range is
        // for GET only).
        let head = s
            .send(Method::HEAD, "/obj", &[("range", "bytes=0-9")])
            .await;
        assert_eq!(head.status, StatusCode::OK, "{keeping:?}");
        assert_eq!(
            head.header("content-length"),
            Some(LENGTH.to_string().as_str()),
            "{keeping:?}"
        );
        assert_eq!(head.header("content-range"), None, "{keeping:?}");
        assert!(head.body.is_empty(), "{keeping:?}");
        // A POST goes to the origin as it is; the proxy cuts nothing from its answer.
        let plain = object(3000);
        s.origin.set("/form", Reply::bytes(&plain));
        let post = s
            .send(Method::POST, "/form", &[("range", "bytes=0-9")])
            .await;
        assert_whole(&post, &plain, &format!("{keeping:?} POST"));
    }
}

#[tokio::test]
async fn several_ranges_are_answered_with_valid_bounded_206s_whole_and_sliced() {
    let body = object(LENGTH);
    let many: Vec<String> = (0..500)
        .map(|i| format!("{}-{}", i * 300, i * 300))
        .collect();
    let many = format!("bytes={}", many.join(","));
    let repeated = format!("bytes={}", vec!["0-"; 200].join(","));
    for keeping in BOTH {
        let s = Setup::keeping(keeping);
        s.known(
            "/obj",
            storable(&body).header("content-type", "application/octet-stream"),
        )
        .await;
        // Two parts in different slices, and one at the very end: multipart, in order.
        let reply = s
            .get("/obj", &[("range", "bytes=10-19, 70000-70009, -5")])
            .await;
        let context = format!("{keeping:?} three");
        assert_eq!(reply.status, StatusCode::PARTIAL_CONTENT, "{context}");
        assert_eq!(
            parts_of(&reply, &body, &context),
            [(10, 19), (70000, 70009), (LENGTH - 5, LENGTH - 1)]
        );
        assert!(
            String::from_utf8_lossy(&reply.body)
                .to_lowercase()
                .contains("content-type: application/octet-stream\r\n"),
            "{context}: each part names the type"
        );
        // A satisfiable range beside unsatisfiable ones is the answer alone.
        let beside = s
            .get("/obj", &[("range", &format!("bytes={LENGTH}-, 5-9"))])
            .await;
        assert_eq!(parts_of(&beside, &body, "beside"), [(5, 9)]);

        // Overlapping, descending, repeated or many small ranges: any valid answer, never more
        // bytes than the object and a handful of part heads.
        for range in [
            "bytes=0-99,50-149",
            "bytes=500-509,0-9",
            "bytes=-10,0-9",
            &repeated,
            &many,
        ] {
            let context = format!("{keeping:?} {}", &range[..range.len().min(40)]);
            let reply = s.get("/obj", &[("range", range)]).await;
            assert!(
                reply.body.len() <= LENGTH + 4096,
                "{context}: {} bytes for an object of {LENGTH}",
                reply.body.len()
            );
            match reply.status {
                StatusCode::OK => assert_whole(&reply, &body, &context),
                StatusCode::PARTIAL_CONTENT => {
                    parts_of(&reply, &body, &context);
                }
                other => panic!("{context}: {other}"),
            }
        }
    }
}

#[tokio::test]
async fn if_range_applies_the_range_only_to_the_same_strong_validator_whole_and_sliced() {
    let body = object(LENGTH);
    let now = SystemTime::now();
    let modified = httpdate::fmt_http_date(now - Duration::from_secs(3600));
    let date = httpdate::fmt_http_date(now);
    let earlier = httpdate::fmt_http_date(now - Duration::from_secs(7200));
    for keeping in BOTH {
        let s = Setup::keeping(keeping);
        let dated = storable(&body)
            .header("last-modified", &modified)
            .header("date", &date);
        s.known("/obj", dated).await;
        let weak = Reply::bytes(&body)
            .header("cache-control", "max-age=600")
            .header("etag", "W/\"w1\"");
        s.known("/weak", weak).await;
        let range = ("range", "bytes=70000-70009");
        for (path, validator, ranged) in [
            ("/obj", "\"v1\"", true),
            ("/obj", modified.as_str(), true),
            ("/obj", "\"v0\"", false),
            ("/obj", "W/\"v1\"", false),
            ("/obj", earlier.as_str(), false),
            ("/obj", "not a validator", false),
            // A weak entity-tag never matches by the strong comparison (section 13.1.5).
            ("/weak", "W/\"w1\"", false),
            ("/weak", "\"w1\"", false),
        ] {
            let context = format!("{keeping:?} {path} If-Range {validator}");
            let reply = s.get(path, &[range, ("if-range", validator)]).await;
            if ranged {
                assert_eq!(reply.status, StatusCode::PARTIAL_CONTENT, "{context}");
                assert_eq!(parts_of(&reply, &body, &context), [(70000, 70009)]);
            } else {
                assert_whole(&reply, &body, &context);
            }
        }
    }
}

/// The fields RFC 9110 section 15.3.7 has a 206 carry when its 200 would.
const SAME_AS_THE_200: [&str; 6] = [
    "etag",
    "cache-control",
    "expires",
    "vary",
    "last-modified",
    "content-type",
];

#[tokio::test]
async fn a_206_carries_the_fields_its_200_would_whole_and_sliced() {
    let body = object(LENGTH);
    for keeping in BOTH {
        let s = Setup::keeping(keeping);
        let described = storable(&body)
            .header("expires", "Fri, 01 Jan 2100 00:00:00 GMT")
            .header("vary", "accept-language")
            .header("last-modified", "Sun, 06 Nov 1994 08:49:37 GMT")
            .header("content-type", "video/mp4");
        let whole = s.known("/obj", described).await;
        for range in ["bytes=70000-70009", "bytes=0-9,200000-200009"] {
            let context = format!("{keeping:?} {range}");
            let part = s.get("/obj", &[("range", range)]).await;
            assert_eq!(part.status, StatusCode::PARTIAL_CONTENT, "{context}");
            parts_of(&part, &body, &context);
            let multipart = part.header("content-range").is_none();
            for name in SAME_AS_THE_200 {
                if multipart && name == "content-type" {
                    continue;
                }
                assert_eq!(part.header(name), whole.header(name), "{context}: {name}");
                assert!(whole.header(name).is_some(), "{context}: {name}");
            }
            assert!(part.header("date").is_some(), "{context}: no Date");
        }
    }
}

/// The responses a raw client reads off one connection for `request`, parsed strictly (`head`:
/// answers to HEAD, without bodies).
async fn raw_responses(
    addr: std::net::SocketAddr,
    request: &[u8],
    head: bool,
) -> Vec<WireResponse> {
    let bytes = raw_exchange_bytes(addr, request, Duration::from_millis(400)).await;
    parse_responses(&bytes, head).unwrap_or_else(|error| {
        panic!(
            "{error}: {:?}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(2000)])
        )
    })
}

#[tokio::test]
async fn conditionals_on_a_stored_object_answer_304_without_a_body_before_the_next_response() {
    let body = object(LENGTH);
    for keeping in BOTH {
        let s = Setup::keeping(keeping);
        let modified = "Sun, 06 Nov 1994 08:49:37 GMT";
        s.known("/obj", storable(&body).header("last-modified", modified))
            .await;
        s.origin.set("/next", Reply::ok("next"));
        for condition in [
            "If-None-Match: \"v1\"\r\nRange: bytes=0-9".to_owned(),
            "If-None-Match: W/\"v1\"".to_owned(),
            format!("If-Modified-Since: {modified}\r\nRange: bytes=70000-70009"),
        ] {
            let request = format!(
                "GET /obj HTTP/1.1\r\nHost: c.example\r\n{condition}\r\n\r\n\
                 GET /next HTTP/1.1\r\nHost: c.example\r\nConnection: close\r\n\r\n"
            );
            let context = format!("{keeping:?} {condition:?}");
            let answers = raw_responses(s.proxy.addr, request.as_bytes(), false).await;
            let [not_modified, next] = answers.as_slice() else {
                panic!("{context}: {answers:?}");
            };
            assert_eq!(not_modified.status, 304, "{context}");
            assert!(not_modified.body.is_empty(), "{context}");
            assert_eq!(not_modified.header("transfer-encoding"), None, "{context}");
            assert_eq!(not_modified.header("content-range"), None, "{context}");
            assert_eq!(not_modified.header("etag"), Some("\"v1\""), "{context}");
            assert_eq!(
                (next.status, &next.body[..]),
                (200, &b"next"[..]),
                "{context}"
            );
        }
    }
}

#[tokio::test]
async fn a_slice_the_origin_answers_wrongly_mid_object_is_never_served_or_stored() {
    let body = object(LENGTH);
    let s = Setup::keeping(Keeping::Sliced);
    // Slice 0 only: known and stored by the first contact.
    s.origin.set("/obj", storable(&body).serves_ranges());
    let first = s.get("/obj", &[("range", "bytes=0-9")]).await;
    assert_eq!(parts_of(&first, &body, "first"), [(0, 9)]);

    let whole_only = storable(&body);
    let misnamed = storable(&body).serves_ranges().misnames_ranges();
    let not_found = Reply::ok("gone").status(404);
    for (name, reply) in [
        ("a 200", whole_only),
        ("a wrong Content-Range", misnamed),
        ("a 404", not_found),
    ] {
        s.origin.set("/obj", reply);
        let part = s.get("/obj", &[("range", "bytes=70000-70009")]).await;
        if part.status == StatusCode::PARTIAL_CONTENT {
            assert_eq!(parts_of(&part, &body, name), [(70000, 70009)], "{name}");
        } else {
            assert!(
                part.status.is_server_error() || part.status == StatusCode::NOT_FOUND,
                "{name}: {}",
                part.status
            );
        }
        match s.client.send(Method::GET, &s.proxy.url("/obj"), &[]).await {
            Ok(whole) if whole.status == StatusCode::OK => {
                assert!(whole.body[..] == body[..], "{name}: wrong bytes in a 200")
            }
            Ok(other) => assert_ne!(other.status, StatusCode::PARTIAL_CONTENT, "{name}"),
            Err(error) => assert!(error.contains("body failed"), "{name}: {error}"),
        }
    }
    // The origin mended: every byte is the object's, none of the wrong answers was kept.
    s.origin.set("/obj", storable(&body).serves_ranges());
    let whole = s.get("/obj", &[]).await;
    assert_whole(&whole, &body, "mended");
    let again = s.get("/obj", &[("range", "bytes=65530-131080")]).await;
    assert_eq!(parts_of(&again, &body, "mended"), [(65530, 131080)]);
}

/// The framing every server must give answers that have no body (RFC 9112 section 6.3), and
/// the length a HEAD is told (RFC 9110 section 9.3.2: the fields a GET would get).
#[tokio::test]
async fn bodiless_answers_have_no_body_framing_and_head_has_the_gets_length() {
    let body = object(LENGTH);
    for keeping in BOTH {
        let s = Setup::keeping(keeping);
        s.known("/obj", storable(&body)).await;
        s.origin.set("/empty", Reply::ok("").status(204));
        let small = object(5000);
        s.origin.set(
            "/chunked",
            Reply::bytes(&small)
                .header("cache-control", "max-age=600")
                .chunked(),
        );

        let request = b"GET /empty HTTP/1.1\r\nHost: c.example\r\n\r\n\
                        HEAD /obj HTTP/1.1\r\nHost: c.example\r\n\r\n\
                        HEAD /chunked HTTP/1.1\r\nHost: c.example\r\nConnection: close\r\n\r\n";
        let mut stream = TcpStream::connect(s.proxy.addr).await.expect("connect");
        stream.write_all(request).await.expect("send");
        let bytes = read_available_bytes(&mut stream, Duration::from_millis(400)).await;
        let text = String::from_utf8_lossy(&bytes).to_string();
        let (no_content, rest) = text.split_once("\r\n\r\n").expect("a 204 head");
        assert!(
            no_content.starts_with("HTTP/1.1 204 "),
            "{keeping:?}: {text}"
        );
        let no_content = no_content.to_lowercase();
        // RFC 9110 section 8.6: no Content-Length on a 204; RFC 9112 section 6.1: nor chunking.
        assert!(
            !no_content.contains("transfer-encoding") && !no_content.contains("content-length"),
            "{keeping:?}: {no_content}"
        );
        let heads = parse_responses(rest.as_bytes(), true)
            .unwrap_or_else(|error| panic!("{keeping:?}: {error}: {rest}"));
        let [obj, chunked_miss] = heads.as_slice() else {
            panic!("{keeping:?}: {heads:?}");
        };
        assert!(
            closed_within(&mut stream, Duration::from_secs(2))
                .await
                .is_some(),
            "{keeping:?}: Connection: close left the connection open"
        );
        let get = raw_responses(
            s.proxy.addr,
            b"GET /chunked HTTP/1.1\r\nHost: c.example\r\nConnection: close\r\n\r\n",
            false,
        )
        .await;
        let chunked_hit = raw_responses(
            s.proxy.addr,
            b"HEAD /chunked HTTP/1.1\r\nHost: c.example\r\nConnection: close\r\n\r\n",
            true,
        )
        .await;
        let (Some(get), Some(chunked_hit)) = (get.first(), chunked_hit.first()) else {
            panic!("{keeping:?}: no answer");
        };
        assert!(get.body == small, "{keeping:?}");
        assert_eq!(get.header("content-length"), Some("5000"), "{keeping:?}");
        assert_eq!(
            obj.header("content-length"),
            Some(LENGTH.to_string().as_str())
        );
        for (name, head) in [("miss", chunked_miss), ("hit", chunked_hit)] {
            assert_eq!(head.status, 200, "{keeping:?} {name}");
            assert_eq!(
                head.header("content-length"),
                Some("5000"),
                "{keeping:?}: a HEAD {name} of an object that came chunked"
            );
            assert_eq!(head.header("transfer-encoding"), None, "{keeping:?} {name}");
        }
        assert!(obj.body.is_empty() && chunked_miss.body.is_empty() && chunked_hit.body.is_empty());
    }
}

#[tokio::test]
async fn an_http10_client_gets_no_chunked_coding_and_its_ranges_framed_by_length() {
    let body = object(LENGTH);
    for keeping in BOTH {
        let s = Setup::keeping(keeping);
        s.known("/obj", storable(&body)).await;
        let streamed = object(3000);
        s.origin.set(
            "/unknown-length",
            Reply::bytes(&streamed)
                .header("cache-control", "no-store")
                .chunked(),
        );
        for (path, range) in [
            ("/unknown-length", None),
            ("/obj", None),
            ("/obj", Some("bytes=70000-70009")),
            ("/obj", Some("bytes=0-9,-10")),
        ] {
            let context = format!("{keeping:?} {path} {range:?}");
            let range = range.map_or(String::new(), |range| format!("Range: {range}\r\n"));
            let request = format!("GET {path} HTTP/1.0\r\nHost: c.example\r\n{range}\r\n");
            let bytes =
                raw_exchange_bytes(s.proxy.addr, request.as_bytes(), Duration::from_secs(1)).await;
            let text = String::from_utf8_lossy(&bytes);
            let (head, _) = text.split_once("\r\n\r\n").expect("a head");
            assert!(head.starts_with("HTTP/1.0 "), "{context}: {head}");
            assert!(
                !head.to_lowercase().contains("transfer-encoding"),
                "{context}: {head}"
            );
            let answers = parse_responses(&bytes, false).unwrap_or_else(|error| {
                panic!("{context}: {error}");
            });
            let [answer] = answers.as_slice() else {
                panic!("{context}: {answers:?}");
            };
            match answer.status {
                200 if path == "/obj" => assert!(answer.body[..] == body[..], "{context}"),
                200 => assert!(answer.body[..] == streamed[..], "{context}"),
                206 => assert!(answer.header("content-length").is_some(), "{context}"),
                other => panic!("{context}: {other}"),
            }
        }
    }
}

/// The bytes `proxy` answers a GET of `path` over `version` with, `fields` in its head.
async fn hinted_exchange(proxy: &ProxyProcess, path: &str, version: &str, fields: &str) -> Vec<u8> {
    let request =
        format!("GET {path} {version}\r\nHost: hints.example\r\n{fields}Connection: close\r\n\r\n");
    raw_exchange_bytes(proxy.addr, request.as_bytes(), Duration::from_millis(500)).await
}

/// How many times `needle` occurs in `haystack`.
fn occurrences(haystack: &[u8], needle: &[u8]) -> usize {
    haystack
        .windows(needle.len())
        .filter(|w| *w == needle)
        .count()
}

/// The start of `bytes` as text, for a failure message.
fn shown(bytes: &[u8]) -> String {
    String::from_utf8_lossy(&bytes[..bytes.len().min(300)]).into_owned()
}

#[tokio::test]
async fn a_sliced_miss_gets_one_early_hint_before_its_answer_and_a_hit_none() {
    let origin = Origin::start();
    let body = object(LENGTH);
    origin.set("/video/a", storable(&body).serves_ranges());
    origin.set("/video/b", storable(&body).serves_ranges());
    let upstreams = format!(
        "[upstreams.o]\nservers = [\"{}\"]\n\
         [[routes]]\nname = \"video\"\nupstream = \"o\"\n\
         early_hints = [\"</player.js>; rel=preload; as=script\"]\n",
        origin.url()
    );
    let mut config = ProxyConfig::with_upstreams(&upstreams);
    config
        .set("server", "http1", "\"native\"")
        .set("cache", "slice_above", "\"100KiB\"")
        .set("cache", "slice_bytes", "\"64KiB\"")
        .mode("off");
    let proxy = config.start();
    let hint: &[u8] =
        b"HTTP/1.1 103 Early Hints\r\nlink: </player.js>; rel=preload; as=script\r\n\r\n";
    let early: &[u8] = b"103 Early Hints";

    // The first contact, then the other four slices as the answer streams: one hint, first.
    let miss = hinted_exchange(&proxy, "/video/a", "HTTP/1.1", "").await;
    assert!(miss.starts_with(hint), "{}", shown(&miss));
    assert_eq!(occurrences(&miss, early), 1, "{}", shown(&miss));
    let finals = parse_responses(&miss[hint.len()..], false).expect("a final answer");
    assert!(
        matches!(finals.as_slice(), [one] if one.status == 200 && one.body == body && one.header("link").is_none()),
        "{:?}",
        finals
            .iter()
            .map(|f| (f.status, &f.headers))
            .collect::<Vec<_>>()
    );
    // Every slice stored: a hit, with no hint, whole or ranged.
    for range in ["", "Range: bytes=70000-70009\r\n"] {
        let hit = hinted_exchange(&proxy, "/video/a", "HTTP/1.1", range).await;
        assert_eq!(occurrences(&hit, early), 0, "{range}: {}", shown(&hit));
    }
    // A hit on the slice the answer starts in, a miss on those after: the answer started before
    // any origin request, so no hint comes after its head.
    let start = hinted_exchange(&proxy, "/video/b", "HTTP/1.1", "Range: bytes=0-9\r\n").await;
    assert!(start.starts_with(hint), "{}", shown(&start));
    let rest = hinted_exchange(&proxy, "/video/b", "HTTP/1.1", "").await;
    assert!(rest.starts_with(b"HTTP/1.1 200 "), "{}", shown(&rest));
    assert_eq!(occurrences(&rest, early), 0, "{}", shown(&rest));
    let finals = parse_responses(&rest, false).expect("one well-framed answer");
    assert!(matches!(finals.as_slice(), [one] if one.body == body));
    // HTTP/1.0: never a 1xx (RFC 9110 section 15.2).
    origin.set("/video/c", storable(&body).serves_ranges());
    let old = hinted_exchange(&proxy, "/video/c", "HTTP/1.0", "").await;
    assert!(old.starts_with(b"HTTP/1.0 200 "), "{}", shown(&old));
    assert_eq!(occurrences(&old, early), 0);
}

/// What a client reads of an answer: its status, its `Content-Range`, its body.
fn seen(reply: &ClientReply) -> (StatusCode, Option<String>, Vec<u8>) {
    let content_range = reply.header("content-range").map(str::to_owned);
    (reply.status, content_range, reply.body.to_vec())
}

#[tokio::test]
async fn a_range_asked_first_gets_the_answer_it_gets_once_the_object_is_known() {
    let body = object(LENGTH);
    let end = LENGTH - 1;
    let cases = [
        ("bytes=0-9", None),
        ("bytes=70000-70009", None),
        ("bytes=-100", None),
        ("bytes=-0", None),
        ("bytes=262000-", None),
        (&format!("bytes={LENGTH}-") as &str, None),
        ("bytes=99999999999999999999-", None),
        ("bytes=10-19,-10", None),
        ("bytes=9-0", None),
        ("bytes=0-99,50-149", None),
        (&format!("bytes={end}-{end}"), None),
        ("bytes=70000-70009", Some("\"v1\"")),
        ("bytes=70000-70009", Some("\"v0\"")),
        ("bytes=70000-70009", Some("W/\"v1\"")),
        ("bytes=-10", Some("\"v0\"")),
    ];
    for keeping in BOTH {
        let s = Setup::keeping(keeping);
        s.known("/known", storable(&body)).await;
        for (index, (range, if_range)) in cases.iter().enumerate() {
            let context = format!("{keeping:?} {range} If-Range {if_range:?}");
            let path = format!("/first/{index}");
            s.origin.set(&path, storable(&body).serves_ranges());
            let mut fields = vec![("range", *range)];
            if let Some(validator) = if_range {
                fields.push(("if-range", validator));
            }
            let first = s.get(&path, &fields).await;
            let known = s.get("/known", &fields).await;
            if known.header("content-range").is_some()
                || known.status != StatusCode::PARTIAL_CONTENT
            {
                assert_eq!(seen(&first), seen(&known), "{context}");
            } else {
                // Multipart: each under its own boundary.
                assert_eq!(first.status, StatusCode::PARTIAL_CONTENT, "{context}");
                assert_eq!(
                    parts_of(&first, &body, &context),
                    parts_of(&known, &body, &context)
                );
            }
            assert_eq!(
                first.header("content-length"),
                Some(first.body.len().to_string().as_str()),
                "{context}"
            );
        }
    }
}

#[tokio::test]
async fn an_object_whose_only_validator_is_a_weak_date_is_never_answered_with_two_versions() {
    let s = Setup::keeping(Keeping::Sliced);
    // Modified in the second it is sent: a weak validator (RFC 9110 section 8.8.2.2), which a
    // second version made in the same second shares.
    let now = httpdate::fmt_http_date(SystemTime::now());
    let version = |n: u8| {
        let body: Vec<u8> = object(LENGTH).iter().map(|b| b ^ n).collect();
        let reply = Reply::bytes(&body)
            .header("cache-control", "max-age=600")
            .header("last-modified", &now)
            .header("date", &now)
            .serves_ranges();
        (body, reply)
    };
    let (v1, reply) = version(1);
    s.origin.set("/weak", reply);
    let start = s.get("/weak", &[("range", "bytes=0-9")]).await;
    assert_eq!(parts_of(&start, &v1, "v1"), [(0, 9)]);

    let (v2, reply) = version(2);
    s.origin.set("/weak", reply);
    match s.client.send(Method::GET, &s.proxy.url("/weak"), &[]).await {
        Ok(whole) => {
            assert_eq!(whole.status, StatusCode::OK);
            assert!(
                whole.body[..] == v1[..] || whole.body[..] == v2[..],
                "an answer mixing two versions: {}",
                whole.cache_status()
            );
        }
        Err(error) => assert!(error.contains("body failed"), "{error}"),
    }
}

#[tokio::test]
async fn a_large_object_that_varies_is_answered_only_to_requests_its_variant_matches() {
    for keeping in BOTH {
        let s = Setup::keeping(keeping);
        let variant = |n: u8, etag: &str| {
            let body: Vec<u8> = object(LENGTH).iter().map(|b| b ^ n).collect();
            let reply = Reply::bytes(&body)
                .header("cache-control", "max-age=600")
                .header("etag", etag)
                .header("vary", "accept-language")
                .serves_ranges();
            (body, reply)
        };
        let (english, reply) = variant(1, "\"en\"");
        s.origin.set("/varied", reply);
        let en = [("accept-language", "en")];
        let first = s.get("/varied", &en).await;
        assert!(first.body[..] == english[..], "{keeping:?}");
        let again = s.get("/varied", &en).await;
        assert!(again.body[..] == english[..], "{keeping:?}");
        assert!(again.is_hit(), "{keeping:?}: {}", again.cache_status());

        // RFC 9111 section 4.1: a stored response is reused only for a request whose fields
        // named by its Vary match those of the request that stored it.
        let (french, reply) = variant(2, "\"fr\"");
        s.origin.set("/varied", reply);
        for (language, range) in [("fr", None), ("de", Some("bytes=70000-70009"))] {
            let mut fields = vec![("accept-language", language)];
            fields.extend(range.map(|range| ("range", range)));
            let context = format!("{keeping:?} {language} {range:?}");
            let reply = s.get("/varied", &fields).await;
            assert!(!reply.is_hit(), "{context}: {}", reply.cache_status());
            match range {
                None => assert_whole(&reply, &french, &context),
                Some(_) => assert_eq!(parts_of(&reply, &french, &context), [(70000, 70009)]),
            }
        }
    }
}

#[tokio::test]
async fn pipelined_ranged_answers_are_each_framed_exactly_whole_and_sliced() {
    let body = object(LENGTH);
    for keeping in BOTH {
        let s = Setup::keeping(keeping);
        s.known("/obj", storable(&body)).await;
        let ask =
            |range: &str| format!("GET /obj HTTP/1.1\r\nHost: p.example\r\nRange: {range}\r\n\r\n");
        let request = [
            ask("bytes=10-19,70000-70009"),
            ask(&format!("bytes={LENGTH}-")),
            ask("bytes=-0"),
            ask("bytes=131070-131073"),
            "GET /obj HTTP/1.1\r\nHost: p.example\r\nConnection: close\r\n\r\n".to_owned(),
        ]
        .concat();
        let mut stream = TcpStream::connect(s.proxy.addr).await.expect("connect");
        stream.write_all(request.as_bytes()).await.expect("send");
        let bytes = read_available_bytes(&mut stream, Duration::from_millis(400)).await;
        assert!(
            closed_within(&mut stream, Duration::from_secs(2))
                .await
                .is_some(),
            "{keeping:?}: Connection: close left the connection open"
        );
        let answers = parse_responses(&bytes, false).expect("well-framed answers");
        let statuses: Vec<u16> = answers.iter().map(|answer| answer.status).collect();
        assert_eq!(statuses, [206, 416, 416, 206, 200], "{keeping:?}");
        assert!(
            answers[0]
                .header("content-type")
                .is_some_and(|t| t.starts_with("multipart/byteranges; boundary="))
        );
        for unsatisfiable in &answers[1..3] {
            assert!(unsatisfiable.body.is_empty(), "{keeping:?}");
            assert_eq!(
                unsatisfiable.header("content-range"),
                Some(format!("bytes */{LENGTH}").as_str())
            );
        }
        assert_eq!(answers[3].body, body[131070..=131073], "{keeping:?}");
        assert!(answers[4].body == body, "{keeping:?}");
    }
}
