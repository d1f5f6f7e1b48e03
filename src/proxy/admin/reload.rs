//! Live configuration reload: re-read the file, keep the old configuration on any error, and swap
//! in what can change without dropping connections.

use std::sync::Arc;

use crate::admission::Doorkeeper;
use crate::config::{Config, ConfigErrors, Reload};
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
    /// Keys whose new values are in force (and `server.tls.certificate` when the listener's
    /// certificate files hold a new one).
    pub applied: Vec<&'static str>,
    /// Keys whose values in the file differ from those in force, which only a restart changes.
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
    /// Which keys apply and which wait for a restart is the key table's
    /// ([`crate::config::KEYS`]); the file is compared with the configuration in force, whose
    /// restart-only keys keep their values from the start. Applying: a server kept in the same
    /// group keeps its health state; admission thresholds keep the filters' memory (a new
    /// capacity or target rate starts fresh filters); connections already open keep their
    /// certificate; a new access log file that cannot be opened is logged, and the log goes on
    /// as before (the next reload tries again).
    pub fn apply(&self, config: Config) -> Result<ReloadOutcome, ReloadError> {
        let _serial = self
            .reloading
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let old = self.live();
        let was = &old.config;
        let Reload {
            mut config,
            mut applied,
            need_restart,
        } = was.reload(&config).map_err(ReloadError::Invalid)?;

        // The TLS files first, so that a bad one changes nothing. A CA file is read again even
        // when the key is unchanged: the file's content may be new.
        let https = config.upstreams().any_https();
        let origin = if was.origin != config.origin
            || was.upstreams().any_https() != https
            || config.origin.ca_file.is_some()
        {
            OriginClient::new(&config.origin, https)?
        } else {
            old.origin.clone()
        };
        // Servers the new configuration keeps keep their health; its probes replace the old.
        let routing = Routing::new(&config, Some(&old.routing));
        let certificate = match (&self.certificates, &config.server.tls) {
            (Some(certificates), Some(tls)) => Some((
                certificates,
                Certificates::read(&tls.cert_file, &tls.key_file)?,
            )),
            _ => None,
        };
        if let Some((certificates, fresh)) = certificate
            && certificates.install(fresh)
        {
            applied.push("server.tls.certificate");
        }
        let doorkeeper = if was.admission != config.admission {
            carry_over(old.doorkeeper.as_deref(), &config)
        } else {
            old.doorkeeper.clone()
        };
        // Compared with the log in use rather than the old file's text, so that a path that could
        // not be opened last time is tried again.
        let access_log = match AccessLog::reconfigure(old.access_log.as_ref(), &config.log.access) {
            Ok(log) => log,
            Err(error) => {
                tracing::error!("{error}; the access log goes on as before");
                config.log.access = was.log.access.clone();
                applied.retain(|key| !key.starts_with("log.access."));
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
        Ok(ReloadOutcome {
            applied,
            need_restart,
        })
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
            Doorkeeper::builder(config.admission.doorkeeper.clone()).restore(&old.snapshot())
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
