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
//!       | 0x80 + code u8 | seconds u32 LE  (a date: see below)
//! name  = code u8            (a name `http` knows as a constant: its place in [`STANDARD`])
//!       | 0xFF len varint name (any other name, lower-case)
//! ```
//!
//! `Date`, `Last-Modified` and `Expires` hold an HTTP date, 29 bytes of text where its seconds
//! since 1970 take 4: such a value is kept as its seconds when formatting them gives back its very
//! bytes (an IMF-fixdate, RFC 9110 section 5.6.7), so a validator is never changed; any other
//! form stays text. A hit formats it again (a fixed layout, no parsing).
//!
//! Blocks are only made here, from a header map; decoding trusts their layout (a block from a
//! disk record is rebuilt from its checked fields, never read as it is). A block keeps its map's
//! order, in which a name's fields are adjacent, so a head written straight from the block goes
//! out in the order the map it makes would.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Write;
use std::sync::LazyLock;
use std::time::{Duration, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use httpdate::HttpDate;

/// A response's header fields, in their order, as one block.
///
/// A box, not a buffer its hits share: a hit copies the values into a buffer of its own, which
/// costs it two allocations (the buffer and its count) and spares the entry the count a shared
/// buffer keeps (32 bytes, and every hit's increments of it on one cache line).
#[derive(Clone, PartialEq, Eq)]
pub struct Head(Box<[u8]>);

/// The code of a name not in [`STANDARD`], written out after it.
const CUSTOM: u8 = 0xFF;

/// Added to a standard name's code when its value is a date kept as seconds.
const DATED: u8 = 0x80;

/// The fields whose values may be kept as seconds (the dates a response carries).
const DATE_FIELDS: [HeaderName; 3] = [header::DATE, header::EXPIRES, header::LAST_MODIFIED];

/// An IMF-fixdate's length: `Sun, 06 Nov 1994 08:49:37 GMT`.
const DATE_LENGTH: usize = 29;

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
            match standard_code(name) {
                Some(code) => match date_seconds(name, value) {
                    Some(seconds) => {
                        block.push(DATED + code);
                        block.extend_from_slice(&seconds.to_le_bytes());
                        continue;
                    }
                    None => block.push(code),
                },
                None => {
                    block.push(CUSTOM);
                    put_varint(&mut block, name.as_str().len());
                    block.extend_from_slice(name.as_str().as_bytes());
                }
            }
            put_varint(&mut block, value.len());
            block.extend_from_slice(value.as_bytes());
        }
        // Allocated to its length, so its weight is what it holds.
        Head(block.into_boxed_slice())
    }

    /// The fields as a header map for a response; the values are slices of one buffer made for
    /// it.
    pub fn to_map(&self) -> HeaderMap {
        let (count, size) = self.fields().fold((0, 0), |(count, size), (_, value)| {
            (count + 1, size + value.len())
        });
        let mut values = Vec::with_capacity(size);
        for (_, value) in self.fields() {
            value.write_to(&mut values);
        }
        let values = Bytes::from(values);
        let mut map = HeaderMap::with_capacity(count);
        let mut start = 0;
        for (name, value) in self.fields() {
            let end = start + value.len();
            let value = HeaderValue::from_maybe_shared(values.slice(start..end));
            if let (Some(name), Ok(value)) = (name.to_name(), value) {
                map.append(name, value);
            }
            start = end;
        }
        map
    }

    /// The first value of the field `name`, if it is present.
    pub fn get(&self, name: &HeaderName) -> Option<HeaderValue> {
        let (_, value) = self.fields().find(|(field, _)| field.is(name))?;
        HeaderValue::from_bytes(&value.bytes()).ok()
    }

    pub fn contains(&self, name: &HeaderName) -> bool {
        self.fields().any(|(field, _)| field.is(name))
    }

    /// Bytes in the block: what [`super::weight::entry`] weighs a head by.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the block is empty: it never is, as it starts with its count of fields.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The fields in order, each name with one value (a name sent on several lines comes once
    /// for each).
    pub fn fields(&self) -> Fields<'_> {
        let mut rest = &self.0[..];
        let remaining = take_varint(&mut rest).unwrap_or(0);
        Fields { rest, remaining }
    }
}

impl std::fmt::Debug for Head {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.fields().map(|(name, value)| {
                let value = String::from_utf8_lossy(&value.bytes()).into_owned();
                (name.as_str().to_owned(), value)
            }))
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
        match self {
            // A standard name against a standard one compares their codes, not their text.
            Name::Standard(standard) => *standard == name,
            Name::Custom(custom) => *custom == name.as_str(),
        }
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

