//! The simulator on tiny hand-made traces whose answer per policy is known.

use std::time::Duration;

use bloomgate::admission::DoorkeeperConfig;
use bloomgate::sim::{
    CacheSetup, MainEviction, PolicyKind, PolicyReport, ProbationSetup, Simulator, Weigh,
};
use bloomgate::trace::SyntheticTrace;

fn doorkeeper(capacity: u64) -> DoorkeeperConfig {
    DoorkeeperConfig::with_capacity(capacity)
}

/// Runs `keys` (each of `size` bytes, one per trace second) and returns the reports by policy.
fn simulate(keys: &str, size: u64, cache_bytes: u64, capacity: u64) -> [PolicyReport; 4] {
    simulate_with(keys, size, cache_bytes, capacity, ProbationSetup::default())
}

fn simulate_with(
    keys: &str,
    size: u64,
    cache_bytes: u64,
    capacity: u64,
    probation: ProbationSetup,
) -> [PolicyReport; 4] {
    let mut simulator = Simulator::new(&[CacheSetup {
        cache_bytes,
        doorkeeper: doorkeeper(capacity),
        probation,
        seed: 1,
        weigh: Weigh::Body,
    }]);
    for (time, key) in keys.split_whitespace().enumerate() {
        simulator.request_key(key, size, time as f64);
    }
    let mut reports = simulator.finish();
    let reports = reports.remove(0);
    let find = |kind| reports.iter().find(|r| r.policy == kind).unwrap().clone();
    [
        find(PolicyKind::AdmitAll),
        find(PolicyKind::SecondHitExact),
        find(PolicyKind::Bloom),
        find(PolicyKind::Probation),
    ]
}

#[test]
fn admit_all_stores_every_miss_and_second_hit_stores_on_the_second_request() {
    let [all, exact, bloom, _] = simulate("A B A A C A", 10, 1000, 1000);
    // admit-all: A B stored, A A hit, C stored, A hit.
    assert_eq!((all.hits, all.writes, all.first_hits), (3, 3, 0));
    // second hit: A B C first seen, the second A stored, then A A hit.
    assert_eq!((exact.hits, exact.writes, exact.first_hits), (2, 1, 3));
    assert_eq!((bloom.hits, bloom.writes, bloom.first_hits), (2, 1, 3));
    assert_eq!(all.origin_bytes, 30);
    assert_eq!(exact.origin_bytes, 40);
    assert_eq!(exact.written_bytes, 10);
    assert!((all.hit_ratio - 0.5).abs() < 1e-12);
    assert!((exact.byte_hit_ratio - 2.0 / 6.0).abs() < 1e-12);
}

#[test]
fn least_recently_used_object_is_evicted_by_bytes() {
    // 25 bytes hold two 10-byte objects: C evicts A, then A evicts B.
    let [all, ..] = simulate("A B C A", 10, 25, 1000);
    assert_eq!((all.hits, all.writes, all.evictions), (0, 4, 2));
    // A B A hits once B is the one evicted: A was touched after B.
    let [all, ..] = simulate("A B A C A", 10, 25, 1000);
    assert_eq!((all.hits, all.writes, all.evictions), (2, 3, 1));
}

#[test]
fn object_larger_than_the_cache_is_never_stored() {
    let [all, exact, bloom, _] = simulate("A A A", 30, 25, 1000);
    for report in [&all, &exact, &bloom] {
        assert_eq!(report.hits, 0, "{:?}", report.policy);
        assert_eq!(report.writes, 0, "{:?}", report.policy);
    }
    assert_eq!(all.too_large, 3);
    // Second hit: the first request is a first hit, the next two would be stored but do not fit.
    assert_eq!((exact.first_hits, exact.too_large), (1, 2));
}

#[test]
fn exact_window_forgets_keys_after_two_generations() {
    // Capacity 2: generations {A, B}, {C, D}, then A is two generations old and first seen again.
    let [_, exact, ..] = simulate("A B C D A", 10, 1000, 2);
    assert_eq!((exact.writes, exact.first_hits), (0, 5));
    assert_eq!(exact.rotations.capacity, 2);
    // {A, B}, {C, ...}: A is in the previous generation and stored.
    let [_, exact, ..] = simulate("A B C A", 10, 1000, 2);
    assert_eq!((exact.writes, exact.first_hits), (1, 3));
    assert_eq!(exact.window_keys_peak, 3);
}

