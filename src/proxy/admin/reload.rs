//! Live configuration reload: re-read the file, keep the old configuration on any error, and swap
//! in what can change without dropping connections.

use std::sync::Arc;

use crate::admission::Doorkeeper;
use crate::config::{Config, ConfigErrors};
use crate::proxy::upstream::Routing;
use crate::proxy::upstream::origin::OriginClient;
use crate::proxy::{AccessLog, Live, Proxy, new_doorkeeper};
use crate::tls::Certificates;
use crate::tls::TlsError;

/// Why a reload changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("no config file to reload: the proxy runs on built-in defaults")]
    NoFile,
    #[error("config rejected, the running configuration is unchanged:\n{0}")]
    Invalid(ConfigErrors),
    #[error("TLS files rejected, the running configuration and certificates are unchanged: {0}")]
    Tls(#[from] TlsError),
}

/// What a successful reload did.
#[derive(Debug, Default)]
pub struct ReloadOutcome {
    /// Keys whose new values are in force.
    pub applied: Vec<&'static str>,
    /// Keys that changed in the file but take effect only after a restart.
    pub need_restart: Vec<&'static str>,
}

impl Proxy {
    /// Re-reads the config file the proxy was started with and applies it (see [`Proxy::apply`]).
    pub fn reload(&self) -> Result<ReloadOutcome, ReloadError> {
        let path = self.config_path.as_ref().ok_or(ReloadError::NoFile)?;
        let config = Config::load(path).map_err(ReloadError::Invalid)?;
        self.apply(config)
    }

