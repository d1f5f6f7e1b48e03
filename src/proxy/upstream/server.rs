//! One origin server of a group: its URL and weight, its shared health state, and its metric
//! series (registered when the configuration is built, so a request only adds to atomics).

use std::sync::Arc;
use std::time::Duration;

use http::Uri;
use http::uri::PathAndQuery;
use metrics::{Counter, Gauge, Histogram, counter, gauge, histogram};

use super::health::{Change, ServerState, now_ms};
use crate::config::{HealthConfig, UpstreamServer};
use crate::telemetry::{
    UPSTREAM_ERRORS_TOTAL, UPSTREAM_HEALTH_CHANGES_TOTAL, UPSTREAM_HEALTHY,
    UPSTREAM_REQUESTS_TOTAL, UPSTREAM_RESPONSE_SECONDS, recorder,
};

/// How a request to a server failed, for `bloomgate_upstream_errors_total{kind}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    Connect,
    Timeout,
    Tls,
    Protocol,
}

impl ErrorKind {
    pub const ALL: [ErrorKind; 4] = [
        ErrorKind::Connect,
        ErrorKind::Timeout,
        ErrorKind::Tls,
        ErrorKind::Protocol,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect_error",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Tls => "tls_error",
            ErrorKind::Protocol => "protocol_error",
        }
    }
}

/// A server's series, labelled `{upstream, server}`.
struct ServerSeries {
    requests: Counter,
    errors: [Counter; ErrorKind::ALL.len()],
    response: Histogram,
    healthy: Gauge,
    /// Held while `healthy` is set: see [`Server::changed`].
    healthy_set: std::sync::Mutex<()>,
    changes: [Counter; Change::ALL.len()],
}

impl ServerSeries {
    fn new(upstream: &str, server: &str) -> ServerSeries {
        let _ = recorder();
        let (upstream, server) = (upstream.to_owned(), server.to_owned());
        let labels = [("upstream", upstream.clone()), ("server", server.clone())];
        ServerSeries {
            requests: counter!(UPSTREAM_REQUESTS_TOTAL, &labels),
            errors: ErrorKind::ALL.map(|kind| {
                counter!(UPSTREAM_ERRORS_TOTAL, "upstream" => upstream.clone(), "server" => server.clone(), "kind" => kind.as_str())
            }),
            response: histogram!(UPSTREAM_RESPONSE_SECONDS, &labels),
            healthy: gauge!(UPSTREAM_HEALTHY, &labels),
            healthy_set: std::sync::Mutex::new(()),
            changes: Change::ALL.map(|change| {
                counter!(UPSTREAM_HEALTH_CHANGES_TOTAL, "upstream" => upstream.clone(), "server" => server.clone(), "to" => change.as_str())
            }),
        }
    }
}

pub struct Server {
    pub url: Uri,
    /// The URL as written in logs and metric labels (`http://10.0.0.1:8080`).
    pub label: Arc<str>,
    pub weight: u32,
    pub backup: bool,
    /// A fixed hash of the URL, for the consistent hash.
    pub seed: u64,
    pub state: Arc<ServerState>,
    max_fails: u32,
    fail_timeout: Duration,
    series: ServerSeries,
}

impl Server {
    /// The server of group `upstream` that `config` describes, with `state` (a fresh one, or the
    /// one it had before a reload).
    pub fn new(
        upstream: &str,
        config: &UpstreamServer,
        health: &HealthConfig,
        state: Arc<ServerState>,
    ) -> Server {
        let label: Arc<str> = label(&config.url).into();
        let series = ServerSeries::new(upstream, &label);
        let server = Server {
            url: config.url.clone(),
            seed: super::balance::seed(&label),
            label,
            weight: config.weight,
            backup: config.backup,
            state,
            max_fails: health.max_fails,
            fail_timeout: health.fail_timeout,
            series,
        };
        let (available, _) = server.state.available(now_ms());
        server.series.healthy.set(f64::from(u8::from(available)));
        server
    }

    /// The server's URI for a request's path and query.
    pub fn uri_for(&self, target: PathAndQuery) -> Result<Uri, http::uri::InvalidUriParts> {
        let mut parts = self.url.clone().into_parts();
        parts.path_and_query = Some(target);
        Uri::from_parts(parts)
    }

    /// Whether the server is in rotation at `now` (see [`ServerState::available`]).
    pub fn available(&self, now: u64) -> bool {
        let (available, change) = self.state.available(now);
        self.changed(change);
        available
    }

    /// Counts a request sent, until its response head comes (or it fails) and the guard drops.
    pub fn begin(&self) -> Outstanding<'_> {
        self.series.requests.increment(1);
        self.state
            .outstanding
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Outstanding(self)
    }

    /// A response head came after `elapsed`.
    pub fn answered(&self, elapsed: Duration) {
        self.series.response.record(elapsed.as_secs_f64());
        self.state.answered();
    }

    /// The request failed before a response head: counted, and held against the server unless
    /// the failure is the response's own (`Protocol`: the server answered something unusable).
    pub fn failed(&self, kind: ErrorKind) {
        self.series.errors[kind as usize].increment(1);
        if kind != ErrorKind::Protocol {
            let change = self
                .state
                .failed(now_ms(), self.max_fails, self.fail_timeout);
            if change.is_some() {
                tracing::warn!(server = %self.label, kind = kind.as_str(), "server out of rotation (passive health check)");
            }
            self.changed(change);
        }
    }

    /// Applies what the probes found.
    pub fn probed(&self, up: bool) {
        let change = self.state.probed(up, now_ms());
        if let Some(change) = change {
            tracing::warn!(server = %self.label, to = change.as_str(), "server health changed (probe)");
        }
        self.changed(change);
    }

    /// Counts a change and sets the gauge. Changes race (a passive hold ends as a new failure
    /// starts another), so the gauge is set from the state as it stands, under a lock: whichever
    /// change sets it last reads the latest state, and the gauge cannot be left saying "up" for a
    /// server out of rotation.
    fn changed(&self, change: Option<Change>) {
        if let Some(change) = change {
            self.series.changes[change as usize].increment(1);
            let _setting = self
                .series
                .healthy_set
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let up = self.state.in_rotation(now_ms());
            self.series.healthy.set(f64::from(u8::from(up)));
        }
    }
}

/// How a server is named in logs, metric labels and a reload's carry-over: its URL without the
/// trailing `/` (`http://10.0.0.1:8080`).
pub fn label(url: &Uri) -> String {
    let mut label = url.to_string();
    if label.ends_with('/') {
        label.pop();
    }
    label
}

/// A request in flight to a server (for least-outstanding balancing).
pub struct Outstanding<'s>(&'s Server);

impl Drop for Outstanding<'_> {
    fn drop(&mut self) {
        let outstanding = &self.0.state.outstanding;
        outstanding.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}
