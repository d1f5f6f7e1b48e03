//! The simulation report: per cache size, per policy, and the comparisons the operator asks for.

use std::fmt;

use super::policy::{PolicyKind, PolicyReport};
use super::ratio::ratio;
use super::request::TraceStats;
use super::tiers::TierReport;
use super::weigh::Weigh;
use crate::trace::{Compression, TraceFormat};

/// The whole run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SimReport {
    pub trace: TraceSummary,
    /// What bloomgate's policies weighed an object at (`--weigh`).
    pub weigh: Weigh,
    pub caches: Vec<CacheReport>,
    /// Wall time of the simulating pass (not of a footprint prepass, if one ran).
    pub elapsed_seconds: f64,
    /// Requests per second of that pass, through all policies of all cache sizes together.
    pub requests_per_second: f64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct TraceSummary {
    pub path: String,
    pub format: TraceFormat,
    pub compression: Compression,
    pub skipped_lines: u64,
    /// Lines passed over as no request for a cached object (bloomgate's access logs: other
    /// methods, unknown sizes).
    pub ignored_lines: u64,
    /// How sizes were made up for requests that had none, if any had none.
    pub synthesized_sizes: Option<&'static str>,
    #[serde(flatten)]
    pub stats: TraceStats,
    pub one_hit_share: f64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct DoorkeeperSummary {
    pub capacity: u64,
    /// Why this capacity: "--capacity" or the default rule.
    pub capacity_source: String,
    pub target_fpr: f64,
    pub rotate_at_fpr: f64,
    /// `None`: no age limit (trace time is often a sequence number).
    pub max_age_seconds: Option<f64>,
}

/// One cache size under every policy.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CacheReport {
    pub cache_bytes: u64,
    pub cache_percent_of_footprint: f64,
    pub doorkeeper: DoorkeeperSummary,
    pub policies: Vec<PolicyReport>,
    /// The comparisons: each present when the policies it compares ran.
    pub bloom_vs_admit_all: Option<BloomVsAdmitAll>,
    pub bloom_vs_exact: Option<BloomVsExact>,
    pub probation_vs_admit_all: Option<ProbationVsAdmitAll>,
}

#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct ProbationVsAdmitAll {
    /// Hit ratio of probation minus admit-all, in percentage points.
    pub hit_ratio_change_points: f64,
    pub byte_hit_ratio_change_points: f64,
    /// Bytes probation wrote into main (seen-before misses and promotions) over admit-all's
    /// written bytes.
    pub main_written_bytes_share: f64,
    /// Every byte probation wrote (its FIFO's too) over admit-all's written bytes.
    pub written_bytes_share: f64,
    /// The same share for bloom (second-hit), for comparison, when it ran.
    pub bloom_written_bytes_share: Option<f64>,
}

#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct BloomVsAdmitAll {
    /// Share of admit-all's cache writes that bloom did not make.
    pub writes_avoided: f64,
    pub written_bytes_avoided: f64,
    /// Byte hit ratio of bloom minus admit-all, in percentage points.
    pub byte_hit_ratio_change_points: f64,
    pub hit_ratio_change_points: f64,
}

#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct BloomVsExact {
    /// Hit ratio of bloom minus second-hit-exact, in percentage points.
    pub hit_ratio_difference_points: f64,
    pub byte_hit_ratio_difference_points: f64,
    /// Bloom's admission memory over the exact policy's (nginx-like estimate).
    pub memory_ratio: f64,
}

impl CacheReport {
    pub fn policy(&self, kind: PolicyKind) -> Option<&PolicyReport> {
        self.policies.iter().find(|p| p.policy == kind)
    }

    pub(crate) fn new(
        cache_bytes: u64,
        footprint_bytes: u64,
        doorkeeper: DoorkeeperSummary,
        policies: Vec<PolicyReport>,
    ) -> CacheReport {
        let find = |kind| policies.iter().find(|p: &&PolicyReport| p.policy == kind);
        let all = find(PolicyKind::AdmitAll);
        let bloom = find(PolicyKind::Bloom);
        let bloom_vs_admit_all = all.zip(bloom).map(|(all, bloom)| BloomVsAdmitAll {
            writes_avoided: 1.0 - ratio(bloom.writes, all.writes),
            written_bytes_avoided: 1.0 - ratio(bloom.written_bytes, all.written_bytes),
            byte_hit_ratio_change_points: 100.0 * (bloom.byte_hit_ratio - all.byte_hit_ratio),
            hit_ratio_change_points: 100.0 * (bloom.hit_ratio - all.hit_ratio),
        });
        let bloom_vs_exact = find(PolicyKind::SecondHitExact)
            .zip(bloom)
            .map(|(exact, bloom)| BloomVsExact {
                hit_ratio_difference_points: 100.0 * (bloom.hit_ratio - exact.hit_ratio),
                byte_hit_ratio_difference_points: 100.0
                    * (bloom.byte_hit_ratio - exact.byte_hit_ratio),
                memory_ratio: ratio(bloom.admission_memory_bytes, exact.admission_memory_bytes),
            });
        let probation_vs_admit_all =
            all.zip(find(PolicyKind::Probation))
                .map(|(all, probation)| ProbationVsAdmitAll {
                    hit_ratio_change_points: 100.0 * (probation.hit_ratio - all.hit_ratio),
                    byte_hit_ratio_change_points: 100.0
                        * (probation.byte_hit_ratio - all.byte_hit_ratio),
                    main_written_bytes_share: ratio(
                        probation.main_written_bytes,
                        all.written_bytes,
                    ),
                    written_bytes_share: ratio(probation.written_bytes, all.written_bytes),
                    bloom_written_bytes_share: bloom
                        .map(|bloom| ratio(bloom.written_bytes, all.written_bytes)),
                });
        CacheReport {
            cache_bytes,
            cache_percent_of_footprint: 100.0 * ratio(cache_bytes, footprint_bytes),
            doorkeeper,
            policies,
            bloom_vs_admit_all,
            bloom_vs_exact,
            probation_vs_admit_all,
        }
    }
}

