//! Byte ranges (RFC 9110 section 14): which requests the cache answers with part of a 200 (`Range`,
//! `If-Range`), and the 206 or 416 a range set selects from a representation of known length: one
//! part, or several as `multipart/byteranges`.

use std::ops::Range;

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::request::Parts;
use http::{Method, StatusCode};

use crate::cache::field::combined;

/// The most parts a `multipart/byteranges` answer has; a range set that still has more once
/// adjacent ranges are joined is answered with the whole representation. RFC 9110 section 14.2
/// lets a server ignore "a set of many small ranges", a sign of a broken client or an attack.
pub const MAX_PARTS: usize = 8;

/// One `range-spec` of a `bytes` range set (RFC 9110 section 14.1.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Spec {
    /// `first-last`, or `first-` to the end (`last` is `None`).
    From { first: u64, last: Option<u64> },
    /// `-n`: the last `n` bytes.
    Suffix(u64),
}

impl Spec {
    /// The bytes this spec selects from a representation of `length` bytes, `None` when it is
    /// unsatisfiable (RFC 9110 section 14.1.1).
    fn resolve(self, length: u64) -> Option<Range<u64>> {
        match self {
            Spec::From { first, last } if first < length => {
                let last = last.map_or(length - 1, |last| last.min(length - 1));
                Some(first..last + 1)
            }
            Spec::From { .. } => None,
            Spec::Suffix(0) => None,
            Spec::Suffix(n) => Some(length.saturating_sub(n)..length),
        }
    }
}

/// The byte ranges a GET asks for: a valid `Range: bytes=...` field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ranges(Vec<Spec>);

/// What a range set selects from a representation of known length.
#[derive(Debug)]
pub enum Selection {
    /// The whole representation (200): the ranges overlap, are not in ascending order or are too
    /// many (RFC 9110 section 14.2 lets a server ignore such a set), or the representation is
    /// empty (no part of it can be named).
    Whole,
    /// 416: no range lies within the representation.
    Unsatisfiable,
    /// 206 with these parts.
    Partial(Partial),
}

impl Ranges {
    /// The ranges a request asks of a response with this status and these headers, when the
    /// cache answers them: a GET (RFC 9110 section 14.2: the field is ignored on other methods)
    /// for a 200, whose `Range` is a valid `bytes` range set (an invalid one, or another unit, is
    /// ignored), and whose `If-Range`, if any, matches the response (section 13.1.5). `None`:
    /// the whole response is the answer.
    ///
    /// The client's `If-None-Match` and `If-Modified-Since` are evaluated before this (section
    /// 13.2.2): a 304 takes precedence over a range.
    pub fn requested(parts: &Parts, status: StatusCode, response: &HeaderMap) -> Option<Ranges> {
        if parts.method != Method::GET || status != StatusCode::OK {
            return None;
        }
        let ranges = Ranges::parse(combined(&parts.headers, header::RANGE)?.as_bytes())?;
        if_range_matches(&parts.headers, response).then_some(ranges)
    }

    /// Parses a `Range` field value; `None` when it is invalid or names another unit than
    /// `bytes`, either of which a recipient ignores.
    pub fn parse(value: &[u8]) -> Option<Ranges> {
        let value = std::str::from_utf8(value).ok()?;
        let (unit, set) = value.split_once('=')?;
        if !unit.eq_ignore_ascii_case("bytes") {
            return None;
        }
        let mut specs = Vec::new();
        // `1#range-spec`: empty list elements are allowed and ignored (RFC 9110 section 5.6.1).
        for element in set.split(',').map(|e| e.trim_matches([' ', '\t'])) {
            if !element.is_empty() {
                specs.push(parse_spec(element)?);
            }
        }
        (!specs.is_empty()).then_some(Ranges(specs))
    }

    /// The first byte of a set of one `first-last` or `first-` range: where the client starts
    /// reading, before the representation's length is known. `None` for a suffix or several.
    pub fn single_start(&self) -> Option<u64> {
        match self.0.as_slice() {
            [Spec::From { first, .. }] => Some(*first),
            _ => None,
        }
    }

