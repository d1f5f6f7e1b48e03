//! What each stage of `bloomgate simulate` costs per request, measured alone on one trace.
//!
//! Stages, each a pass over the whole trace in this thread: decompression only; reading (plus
//! line splitting and parsing); plus fingerprinting the keys; plus interning them (all the reading
//! thread does). Then, over the interned requests held in memory, each policy alone, and all four
//! in one thread. Last, `simulate` end to end as the command runs it. Each figure is the median of
//! `SIM_ROUNDS` rounds (default 3) of this thread's (or, end to end, the process's) CPU time per
//! request, which other work on a shared machine disturbs less than wall time; end to end also
//! reports wall time.
//!
//! ```sh
//! SIM_TRACE=synth-1e7.csv.zst SIM_CACHE_BYTES=1GiB SIM_CAPACITY=200000 cargo bench --bench sim
//! ```
//!
//! Without `SIM_TRACE` it writes a synthetic zstd trace of `SIM_REQUESTS` (default 10^6)
//! requests, a fifth as many objects, under the target directory. Results are in
//! `docs/benchmarks.md`, "Simulator throughput".

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bloomgate::config::parse_size;
use bloomgate::sim::{
    CacheSetup, Interner, MainEviction, PolicyKind, ProbationSetup, SimRequest, SimulateArgs,
    Simulator, Weigh, key_fingerprint, simulate,
};
use bloomgate::trace::{Compression, ReadOptions, SyntheticTrace, TraceReader, TraceWriter};
use rustix::time::{ClockId, clock_gettime};

/// Requests per batch, as the simulator's reading thread hands them on.
const BATCH: usize = 16 * 1024;

fn main() {
    let trace = std::env::var_os("SIM_TRACE").map_or_else(synthetic_trace, PathBuf::from);
    let cache_bytes = std::env::var("SIM_CACHE_BYTES").map_or(1 << 30, |s| {
        parse_size(&s).unwrap_or_else(|e| panic!("SIM_CACHE_BYTES: {e}"))
    });
    let capacity: u64 = env_number("SIM_CAPACITY", 200_000);
    let rounds: usize = env_number("SIM_ROUNDS", 3);
    println!(
        "trace {}, cache {cache_bytes} B, doorkeeper capacity {capacity}, median of {rounds} rounds",
        trace.display()
    );
    let (requests, interned) = read_interned(&trace, true);
    let per_request = |cpu: Duration| cpu.as_nanos() as f64 / requests as f64;
    let stage = |name: &str, run: &mut dyn FnMut()| {
        let mut times: Vec<f64> = (0..rounds)
            .map(|_| per_request(cpu_time(ClockId::ThreadCPUTime, &mut *run)))
            .collect();
        println!("{name:<40} {:>8.1} ns/request", median(&mut times));
    };
    stage("decompress", &mut || decompress(&trace));
    stage("read and parse", &mut || {
        read(&trace, |_, _| {});
    });
    stage("read, parse, fingerprint", &mut || {
        read(&trace, |key, _| {
            std::hint::black_box(key_fingerprint(key));
        });
    });
    stage("read, parse, fingerprint, intern", &mut || {
        read_interned(&trace, false);
    });
    let setup = CacheSetup {
        cache_bytes,
        doorkeeper: bloomgate::admission::DoorkeeperConfig {
            capacity,
            target_fpr: 0.01,
            rotate_at_fpr: 0.02,
            max_age: Duration::from_secs(100 * 365 * 24 * 3600),
        },
        probation: ProbationSetup::default(),
        seed: 1,
        weigh: Weigh::Body,
    };
    let modes: Vec<PolicyKind> = PolicyKind::ALL
        .into_iter()
        .filter(|kind| !kind.is_reference())
        .collect();
    let kinds: Vec<(String, Vec<PolicyKind>)> = PolicyKind::ALL
        .iter()
        .map(|&kind| (kind.as_str().to_owned(), vec![kind]))
        .chain([("bloomgate's four in one thread".to_owned(), modes.clone())])
        .collect();
    for (name, kinds) in &kinds {
        stage(name, &mut || {
            let mut simulator = Simulator::with_policies(std::slice::from_ref(&setup), kinds);
            for batch in interned.chunks(BATCH) {
                simulator.request_all(batch);
            }
            std::hint::black_box(simulator.finish());
        });
    }
    let args = SimulateArgs {
        trace: trace.clone(),
        cache_bytes: vec![cache_bytes],
        cache_percent: Vec::new(),
        capacity: Some(capacity),
        target_fpr: 0.01,
        rotate_at_fpr: 0.02,
        max_age: None,
        policies: modes,
        probation_share: 0.1,
        probation_main: MainEviction::Fifo,
        ram_bytes: None,
        ram_percent: None,
        disk_bytes: None,
        disk_percent: None,
        jobs: None,
        seed: 1,
        weigh: Weigh::Body,
        json: false,
        plot: None,
        skip_bad_lines: false,
    };
    let mut cpu = Vec::new();
    let mut wall = Vec::new();
    for _ in 0..rounds {
        let started = Instant::now();
        let used = cpu_time(ClockId::ProcessCPUTime, || {
            simulate(&args).unwrap_or_else(|e| panic!("{e}"));
        });
        wall.push(requests as f64 / started.elapsed().as_secs_f64() / 1e6);
        cpu.push(per_request(used));
    }
    println!(
        "{:<40} {:>8.1} ns/request of CPU, {:.2} M requests/s wall",
        "simulate, end to end",
        median(&mut cpu),
        median(&mut wall)
    );
}

