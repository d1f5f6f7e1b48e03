//! Deterministic object sizes for traces that recorded none.

use std::hash::Hasher;

use siphasher::sip::SipHasher13;

/// How [`synthesized_size`] picks a size, for reports that must say sizes were made up.
pub const SYNTHESIZED_SIZE_RULE: &str =
    "log-normal from a SipHash-1-3 of the key: median 8 KiB, sigma 1.0, clamped to [64 B, 4 MiB]";

pub(crate) const MIN_SIZE: u64 = 64;
pub(crate) const MAX_SIZE: u64 = 4 << 20;

/// The size given to `key` when its trace has none: the same key always gets the same size.
///
/// See [`SYNTHESIZED_SIZE_RULE`].
pub fn synthesized_size(key: &str) -> u64 {
    let mut hasher = SipHasher13::new_with_keys(0, 0);
    hasher.write(key.as_bytes());
    lognormal_from_bits(hasher.finish(), 8192, 1.0)
}

/// A log-normal value with the given median and sigma, from 64 random bits, clamped to the size range.
pub(crate) fn lognormal_from_bits(bits: u64, median: u64, sigma: f64) -> u64 {
    // Box-Muller over the two 32-bit halves; the +0.5 keeps the first uniform out of zero.
    let u1 = ((bits >> 32) as f64 + 0.5) / (1u64 << 32) as f64;
    let u2 = (bits & 0xffff_ffff) as f64 / (1u64 << 32) as f64;
    let normal = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
    let size = (median.max(1) as f64) * (sigma * normal).exp();
    (size.round() as u64).clamp(MIN_SIZE, MAX_SIZE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_key_gets_same_size_within_bounds() {
        assert_eq!(synthesized_size("/a/b"), synthesized_size("/a/b"));
        let sizes: Vec<u64> = (0..10_000)
            .map(|i| synthesized_size(&format!("k{i}")))
            .collect();
        assert!(sizes.iter().all(|s| (MIN_SIZE..=MAX_SIZE).contains(s)));
        let mut sorted = sizes.clone();
        sorted.sort_unstable();
        let median = sorted[sorted.len() / 2];
        assert!((7000..9500).contains(&median), "median {median}");
    }
}
