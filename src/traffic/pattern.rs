//! Deterministic object bytes (the same key and size always give the same body), and the
//! origin's response bodies that carry them.
//!
//! One shared pseudo-random buffer of `2 * PERIOD` bytes is made once; an object's body is the
//! repeating `PERIOD`-byte pattern starting at an offset chosen by a hash of its key. Every chunk
//! of a body is then a zero-copy slice of the shared buffer, whatever the object's size.

use std::hash::Hasher;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use siphasher::sip::SipHasher13;

/// Length of the repeating pattern, and so the largest chunk a body yields.
const PERIOD: usize = 64 * 1024;

static PATTERN: LazyLock<Bytes> = LazyLock::new(|| {
    // splitmix64 with a fixed seed: the pattern must be the same in every process.
    let mut state: u64 = 0x0b10_0a6a_7e5e_ed00;
    let mut period = Vec::with_capacity(PERIOD);
    while period.len() < PERIOD {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        period.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    let mut doubled = period.clone();
    doubled.extend_from_slice(&period);
    Bytes::from(doubled)
});

/// A stable 64-bit hash of `parts` (SipHash-1-3 with fixed keys, so it is the same in every build).
pub fn stable_hash(parts: &[&[u8]]) -> u64 {
    let mut hasher = SipHasher13::new_with_keys(0x626c_6f6f_6d67_6174, 0x6f72_6967_696e_0001);
    for part in parts {
        hasher.write(part);
        // Separates ("ab", "c") from ("a", "bc").
        hasher.write_u8(0xff);
    }
    hasher.finish()
}

/// The body the origin serves for `key` with `size` bytes, as one buffer (for tests to compare).
pub fn object_bytes(key: &str, size: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(size);
    for chunk in ObjectChunks::new(key, size as u64) {
        out.extend_from_slice(&chunk);
    }
    out
}

/// The chunks of one object's body, each a slice of the shared pattern.
#[derive(Debug, Clone)]
pub struct ObjectChunks {
    offset: usize,
    remaining: u64,
    /// Counts the bytes of each chunk as it is taken.
    taken: Option<Arc<AtomicU64>>,
}

impl ObjectChunks {
    pub fn new(key: &str, size: u64) -> Self {
        let offset = (stable_hash(&[key.as_bytes()]) % PERIOD as u64) as usize;
        ObjectChunks {
            offset,
            remaining: size,
            taken: None,
        }
    }

    /// The chunks of bytes `range` of the object: the pattern repeats every `PERIOD` bytes, so
    /// the range starts at its offset within one period.
    pub fn range(key: &str, range: std::ops::Range<u64>) -> Self {
        let whole = ObjectChunks::new(key, 0);
        let within = (range.start % PERIOD as u64) as usize;
        ObjectChunks {
            offset: (whole.offset + within) % PERIOD,
            remaining: range.end.saturating_sub(range.start),
            taken: None,
        }
    }

    /// The same chunks, each adding its length to `taken` when it is taken: what a connection
    /// actually took of a body, which a client that hangs up early cuts short.
    pub fn counted(self, taken: Arc<AtomicU64>) -> Self {
        ObjectChunks {
            taken: Some(taken),
            ..self
        }
    }

    pub fn remaining(&self) -> u64 {
        self.remaining
    }
}

impl Iterator for ObjectChunks {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        if self.remaining == 0 {
            return None;
        }
        let len = self.remaining.min(PERIOD as u64) as usize;
        self.remaining -= len as u64;
        if let Some(taken) = &self.taken {
            taken.fetch_add(len as u64, Ordering::Relaxed);
        }
        // Every chunk but the last is a whole period, so each one starts at the same offset.
        Some(PATTERN.slice(self.offset..self.offset + len))
    }
}

/// A response body of the origin.
#[derive(Debug)]
pub enum OriginBody {
    /// One buffer (text, JSON) or nothing.
    Full(Option<Bytes>),
    /// An object's pattern bytes.
    Object(ObjectChunks),
    /// The first chunk, then nothing ever again: a stalled transfer.
    Stall(Option<Bytes>),
}

impl OriginBody {
    pub fn empty() -> Self {
        OriginBody::Full(None)
    }

    pub fn text(text: impl Into<Bytes>) -> Self {
        OriginBody::Full(Some(text.into()))
    }
}

impl Body for OriginBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.get_mut() {
            OriginBody::Full(data) => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            OriginBody::Object(chunks) => Poll::Ready(chunks.next().map(|d| Ok(Frame::data(d)))),
            // Never woken again: the connection stays open with the body unfinished.
            OriginBody::Stall(first) => match first.take() {
                Some(data) => Poll::Ready(Some(Ok(Frame::data(data)))),
                None => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            OriginBody::Full(data) => data.is_none(),
            OriginBody::Object(chunks) => chunks.remaining() == 0,
            OriginBody::Stall(_) => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            OriginBody::Full(data) => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
            OriginBody::Object(chunks) => SizeHint::with_exact(chunks.remaining()),
            OriginBody::Stall(_) => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_key_same_bytes_other_key_other_bytes() {
        let a = object_bytes("a", 200_000);
        assert_eq!(a.len(), 200_000);
        assert_eq!(a, object_bytes("a", 200_000));
        assert_ne!(a, object_bytes("b", 200_000));
    }

    #[test]
    fn a_shorter_object_is_a_prefix_of_a_longer_one() {
        let long = object_bytes("k", 150_000);
        assert_eq!(object_bytes("k", 10), long[..10]);
        assert_eq!(object_bytes("k", PERIOD + 3), long[..PERIOD + 3]);
    }

    #[test]
    fn the_pattern_repeats_with_its_period() {
        let bytes = object_bytes("x", 2 * PERIOD + 5);
        assert_eq!(bytes[..PERIOD + 5], bytes[PERIOD..]);
    }
}
