//! Request traces: reading them from files, making synthetic ones, and writing them back out.
//!
//! A trace is a sequence of [`Request`]s. [`TraceReader`] reads CSV with a header naming its columns
//! (`time,key,size`, or libCacheSim / Twitter-style `# time, object, size, ...`), nginx `combined`
//! access logs and bloomgate's own access logs ([`AccessLine`], combined or JSON), plain or gzip or
//! zstd compressed (chosen from the file's magic bytes).
//! [`SyntheticTrace`] generates Zipf-popular traces with one-hit wonders and log-normal sizes, and
//! [`TraceWriter`] saves any trace as CSV.

mod access_log;
mod cli;
mod error;
mod line;
mod reader;
mod size;
mod synthetic;
mod time_local;
mod writer;

pub use access_log::AccessLine;
pub use cli::{GenerateArgs, generate};
pub use error::TraceError;
pub use line::TraceFormat;
pub use reader::{Compression, ReadOptions, RequestRef, TraceInfo, TraceReader};
pub use size::{SYNTHESIZED_SIZE_RULE, synthesized_size};
pub use synthetic::SyntheticTrace;
pub use writer::TraceWriter;

/// One request of a trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// Seconds (or a sequence number where the source had no clock).
    pub time: f64,
    /// The object's id: a URL path, a cache key or an opaque id.
    pub key: String,
    /// The object's size in bytes: as recorded, or [`synthesized_size`] where the trace has none
    /// ([`TraceReader::sizes_synthesized`] says which).
    pub size: u64,
}
