//! `bloomgate simulate` as the user runs it: a trace file in, a report with footprint and cache sizes out.

use std::path::PathBuf;

use bloomgate::sim::{PolicyKind, SimError, SimulateArgs, simulate};

fn args(trace: PathBuf) -> SimulateArgs {
    SimulateArgs {
        trace,
        cache_bytes: Vec::new(),
        cache_percent: vec![50.0, 100.0],
        capacity: None,
        target_fpr: 0.01,
        rotate_at_fpr: 0.02,
        max_age: None,
        json: true,
        skip_bad_lines: false,
    }
}

fn trace_file(name: &str, text: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("bloomgate-sim-{}-{name}", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn cache_percent_is_of_the_footprint_of_distinct_objects() {
    // Distinct objects a (100 B), b (300 B), c (600 B): footprint 1000 B.
    let path = trace_file(
        "percent.csv",
        "time,key,size\n1,a,100\n2,b,300\n3,a,100\n4,c,600\n5,a,100\n",
    );
    let report = simulate(&args(path)).unwrap();
    assert_eq!(report.trace.stats.footprint_bytes, 1000);
    assert_eq!(report.trace.stats.distinct_objects, 3);
    assert_eq!(report.trace.stats.one_hit_objects, 2);
    let sizes: Vec<u64> = report.caches.iter().map(|c| c.cache_bytes).collect();
    assert_eq!(sizes, [500, 1000]);
    let whole = &report.caches[1];
    assert_eq!(whole.doorkeeper.capacity, 1000);
    let all = whole.policy(PolicyKind::AdmitAll).unwrap();
    let bloom = whole.policy(PolicyKind::Bloom).unwrap();
    assert_eq!((all.hits, all.writes), (2, 3));
    assert_eq!((bloom.hits, bloom.writes), (1, 1));
    assert!((whole.bloom_vs_admit_all.writes_avoided - 2.0 / 3.0).abs() < 1e-12);
    let json = serde_json::to_string(&report).unwrap();
    assert!(json.contains("\"second-hit-exact\""));
}

#[test]
fn bad_arguments_and_bad_lines_are_errors_naming_them() {
    let path = trace_file("bad.csv", "time,key,size\n1,a,100\n2,b,x\n");
    let error = simulate(&args(path.clone())).unwrap_err();
    assert!(matches!(error, SimError::Trace(_)));
    assert!(error.to_string().contains(":3: size:"), "{error}");
    let skipping = SimulateArgs {
        skip_bad_lines: true,
        ..args(path.clone())
    };
    assert_eq!(simulate(&skipping).unwrap().trace.skipped_lines, 1);
    let wrong = SimulateArgs {
        rotate_at_fpr: 0.005,
        ..args(path)
    };
    let error = simulate(&wrong).unwrap_err();
    assert!(error.to_string().contains("rotate_at_fpr"), "{error}");
}
