//! Header rules of a proxy: hop-by-hop fields, what goes to the origin, and client conditionals.

use std::net::SocketAddr;
use std::time::SystemTime;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{StatusCode, Version};

use crate::cache::field::combined;
use crate::config::FORWARDING_HEADERS;
use crate::proxy::request::cdn_loop;

/// Fields that describe one connection, never forwarded (RFC 9110 section 7.6.1).
const HOP_BY_HOP: &[HeaderName] = &[
    header::CONNECTION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
];

/// Removes hop-by-hop fields, including every field the `Connection` header names.
///
/// It looks at the names the map holds, a few, rather than asking the map for each name the rule
/// knows: a removal hashes its name (parses it, when given as text) whether the field is there or
/// not, and most maps hold none of them.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named = connection_named(headers);
    let doomed: Vec<HeaderName> = headers
        .keys()
        .filter(|name| is_hop_by_hop(name) || named.contains(name))
        .cloned()
        .collect();
    for name in doomed {
        headers.remove(name);
    }
}

/// The names a message's `Connection` fields list (RFC 9110 section 7.6.1): none on most.
fn connection_named(headers: &HeaderMap) -> Vec<HeaderName> {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect()
}

fn is_hop_by_hop(name: &HeaderName) -> bool {
    HOP_BY_HOP.contains(name) || matches!(name.as_str(), "keep-alive" | "proxy-connection")
}

/// Client conditionals the cache answers itself: a cacheable fetch asks the origin for the full
/// response so that it can be stored.
const CLIENT_CONDITIONALS: &[HeaderName] = &[
    header::IF_NONE_MATCH,
    header::IF_MODIFIED_SINCE,
    header::IF_MATCH,
    header::IF_UNMODIFIED_SINCE,
    header::IF_RANGE,
];

/// What the request to the origin carries as its body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OriginBody {
    /// None: a cacheable fetch, whatever the client sent (RFC 9110 section 9.3.1 gives a body on
    /// GET no meaning). The client's framing fields go too: announcing bytes that do not follow
    /// would make the origin read the next request on a pooled connection as this one's body.
    Dropped,
    /// The client's body, streamed; `Some(n)` when its length is known.
    Forwarded(Option<u64>),
    /// None, on a GET whose range the origin answers itself (the cache will not cut it from the
    /// whole object): its `Range` and conditionals go on, its framing goes with its body.
    Omitted,
}

/// Who the request came from and how, for the forwarding fields the origin receives.
pub struct Forwarding<'a> {
    pub peer: SocketAddr,
    /// The scheme of the client's connection, for `X-Forwarded-Proto`.
    pub scheme: &'static str,
    /// The `Host` the origin receives: the client's validated authority or the origin's own.
    pub host: HeaderValue,
    /// The client's protocol version, for `Via` (RFC 9110 section 7.6.3).
    pub version: Version,
    /// Client-sent forwarding fields passed as sent (`origin.trusted_forwarding_headers`).
    pub trusted: &'a [HeaderName],
}

/// The headers of a request to the origin, from the client's.
///
/// One pass over the client's fields keeps those that go on, instead of a copy of the map from
/// which every name the rules know (some forty) is removed: a removal costs a hash of its name
/// whether the field is there or not, and a request holds a handful of fields.
pub fn to_origin(client: &HeaderMap, forwarding: &Forwarding<'_>, body: OriginBody) -> HeaderMap {
    let named = connection_named(client);
    let mut headers = HeaderMap::with_capacity(client.keys_len() + 6);
    // RFC 9110 section 7.2: the origin's own authority (see `Forwarding::host`).
    headers.insert(header::HOST, forwarding.host.clone());
    for (name, value) in client {
        if !stays_from_client(name, &named, body, forwarding.trusted) {
            continue;
        }
        headers.append(name.clone(), value.clone());
    }
    if let OriginBody::Forwarded(Some(length)) = body
        && (length > 0 || client.contains_key(header::CONTENT_LENGTH))
    {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    }
    append_forwarding_fields(&mut headers, client, forwarding);
    headers
}

