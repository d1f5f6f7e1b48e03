//! The weigher: what a stored entry costs in memory, counted as the allocations it holds.
//!
//! The store spends its byte budget in these bytes, so that a cache of `max_bytes` holds about
//! `max_bytes` of memory whatever the size of its objects (`tests/memory` measures an entry's
//! allocations against its weight).

use std::mem::size_of;

use http::header::{HeaderName, HeaderValue};

/// Bytes an allocation of `size` bytes takes from jemalloc (the binary's allocator): its size
/// class. Small classes step by 16 bytes up to 128, then four to a doubling up to 14 KiB (at most
/// 25% above the request); larger allocations take whole pages, and one page more, which jemalloc
/// adds to spread them over cache lines (`opt.cache_oblivious`).
pub fn allocation(size: usize) -> usize {
    match size {
        0 => 0,
        1..=8 => 8,
        9..=128 => size.next_multiple_of(16),
        129..=SMALL_MAX => {
            // Four classes from 2^k to 2^(k+1), in steps of 2^(k-2).
            let k = usize::BITS - 1 - (size - 1).leading_zeros();
            size.next_multiple_of(1 << (k - 2))
        }
        _ => size.max(LARGE_MIN).next_multiple_of(PAGE) + PAGE,
    }
}

/// jemalloc's largest small class, its smallest large one, and its page.
const SMALL_MAX: usize = 14 * 1024;
const LARGE_MIN: usize = 16 * 1024;
const PAGE: usize = 4096;

/// An entry of a header map: its name, its value, the name's hash and the links to further values
/// of the same name (`http`'s private `Bucket`).
const MAP_ENTRY: usize = size_of::<HeaderName>() + size_of::<HeaderValue>() + 32;
/// A further value of a name already in the map (`http`'s `ExtraValue`: the value and two links).
const MAP_EXTRA_VALUE: usize = size_of::<HeaderValue>() + 32;
/// A slot of a header map's index (`http`'s `Pos`: an entry's position and its hash, 16 bits each).
const INDEX_SLOT: usize = 4;
/// What a buffer shared by reference counting costs beyond its bytes (`bytes`' `Shared`).
pub const SHARED: usize = 32;

/// Bytes a header map of these fields holds outside its own struct, when made as
/// [`super::owned_headers`] makes one: its index, its entries allocated to their number, custom
/// names each in their own allocation, and its values in one buffer.
pub fn header_fields<'a>(fields: impl Iterator<Item = (&'a HeaderName, &'a HeaderValue)>) -> usize {
    let (mut names, mut values, mut value_bytes, mut custom_names) = (0usize, 0usize, 0, 0);
    let mut last = None;
    for (name, value) in fields {
        values += 1;
        value_bytes += value.len();
        // A map yields the values of one name one after the other.
        if last != Some(name) {
            names += 1;
            if !is_standard(name) {
                custom_names += allocation(name.as_str().len()) + SHARED;
            }
            last = Some(name);
        }
    }
    if values == 0 {
        return 0;
    }
    // `HeaderMap::with_capacity`: an index of a power of two, at least a third above the count.
    let index = (values + values / 3).next_power_of_two() * INDEX_SLOT;
    allocation(index)
        + allocation(names * MAP_ENTRY)
        + allocation((values - names) * MAP_EXTRA_VALUE)
        + custom_names
        + allocation(value_bytes)
        + SHARED
}

/// Whether `http` knows the name as a constant, which costs no allocation.
fn is_standard(name: &HeaderName) -> bool {
    STANDARD.binary_search(&name.as_str()).is_ok()
}

/// The names of `http::header`'s constants, sorted.
const STANDARD: &[&str] = &[
    "accept",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "accept-ranges",
    "access-control-allow-credentials",
    "access-control-allow-headers",
    "access-control-allow-methods",
    "access-control-allow-origin",
    "access-control-expose-headers",
    "access-control-max-age",
    "access-control-request-headers",
    "access-control-request-method",
    "age",
    "allow",
    "alt-svc",
    "authorization",
    "cache-control",
    "cache-status",
    "cdn-cache-control",
    "connection",
    "content-disposition",
    "content-encoding",
    "content-language",
    "content-length",
    "content-location",
    "content-range",
    "content-security-policy",
    "content-security-policy-report-only",
    "content-type",
    "cookie",
    "date",
    "dnt",
    "etag",
    "expect",
    "expires",
    "forwarded",
    "from",
    "host",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "last-modified",
    "link",
    "location",
    "max-forwards",
    "origin",
    "pragma",
    "proxy-authenticate",
    "proxy-authorization",
    "public-key-pins",
    "public-key-pins-report-only",
    "range",
    "referer",
    "referrer-policy",
    "refresh",
    "retry-after",
    "sec-websocket-accept",
    "sec-websocket-extensions",
    "sec-websocket-key",
    "sec-websocket-protocol",
    "sec-websocket-version",
    "server",
    "set-cookie",
    "strict-transport-security",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "upgrade-insecure-requests",
    "user-agent",
    "vary",
    "via",
    "warning",
    "www-authenticate",
    "x-content-type-options",
    "x-dns-prefetch-control",
    "x-frame-options",
    "x-xss-protection",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_jemallocs_classes() {
        assert_eq!(allocation(0), 0);
        assert_eq!(allocation(1), 8);
        assert_eq!(allocation(24), 32);
        assert_eq!(allocation(129), 160);
        assert_eq!(allocation(257), 320);
        assert_eq!(allocation(8192), 8192);
        assert_eq!(allocation(8193), 10240);
        assert_eq!(allocation(14336), 14336);
        assert_eq!(allocation(14337), 16384 + 4096);
        assert_eq!(allocation((1 << 20) + 1), (1 << 20) + 2 * 4096);
    }

    #[test]
    fn standard_names_are_found_and_custom_ones_are_not() {
        // Sorted, or the binary search misses names.
        assert!(STANDARD.windows(2).all(|pair| pair[0] < pair[1]));
        assert!(is_standard(&http::header::ETAG));
        assert!(is_standard(&http::header::ACCEPT));
        assert!(is_standard(&http::header::X_XSS_PROTECTION));
        assert!(!is_standard(&HeaderName::from_static("x-origin-count")));
    }
}
