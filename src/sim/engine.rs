//! The simulator proper: interns keys to dense ids and feeds every request to every policy.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use siphasher::sip::SipHasher13;

use crate::admission::DoorkeeperConfig;

use super::policy::{PolicyKind, PolicyReport, PolicySim};

/// A 64-bit fingerprint of a key (SipHash-1-3 with a fixed key). The simulator identifies objects,
/// and feeds the doorkeeper, by this fingerprint: a collision needs about 2^32 distinct keys.
pub fn key_fingerprint(key: &str) -> u64 {
    let mut hasher = SipHasher13::new_with_keys(0x626c_6f6f_6d67_6174, 0x7369_6d75_6c61_7465);
    hasher.write(key.as_bytes());
    hasher.finish()
}

/// Fingerprints are already uniform: use them as their own hash.
#[derive(Default)]
struct FingerprintHasher(u64);

impl Hasher for FingerprintHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 << 8) | u64::from(byte);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

/// One request as the simulator sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimRequest {
    pub fingerprint: u64,
    pub size: u64,
    pub time: f64,
}

/// The cache size and doorkeeper parameters of one simulated cache (run under every policy).
#[derive(Debug, Clone)]
pub struct CacheSetup {
    pub cache_bytes: u64,
    pub doorkeeper: DoorkeeperConfig,
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

/// Replays requests through one `PolicySim` per setup and policy, all in one pass.
pub struct Simulator {
    ids: HashMap<u64, u32, BuildHasherDefault<FingerprintHasher>>,
    request_counts: Vec<u32>,
    stats: TraceStats,
    policies: Vec<(usize, PolicySim)>,
}

impl Simulator {
    /// A simulator running all three policies for each setup; with no setups it only collects
    /// [`TraceStats`].
    ///
    /// # Panics
    /// Panics if a doorkeeper config is invalid (check with [`DoorkeeperConfig::validate`]).
    pub fn new(setups: &[CacheSetup]) -> Simulator {
        let policies = setups
            .iter()
            .enumerate()
            .flat_map(|(index, setup)| {
                PolicyKind::ALL.map(|kind| {
                    (
                        index,
                        PolicySim::new(kind, setup.cache_bytes, &setup.doorkeeper),
                    )
                })
            })
            .collect();
        Simulator {
            ids: HashMap::default(),
            request_counts: Vec::new(),
            stats: TraceStats::default(),
            policies,
        }
    }

    /// Feeds one request to every policy.
    #[inline]
    pub fn request(&mut self, request: SimRequest) {
        let next_id = self.ids.len() as u32;
        let id = *self.ids.entry(request.fingerprint).or_insert(next_id);
        self.stats.requests += 1;
        if id == next_id {
            self.request_counts.push(0);
            self.stats.distinct_objects += 1;
            self.stats.footprint_bytes += request.size;
        }
        self.request_counts[id as usize] = self.request_counts[id as usize].saturating_add(1);
        for (_, policy) in &mut self.policies {
            policy.request(id, request.fingerprint, request.size, request.time);
        }
    }

    /// Feeds a trace request, fingerprinting its key.
    pub fn request_key(&mut self, key: &str, size: u64, time: f64) {
        self.request(SimRequest {
            fingerprint: key_fingerprint(key),
            size,
            time,
        });
    }

    /// The trace's statistics and, per setup, one report per policy (in [`PolicyKind::ALL`] order).
    pub fn finish(self) -> (TraceStats, Vec<Vec<PolicyReport>>) {
        let mut stats = self.stats;
        stats.one_hit_objects = self.request_counts.iter().filter(|&&c| c == 1).count() as u64;
        let mut reports: Vec<Vec<PolicyReport>> = Vec::new();
        for (index, policy) in self.policies {
            if reports.len() <= index {
                reports.resize_with(index + 1, Vec::new);
            }
            reports[index].push(policy.finish());
        }
        (stats, reports)
    }
}
