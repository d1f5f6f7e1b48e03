#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod admission;
pub mod bloom;
pub mod metrics;
mod mode;
#[cfg(feature = "toml")]
pub mod table;

pub use admission::{
    Admission, Clock, Doorkeeper, DoorkeeperConfig, DoorkeeperConfigError, DoorkeeperSnapshotError,
    DoorkeeperStats, GenerationStats, ManualClock, RotationCounts, RotationReason, SystemClock,
};
pub use mode::Mode;