/// Bytes with a binary unit, for tables.
pub(crate) struct HumanBytes(pub u64);

impl fmt::Display for HumanBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
        let mut value = self.0 as f64;
        let mut unit = 0;
        while value >= 1024.0 && unit + 1 < UNITS.len() {
            value /= 1024.0;
            unit += 1;
        }
        if unit == 0 {
            write!(f, "{} B", self.0)
        } else {
            write!(f, "{value:.1} {}", UNITS[unit])
        }
    }
}

impl fmt::Display for SimReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_trace(f, &self.trace)?;
        if self.weigh == Weigh::Proxy {
            writeln!(
                f,
                "admit-all, second-hit-exact, bloom and probation weigh an object as the proxy \
                 stores it (body, head, key); the references weigh bodies"
            )?;
        }
        for cache in &self.caches {
            writeln!(f)?;
            write_policies(f, cache)?;
            write_comparisons(f, cache)?;
        }
        let stats = &self.trace.stats;
        writeln!(f)?;
        writeln!(
            f,
            "simulated {} requests x {} policies in {:.2} s: {:.2} million requests/s",
            stats.requests,
            self.caches.iter().map(|c| c.policies.len()).sum::<usize>(),
            self.elapsed_seconds,
            self.requests_per_second / 1e6,
        )
    }
}

/// The trace's line: its size, what was skipped or synthesised, and how each policy evicts.
fn write_trace(f: &mut fmt::Formatter<'_>, trace: &TraceSummary) -> fmt::Result {
    let stats = &trace.stats;
    writeln!(
        f,
        "trace {} ({:?}, {:?}): {} requests, {} distinct objects, {:.1}% requested once, footprint {}",
        trace.path,
        trace.format,
        trace.compression,
        stats.requests,
        stats.distinct_objects,
        100.0 * trace.one_hit_share,
        HumanBytes(stats.footprint_bytes),
    )?;
    if trace.skipped_lines > 0 {
        writeln!(f, "skipped {} bad lines", trace.skipped_lines)?;
    }
    if trace.ignored_lines > 0 {
        writeln!(
            f,
            "ignored {} lines: methods other than GET and HEAD, or objects of unknown size",
            trace.ignored_lines
        )?;
    }
    if let Some(rule) = trace.synthesized_sizes {
        writeln!(f, "sizes missing from the trace were synthesized: {rule}")?;
    }
    writeln!(
        f,
        "eviction: LRU by bytes for admit-all, second-hit-exact and bloom; probation: a probation FIFO and a main segment (the proxy's store rules); s3-fifo, w-tinylfu and sieve as libCacheSim runs them; objects larger than the cache are never stored"
    )?;
    Ok(())
}

/// One cache size: its doorkeeper's settings and a row per policy.
fn write_policies(f: &mut fmt::Formatter<'_>, cache: &CacheReport) -> fmt::Result {
    let door = &cache.doorkeeper;
    writeln!(f)?;
    writeln!(
        f,
        "cache {} ({:.2}% of footprint); doorkeeper capacity {} ({}), target fpr {}, rotate at fpr {}, max age {}",
        HumanBytes(cache.cache_bytes),
        cache.cache_percent_of_footprint,
        door.capacity,
        door.capacity_source,
        door.target_fpr,
        door.rotate_at_fpr,
        door.max_age_seconds
            .map_or("none".to_owned(), |s| format!("{s} s")),
    )?;
    writeln!(
        f,
        "{:<17} {:>7} {:>7} {:>10} {:>11} {:>11} {:>11} {:>9} {:>11}",
        "policy",
        "hit%",
        "byte%",
        "writes",
        "written",
        "main written",
        "origin",
        "rotations",
        "adm. memory"
    )?;
    for p in &cache.policies {
        let rotations = p.rotations.total();
        writeln!(
            f,
            "{:<17} {:>7.2} {:>7.2} {:>10} {:>11} {:>11} {:>11} {:>9} {:>11}",
            p.policy.as_str(),
            100.0 * p.hit_ratio,
            100.0 * p.byte_hit_ratio,
            p.writes,
            HumanBytes(p.written_bytes).to_string(),
            HumanBytes(p.main_written_bytes).to_string(),
            HumanBytes(p.origin_bytes).to_string(),
            rotations,
            HumanBytes(p.admission_memory_bytes).to_string(),
        )?;
    }
    Ok(())
}

