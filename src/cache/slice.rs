//! Slices of a large object: their keys, the aligned byte ranges they cover, the origin's
//! `Content-Range` for one, and the version (validator and length) every slice must share.

use std::ops::{Range, RangeInclusive};

use http::header::{self, HeaderMap, HeaderValue};

use crate::cache::CacheKey;

/// The key of slice `index` of the object stored under `object`. A request target never holds
/// `#` (a fragment is not sent), so no object's own key can be a slice's.
pub fn slice_key(object: &CacheKey, index: u64) -> CacheKey {
    object.with_suffix(format_args!("#slice={index}"))
}

/// The bytes slice `index` covers in an object of `total` bytes cut in `slice_bytes`: the last
/// slice is short.
pub fn slice_bounds(index: u64, slice_bytes: u64, total: u64) -> Range<u64> {
    let start = index.saturating_mul(slice_bytes).min(total);
    start..start.saturating_add(slice_bytes).min(total)
}

/// The slices a non-empty byte range touches.
pub fn slices_covering(bytes: &Range<u64>, slice_bytes: u64) -> RangeInclusive<u64> {
    let last = bytes.end.saturating_sub(1).max(bytes.start);
    bytes.start / slice_bytes..=last / slice_bytes
}

/// How many slices an object of `total` bytes has.
pub fn slice_count(total: u64, slice_bytes: u64) -> u64 {
    total.div_ceil(slice_bytes)
}

/// A `Content-Range: bytes first-last/total` of a 206 (RFC 9110 section 14.4), with a known total.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContentRange {
    pub first: u64,
    pub last: u64,
    pub total: u64,
}

impl ContentRange {
    /// Reads the field; `None` when it is absent, not `bytes`, has no total (`*`) or is not a
    /// range within its total.
    pub fn of(headers: &HeaderMap) -> Option<ContentRange> {
        let value = headers.get(header::CONTENT_RANGE)?.to_str().ok()?;
        let spec = value.strip_prefix("bytes ")?;
        let (range, total) = spec.split_once('/')?;
        let (first, last) = range.split_once('-')?;
        let parsed = ContentRange {
            first: first.parse().ok()?,
            last: last.parse().ok()?,
            total: total.parse().ok()?,
        };
        (parsed.first <= parsed.last && parsed.last < parsed.total).then_some(parsed)
    }

    /// The bytes it covers.
    pub fn bytes(self) -> Range<u64> {
        self.first..self.last + 1
    }
}

/// What says one representation is the same as another: a strong `ETag`, else `Last-Modified`
/// (RFC 9110 section 8.8: a date is weaker, but it is what an origin without ETags gives).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Validator {
    StrongEtag(HeaderValue),
    LastModified(HeaderValue),
}

/// One representation of a sliced object: every slice of an answer must carry this.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    pub validator: Validator,
    /// The object's length in bytes.
    pub total: u64,
}

impl Version {
    /// The version a response's `headers` name for an object of `total` bytes; `None` without a
    /// strong `ETag` or a strong `Last-Modified`: slices of such an object could not be told apart
    /// from another version's.
    pub fn of(headers: &HeaderMap, total: u64) -> Option<Version> {
        let etag = headers
            .get(header::ETAG)
            .filter(|etag| !etag.as_bytes().starts_with(b"W/"));
        let validator = match etag {
            Some(etag) => Validator::StrongEtag(etag.clone()),
            None => Validator::LastModified(strong_last_modified(headers)?.clone()),
        };
        Some(Version { validator, total })
    }
}

/// `Last-Modified`, when it is a strong validator: at least one second before the response's
/// `Date` (RFC 9110 section 8.8.2.2). A later one is weak, as two versions made within that second
/// share it; without a `Date` there is no telling.
fn strong_last_modified(headers: &HeaderMap) -> Option<&HeaderValue> {
    let modified = headers.get(header::LAST_MODIFIED)?;
    let date = |value: &HeaderValue| httpdate::parse_http_date(value.to_str().ok()?).ok();
    let sent = date(headers.get(header::DATE)?)?;
    (sent >= date(modified)? + std::time::Duration::from_secs(1)).then_some(modified)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn slices_are_aligned_and_the_last_is_short() {
        assert_eq!(slice_bounds(0, 1024, 2500), 0..1024);
        assert_eq!(slice_bounds(2, 1024, 2500), 2048..2500);
        assert_eq!(slice_count(2500, 1024), 3);
        assert_eq!(slice_count(2048, 1024), 2);
        assert_eq!(slices_covering(&(1000..1025), 1024), 0..=1);
        assert_eq!(slices_covering(&(1024..2048), 1024), 1..=1);
        assert_eq!(slices_covering(&(0..1), 1024), 0..=0);
    }

    #[test]
    fn slice_keys_are_the_object_key_and_the_index() {
        let object = CacheKey::from_string("h/video.mp4".into());
        assert_eq!(slice_key(&object, 3).as_str(), "h/video.mp4#slice=3");
    }

    #[test]
    fn a_content_range_is_read_only_when_whole_and_consistent() {
        let read = |value| ContentRange::of(&headers(&[("content-range", value)]));
        assert_eq!(
            read("bytes 0-1023/4096"),
            Some(ContentRange {
                first: 0,
                last: 1023,
                total: 4096
            })
        );
        assert_eq!(read("bytes 0-1023/*"), None);
        assert_eq!(read("bytes 10-5/4096"), None);
        assert_eq!(read("bytes 0-4096/4096"), None);
        assert_eq!(read("items 0-1/2"), None);
        assert_eq!(read("bytes 0-x/4096"), None);
    }

    #[test]
    fn a_strong_etag_comes_before_last_modified_and_a_weak_one_does_not_count() {
        let date = "Mon, 01 Jan 2024 00:00:00 GMT";
        let strong = headers(&[("etag", "\"v1\""), ("last-modified", date)]);
        assert_eq!(
            Version::of(&strong, 10).map(|v| v.validator),
            Some(Validator::StrongEtag(HeaderValue::from_static("\"v1\"")))
        );
        let sent = "Mon, 01 Jan 2024 00:00:01 GMT";
        let weak = headers(&[
            ("etag", "W/\"v1\""),
            ("last-modified", date),
            ("date", sent),
        ]);
        assert_eq!(
            Version::of(&weak, 10).map(|v| v.validator),
            Some(Validator::LastModified(HeaderValue::from_static(date)))
        );
        assert_eq!(Version::of(&headers(&[("etag", "W/\"v1\"")]), 10), None);
        let v1 = Version::of(&strong, 10);
        assert_ne!(
            v1,
            Version::of(&strong, 11),
            "another length, another version"
        );
    }

    #[test]
    fn a_last_modified_within_a_second_of_date_or_without_one_names_no_version() {
        let date = "Mon, 01 Jan 2024 00:00:00 GMT";
        let same_second = headers(&[("last-modified", date), ("date", date)]);
        assert_eq!(Version::of(&same_second, 10), None);
        assert_eq!(Version::of(&headers(&[("last-modified", date)]), 10), None);
        let later = headers(&[
            ("last-modified", date),
            ("date", "Sun, 31 Dec 2023 23:59:59 GMT"),
        ]);
        assert_eq!(Version::of(&later, 10), None);
        let unreadable = headers(&[("last-modified", "yesterday"), ("date", date)]);
        assert_eq!(Version::of(&unreadable, 10), None);
    }
}
