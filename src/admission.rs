//! The doorkeeper (crate `doorkeeper`), and the probation rules and frequency sketch of bloomgate's
//! store and simulator.

pub mod frequency;
pub mod probation;

pub use doorkeeper::{
    Admission, Clock, Doorkeeper, DoorkeeperConfig, DoorkeeperConfigError, DoorkeeperSnapshotError,
    DoorkeeperStats, GenerationStats, ManualClock, RotationCounts, RotationReason, SystemClock,
};