/// The fields this proxy adds to a request for the origin, after the client's that went on:
/// `X-Forwarded-For` with the peer appended, `X-Forwarded-Proto` unless trusted as sent, its
/// `Via` and its `CDN-Loop` entry.
fn append_forwarding_fields(
    headers: &mut HeaderMap,
    client: &HeaderMap,
    forwarding: &Forwarding<'_>,
) {
    let peer = forwarding.peer.ip().to_string();
    let forwarded_for = match combined(client, "x-forwarded-for") {
        Some(earlier) => match earlier.to_str() {
            Ok(earlier) => format!("{earlier}, {peer}"),
            Err(_) => peer,
        },
        None => peer,
    };
    if let Ok(value) = HeaderValue::from_str(&forwarded_for) {
        headers.insert(HeaderName::from_static("x-forwarded-for"), value);
    }
    let proto = HeaderName::from_static("x-forwarded-proto");
    if !forwarding.trusted.contains(&proto) {
        headers.insert(proto, HeaderValue::from_static(forwarding.scheme));
    }
    let via = match forwarding.version {
        Version::HTTP_10 => "1.0 bloomgate",
        Version::HTTP_2 => "2 bloomgate",
        _ => "1.1 bloomgate",
    };
    headers.append(header::VIA, HeaderValue::from_static(via));
    // After the client's entries, which go on as sent (RFC 8586 section 2).
    headers.append(cdn_loop::CDN_LOOP, cdn_loop::entry().clone());
}

/// Whether a client's field `name` goes on to the origin: not a hop-by-hop field (nor one its
/// `Connection` named), not its `Host` (the origin gets its own), not its framing (RFC 9112 section
/// 6: derived from the body actually sent), not what the cache answers itself when the body is
/// dropped for a cacheable fetch (conditionals, `Range`: the cache stores whole objects and cuts
/// ranges from them; `Expect`), and not a forwarding field the configuration does not trust.
fn stays_from_client(
    name: &HeaderName,
    connection_named: &[HeaderName],
    body: OriginBody,
    trusted: &[HeaderName],
) -> bool {
    if is_hop_by_hop(name)
        || connection_named.contains(name)
        || name == header::HOST
        || name == header::CONTENT_LENGTH
    {
        return false;
    }
    let answered_here = match body {
        OriginBody::Dropped => {
            CLIENT_CONDITIONALS.contains(name) || name == header::RANGE || name == header::EXPECT
        }
        OriginBody::Omitted => name == header::EXPECT,
        OriginBody::Forwarded(_) => false,
    };
    if answered_here {
        return false;
    }
    !FORWARDING_HEADERS.contains(&name.as_str()) || trusted.contains(name)
}

/// Why an origin response cannot be forwarded.
#[derive(Debug, thiserror::Error)]
#[error("origin response has a transfer coding other than chunked: {0:?}")]
pub struct UnknownTransferCoding(pub HeaderValue);

/// The body length a response's `Content-Length` announces, when it is one valid number.
pub fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
}

/// Gives a response whose body was read whole the `Content-Length` it turned out to have, when it
/// came without one (chunked), so that a HEAD of it gets the length a GET would (RFC 9110 section
/// 9.3.2); never on a 204, which has no content (section 8.6).
pub fn record_read_length(status: StatusCode, headers: &mut HeaderMap, length: usize) {
    if status != StatusCode::NO_CONTENT && !headers.contains_key(header::CONTENT_LENGTH) {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length as u64));
    }
}

/// Whether an origin response's framing was ambiguous (RFC 9112 section 6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponseFraming {
    Clear,
    /// Both `Transfer-Encoding` and `Content-Length`, or `Content-Length` on several lines: the
    /// body was framed by the chunked coding and the length removed. Forwarded, never stored.
    Ambiguous,
}

/// Makes an origin response's framing fields agree with the body hyper decoded, before anything is
/// forwarded or stored: `Transfer-Encoding` overrides `Content-Length`, which is removed (RFC 9112
/// section 6.3 rule 3). A coding other than `chunked` would reach the client still coded once
/// `Transfer-Encoding` (hop-by-hop) is stripped, so it is refused.
pub fn settle_response_framing(
    headers: &mut HeaderMap,
) -> Result<ResponseFraming, UnknownTransferCoding> {
    if let Some(codings) = combined(headers, header::TRANSFER_ENCODING) {
        let only_chunked = codings.to_str().is_ok_and(|text| {
            text.split(',')
                .map(str::trim)
                .filter(|coding| !coding.is_empty())
                .all(|coding| coding.eq_ignore_ascii_case("chunked"))
        });
        if !only_chunked {
            return Err(UnknownTransferCoding(codings));
        }
        if headers.remove(header::CONTENT_LENGTH).is_some() {
            return Ok(ResponseFraming::Ambiguous);
        }
        return Ok(ResponseFraming::Clear);
    }
    let mut lengths = headers.get_all(header::CONTENT_LENGTH).iter();
    if let (Some(first), Some(_)) = (lengths.next(), lengths.next()) {
        // hyper accepted the lines, so they agree; keep one.
        let first = first.clone();
        headers.insert(header::CONTENT_LENGTH, first);
        return Ok(ResponseFraming::Ambiguous);
    }
    Ok(ResponseFraming::Clear)
}

