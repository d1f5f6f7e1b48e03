//! A stored response's header fields kept as one compact block, decoded when a response is made.
//!
//! A `HeaderMap` of a typical origin response's seven fields holds about 1 KiB (its index, its
//! entries of 104 bytes each, a shared buffer for the values); the same fields as a block take
//! their values' bytes and two or three bytes more each. A cache holds many small objects, so this
//! is most of what an entry costs beside its body (`tests/memory`).
//!
//! ```text
//! block = count varint | field*
//! field = name | value_len varint | value
//! name  = code u8            (a name `http` knows as a constant: its place in [`STANDARD`])
//!       | 0xFF len varint name (any other name, lower-case)
//! ```
//!
//! Blocks are only made here, from a header map; decoding trusts their layout (a block from a
//! disk record is rebuilt from its checked fields, never read as it is).

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// A response's header fields, in their order, as one shared buffer.
#[derive(Clone, PartialEq, Eq)]
pub struct Head(Bytes);

/// The code of a name not in [`STANDARD`], written out after it.
const CUSTOM: u8 = 0xFF;

impl Head {
    /// The block of `headers`' fields.
    pub fn of(headers: &HeaderMap) -> Head {
        let size = headers
            .iter()
            .map(|(name, value)| value.len() + 3 + custom_length(name))
            .sum::<usize>();
        let mut block = Vec::with_capacity(size + 2);
        put_varint(&mut block, headers.len());
        for (name, value) in headers {
            match STANDARD.binary_search_by(|known| known.as_str().cmp(name.as_str())) {
                Ok(code) => block.push(code as u8),
                Err(_) => {
                    block.push(CUSTOM);
                    put_varint(&mut block, name.as_str().len());
                    block.extend_from_slice(name.as_str().as_bytes());
                }
            }
            put_varint(&mut block, value.len());
            block.extend_from_slice(value.as_bytes());
        }
        // Allocated to its length, so its weight is what it holds.
        Head(Bytes::from(block.into_boxed_slice()))
    }

    /// The fields as a header map for a response; values share this block's buffer.
    pub fn to_map(&self) -> HeaderMap {
        let mut fields = self.fields();
        let mut map = HeaderMap::with_capacity(fields.remaining);
        for (name, value) in &mut fields {
            if let Some(name) = name.to_name() {
                map.append(name, value);
            }
        }
        map
    }

    /// The first value of the field `name`, if it is present.
    pub fn get(&self, name: &HeaderName) -> Option<HeaderValue> {
        let mut fields = self.fields();
        while let Some((field, value)) = fields.next_raw() {
            if field.is(name) {
                return fields.shared(value);
            }
        }
        None
    }

    pub fn contains(&self, name: &HeaderName) -> bool {
        let mut fields = self.fields();
        while let Some((field, _)) = fields.next_raw() {
            if field.is(name) {
                return true;
            }
        }
        false
    }

    /// Bytes the block holds in memory: its buffer and the count it is shared by.
    pub fn weight(&self) -> usize {
        super::weight::allocation(self.0.len()) + super::weight::SHARED
    }

    /// The fields in order, each name with one value (a name sent on several lines comes once
    /// for each).
    pub fn fields(&self) -> Fields<'_> {
        let mut rest = &self.0[..];
        let remaining = take_varint(&mut rest).unwrap_or(0);
        Fields {
            block: &self.0,
            rest,
            remaining,
        }
    }
}

impl std::fmt::Debug for Head {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.fields().map(|(n, v)| (n.as_str().to_owned(), v)))
            .finish()
    }
}

/// A field's name in a block: one `http` knows, or a custom one still in the block.
#[derive(Clone, Copy, Debug)]
pub enum Name<'a> {
    Standard(&'static HeaderName),
    Custom(&'a str),
}

impl Name<'_> {
    pub fn as_str(&self) -> &str {
        match self {
            Name::Standard(name) => name.as_str(),
            Name::Custom(name) => name,
        }
    }

    pub fn is(&self, name: &HeaderName) -> bool {
        self.as_str() == name.as_str()
    }

    /// An owned name; a custom one is copied (`http` cannot share it with the block). `None`
    /// only for a name that is not one, which a block made by [`Head::of`] never holds.
    pub fn to_name(self) -> Option<HeaderName> {
        match self {
            Name::Standard(name) => Some(name.clone()),
            Name::Custom(name) => HeaderName::from_bytes(name.as_bytes()).ok(),
        }
    }
}

