//! Synthetic traces: Zipf popularity, a share of one-hit wonders, log-normal sizes, all from a seed.

use rand::SeedableRng;
use rand::rngs::Xoshiro256PlusPlus;
use rand::seq::SliceRandom;
use rand_distr::{Distribution, Zipf};

use super::Request;
use super::size::lognormal_from_bits;

/// Synthetic requests per second of trace time: request `i` is at `i / 1000` seconds.
const REQUESTS_PER_SECOND: f64 = 1000.0;

/// The parameters of a synthetic trace; the same parameters always give the same trace.
///
/// The trace has `objects` distinct objects, of which `one_hit_share` are requested exactly once
/// (keys `u<n>`). The others (keys `k<rank>`) are requested at least twice: each gets two requests
/// at random places, and every remaining request goes to one of them drawn from Zipf(`alpha`) by rank.
/// All requests are then shuffled, so one-hit wonders are spread evenly through the trace.
/// Sizes are log-normal per object (the same object always has the same size), clamped to
/// [64 B, 4 MiB]. If `requests` is too small for that (fewer than one-hit objects plus two per
/// popular object), the popular objects are cut to fit.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SyntheticTrace {
    /// Requests in the trace. Default: 100,000.
    pub requests: u64,
    /// Distinct objects. Default: 20,000.
    pub objects: u64,
    /// Zipf exponent of the popular objects' request counts. Default: 0.9.
    pub alpha: f64,
    /// Share of the distinct objects requested exactly once, in [0, 1]. Default: 0.5.
    pub one_hit_share: f64,
    /// Median object size in bytes. Default: 8 KiB.
    pub size_median: u64,
    /// Sigma of the log-normal object size (of the natural log of the size). Default: 1.0.
    pub size_sigma: f64,
    /// Seed of everything random. Default: 1.
    pub seed: u64,
}

impl Default for SyntheticTrace {
    fn default() -> Self {
        SyntheticTrace {
            requests: 100_000,
            objects: 20_000,
            alpha: 0.9,
            one_hit_share: 0.5,
            size_median: 8 * 1024,
            size_sigma: 1.0,
            seed: 1,
        }
    }
}

impl SyntheticTrace {
    /// Objects requested exactly once.
    pub fn one_hit_objects(&self) -> u64 {
        let objects = self.objects.min(u64::from(u32::MAX));
        let share = self.one_hit_share.clamp(0.0, 1.0);
        ((objects as f64 * share).round() as u64).min(self.requests)
    }

    /// Objects requested at least twice.
    pub fn popular_objects(&self) -> u64 {
        let objects = self.objects.min(u64::from(u32::MAX));
        let wanted = objects.saturating_sub(self.one_hit_objects());
        wanted.min((self.requests - self.one_hit_objects()) / 2)
    }

    /// The requests, in order. Holds one `u32` per request while iterating.
    pub fn iter(&self) -> impl Iterator<Item = Request> + use<> {
        let popular = self.popular_objects();
        let one_hit = self.one_hit_objects();
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(self.seed);
        let mut ids: Vec<u32> = Vec::with_capacity(self.requests as usize);
        for id in 0..popular as u32 {
            ids.extend([id, id]);
        }
        ids.extend(popular as u32..(popular + one_hit) as u32);
        let remaining = self.requests - ids.len() as u64;
        if popular > 0 {
            let alpha = if self.alpha.is_finite() {
                self.alpha.max(0.0)
            } else {
                0.0
            };
            if let Ok(zipf) = Zipf::new(popular as f64, alpha) {
                for _ in 0..remaining {
                    ids.push(zipf.sample(&mut rng) as u32 - 1);
                }
            }
        }
        ids.shuffle(&mut rng);
        let (seed, median, sigma) = (self.seed, self.size_median, self.size_sigma);
        let popular = popular as u32;
        ids.into_iter().enumerate().map(move |(index, id)| {
            let key = if id < popular {
                format!("k{id}")
            } else {
                format!("u{}", id - popular)
            };
            let bits = splitmix64(seed ^ splitmix64(u64::from(id)));
            Request {
                time: index as f64 / REQUESTS_PER_SECOND,
                key,
                size: lognormal_from_bits(bits, median, sigma),
                range: None,
            }
        })
    }
}

/// SplitMix64's output function: a cheap, well-mixed 64-bit hash of a counter.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