/// Whether the client's `If-None-Match` / `If-Modified-Since` make a 304 the right answer for a
/// response with these headers (RFC 9110 section 13.1.2 and 13.1.3, weak comparison).
pub fn not_modified(request: &HeaderMap, response: &HeaderMap) -> bool {
    if let Some(candidates) = combined(request, header::IF_NONE_MATCH) {
        let Ok(candidates) = candidates.to_str() else {
            return false;
        };
        let Some(etag) = response.get(header::ETAG).and_then(|v| v.to_str().ok()) else {
            return false;
        };
        let etag = weak(etag);
        return candidates
            .split(',')
            .map(str::trim)
            .any(|candidate| candidate == "*" || weak(candidate) == etag);
    }
    let since = request
        .get(header::IF_MODIFIED_SINCE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| httpdate::parse_http_date(v).ok());
    let modified = response
        .get(header::LAST_MODIFIED)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| httpdate::parse_http_date(v).ok());
    match (since, modified) {
        (Some(since), Some(modified)) => {
            modified <= since && since <= SystemTime::now() + std::time::Duration::from_secs(60)
        }
        _ => false,
    }
}

fn weak(tag: &str) -> &str {
    tag.trim().trim_start_matches("W/")
}

/// Fields a 304 carries from the response it stands for (RFC 9110 section 15.4.5).
const NOT_MODIFIED_FIELDS: &[HeaderName] = &[
    header::CACHE_CONTROL,
    header::CONTENT_LOCATION,
    header::DATE,
    header::ETAG,
    header::EXPIRES,
    header::LAST_MODIFIED,
    header::VARY,
    header::AGE,
];

