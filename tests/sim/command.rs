//! `bloomgate simulate` as the user runs it: a trace file in, a report with footprint and cache sizes out.

use crate::scratch;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use bloomgate::admission::DoorkeeperConfig;
use bloomgate::config::Config;
use bloomgate::sim::{
    CacheSetup, DiskPolicy, MainEviction, PolicyKind, ProbationSetup, SimError, SimulateArgs,
    Simulator, Weigh, simulate, simulate_tiers,
};
use bloomgate::trace::{Compression, ReadOptions, SyntheticTrace, TraceReader, TraceWriter};

fn args(trace: PathBuf) -> SimulateArgs {
    SimulateArgs {
        trace,
        cache_bytes: Vec::new(),
        cache_percent: vec![50.0, 100.0],
        capacity: None,
        target_fpr: 0.01,
        rotate_at_fpr: 0.02,
        max_age: None,
        policies: Vec::new(),
        probation_share: 0.1,
        probation_main: MainEviction::Fifo,
        ram_bytes: None,
        ram_percent: None,
        disk_bytes: None,
        disk_percent: None,
        jobs: None,
        seed: 1,
        weigh: Weigh::Body,
        json: true,
        plot: None,
        skip_bad_lines: false,
    }
}

fn trace_file(name: &str, text: &str) -> PathBuf {
    let path = scratch().join(format!("bloomgate-sim-{name}"));
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
    let versus = whole.bloom_vs_admit_all.expect("admit-all and bloom ran");
    assert!((versus.writes_avoided - 2.0 / 3.0).abs() < 1e-12);
    let json = serde_json::to_string(&report).unwrap();
    assert!(json.contains("\"second-hit-exact\""));
}

#[test]
fn the_default_doorkeeper_window_is_twice_the_objects_the_cache_holds() {
    // 4,000 distinct objects of 100 B: a cache of half the footprint holds 2,000 of them.
    let text: String = (0..4000).map(|i| format!("{i},k{i},100\n")).collect();
    let path = trace_file("window.csv", &format!("time,key,size\n{text}"));
    let report = simulate(&args(path)).unwrap();
    let capacities: Vec<u64> = report
        .caches
        .iter()
        .map(|cache| cache.doorkeeper.capacity)
        .collect();
    assert_eq!(capacities, [4000, 8000]);
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
    for share in [1.0, -0.5, f64::NAN] {
        let wrong = SimulateArgs {
            probation_share: share,
            ..args(trace_file("share.csv", "time,key,size\n1,a,100\n"))
        };
        let error = simulate(&wrong).unwrap_err();
        assert!(error.to_string().contains("--probation-share"), "{error}");
    }
}

#[test]
fn probation_reports_its_writes_by_segment_and_against_admit_all() {
    // a is requested three times, b once. With a probation segment of 80% of a cache that holds
    // both, probation stores both first copies, hits a twice, and writes nothing into main.
    let path = trace_file(
        "probation.csv",
        "time,key,size\n1,a,100\n2,b,300\n3,a,100\n4,a,100\n",
    );
    let wide = SimulateArgs {
        probation_share: 0.8,
        ..args(path.clone())
    };
    let report = simulate(&wide).unwrap();
    let whole = &report.caches[1];
    let probation = whole.policy(PolicyKind::Probation).unwrap();
    assert_eq!(
        (
            probation.hits,
            probation.probation_writes,
            probation.main_writes
        ),
        (2, 2, 0)
    );
    assert_eq!(probation.probation_written_bytes, 400);
    let versus = whole
        .probation_vs_admit_all
        .expect("admit-all and probation ran");
    assert_eq!(versus.main_written_bytes_share, 0.0);
    assert_eq!(versus.hit_ratio_change_points, 0.0);
    assert_eq!(versus.written_bytes_share, 1.0);
    let bloom = versus.bloom_written_bytes_share.expect("bloom ran");
    assert!(
        (bloom - 100.0 / 400.0).abs() < 1e-12,
        "bloom stores a on its second request: {versus:?}"
    );
    // At the default 10%, neither fits probation: both first requests are first hits, and a's
    // second goes to main.
    let report = simulate(&args(path)).unwrap();
    let probation = report.caches[1].policy(PolicyKind::Probation).unwrap();
    assert_eq!(
        (probation.first_hits, probation.main_writes, probation.hits),
        (2, 1, 1)
    );
}