    /// What these ranges select from a representation of `length` bytes whose type is
    /// `content_type` (each part of a multipart answer names it).
    ///
    /// Unsatisfiable ranges are dropped; if none is left the answer is 416. Ranges that touch are
    /// joined into one. What is left must be in ascending order without overlaps and at most
    /// [`MAX_PARTS`], or the whole representation is the answer: no range set can make the proxy
    /// send more than the representation plus the framing of `MAX_PARTS` parts.
    pub fn select(&self, length: u64, content_type: Option<&HeaderValue>) -> Selection {
        if length == 0 {
            return Selection::Whole;
        }
        let mut parts: Vec<Range<u64>> = Vec::new();
        for range in self.0.iter().filter_map(|spec| spec.resolve(length)) {
            match parts.last_mut() {
                Some(last) if range.start == last.end => last.end = range.end,
                Some(last) if range.start < last.end => return Selection::Whole,
                _ => parts.push(range),
            }
            if parts.len() > MAX_PARTS {
                return Selection::Whole;
            }
        }
        match parts.len() {
            0 => Selection::Unsatisfiable,
            1 => Selection::Partial(Partial::single(parts.remove(0), length)),
            _ => Selection::Partial(Partial::multipart(&parts, length, content_type)),
        }
    }
}

/// One `range-spec`: `first-last`, `first-` or `-suffix`, with digits only.
fn parse_spec(spec: &str) -> Option<Spec> {
    let (first, last) = spec.split_once('-')?;
    if first.is_empty() {
        return Some(Spec::Suffix(number(last)?));
    }
    let first = number(first)?;
    let last = match last {
        "" => None,
        last => Some(number(last)?),
    };
    // RFC 9110 section 14.1.1: a last-pos before the first-pos makes the field invalid.
    if last.is_some_and(|last| last < first) {
        return None;
    }
    Some(Spec::From { first, last })
}

/// `1*DIGIT`; a number too large for `u64` saturates, which no representation reaches.
fn number(digits: &str) -> Option<u64> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(digits.parse().unwrap_or(u64::MAX))
}

/// Whether the request's `If-Range`, if it has one, lets its `Range` apply to a response with
/// these headers (RFC 9110 section 13.1.5): an entity-tag must match the response's by the
/// strong comparison (neither weak, the same characters); a date must be exactly the response's
/// `Last-Modified`, and that must be strong: at least one second before the response's `Date`
/// (section 8.8.2.2). Anything else, including a value that is neither, means "send it all".
pub fn if_range_matches(request: &HeaderMap, response: &HeaderMap) -> bool {
    let Some(validator) = combined(request, header::IF_RANGE) else {
        return true;
    };
    let Ok(validator) = validator.to_str().map(str::trim) else {
        return false;
    };
    if validator.starts_with('"') {
        let etag = response.get(header::ETAG).and_then(|v| v.to_str().ok());
        return etag.is_some_and(|etag| etag.trim() == validator && is_entity_tag(validator));
    }
    if validator.starts_with("W/") {
        return false;
    }
    let date = |headers: &HeaderMap, name: HeaderName| {
        let value = headers.get(name)?.to_str().ok()?;
        httpdate::parse_http_date(value).ok()
    };
    let Ok(since) = httpdate::parse_http_date(validator) else {
        return false;
    };
    match (
        date(response, header::LAST_MODIFIED),
        date(response, header::DATE),
    ) {
        (Some(modified), Some(sent)) => {
            modified == since && sent >= modified + std::time::Duration::from_secs(1)
        }
        _ => false,
    }
}

/// A strong `entity-tag`: `"` then `etagc` characters then `"` (RFC 9110 section 8.8.3).
fn is_entity_tag(tag: &str) -> bool {
    tag.len() >= 2
        && tag.ends_with('"')
        && tag[1..tag.len() - 1]
            .bytes()
            .all(|b| b == 0x21 || (0x23..=0x7e).contains(&b) || b >= 0x80)
}

/// A piece of a 206 body: bytes of the representation, or the multipart framing between them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    /// These bytes of the representation, in ascending order across a body's pieces.
    Source(Range<u64>),
    Framing(Bytes),
}

/// A 206 to send: its body as pieces, its length, and the field that describes it.
#[derive(Debug)]
pub struct Partial {
    pieces: Vec<Piece>,
    length: u64,
    /// `Content-Range` for one part, the multipart `Content-Type` for several.
    field: (HeaderName, HeaderValue),
}

impl Partial {
    fn single(range: Range<u64>, complete: u64) -> Partial {
        let field = (header::CONTENT_RANGE, content_range(&range, complete));
        Partial {
            length: range.end - range.start,
            pieces: vec![Piece::Source(range)],
            field,
        }
    }

