//! Large objects in the simulator: whole-object caching against slices, each slice an object.
//!
//! A request for bytes of an object larger than `slice_above` touches the aligned slices of
//! `slice_bytes` its range covers; each slice is an object of its own (the object's key plus the
//! slice's index), asked of one of the simulator's policies ([`PolicySim`]) exactly as a whole
//! object is, so a slice has its own admission decision and its own place in the cache. The runs:
//!
//! - `whole`: the proxy without slicing, under its default admission (`probation`): an object
//!   above `max_object_bytes` is passed through (its requested bytes come from the origin, nothing
//!   is stored), a smaller one is cached whole;
//! - `slices-admit-all`: every slice stored on its first request (nginx `slice` with
//!   `proxy_cache_min_uses 1`);
//! - `slices-second-hit-exact`: a slice stored on its second request, remembered exactly (nginx
//!   `slice` with `proxy_cache_min_uses 2`);
//! - `slices-bloom`: a slice stored on its second request as the doorkeeper decides
//!   (`admission.mode = "second-hit"`);
//! - `slices-probation`: bloomgate's default per slice: a first-seen slice in the probation FIFO,
//!   a seen-before one in main.
//!
//! Objects not above `slice_above` are cached whole in every sliced run, as the proxy does.
//!
//! With a disk size, each cache size is also run as RAM over a disk ([`TierSim`], the simulator's
//! two tiers) under each of its disk rules, slices as objects: `second-request` (bloomgate's disk
//! tier for slices: a slice's second request proves it, and it is written to disk when a first
//! copy needs its room in RAM), `gated`
//! (bloomgate's disk tier for whole objects: what RAM gives up, if it was hit there or asked for
//! again), `every-miss` (nginx's `proxy_cache`: every origin miss written at once) and
//! `write-all`.

mod cli;
mod report;

pub use cli::{SliceArgs, run_slices, simulate_slices};
pub use report::{SliceReport, SliceRunReport, SliceTierReport};

use std::hash::Hasher;

use siphasher::sip::SipHasher13;

use crate::admission::DoorkeeperConfig;
use crate::trace::ByteRange;

use super::interner::Interner;
use super::policy::{PolicyKind, PolicySim, ProbationSetup};
use super::request::SimRequest;
use super::tiers::{DiskPolicy, TierSim};
use super::weigh::{Weigh, Weigher};

/// How a run caches a large object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layout {
    /// Whole objects up to `max_object_bytes`; larger ones pass through.
    Whole,
    /// Objects above `slice_above` in slices of `slice_bytes`.
    Sliced,
}

/// One run of the comparison: a layout under one of the simulator's policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SliceRun {
    pub name: &'static str,
    pub layout: Layout,
    pub policy: PolicyKind,
}

/// Every run, in the order reports list them.
pub const SLICE_RUNS: [SliceRun; 5] = [
    SliceRun {
        name: "whole",
        layout: Layout::Whole,
        policy: PolicyKind::Probation,
    },
    SliceRun {
        name: "slices-admit-all",
        layout: Layout::Sliced,
        policy: PolicyKind::AdmitAll,
    },
    SliceRun {
        name: "slices-second-hit-exact",
        layout: Layout::Sliced,
        policy: PolicyKind::SecondHitExact,
    },
    SliceRun {
        name: "slices-bloom",
        layout: Layout::Sliced,
        policy: PolicyKind::Bloom,
    },
    SliceRun {
        name: "slices-probation",
        layout: Layout::Sliced,
        policy: PolicyKind::Probation,
    },
];

/// What the runs share: how objects are sliced and how admission is set up.
#[derive(Debug, Clone)]
pub struct SliceSetup {
    /// A power of two (the proxy's `cache.slice_bytes`).
    pub slice_bytes: u64,
    /// Objects larger than this are sliced (`cache.slice_above`).
    pub slice_above: u64,
    /// Whole objects larger than this are not stored (`cache.max_object_bytes`).
    pub max_object_bytes: u64,
    pub doorkeeper: DoorkeeperConfig,
    pub probation: ProbationSetup,
    /// Seeds the doorkeeper's secrets: the same seed, the same report.
    pub seed: u64,
    /// A disk below each cache size, for the two-tier runs; none without.
    pub disk_bytes: Option<u64>,
}

/// One run at one cache size.
struct RunSim {
    run: SliceRun,
    cache_bytes: u64,
    policy: PolicySim,
    /// Bytes the run passed through from the origin without the cache (whole objects too large).
    passed_bytes: u64,
    passed_requests: u64,
}

