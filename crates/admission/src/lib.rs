#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![warn(unreachable_pub)]

pub mod metrics;
mod mode;
pub mod table;

pub use mode::Mode;
