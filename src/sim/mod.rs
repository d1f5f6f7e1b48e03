//! The offline simulator: replays a trace through admission policies in front of a byte-bounded cache.
//!
//! Every policy gets its own cache. The single-segment ones share the same eviction ([`ByteLru`]:
//! least recently used, by bytes), so only admission differs: `admit-all` stores every miss,
//! `second-hit-exact` stores a miss whose key it remembers exactly from the same window as the
//! doorkeeper, and `bloom` asks the doorkeeper: [`DoorkeeperModel`], the proxy's
//! [`crate::admission::Doorkeeper`] made reproducible for one thread. `probation` asks the
//! doorkeeper too, and runs the proxy's store rules ([`crate::admission::probation`]) over a
//! [`SegmentedCache`]: a first-seen miss goes to a probation FIFO, a seen-before one to main.
//! Admission is consulted only on misses, as in the proxy. [`SliceSim`] runs the same policies
//! over large objects cut in slices, each slice an object (`bloomgate simulate-slices`).

mod cli;
mod doorkeeper;
mod engine;
mod interner;
mod list;
mod lru;
mod pipeline;
mod plot;
mod policy;
mod prefetch;
mod ratio;
mod reference;
mod report;
mod request;
mod segmented;
mod slices;
mod tiers;
mod weigh;

pub use cli::{SimulateArgs, run, simulate, simulate_tiers};
pub use doorkeeper::DoorkeeperModel;
pub use engine::{CacheSetup, Simulator};
pub use interner::Interner;
pub use lru::ByteLru;
pub use pipeline::{Consumer, scan};
pub use plot::{curves_svg, write_plot};
pub use policy::{NGINX_BYTES_PER_KEY, PolicyKind, PolicyReport, ProbationSetup};
pub(crate) use ratio::ratio;
pub use report::{
    BloomVsAdmitAll, BloomVsExact, CacheReport, DoorkeeperSummary, GatedVsWriteAll,
    ProbationVsAdmitAll, SimReport, TierSimReport, TraceSummary,
};
pub use request::{SimRequest, TraceStats, key_fingerprint};
pub use segmented::{Evicted, MainEviction, SegmentedCache};
pub use slices::{
    Layout, SLICE_RUNS, SliceArgs, SliceReport, SliceRun, SliceRunReport, SliceSetup, SliceSim,
    SliceTierReport, SliceTraceStats, run_slices, simulate_slices, slice_fingerprint,
};
pub use tiers::{DiskPolicy, TierReport, TierSim};
pub use weigh::{Weigh, Weigher};

/// Why a simulation could not run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(transparent)]
    Trace(#[from] crate::trace::TraceError),
    /// A command-line value out of range, named as the user typed it.
    #[error("simulate: {0}")]
    Argument(String),
    #[error("simulate: writing the report: {0}")]
    Output(#[from] std::io::Error),
    #[error("simulate: encoding the JSON report: {0}")]
    Json(#[from] serde_json::Error),
    #[error("simulate: --plot {path}: {error}")]
    Plot { path: String, error: String },
}