/// Runs the `bloomgate simulate` binary with `--cache-bytes sizes` over `trace`.
fn simulate_command(trace: &Path, sizes: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bloomgate"))
        .args([
            "simulate",
            "--json",
            "--capacity",
            "1000",
            "--cache-bytes",
            sizes,
        ])
        .arg("--trace")
        .arg(trace)
        .output()
        .unwrap()
}

#[test]
fn cache_bytes_mean_the_same_as_in_the_config_file() {
    let path = trace_file("units.csv", "time,key,size\n1,a,100\n");
    let sizes = ["512MB", "512MiB", "1.5GB", "8 kib", "100"];
    let output = simulate_command(&path, &sizes.join(","));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let simulated: Vec<u64> = report["caches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|cache| cache["cache_bytes"].as_u64().unwrap())
        .collect();
    let configured: Vec<u64> = sizes
        .iter()
        .map(|size| {
            let text = format!("[cache]\nmax_bytes = \"{size}\"\nmax_object_bytes = 1\n");
            Config::from_toml_str(&text).unwrap().cache.max_bytes
        })
        .collect();
    assert_eq!(simulated, configured);
    assert_eq!(simulated[0], 512_000_000);
}

#[test]
fn cache_bytes_with_a_unit_the_config_file_refuses_are_refused() {
    let path = trace_file("bad-unit.csv", "time,key,size\n1,a,100\n");
    let output = simulate_command(&path, "1G");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("\"1G\""), "{stderr}");
    assert!(
        Config::from_toml_str("[cache]\nmax_bytes = \"1G\"\n").is_err(),
        "the config file refuses 1G too"
    );
}

#[test]
fn two_tiers_run_every_disk_rule_and_gated_spares_the_disk_one_hit_wonders() {
    // RAM holds one 100-byte object, the disk ten. a is requested four times with one-hit
    // wonders between; b..g once each.
    let mut lines = String::from("time,key,size\n");
    for (time, key) in ["a", "b", "a", "c", "d", "a", "e", "f", "a", "g"]
        .iter()
        .enumerate()
    {
        lines.push_str(&format!("{time},{key},100\n"));
    }
    let path = trace_file("tiers.csv", &lines);
    let tiers = SimulateArgs {
        cache_percent: Vec::new(),
        ram_bytes: Some(100),
        disk_bytes: Some(1000),
        ..args(path.clone())
    };
    let report = simulate_tiers(&tiers).unwrap();
    let rule = |policy| {
        report
            .policies
            .iter()
            .find(|p| p.policy == Some(policy))
            .unwrap()
    };
    let (all, every, gated) = (
        rule(DiskPolicy::WriteAll),
        rule(DiskPolicy::EveryMiss),
        rule(DiskPolicy::Gated),
    );
    // every-miss writes all 7 objects at their miss; write-all each that RAM gives up (all but
    // the last, g); gated only a (its second request was seen before).
    assert_eq!(every.disk_writes, 7);
    assert_eq!(all.disk_writes, 6);
    assert_eq!(gated.disk_writes, 1, "{gated:?}");
    assert_eq!(gated.disk_writes_refused, 6);
    // a is a disk hit on its 3rd and 4th requests under every rule but gated, where the 2nd
    // request missed (first seen only then) and stored it as seen before.
    assert_eq!((all.hits, all.disk_hits), (3, 3));
    assert_eq!((gated.hits, gated.disk_hits), (2, 2));
    assert!(report.gated_vs_write_all.disk_written_bytes_share < 0.2);
    // A disk size without a RAM size, or with --cache-percent's model, is refused.
    let half = SimulateArgs {
        cache_percent: Vec::new(),
        disk_bytes: Some(1000),
        ..args(path.clone())
    };
    assert!(matches!(simulate_tiers(&half), Err(SimError::Argument(_))));
    assert!(matches!(simulate(&tiers), Err(SimError::Argument(_))));
}

