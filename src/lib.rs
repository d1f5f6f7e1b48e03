//! bloomgate: an HTTP caching reverse proxy that admits an object on its second request.
//!
//! The admission filter (`bloom`, `admission`) has no HTTP in it and can be embedded by other proxies.

pub mod admission;
pub mod bloom;
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
