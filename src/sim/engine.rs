//! The simulator proper: interns keys to dense ids and feeds every request to every policy.

use crate::admission::DoorkeeperConfig;

use super::interner::Interner;
use super::policy::{PolicyKind, PolicyReport, PolicySim, ProbationSetup};
use super::prefetch::DISTANCE;

/// A policy's share of the simulating work, in nanoseconds per request measured on a 10^7-request
/// trace (`cargo bench --bench sim`): how [`Simulator::split`] balances its threads.
fn cost(kind: PolicyKind) -> u32 {
    match kind {
        PolicyKind::AdmitAll => 43,
        PolicyKind::SecondHitExact => 48,
        PolicyKind::Bloom => 105,
        PolicyKind::Probation => 125,
        PolicyKind::S3Fifo => 110,
        PolicyKind::WTinyLfu => 130,
        PolicyKind::Sieve => 90,
    }
}
use super::request::{SimRequest, TraceStats, key_fingerprint};
use super::weigh::{Weigh, Weigher};

/// The cache size and doorkeeper parameters of one simulated cache (run under every policy).
#[derive(Debug, Clone)]
pub struct CacheSetup {
    pub cache_bytes: u64,
    pub doorkeeper: DoorkeeperConfig,
    /// How the `probation` policy splits and evicts its cache.
    pub probation: ProbationSetup,
    /// Seeds the doorkeeper's secrets ([`super::DoorkeeperModel`]): the same seed, the same report.
    pub seed: u64,
    /// What bloomgate's policies weigh an object at.
    pub weigh: Weigh,
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
        Simulator::with_policies(setups, &PolicyKind::ALL)
    }

    /// A simulator running only `kinds` for each setup (to measure one policy's cost alone).
    ///
    /// # Panics
    /// Panics if a doorkeeper config is invalid (check with [`DoorkeeperConfig::validate`]).
    pub fn with_policies(setups: &[CacheSetup], kinds: &[PolicyKind]) -> Simulator {
        let policies = setups
            .iter()
            .enumerate()
            .flat_map(|(index, setup)| {
                kinds.iter().map(move |&kind| {
                    (
                        index,
                        PolicySim::new(
                            kind,
                            setup.cache_bytes,
                            &setup.doorkeeper,
                            setup.probation,
                            setup.seed,
                            Weigher::new(setup.weigh),
                        ),
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
            policy.request(request);
        }
    }

    /// Feeds a batch of interned requests to every policy, in order, prefetching the state of
    /// requests a few ahead so that their cache misses overlap: the caches' two distances ahead,
    /// then, one distance ahead, the doorkeepers' of those not cached.
    pub fn request_all(&mut self, requests: &[SimRequest]) {
        for (index, &request) in requests.iter().enumerate() {
            if let Some(ahead) = requests.get(index + 2 * DISTANCE) {
                for (_, policy) in &self.policies {
                    policy.prefetch_cache(ahead.id);
                }
            }
            if let Some(ahead) = requests.get(index + DISTANCE) {
                for (_, policy) in &mut self.policies {
                    policy.prefetch_admission(ahead.id, ahead.fingerprint);
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
            key_bytes: u32::try_from(key.len()).unwrap_or(u32::MAX),
            fingerprint,
            size,
            time,
        });
    }

    /// Statistics of the requests fed through [`Self::request_key`].
    pub fn stats(&self) -> TraceStats {
        self.interner.stats()
    }

    /// Splits the policies into at most `parts` simulators of about equal work, one per thread
    /// (each policy's requests must stay in order, so a policy is never split);
    /// [`Self::merge`] puts them back together. The interner stays with the first.
    pub fn split(mut self, parts: usize) -> Vec<Simulator> {
        let parts = parts.clamp(1, self.policies.len().max(1));
        let mut policies = std::mem::take(&mut self.policies);
        // Longest first, each to the least loaded part.
        policies.sort_by_key(|(index, policy)| (std::cmp::Reverse(cost(policy.kind())), *index));
        let mut split: Vec<(u32, Simulator)> = (0..parts)
            .map(|_| {
                let simulator = Simulator {
                    interner: Interner::default(),
                    policies: Vec::new(),
                };
                (0, simulator)
            })
            .collect();
        split[0].1.interner = self.interner;
        for (index, policy) in policies {
            let lightest = split
                .iter_mut()
                .min_by_key(|(load, _)| *load)
                .expect("at least one part");
            lightest.0 += cost(policy.kind());
            lightest.1.policies.push((index, policy));
        }
        split.into_iter().map(|(_, simulator)| simulator).collect()
    }

    /// Puts back together the simulators [`Self::split`] made, in their order.
    pub fn merge(parts: Vec<Simulator>) -> Simulator {
        let mut parts = parts.into_iter();
        let mut merged = parts.next().unwrap_or_else(|| Simulator::new(&[]));
        merged.policies.extend(parts.flat_map(|part| part.policies));
        merged.policies.sort_by_key(|(index, policy)| {
            let kind = PolicyKind::ALL.iter().position(|&k| k == policy.kind());
            (*index, kind)
        });
        merged
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
