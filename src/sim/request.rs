//! A request as the simulator sees it, and what a trace of them adds up to.

use std::hash::Hasher;

use siphasher::sip::SipHasher13;

/// A 64-bit fingerprint of a key (SipHash-1-3 with a fixed key). The simulator identifies objects,
/// and feeds the doorkeeper, by this fingerprint: a collision needs about 2^32 distinct keys.
pub fn key_fingerprint(key: &str) -> u64 {
    let mut hasher = SipHasher13::new_with_keys(0x626c_6f6f_6d67_6174, 0x7369_6d75_6c61_7465);
    hasher.write(key.as_bytes());
    hasher.finish()
}

/// One request as the simulator sees it: `id` from an [`Interner`](super::Interner).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimRequest {
    pub id: u32,
    pub fingerprint: u64,
    pub size: u64,
    pub time: f64,
}

/// What the simulator learned about the trace itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct TraceStats {
    pub requests: u64,
    pub distinct_objects: u64,
    /// Sum of the distinct objects' sizes (each at its first request).
    pub footprint_bytes: u64,
    /// Objects requested exactly once.
    pub one_hit_objects: u64,
}

impl TraceStats {
    /// Mean size of a distinct object, at least 1.
    pub fn mean_object_bytes(&self) -> u64 {
        self.footprint_bytes
            .checked_div(self.distinct_objects)
            .unwrap_or(1)
            .max(1)
    }
}