    /// The parts as `multipart/byteranges` (RFC 9110 section 14.6), each with its own
    /// `Content-Type` and `Content-Range`, under a random boundary: 128 bits from the thread's
    /// cryptographic generator, which no representation can be made to contain by chance.
    fn multipart(
        ranges: &[Range<u64>],
        complete: u64,
        content_type: Option<&HeaderValue>,
    ) -> Partial {
        let boundary = format!("{:032x}", rand::random::<u128>());
        let mut pieces = Vec::with_capacity(ranges.len() * 2 + 1);
        let mut length = 0;
        for (index, range) in ranges.iter().enumerate() {
            let mut head = BytesMut::with_capacity(128);
            if index > 0 {
                head.extend_from_slice(b"\r\n");
            }
            head.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
            if let Some(content_type) = content_type {
                head.extend_from_slice(b"content-type: ");
                head.extend_from_slice(content_type.as_bytes());
                head.extend_from_slice(b"\r\n");
            }
            head.extend_from_slice(b"content-range: ");
            head.extend_from_slice(content_range(range, complete).as_bytes());
            head.extend_from_slice(b"\r\n\r\n");
            length += head.len() as u64 + (range.end - range.start);
            pieces.push(Piece::Framing(head.freeze()));
            pieces.push(Piece::Source(range.clone()));
        }
        let end = Bytes::from(format!("\r\n--{boundary}--\r\n"));
        length += end.len() as u64;
        pieces.push(Piece::Framing(end));
        let content_type = format!("multipart/byteranges; boundary={boundary}");
        Partial {
            pieces,
            length,
            field: (header::CONTENT_TYPE, field_value(content_type)),
        }
    }

    /// The body's length, framing included.
    pub fn length(&self) -> u64 {
        self.length
    }

    pub fn into_pieces(self) -> Vec<Piece> {
        self.pieces
    }

    /// Turns the headers of the whole 200 into those of this 206: its length, and its
    /// `Content-Range` or multipart `Content-Type` (a multipart 206 has no `Content-Range`).
    pub fn describe(&self, headers: &mut HeaderMap) {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(self.length));
        headers.remove(header::CONTENT_RANGE);
        let (name, value) = &self.field;
        headers.insert(name.clone(), value.clone());
    }

    /// The body cut from the whole representation: a slice of it for one part (no copy), the
    /// parts and their framing copied together for several.
    pub fn cut(&self, whole: &Bytes) -> Bytes {
        let slice = |range: &Range<u64>| {
            let start = usize::try_from(range.start).unwrap_or(usize::MAX);
            let end = usize::try_from(range.end).unwrap_or(usize::MAX);
            whole.slice(start.min(whole.len())..end.min(whole.len()))
        };
        if let [Piece::Source(range)] = self.pieces.as_slice() {
            return slice(range);
        }
        let mut body = BytesMut::with_capacity(usize::try_from(self.length).unwrap_or(0));
        for piece in &self.pieces {
            match piece {
                Piece::Source(range) => body.extend_from_slice(&slice(range)),
                Piece::Framing(bytes) => body.extend_from_slice(bytes),
            }
        }
        body.freeze()
    }
}

/// `bytes first-last/complete` (RFC 9110 section 14.4).
fn content_range(range: &Range<u64>, complete: u64) -> HeaderValue {
    field_value(format!(
        "bytes {}-{}/{complete}",
        range.start,
        range.end - 1
    ))
}

/// The `Content-Range` of a 416: `bytes */complete` (RFC 9110 section 15.5.17).
pub fn unsatisfied_range(complete: u64) -> HeaderValue {
    field_value(format!("bytes */{complete}"))
}