fn env_number<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).map_or(default, |s| {
        s.parse()
            .unwrap_or_else(|_| panic!("{name} = {s:?} is not a number"))
    })
}

/// A synthetic zstd trace under the target directory, written once.
fn synthetic_trace() -> PathBuf {
    let requests: u64 = env_number("SIM_REQUESTS", 1_000_000);
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("synth-{requests}.csv.zst"));
    if !path.exists() {
        let trace = SyntheticTrace {
            requests,
            objects: requests / 5,
            ..SyntheticTrace::default()
        };
        let mut writer = TraceWriter::create(&path, Compression::Zstd).expect("create the trace");
        for request in trace.iter() {
            writer.write(&request).expect("write the trace");
        }
        writer.finish().expect("finish the trace");
    }
    path
}

/// CPU time of `clock` that `run` takes.
fn cpu_time(clock: ClockId, run: impl FnOnce()) -> Duration {
    let at = |t: rustix::time::Timespec| Duration::new(t.tv_sec as u64, t.tv_nsec as u32);
    let before = at(clock_gettime(clock));
    run();
    at(clock_gettime(clock)) - before
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn decompress(trace: &Path) {
    let file = std::fs::File::open(trace).expect("open the trace");
    let mut decoder = zstd::stream::read::Decoder::new(file).expect("a zstd trace");
    let mut buffer = vec![0; 256 * 1024];
    let mut bytes = 0;
    loop {
        match decoder.read(&mut buffer).expect("decompress") {
            0 => break,
            read => bytes += read,
        }
    }
    std::hint::black_box(bytes);
}

/// Reads every request and hands its key and size to `each`; returns how many there were.
fn read(trace: &Path, mut each: impl FnMut(&str, u64)) -> u64 {
    let mut reader = TraceReader::open(trace, ReadOptions::default()).expect("open the trace");
    let mut requests = 0;
    while let Some(request) = reader.next_ref() {
        let request = request.expect("a good line");
        each(request.key, request.size);
        requests += 1;
    }
    requests
}

/// Every request, fingerprinted and interned as the simulator's reading thread does; the requests
/// themselves only if `keep`.
fn read_interned(trace: &Path, keep: bool) -> (u64, Vec<SimRequest>) {
    let mut reader = TraceReader::open(trace, ReadOptions::default()).expect("open the trace");
    let mut interner = Interner::default();
    let mut all = Vec::new();
    let mut requests = 0;
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        let request = reader.next_ref().map(|r| r.expect("a good line"));
        if let Some(request) = &request {
            batch.push(SimRequest {
                id: 0,
                key_bytes: u32::try_from(request.key.len()).unwrap_or(u32::MAX),
                fingerprint: key_fingerprint(request.key),
                size: request.size,
                time: request.time,
            });
        }
        if batch.len() == BATCH || (request.is_none() && !batch.is_empty()) {
            interner.intern_all(&mut batch);
            requests += batch.len() as u64;
            if keep {
                all.extend_from_slice(&batch);
            }
            batch.clear();
        }
        if request.is_none() {
            break;
        }
    }
    (requests, all)
}
