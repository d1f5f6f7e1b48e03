//! A memory hit's response head kept as its entry's stored block and the fields the proxy sets on
//! it, which the native HTTP/1.1 server writes without a header map; a server that needs a map
//! (hyper's, for HTTP/1.1, HTTP/2 and TLS) has one made from it with the same fields in the same
//! order.
//!
//! The hits served so are a whole 200 to a GET or HEAD with no `Range`, `If-None-Match` or
//! `If-Modified-Since`: every other hit (a 304, a part, another status) keeps its map. The
//! fields set are `Accept-Ranges`, `Age` and `Cache-Status`, by the rule of `HeaderMap::insert`:
//! in the place of the entry's first field of that name (its others dropped), else after the
//! entry's fields, in that order. A field the answer removes (tag fields, targeted ones not
//! forwarded) makes the map first, as a map's removal reorders the fields after it.

use std::sync::Arc;
use std::time::SystemTime;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::request::Parts;
use http::{Method, Response, StatusCode};

use super::respond::{ProxyBody, empty, full};
use crate::cache::FieldValue;
use crate::cache::StoredResponse;

/// A hit's head: its entry's fields, and those the proxy sets over them. It rides in the
/// response's extensions, whose header map stays empty while it is there.
#[derive(Clone, Debug)]
pub struct StoredHead {
    entry: Arc<StoredResponse>,
    /// The entry's age when the hit was served, in seconds.
    age: u64,
    /// Set by the driver once it knows what the cache did.
    cache_status: Option<HeaderValue>,
}

/// The fields the proxy sets on a hit, in the order it sets them.
static SET: [HeaderName; 3] = [header::ACCEPT_RANGES, header::AGE, header::CACHE_STATUS];

/// The `Accept-Ranges` a whole 200 carries: ranges of it are served.
const ACCEPT_RANGES: &[u8] = b"bytes";

impl StoredHead {
    /// Whether a hit on `entry` for the request `parts` is answered with a stored head: a whole
    /// 200 that no conditional or range of the request changes.
    pub fn serves(parts: &Parts, entry: &StoredResponse) -> bool {
        let headers = &parts.headers;
        entry.status == StatusCode::OK
            && (parts.method == Method::GET || parts.method == Method::HEAD)
            && !headers.contains_key(header::RANGE)
            && !headers.contains_key(header::IF_NONE_MATCH)
            && !headers.contains_key(header::IF_MODIFIED_SINCE)
    }

    /// The response to a hit [`StoredHead::serves`]: the whole body (none for HEAD), its head
    /// in its extensions.
    pub fn response(
        parts: &Parts,
        entry: &Arc<StoredResponse>,
        now: SystemTime,
    ) -> Response<ProxyBody> {
        let body = if parts.method == Method::HEAD {
            empty()
        } else {
            full(entry.body.clone())
        };
        let mut response = Response::new(body);
        *response.status_mut() = entry.status;
        let head = StoredHead {
            entry: Arc::clone(entry),
            age: entry.age(now).as_secs(),
            cache_status: None,
        };
        response.extensions_mut().insert(head);
        response
    }

    /// Sets `Cache-Status` on `response`, in its stored head or its map.
    pub fn set_cache_status<B>(response: &mut Response<B>, value: HeaderValue) {
        match response.extensions_mut().get_mut::<StoredHead>() {
            Some(head) => head.cache_status = Some(value),
            None => {
                response.headers_mut().insert(header::CACHE_STATUS, value);
            }
        }
    }

