//! The synthetic trace generator: determinism, one-hit-wonder share, Zipf shape, sizes.

use std::collections::HashMap;

use bloomgate::trace::SyntheticTrace;

fn counts(trace: &SyntheticTrace) -> HashMap<String, u64> {
    let mut counts = HashMap::new();
    for request in trace.iter() {
        *counts.entry(request.key).or_insert(0) += 1;
    }
    counts
}

#[test]
fn same_seed_gives_same_trace_and_another_seed_does_not() {
    let trace = SyntheticTrace {
        requests: 5_000,
        objects: 1_000,
        ..SyntheticTrace::default()
    };
    let first: Vec<_> = trace.iter().collect();
    assert_eq!(first, trace.iter().collect::<Vec<_>>());
    let other = SyntheticTrace { seed: 2, ..trace };
    assert_ne!(first, other.iter().collect::<Vec<_>>());
}

#[test]
fn object_count_and_one_hit_share_are_as_configured() {
    let trace = SyntheticTrace {
        requests: 50_000,
        objects: 10_000,
        one_hit_share: 0.7,
        ..SyntheticTrace::default()
    };
    let counts = counts(&trace);
    assert_eq!(counts.values().sum::<u64>(), 50_000);
    assert_eq!(counts.len(), 10_000);
    let once = counts.values().filter(|&&c| c == 1).count();
    assert_eq!(once, 7_000);
}

#[test]
fn popularity_follows_zipf_alpha() {
    let trace = SyntheticTrace {
        requests: 200_000,
        objects: 2_000,
        alpha: 1.0,
        one_hit_share: 0.0,
        ..SyntheticTrace::default()
    };
    let counts = counts(&trace);
    let count = |rank: u64| counts[&format!("k{rank}")] as f64;
    // Under Zipf(1) rank 1 draws twice as often as rank 2 and ten times as often as rank 10
    // (plus the two guaranteed requests each, negligible here); a uniform draw gives ratio 1.
    let two = count(0) / count(1);
    let ten = count(0) / count(9);
    assert!((1.7..2.3).contains(&two), "rank1/rank2 = {two}");
    assert!((8.0..12.5).contains(&ten), "rank1/rank10 = {ten}");
}

#[test]
fn sizes_are_per_object_log_normal_around_the_median() {
    let trace = SyntheticTrace {
        requests: 40_000,
        objects: 8_000,
        size_median: 10_000,
        ..SyntheticTrace::default()
    };
    let mut sizes: HashMap<String, u64> = HashMap::new();
    for request in trace.iter() {
        let size = *sizes.entry(request.key.clone()).or_insert(request.size);
        assert_eq!(size, request.size, "{} changed size", request.key);
        assert!((64..=4 << 20).contains(&request.size));
    }
    let mut sorted: Vec<u64> = sizes.into_values().collect();
    sorted.sort_unstable();
    let median = sorted[sorted.len() / 2];
    assert!((9_000..11_000).contains(&median), "median {median}");
    // sigma 1: the 84th percentile is about e times the median.
    let upper = sorted[sorted.len() * 84 / 100] as f64 / median as f64;
    assert!((2.3..3.2).contains(&upper), "p84/median {upper}");
}

#[test]
fn keys_are_url_path_safe_and_time_increases() {
    let mut last = -1.0;
    for request in SyntheticTrace::default().iter().take(1000) {
        assert!(
            request.key.bytes().all(|b| b.is_ascii_alphanumeric()),
            "{}",
            request.key
        );
        assert!(request.time > last);
        last = request.time;
    }
}

#[test]
fn too_few_requests_cut_the_popular_objects_instead_of_failing() {
    let trace = SyntheticTrace {
        requests: 100,
        objects: 1_000,
        one_hit_share: 0.5,
        ..SyntheticTrace::default()
    };
    assert_eq!(trace.iter().count(), 100);
}
