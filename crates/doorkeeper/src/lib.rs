#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![warn(unreachable_pub)]

mod admission;
pub mod bloom;

pub use admission::{
    Admission, Clock, Doorkeeper, DoorkeeperBuilder, DoorkeeperConfig, DoorkeeperConfigError,
    DoorkeeperSnapshotError, DoorkeeperStats, GenerationStats, ManualClock, RotationCounts,
    RotationReason, SystemClock,
};
