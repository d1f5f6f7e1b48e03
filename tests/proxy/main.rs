//! End to end: the real `bloomgate serve` binary over real sockets (cache, ranges, clients,
//! faults, isolation, security and conformance, TLS both ways, admin, reload, persistence, the
//! access log, metrics and the dashboard), the config file it reads, and the systemd unit that
//! runs it.
//! One test crate per subject, so that it is linked once.

// The shared origin, proxy process and clients; everything in it is used by this crate.
#[path = "../common/mod.rs"]
mod common;

mod access_log;
mod admin;
mod attacks;
mod cache;
mod check_config_cli;
mod clients;
mod config_file;
mod conformance;
mod disconnect;
mod disk;
mod faults;
mod grafana_dashboard;
mod http1;
mod interim;
mod isolation;
mod metrics_promtool;
mod persist;
mod policy;
mod probation;
mod range_conformance;
mod ranges;
mod reload;
mod rfc9111;
mod security;
mod service_unit;
mod slices;
mod slices_disk;
mod status_page;
mod stderr_log;
mod tags;
mod tls;
mod upstreams;
mod version_cli;
