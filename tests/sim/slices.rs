//! Slice caching in the simulator: traces of byte ranges, the video-session generator, and
//! `bloomgate simulate-slices`' runs against each other.

use crate::scratch;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;

use bloomgate::sim::{SimError, SliceArgs, SliceReport, simulate_slices};
use bloomgate::trace::{ByteRange, Compression, ReadOptions, TraceReader, TraceWriter, VideoTrace};

const MIB: u64 = 1 << 20;

fn trace_file(name: &str, text: &str) -> PathBuf {
    let path = scratch().join(format!("bloomgate-slices-{name}"));
    std::fs::write(&path, text).unwrap();
    path
}

fn video_file(name: &str, trace: &VideoTrace) -> PathBuf {
    let path = scratch().join(format!("bloomgate-slices-{name}"));
    let mut writer = TraceWriter::create_with_ranges(&path, Compression::None).unwrap();
    for request in trace.iter() {
        writer.write(&request).unwrap();
    }
    writer.finish().unwrap();
    path
}

fn args(trace: PathBuf, cache_bytes: u64) -> SliceArgs {
    SliceArgs {
        trace,
        cache_bytes: vec![cache_bytes],
        slice_bytes: MIB,
        slice_above: 8 * MIB,
        max_object_bytes: 8 * MIB,
        capacity: None,
        probation_share: 0.1,
        seed: 1,
        json: false,
        skip_bad_lines: false,
        disk_bytes: None,
    }
}

/// A 64 MiB object whose first 32 slices are each asked for three times and whose last 32 once.
fn half_once_trace() -> String {
    let mut text = String::from("time,key,size,range\n");
    let mut time = 0;
    for round in 0..3 {
        for slice in 0..64u64 {
            if slice >= 32 && round > 0 {
                continue;
            }
            let (first, last) = (slice * MIB, (slice + 1) * MIB - 1);
            writeln!(text, "{time},/movie,{},bytes={first}-{last}", 64 * MIB).unwrap();
            time += 1;
        }
    }
    text
}

fn run<'a>(report: &'a SliceReport, name: &str) -> &'a bloomgate::sim::SliceRunReport {
    report.runs.iter().find(|run| run.run == name).unwrap()
}

#[test]
fn per_slice_admission_writes_fewer_bytes_than_admitting_every_slice_when_half_are_asked_once() {
    let path = trace_file("half-once.csv", &half_once_trace());
    let report = simulate_slices(&args(path, 1024 * MIB)).unwrap();
    let all = run(&report, "slices-admit-all");
    // Every slice stored once, on its first request; the 32 asked for again are hits.
    assert_eq!(all.written_bytes, 64 * MIB);
    assert_eq!(all.origin_bytes, 64 * MIB);
    for name in ["slices-bloom", "slices-second-hit-exact"] {
        let gated = run(&report, name);
        // Only the 32 slices asked for a second time are stored.
        assert_eq!(gated.written_bytes, 32 * MIB, "{name}: {gated:?}");
        // Their second requests went to the origin too; the third were hits.
        assert_eq!(gated.origin_bytes, 96 * MIB, "{name}: {gated:?}");
    }
    let probation = run(&report, "slices-probation");
    assert_eq!(probation.main_written_bytes, 0, "{probation:?}");
    assert!(probation.written_bytes <= all.written_bytes);
    assert_eq!(probation.origin_bytes, 64 * MIB, "{probation:?}");
}

#[test]
fn over_a_disk_the_gated_rule_writes_only_slices_asked_for_again() {
    let path = trace_file("half-once-tiers.csv", &half_once_trace());
    let report = simulate_slices(&SliceArgs {
        disk_bytes: Some(1024 * MIB),
        ..args(path, 8 * MIB)
    })
    .unwrap();
    let every_miss = report.tier(8 * MIB, "every-miss").unwrap();
    let gated = report.tier(8 * MIB, "gated").unwrap();
    // nginx's rule writes every slice as it arrives.
    assert_eq!(every_miss.disk_written_bytes, 64 * MIB, "{report}");
    // Only the 32 slices asked for again reach the disk, and their third requests hit it.
    assert!(gated.disk_written_bytes <= 32 * MIB, "{report}");
    assert!(gated.disk_written_bytes > 0, "{report}");
    assert!(gated.disk_hit_bytes > 0, "{report}");
    assert!(report.tier(8 * MIB, "write-all").is_some());
}

