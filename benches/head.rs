//! What a hit spends making its response's header map from a stored entry's block
//! (`cache::Head::to_map`), and dropping it once sent.
//!
//! The fields are those `bloomgate origin` sends (`load/bench-entries.sh`), with the `Date` hyper
//! adds. Each figure is the median of `HEAD_ROUNDS` rounds (default 9) of this thread's CPU time
//! per map over `HEAD_MAPS` maps (default 10^6), which other work on a shared machine disturbs
//! less than wall time.
//!
//! ```sh
//! cargo bench --bench head
//! ```
//!
//! Results are in `docs/benchmarks.md`, "What an entry costs in memory".

use std::time::Duration;

use bloomgate::cache::Head;
use http::{HeaderMap, HeaderName, HeaderValue};
use rustix::time::{ClockId, clock_gettime};

/// The binary's allocator: a hit's allocations cost what they cost there.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    let maps: u32 = env_number("HEAD_MAPS", 1_000_000);
    let rounds: usize = env_number("HEAD_ROUNDS", 9);
    let origin = [
        ("cache-control", "public, max-age=3600"),
        ("etag", "\"e123456-1024\""),
        ("last-modified", "Thu, 01 Jan 2015 00:00:00 GMT"),
        ("content-length", "1024"),
        ("x-origin-count", "1"),
        ("date", "Thu, 26 Nov 2026 09:47:05 GMT"),
    ];
    // The same dates in RFC 850's form, which the block keeps as text.
    let mut as_text = origin;
    as_text[2].1 = "Thursday, 01-Jan-15 00:00:00 GMT";
    as_text[5].1 = "Thursday, 26-Nov-26 09:47:05 GMT";
    for (case, fields) in [("IMF-fixdates", origin), ("dates as text", as_text)] {
        let fields: HeaderMap = fields
            .into_iter()
            .map(|(name, value)| {
                (
                    HeaderName::from_static(name),
                    HeaderValue::from_static(value),
                )
            })
            .collect();
        let head = Head::of(&fields);
        assert_eq!(head.to_map(), fields);
        let mut times: Vec<f64> = (0..rounds)
            .map(|_| {
                let cpu = thread_cpu_time(|| {
                    for _ in 0..maps {
                        drop(std::hint::black_box(head.to_map()));
                    }
                });
                cpu.as_nanos() as f64 / f64::from(maps)
            })
            .collect();
        times.sort_by(f64::total_cmp);
        println!(
            "to_map, {} fields, {case}: {:.1} ns a map (median of {rounds} rounds of {maps})",
            fields.len(),
            times[rounds / 2]
        );
    }
}

fn env_number<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).map_or(default, |s| {
        s.parse()
            .unwrap_or_else(|_| panic!("{name} = {s:?} is not a number"))
    })
}

fn thread_cpu_time(run: impl FnOnce()) -> Duration {
    let at = |t: rustix::time::Timespec| Duration::new(t.tv_sec as u64, t.tv_nsec as u32);
    let before = at(clock_gettime(ClockId::ThreadCPUTime));
    run();
    at(clock_gettime(ClockId::ThreadCPUTime)) - before
}
