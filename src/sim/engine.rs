//! The simulator proper: interns keys to dense ids and feeds every request to every policy.

use crate::admission::DoorkeeperConfig;

use super::interner::Interner;
use super::policy::{PolicyKind, PolicyReport, PolicySim, ProbationSetup};
use super::prefetch::DISTANCE;
use super::request::{SimRequest, TraceStats, key_fingerprint};

/// The cache size and doorkeeper parameters of one simulated cache (run under every policy).
#[derive(Debug, Clone)]
pub struct CacheSetup {
    pub cache_bytes: u64,
    pub doorkeeper: DoorkeeperConfig,
    /// How the `probation` policy splits and evicts its cache.
    pub probation: ProbationSetup,
}

/// Replays requests through one policy simulation per setup and policy, all in one pass.
pub struct Simulator {
    interner: Interner,
    policies: Vec<(usize, PolicySim)>,
}

impl Simulator {
    /// A simulator running every policy for each setup.
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
                        PolicySim::new(kind, setup.cache_bytes, &setup.doorkeeper, setup.probation),
                    )
                })
            })
            .collect();
        Simulator {
            interner: Interner::default(),
            policies,
        }
    }

    /// Feeds one interned request to every policy.
    #[inline]
    pub fn request(&mut self, request: SimRequest) {
        for (_, policy) in &mut self.policies {
            policy.request(request.id, request.fingerprint, request.size, request.time);
        }
    }

    /// Feeds a batch of interned requests to every policy, in order, prefetching the state of
    /// requests a few ahead so that their cache misses overlap.
    pub fn request_all(&mut self, requests: &[SimRequest]) {
        for (index, &request) in requests.iter().enumerate() {
            if let Some(ahead) = requests.get(index + DISTANCE) {
                for (_, policy) in &self.policies {
                    policy.prefetch(ahead.id);
                }
            }
            if let Some(ahead) = requests.get(index + DISTANCE / 2) {
                for (_, policy) in &self.policies {
                    policy.prefetch_neighbours(ahead.id);
                }
            }
            self.request(request);
        }
    }

    /// Fingerprints and interns a key with the simulator's own [`Interner`], then feeds it.
    pub fn request_key(&mut self, key: &str, size: u64, time: f64) {
        let fingerprint = key_fingerprint(key);
        let id = self.interner.intern(fingerprint, size);
        self.request(SimRequest {
            id,
            fingerprint,
            size,
            time,
        });
    }

    /// Statistics of the requests fed through [`Self::request_key`].
    pub fn stats(&self) -> TraceStats {
        self.interner.stats()
    }

    /// Splits off the `admit-all` policies into a simulator of their own, so that two threads can
    /// share the work; [`Self::merge`] puts the two back together. The interner stays here.
    pub fn split_admit_all(&mut self) -> Simulator {
        let (admit_all, others) = std::mem::take(&mut self.policies)
            .into_iter()
            .partition(|(_, policy)| policy.kind() == PolicyKind::AdmitAll);
        self.policies = others;
        Simulator {
            interner: Interner::default(),
            policies: admit_all,
        }
    }

    /// Takes back the policies of a simulator split off with [`Self::split_admit_all`].
    pub fn merge(&mut self, other: Simulator) {
        self.policies.extend(other.policies);
        self.policies.sort_by_key(|(index, policy)| {
            let kind = PolicyKind::ALL.iter().position(|&k| k == policy.kind());
            (*index, kind)
        });
    }

    /// Per setup, one report per policy (in [`PolicyKind::ALL`] order).
    pub fn finish(self) -> Vec<Vec<PolicyReport>> {
        let mut reports: Vec<Vec<PolicyReport>> = Vec::new();
        for (index, policy) in self.policies {
            if reports.len() <= index {
                reports.resize_with(index + 1, Vec::new);
            }
            reports[index].push(policy.finish());
        }
        reports
    }
}
