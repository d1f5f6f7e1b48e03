//! Active health checks: a GET of the probe path every `probe_interval`; `fall` failures in a
//! row take the server out of rotation, `rise` passes bring it back (HAProxy's `check`, Varnish's
//! `.probe`).

use std::sync::Arc;

use http::Uri;

use super::health::{Streak, now_ms};
use super::server::Server;
use crate::config::HealthConfig;
use crate::proxy::upstream::origin::OriginClient;

/// Probes `server` at `uri` until aborted.
pub async fn run(server: Arc<Server>, client: OriginClient, uri: Uri, health: HealthConfig) {
    let mut streak = Streak::default();
    let mut every = tokio::time::interval(health.probe_interval);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let passed = match client
            .probe(&server, uri.clone(), health.probe_timeout)
            .await
        {
            Ok(status) => status.as_u16() == health.expect_status,
            Err(error) => {
                tracing::debug!(server = %server.label, %error, "probe failed");
                false
            }
        };
        if let Some(up) = streak.count(passed, health.rise, health.fall) {
            server.probed(up);
        }
        // A passive hold that ran out ends here too, so the server's gauge says so without
        // waiting for a request to find it.
        server.available(now_ms());
    }
}
