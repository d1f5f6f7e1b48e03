//! The disk record of one key: every `Vary` variant stored under it, each with the time its
//! response was received, in a versioned binary layout.
//!
//! ```text
//! record  = magic "BGR3" | count u16 | variant*
//! variant = status u16 | response_time_ms u64 | headers | selection | body_len u64 | body
//! headers = count u16 | (name_len u16 | name | value_len u32 | value)*
//! selection = count u16 | (name_len u16 | name | present u8 | value_len u32 | value)*
//! ```
//!
//! Integers are little-endian. The engine keeps the key beside the record and compares it on every
//! read, and checksums both; decoding still checks every length against what is left, so a record
//! that passes the checksum but not this layout (an older version, say) is refused, never
//! half-read. With the response's time, its headers give the same `Age` and freshness after the
//! entry has spent a restart on disk. Older versions are refused as another magic: version 1 kept
//! an `http-cache-semantics` policy, version 2 a second copy of the key (44 B of a 300-byte
//! object's 570).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::{Buf, Bytes};
use http::StatusCode;
use http::header::{HeaderMap, HeaderName, HeaderValue};

use super::InFile;
use crate::cache::StoredResponse;
use crate::config::CachePolicy;

const MAGIC: &[u8; 4] = b"BGR3";

/// Why a record read from disk could not be used.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("not a bloomgate record (bad magic)")]
    Magic,
    #[error("record ends early, reading {0}")]
    Truncated(&'static str),
    #[error("invalid {0} in record")]
    Invalid(&'static str),
}

/// The record of `variants` (stored under a key the engine keeps).
pub fn encode(variants: &[Arc<StoredResponse>]) -> Vec<u8> {
    // A variant's weight counts its body and its headers: about what its part of the record
    // takes.
    let size = variants
        .iter()
        .map(|v| usize::try_from(v.weight()).unwrap_or(0))
        .sum::<usize>();
    let mut out = Vec::with_capacity(size + 64);
    out.extend_from_slice(MAGIC);
    put_u16(&mut out, variants.len());
    for variant in variants {
        out.extend_from_slice(&variant.status.as_u16().to_le_bytes());
        let received = variant
            .lifetime
            .response_time
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        let received = u64::try_from(received.as_millis()).unwrap_or(u64::MAX);
        out.extend_from_slice(&received.to_le_bytes());
        put_u16(&mut out, variant.head.fields().count());
        for (name, value) in variant.head.fields() {
            put_bytes16(&mut out, name.as_str().as_bytes());
            put_bytes32(&mut out, &value.bytes());
        }
        put_u16(&mut out, variant.vary_names().len());
        for (name, value) in variant.vary_names().iter().zip(variant.vary_selection()) {
            put_bytes16(&mut out, name.as_str().as_bytes());
            out.push(u8::from(value.is_some()));
            put_bytes32(
                &mut out,
                value.as_ref().map_or(&[][..], HeaderValue::as_bytes),
            );
        }
        out.extend_from_slice(&(variant.body.len() as u64).to_le_bytes());
        out.extend_from_slice(&variant.body);
    }
    out
}

/// The variants in a record; bodies share the record's buffer.
///
/// `targeted` are the fields whose directives replace `Cache-Control` (`cache.targeted_fields`).
/// `policy` is the route's that reads their directives, as when they were stored.
///
/// `file` is where the record lies in a segment file, when the engine read it through a mapping:
/// each body then carries its own place there ([`StoredResponse::body_file`]).
pub fn decode(
    record: Bytes,
    file: Option<&InFile>,
    targeted: &[HeaderName],
    policy: &CachePolicy,
) -> Result<Vec<StoredResponse>, RecordError> {
    let start = record.as_ptr() as usize;
    let mut reader = Reader { rest: record };
    if reader.take(MAGIC.len(), "magic")? != MAGIC[..] {
        return Err(RecordError::Magic);
    }
    let count = reader.u16("variant count")?;
    let mut variants = Vec::with_capacity(count);
    for _ in 0..count {
        let status = StatusCode::from_u16(reader.u16("status")? as u16)
            .map_err(|_| RecordError::Invalid("status"))?;
        let received = Duration::from_millis(reader.u64("response time")?);
        let response_time = SystemTime::UNIX_EPOCH
            .checked_add(received)
            .ok_or(RecordError::Invalid("response time"))?;
        let header_count = reader.u16("header count")?;
        let mut headers = HeaderMap::with_capacity(header_count);
        for _ in 0..header_count {
            let name = reader.name()?;
            let value = reader.value()?;
            headers.append(name, value);
        }
        // The request fields the variant was selected by, as a request header map.
        let selection_count = reader.u16("selection count")?;
        let mut request_headers = HeaderMap::with_capacity(selection_count);
        for _ in 0..selection_count {
            let name = reader.name()?;
            let present = reader.take(1, "selection flag")?[0] == 1;
            let value = reader.value()?;
            if present {
                request_headers.append(name, value);
            }
        }
        let body_len = reader.u64("body length")?;
        let body = reader.take(
            usize::try_from(body_len).map_err(|_| RecordError::Invalid("body length"))?,
            "body",
        )?;
        let body_file = file.and_then(|file| body_in_file(file, start, &body));
        let mut variant = StoredResponse::under_policy(
            status,
            headers,
            body,
            &request_headers,
            targeted,
            policy,
            response_time,
        );
        variant.body_file = body_file;
        variants.push(variant);
    }
    if reader.rest.has_remaining() {
        return Err(RecordError::Invalid("trailing bytes"));
    }
    Ok(variants)
}

/// The place of `body`, a slice of the record that starts at address `start`, in the record's
/// `file`; `None` unless it is exactly the bytes the file's mapping shows there.
fn body_in_file(file: &InFile, start: usize, body: &Bytes) -> Option<InFile> {
    let from = (body.as_ptr() as usize).checked_sub(start)?;
    let placed = file.slice(from..from.checked_add(body.len())?)?;
    // An empty body's pointer is not kept by `Bytes`; nothing to send from a file either.
    (!body.is_empty() && placed.bytes().as_ptr() == body.as_ptr()).then_some(placed)
}

fn put_u16(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&u16::try_from(n).unwrap_or(u16::MAX).to_le_bytes());
}