/// Runs `bloomgate simulate --json` with `extra` arguments and returns its report without the
/// timing fields, which are the only ones a run may change.
fn simulate_json(trace: &Path, extra: &[&str]) -> serde_json::Value {
    let output = Command::new(env!("CARGO_BIN_EXE_bloomgate"))
        .args(["simulate", "--json"])
        .arg("--trace")
        .arg(trace)
        .args(extra)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let fields = report.as_object_mut().unwrap();
    for timing in ["elapsed_seconds", "requests_per_second"] {
        fields.remove(timing);
    }
    report
}

/// `--weigh proxy` counts what the proxy stores beside a body (head, key, index), so bloomgate's
/// policies hold fewer objects in the same bytes; the references, and what a hit is worth, stay
/// as they were.
#[test]
fn weighing_as_the_proxy_makes_bloomgates_caches_smaller_and_leaves_the_references_alone() {
    // Small objects, whose head and key weigh about as much as their body.
    let trace = SyntheticTrace {
        requests: 40_000,
        objects: 6_000,
        size_median: 500,
        ..SyntheticTrace::default()
    };
    let path = crate::synthetic_trace_file("weigh.csv", &trace);
    let sizes = ["--cache-percent", "5,20"];
    let body = simulate_json(&path, &sizes);
    let proxy = simulate_json(&path, &[&sizes[..], &["--weigh", "proxy"]].concat());
    assert_eq!(body["weigh"], "body");
    assert_eq!(proxy["weigh"], "proxy");
    for (body, proxy) in body["caches"]
        .as_array()
        .unwrap()
        .iter()
        .zip(proxy["caches"].as_array().unwrap())
    {
        assert_eq!(body["cache_bytes"], proxy["cache_bytes"]);
        for (body, proxy) in body["policies"]
            .as_array()
            .unwrap()
            .iter()
            .zip(proxy["policies"].as_array().unwrap())
        {
            let name = body["policy"].as_str().unwrap();
            assert_eq!(body["requested_bytes"], proxy["requested_bytes"], "{name}");
            let ratio = |report: &serde_json::Value| report["hit_ratio"].as_f64().unwrap();
            if ["s3-fifo", "w-tinylfu", "sieve"].contains(&name) {
                assert_eq!(body, proxy, "{name} weighs bodies either way");
            } else {
                assert!(ratio(proxy) < ratio(body), "{name}: {proxy} against {body}");
            }
        }
    }
}

#[test]
fn jobs_share_out_the_work_and_change_nothing_in_the_report() {
    let trace = SyntheticTrace {
        requests: 40_000,
        objects: 6_000,
        ..SyntheticTrace::default()
    };
    let path = crate::synthetic_trace_file("jobs.csv", &trace);
    let sizes = ["--cache-percent", "1,5,20"];
    let sequential = simulate_json(&path, &[&sizes[..], &["--jobs", "1"]].concat());
    let caches = sequential["caches"].as_array().unwrap();
    assert_eq!(caches.len(), 3);
    let bloom_rotations = &caches[0]["policies"][2]["rotations"]["capacity"];
    assert!(bloom_rotations.as_u64().unwrap() > 0, "{bloom_rotations}");
    for jobs in ["2", "3", "12"] {
        let parallel = simulate_json(&path, &[&sizes[..], &["--jobs", jobs]].concat());
        assert_eq!(parallel, sequential, "--jobs {jobs}");
    }
    let tiers = ["--ram-percent", "1", "--disk-percent", "10"];
    let sequential = simulate_json(&path, &[&tiers[..], &["--jobs", "1"]].concat());
    assert_eq!(sequential["policies"].as_array().unwrap().len(), 3);
    let parallel = simulate_json(&path, &[&tiers[..], &["--jobs", "3"]].concat());
    assert_eq!(parallel, sequential);
}

