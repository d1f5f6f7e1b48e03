//! `bloomgate simulate`: its arguments and the run that ties reading, simulating and reporting.

use std::ffi::OsStr;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};

use crate::admission::DoorkeeperConfig;
use crate::config::parse_size;
use crate::trace::{ReadOptions, SYNTHESIZED_SIZE_RULE, TraceInfo};

use super::engine::{CacheSetup, Simulator};
use super::pipeline::Consumer;
use super::policy::{PolicyKind, ProbationSetup};
use super::ratio::ratio;
use super::report::{CacheReport, DoorkeeperSummary, SimReport, TraceSummary};
use super::report::{GatedVsWriteAll, TierSimReport};
use super::request::{SimRequest, TraceStats};
use super::segmented::MainEviction;
use super::tiers::{DiskPolicy, TierReport, TierSim};
use super::weigh::Weigh;
use super::{SimError, pipeline};

/// The smallest default doorkeeper capacity, so tiny caches still get a meaningful window.
const MIN_DEFAULT_CAPACITY: u64 = 1000;
/// The default doorkeeper capacity in keys per object the cache holds: the doorkeeper is
/// probation's ghost, and twice the cache's objects was the best window of 1, 2, 3, 4 and 8 on
/// the shared traces (`load/admission_table.py`: probation at or above the better of S3-FIFO and
/// W-TinyLFU in 11 of 15 cells against 10 at 1x; 4x and 8x also reach 11 but lose up to 0.6 and
/// 2.2 points in a cell, and an unbounded window 2.1-2.4 points on the scan).
const DEFAULT_CAPACITY_PER_OBJECT: u64 = 2;
/// `max_age` when none is given: a century of trace time, i.e. no age limit.
const NO_MAX_AGE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Replay a trace offline through bloomgate's admission policies (admit-all, second-hit-exact,
/// bloom, probation) and the research references (s3-fifo, w-tinylfu, sieve).
#[derive(Debug, Clone, clap::Args)]
#[command(group(clap::ArgGroup::new("size").required(true).args(["cache_bytes", "cache_percent", "ram_bytes", "ram_percent"])))]
pub struct SimulateArgs {
    /// The trace: CSV with a header (time,key,size), an nginx combined log, or bloomgate's own
    /// access log (combined or JSON); plain, gzip or zstd.
    #[arg(long)]
    pub trace: PathBuf,
    /// Cache size(s), read as `cache.max_bytes` is (KiB, MiB, GiB powers of 1024; KB, MB, GB powers
    /// of 1000): 64MiB,1GiB.
    #[arg(long, value_delimiter = ',', value_parser = parse_size)]
    pub cache_bytes: Vec<u64>,
    /// Cache size(s) as percent of the trace's footprint (sum of distinct objects' sizes): 1,5,10.
    /// Reads the trace twice.
    #[arg(long, value_delimiter = ',')]
    pub cache_percent: Vec<f64>,
    /// Doorkeeper capacity (distinct keys per generation). Default: twice as many keys as the
    /// cache holds objects of the trace's mean size, at least 1000 (reads the trace twice).
    #[arg(long)]
    pub capacity: Option<u64>,
    /// The false-positive rate each filter is sized for at capacity.
    #[arg(long, default_value_t = 0.01)]
    pub target_fpr: f64,
    /// Rotate when the combined false-positive estimate of both generations crosses this.
    #[arg(long, default_value_t = 0.02)]
    pub rotate_at_fpr: f64,
    /// Rotate after this much trace time (e.g. 1h), read from the trace's time column.
    /// Default: no age limit, since many traces' time is a sequence number.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub max_age: Option<Duration>,
    /// The policies to run, by the names the report gives them (`lru` names admit-all too).
    /// Default: all of them.
    #[arg(long, value_enum, value_delimiter = ',', conflicts_with_all = ["ram_bytes", "ram_percent", "disk_bytes", "disk_percent"])]
    pub policies: Vec<PolicyKind>,
    /// What bloomgate's policies weigh an object at against the cache's bytes: `body` (its body,
    /// as the research references and libCacheSim count) or `proxy` (what `bloomgate serve`
    /// spends on it when replayed from `bloomgate origin`: body, head and key as the allocator
    /// rounds them, and the index's share; a smaller effective cache). Hit and written bytes
    /// count bodies either way.
    #[arg(long, value_enum, default_value_t = Weigh::Body, conflicts_with_all = ["ram_bytes", "ram_percent", "disk_bytes", "disk_percent"])]
    pub weigh: Weigh,
    /// The `probation` policy's share of the cache for its probation FIFO (the proxy's
    /// `admission.probation_share`).
    #[arg(long, default_value_t = 0.1)]
    pub probation_share: f64,
    /// How the `probation` policy's main segment evicts: `fifo` (S3-FIFO's main, what the proxy
    /// runs) or `lru` (for comparison).
    #[arg(long, value_enum, default_value_t = MainEviction::Fifo)]
    pub probation_main: MainEviction,
    /// Two tiers instead: the RAM tier's size (a byte LRU), with `--disk-bytes` or
    /// `--disk-percent`; runs the disk rules write-all, every-miss and gated side by side.
    #[arg(long, value_parser = parse_size, conflicts_with_all = ["cache_bytes", "cache_percent"])]
    pub ram_bytes: Option<u64>,
    /// The RAM tier's size as percent of the trace's footprint.
    #[arg(long, conflicts_with_all = ["cache_bytes", "cache_percent", "ram_bytes"])]
    pub ram_percent: Option<f64>,
    /// The disk tier's size (a byte LRU below RAM).
    #[arg(long, value_parser = parse_size, conflicts_with_all = ["cache_bytes", "cache_percent"])]
    pub disk_bytes: Option<u64>,
    /// The disk tier's size as percent of the trace's footprint.
    #[arg(long, conflicts_with_all = ["cache_bytes", "cache_percent", "disk_bytes"])]
    pub disk_percent: Option<f64>,
    /// Threads simulating at once, besides the one reading the trace: the cache sizes' policies
    /// (four per size, or the three disk rules) are shared out among them. The report is the same
    /// whatever the number. Default: the cores available.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    pub jobs: Option<u16>,
    /// Seeds the doorkeeper filters' secrets, which the proxy draws at random: the same seed gives
    /// the same report; another seed shows how much its false positives move the figures.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also draw hit ratio, byte hit ratio and bytes written into main against cache size, one
    /// line per policy, to this file: SVG, or HTML (the SVG with the report under it) for a name
    /// ending in `.html`. Give several sizes (`--cache-percent 1,5,10`) for curves.
    #[arg(long, conflicts_with_all = ["ram_bytes", "ram_percent", "disk_bytes", "disk_percent"])]
    pub plot: Option<PathBuf>,
    /// Skip and count lines that cannot be parsed instead of stopping at the first.
    #[arg(long)]
    pub skip_bad_lines: bool,
}

