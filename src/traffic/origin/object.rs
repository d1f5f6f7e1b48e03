//! One object request: its query parameters parsed, and its response (conditionals, a single
//! range, the headers, the faults that take over the connection).

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;

use super::{LAST_MODIFIED, LAST_MODIFIED_UNIX, OriginState};
use crate::traffic::fault::{Fault, RawEnding, RawResponse, Takeover};
use crate::traffic::object_path::decode_key;
use crate::traffic::pattern::{ObjectChunks, OriginBody, stable_hash};

/// Bytes of the head block ([`crate::cache::Head`]) a proxy stores for a plain object of `size`
/// bytes served with `max_age`: the fields [`ObjectRequest`] sends the first time its key is asked
/// for (`X-Origin-Count: 1`), with the `Date` that hyper adds. What `bloomgate simulate --weigh
/// proxy` weighs a head at; a key fetched again after eviction has a count of more digits.
pub fn stored_head_bytes(size: u64, max_age: u64) -> usize {
    let object = ObjectRequest::plain(String::new(), size);
    let mut headers = object.headers(max_age, &default_etag("", size), 1);
    // Any IMF-fixdate weighs the same: the block keeps a date as its seconds.
    headers.insert(header::DATE, HeaderValue::from_static(LAST_MODIFIED));
    crate::cache::Head::of(&headers).len()
}

/// The strong ETag of an object's bytes: of its content key and size, always 18 bytes.
fn default_etag(content_key: &str, size: u64) -> String {
    format!(
        "\"{:016x}\"",
        stable_hash(&[content_key.as_bytes(), &size.to_le_bytes()])
    )
}

/// An object request with the parameters that shape its response.
#[derive(Debug)]
pub(super) struct ObjectRequest {
    pub(super) key: String,
    size: u64,
    pub(super) fault: Option<Fault>,
    status: StatusCode,
    cache_control: Option<Option<String>>,
    vary: Option<HeaderName>,
    etag: Option<String>,
    /// `Surrogate-Key`: the object's tags.
    tags: Option<String>,
    pub(super) delay: Option<Duration>,
}

impl ObjectRequest {
    pub(super) fn plain(key: String, size: u64) -> Self {
        ObjectRequest {
            key,
            size,
            fault: None,
            status: StatusCode::OK,
            cache_control: None,
            vary: None,
            etag: None,
            tags: None,
            delay: None,
        }
    }