    /// Applies a validated configuration. Requests in flight finish on the configuration they
    /// started with; new requests see the new one. The TLS files (the listener's certificate and
    /// key, an `https` origin's CA) are read first, every time: if any cannot be used, nothing
    /// changes and the error names the file.
    ///
    /// Live: origin (URL, timeouts, pool), upstream groups and routes (a server kept in the same
    /// group keeps its health state), the cache key rules, `cache.max_object_bytes`, the slicing
    /// of large objects (`cache.slice_above`, `cache.slice_bytes`), admission
    /// (thresholds keep the filters' memory; a new capacity or target rate starts fresh filters;
    /// a new snapshot path or interval applies from the next save),
    /// PURGE networks, shutdown grace, the HTTPS listener's certificate and key (connections
    /// already open keep theirs), the access log (a new file that cannot be opened is logged,
    /// and the log goes on as before; the next reload tries again).
    /// Listen addresses (adding or removing `[server.tls]` too), connection limits, header limits, the
    /// client timeouts (`server.idle_timeout`, `server.send_timeout`, `server.stream_send_timeout`:
    /// each serving thread reads them once, at start), the cache
    /// size and its split into segments (the store's budget is fixed) and the log level need a restart and are reported as such.
    pub fn apply(&self, config: Config) -> Result<ReloadOutcome, ReloadError> {
        let _serial = self
            .reloading
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let old = self.live();
        let mut outcome = ReloadOutcome::default();
        let was = &old.config;

        let tls_listen = |config: &Config| config.server.tls.as_ref().map(|tls| tls.listen);
        let restart_only: [(&'static str, bool); 14] = [
            ("server.listen", was.server.listen != config.server.listen),
            ("server.tls.listen", tls_listen(was) != tls_listen(&config)),
            (
                "server.max_connections",
                was.server.max_connections != config.server.max_connections,
            ),
            (
                "server.header_read_timeout",
                was.server.header_read_timeout != config.server.header_read_timeout,
            ),
            (
                "server.max_header_bytes",
                was.server.max_header_bytes != config.server.max_header_bytes,
            ),
            (
                "server.idle_timeout",
                was.server.idle_timeout != config.server.idle_timeout,
            ),
            (
                "server.send_timeout",
                was.server.send_timeout != config.server.send_timeout,
            ),
            (
                "server.stream_send_timeout",
                was.server.stream_send_timeout != config.server.stream_send_timeout,
            ),
            ("admin.listen", was.admin.listen != config.admin.listen),
            (
                "cache.max_variants",
                was.cache.max_variants != config.cache.max_variants,
            ),
            (
                "cache.max_bytes",
                was.cache.max_bytes != config.cache.max_bytes,
            ),
            (
                "admission.probation_share",
                was.admission.probation_share != config.admission.probation_share,
            ),
            ("log.level", was.log.level != config.log.level),
            ("disk", was.disk != config.disk),
        ];
        outcome.need_restart = restart_only
            .iter()
            .filter(|(_, changed)| *changed)
            .map(|(key, _)| *key)
            .collect();

        // The TLS files first, so that a bad one changes nothing. A CA file is read again even
        // when the key is unchanged: the file's content may be new.
        let https = config.upstreams().any_https();
        let origin = if was.origin != config.origin
            || was.upstreams().any_https() != https
            || config.origin.ca_file.is_some()
        {
            outcome.applied.push("origin");
            OriginClient::new(&config.origin, https)?
        } else {
            old.origin.clone()
        };
        if was.upstreams() != config.upstreams() {
            outcome.applied.push("upstreams");
        }
        // Servers the new configuration keeps keep their health; its probes replace the old.
        let routing = Routing::new(&config, Some(&old.routing));
        let certificate = match (&self.certificates, &config.server.tls) {
            (Some(certificates), Some(tls)) => Some((
                certificates,
                Certificates::read(&tls.cert_file, &tls.key_file)?,
            )),
            _ => None,
        };
        if let Some((certificates, fresh)) = certificate {
            certificates.install(fresh);
            outcome.applied.push("server.tls.certificate");
        }
        let doorkeeper = if was.admission != config.admission {
            outcome.applied.push("admission");
            carry_over(old.doorkeeper.as_deref(), &config)
        } else {
            old.doorkeeper.clone()
        };
        if was.cache.key != config.cache.key {
            outcome.applied.push("cache.key");
        }
        if was.cache.max_object_bytes != config.cache.max_object_bytes {
            outcome.applied.push("cache.max_object_bytes");
        }
        // Objects sliced another way are learnt again from their next request.
        if was.cache.slice_above != config.cache.slice_above {
            outcome.applied.push("cache.slice_above");
        }
        if was.cache.slice_bytes != config.cache.slice_bytes {
            outcome.applied.push("cache.slice_bytes");
        }
        if was.server.purge_allowed_networks != config.server.purge_allowed_networks {
            outcome.applied.push("server.purge_allowed_networks");
        }
        if was.server.shutdown_grace != config.server.shutdown_grace {
            outcome.applied.push("server.shutdown_grace");
        }
        // Compared with the log in use rather than the old file's text, so that a path that could
        // not be opened last time is tried again.
        let access_log = match AccessLog::reconfigure(old.access_log.as_ref(), &config.log.access) {
            Ok(log) => {
                let same = match (&log, &old.access_log) {
                    (Some(new), Some(old)) => Arc::ptr_eq(new, old),
                    (new, old) => new.is_none() && old.is_none(),
                };
                if !same {
                    outcome.applied.push("log.access");
                }
                log
            }
            Err(error) => {
                tracing::error!("{error}; the access log goes on as before");
                old.access_log.clone()
            }
        };
        let live = Arc::new(Live {
            config: Arc::new(config),
            origin,
            routing,
            doorkeeper,
            access_log,
        });
        old.routing.stop_probes();
        // A serving proxy reloads on its runtime; a configuration applied outside one (a test of
        // the configuration alone) has no probes to run.
        if tokio::runtime::Handle::try_current().is_ok() {
            live.routing.start_probes(&live.origin);
        }
        self.live.store(live);
        Ok(outcome)
    }
}

/// The doorkeeper for a new admission config: the old filters when their sizing still fits (new
/// thresholds or max age), fresh ones otherwise.
fn carry_over(old: Option<&Doorkeeper>, config: &Config) -> Option<Arc<Doorkeeper>> {
    if !config.uses_doorkeeper() {
        return None;
    }
    if let Some(old) = old
        && let Ok(restored) =
            Doorkeeper::restore(config.admission.doorkeeper.clone(), &old.snapshot())
    {
        return Some(Arc::new(restored));
    }
    new_doorkeeper(config)
}

/// Logs what a reload did, or why it changed nothing.
pub(crate) fn log_reload(result: Result<ReloadOutcome, ReloadError>) {
    match result {
        Ok(outcome) => {
            tracing::info!(applied = ?outcome.applied, "configuration reloaded");
            if !outcome.need_restart.is_empty() {
                tracing::warn!(keys = ?outcome.need_restart, "changed keys take effect only after a restart");
            }
        }
        Err(error) => tracing::error!("{error}"),
    }
}
