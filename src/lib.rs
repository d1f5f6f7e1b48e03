//! bloomgate: an HTTP caching reverse proxy that admits an object on its second request.
//!
//! The admission filter is a crate of its own (`crates/doorkeeper`, library `doorkeeper`), which
//! other proxies embed; `bloom` and `admission` re-export it here.

pub mod admission;
pub use doorkeeper::bloom;
pub mod cache;
pub mod config;
pub mod demo;
pub mod listening;
pub mod proxy;
pub mod sim;
pub mod telemetry;
pub mod tls;
pub mod trace;
pub mod traffic;
