//! The caching reverse proxy: the request path of DESIGN.md, its listeners and its admin endpoints.

mod admin;
mod coalesce;
mod handler;
mod headers;
mod origin;
mod server;
mod status;
mod stream;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::admission::{Doorkeeper, DoorkeeperConfig};
use crate::cache::Store;
use crate::config::Config;
use crate::telemetry::ScrapeState;

pub use coalesce::{Coalescer, FlightOutcome};
pub use handler::ProxyBody;
pub use origin::{OriginClient, OriginError};
pub use server::{RunningProxy, ServeError, start};
pub use status::{CACHE_NAME, CacheStatus};

/// Everything one request needs: configuration, the store, the doorkeeper, the origin client and
/// the fetches in flight.
pub struct Proxy {
    config: Arc<Config>,
    store: Store,
    doorkeeper: Option<Doorkeeper>,
    origin: OriginClient,
    flights: Arc<Coalescer>,
}

impl Proxy {
    pub fn new(config: Config) -> Proxy {
        let doorkeeper = config.admission.enabled.then(|| {
            Doorkeeper::new(DoorkeeperConfig {
                capacity: config.admission.capacity,
                target_fpr: config.admission.target_fpr,
                rotate_at_fpr: config.admission.rotate_at_fpr,
                max_age: config.admission.max_age,
            })
        });
        Proxy {
            store: Store::new(config.cache.max_bytes),
            origin: OriginClient::new(&config.origin),
            flights: Arc::new(Coalescer::default()),
            doorkeeper,
            config: Arc::new(config),
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn doorkeeper(&self) -> Option<&Doorkeeper> {
        self.doorkeeper.as_ref()
    }

    /// Samples what the metrics exporter reports, at scrape time.
    pub fn scrape_state(&self) -> ScrapeState {
        let (cache_entries, cache_bytes) = self.store.usage();
        let counters = self.store.counters();
        ScrapeState {
            doorkeeper: self.doorkeeper.as_ref().map(|door| {
                (
                    door.stats(),
                    self.config.admission.rotate_at_fpr,
                    self.config.admission.capacity,
                )
            }),
            cache_entries,
            cache_bytes,
            cache_max_bytes: self.config.cache.max_bytes,
            cache_writes: counters.writes.load(Ordering::Relaxed),
            cache_written_bytes: counters.written_bytes.load(Ordering::Relaxed),
            cache_evictions: counters.evictions.load(Ordering::Relaxed),
            cache_expirations: counters.expirations.load(Ordering::Relaxed),
        }
    }
}
