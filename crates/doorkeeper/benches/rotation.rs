//! `Doorkeeper::observe` latency while the doorkeeper rotates at 10^7 capacity.
//!
//! Threads observe distinct 48-byte URLs, so every observe is a first sighting and a generation
//! fills in about `capacity` observes; each observe is timed on its own, and the run stops after
//! `ROTATIONS` rotations. Prints the latency distribution of all observes and of the observes
//! during which the generation moved (the rotating thread's and its racers'). Run with
//! `cargo bench -p bloomgate-doorkeeper --bench rotation`; `CAPACITY`, `THREADS` and `ROTATIONS`
//! override the defaults. No run is recorded yet: paste one, with the machine, under "Measured" in
//! this crate's README.md.

use std::sync::Arc;
use std::time::Instant;

use doorkeeper::{Doorkeeper, DoorkeeperConfig};
use hdrhistogram::Histogram;

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `https://img.example.com/p/<16 hex digits>/a.jpg`, written in place.
fn write_key(key: &mut [u8; 48], n: u64) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for (i, byte) in key[26..42].iter_mut().enumerate() {
        *byte = HEX[((n >> (60 - 4 * i)) & 0xf) as usize];
    }
}

struct Latencies {
    all: Histogram<u64>,
    rotating: Histogram<u64>,
}

fn observe_until(door: &Doorkeeper, thread: u64, last_generation: u64) -> Latencies {
    let new = || Histogram::<u64>::new_with_bounds(1, 10_000_000_000, 3).expect("valid bounds");
    let mut latencies = Latencies {
        all: new(),
        rotating: new(),
    };
    let mut key = *b"https://img.example.com/p/0000000000000000/a.jpg";
    let mut i = thread << 48;
    loop {
        write_key(&mut key, i);
        i += 1;
        let before = door.generation();
        let start = Instant::now();
        std::hint::black_box(door.observe(&key));
        let nanos = start.elapsed().as_nanos() as u64;
        let after = door.generation();
        latencies.all.saturating_record(nanos);
        if after != before {
            latencies.rotating.saturating_record(nanos);
        }
        if after >= last_generation {
            return latencies;
        }
    }
}

fn line(name: &str, h: &Histogram<u64>) {
    let us = |n: u64| n as f64 / 1000.0;
    println!(
        "{name:>9}: {:>10} observes  p50 {:>8.3} us  p99 {:>8.3} us  p99.9 {:>8.3} us  p99.99 {:>8.3} us  max {:>9.3} us",
        h.len(),
        us(h.value_at_quantile(0.5)),
        us(h.value_at_quantile(0.99)),
        us(h.value_at_quantile(0.999)),
        us(h.value_at_quantile(0.9999)),
        us(h.max()),
    );
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is read from the command line.
    let capacity = setting("CAPACITY", 10_000_000);
    let threads = setting("THREADS", 2);
    let rotations = setting("ROTATIONS", 4);
    let door = Arc::new(
        Doorkeeper::builder(DoorkeeperConfig::with_capacity(capacity))
            .build()
            .unwrap(),
    );
    println!(
        "capacity {capacity}, {threads} threads, {rotations} rotations, filter {:.1} MB",
        door.stats().current.memory_bytes as f64 / 1e6
    );
    let started = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let door = Arc::clone(&door);
            std::thread::spawn(move || observe_until(&door, t, rotations))
        })
        .collect();
    let mut all = Histogram::<u64>::new_with_bounds(1, 10_000_000_000, 3).expect("valid bounds");
    let mut rotating = all.clone();
    for worker in workers {
        let latencies = worker.join().expect("worker panicked");
        all.add(&latencies.all).expect("same bounds");
        rotating.add(&latencies.rotating).expect("same bounds");
    }
    println!(
        "{:.1} s, generation {}",
        started.elapsed().as_secs_f64(),
        door.generation()
    );
    line("all", &all);
    line("rotating", &rotating);
}