/// One disk rule over RAM of one cache size and the disk, slices as objects.
struct TierRunSim {
    ram_bytes: u64,
    sim: TierSim,
    passed_bytes: u64,
}

/// One request's part of the cache: an object or a slice, with its dense id.
#[derive(Debug, Clone, Copy)]
struct Item {
    id: u32,
    fingerprint: u64,
    size: u64,
}

/// Replays requests with byte ranges through every [`SLICE_RUNS`] run at each cache size.
pub struct SliceSim {
    setup: SliceSetup,
    runs: Vec<RunSim>,
    tiers: Vec<TierRunSim>,
    interner: Interner,
    slices: Vec<Item>,
    trace: SliceTraceStats,
}

/// What the trace asked for, as the slice simulator counts it.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct SliceTraceStats {
    pub requests: u64,
    /// Requests with a byte range.
    pub ranged_requests: u64,
    /// Bytes asked for: each request's range, or its whole object.
    pub requested_bytes: u64,
    /// Requests for objects above `slice_above`.
    pub sliced_requests: u64,
}

impl SliceSim {
    /// Every run of [`SLICE_RUNS`] at each of `cache_bytes`.
    ///
    /// # Panics
    /// Panics if the doorkeeper config is invalid (check with [`DoorkeeperConfig::validate`]).
    pub fn new(setup: SliceSetup, cache_bytes: &[u64]) -> SliceSim {
        let runs = cache_bytes
            .iter()
            .flat_map(|&bytes| SLICE_RUNS.iter().map(move |&run| (bytes, run)))
            .map(|(cache_bytes, run)| RunSim {
                run,
                cache_bytes,
                policy: PolicySim::new(
                    run.policy,
                    cache_bytes,
                    &setup.doorkeeper,
                    setup.probation,
                    setup.seed,
                    Weigher::new(Weigh::Body),
                ),
                passed_bytes: 0,
                passed_requests: 0,
            })
            .collect();
        let tiers = setup
            .disk_bytes
            .into_iter()
            .flat_map(|disk_bytes| {
                cache_bytes.iter().flat_map(move |&ram_bytes| {
                    DiskPolicy::FOR_SLICES.map(|policy| (ram_bytes, disk_bytes, policy))
                })
            })
            .map(|(ram_bytes, disk_bytes, policy)| TierRunSim {
                ram_bytes,
                sim: TierSim::new(policy, ram_bytes, disk_bytes, &setup.doorkeeper, setup.seed),
                passed_bytes: 0,
            })
            .collect();
        SliceSim {
            setup,
            runs,
            tiers,
            interner: Interner::default(),
            slices: Vec::new(),
            trace: SliceTraceStats::default(),
        }
    }

    /// One request for `range` (or all) of the object with fingerprint `fingerprint`, of `size`
    /// bytes, at trace time `time`.
    pub fn request(&mut self, fingerprint: u64, size: u64, range: Option<ByteRange>, time: f64) {
        let asked = range.unwrap_or(ByteRange {
            first: 0,
            last: size.saturating_sub(1),
        });
        let requested = if size == 0 { 0 } else { asked.length() };
        self.trace.requests += 1;
        self.trace.ranged_requests += u64::from(range.is_some());
        self.trace.requested_bytes += requested;
        let sliced = size > self.setup.slice_above;
        self.trace.sliced_requests += u64::from(sliced);
        let whole_fits = size <= self.setup.max_object_bytes;
        let whole = whole_fits.then(|| Item {
            id: self.interner.intern(fingerprint, size),
            fingerprint,
            size,
        });
        self.slices.clear();
        if sliced && size > 0 {
            let slice_bytes = self.setup.slice_bytes;
            for index in asked.first / slice_bytes..=asked.last / slice_bytes {
                let fingerprint = slice_fingerprint(fingerprint, index);
                let slice_size = slice_bytes.min(size - index * slice_bytes);
                self.slices.push(Item {
                    id: self.interner.intern(fingerprint, slice_size),
                    fingerprint,
                    size: slice_size,
                });
            }
        }
        for run in &mut self.runs {
            let items: &[Item] = match (run.run.layout, sliced, &whole) {
                (Layout::Sliced, true, _) => &self.slices,
                (_, _, Some(whole)) => std::slice::from_ref(whole),
                (_, _, None) => {
                    run.passed_bytes += requested;
                    run.passed_requests += 1;
                    continue;
                }
            };
            for item in items {
                run.policy.request(SimRequest {
                    id: item.id,
                    key_bytes: 0,
                    fingerprint: item.fingerprint,
                    size: item.size,
                    time,
                });
            }
        }
        for tier in &mut self.tiers {
            let items: &[Item] = match (sliced, &whole) {
                (true, _) => &self.slices,
                (false, Some(whole)) => std::slice::from_ref(whole),
                (false, None) => {
                    tier.passed_bytes += requested;
                    continue;
                }
            };
            for item in items {
                tier.sim.request(item.id, item.fingerprint, item.size, time);
            }
        }
    }