/// One cache size's comparisons, each present when both of its policies ran.
fn write_comparisons(f: &mut fmt::Formatter<'_>, cache: &CacheReport) -> fmt::Result {
    if let Some(all) = &cache.bloom_vs_admit_all {
        writeln!(
            f,
            "bloom vs admit-all: {:.1}% of writes avoided ({:.1}% of written bytes), byte hit ratio {:+.2} points, hit ratio {:+.2} points",
            100.0 * all.writes_avoided,
            100.0 * all.written_bytes_avoided,
            all.byte_hit_ratio_change_points,
            all.hit_ratio_change_points,
        )?;
    }
    if let Some(exact) = &cache.bloom_vs_exact {
        writeln!(
            f,
            "bloom vs second-hit-exact: hit ratio {:+.2} points, byte hit ratio {:+.2} points, memory 1/{:.0} (exact at {} B/key, nginx's keys_zone)",
            exact.hit_ratio_difference_points,
            exact.byte_hit_ratio_difference_points,
            1.0 / exact.memory_ratio,
            super::NGINX_BYTES_PER_KEY,
        )?;
    }
    if let Some(probation) = &cache.probation_vs_admit_all {
        write!(
            f,
            "probation vs admit-all: hit ratio {:+.2} points, byte hit ratio {:+.2} points, main written bytes {:.2}x admit-all's (all written bytes {:.2}x",
            probation.hit_ratio_change_points,
            probation.byte_hit_ratio_change_points,
            probation.main_written_bytes_share,
            probation.written_bytes_share,
        )?;
        match probation.bloom_written_bytes_share {
            Some(bloom) => writeln!(f, "; bloom {bloom:.2}x)")?,
            None => writeln!(f, ")")?,
        }
    }
    Ok(())
}

/// The two-tier model's run: RAM over disk, one report per disk rule.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TierSimReport {
    pub trace: TraceSummary,
    pub ram_bytes: u64,
    pub disk_bytes: u64,
    pub ram_percent_of_footprint: f64,
    pub disk_percent_of_footprint: f64,
    /// The doorkeeper of `gated` (default capacity: what both tiers hold, in objects of the mean size).
    pub doorkeeper: DoorkeeperSummary,
    pub policies: Vec<TierReport>,
    pub gated_vs_write_all: GatedVsWriteAll,
    pub elapsed_seconds: f64,
}

#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct GatedVsWriteAll {
    /// Disk bytes `gated` wrote over `write-all`'s.
    pub disk_written_bytes_share: f64,
    /// Hit ratio of gated minus write-all, in percentage points.
    pub hit_ratio_change_points: f64,
    pub byte_hit_ratio_change_points: f64,
}

impl fmt::Display for TierSimReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let stats = &self.trace.stats;
        writeln!(
            f,
            "trace {}: {} requests, {} distinct objects, {:.1}% requested once, footprint {}",
            self.trace.path,
            stats.requests,
            stats.distinct_objects,
            100.0 * self.trace.one_hit_share,
            HumanBytes(stats.footprint_bytes),
        )?;
        let door = &self.doorkeeper;
        writeln!(
            f,
            "RAM {} ({:.2}% of footprint) over disk {} ({:.2}%), both byte LRU; a disk hit is copied back to RAM; gated's doorkeeper capacity {} ({})",
            HumanBytes(self.ram_bytes),
            self.ram_percent_of_footprint,
            HumanBytes(self.disk_bytes),
            self.disk_percent_of_footprint,
            door.capacity,
            door.capacity_source,
        )?;
        writeln!(
            f,
            "{:<11} {:>7} {:>7} {:>9} {:>9} {:>11} {:>12} {:>11}",
            "disk rule",
            "hit%",
            "byte%",
            "RAM hits",
            "disk hits",
            "disk writes",
            "disk written",
            "origin"
        )?;
        for p in &self.policies {
            writeln!(
                f,
                "{:<11} {:>7.2} {:>7.2} {:>9} {:>9} {:>11} {:>12} {:>11}",
                p.policy.map_or("?", |policy| policy.as_str()),
                100.0 * p.hit_ratio,
                100.0 * p.byte_hit_ratio,
                p.ram_hits,
                p.disk_hits,
                p.disk_writes,
                HumanBytes(p.disk_written_bytes).to_string(),
                HumanBytes(p.origin_bytes).to_string(),
            )?;
        }
        let versus = &self.gated_vs_write_all;
        writeln!(
            f,
            "gated vs write-all: {:.2}x the disk bytes written, hit ratio {:+.2} points, byte hit ratio {:+.2} points",
            versus.disk_written_bytes_share,
            versus.hit_ratio_change_points,
            versus.byte_hit_ratio_change_points,
        )
    }
}