/// A field's value in a block: its bytes, or a date kept as seconds since 1970.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value<'a> {
    Text(&'a [u8]),
    Date(u32),
}

impl<'a> Value<'a> {
    /// The value's bytes as the origin sent them; a date's are formatted.
    pub fn bytes(self) -> Cow<'a, [u8]> {
        match self {
            Value::Text(bytes) => Cow::Borrowed(bytes),
            Value::Date(seconds) => Cow::Owned(date_text(seconds).into_bytes()),
        }
    }

    /// The length of [`Value::bytes`].
    fn len(self) -> usize {
        match self {
            Value::Text(bytes) => bytes.len(),
            Value::Date(_) => DATE_LENGTH,
        }
    }

    /// Appends [`Value::bytes`] to `out`, a date formatted in place.
    pub fn write_to(self, out: &mut Vec<u8>) {
        match self {
            Value::Text(bytes) => out.extend_from_slice(bytes),
            // Writing to a `Vec` cannot fail.
            Value::Date(seconds) => {
                let _ = write!(out, "{}", http_date(seconds));
            }
        }
    }
}

/// The fields of a [`Head`], in order, with their values as the block holds them.
pub struct Fields<'a> {
    rest: &'a [u8],
    remaining: usize,
}

impl<'a> Iterator for Fields<'a> {
    type Item = (Name<'a>, Value<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let rest = &mut self.rest;
        let (&code, after) = rest.split_first()?;
        *rest = after;
        let name = match STANDARD.get(usize::from(code)) {
            Some(name) => Name::Standard(name),
            None if code != CUSTOM => {
                let name = STANDARD.get(usize::from(code.checked_sub(DATED)?))?;
                let (seconds, after) = rest.split_first_chunk::<4>()?;
                *rest = after;
                let seconds = u32::from_le_bytes(*seconds);
                return Some((Name::Standard(name), Value::Date(seconds)));
            }
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
        Some((name, Value::Text(value)))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.remaining))
    }
}

/// A date field's value as seconds since 1970, when it is an IMF-fixdate that formats back to the
/// same bytes and fits 4 bytes (until 2106).
fn date_seconds(name: &HeaderName, value: &HeaderValue) -> Option<u32> {
    if value.len() != DATE_LENGTH || !DATE_FIELDS.contains(name) {
        return None;
    }
    let text = value.to_str().ok()?;
    let time = httpdate::parse_http_date(text).ok()?;
    let seconds = u32::try_from(time.duration_since(UNIX_EPOCH).ok()?.as_secs()).ok()?;
    // Formatted back where it stands (no allocation: this runs for every date a stored response
    // carries).
    let mut formatted = [0u8; DATE_LENGTH];
    write!(&mut formatted[..], "{}", http_date(seconds)).ok()?;
    (formatted == text.as_bytes()).then_some(seconds)
}

fn http_date(seconds: u32) -> HttpDate {
    HttpDate::from(UNIX_EPOCH + Duration::from_secs(seconds.into()))
}

fn date_text(seconds: u32) -> String {
    http_date(seconds).to_string()
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
    standard_code(name).is_some()
}