#[test]
fn the_threaded_pipeline_reports_what_one_request_at_a_time_reports() {
    // Sizes small enough that every policy evicts and the doorkeeper rotates: the prefetching,
    // batching and threads of `simulate` must change none of it.
    let trace = SyntheticTrace {
        requests: 60_000,
        objects: 9_000,
        ..SyntheticTrace::default()
    };
    let path = scratch().join("bloomgate-sim-pipeline.csv.zst");
    let mut writer = TraceWriter::create(&path, Compression::Zstd).unwrap();
    for request in trace.iter() {
        writer.write(&request).unwrap();
    }
    writer.finish().unwrap();
    let cache_bytes = [1 << 20, 8 << 20];
    let capacity = 2_000;
    let report = simulate(&SimulateArgs {
        cache_bytes: cache_bytes.to_vec(),
        cache_percent: Vec::new(),
        capacity: Some(capacity),
        jobs: Some(2),
        ..args(path.clone())
    })
    .unwrap();

    let setups: Vec<CacheSetup> = cache_bytes
        .iter()
        .map(|&cache_bytes| CacheSetup {
            cache_bytes,
            doorkeeper: DoorkeeperConfig {
                capacity,
                target_fpr: 0.01,
                rotate_at_fpr: 0.02,
                max_age: std::time::Duration::from_secs(100 * 365 * 24 * 3600),
            },
            probation: ProbationSetup::default(),
            seed: 1,
            weigh: Weigh::Body,
        })
        .collect();
    let mut one_at_a_time = Simulator::new(&setups);
    let mut reader = TraceReader::open(&path, ReadOptions::default()).unwrap();
    while let Some(request) = reader.next_ref() {
        let request = request.unwrap();
        one_at_a_time.request_key(request.key, request.size, request.time);
    }
    assert_eq!(report.trace.stats, one_at_a_time.stats());
    let expected = one_at_a_time.finish();
    for (cache, expected) in report.caches.iter().zip(&expected) {
        let rotations = cache.policy(PolicyKind::Bloom).unwrap().rotations;
        assert!(
            rotations.capacity + rotations.fpr_threshold > 0,
            "the doorkeeper rotates"
        );
        assert!(cache.policy(PolicyKind::AdmitAll).unwrap().evictions > 0);
        assert_eq!(&cache.policies, expected, "{} B", cache.cache_bytes);
    }
}

#[test]
fn policies_are_picked_by_their_report_names_and_run_as_they_would_among_all() {
    let trace = SyntheticTrace {
        requests: 20_000,
        objects: 3_000,
        ..SyntheticTrace::default()
    };
    let path = crate::synthetic_trace_file("policies.csv", &trace);
    let sizes = ["--cache-percent", "5"];
    let all = simulate_json(&path, &sizes);
    let names = |report: &serde_json::Value| -> Vec<String> {
        report["caches"][0]["policies"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["policy"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        names(&all),
        [
            "admit-all",
            "second-hit-exact",
            "bloom",
            "probation",
            "s3-fifo",
            "w-tinylfu",
            "sieve"
        ]
    );
    // `lru` names admit-all; the order is the report's whatever the order asked.
    let some = simulate_json(
        &path,
        &[&sizes[..], &["--policies", "sieve,lru,s3-fifo"]].concat(),
    );
    assert_eq!(names(&some), ["admit-all", "s3-fifo", "sieve"]);
    for (index, policy) in [(0, 0), (1, 4), (2, 6)] {
        assert_eq!(
            some["caches"][0]["policies"][index], all["caches"][0]["policies"][policy],
            "a policy's report does not depend on the others run beside it"
        );
    }
    assert!(some["caches"][0]["bloom_vs_admit_all"].is_null());
    let output = Command::new(env!("CARGO_BIN_EXE_bloomgate"))
        .args(["simulate", "--cache-percent", "5", "--policies", "arc"])
        .arg("--trace")
        .arg(&path)
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("arc"));
}

#[test]
fn arguments_made_in_code_take_the_command_lines_defaults() {
    let made = SimulateArgs::with_cache_percent(Path::new("t.csv"), &[0.5, 10.0]).unwrap();
    assert_eq!(made.cache_percent, [0.5, 10.0]);
    assert_eq!(made.trace, Path::new("t.csv"));
    let typed = args(PathBuf::from("t.csv"));
    assert_eq!(
        (
            made.target_fpr,
            made.rotate_at_fpr,
            made.probation_share,
            made.seed
        ),
        (
            typed.target_fpr,
            typed.rotate_at_fpr,
            typed.probation_share,
            typed.seed
        )
    );
    assert_eq!((made.capacity, made.jobs, made.plot), (None, None, None));
}
