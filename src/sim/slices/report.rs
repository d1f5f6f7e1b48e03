//! The slice simulator's report: per cache size, each run's origin bytes and bytes written.

use std::fmt;

use super::super::policy::PolicyKind;
use super::super::ratio::ratio;
use super::{Layout, SliceTraceStats};

/// One run at one cache size.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SliceRunReport {
    pub run: &'static str,
    pub layout: Layout,
    pub policy: PolicyKind,
    pub cache_bytes: u64,
    /// Bytes fetched from the origin: whole slices (or objects) on a cache miss, and the asked
    /// bytes of requests passed through.
    pub origin_bytes: u64,
    /// Requests passed through without the cache (whole objects above `max_object_bytes`).
    pub passed_requests: u64,
    /// Objects and slices asked of the cache, and how many were hits.
    pub cache_requests: u64,
    pub cache_hits: u64,
    /// Every byte stored in the cache (probation's FIFO included): RAM writes.
    pub written_bytes: u64,
    /// Bytes stored into main (seen-before misses and promotions): what the disk tier is offered
    /// when main gives them up. Every write for a single-segment policy.
    pub main_written_bytes: u64,
    /// Bytes stored into probation's FIFO (first copies, kept in RAM only).
    pub probation_written_bytes: u64,
    pub writes: u64,
    /// Misses not stored because admission said first seen.
    pub first_hits: u64,
    /// Misses not stored because the object is larger than the cache.
    pub too_large: u64,
}

/// One disk rule at one RAM size: slices through RAM over a disk.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SliceTierReport {
    /// `second-request`, `gated`, `every-miss` or `write-all` (see [`super`]).
    pub disk_rule: &'static str,
    pub ram_bytes: u64,
    pub disk_bytes: u64,
    pub origin_bytes: u64,
    /// Bytes stored in RAM: every origin miss and every disk hit.
    pub ram_written_bytes: u64,
    pub disk_written_bytes: u64,
    pub disk_hit_bytes: u64,
}

/// A whole slice simulation.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SliceReport {
    pub trace: String,
    #[serde(flatten)]
    pub stats: SliceTraceStats,
    pub slice_bytes: u64,
    pub slice_above: u64,
    pub max_object_bytes: u64,
    pub doorkeeper_capacity: u64,
    pub runs: Vec<SliceRunReport>,
    /// The two-tier runs, with a disk size.
    pub tiers: Vec<SliceTierReport>,
}

impl SliceReport {
    /// The disk rule `rule` over RAM of `ram_bytes`.
    pub fn tier(&self, ram_bytes: u64, rule: &str) -> Option<&SliceTierReport> {
        self.tiers
            .iter()
            .find(|tier| tier.ram_bytes == ram_bytes && tier.disk_rule == rule)
    }

    /// The run named `name` at `cache_bytes`.
    pub fn run(&self, cache_bytes: u64, name: &str) -> Option<&SliceRunReport> {
        self.runs
            .iter()
            .find(|run| run.cache_bytes == cache_bytes && run.run == name)
    }
}

const MIB: f64 = (1u64 << 20) as f64;

impl fmt::Display for SliceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "trace {}: {} requests ({} ranged, {} for objects above {} MiB), {:.1} MiB asked for",
            self.trace,
            self.stats.requests,
            self.stats.ranged_requests,
            self.stats.sliced_requests,
            self.slice_above as f64 / MIB,
            self.stats.requested_bytes as f64 / MIB,
        )?;
        writeln!(
            f,
            "slices of {} KiB; whole objects stored up to {} MiB; doorkeeper capacity {} keys",
            self.slice_bytes / 1024,
            self.max_object_bytes as f64 / MIB,
            self.doorkeeper_capacity,
        )?;
        let mut sizes: Vec<u64> = self.runs.iter().map(|run| run.cache_bytes).collect();
        sizes.dedup();
        for cache_bytes in sizes {
            writeln!(f, "\ncache {:.0} MiB", cache_bytes as f64 / MIB)?;
            writeln!(
                f,
                "  {:<24} {:>12} {:>9} {:>13} {:>13} {:>13} {:>9}",
                "run",
                "origin MiB",
                "origin %",
                "written MiB",
                "main MiB",
                "probation MiB",
                "written x"
            )?;
            let all = self.run(cache_bytes, "slices-admit-all");
            for run in self
                .runs
                .iter()
                .filter(|run| run.cache_bytes == cache_bytes)
            {
                let against_all =
                    all.map_or(0.0, |all| ratio(run.written_bytes, all.written_bytes));
                writeln!(
                    f,
                    "  {:<24} {:>12.1} {:>8.1}% {:>13.1} {:>13.1} {:>13.1} {:>8.2}x",
                    run.run,
                    run.origin_bytes as f64 / MIB,
                    100.0 * ratio(run.origin_bytes, self.stats.requested_bytes),
                    run.written_bytes as f64 / MIB,
                    run.main_written_bytes as f64 / MIB,
                    run.probation_written_bytes as f64 / MIB,
                    against_all,
                )?;
            }
        }
        self.fmt_tiers(f)?;
        writeln!(
            f,
            "\norigin %: origin bytes over bytes asked for. written: every byte stored (probation's \
             FIFO too); main: what reaches main, and so the disk tier; written x: written over \
             slices-admit-all's."
        )
    }
}

impl SliceReport {
    /// The two-tier runs' tables, one per RAM size.
    fn fmt_tiers(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for tier in &self.tiers {
            if Some(tier) == self.tiers.iter().find(|t| t.ram_bytes == tier.ram_bytes) {
                writeln!(
                    f,
                    "\nslices through {:.0} MiB of RAM over {:.0} MiB of disk",
                    tier.ram_bytes as f64 / MIB,
                    tier.disk_bytes as f64 / MIB
                )?;
                writeln!(
                    f,
                    "  {:<24} {:>12} {:>9} {:>13} {:>13} {:>13}",
                    "disk rule", "origin MiB", "origin %", "RAM MiB", "disk MiB", "disk hit MiB"
                )?;
            }
            writeln!(
                f,
                "  {:<24} {:>12.1} {:>8.1}% {:>13.1} {:>13.1} {:>13.1}",
                tier.disk_rule,
                tier.origin_bytes as f64 / MIB,
                100.0 * ratio(tier.origin_bytes, self.stats.requested_bytes),
                tier.ram_written_bytes as f64 / MIB,
                tier.disk_written_bytes as f64 / MIB,
                tier.disk_hit_bytes as f64 / MIB,
            )?;
        }
        Ok(())
    }
}
