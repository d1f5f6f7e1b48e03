//! bloomgate: an HTTP caching reverse proxy that lets an object into its main cache only on its
//! second request (a first request's copy waits in probation, or is not stored at all, as
//! `admission.mode` says).
//!
//! The admission filter and the doorkeeper are a crate of their own (`crates/doorkeeper`, library
//! `doorkeeper`), which other proxies embed: `bloom` re-exports the filter, and `admission` the
//! doorkeeper beside the probation rules of bloomgate's store and simulator.
//!
//! The tools (`sim`, `trace`'s readers and generator, `traffic`, `demo`) are the default feature
//! `tools`; `--no-default-features` builds the proxy alone.

pub mod admission;
pub use doorkeeper::bloom;
pub mod cache;
pub mod config;
#[cfg(feature = "tools")]
pub mod demo;
pub mod listening;
pub mod proxy;
#[cfg(feature = "tools")]
pub mod sim;
pub mod telemetry;
pub mod tls;
pub mod trace;
#[cfg(feature = "tools")]
pub mod traffic;
