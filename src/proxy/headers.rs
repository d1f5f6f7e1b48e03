//! Header rules of a proxy: hop-by-hop fields, what goes to the origin, and client conditionals.

use std::net::SocketAddr;
use std::time::SystemTime;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

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
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named.iter().chain(HOP_BY_HOP) {
        headers.remove(name);
    }
    headers.remove("keep-alive");
    headers.remove("proxy-connection");
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

/// The headers of a request to the origin, from the client's.
pub fn to_origin(
    client: &HeaderMap,
    peer: SocketAddr,
    host: Option<&HeaderValue>,
    cacheable: bool,
) -> HeaderMap {
    let mut headers = client.clone();
    strip_hop_by_hop(&mut headers);
    if cacheable {
        for name in CLIENT_CONDITIONALS {
            headers.remove(name);
        }
    }
    if let Some(host) = host {
        headers.insert(header::HOST, host.clone());
    }
    let forwarded_for = match headers.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
        Some(earlier) => format!("{earlier}, {}", peer.ip()),
        None => peer.ip().to_string(),
    };
    if let Ok(value) = HeaderValue::from_str(&forwarded_for) {
        headers.insert("x-forwarded-for", value);
    }
    headers.append(header::VIA, HeaderValue::from_static("1.1 bloomgate"));
    headers
}

/// Whether the client's `If-None-Match` / `If-Modified-Since` make a 304 the right answer for a
/// response with these headers (RFC 9110 section 13.1.2 and 13.1.3, weak comparison).
pub fn not_modified(request: &HeaderMap, response: &HeaderMap) -> bool {
    if let Some(candidates) = request
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
    {
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

    fn map(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, HeaderValue::from_static(value));
        }
        headers
    }

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
}
