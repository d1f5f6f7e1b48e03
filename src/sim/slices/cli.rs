//! `bloomgate simulate-slices`: its arguments and the run that reads the trace into [`SliceSim`].

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use crate::admission::DoorkeeperConfig;
use crate::config::parse_size;
use crate::trace::{ReadOptions, TraceReader};

use super::super::SimError;
use super::super::policy::ProbationSetup;
use super::super::request::key_fingerprint;
use super::super::segmented::MainEviction;
use super::{SliceReport, SliceSetup, SliceSim};

/// The smallest default doorkeeper capacity, as `simulate` has it.
const MIN_DEFAULT_CAPACITY: u64 = 1000;
/// No age limit: a century of trace time.
const NO_MAX_AGE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Replay a trace with byte ranges (a CSV `range` column, as `trace generate --video` writes)
/// through whole-object caching and slice caching (every slice admitted, or each slice on its
/// second request), and report origin bytes and bytes written per cache size.
#[derive(Debug, Clone, clap::Args)]
pub struct SliceArgs {
    /// The trace: CSV with a header (time,key,size and optionally range), or any trace
    /// `simulate` reads (whose requests are then for whole objects).
    #[arg(long)]
    pub trace: PathBuf,
    /// Cache size(s), as `cache.max_bytes` reads them: 1GiB,4GiB.
    #[arg(long, value_delimiter = ',', value_parser = parse_size, required = true)]
    pub cache_bytes: Vec<u64>,
    /// The slice size (`cache.slice_bytes`): a power of two from 64KiB to 64MiB.
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    pub slice_bytes: u64,
    /// Objects larger than this are sliced (`cache.slice_above`).
    #[arg(long, default_value = "8MiB", value_parser = parse_size)]
    pub slice_above: u64,
    /// Whole objects larger than this are not stored (`cache.max_object_bytes`).
    #[arg(long, default_value = "8MiB", value_parser = parse_size)]
    pub max_object_bytes: u64,
    /// Also run each cache size as RAM over a disk of this size, under the disk rules
    /// second-request (bloomgate's for slices), gated (bloomgate's for whole objects),
    /// every-miss (nginx's) and write-all.
    #[arg(long, value_parser = parse_size)]
    pub disk_bytes: Option<u64>,
    /// Doorkeeper capacity (distinct keys per generation). Default: as many slices as the
    /// smallest cache holds, at least 1000.
    #[arg(long)]
    pub capacity: Option<u64>,
    /// The `probation` runs' share of the cache for the probation FIFO.
    #[arg(long, default_value_t = 0.1)]
    pub probation_share: f64,
    /// Seeds the doorkeeper filters' secrets.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Skip and count lines that cannot be parsed instead of stopping at the first.
    #[arg(long)]
    pub skip_bad_lines: bool,
}

/// Runs `bloomgate simulate-slices` and prints its report to stdout.
pub fn run_slices(args: &SliceArgs) -> Result<(), SimError> {
    let report = simulate_slices(args)?;
    let mut stdout = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut stdout, &report)?;
        writeln!(stdout)?;
    } else {
        write!(stdout, "{report}")?;
    }
    Ok(())
}

/// Runs the slice simulation that `args` describe and returns its report.
pub fn simulate_slices(args: &SliceArgs) -> Result<SliceReport, SimError> {
    let slice_sizes = 64 * 1024..=64 << 20;
    if !args.slice_bytes.is_power_of_two() || !slice_sizes.contains(&args.slice_bytes) {
        return Err(SimError::Argument(format!(
            "--slice-bytes {} must be a power of two from 64KiB to 64MiB",
            args.slice_bytes
        )));
    }
    if args.cache_bytes.contains(&0) || args.disk_bytes == Some(0) {
        return Err(SimError::Argument(
            "--cache-bytes and --disk-bytes must be at least 1".to_owned(),
        ));
    }
    if !(args.probation_share > 0.0 && args.probation_share < 1.0) {
        return Err(SimError::Argument(format!(
            "--probation-share {} must be in (0, 1)",
            args.probation_share
        )));
    }
    let smallest = args.cache_bytes.iter().copied().min().unwrap_or(1);
    let capacity = args
        .capacity
        .unwrap_or((smallest / args.slice_bytes).max(MIN_DEFAULT_CAPACITY));
    let doorkeeper = DoorkeeperConfig {
        max_age: NO_MAX_AGE,
        ..DoorkeeperConfig::with_capacity(capacity)
    };
    doorkeeper
        .validate()
        .map_err(|error| SimError::Argument(format!("--capacity: {error}")))?;
    let setup = SliceSetup {
        slice_bytes: args.slice_bytes,
        slice_above: args.slice_above,
        max_object_bytes: args.max_object_bytes,
        doorkeeper,
        probation: ProbationSetup {
            share: args.probation_share,
            main_eviction: MainEviction::Fifo,
        },
        seed: args.seed,
        disk_bytes: args.disk_bytes,
    };
    let mut sim = SliceSim::new(setup, &args.cache_bytes);
    let options = ReadOptions {
        skip_bad_lines: args.skip_bad_lines,
    };
    let mut reader = TraceReader::open(&args.trace, options)?;
    while let Some(request) = reader.next_ref() {
        let request = request?;
        sim.request(
            key_fingerprint(request.key),
            request.size,
            request.range,
            request.time,
        );
    }
    let stats = sim.trace_stats();
    let (runs, tiers) = sim.finish();
    Ok(SliceReport {
        trace: args.trace.display().to_string(),
        stats,
        slice_bytes: args.slice_bytes,
        slice_above: args.slice_above,
        max_object_bytes: args.max_object_bytes,
        doorkeeper_capacity: capacity,
        runs,
        tiers,
    })
}