#[test]
fn whole_object_caching_saves_no_origin_bytes_for_objects_above_the_limit() {
    let path = trace_file("half-once-whole.csv", &half_once_trace());
    let report = simulate_slices(&args(path, 1024 * MIB)).unwrap();
    let whole = run(&report, "whole");
    assert_eq!(whole.origin_bytes, report.stats.requested_bytes);
    assert_eq!(whole.written_bytes, 0);
    assert_eq!(whole.passed_requests, report.stats.requests);
    // Sliced, the same trace fetches each slice once.
    assert!(run(&report, "slices-admit-all").origin_bytes < whole.origin_bytes);
}

#[test]
fn an_object_below_the_slice_threshold_is_cached_whole_by_every_run() {
    let path = trace_file(
        "small.csv",
        "time,key,size,range\n0,/a,1000,bytes=0-99\n1,/a,1000,\n2,/a,1000,bytes=900-999\n",
    );
    let report = simulate_slices(&args(path, 1024 * MIB)).unwrap();
    for run in &report.runs {
        assert_eq!(run.passed_requests, 0, "{run:?}");
        assert_eq!(run.cache_requests, 3, "{run:?}");
    }
    assert_eq!(report.stats.requested_bytes, 100 + 1000 + 100);
}

#[test]
fn on_video_sessions_per_slice_admission_writes_less_than_admitting_every_slice() {
    let trace = VideoTrace {
        sessions: 400,
        videos: 50,
        ..VideoTrace::default()
    };
    let path = video_file("video.csv", &trace);
    let report = simulate_slices(&args(path, 2048 * MIB)).unwrap();
    let all = run(&report, "slices-admit-all");
    // The seeks' slices, mostly asked for once, are never stored by a second-hit rule...
    assert!(
        run(&report, "slices-bloom").written_bytes < all.written_bytes,
        "{report}"
    );
    // ...and reach only probation's FIFO, not main, under probation.
    assert!(
        run(&report, "slices-probation").main_written_bytes < all.written_bytes,
        "{report}"
    );
    // Slicing is what lets any of it be cached: whole-object caching fetches every byte.
    assert!(all.origin_bytes < report.stats.requested_bytes);
    assert_eq!(
        run(&report, "whole").origin_bytes,
        report.stats.requested_bytes
    );
}

#[test]
fn the_video_generator_is_reproducible_from_its_seed() {
    let trace = VideoTrace {
        sessions: 50,
        ..VideoTrace::default()
    };
    let first: Vec<_> = trace.iter().collect();
    assert_eq!(first, trace.iter().collect::<Vec<_>>());
    let other = VideoTrace { seed: 2, ..trace };
    assert_ne!(first, other.iter().collect::<Vec<_>>());
}

#[test]
fn a_range_column_is_read_back_as_written() {
    let trace = VideoTrace {
        sessions: 20,
        ..VideoTrace::default()
    };
    let path = video_file("read-back.csv", &trace);
    let read: Vec<_> = TraceReader::open(&path, ReadOptions::default())
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(read, trace.iter().collect::<Vec<_>>());
}

#[test]
fn a_range_past_the_object_names_its_line_and_field() {
    let path = trace_file(
        "bad-range.csv",
        "time,key,size,range\n0,/a,100,bytes=0-9\n1,/a,100,bytes=100-200\n",
    );
    let mut reader = TraceReader::open(&path, ReadOptions::default()).unwrap();
    let first = reader.next().unwrap().unwrap();
    assert_eq!(first.range, Some(ByteRange { first: 0, last: 9 }));
    let error = reader.next().unwrap().unwrap_err().to_string();
    assert!(error.contains(":3: range:"), "{error}");
    assert!(error.contains("100 bytes"), "{error}");
}

#[test]
fn a_slice_size_that_is_not_a_power_of_two_is_refused_by_name() {
    let path = trace_file("refused.csv", "time,key,size\n0,/a,1\n");
    let error = simulate_slices(&SliceArgs {
        slice_bytes: 1000 * 1024,
        ..args(path, MIB)
    })
    .unwrap_err();
    assert!(matches!(error, SimError::Argument(_)));
    assert!(
        error.to_string().contains("--slice-bytes 1024000"),
        "{error}"
    );
}

#[test]
fn generate_video_then_simulate_slices_runs_from_the_command_line() {
    let path = scratch().join("bloomgate-slices-cli.csv");
    let bin = env!("CARGO_BIN_EXE_bloomgate");
    let generated = Command::new(bin)
        .args(["trace", "generate", "--video", "--sessions", "30", "--out"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(generated.status.success(), "{generated:?}");
    let simulated = Command::new(bin)
        .args(["simulate-slices", "--cache-bytes", "256MiB", "--trace"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(simulated.status.success(), "{simulated:?}");
    let out = String::from_utf8(simulated.stdout).unwrap();
    for run in ["whole", "slices-admit-all", "slices-probation"] {
        assert!(out.contains(run), "{out}");
    }
}
