//! bloomgate's blocked filter against `fastbloom::AtomicBloomFilter` with the same bits.
//!
//! Keys are 48-byte URLs; 10^6 and 10^7 keys at 10 bits per key; insert, lookup of present keys
//! and lookup of absent keys, on 1 and 2 threads. Each criterion iteration is a chunk of
//! operations (split across the threads), so throughput is reported per operation.
//!
//! Criterion runs one filter's case for seconds, then the other's, so on a shared machine a change
//! of load between the two moves their ratio. After criterion, a paired pass makes the filters take
//! turns chunk by chunk and prints, per case, the median over chunks of bloomgate's time over
//! fastbloom's for the same chunk: the figure to quote. Run with
//! `cargo bench -p bloomgate-doorkeeper --bench filter`; results and the machine are in this
//! crate's README.md, under "Measured".

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, Throughput, criterion_group};
use doorkeeper::bloom::BloomFilter;
use fastbloom::AtomicBloomFilter;

const KEY_LEN: usize = 48;
const BITS_PER_KEY: u64 = 10;
const CHUNK: usize = 1 << 18;
const ABSENT_KEYS: usize = 1_000_000;
const SIZES: [usize; 2] = [1_000_000, 10_000_000];
const THREADS: [usize; 2] = [1, 2];

type Key = [u8; KEY_LEN];

/// `https://img.example.com/p/<16 hex digits>/a.jpg`; `salt` separates present from absent.
fn keys(salt: u64, n: usize) -> Vec<Key> {
    (0..n as u64)
        .map(|i| {
            let mut key = [0; KEY_LEN];
            let url = format!("https://img.example.com/p/{:016x}/a.jpg", mix(salt ^ i));
            key.copy_from_slice(url.as_bytes());
            key
        })
        .collect()
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

trait Filter: Sync + Sized {
    const NAME: &'static str;
    fn with_bits(num_bits: u64, expected_keys: usize) -> Self;
    fn insert(&self, key: &[u8]) -> bool;
    fn contains(&self, key: &[u8]) -> bool;
    fn num_bits(&self) -> u64;
    fn num_hashes(&self) -> u32;
}

impl Filter for BloomFilter {
    const NAME: &'static str = "bloomgate";
    fn with_bits(num_bits: u64, expected_keys: usize) -> Self {
        BloomFilter::builder(expected_keys as u64, 0.01)
            .num_bits(num_bits)
            .seed(1)
            .build()
    }
    fn insert(&self, key: &[u8]) -> bool {
        BloomFilter::insert(self, key)
    }
    fn contains(&self, key: &[u8]) -> bool {
        BloomFilter::contains(self, key)
    }
    fn num_bits(&self) -> u64 {
        BloomFilter::num_bits(self)
    }
    fn num_hashes(&self) -> u32 {
        BloomFilter::num_hashes(self)
    }
}

impl Filter for AtomicBloomFilter {
    const NAME: &'static str = "fastbloom";
    fn with_bits(num_bits: u64, expected_keys: usize) -> Self {
        AtomicBloomFilter::with_num_bits(num_bits as usize)
            .seed(&1)
            .expected_items(expected_keys)
    }
    fn insert(&self, key: &[u8]) -> bool {
        AtomicBloomFilter::insert(self, key)
    }
    fn contains(&self, key: &[u8]) -> bool {
        AtomicBloomFilter::contains(self, key)
    }
    fn num_bits(&self) -> u64 {
        AtomicBloomFilter::num_bits(self) as u64
    }
    fn num_hashes(&self) -> u32 {
        AtomicBloomFilter::num_hashes(self)
    }
}

#[derive(Clone, Copy)]
enum Op {
    Insert,
    Lookup,
}

/// Runs `op` over `keys` split evenly across `threads`; returns the wall time.
fn run<F: Filter>(filter: &F, keys: &[Key], threads: usize, op: Op) -> Duration {
    let work = |part: &[Key]| {
        let mut hits = 0usize;
        for key in part {
            let hit = match op {
                Op::Insert => filter.insert(key),
                Op::Lookup => filter.contains(key),
            };
            hits += usize::from(hit);
        }
        black_box(hits);
    };
    let start = Instant::now();
    if threads == 1 {
        work(keys);
    } else {
        std::thread::scope(|scope| {
            for part in keys.chunks(keys.len().div_ceil(threads)) {
                scope.spawn(move || work(part));
            }
        });
    }
    start.elapsed()
}

/// Fills a filter with `present` and prints its false-positive rate over `absent`.
fn filled<F: Filter>(n: usize, num_bits: u64, present: &[Key], absent: &[Key]) -> F {
    let filter = F::with_bits(num_bits, n);
    run(&filter, present, 2, Op::Insert);
    let false_positives = absent.iter().filter(|k| filter.contains(&k[..])).count();
    eprintln!(
        "{} n={n}: {} bits ({:.2} per key), k={}, measured false-positive rate {:.5} over {} absent keys",
        F::NAME,
        filter.num_bits(),
        filter.num_bits() as f64 / n as f64,
        filter.num_hashes(),
        false_positives as f64 / absent.len() as f64,
        absent.len()
    );
    filter
}

/// Inserts fill a fresh filter chunk by chunk, from empty to n keys, then start over.
fn bench_insert<F: Filter>(
    c: &mut Criterion,
    n: usize,
    num_bits: u64,
    threads: usize,
    present: &[Key],
) {
    let mut filling = F::with_bits(num_bits, n);
    let mut cursor = 0;
    c.benchmark_group(format!("n={n}/insert/{threads}t"))
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sampling_mode(SamplingMode::Flat)
        .throughput(Throughput::Elements(CHUNK as u64))
        .bench_function(F::NAME, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    if cursor + CHUNK > present.len() {
                        filling = F::with_bits(num_bits, n);
                        cursor = 0;
                    }
                    total += run(
                        &filling,
                        &present[cursor..cursor + CHUNK],
                        threads,
                        Op::Insert,
                    );
                    cursor += CHUNK;
                }
                total
            })
        });
}