/// The fields of a [`Head`], in order.
pub struct Fields<'a> {
    block: &'a Bytes,
    rest: &'a [u8],
    remaining: usize,
}

impl<'a> Fields<'a> {
    /// The next field with its value's bytes, not made into a `HeaderValue` (which checks them
    /// and counts a reference to the block): for a reader that looks for one name.
    pub fn next_raw(&mut self) -> Option<(Name<'a>, &'a [u8])> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let rest = &mut self.rest;
        let code = *rest.first()?;
        *rest = &rest[1..];
        let name = match STANDARD.get(usize::from(code)) {
            Some(name) => Name::Standard(name),
            None => {
                let length = take_varint(rest)?;
                let (name, after) = rest.split_at_checked(length)?;
                *rest = after;
                Name::Custom(std::str::from_utf8(name).ok()?)
            }
        };
        let length = take_varint(rest)?;
        let (value, after) = rest.split_at_checked(length)?;
        *rest = after;
        Some((name, value))
    }

    /// A value [`Fields::next_raw`] gave, as a `HeaderValue` sharing the block.
    fn shared(&self, value: &[u8]) -> Option<HeaderValue> {
        HeaderValue::from_maybe_shared(self.block.slice_ref(value)).ok()
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = (Name<'a>, HeaderValue);

    fn next(&mut self) -> Option<Self::Item> {
        let (name, value) = self.next_raw()?;
        Some((name, self.shared(value)?))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.remaining))
    }
}

/// Bytes a name takes in a block beyond its code.
fn custom_length(name: &HeaderName) -> usize {
    if is_standard(name) {
        0
    } else {
        name.as_str().len() + 2
    }
}

/// Whether `http` knows the name as a constant, which costs no allocation.
fn is_standard(name: &HeaderName) -> bool {
    STANDARD
        .binary_search_by(|known| known.as_str().cmp(name.as_str()))
        .is_ok()
}

/// LEB128: seven bits a byte, low bits first.
fn put_varint(out: &mut Vec<u8>, mut value: usize) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn take_varint(rest: &mut &[u8]) -> Option<usize> {
    let mut value = 0usize;
    for shift in (0..usize::BITS).step_by(7) {
        let (&byte, after) = rest.split_first()?;
        *rest = after;
        value |= usize::from(byte & 0x7F) << shift;
        if byte < 0x80 {
            return Some(value);
        }
    }
    None
}