    /// Removes the fields `names` from `response`; a stored head that holds one becomes a map
    /// first.
    pub fn remove_fields<'a, B>(
        response: &mut Response<B>,
        names: impl Iterator<Item = &'a HeaderName> + Clone,
    ) {
        let held = response
            .extensions()
            .get::<StoredHead>()
            .is_some_and(|head| head.holds_any(names.clone()));
        if held {
            StoredHead::into_map(response);
        }
        for name in names {
            response.headers_mut().remove(name);
        }
    }

    /// The first value of the field `name` in `response`'s head, stored or a map.
    pub fn field<B>(response: &Response<B>, name: &HeaderName) -> Option<HeaderValue> {
        match response.extensions().get::<StoredHead>() {
            Some(head) => head.get(name),
            None => response.headers().get(name).cloned(),
        }
    }

    /// Makes `response`'s header map from its stored head, if it has one: what a server that
    /// writes from a map sends.
    pub fn into_map<B>(response: &mut Response<B>) {
        if let Some(head) = response.extensions_mut().remove::<StoredHead>() {
            *response.headers_mut() = head.to_map();
        }
    }

    /// The head as a map: the entry's fields, then the proxy's inserted in the order the map
    /// path has always inserted them.
    pub fn to_map(&self) -> HeaderMap {
        let mut map = self.entry.headers();
        map.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
        map.insert(header::AGE, HeaderValue::from(self.age));
        if let Some(cache_status) = &self.cache_status {
            map.insert(header::CACHE_STATUS, cache_status.clone());
        }
        map
    }

    /// Calls `each` with every field in the order [`StoredHead::to_map`]'s map iterates them.
    pub fn for_each_field(&self, mut each: impl FnMut(&str, FieldValue<'_>)) {
        let mut digits = [0; 20];
        let values = self.set_values(&mut digits);
        let mut sent = [false; 3];
        for (name, value) in self.entry.head.fields() {
            let Some(at) = SET.iter().position(|set| name.is(set)) else {
                each(name.as_str(), value);
                continue;
            };
            match values[at] {
                // The first field of the name takes the proxy's value in its place; the rest go.
                Some(set) if !sent[at] => {
                    each(name.as_str(), FieldValue::Text(set));
                    sent[at] = true;
                }
                Some(_) => {}
                None => each(name.as_str(), value),
            }
        }
        for ((name, value), sent) in SET.iter().zip(values).zip(sent) {
            if let (Some(value), false) = (value, sent) {
                each(name.as_str(), FieldValue::Text(value));
            }
        }
    }

    /// Whether the head has a field `name`.
    pub fn contains(&self, name: &HeaderName) -> bool {
        self.sets(name) || self.entry.head.contains(name)
    }

    /// Whether the head has a field of any of `names`, found in one pass over the block.
    fn holds_any<'a>(&self, names: impl Iterator<Item = &'a HeaderName> + Clone) -> bool {
        names.clone().any(|name| self.sets(name))
            || self
                .entry
                .head
                .fields()
                .any(|(field, _)| names.clone().any(|name| field.is(name)))
    }

    fn get(&self, name: &HeaderName) -> Option<HeaderValue> {
        match self.set_value(name) {
            Some(value) => Some(value),
            None => self.entry.head.get(name),
        }
    }

    /// Whether the proxy sets the field `name`.
    fn sets(&self, name: &HeaderName) -> bool {
        SET.contains(name) && (*name != header::CACHE_STATUS || self.cache_status.is_some())
    }

    /// The value the proxy set for `name`, if it sets one.
    fn set_value(&self, name: &HeaderName) -> Option<HeaderValue> {
        match *name {
            header::ACCEPT_RANGES => Some(HeaderValue::from_static("bytes")),
            header::AGE => Some(HeaderValue::from(self.age)),
            header::CACHE_STATUS => self.cache_status.clone(),
            _ => None,
        }
    }

    /// The values of [`SET`]'s fields; `Cache-Status` once it is known.
    fn set_values<'a>(&'a self, digits: &'a mut [u8; 20]) -> [Option<&'a [u8]>; 3] {
        [
            Some(ACCEPT_RANGES),
            Some(decimal(self.age, digits)),
            self.cache_status.as_ref().map(HeaderValue::as_bytes),
        ]
    }
}