fn bench_lookup<F: Filter>(
    c: &mut Criterion,
    name: &str,
    filter: &F,
    threads: usize,
    keys: &[Key],
) {
    let mut cursor = 0;
    c.benchmark_group(format!("{name}/{threads}t"))
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sampling_mode(SamplingMode::Flat)
        .throughput(Throughput::Elements(CHUNK as u64))
        .bench_function(F::NAME, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    if cursor + CHUNK > keys.len() {
                        cursor = 0;
                    }
                    total += run(filter, &keys[cursor..cursor + CHUNK], threads, Op::Lookup);
                    cursor += CHUNK;
                }
                total
            })
        });
}

/// The two filters run back to back for each case, so that both see the same machine load.
fn filters(c: &mut Criterion) {
    let absent = keys(0xab5e_0000_0000_0000, ABSENT_KEYS);
    for n in SIZES {
        let present = keys(0, n);
        let num_bits = BloomFilter::with_bits(BITS_PER_KEY * n as u64, n).num_bits();
        let ours: BloomFilter = filled(n, num_bits, &present, &absent);
        let theirs: AtomicBloomFilter = filled(n, num_bits, &present, &absent);
        for threads in THREADS {
            bench_insert::<BloomFilter>(c, n, num_bits, threads, &present);
            bench_insert::<AtomicBloomFilter>(c, n, num_bits, threads, &present);
            for (op, keys) in [
                ("lookup_present", &present[..]),
                ("lookup_absent", &absent[..]),
            ] {
                let name = format!("n={n}/{op}");
                bench_lookup(c, &name, &ours, threads, keys);
                bench_lookup(c, &name, &theirs, threads, keys);
            }
        }
    }
}

/// Keys per turn in the paired pass: long enough to time (a millisecond or more), short enough
/// for many turns per case.
const PAIRED_CHUNK: usize = 1 << 16;

/// The two filters take turns on the same chunks, alternating which goes first.
fn paired_ratio<F: Filter, G: Filter>(
    ours: &F,
    theirs: &G,
    keys: &[Key],
    threads: usize,
    op: Op,
    ratios: &mut Vec<f64>,
    nanos: &mut [Vec<f64>; 2],
) {
    for (i, chunk) in keys.chunks(PAIRED_CHUNK).enumerate() {
        let (a, b) = if i % 2 == 0 {
            let a = run(ours, chunk, threads, op);
            (a, run(theirs, chunk, threads, op))
        } else {
            let b = run(theirs, chunk, threads, op);
            (run(ours, chunk, threads, op), b)
        };
        ratios.push(a.as_secs_f64() / b.as_secs_f64());
        nanos[0].push(a.as_nanos() as f64 / chunk.len() as f64);
        nanos[1].push(b.as_nanos() as f64 / chunk.len() as f64);
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn print_paired(name: &str, ratios: Vec<f64>, [ours, theirs]: [Vec<f64>; 2]) {
    let turns = ratios.len();
    println!(
        "paired {name:<28} bloomgate {:7.1} ns  fastbloom {:7.1} ns  ratio {:.3} (median of {} turns)",
        median(ours),
        median(theirs),
        median(ratios),
        turns,
    );
}

fn paired() {
    let absent = keys(0xab5e_0000_0000_0000, ABSENT_KEYS);
    for n in SIZES {
        let present = keys(0, n);
        let num_bits = BloomFilter::with_bits(BITS_PER_KEY * n as u64, n).num_bits();
        // At least ~45 turns per case: three fills at 10^6 keys, one at 10^7.
        let fills = (3_000_000 / n).max(1);
        for threads in THREADS {
            let (mut ratios, mut nanos) = (Vec::new(), [Vec::new(), Vec::new()]);
            for _ in 0..fills {
                let ours = BloomFilter::with_bits(num_bits, n);
                let theirs = AtomicBloomFilter::with_bits(num_bits, n);
                paired_ratio(
                    &ours,
                    &theirs,
                    &present,
                    threads,
                    Op::Insert,
                    &mut ratios,
                    &mut nanos,
                );
            }
            print_paired(&format!("n={n}/insert/{threads}t"), ratios, nanos);
        }
        let ours = BloomFilter::with_bits(num_bits, n);
        let theirs = AtomicBloomFilter::with_bits(num_bits, n);
        run(&ours, &present, 2, Op::Insert);
        run(&theirs, &present, 2, Op::Insert);
        for threads in THREADS {
            for (op, keys) in [
                ("lookup_present", &present[..ABSENT_KEYS.min(n)]),
                ("lookup_absent", &absent[..]),
            ] {
                let (mut ratios, mut nanos) = (Vec::new(), [Vec::new(), Vec::new()]);
                for _ in 0..3 {
                    paired_ratio(
                        &ours,
                        &theirs,
                        keys,
                        threads,
                        Op::Lookup,
                        &mut ratios,
                        &mut nanos,
                    );
                }
                print_paired(&format!("n={n}/{op}/{threads}t"), ratios, nanos);
            }
        }
    }
}

criterion_group!(benches, filters);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    // `cargo bench` passes `--bench`; `cargo test --benches` runs each case once and skips this.
    if std::env::args().any(|arg| arg == "--bench") {
        paired();
    }
}