/// A field value the proxy writes itself, of digits, letters and punctuation only.
fn field_value(text: String) -> HeaderValue {
    HeaderValue::try_from(text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::cache::field::lines as headers;

    fn select(value: &str, length: u64) -> Selection {
        Ranges::parse(value.as_bytes())
            .unwrap_or_else(|| panic!("{value:?} should parse"))
            .select(length, None)
    }

    /// The one part selected, as `Content-Range` would name it.
    fn single(value: &str, length: u64) -> String {
        match select(value, length) {
            Selection::Partial(partial) if partial.pieces.len() == 1 => {
                partial.field.1.to_str().expect("ascii").to_owned()
            }
            other => panic!("{value:?} of {length}: {other:?}"),
        }
    }

    #[test]
    fn a_closed_range_is_clamped_to_the_representation() {
        assert_eq!(single("bytes=0-9", 100), "bytes 0-9/100");
        assert_eq!(single("bytes=90-200", 100), "bytes 90-99/100");
        assert_eq!(single("bytes=99-99", 100), "bytes 99-99/100");
    }

    #[test]
    fn open_and_suffix_ranges_run_to_the_end() {
        assert_eq!(single("bytes=10-", 100), "bytes 10-99/100");
        assert_eq!(single("bytes=-10", 100), "bytes 90-99/100");
        assert_eq!(single("bytes=-1000", 100), "bytes 0-99/100");
    }

    #[test]
    fn the_unit_is_case_insensitive_and_whitespace_and_empty_elements_are_allowed() {
        assert_eq!(single("Bytes=0-1", 10), "bytes 0-1/10");
        assert_eq!(single("bytes= 0-1 ,, ", 10), "bytes 0-1/10");
    }

    #[test]
    fn invalid_fields_and_other_units_are_ignored() {
        for value in [
            "bytes=5-4",
            "bytes=",
            "bytes=-",
            "bytes=a-b",
            "bytes=1-2-3",
            "bytes=0x1-2",
            "bytes=+1-2",
            "bytes 0-1",
            "bytes=0-1,x",
            "items=0-1",
            "bytes=0-1, bytes=2-3",
            "",
        ] {
            assert_eq!(Ranges::parse(value.as_bytes()), None, "{value:?}");
        }
    }

    #[test]
    fn a_set_with_no_satisfiable_range_is_unsatisfiable() {
        assert!(matches!(
            select("bytes=100-", 100),
            Selection::Unsatisfiable
        ));
        assert!(matches!(select("bytes=-0", 100), Selection::Unsatisfiable));
        assert!(matches!(
            select("bytes=200-300, -0", 100),
            Selection::Unsatisfiable
        ));
        // An unsatisfiable range beside a satisfiable one is dropped.
        assert_eq!(single("bytes=200-300, 0-0", 100), "bytes 0-0/100");
        assert!(matches!(
            select("bytes=99999999999999999999999-", 100),
            Selection::Unsatisfiable
        ));
        assert_eq!(
            single("bytes=0-99999999999999999999999", 100),
            "bytes 0-99/100"
        );
    }

    #[test]
    fn an_empty_representation_is_sent_whole() {
        assert!(matches!(select("bytes=0-", 0), Selection::Whole));
        assert!(matches!(select("bytes=-5", 0), Selection::Whole));
    }

    #[test]
    fn touching_ranges_are_joined_and_overlapping_or_descending_ones_give_the_whole() {
        assert_eq!(single("bytes=0-9,10-19,20-", 100), "bytes 0-99/100");
        assert!(matches!(select("bytes=0-9,5-19", 100), Selection::Whole));
        assert!(matches!(select("bytes=50-59,0-9", 100), Selection::Whole));
        assert!(matches!(select("bytes=0-,0-,0-", 100), Selection::Whole));
        assert!(matches!(select("bytes=-10,0-", 100), Selection::Whole));
    }

    #[test]
    fn more_than_max_parts_give_the_whole() {
        let ranges = |n: u64| {
            let set: Vec<String> = (0..n).map(|i| format!("{}-{}", i * 10, i * 10)).collect();
            format!("bytes={}", set.join(","))
        };
        let at_most = select(&ranges(MAX_PARTS as u64), 1000);
        assert!(
            matches!(&at_most, Selection::Partial(p) if p.pieces.len() == 2 * MAX_PARTS + 1),
            "{at_most:?}"
        );
        assert!(matches!(
            select(&ranges(MAX_PARTS as u64 + 1), 1000),
            Selection::Whole
        ));
    }

    #[test]
    fn a_multipart_body_frames_each_part_and_its_length_is_exact() {
        let body = Bytes::from_static(b"0123456789abcdefghij");
        let content_type = HeaderValue::from_static("text/plain");
        let Selection::Partial(partial) = Ranges::parse(b"bytes=0-1,-3")
            .expect("valid")
            .select(20, Some(&content_type))
        else {
            panic!("two parts")
        };
        let cut = partial.cut(&body);
        assert_eq!(cut.len() as u64, partial.length());
        let text = String::from_utf8(cut.to_vec()).expect("utf-8");
        let boundary = partial
            .field
            .1
            .to_str()
            .expect("ascii")
            .strip_prefix("multipart/byteranges; boundary=")
            .expect("a multipart type")
            .to_owned();
        assert_eq!(
            text,
            format!(
                "--{boundary}\r\ncontent-type: text/plain\r\ncontent-range: bytes 0-1/20\r\n\r\n01\
                 \r\n--{boundary}\r\ncontent-type: text/plain\r\ncontent-range: bytes 17-19/20\r\n\r\nhij\
                 \r\n--{boundary}--\r\n"
            )
        );
    }

    #[test]
    fn if_range_compares_entity_tags_strongly() {
        let response = headers(&[("etag", "\"v1\"")]);
        let matches = |value| if_range_matches(&headers(&[("if-range", value)]), &response);
        assert!(matches("\"v1\""));
        assert!(!matches("\"v2\""));
        assert!(!matches("W/\"v1\""));
        assert!(!matches("\"v1\", \"v2\""));
        let weak = headers(&[("etag", "W/\"v1\"")]);
        assert!(!if_range_matches(
            &headers(&[("if-range", "W/\"v1\"")]),
            &weak
        ));
        assert!(!if_range_matches(
            &headers(&[("if-range", "\"v1\"")]),
            &weak
        ));
        assert!(if_range_matches(&HeaderMap::new(), &weak));
    }

    #[test]
    fn if_range_accepts_only_the_exact_strong_last_modified_date() {
        let modified = "Sun, 01 Jan 2023 00:00:00 GMT";
        let strong = headers(&[
            ("last-modified", "Sun, 01 Jan 2023 00:00:00 GMT"),
            ("date", "Sun, 01 Jan 2023 00:00:01 GMT"),
        ]);
        let same_second = headers(&[
            ("last-modified", "Sun, 01 Jan 2023 00:00:00 GMT"),
            ("date", "Sun, 01 Jan 2023 00:00:00 GMT"),
        ]);
        let undated = headers(&[("last-modified", "Sun, 01 Jan 2023 00:00:00 GMT")]);
        let request = |value| headers(&[("if-range", value)]);
        assert!(if_range_matches(&request(modified), &strong));
        assert!(!if_range_matches(
            &request("Sun, 01 Jan 2023 00:00:01 GMT"),
            &strong
        ));
        assert!(!if_range_matches(&request(modified), &same_second));
        assert!(!if_range_matches(&request(modified), &undated));
        assert!(!if_range_matches(&request("not a date"), &strong));
    }

    proptest! {
        /// Whatever the field and the length, a 206 names only bytes of the representation, in
        /// ascending order without overlap, at most `MAX_PARTS` of them, and its body is exactly
        /// as long as it says.
        #[test]
        fn every_selected_part_lies_within_the_representation(
            specs in prop::collection::vec((prop::option::of(0u64..300), prop::option::of(0u64..300)), 1..12),
            length in 0u64..300,
        ) {
            let set: Vec<String> = specs
                .iter()
                .map(|(first, last)| match (first, last) {
                    (Some(first), Some(last)) => format!("{}-{}", first, first + last),
                    (Some(first), None) => format!("{first}-"),
                    (None, Some(suffix)) => format!("-{suffix}"),
                    (None, None) => String::new(),
                })
                .collect();
            let value = format!("bytes={}", set.join(","));
            let Some(ranges) = Ranges::parse(value.as_bytes()) else {
                prop_assert!(set.iter().all(String::is_empty), "{value:?} did not parse");
                return Ok(());
            };
            let whole: Bytes = (0..length).map(|i| i as u8).collect();
            if let Selection::Partial(partial) = ranges.select(length, None) {
                let mut end = 0;
                let mut parts = 0;
                for piece in &partial.pieces {
                    if let Piece::Source(range) = piece {
                        prop_assert!(range.start < range.end && range.end <= length, "{value:?}: {range:?}");
                        prop_assert!(parts == 0 || range.start > end, "{value:?}: {range:?} after {end}");
                        end = range.end;
                        parts += 1;
                    }
                }
                prop_assert!((1..=MAX_PARTS).contains(&parts));
                prop_assert_eq!(partial.cut(&whole).len() as u64, partial.length());
            }
        }
    }
}
