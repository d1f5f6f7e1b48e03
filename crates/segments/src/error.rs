//! The error opening an engine can fail with.

use std::io;
use std::path::PathBuf;

/// Why [`Engine::open`](crate::Engine::open) failed.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// An option is out of its range.
    #[error("segments: {option} = {value} {requirement}")]
    InvalidOption {
        /// The option's name, as the builder method spells it.
        option: &'static str,
        /// The value given.
        value: u64,
        /// What it must be.
        requirement: String,
    },
    /// A file or directory of the engine could not be created, opened or read.
    #[error("segments: {}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error the system reported.
        source: io::Error,
    },
    /// The writer thread could not be started.
    #[error("segments: could not start the writer thread: {0}")]
    Writer(io::Error),
}
