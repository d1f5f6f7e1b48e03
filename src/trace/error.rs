//! The trace boundary's error: every message names the file, and the line where there is one.

use std::path::PathBuf;

/// Why one line could not be parsed: the field and the message.
pub(super) type LineError = (&'static str, String);

/// Why a trace could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be opened or created.
    #[error("{}: {source}", path.display())]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Reading or decompressing failed at this line.
    #[error("{}:{line}: {source}", path.display())]
    Read {
        path: PathBuf,
        line: u64,
        source: std::io::Error,
    },
    /// The file is neither CSV with a header naming its columns nor an nginx combined log.
    #[error("{}:{line}: {message}", path.display())]
    Format {
        path: PathBuf,
        line: u64,
        message: String,
    },
    /// One field of one line could not be parsed ("trace.csv:17: size: invalid digit found in string").
    #[error("{}:{line}: {field}: {message}", path.display())]
    Field {
        path: PathBuf,
        line: u64,
        field: &'static str,
        message: String,
    },
    /// Writing a trace failed.
    #[error("{}: writing: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl TraceError {
    /// The 1-based line the error is about, if it is about one.
    pub fn line(&self) -> Option<u64> {
        match self {
            TraceError::Read { line, .. }
            | TraceError::Format { line, .. }
            | TraceError::Field { line, .. } => Some(*line),
            TraceError::Open { .. } | TraceError::Write { .. } => None,
        }
    }
}
