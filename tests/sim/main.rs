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

/// `trace` written as CSV to a file of the temp directory named after this process and `name`.
fn synthetic_trace_file(name: &str, trace: &SyntheticTrace) -> PathBuf {
    let path = std::env::temp_dir().join(format!("bloomgate-sim-{}-{name}", std::process::id()));
    let mut writer = TraceWriter::create(&path, Compression::None).unwrap();
    for request in trace.iter() {
        writer.write(&request).unwrap();
    }
    writer.finish().unwrap();
    path
}