    /// Parses `/obj/<encoded key>?<query>`; the error names the bad part.
    pub(super) fn parse(encoded_key: &str, query: &str) -> Result<Self, String> {
        let key = decode_key(encoded_key)
            .ok_or_else(|| format!("bad percent-encoding in key {encoded_key:?}"))?;
        let mut object = ObjectRequest::plain(key, 0);
        let mut size = None;
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            let (name, raw) = pair.split_once('=').unwrap_or((pair, ""));
            let value = decode_key(&raw.replace('+', " "))
                .ok_or_else(|| format!("bad percent-encoding in query parameter {name}={raw:?}"))?;
            let bad = || format!("bad query parameter {name}={value:?}");
            match name {
                "size" => size = Some(value.parse::<u64>().map_err(|_| bad())?),
                "fault" => object.fault = Some(Fault::parse(&value).ok_or_else(bad)?),
                "status" => {
                    object.status = value
                        .parse::<u16>()
                        .ok()
                        .and_then(|code| StatusCode::from_u16(code).ok())
                        .ok_or_else(bad)?;
                }
                "cc" => object.cache_control = Some(Some(value).filter(|cc| !cc.is_empty())),
                "vary" => {
                    object.vary = Some(HeaderName::try_from(value.as_str()).map_err(|_| bad())?)
                }
                "etag" if value.starts_with('"') || value.starts_with("W/") => {
                    object.etag = Some(value)
                }
                "etag" => object.etag = Some(format!("\"{value}\"")),
                "tag" => object.tags = Some(value),
                "delay-ms" => {
                    object.delay = Some(Duration::from_millis(value.parse().map_err(|_| bad())?));
                }
                // Other parameters (cache busters, the proxy's own) do not change the object.
                _ => {}
            }
        }
        object.size = size.ok_or_else(|| format!("missing ?size=N for key {:?}", object.key))?;
        Ok(object)
    }

    pub(super) fn respond(
        &self,
        request: &Request<Incoming>,
        state: &OriginState,
        count: u64,
        takeover: &Takeover,
    ) -> Response<OriginBody> {
        let content_key = self.content_key(request);
        let etag = self
            .etag
            .clone()
            .unwrap_or_else(|| default_etag(&content_key, self.size));
        let headers = self.headers(state.opts.max_age, &etag, count);

        if self.status == StatusCode::OK
            && self.fault.is_none()
            && is_not_modified(request.headers(), &etag)
        {
            let mut response = Response::new(OriginBody::empty());
            *response.status_mut() = StatusCode::NOT_MODIFIED;
            *response.headers_mut() = headers;
            return response;
        }

        let is_head = request.method() == Method::HEAD;
        if self.status == StatusCode::OK
            && self.fault.is_none()
            && !is_head
            && let Some(range) = single_range(request.headers(), self.size, &etag)
        {
            let mut headers = headers;
            let length = range.end - range.start;
            let content_range = format!("bytes {}-{}/{}", range.start, range.end - 1, self.size);
            if let Ok(value) = HeaderValue::from_str(&content_range) {
                headers.insert(header::CONTENT_RANGE, value);
            }
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
            state.stats.bytes.fetch_add(length, Ordering::Relaxed);
            let mut response = Response::new(OriginBody::Object(
                ObjectChunks::range(&content_key, range).counted(state.stats.taken()),
            ));
            *response.status_mut() = StatusCode::PARTIAL_CONTENT;
            *response.headers_mut() = headers;
            return response;
        }
        let chunks = ObjectChunks::new(&content_key, self.size);
        let (body, sent) = match self.fault {
            Some(fault @ (Fault::ResetMidBody | Fault::ShortBody | Fault::BadChunked)) => {
                let (raw, sent) = self.raw_response(fault, &headers, chunks, is_head);
                takeover.set(raw);
                state.stats.bytes.fetch_add(sent, Ordering::Relaxed);
                // Replaced on the wire by the raw bytes; kept well-formed so hyper writes it.
                return Response::new(OriginBody::empty());
            }
            Some(Fault::Trickle) if !is_head => {
                let first = chunks
                    .into_iter()
                    .next()
                    .map(|chunk| chunk.slice(..chunk.len().min(Fault::TRICKLE_BYTES as usize)));
                let sent = first.as_ref().map_or(0, |chunk| chunk.len() as u64);
                (OriginBody::Stall(first), sent)
            }
            _ if is_head => (OriginBody::empty(), 0),
            _ => (
                OriginBody::Object(chunks.counted(state.stats.taken())),
                self.size,
            ),
        };
        state.stats.bytes.fetch_add(sent, Ordering::Relaxed);
        let mut response = Response::new(body);
        *response.status_mut() = self.status;
        *response.headers_mut() = headers;
        response
    }

    /// The key its bytes and ETag come from: a variant is a different object, keyed with the
    /// value of the header it varies on.
    fn content_key(&self, request: &Request<Incoming>) -> String {
        match &self.vary {
            Some(name) => {
                let value = request
                    .headers()
                    .get(name)
                    .map_or(&b""[..], HeaderValue::as_bytes);
                format!("{}|{}", self.key, String::from_utf8_lossy(value))
            }
            None => self.key.clone(),
        }
    }

    fn headers(&self, max_age: u64, etag: &str, count: u64) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let cache_control = match &self.cache_control {
            Some(cc) => cc.clone(),
            None => Some(format!("public, max-age={max_age}")),
        };
        let mut insert = |name: HeaderName, value: &str| {
            // Values that are not valid in a header (from a query parameter) are left out.
            if let Ok(value) = HeaderValue::from_str(value) {
                headers.insert(name, value);
            }
        };
        if let Some(cache_control) = cache_control {
            insert(header::CACHE_CONTROL, &cache_control);
        }
        insert(header::ETAG, etag);
        insert(header::LAST_MODIFIED, LAST_MODIFIED);
        insert(header::CONTENT_LENGTH, &self.size.to_string());
        insert(
            HeaderName::from_static("x-origin-count"),
            &count.to_string(),
        );
        if let Some(tags) = &self.tags {
            insert(HeaderName::from_static("surrogate-key"), tags);
        }
        if let Some(vary) = &self.vary {
            headers.insert(header::VARY, HeaderValue::from(vary.clone()));
        }
        headers
    }

    /// The bytes of a deliberately broken response, and how many body bytes they carry.
    fn raw_response(
        &self,
        fault: Fault,
        headers: &HeaderMap,
        mut chunks: ObjectChunks,
        is_head: bool,
    ) -> (RawResponse, u64) {
        let mut head = format!(
            "HTTP/1.1 {} {}\r\n",
            self.status.as_str(),
            self.status.canonical_reason().unwrap_or("")
        );
        for (name, value) in headers {
            if fault == Fault::BadChunked && name == header::CONTENT_LENGTH {
                continue;
            }
            let _ = write!(
                head,
                "{name}: {}\r\n",
                String::from_utf8_lossy(value.as_bytes())
            );
        }
        if fault == Fault::BadChunked {
            head.push_str("transfer-encoding: chunked\r\n");
        }
        head.push_str("\r\n");
        let mut bytes = head.into_bytes();
        let half = if is_head { 0 } else { self.size / 2 };
        let mut sent = 0;
        match fault {
            Fault::BadChunked => {
                if let Some(chunk) = chunks.next().filter(|_| !is_head) {
                    let chunk = &chunk[..chunk.len().min(1024)];
                    bytes.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
                    bytes.extend_from_slice(chunk);
                    bytes.extend_from_slice(b"\r\n");
                    sent = chunk.len() as u64;
                }
                bytes.extend_from_slice(b"zz-not-a-size\r\n");
            }
            _ => {
                for chunk in chunks {
                    let take = (half - sent).min(chunk.len() as u64);
                    bytes.extend_from_slice(&chunk[..take as usize]);
                    sent += take;
                    if sent == half {
                        break;
                    }
                }
            }
        }
        let ending = if fault == Fault::ResetMidBody {
            RawEnding::Reset
        } else {
            RawEnding::Close
        };
        (
            RawResponse {
                bytes: Bytes::from(bytes),
                ending,
            },
            sent,
        )
    }
}

