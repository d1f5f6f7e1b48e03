//! The demo's picture: its synthetic trace through `simulate` at several cache sizes, drawn as
//! `simulate --plot` draws it.

use std::path::Path;

use crate::sim::{SimError, SimulateArgs, simulate, write_plot};
use crate::trace::{Compression, SyntheticTrace, TraceWriter};

use super::{DemoArgs, DemoError};

/// Cache sizes of the picture, in percent of the trace's footprint: around the demo's own.
const CACHE_PERCENT: [f64; 6] = [1.0, 2.0, 5.0, 10.0, 20.0, 50.0];

/// Writes the curves of `trace` to `args.plot` and says where.
pub(super) fn draw(args: &DemoArgs, trace: &SyntheticTrace) -> Result<(), DemoError> {
    let dir = std::env::temp_dir().join(format!("bloomgate-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("demo-trace.csv");
    let drawn = write_trace(&path, trace).and_then(|()| plot(&path, &args.plot));
    // The trace was only the simulator's input.
    let _ = std::fs::remove_dir_all(&dir);
    drawn?;
    println!(
        "\ncurves: {} (hit ratio, byte hit ratio and bytes written into main against cache size, \
         by admission policy, simulated on the same trace; `bloomgate simulate --plot` draws them \
         for any trace)",
        args.plot.display()
    );
    Ok(())
}

fn write_trace(path: &Path, trace: &SyntheticTrace) -> Result<(), SimError> {
    let mut writer = TraceWriter::create(path, Compression::None)?;
    for request in trace.iter() {
        writer.write(&request)?;
    }
    Ok(writer.finish()?)
}

fn plot(trace: &Path, out: &Path) -> Result<(), SimError> {
    let args = SimulateArgs::with_cache_percent(trace, &CACHE_PERCENT)?;
    write_plot(out, &simulate(&args)?)
}
