//! A request as the simulator sees it, and what a trace of them adds up to.

use siphasher::sip::SipHasher13;

/// The SipHash key of [`key_fingerprint`].
const FINGERPRINT_KEYS: (u64, u64) = (0x626c_6f6f_6d67_6174, 0x7369_6d75_6c61_7465);

/// A 64-bit fingerprint of a key (SipHash-1-3 with a fixed key). The simulator identifies objects,
/// and feeds the doorkeeper, by this fingerprint: a collision needs about 2^32 distinct keys.
#[inline]
pub fn key_fingerprint(key: &str) -> u64 {
    // In one call rather than through `Hasher::write`, whose buffering of a partial word costs
    // more than the hash of a short key; the hash is the same.
    SipHasher13::new_with_keys(FINGERPRINT_KEYS.0, FINGERPRINT_KEYS.1).hash(key.as_bytes())
}

/// One request as the simulator sees it: `id` from an [`Interner`](super::Interner).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimRequest {
    pub id: u32,
    /// Bytes of the trace's key (what `simulate --weigh proxy` weighs a cache key by).
    pub key_bytes: u32,
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

#[cfg(test)]
mod tests {
    use std::hash::Hasher;

    use super::*;

    #[test]
    fn fingerprints_are_the_sip_hash_of_the_key_as_ever() {
        for key in [
            "",
            "a",
            "k11",
            "u658960",
            "/some/longer/path/to/an/object.jpg?v=3",
            "é",
        ] {
            let mut streamed = SipHasher13::new_with_keys(FINGERPRINT_KEYS.0, FINGERPRINT_KEYS.1);
            streamed.write(key.as_bytes());
            assert_eq!(key_fingerprint(key), streamed.finish(), "{key:?}");
        }
        // Pinned, so that a change of hash, which would change every report, cannot go unseen.
        assert_eq!(key_fingerprint("k11"), 2_790_439_459_748_433_342);
    }
}
