//! `Doorkeeper::observe` time per call, with both generations as large as the capacity makes them.
//!
//! A doorkeeper of `CAPACITY` keys (default 10^7, 12 MiB per filter) is filled until it has
//! rotated once, so `previous` is full and `current` is part full, and both are far larger than
//! the caches. Then one thread observes, in rounds of `BATCH` calls each:
//!
//! - `first`: keys never seen, so `current` is written and `previous` is read too: two filters,
//!   two cache lines, on every call;
//! - `repeat`: keys from the last `first` round, found in `current` at once.
//!
//! Prints the median over `ROUNDS` rounds of nanoseconds per call. Run with
//! `cargo bench -p bloomgate-doorkeeper --bench observe`; `CAPACITY`, `ROUNDS` and `BATCH` override
//! the defaults. Results are in this crate's README.md, under "Measured".

use std::hint::black_box;
use std::time::Instant;

use doorkeeper::{Doorkeeper, DoorkeeperConfig};

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `https://img.example.com/p/<16 hex digits>/a.jpg`.
fn key(n: u64) -> [u8; 48] {
    let mut key = *b"https://img.example.com/p/0000000000000000/a.jpg";
    const HEX: &[u8; 16] = b"0123456789abcdef";
    // Scatter consecutive numbers, as URLs of distinct objects are.
    let n = n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for (i, byte) in key[26..42].iter_mut().enumerate() {
        *byte = HEX[((n >> (60 - 4 * i)) & 0xf) as usize];
    }
    key
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    // `cargo test --benches` runs this once as a smoke test: keep that small.
    let quick = !std::env::args().any(|arg| arg == "--bench");
    let capacity = setting("CAPACITY", if quick { 10_000 } else { 10_000_000 });
    let rounds = setting("ROUNDS", if quick { 3 } else { 31 });
    let batch = setting("BATCH", if quick { 1_000 } else { 200_000 });
    let door = Doorkeeper::builder(DoorkeeperConfig::with_capacity(capacity))
        .build()
        .unwrap();
    let mut next = 0u64;
    while door.generation() < 1 {
        door.observe(&key(next));
        next += 1;
    }
    let mut first = Vec::new();
    let mut repeat = Vec::new();
    for _ in 0..rounds {
        let from = next;
        let start = Instant::now();
        for n in from..from + batch {
            black_box(door.observe(&key(n)));
        }
        first.push(start.elapsed().as_nanos() as f64 / batch as f64);
        next += batch;
        let start = Instant::now();
        for n in from..from + batch {
            black_box(door.observe(&key(n)));
        }
        repeat.push(start.elapsed().as_nanos() as f64 / batch as f64);
    }
    println!(
        "observe, capacity {capacity}, generation {}: first sighting {:.1} ns, repeat {:.1} ns \
         (median of {rounds} rounds of {batch})",
        door.generation(),
        median(first),
        median(repeat),
    );
}