/// `value` in decimal digits, written into `digits`.
fn decimal(mut value: u64, digits: &mut [u8; 20]) -> &[u8] {
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            return &digits[start..];
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::proxy::server::h1::write::{Answering, write_head};

    /// Names a head may carry: the fields the proxy sets, those that frame a body, the dates a
    /// block keeps as seconds, and others.
    const NAMES: [&str; 14] = [
        "accept-ranges",
        "age",
        "cache-status",
        "content-length",
        "connection",
        "trailer",
        "last-modified",
        "expires",
        "cache-control",
        "etag",
        "vary",
        "content-type",
        "x-served-by",
        "x-a",
    ];

    const VALUES: [&str; 5] = [
        "Sun, 06 Nov 1994 08:49:37 GMT",
        "5",
        "public, max-age=60",
        "keep-alive",
        "\"v1\"",
    ];

    /// A 200 with `headers` and `body`, stored at `now`, varying on nothing.
    fn entry(headers: HeaderMap, body: &'static [u8], now: SystemTime) -> Arc<StoredResponse> {
        let body = bytes::Bytes::from_static(body);
        let stored =
            StoredResponse::new(StatusCode::OK, headers, body, &HeaderMap::new(), &[], now);
        Arc::new(stored)
    }

    /// What the native server writes for a hit on an entry with `fields`, from its stored head
    /// and from the map made of it.
    fn both_ways(
        fields: &[(usize, usize)],
        method: Method,
        answering: Answering,
    ) -> (String, String) {
        let mut headers = HeaderMap::new();
        // Every head has its `Date`, so that neither way adds the clock's.
        headers.append(header::DATE, HeaderValue::from_static(VALUES[0]));
        for (name, value) in fields {
            headers.append(NAMES[*name], HeaderValue::from_static(VALUES[*value]));
        }
        let request = http::Request::builder()
            .method(method)
            .body(())
            .expect("request");
        let (parts, ()) = request.into_parts();
        let now = SystemTime::now();
        let entry = entry(headers, b"twelve bytes", now);
        assert!(StoredHead::serves(&parts, &entry));
        let mut response = StoredHead::response(&parts, &entry, now);
        StoredHead::set_cache_status(&mut response, HeaderValue::from_static("bloomgate; hit"));
        let size = hyper::body::Body::size_hint(response.body());
        let head = response
            .extensions()
            .get::<StoredHead>()
            .expect("a stored head");
        let mut stored = Vec::new();
        write_head(&mut stored, StatusCode::OK, head, &size, answering);
        let mut mapped = Vec::new();
        write_head(
            &mut mapped,
            StatusCode::OK,
            &head.to_map(),
            &size,
            answering,
        );
        let text = |bytes: Vec<u8>| String::from_utf8(bytes).expect("ascii");
        (text(stored), text(mapped))
    }

    #[test]
    fn set_fields_take_the_place_of_the_entrys_own_and_the_others_follow_it() {
        let answering = Answering {
            head: false,
            http10: false,
            keep_alive: true,
        };
        // Age (twice) and X-A from the origin; Accept-Ranges and Cache-Status added after them.
        let (stored, mapped) = both_ways(&[(1, 1), (13, 4), (1, 1)], Method::GET, answering);
        assert_eq!(stored, mapped);
        let names: Vec<&str> = stored
            .lines()
            .skip(1)
            .filter_map(|line| line.split_once(':'))
            .map(|(name, _)| name)
            .collect();
        assert_eq!(
            names,
            [
                "date",
                "age",
                "x-a",
                "accept-ranges",
                "cache-status",
                "content-length"
            ]
        );
    }

    /// A server that writes only from a map (hyper's) is given the map itself: no block to turn
    /// into one, and the same fields, in the same order, as the map the block makes.
    #[test]
    fn a_hit_has_a_stored_head_only_for_a_server_that_writes_one() {
        use crate::proxy::outcome::served::Tier;
        use crate::proxy::response::respond;
        let mut headers = HeaderMap::new();
        headers.append(header::DATE, HeaderValue::from_static(VALUES[0]));
        headers.append("x-a", HeaderValue::from_static("1"));
        headers.append(header::AGE, HeaderValue::from_static("5"));
        let (parts, ()) = http::Request::new(()).into_parts();
        let now = SystemTime::now();
        let entry = entry(headers, b"body", now);
        let mut blocked = respond::hit(&parts, &entry, Tier::Ram, true, now).response;
        let head = blocked.extensions_mut().remove::<StoredHead>();
        let head = head.expect("the native server is given the stored head");
        assert!(blocked.headers().is_empty());
        let mapped = respond::hit(&parts, &entry, Tier::Ram, false, now).response;
        assert!(mapped.extensions().get::<StoredHead>().is_none());
        let fields = |map: &HeaderMap| -> Vec<(String, Vec<u8>)> {
            map.iter()
                .map(|(name, value)| (name.to_string(), value.as_bytes().to_vec()))
                .collect()
        };
        assert_eq!(fields(mapped.headers()), fields(&head.to_map()));
        assert_eq!(
            mapped.headers().get(header::ACCEPT_RANGES),
            Some(&HeaderValue::from_static("bytes"))
        );
    }

    #[test]
    fn removing_a_field_the_head_holds_makes_its_map_and_one_it_lacks_does_not() {
        let mut headers = HeaderMap::new();
        headers.append("surrogate-key", HeaderValue::from_static("t1"));
        headers.append(header::ETAG, HeaderValue::from_static("\"v1\""));
        headers.append("x-b", HeaderValue::from_static("2"));
        let request = http::Request::builder().body(()).expect("request");
        let (parts, ()) = request.into_parts();
        let now = SystemTime::now();
        let entry = entry(headers, b"body", now);
        let mut response = StoredHead::response(&parts, &entry, now);
        let absent = HeaderName::from_static("x-absent");
        StoredHead::remove_fields(&mut response, [&absent].into_iter());
        assert!(response.extensions().get::<StoredHead>().is_some());
        assert!(response.headers().is_empty());
        let expected = {
            let mut map = response
                .extensions()
                .get::<StoredHead>()
                .expect("a stored head")
                .to_map();
            map.remove("surrogate-key");
            map
        };
        let tag = HeaderName::from_static("surrogate-key");
        StoredHead::remove_fields(&mut response, [&absent, &tag].into_iter());
        assert!(response.extensions().get::<StoredHead>().is_none());
        // The map's removal moved its last field into the removed one's place.
        let names: Vec<&str> = response.headers().keys().map(HeaderName::as_str).collect();
        assert_eq!(names, ["age", "etag", "x-b", "accept-ranges"]);
        assert_eq!(response.headers(), &expected);
    }

    proptest! {
        #[test]
        fn a_stored_head_is_written_byte_for_byte_as_its_map(
            fields in proptest::collection::vec((0..NAMES.len(), 0..VALUES.len()), 0..12),
            head: bool,
            http10: bool,
            keep_alive: bool,
        ) {
            let method = if head { Method::HEAD } else { Method::GET };
            let answering = Answering { head, http10, keep_alive };
            let (stored, mapped) = both_ways(&fields, method, answering);
            prop_assert_eq!(stored, mapped);
        }
    }
}