pub fn not_modified_headers(full: &HeaderMap) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for name in NOT_MODIFIED_FIELDS {
        for value in full.get_all(name) {
            headers.append(name.clone(), value.clone());
        }
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::field::lines as map;

    #[test]
    fn connection_named_fields_are_stripped() {
        let mut headers = map(&[
            ("connection", "close, x-secret"),
            ("x-secret", "1"),
            ("x-kept", "2"),
        ]);
        strip_hop_by_hop(&mut headers);
        assert!(headers.get("x-secret").is_none());
        assert!(headers.get("connection").is_none());
        assert_eq!(headers.get("x-kept").map(|v| v.as_bytes()), Some(&b"2"[..]));
    }

    fn forwarding(trusted: &[HeaderName]) -> Forwarding<'_> {
        Forwarding {
            scheme: "http",
            peer: "192.0.2.7:5000".parse().expect("address"),
            host: HeaderValue::from_static("origin.internal:8081"),
            version: Version::HTTP_11,
            trusted,
        }
    }

    #[test]
    fn a_dropped_body_takes_its_framing_and_expectation_with_it() {
        let client = map(&[
            ("content-length", "25"),
            ("transfer-encoding", "chunked"),
            ("expect", "100-continue"),
            ("if-none-match", "\"v1\""),
            ("range", "bytes=0-9"),
            ("if-range", "\"v1\""),
        ]);
        let sent = to_origin(&client, &forwarding(&[]), OriginBody::Dropped);
        for name in [
            "content-length",
            "transfer-encoding",
            "expect",
            "if-none-match",
            "range",
            "if-range",
        ] {
            assert_eq!(sent.get(name), None, "{name} reached the origin");
        }
        let passed = to_origin(&client, &forwarding(&[]), OriginBody::Omitted);
        for name in ["content-length", "transfer-encoding", "expect"] {
            assert_eq!(passed.get(name), None, "{name} reached the origin");
        }
        for name in ["range", "if-range", "if-none-match"] {
            assert_eq!(
                passed.get(name),
                client.get(name),
                "{name} was not passed on"
            );
        }
    }

    #[test]
    fn a_forwarded_body_is_announced_by_its_own_length() {
        let client = map(&[("content-length", "7"), ("transfer-encoding", "chunked")]);
        let sent = to_origin(&client, &forwarding(&[]), OriginBody::Forwarded(Some(3)));
        assert_eq!(sent.get_all("content-length").iter().count(), 1);
        assert_eq!(
            sent.get("content-length").map(|v| v.as_bytes()),
            Some(&b"3"[..])
        );
        assert_eq!(sent.get("transfer-encoding"), None);
        let chunked = to_origin(&client, &forwarding(&[]), OriginBody::Forwarded(None));
        assert_eq!(chunked.get("content-length"), None);
    }

    #[test]
    fn client_forwarding_fields_are_removed_unless_trusted() {
        let client = map(&[
            ("x-forwarded-host", "evil.example"),
            ("forwarded", "host=evil.example"),
            ("x-original-url", "/admin"),
            ("x-forwarded-proto", "https"),
            ("x-forwarded-for", "10.0.0.1"),
            ("x-forwarded-for", "10.0.0.2"),
            ("host", "victim.example"),
        ]);
        let sent = to_origin(&client, &forwarding(&[]), OriginBody::Dropped);
        for name in ["x-forwarded-host", "forwarded", "x-original-url"] {
            assert_eq!(sent.get(name), None, "{name} reached the origin");
        }
        assert_eq!(
            sent.get("x-forwarded-proto").map(|v| v.as_bytes()),
            Some(&b"http"[..])
        );
        assert_eq!(
            sent.get("x-forwarded-for").map(|v| v.as_bytes()),
            Some(&b"10.0.0.1, 10.0.0.2, 192.0.2.7"[..])
        );
        assert_eq!(
            sent.get("host").map(|v| v.as_bytes()),
            Some(&b"origin.internal:8081"[..])
        );
        let trusted = [HeaderName::from_static("x-forwarded-host")];
        let sent = to_origin(&client, &forwarding(&trusted), OriginBody::Dropped);
        assert_eq!(
            sent.get("x-forwarded-host").map(|v| v.as_bytes()),
            Some(&b"evil.example"[..])
        );
    }

    #[test]
    fn transfer_encoding_overrides_content_length_and_marks_the_response_ambiguous() {
        let mut both = map(&[("content-length", "4"), ("transfer-encoding", "chunked")]);
        assert_eq!(
            settle_response_framing(&mut both).ok(),
            Some(ResponseFraming::Ambiguous)
        );
        assert_eq!(both.get("content-length"), None);
        let mut twice = map(&[("content-length", "4"), ("content-length", "4")]);
        assert_eq!(
            settle_response_framing(&mut twice).ok(),
            Some(ResponseFraming::Ambiguous)
        );
        assert_eq!(twice.get_all("content-length").iter().count(), 1);
        let mut clean = map(&[("content-length", "4")]);
        assert_eq!(
            settle_response_framing(&mut clean).ok(),
            Some(ResponseFraming::Clear)
        );
        let mut gzip = map(&[("transfer-encoding", "gzip, chunked")]);
        assert!(settle_response_framing(&mut gzip).is_err());
    }

    #[test]
    fn etag_comparison_is_weak() {
        let response = map(&[("etag", "\"v1\"")]);
        assert!(not_modified(
            &map(&[("if-none-match", "W/\"v1\"")]),
            &response
        ));
        assert!(not_modified(
            &map(&[("if-none-match", "\"x\", \"v1\"")]),
            &response
        ));
        assert!(!not_modified(
            &map(&[("if-none-match", "\"v2\"")]),
            &response
        ));
    }

    #[test]
    fn if_modified_since_compares_dates() {
        let response = map(&[("last-modified", "Sun, 01 Jan 2023 00:00:00 GMT")]);
        assert!(not_modified(
            &map(&[("if-modified-since", "Sun, 01 Jan 2023 00:00:00 GMT")]),
            &response
        ));
        assert!(!not_modified(
            &map(&[("if-modified-since", "Sat, 31 Dec 2022 00:00:00 GMT")]),
            &response
        ));
    }

    /// The rules as they were written before `to_origin` and `strip_hop_by_hop` became one pass
    /// over the fields present: a copy of the map, then a removal of every name a rule knows.
    /// The one-pass forms must give the same fields. (What the proxy adds after the client's
    /// fields did not change, and both forms add it with `append_forwarding_fields`.)
    mod by_removal {
        use super::*;

        pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
            for name in connection_named(headers).iter().chain(HOP_BY_HOP) {
                headers.remove(name);
            }
            headers.remove("keep-alive");
            headers.remove("proxy-connection");
        }

        pub fn to_origin(
            client: &HeaderMap,
            forwarding: &Forwarding<'_>,
            body: OriginBody,
        ) -> HeaderMap {
            let mut headers = client.clone();
            strip_hop_by_hop(&mut headers);
            headers.remove(header::CONTENT_LENGTH);
            match body {
                OriginBody::Dropped => {
                    for name in CLIENT_CONDITIONALS {
                        headers.remove(name);
                    }
                    headers.remove(header::RANGE);
                    headers.remove(header::EXPECT);
                }
                OriginBody::Omitted => {
                    headers.remove(header::EXPECT);
                }
                OriginBody::Forwarded(Some(length)) => {
                    if length > 0 || client.contains_key(header::CONTENT_LENGTH) {
                        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
                    }
                }
                OriginBody::Forwarded(None) => {}
            }
            headers.insert(header::HOST, forwarding.host.clone());
            for name in FORWARDING_HEADERS {
                if !forwarding.trusted.iter().any(|trusted| trusted == name) {
                    headers.remove(*name);
                }
            }
            append_forwarding_fields(&mut headers, client, forwarding);
            headers
        }
    }

    /// Names the rules treat apart, and others; `Connection` values name some of them.
    const NAMES: &[&str] = &[
        "connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "proxy-authenticate",
        "proxy-authorization",
        "keep-alive",
        "proxy-connection",
        "host",
        "content-length",
        "if-none-match",
        "if-modified-since",
        "if-match",
        "if-unmodified-since",
        "if-range",
        "range",
        "expect",
        "forwarded",
        "x-forwarded-host",
        "x-forwarded-proto",
        "x-real-ip",
        "x-http-method-override",
        "x-forwarded-for",
        "via",
        "cdn-loop",
        "accept",
        "cookie",
        "x-custom",
        "x-other",
    ];

    fn field() -> impl proptest::strategy::Strategy<Value = (String, String)> {
        use proptest::prelude::*;
        (
            0..NAMES.len(),
            "[a-z0-9 ,.=\"-]{0,12}",
            proptest::collection::vec(0..NAMES.len(), 0..3),
        )
            .prop_map(|(name, value, listed)| match NAMES[name] {
                // A `Connection` field lists names (and the odd option), in any case.
                "connection" => {
                    let listed: Vec<String> = listed
                        .iter()
                        .map(|&i| match i % 3 {
                            0 => NAMES[i].to_ascii_uppercase(),
                            _ => NAMES[i].to_string(),
                        })
                        .chain(std::iter::once("close".to_string()))
                        .collect();
                    ("connection".to_string(), listed.join(", "))
                }
                name => (name.to_string(), value.trim().to_string()),
            })
    }

    proptest::proptest! {
        #[test]
        fn one_pass_over_the_fields_sends_what_removing_every_known_name_sent(
            fields in proptest::collection::vec(field(), 0..12),
            body in 0..5usize,
            trusted in proptest::collection::vec(proptest::bool::ANY, 4),
        ) {
            let mut client = HeaderMap::new();
            for (name, value) in &fields {
                let (Ok(name), Ok(value)) =
                    (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value))
                else {
                    continue;
                };
                client.append(name, value);
            }
            let body = [
                OriginBody::Dropped,
                OriginBody::Omitted,
                OriginBody::Forwarded(None),
                OriginBody::Forwarded(Some(0)),
                OriginBody::Forwarded(Some(9)),
            ][body];
            let trusted: Vec<HeaderName> =
                ["forwarded", "x-forwarded-host", "x-forwarded-proto", "x-real-ip"]
                    .iter()
                    .zip(&trusted)
                    .filter(|(_, trusted)| **trusted)
                    .map(|(name, _)| HeaderName::from_static(name))
                    .collect();
            proptest::prop_assert_eq!(
                to_origin(&client, &forwarding(&trusted), body),
                by_removal::to_origin(&client, &forwarding(&trusted), body)
            );
            let (mut stripped, mut removed) = (client.clone(), client);
            strip_hop_by_hop(&mut stripped);
            by_removal::strip_hop_by_hop(&mut removed);
            proptest::prop_assert_eq!(stripped, removed);
        }
    }
}