/// RFC 9110 section 13.1: If-None-Match (weak comparison) wins over If-Modified-Since.
/// The one byte range a request's `Range` names within an object of `size` bytes, when it names
/// exactly one and its `If-Range`, if any, is this `etag`; `None`: the whole object is the answer.
pub(super) fn single_range(
    headers: &HeaderMap,
    size: u64,
    etag: &str,
) -> Option<std::ops::Range<u64>> {
    if let Some(if_range) = headers.get(header::IF_RANGE)
        && if_range.as_bytes() != etag.as_bytes()
    {
        return None;
    }
    let set = headers
        .get(header::RANGE)?
        .to_str()
        .ok()?
        .strip_prefix("bytes=")?;
    let (first, last) = set.trim().split_once('-')?;
    let range = match (first.parse::<u64>(), last.parse::<u64>()) {
        (Ok(first), Ok(last)) if first <= last => first..(last + 1).min(size),
        (Ok(first), Err(_)) if last.is_empty() => first..size,
        (Err(_), Ok(suffix)) if first.is_empty() && suffix > 0 => size.saturating_sub(suffix)..size,
        _ => return None,
    };
    (range.start < range.end).then_some(range)
}

fn is_not_modified(headers: &HeaderMap, etag: &str) -> bool {
    if let Some(if_none_match) = headers.get(header::IF_NONE_MATCH) {
        let Ok(if_none_match) = if_none_match.to_str() else {
            return false;
        };
        let opaque = |tag: &str| tag.trim().trim_start_matches("W/").to_owned();
        return if_none_match
            .split(',')
            .any(|candidate| candidate.trim() == "*" || opaque(candidate) == opaque(etag));
    }
    let Some(since) = headers
        .get(header::IF_MODIFIED_SINCE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let last_modified = UNIX_EPOCH + Duration::from_secs(LAST_MODIFIED_UNIX);
    httpdate::parse_http_date(since).is_ok_and(|since: SystemTime| since >= last_modified)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_range_is_served_and_anything_else_is_the_whole_object() {
        let ranged = |range: &str, if_range: Option<&str>| {
            let mut headers = HeaderMap::new();
            headers.insert(header::RANGE, HeaderValue::from_str(range).unwrap());
            if let Some(tag) = if_range {
                headers.insert(header::IF_RANGE, HeaderValue::from_str(tag).unwrap());
            }
            single_range(&headers, 1000, "\"e\"")
        };
        assert_eq!(ranged("bytes=0-99", None), Some(0..100));
        assert_eq!(ranged("bytes=900-2000", None), Some(900..1000));
        assert_eq!(ranged("bytes=990-", None), Some(990..1000));
        assert_eq!(ranged("bytes=-10", None), Some(990..1000));
        assert_eq!(ranged("bytes=0-9", Some("\"e\"")), Some(0..10));
        assert_eq!(ranged("bytes=0-9", Some("\"other\"")), None);
        assert_eq!(ranged("bytes=0-9,20-29", None), None);
        assert_eq!(ranged("bytes=1000-", None), None);
    }

    #[test]
    fn a_range_of_an_object_is_those_bytes_of_it() {
        let whole = crate::traffic::pattern::object_bytes("k", 300_000);
        for range in [0..10u64, 65_530..65_560, 131_072..300_000, 299_999..300_000] {
            let part: Vec<u8> = ObjectChunks::range("k", range.clone())
                .flat_map(|chunk| chunk.to_vec())
                .collect();
            assert!(
                part[..] == whole[range.start as usize..range.end as usize],
                "{range:?}"
            );
        }
    }

    #[test]
    fn the_last_modified_constants_agree() {
        let parsed = httpdate::parse_http_date(LAST_MODIFIED).unwrap();
        assert_eq!(parsed, UNIX_EPOCH + Duration::from_secs(LAST_MODIFIED_UNIX));
    }

    #[test]
    fn query_parameters_are_parsed_and_bad_ones_named() {
        let object = ObjectRequest::parse(
            "a%20b",
            "size=5&cc=private%2C+max-age%3D1&etag=v1&status=503&tag=a+b",
        )
        .unwrap();
        assert_eq!(object.tags.as_deref(), Some("a b"));
        assert_eq!(object.key, "a b");
        assert_eq!(object.size, 5);
        assert_eq!(
            object.cache_control,
            Some(Some("private, max-age=1".to_owned()))
        );
        assert_eq!(object.etag.as_deref(), Some("\"v1\""));
        assert_eq!(object.status, StatusCode::SERVICE_UNAVAILABLE);
        let error = ObjectRequest::parse("k", "size=5&fault=explode").unwrap_err();
        assert!(error.contains("fault=\"explode\""), "{error}");
        let error = ObjectRequest::parse("k", "").unwrap_err();
        assert!(error.contains("size"), "{error}");
    }
}