/// A standard name's code, its place in [`STANDARD`]. Looked up by the name's hash: a
/// standard `HeaderName` hashes as its variant, not its text, and a block is made on every store,
/// twice per field; a binary search compared about seven strings per look.
fn standard_code(name: &HeaderName) -> Option<u8> {
    static CODES: LazyLock<HashMap<HeaderName, u8>> = LazyLock::new(|| {
        STANDARD
            .iter()
            .enumerate()
            .map(|(code, name)| (name.clone(), code as u8))
            .collect()
    });
    CODES.get(name).copied()
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
    use proptest::prelude::*;

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
        // Sorted, so that a missing or doubled name shows; every name is found at its own place,
        // by the constant and by its text as a client's or origin's head gives it.
        assert!(
            STANDARD
                .windows(2)
                .all(|pair| pair[0].as_str() < pair[1].as_str())
        );
        for (code, name) in STANDARD.iter().enumerate() {
            let parsed = HeaderName::from_bytes(name.as_str().to_ascii_uppercase().as_bytes())
                .expect("a name");
            assert_eq!(standard_code(name), Some(code as u8), "{name}");
            assert_eq!(standard_code(&parsed), Some(code as u8), "{name}");
        }
        assert_eq!(standard_code(&HeaderName::from_static("x-etag")), None);
        // Every code, and every code with its date mark, is below the custom names' one.
        assert!(STANDARD.len() <= usize::from(DATED));
        assert!(usize::from(DATED) + STANDARD.len() <= usize::from(CUSTOM));
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
    fn a_block_keeps_the_order_its_map_iterates_with_a_names_fields_adjacent() {
        let headers = map(&[
            ("x-a", "1"),
            ("cache-control", "max-age=60"),
            ("x-a", "2"),
            ("vary", "accept"),
            ("cache-control", "public"),
            ("vary", "origin"),
        ]);
        let head = Head::of(&headers);
        let block: Vec<(String, Vec<u8>)> = head
            .fields()
            .map(|(name, value)| (name.as_str().to_owned(), value.bytes().into_owned()))
            .collect();
        let iterated: Vec<(String, Vec<u8>)> = headers
            .iter()
            .map(|(name, value)| (name.as_str().to_owned(), value.as_bytes().to_vec()))
            .collect();
        assert_eq!(block, iterated);
        let names: Vec<&str> = block.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(
            names,
            [
                "x-a",
                "x-a",
                "cache-control",
                "cache-control",
                "vary",
                "vary"
            ]
        );
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
        let texts: usize = headers
            .iter()
            .filter(|(name, _)| !DATE_FIELDS.contains(name))
            .map(|(_, value)| value.len())
            .sum();
        let head = Head::of(&headers);
        // A byte of code and one of length a text field, five bytes a date, the custom name, the
        // count.
        assert_eq!(
            head.0.len(),
            texts + 2 * 5 + 5 * 2 + 1 + "x-origin-count".len() + 1
        );
    }

    /// The values of `head`'s fields as the block holds them.
    fn values(head: &Head) -> Vec<Value<'_>> {
        head.fields().map(|(_, value)| value).collect()
    }

    #[test]
    fn imf_fixdates_are_kept_as_seconds_and_given_back_byte_for_byte() {
        let headers = map(&[
            ("date", "Sun, 06 Nov 1994 08:49:37 GMT"),
            ("last-modified", "Thu, 01 Jan 1970 00:00:00 GMT"),
            ("expires", "Sun, 07 Feb 2106 06:28:15 GMT"),
            ("etag", "\"a\""),
        ]);
        let head = Head::of(&headers);
        assert_eq!(
            values(&head)[..3],
            [
                Value::Date(784_111_777),
                Value::Date(0),
                Value::Date(u32::MAX)
            ]
        );
        assert_eq!(head.to_map(), headers);
        for (name, value) in &headers {
            assert_eq!(head.get(name).as_ref(), Some(value), "{name}");
        }
        let bytes: Vec<_> = head.fields().map(|(_, value)| value.bytes()).collect();
        let sent: Vec<_> = headers.values().map(HeaderValue::as_bytes).collect();
        assert_eq!(bytes, sent);
    }

    #[test]
    fn other_dates_and_dates_in_other_fields_stay_text() {
        let kept = [
            // RFC 850 and asctime, which a recipient must accept but are not IMF-fixdates.
            ("date", "Sunday, 06-Nov-94 08:49:37 GMT"),
            ("date", "Sun Nov  6 08:49:37 1994"),
            // An IMF-fixdate in another case, with a wrong weekday, or past what 4 bytes hold.
            ("last-modified", "sun, 06 nov 1994 08:49:37 gmt"),
            ("last-modified", "Mon, 06 Nov 1994 08:49:37 GMT"),
            ("expires", "Sun, 07 Feb 2106 06:28:16 GMT"),
            ("expires", "0"),
            ("expires", "Sun, 06 Nov 1994 08:49:37 GMT "),
            // A date in a field that is not one of the three.
            ("x-date", "Sun, 06 Nov 1994 08:49:37 GMT"),
            ("if-modified-since", "Sun, 06 Nov 1994 08:49:37 GMT"),
        ];
        for (name, value) in kept {
            let headers = map(&[(name, value)]);
            let head = Head::of(&headers);
            assert_eq!(
                values(&head),
                [Value::Text(value.as_bytes())],
                "{name}: {value}"
            );
            assert_eq!(head.to_map(), headers, "{name}: {value}");
        }
    }

    proptest! {
        #[test]
        fn every_second_a_date_can_name_round_trips(seconds: u32) {
            let text = date_text(seconds);
            let headers = map(&[("date", &text)]);
            let head = Head::of(&headers);
            prop_assert_eq!(values(&head), [Value::Date(seconds)]);
            prop_assert_eq!(head.to_map(), headers);
            prop_assert_eq!(Value::Date(seconds).bytes(), text.as_bytes());
        }
    }
}
