//! Request traces: reading them from files, making synthetic ones, and writing them back out.
//!
//! A trace is a sequence of [`Request`]s. [`TraceReader`] reads CSV with a header naming its columns
//! (`time,key,size`, or libCacheSim / Twitter-style `# time, object, size, ...`), nginx `combined`
//! access logs and bloomgate's own access logs ([`AccessLine`], combined or JSON), plain or gzip or
//! zstd compressed (chosen from the file's magic bytes).
//! [`SyntheticTrace`] generates Zipf-popular traces with one-hit wonders and log-normal sizes,
//! [`VideoTrace`] video sessions asking for byte ranges of large objects, and [`TraceWriter`]
//! saves any trace as CSV.

//!
//! Without the `tools` feature only [`AccessLine`] is built: the proxy writes its access log with
//! it, and reading logs back is the tools' business.

mod access_log;
#[cfg(feature = "tools")]
mod cli;
#[cfg(feature = "tools")]
mod error;
#[cfg(feature = "tools")]
mod line;
#[cfg(feature = "tools")]
mod range;
#[cfg(feature = "tools")]
mod reader;
#[cfg(feature = "tools")]
mod size;
#[cfg(feature = "tools")]
mod synthetic;
mod time_local;
#[cfg(feature = "tools")]
mod video;
#[cfg(feature = "tools")]
mod writer;

pub use access_log::AccessLine;
#[cfg(feature = "tools")]
pub use cli::{GenerateArgs, generate};
#[cfg(feature = "tools")]
pub use error::TraceError;
#[cfg(feature = "tools")]
pub use line::TraceFormat;
#[cfg(feature = "tools")]
pub use range::ByteRange;
#[cfg(feature = "tools")]
pub use reader::{Compression, ReadOptions, RequestRef, TraceInfo, TraceReader};
#[cfg(feature = "tools")]
pub use size::{SYNTHESIZED_SIZE_RULE, synthesized_size};
#[cfg(feature = "tools")]
pub use synthetic::SyntheticTrace;
#[cfg(feature = "tools")]
pub use video::VideoTrace;
#[cfg(feature = "tools")]
pub use writer::TraceWriter;

/// One request of a trace.
#[cfg(feature = "tools")]
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// Seconds (or a sequence number where the source had no clock).
    pub time: f64,
    /// The object's id: a URL path, a cache key or an opaque id.
    pub key: String,
    /// The object's size in bytes: as recorded, or [`synthesized_size`] where the trace has none
    /// ([`TraceReader::sizes_synthesized`] says which).
    pub size: u64,
    /// The byte range asked for, within `size`; `None` for the whole object.
    pub range: Option<ByteRange>,
}