fn put_bytes16(out: &mut Vec<u8>, bytes: &[u8]) {
    put_u16(out, bytes.len());
    out.extend_from_slice(&bytes[..bytes.len().min(usize::from(u16::MAX))]);
}

fn put_bytes32(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

struct Reader {
    rest: Bytes,
}

impl Reader {
    fn take(&mut self, len: usize, what: &'static str) -> Result<Bytes, RecordError> {
        if self.rest.remaining() < len {
            return Err(RecordError::Truncated(what));
        }
        Ok(self.rest.split_to(len))
    }

    fn u16(&mut self, what: &'static str) -> Result<usize, RecordError> {
        let bytes = self.take(2, what)?;
        Ok(usize::from(u16::from_le_bytes([bytes[0], bytes[1]])))
    }

    fn u32(&mut self, what: &'static str) -> Result<usize, RecordError> {
        let mut bytes = self.take(4, what)?;
        usize::try_from(bytes.get_u32_le()).map_err(|_| RecordError::Invalid(what))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, RecordError> {
        Ok(self.take(8, what)?.get_u64_le())
    }

    fn bytes32(&mut self, what: &'static str) -> Result<Bytes, RecordError> {
        let len = self.u32(what)?;
        self.take(len, what)
    }

    fn name(&mut self) -> Result<HeaderName, RecordError> {
        let len = self.u16("header name")?;
        let bytes = self.take(len, "header name")?;
        HeaderName::from_bytes(&bytes).map_err(|_| RecordError::Invalid("header name"))
    }

    fn value(&mut self) -> Result<HeaderValue, RecordError> {
        let bytes = self.bytes32("header value")?;
        HeaderValue::from_maybe_shared(bytes).map_err(|_| RecordError::Invalid("header value"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn variant(body: &'static [u8], vary_value: Option<&'static str>) -> Arc<StoredResponse> {
        let mut request = HeaderMap::new();
        if let Some(value) = vary_value {
            request.insert("accept-encoding", HeaderValue::from_static(value));
        }
        let mut response = HeaderMap::new();
        response.insert("cache-control", HeaderValue::from_static("max-age=600"));
        response.insert("vary", HeaderValue::from_static("Accept-Encoding"));
        response.append("x-twice", HeaderValue::from_static("one"));
        response.append("x-twice", HeaderValue::from_static("two"));
        response.insert("age", HeaderValue::from_static("30"));
        // A whole millisecond, as the record keeps it.
        let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH);
        let millis = now.map_or(0, |since| since.as_millis() as u64);
        let then = SystemTime::UNIX_EPOCH + Duration::from_millis(millis - 100_000);
        Arc::new(StoredResponse::new(
            StatusCode::OK,
            response,
            Bytes::from_static(body),
            &request,
            &[],
            then,
        ))
    }

    #[test]
    fn variants_come_back_with_their_headers_bodies_selection_and_age() {
        let stored = [variant(b"gzip body", Some("gzip")), variant(b"plain", None)];
        let record = encode(&stored);
        let now = SystemTime::now();
        let read =
            decode(Bytes::from(record), None, &[], crate::cache::policy::rfc()).expect("decodes");
        assert_eq!(read.len(), 2);
        for (before, after) in stored.iter().zip(&read) {
            assert_eq!(after.status, before.status);
            assert_eq!(after.head, before.head);
            assert_eq!(after.body, before.body);
            assert_eq!(after.vary_names(), before.vary_names());
            assert_eq!(after.vary_selection(), before.vary_selection());
            // Age keeps counting from the response's time (30 s from the origin, 100 s since).
            assert_eq!(after.age(now).as_secs(), before.age(now).as_secs());
            assert!(after.age(now).as_secs() >= 130);
            assert_eq!(after.ttl_seconds(now), before.ttl_seconds(now));
            assert_eq!(after.lifetime, before.lifetime);
        }
    }

    #[test]
    fn every_truncation_and_a_flipped_magic_are_refused() {
        let record = encode(&[variant(b"some body bytes", Some("br"))]);
        for len in 0..record.len() {
            let cut = Bytes::copy_from_slice(&record[..len]);
            assert!(
                decode(cut, None, &[], crate::cache::policy::rfc()).is_err(),
                "a record cut at {len} of {} bytes was accepted",
                record.len()
            );
        }
        let mut flipped = record.clone();
        flipped[0] ^= 0xff;
        assert!(matches!(
            decode(Bytes::from(flipped), None, &[], crate::cache::policy::rfc()),
            Err(RecordError::Magic)
        ));
        let mut longer = record;
        longer.push(0);
        assert!(decode(Bytes::from(longer), None, &[], crate::cache::policy::rfc()).is_err());
    }
}
