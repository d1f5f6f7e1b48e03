//! Traffic for load tests: the synthetic origin (`bloomgate origin`) and the live replay client (`bloomgate replay`).
//!
//! [`origin`] serves deterministic objects of any size and counts what reaches it, with faults on
//! command; [`replay`](mod@replay) sends a trace's requests to a running proxy and reports what its
//! `Cache-Status` headers said.

pub mod cache_status;
mod fault;
pub mod object_path;
pub mod origin;
pub mod pattern;
pub mod replay;

use std::net::SocketAddr;

pub use fault::Fault;
pub use origin::{OriginHandle, OriginOptions, OriginStats, start_origin};
pub use replay::{ReplayOptions, ReplayReport, replay};

/// Errors of the synthetic origin and the replay client (the `origin` and `replay` commands).
#[derive(Debug, thiserror::Error)]
pub enum TrafficError {
    #[error("origin: cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot wait for Ctrl-C or SIGTERM: {0}")]
    Signal(std::io::Error),
    #[error("replay: target {target:?}: {reason}")]
    Target { target: String, reason: String },
    #[error("{0}")]
    Options(String),
    #[error("replay: trace: {0}")]
    Trace(#[from] crate::trace::TraceError),
    #[error("replay: a worker failed: {0}")]
    Worker(String),
    #[error("replay: cannot write the report as JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// Returns on Ctrl-C (SIGINT) or SIGTERM.
async fn wait_for_stop_signal() -> Result<(), TrafficError> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(TrafficError::Signal)?;
    tokio::select! {
        interrupted = tokio::signal::ctrl_c() => interrupted.map_err(TrafficError::Signal),
        _ = terminate.recv() => Ok(()),
    }
}
