//! The simulator and the traces it reads: the trace reader, the synthetic generator, the policies
//! on hand-made traces and `bloomgate simulate` as the user runs it. One test crate per subject,
//! so that it is linked once.

mod command;
mod plot;
mod policies;
mod slices;
mod trace_reader;
mod trace_synthetic;

use std::path::PathBuf;

use bloomgate::trace::{Compression, SyntheticTrace, TraceWriter};

/// Where the tests write their traces: cargo's scratch directory for integration tests under
/// `target/`, overwritten by the next run and removed by `cargo clean` (the system temp directory
/// kept one set of files per run).
fn scratch() -> &'static std::path::Path {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
}

/// `trace` written as CSV to a file of the scratch directory named after `name`.
fn synthetic_trace_file(name: &str, trace: &SyntheticTrace) -> PathBuf {
    let path = scratch().join(format!("bloomgate-sim-{name}"));
    let mut writer = TraceWriter::create(&path, Compression::None).unwrap();
    for request in trace.iter() {
        writer.write(&request).unwrap();
    }
    writer.finish().unwrap();
    path
}