#[test]
fn exact_and_bloom_agree_when_the_filter_is_nearly_empty() {
    // 300 objects against a doorkeeper sized for 100,000: a false positive is out of reach, and the
    // small cache keeps evicting, so admission is consulted thousands of times.
    let trace = SyntheticTrace {
        requests: 20_000,
        objects: 300,
        ..SyntheticTrace::default()
    };
    let mut simulator = Simulator::new(&[CacheSetup {
        cache_bytes: 256 * 1024,
        doorkeeper: doorkeeper(100_000),
        probation: ProbationSetup::default(),
        seed: 1,
        weigh: Weigh::Body,
    }]);
    for request in trace.iter() {
        simulator.request_key(&request.key, request.size, request.time);
    }
    assert_eq!(simulator.stats().distinct_objects, 300);
    let reports = simulator.finish();
    let [all, exact, bloom] = [0, 1, 2].map(|i| reports[0][i].clone());
    assert!(
        all.evictions > 1000,
        "the cache must be under pressure: {all:?}"
    );
    assert_eq!(
        (bloom.hits, bloom.writes, bloom.evictions),
        (exact.hits, exact.writes, exact.evictions)
    );
    assert!(bloom.writes < all.writes);
}

#[test]
fn max_age_rotates_on_trace_time() {
    let mut simulator = Simulator::new(&[CacheSetup {
        cache_bytes: 1000,
        doorkeeper: DoorkeeperConfig {
            max_age: Duration::from_secs(10),
            ..doorkeeper(1000)
        },
        probation: ProbationSetup::default(),
        seed: 1,
        weigh: Weigh::Body,
    }]);
    // A at t=0 and again at t=40, with two 10 s generations in between: first seen again.
    simulator.request_key("A", 10, 0.0);
    for i in 0..200 {
        // Other keys keep the doorkeeper observing (it reads the clock every few observes).
        simulator.request_key(&format!("x{i}"), 10, 5.0 + f64::from(i) * 0.1);
    }
    simulator.request_key("A", 10, 40.0);
    let reports = simulator.finish();
    for report in &reports[0][1..3] {
        assert!(report.rotations.max_age >= 2, "{report:?}");
        assert_eq!(report.writes, 0, "{:?}", report.policy);
    }
    // Probation stored every first request in probation, and A's second was first seen again.
    let probation = &reports[0][3];
    assert!(probation.rotations.max_age >= 2, "{probation:?}");
    assert_eq!(probation.main_writes, 0, "{probation:?}");
}

#[test]
fn probation_keeps_first_copies_and_loses_no_hit_to_admission() {
    // With room for everything, probation hits exactly as admit-all does, and writes nothing to main.
    let [all, _, _, probation] = simulate("A B A A C A", 10, 1000, 1000);
    assert_eq!((probation.hits, probation.writes), (all.hits, all.writes));
    assert_eq!(
        (
            probation.probation_writes,
            probation.main_writes,
            probation.first_hits
        ),
        (3, 0, 0)
    );
}

#[test]
fn probation_promotes_a_hit_entry_drops_an_unhit_one_and_stores_its_return_in_main() {
    // 40 bytes, probation held to 10 once main is full; 10-byte objects. A is hit in probation;
    // E needs room: A is promoted, B (unhit) dropped. A hits in main; B comes back seen before and
    // goes to main, which costs C its place.
    let setup = ProbationSetup {
        share: 0.25,
        main_eviction: MainEviction::Fifo,
    };
    let [.., probation] = simulate_with("A A B C D E A B", 10, 40, 1000, setup);
    assert_eq!(probation.hits, 2);
    assert_eq!(probation.promotions, 1);
    assert_eq!((probation.probation_writes, probation.main_writes), (5, 2));
    assert_eq!(probation.main_written_bytes, 20);
    assert_eq!(probation.evictions, 2);
    assert_eq!(probation.first_hits, 0);
}

#[test]
fn probation_turns_away_a_first_object_larger_than_its_segment() {
    // Probation is 10% of 1000 bytes: a 150-byte object is a first hit, then stored in main.
    let [.., probation] = simulate("A A A", 150, 1000, 1000);
    assert_eq!(probation.first_hits, 1);
    assert_eq!((probation.main_writes, probation.probation_writes), (1, 0));
    assert_eq!(probation.hits, 1);
}