/// Runs `bloomgate simulate` and prints its report to stdout.
pub fn run(args: &SimulateArgs) -> Result<(), SimError> {
    let mut stdout = std::io::stdout().lock();
    if args.is_two_tier() {
        let report = simulate_tiers(args)?;
        print(&mut stdout, &report, args.json)
    } else {
        let report = simulate(args)?;
        if let Some(path) = &args.plot {
            super::plot::write_plot(path, &report)?;
        }
        print(&mut stdout, &report, args.json)
    }
}

fn print<R: serde::Serialize + std::fmt::Display>(
    out: &mut impl Write,
    report: &R,
    json: bool,
) -> Result<(), SimError> {
    if json {
        serde_json::to_writer_pretty(&mut *out, report)?;
        writeln!(out)?;
    } else {
        write!(out, "{report}")?;
    }
    Ok(())
}

impl SimulateArgs {
    /// The arguments of `bloomgate simulate --trace TRACE --cache-percent PERCENT,...`: every other
    /// option at its command-line default, read by the same parser.
    pub fn with_cache_percent(trace: &Path, percent: &[f64]) -> Result<SimulateArgs, SimError> {
        #[derive(clap::Parser)]
        struct Simulate {
            #[command(flatten)]
            args: SimulateArgs,
        }
        let percent: Vec<String> = percent.iter().map(f64::to_string).collect();
        let percent = percent.join(",");
        let words = [
            OsStr::new("simulate"),
            OsStr::new("--trace"),
            trace.as_os_str(),
            OsStr::new("--cache-percent"),
            OsStr::new(&percent),
        ];
        Simulate::try_parse_from(words)
            .map(|simulate| simulate.args)
            .map_err(|error| SimError::Argument(error.to_string()))
    }