/// `http::header`'s constants, sorted by name: a name's place here is its code in a block.
static STANDARD: [HeaderName; 81] = [
    header::ACCEPT,
    header::ACCEPT_CHARSET,
    header::ACCEPT_ENCODING,
    header::ACCEPT_LANGUAGE,
    header::ACCEPT_RANGES,
    header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
    header::ACCESS_CONTROL_ALLOW_HEADERS,
    header::ACCESS_CONTROL_ALLOW_METHODS,
    header::ACCESS_CONTROL_ALLOW_ORIGIN,
    header::ACCESS_CONTROL_EXPOSE_HEADERS,
    header::ACCESS_CONTROL_MAX_AGE,
    header::ACCESS_CONTROL_REQUEST_HEADERS,
    header::ACCESS_CONTROL_REQUEST_METHOD,
    header::AGE,
    header::ALLOW,
    header::ALT_SVC,
    header::AUTHORIZATION,
    header::CACHE_CONTROL,
    header::CACHE_STATUS,
    header::CDN_CACHE_CONTROL,
    header::CONNECTION,
    header::CONTENT_DISPOSITION,
    header::CONTENT_ENCODING,
    header::CONTENT_LANGUAGE,
    header::CONTENT_LENGTH,
    header::CONTENT_LOCATION,
    header::CONTENT_RANGE,
    header::CONTENT_SECURITY_POLICY,
    header::CONTENT_SECURITY_POLICY_REPORT_ONLY,
    header::CONTENT_TYPE,
    header::COOKIE,
    header::DATE,
    header::DNT,
    header::ETAG,
    header::EXPECT,
    header::EXPIRES,
    header::FORWARDED,
    header::FROM,
    header::HOST,
    header::IF_MATCH,
    header::IF_MODIFIED_SINCE,
    header::IF_NONE_MATCH,
    header::IF_RANGE,
    header::IF_UNMODIFIED_SINCE,
    header::LAST_MODIFIED,
    header::LINK,
    header::LOCATION,
    header::MAX_FORWARDS,
    header::ORIGIN,
    header::PRAGMA,
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::PUBLIC_KEY_PINS,
    header::PUBLIC_KEY_PINS_REPORT_ONLY,
    header::RANGE,
    header::REFERER,
    header::REFERRER_POLICY,
    header::REFRESH,
    header::RETRY_AFTER,
    header::SEC_WEBSOCKET_ACCEPT,
    header::SEC_WEBSOCKET_EXTENSIONS,
    header::SEC_WEBSOCKET_KEY,
    header::SEC_WEBSOCKET_PROTOCOL,
    header::SEC_WEBSOCKET_VERSION,
    header::SERVER,
    header::SET_COOKIE,
    header::STRICT_TRANSPORT_SECURITY,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::UPGRADE_INSECURE_REQUESTS,
    header::USER_AGENT,
    header::VARY,
    header::VIA,
    header::WARNING,
    header::WWW_AUTHENTICATE,
    header::X_CONTENT_TYPE_OPTIONS,
    header::X_DNS_PREFETCH_CONTROL,
    header::X_FRAME_OPTIONS,
    header::X_XSS_PROTECTION,
];

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).expect("a name"),
                HeaderValue::from_str(value).expect("a value"),
            );
        }
        map
    }

    #[test]
    fn standard_names_are_sorted_and_found_and_custom_ones_are_not() {
        // Sorted, or the binary search misses names.
        assert!(
            STANDARD
                .windows(2)
                .all(|pair| pair[0].as_str() < pair[1].as_str())
        );
        assert!(STANDARD.len() < usize::from(CUSTOM));
        assert!(is_standard(&header::ETAG));
        assert!(is_standard(&header::ACCEPT));
        assert!(is_standard(&header::X_XSS_PROTECTION));
        assert!(!is_standard(&HeaderName::from_static("x-origin-count")));
    }

    #[test]
    fn a_block_gives_back_every_field_in_order_with_repeated_names() {
        let headers = map(&[
            ("cache-control", "public, max-age=60"),
            ("x-served-by", "cache-lhr-1"),
            ("set-cookie", "a=1"),
            ("set-cookie", "b=2"),
            ("x-long", &"v".repeat(300)),
            ("etag", "\"abc\""),
            ("x-empty", ""),
        ]);
        let head = Head::of(&headers);
        assert_eq!(head.to_map(), headers);
        let names: Vec<String> = head.fields().map(|(n, _)| n.as_str().to_owned()).collect();
        assert_eq!(
            names,
            [
                "cache-control",
                "x-served-by",
                "set-cookie",
                "set-cookie",
                "x-long",
                "etag",
                "x-empty"
            ]
        );
        assert_eq!(
            head.get(&header::SET_COOKIE),
            Some(HeaderValue::from_static("a=1"))
        );
        assert_eq!(
            head.get(&HeaderName::from_static("x-long"))
                .map(|v| v.len()),
            Some(300)
        );
        assert!(head.contains(&header::ETAG));
        assert!(!head.contains(&header::LAST_MODIFIED));
        assert_eq!(Head::of(&HeaderMap::new()).to_map(), HeaderMap::new());
    }

    #[test]
    fn lengths_past_one_varint_byte_round_trip() {
        for length in [0, 1, 127, 128, 16_383, 16_384, 70_000] {
            let mut block = Vec::new();
            put_varint(&mut block, length);
            let mut rest = &block[..];
            assert_eq!(take_varint(&mut rest), Some(length));
            assert!(rest.is_empty());
        }
    }

    #[test]
    fn a_block_is_far_smaller_than_the_map_it_was_made_from() {
        let headers = map(&[
            ("cache-control", "public, max-age=3600"),
            ("content-type", "application/javascript"),
            ("content-length", "1000"),
            ("etag", "\"0000000000000001\""),
            ("last-modified", "Thu, 01 Jan 2015 00:00:00 GMT"),
            ("date", "Mon, 23 Nov 2026 19:00:00 GMT"),
            ("x-origin-count", "1"),
        ]);
        let values: usize = headers.values().map(HeaderValue::len).sum();
        let head = Head::of(&headers);
        // A byte of code and one of length a field, the custom name, the count.
        assert_eq!(
            head.0.len(),
            values + 2 * 7 + 1 + "x-origin-count".len() + 1
        );
    }
}