    /// What the trace asked for so far.
    pub fn trace_stats(&self) -> SliceTraceStats {
        self.trace
    }

    /// One report per cache size and run, cache sizes in the order given, runs in
    /// [`SLICE_RUNS`] order; then one per cache size and disk rule, for a disk size.
    pub fn finish(self) -> (Vec<SliceRunReport>, Vec<SliceTierReport>) {
        let disk_bytes = self.setup.disk_bytes.unwrap_or(0);
        let tiers = self
            .tiers
            .into_iter()
            .map(|tier| {
                let report = tier.sim.finish();
                SliceTierReport {
                    disk_rule: report.policy.map_or("", DiskPolicy::as_str),
                    ram_bytes: tier.ram_bytes,
                    disk_bytes,
                    origin_bytes: report.origin_bytes + tier.passed_bytes,
                    ram_written_bytes: report.ram_written_bytes,
                    disk_written_bytes: report.disk_written_bytes,
                    disk_hit_bytes: report.disk_hit_bytes,
                }
            })
            .collect();
        let runs = self
            .runs
            .into_iter()
            .map(|run| {
                let policy = run.policy.finish();
                SliceRunReport {
                    run: run.run.name,
                    layout: run.run.layout,
                    policy: policy.policy,
                    cache_bytes: run.cache_bytes,
                    origin_bytes: policy.origin_bytes + run.passed_bytes,
                    passed_requests: run.passed_requests,
                    cache_requests: policy.requests,
                    cache_hits: policy.hits,
                    written_bytes: policy.written_bytes,
                    main_written_bytes: policy.main_written_bytes,
                    probation_written_bytes: policy.probation_written_bytes,
                    writes: policy.writes,
                    first_hits: policy.first_hits,
                    too_large: policy.too_large,
                }
            })
            .collect();
        (runs, tiers)
    }
}

/// The fingerprint of slice `index` of the object with fingerprint `object`: the slice's key is
/// the object's plus its index.
pub fn slice_fingerprint(object: u64, index: u64) -> u64 {
    let mut hasher = SipHasher13::new_with_keys(0x736c_6963_6573_0001, 0x626c_6f6f_6d67_6174);
    hasher.write_u64(object);
    hasher.write_u64(index);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> SliceSetup {
        SliceSetup {
            slice_bytes: 100,
            slice_above: 250,
            max_object_bytes: 250,
            doorkeeper: DoorkeeperConfig::with_capacity(1000),
            probation: ProbationSetup::default(),
            seed: 1,
            disk_bytes: None,
        }
    }

    fn report<'a>(reports: &'a [SliceRunReport], name: &str) -> &'a SliceRunReport {
        reports.iter().find(|r| r.run == name).expect("every run")
    }

    #[test]
    fn a_range_asks_for_exactly_the_slices_it_touches() {
        let mut sim = SliceSim::new(setup(), &[10_000]);
        // Bytes 150..=349 of a 1000-byte object touch slices 1, 2 and 3.
        sim.request(
            7,
            1000,
            Some(ByteRange {
                first: 150,
                last: 349,
            }),
            0.0,
        );
        let (reports, _) = sim.finish();
        let all = report(&reports, "slices-admit-all");
        assert_eq!((all.cache_requests, all.origin_bytes), (3, 300));
        assert_eq!(all.written_bytes, 300);
        let whole = report(&reports, "whole");
        assert_eq!((whole.passed_requests, whole.origin_bytes), (1, 200));
    }

    #[test]
    fn the_last_slice_is_only_as_long_as_the_object() {
        let mut sim = SliceSim::new(setup(), &[10_000]);
        sim.request(
            7,
            1010,
            Some(ByteRange {
                first: 1000,
                last: 1009,
            }),
            0.0,
        );
        let (all, _) = sim.finish();
        assert_eq!(report(&all, "slices-admit-all").origin_bytes, 10);
    }

    #[test]
    fn a_small_object_is_cached_whole_in_every_run() {
        let mut sim = SliceSim::new(setup(), &[10_000]);
        for time in 0..3 {
            sim.request(9, 200, None, f64::from(time));
        }
        for run in sim.finish().0 {
            assert_eq!(run.cache_requests, 3, "{run:?}");
            assert_eq!(run.passed_requests, 0, "{run:?}");
        }
    }
}
