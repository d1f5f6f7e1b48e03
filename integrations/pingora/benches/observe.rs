//! `observe` cost and memory per key: `DoorkeeperPolicy` against the `Mutex<HashMap>` policy
//! Pingora ships for its own tests (`MinUsesAdmissionPolicy`, `cfg(test)` upstream, so written
//! out here the same way), at 10^5 and 10^7 distinct keys, on 1 and 2 threads, in one run.
//!
//! Each policy is first filled with `n` distinct keys; then `observe` runs over a fixed sample of
//! 2^16 of those keys drawn at random (each is seen before: the `Ready` path; the sample keeps the
//! keys' own memory out of the measurement, while the structures are touched at random over all
//! `n`). Memory per key is measured with a counting allocator around the fill (the doorkeeper's
//! filters are allocated up front, both generations, so its figure is their size over `n`).
//!
//! `cargo bench -p bloomgate-pingora --bench observe` (BLOOMGATE_BENCH_KEYS=100000 to skip 10^7).

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use bloomgate_pingora::DoorkeeperPolicy;
use criterion::{BenchmarkId, Criterion};
use doorkeeper::DoorkeeperConfig;
use pingora_cache::CacheKey;
use pingora_cache::admission::{AdmissionPolicy, Decision};
use pingora_cache::key::CompactCacheKey;

/// Bytes currently allocated through the global allocator.
static ALLOCATED: AtomicIsize = AtomicIsize::new(0);

struct Counting;

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        ALLOCATED.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATED.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Pingora's test policy (`pingora_cache::admission::MinUsesAdmissionPolicy`), as written upstream.
struct MinUsesPolicy {
    min_uses: NonZeroU32,
    observations: Mutex<HashMap<CompactCacheKey, u32>>,
}

impl AdmissionPolicy for MinUsesPolicy {
    fn observe(&self, key: &CacheKey) -> Decision {
        let mut observations = self.observations.lock().unwrap();
        let observed = observations
            .entry(key.to_compact())
            .and_modify(|observed| *observed = observed.saturating_add(1).min(self.min_uses.get()))
            .or_insert(1);
        if *observed >= self.min_uses.get() {
            Decision::Ready {
                observed: *observed,
            }
        } else {
            Decision::Defer {
                observed: *observed,
            }
        }
    }
}

fn key(i: u64) -> CacheKey {
    CacheKey::new(format!("https://cdn.example.com/objects/{i:012}.jpg"), "")
}

/// A fixed random sample of keys among the first `n`.
fn sample(n: u64) -> Vec<CacheKey> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    (0..1 << 16)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            key(state % n)
        })
        .collect()
}

/// Fills `policy` with `n` keys; returns the bytes it allocated per key while doing so.
fn fill(policy: &dyn AdmissionPolicy, n: u64, allocated_before: isize) -> f64 {
    for i in 0..n {
        black_box(policy.observe(&key(i)));
    }
    (ALLOCATED.load(Ordering::Relaxed) - allocated_before) as f64 / n as f64
}

/// Runs `iters` observes over `keys`, split across `threads`; the wall time.
fn run(policy: &dyn AdmissionPolicy, keys: &[CacheKey], threads: usize, iters: u64) -> Duration {
    let per_thread = iters / threads as u64;
    let started = Instant::now();
    std::thread::scope(|scope| {
        for thread in 0..threads {
            scope.spawn(move || {
                let offset = thread * keys.len() / threads;
                for i in 0..per_thread as usize {
                    black_box(policy.observe(&keys[(offset + i) % keys.len()]));
                }
            });
        }
    });
    started.elapsed()
}

fn main() {
    let sizes: Vec<u64> = match std::env::var("BLOOMGATE_BENCH_KEYS") {
        Ok(list) => list
            .split(',')
            .filter_map(|n| n.trim().parse().ok())
            .collect(),
        Err(_) => vec![100_000, 10_000_000],
    };
    let mut criterion = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    let mut memory = Vec::new();
    for &n in &sizes {
        let keys = sample(n);
        let before = ALLOCATED.load(Ordering::Relaxed);
        let doorkeeper = DoorkeeperPolicy::new(DoorkeeperConfig {
            capacity: n,
            target_fpr: 0.01,
            rotate_at_fpr: 0.02,
            max_age: Duration::from_secs(3600),
        });
        let filter_bytes = (ALLOCATED.load(Ordering::Relaxed) - before) as f64 / n as f64;
        fill(&doorkeeper, n, before);
        let before = ALLOCATED.load(Ordering::Relaxed);
        let min_uses = MinUsesPolicy {
            min_uses: NonZeroU32::new(2).expect("non-zero"),
            observations: Mutex::new(HashMap::new()),
        };
        let map_bytes = fill(&min_uses, n, before);
        memory.push((n, filter_bytes, map_bytes));

        let mut group = criterion.benchmark_group(format!("observe/{n}_keys"));
        for threads in [1, 2] {
            let policies: [(&str, &dyn AdmissionPolicy); 2] =
                [("doorkeeper", &doorkeeper), ("mutex_hashmap", &min_uses)];
            for (name, policy) in policies {
                group.bench_with_input(BenchmarkId::new(name, threads), &threads, |b, &t| {
                    b.iter_custom(|iters| run(policy, &keys, t, iters));
                });
            }
        }
        group.finish();
    }
    println!("\nmemory per key (bytes allocated while filling, over the keys):");
    println!(
        "{:>12} {:>12} {:>14} {:>8}",
        "keys", "doorkeeper", "mutex_hashmap", "ratio"
    );
    for (n, filter, map) in memory {
        println!("{n:>12} {filter:>12.2} {map:>14.2} {:>7.0}x", map / filter);
    }
    criterion.final_summary();
}
