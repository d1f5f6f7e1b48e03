//! What the cache knows of large objects: which are sliced, with the version their slices must
//! be of, and which an origin answers whole.

use std::ops::Range;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use dashmap::DashMap;
use http::StatusCode;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};

use crate::cache::field;
use crate::cache::slice::{ContentRange, Validator, Version};
use crate::cache::{CacheKey, StoredResponse, vary_header_names};

/// The most objects whose slicing is remembered: past it the memory starts again, and each
/// object's next request learns it again from its origin's answer (about 200 bytes an object).
const MAX_KNOWN: usize = 1 << 16;

/// A large object as its slices answer it: the version they must all be of, the header fields of
/// its whole 200, the size of its slices, and the origin's last 304 for it.
#[derive(Debug)]
pub(crate) struct SlicedObject {
    pub(super) version: Version,
    pub(super) headers: HeaderMap,
    pub(super) slice_bytes: u64,
    /// The request fields its `Vary` names (none when it has none), and their values in the
    /// request it was learnt from.
    vary_names: Box<[HeaderName]>,
    vary_selection: Box<[Option<HeaderValue>]>,
    validated: Mutex<Option<Validated>>,
}

/// The origin's 304 to a conditional request for one of an object's slices: when it came, and
/// its fields (prepared as a stored response's), which refresh the object's other stale slices as
/// they are met.
#[derive(Debug, Clone)]
pub(super) struct Validated {
    pub(super) at: SystemTime,
    pub(super) fields: HeaderMap,
}

impl SlicedObject {
    /// The object an origin response's `headers` describe (a 200's, or a slice's 206's with the
    /// `total` of its `Content-Range`) to a request with `request` fields; `None` without a
    /// validator to tell its versions apart.
    pub(super) fn of(
        headers: &HeaderMap,
        total: u64,
        slice_bytes: u64,
        request: &HeaderMap,
    ) -> Option<SlicedObject> {
        let version = Version::of(headers, total)?;
        let vary_names: Box<[HeaderName]> = vary_header_names(headers).collect();
        let vary_selection = field::selection(request, &vary_names);
        let mut headers = headers.clone();
        headers.remove(header::CONTENT_RANGE);
        // Served to every client: one client's cookie never is (RFC 9111 section 3).
        headers.remove(header::SET_COOKIE);
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(total));
        headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
        Some(SlicedObject {
            version,
            headers,
            slice_bytes,
            vary_names,
            vary_selection,
            validated: Mutex::new(None),
        })
    }

    /// Whether its slices answer a request with these fields: those its `Vary` names must be
    /// as in the request it was learnt from (RFC 9111 section 4.1), as for any stored response.
    pub(super) fn answers(&self, request: &HeaderMap) -> bool {
        *field::selection(request, &self.vary_names) == *self.vary_selection
    }

    /// Whether it has a `Vary`: its slices, stored without their request's fields, cannot tell
    /// which requests they answer.
    pub(super) fn varies(&self) -> bool {
        !self.vary_names.is_empty()
    }

    /// The origin's last 304 for this version, if one came.
    pub(super) fn validated(&self) -> Option<Validated> {
        self.validated
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Records the origin's 304 for this version.
    pub(super) fn validate(&self, validated: Validated) {
        *self
            .validated
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(validated);
    }

    /// The conditional field that asks the origin whether this version is still current:
    /// `If-None-Match` with its strong `ETag`, else `If-Modified-Since` with its `Last-Modified`.
    pub(super) fn condition(&self) -> (header::HeaderName, HeaderValue) {
        match &self.version.validator {
            Validator::StrongEtag(etag) => (header::IF_NONE_MATCH, etag.clone()),
            Validator::LastModified(date) => (header::IF_MODIFIED_SINCE, date.clone()),
        }
    }

    pub(super) fn total(&self) -> u64 {
        self.version.total
    }

    /// Whether a stored or shared slice `entry` is slice `bounds` of this version.
    pub(super) fn holds(&self, entry: &StoredResponse, bounds: &Range<u64>) -> bool {
        let headers = entry.headers();
        let Some(range) = ContentRange::of(&headers) else {
            return false;
        };
        entry.status == StatusCode::PARTIAL_CONTENT
            && range.bytes() == *bounds
            && entry.body.len() as u64 == bounds.end - bounds.start
            && Version::of(&headers, range.total).as_ref() == Some(&self.version)
    }
}

/// What the cache knows of large objects: which are sliced, and which an origin answered with the
/// whole object when asked for a slice (streamed as any large object from then on).
#[derive(Default)]
pub(crate) struct SlicedObjects {
    known: DashMap<CacheKey, Known>,
}

#[derive(Clone)]
pub(super) enum Known {
    Sliced(Arc<SlicedObject>),
    Whole,
}

impl SlicedObjects {
    pub(super) fn sliced(&self, key: &CacheKey) -> Option<Arc<SlicedObject>> {
        match self.known.get(key).as_deref() {
            Some(Known::Sliced(object)) => Some(Arc::clone(object)),
            _ => None,
        }
    }

    pub(super) fn is_whole(&self, key: &CacheKey) -> bool {
        matches!(self.known.get(key).as_deref(), Some(Known::Whole))
    }

    pub(super) fn remember(&self, key: CacheKey, known: Known) {
        if self.known.len() >= MAX_KNOWN {
            self.known.clear();
        }
        self.known.insert(key, known);
    }

    /// Forgets what is known of `key`; the object, if it was sliced.
    pub(super) fn forget(&self, key: &CacheKey) -> Option<Arc<SlicedObject>> {
        match self.known.remove(key) {
            Some((_, Known::Sliced(object))) => Some(object),
            _ => None,
        }
    }
}