    /// `--policies` in report order without repeats, or every policy.
    pub fn policies(&self) -> Vec<PolicyKind> {
        PolicyKind::ALL
            .into_iter()
            .filter(|kind| self.policies.is_empty() || self.policies.contains(kind))
            .collect()
    }

    /// Whether the two-tier model runs (a disk size is given).
    pub fn is_two_tier(&self) -> bool {
        self.disk_bytes.is_some() || self.disk_percent.is_some()
    }

    /// Simulating threads: `--jobs`, or the cores available.
    pub fn jobs(&self) -> usize {
        match self.jobs {
            Some(jobs) => usize::from(jobs).max(1),
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }
}

/// Runs the two-tier model (RAM over disk) with every disk rule and returns its report.
pub fn simulate_tiers(args: &SimulateArgs) -> Result<TierSimReport, SimError> {
    check_two_tier(args)?;
    validate(args)?;
    let options = ReadOptions {
        skip_bad_lines: args.skip_bad_lines,
    };
    let progress = progress_bar(None, "measuring footprint");
    let mut count = |batch: &[SimRequest]| progress.inc(batch.len() as u64);
    let (_, prepass) = pipeline::scan(&args.trace, options, &mut [&mut count])?;
    progress.finish_and_clear();
    let of_footprint =
        |percent: f64| ((prepass.footprint_bytes as f64 * percent / 100.0).round() as u64).max(1);
    let ram_bytes = args
        .ram_bytes
        .unwrap_or_else(|| of_footprint(args.ram_percent.unwrap_or(1.0)));
    let disk_bytes = args
        .disk_bytes
        .unwrap_or_else(|| of_footprint(args.disk_percent.unwrap_or(10.0)));
    // The window of "seen before" spans what both tiers hold.
    let door = doorkeeper_summary(args, ram_bytes + disk_bytes, Some(&prepass));
    let doorkeeper = DoorkeeperConfig {
        capacity: door.capacity,
        target_fpr: door.target_fpr,
        rotate_at_fpr: door.rotate_at_fpr,
        max_age: args.max_age.unwrap_or(NO_MAX_AGE),
    };
    // The disk rules shared out among the threads, in turn.
    let mut groups: Vec<Vec<TierSim>> = (0..args.jobs().min(DiskPolicy::ALL.len()))
        .map(|_| Vec::new())
        .collect();
    for (index, &policy) in DiskPolicy::ALL.iter().enumerate() {
        let sim = TierSim::new(policy, ram_bytes, disk_bytes, &doorkeeper, args.seed);
        let group = index % groups.len();
        groups[group].push(sim);
    }
    let (info, stats, elapsed) = scan_into(
        args,
        options,
        Some(prepass.requests),
        &mut groups,
        |sims, batch| {
            for request in batch {
                for sim in sims.iter_mut() {
                    sim.request(request.id, request.fingerprint, request.size, request.time);
                }
            }
        },
    )?;
    let mut policies: Vec<TierReport> = groups.into_iter().flatten().map(TierSim::finish).collect();
    policies.sort_by_key(|p| DiskPolicy::ALL.iter().position(|&d| Some(d) == p.policy));
    let percent = |bytes: u64| 100.0 * ratio(bytes, stats.footprint_bytes);
    let find = |policy| {
        policies
            .iter()
            .find(|p| p.policy == Some(policy))
            .expect("every rule ran")
    };
    let gated_vs_write_all =
        gated_vs_write_all(find(DiskPolicy::Gated), find(DiskPolicy::WriteAll));
    Ok(TierSimReport {
        trace: trace_summary(args, &info, stats),
        ram_bytes,
        disk_bytes,
        ram_percent_of_footprint: percent(ram_bytes),
        disk_percent_of_footprint: percent(disk_bytes),
        doorkeeper: door,
        gated_vs_write_all,
        policies,
        elapsed_seconds: elapsed,
    })
}

/// The two-tier model's arguments, checked: both tiers sized, percentages in (0, 100], sizes
/// at least a byte.
fn check_two_tier(args: &SimulateArgs) -> Result<(), SimError> {
    let bad = |message: &str| Err(SimError::Argument(message.to_owned()));
    if !args.is_two_tier() {
        return bad("the two-tier model needs --disk-bytes or --disk-percent");
    }
    if args.ram_bytes.is_none() && args.ram_percent.is_none() {
        return bad("the two-tier model needs --ram-bytes or --ram-percent");
    }
    for percent in [args.ram_percent, args.disk_percent].into_iter().flatten() {
        if !(percent > 0.0 && percent <= 100.0) {
            return Err(SimError::Argument(format!(
                "--ram-percent and --disk-percent must be in (0, 100], got {percent}"
            )));
        }
    }
    if args.ram_bytes == Some(0) || args.disk_bytes == Some(0) {
        return bad("--ram-bytes and --disk-bytes must be at least 1");
    }
    Ok(())
}

/// The gated disk rule against writing everything that RAM evicts.
fn gated_vs_write_all(gated: &TierReport, all: &TierReport) -> GatedVsWriteAll {
    GatedVsWriteAll {
        disk_written_bytes_share: ratio(gated.disk_written_bytes, all.disk_written_bytes),
        hit_ratio_change_points: 100.0 * (gated.hit_ratio - all.hit_ratio),
        byte_hit_ratio_change_points: 100.0 * (gated.byte_hit_ratio - all.byte_hit_ratio),
    }
}

/// Runs the simulation that `args` describe and returns its report.
pub fn simulate(args: &SimulateArgs) -> Result<SimReport, SimError> {
    validate(args)?;
    if args.is_two_tier() {
        return Err(SimError::Argument(
            "a disk size runs the two-tier model (simulate_tiers)".to_owned(),
        ));
    }
    let options = ReadOptions {
        skip_bad_lines: args.skip_bad_lines,
    };
    let prepass = if args.cache_percent.is_empty() && args.capacity.is_some() {
        None
    } else {
        let progress = progress_bar(None, "measuring footprint");
        let mut count = |batch: &[SimRequest]| progress.inc(batch.len() as u64);
        let (_, stats) = pipeline::scan(&args.trace, options, &mut [&mut count])?;
        progress.finish_and_clear();
        Some(stats)
    };
    let cache_sizes: Vec<u64> = match &prepass {
        Some(stats) if !args.cache_percent.is_empty() => args
            .cache_percent
            .iter()
            .map(|percent| ((stats.footprint_bytes as f64 * percent / 100.0).round() as u64).max(1))
            .collect(),
        _ => args.cache_bytes.clone(),
    };
    let doorkeepers: Vec<DoorkeeperSummary> = cache_sizes
        .iter()
        .map(|&cache_bytes| doorkeeper_summary(args, cache_bytes, prepass.as_ref()))
        .collect();
    let setups: Vec<CacheSetup> = cache_sizes
        .iter()
        .zip(&doorkeepers)
        .map(|(&cache_bytes, door)| CacheSetup {
            cache_bytes,
            probation: ProbationSetup {
                share: args.probation_share,
                main_eviction: args.probation_main,
            },
            seed: args.seed,
            weigh: args.weigh,
            doorkeeper: DoorkeeperConfig {
                capacity: door.capacity,
                target_fpr: door.target_fpr,
                rotate_at_fpr: door.rotate_at_fpr,
                max_age: args.max_age.unwrap_or(NO_MAX_AGE),
            },
        })
        .collect();
    let mut parts = Simulator::with_policies(&setups, &args.policies()).split(args.jobs());
    let (info, stats, elapsed) = scan_into(
        args,
        options,
        prepass.map(|s| s.requests),
        &mut parts,
        |part, batch| part.request_all(batch),
    )?;
    let reports = Simulator::merge(parts).finish();
    let caches = cache_sizes
        .iter()
        .zip(doorkeepers)
        .zip(reports)
        .map(|((&cache_bytes, door), policies)| {
            CacheReport::new(cache_bytes, stats.footprint_bytes, door, policies)
        })
        .collect();
    Ok(SimReport {
        trace: trace_summary(args, &info, stats),
        weigh: args.weigh,
        caches,
        elapsed_seconds: elapsed,
        requests_per_second: stats.requests as f64 / elapsed.max(1e-9),
    })
}

/// Scans the trace once, each part fed every batch by `feed` in a thread of its own (the first
/// also moves the progress bar towards `requests`, when known); returns what the scan found and
/// the seconds it took.
fn scan_into<P: Send>(
    args: &SimulateArgs,
    options: ReadOptions,
    requests: Option<u64>,
    parts: &mut [P],
    feed: impl Fn(&mut P, &[SimRequest]) + Sync,
) -> Result<(TraceInfo, TraceStats, f64), SimError> {
    let progress = progress_bar(requests, "simulating");
    let started = Instant::now();
    let mut feeds: Vec<_> = parts
        .iter_mut()
        .enumerate()
        .map(|(index, part)| {
            let progress = (index == 0).then_some(&progress);
            let feed = &feed;
            move |batch: &[SimRequest]| {
                feed(part, batch);
                if let Some(progress) = progress {
                    progress.inc(batch.len() as u64);
                }
            }
        })
        .collect();
    let mut consumers: Vec<Consumer<'_>> =
        feeds.iter_mut().map(|feed| feed as Consumer<'_>).collect();
    let (info, stats) = pipeline::scan(&args.trace, options, &mut consumers)?;
    let elapsed = started.elapsed().as_secs_f64();
    progress.finish_and_clear();
    Ok((info, stats, elapsed))
}

fn validate(args: &SimulateArgs) -> Result<(), SimError> {
    let bad = |message: String| Err(SimError::Argument(message));
    let ram = args.ram_bytes.is_some() || args.ram_percent.is_some();
    if ram != args.is_two_tier() {
        return bad(
            "the two-tier model needs both a RAM size (--ram-bytes or --ram-percent) and a disk \
             size (--disk-bytes or --disk-percent)"
                .to_owned(),
        );
    }
    if let Some(&percent) = args
        .cache_percent
        .iter()
        .find(|p| !(**p > 0.0 && **p <= 100.0))
    {
        return bad(format!("--cache-percent {percent} must be in (0, 100]"));
    }
    if !(0.0..1.0).contains(&args.probation_share) {
        return bad(format!(
            "--probation-share {} must be in [0, 1)",
            args.probation_share
        ));
    }
    if args.cache_bytes.contains(&0) {
        return bad("--cache-bytes must be at least 1".to_owned());
    }
    // The capacity chosen later is at least 1, so this checks everything before reading the trace.
    DoorkeeperConfig {
        capacity: args.capacity.unwrap_or(1),
        target_fpr: args.target_fpr,
        rotate_at_fpr: args.rotate_at_fpr,
        max_age: args.max_age.unwrap_or(NO_MAX_AGE),
    }
    .validate()
    .map_err(|e| SimError::Argument(e.to_string()))
}

/// The doorkeeper for one cache size: `--capacity`, or twice as many keys as the cache holds
/// objects.
fn doorkeeper_summary(
    args: &SimulateArgs,
    cache_bytes: u64,
    stats: Option<&TraceStats>,
) -> DoorkeeperSummary {
    let (capacity, capacity_source) = match (args.capacity, stats) {
        (Some(capacity), _) => (capacity, "--capacity".to_owned()),
        (None, Some(stats)) => (
            (DEFAULT_CAPACITY_PER_OBJECT * cache_bytes / stats.mean_object_bytes())
                .max(MIN_DEFAULT_CAPACITY),
            format!(
                "default: {DEFAULT_CAPACITY_PER_OBJECT} x cache bytes / mean object size {} B, \
                 at least {MIN_DEFAULT_CAPACITY}",
                stats.mean_object_bytes()
            ),
        ),
        (None, None) => unreachable!("a prepass runs whenever --capacity is absent"),
    };
    DoorkeeperSummary {
        capacity,
        capacity_source,
        target_fpr: args.target_fpr,
        rotate_at_fpr: args.rotate_at_fpr,
        max_age_seconds: args.max_age.map(|age| age.as_secs_f64()),
    }
}

fn trace_summary(args: &SimulateArgs, info: &TraceInfo, stats: TraceStats) -> TraceSummary {
    TraceSummary {
        path: args.trace.display().to_string(),
        format: info.format,
        compression: info.compression,
        skipped_lines: info.skipped_lines,
        ignored_lines: info.ignored_lines,
        synthesized_sizes: info.sizes_synthesized.then_some(SYNTHESIZED_SIZE_RULE),
        stats,
        one_hit_share: ratio(stats.one_hit_objects, stats.distinct_objects),
    }
}

/// A progress bar on stderr if it is a terminal, else a hidden one.
fn progress_bar(total: Option<u64>, message: &'static str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = match total {
        Some(total) => ProgressBar::new(total).with_style(
            ProgressStyle::with_template(
                "{msg} [{bar:40}] {human_pos}/{human_len} requests, {per_sec}, eta {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        ),
        None => ProgressBar::new_spinner().with_style(
            ProgressStyle::with_template("{spinner} {msg}: {human_pos} requests, {per_sec}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        ),
    };
    bar.with_message(message)
}
