//! The caching reverse proxy: the request path (one `Exchange` per request: `handler.rs`, a miss
//! in `fetch.rs` and `forward.rs`, its outcome in `served.rs`), its listeners and its admin
//! endpoints.

mod admin;
mod outcome;
mod request;
mod response;
mod server;
mod upstream;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use crate::admission::Doorkeeper;
use crate::admission::probation::Budget;
use crate::cache::disk::DiskTier;
use crate::cache::{Store, TagPurges};
use crate::config::Config;
use crate::telemetry::{DoorkeeperState, ScrapeState};
use crate::tls::{Certificates, TlsError};

pub use admin::persist::{SnapshotLoadError, SnapshotSaveError};
pub use admin::reload::{ReloadError, ReloadOutcome};
pub use outcome::access_log::{AccessLog, AccessLogError};
pub use outcome::served::{CACHE_NAME, Fwd};
pub use request::exchange::{Route, TranslateError, translate};
pub use server::h1;
pub use server::{RunningProxy, ServeError, Signals, start, start_with_disk, start_with_file};

use request::coalesce::Coalescer;
use request::slices::SlicedObjects;
use upstream::Routing;
use upstream::origin::OriginClient;

/// What a configuration reload can swap while requests run: each request reads one `Live`.
pub struct Live {
    pub config: Arc<Config>,
    pub origin: OriginClient,
    /// The upstream groups, their servers' health, and the routes to them.
    pub routing: Routing,
    pub doorkeeper: Option<Arc<Doorkeeper>>,
    /// Where requests write their lines, when `log.access.path` is set.
    pub access_log: Option<Arc<AccessLog>>,
}

impl Live {
    /// The live state for a configuration: its origin client and routing (without probes, which
    /// a serving proxy starts), and a fresh doorkeeper when admission is on; no access log (it
    /// is a file the serving proxy opens). Fails only on an `https` origin's TLS files.
    pub fn new(config: Config) -> Result<Live, TlsError> {
        Ok(Live {
            origin: OriginClient::new(&config.origin, config.upstreams().any_https())?,
            routing: Routing::new(&config, None),
            doorkeeper: new_doorkeeper(&config),
            access_log: None,
            config: Arc::new(config),
        })
    }
}

/// Everything one request needs: the live configuration with its origin client and doorkeeper,
/// the store, and the fetches in flight.
pub struct Proxy {
    live: ArcSwap<Live>,
    store: Store,
    /// The tier below the store, when `disk.path` is set: fed by the store's evictions.
    disk: Option<Arc<DiskTier>>,
    flights: Arc<Coalescer>,
    /// The large objects cached in slices, and those whose origin would not slice them.
    sliced: SlicedObjects,
    /// Purges of tags, applied to entries as they are looked up; saved in `disk.path` with a
    /// disk tier.
    tag_purges: TagPurges,
    /// The file `reload` re-reads; `None` when running on built-in defaults.
    config_path: Option<PathBuf>,
    /// The HTTPS listener's certificate, when `[server.tls]` is set: read again on reload.
    certificates: Option<Arc<Certificates>>,
    /// Serialises reloads (SIGHUP and the admin endpoint may race).
    reloading: Mutex<()>,
    /// Serialises snapshot saves (the periodic one and the one at shutdown may race).
    saving: Mutex<()>,
}

impl Proxy {
    /// A proxy for `config`; its doorkeeper resumes from `admission.snapshot_path` when that file
    /// holds a usable snapshot (read here, before serving starts). With a disk tier, the entries
    /// the store evicts are offered to it; with an access log (opened from `log.access`),
    /// requests write their lines to it. Fails on TLS files that cannot be used (the listener's
    /// certificate and key, an `https` origin's CA), naming the file.
    pub fn new(
        config: Config,
        config_path: Option<PathBuf>,
        disk: Option<Arc<DiskTier>>,
        access_log: Option<Arc<AccessLog>>,
    ) -> Result<Proxy, TlsError> {
        let origin = OriginClient::new(&config.origin, config.upstreams().any_https())?;
        let routing = Routing::new(&config, None);
        let certificates = match &config.server.tls {
            Some(tls) => Some(Arc::new(Certificates::load(&tls.cert_file, &tls.key_file)?)),
            None => None,
        };
        let doorkeeper = admin::persist::restore_or_new(&config);
        let budget = Budget::new(config.cache.max_bytes, config.admission.probation_share);
        let store = match &disk {
            Some(disk) => {
                let disk = Arc::clone(disk);
                Store::with_eviction_listener(
                    budget,
                    config.cache.max_variants,
                    Box::new(move |evicted| disk.offer(evicted)),
                )
            }
            None => Store::new(budget, config.cache.max_variants),
        };
        let tag_purges = match &config.disk.path {
            Some(dir) => {
                let (purges, error) = TagPurges::open(dir);
                if let Some(error) = error {
                    tracing::error!(%error, "starting with no purges by tag");
                }
                purges
            }
            None => TagPurges::in_memory(),
        };
        Ok(Proxy {
            store,
            disk,
            tag_purges,
            flights: Arc::new(Coalescer::default()),
            sliced: SlicedObjects::default(),
            live: ArcSwap::from_pointee(Live {
                origin,
                routing,
                doorkeeper,
                access_log,
                config: Arc::new(config),
            }),
            config_path,
            certificates,
            reloading: Mutex::new(()),
            saving: Mutex::new(()),
        })
    }

    /// Starts the live configuration's health probes, on the current runtime.
    pub fn start_probes(&self) {
        let live = self.live();
        live.routing.start_probes(&live.origin);
    }

    /// The HTTPS listener's certificate store, when there is one.
    pub fn certificates(&self) -> Option<&Arc<Certificates>> {
        self.certificates.as_ref()
    }

    /// The configuration, origin client and doorkeeper in force now.
    pub fn live(&self) -> Arc<Live> {
        self.live.load_full()
    }

    pub fn config(&self) -> Arc<Config> {
        Arc::clone(&self.live.load().config)
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn disk(&self) -> Option<&Arc<DiskTier>> {
        self.disk.as_ref()
    }

    pub fn doorkeeper(&self) -> Option<Arc<Doorkeeper>> {
        self.live.load().doorkeeper.clone()
    }

    /// Reopens the access log's file by its path (logrotate's `postrotate`), if there is one.
    pub fn reopen_access_log(&self) {
        if let Some(log) = &self.live.load().access_log {
            log.reopen();
        }
    }

    /// Samples what the metrics exporter reports, at scrape time.
    pub fn scrape_state(&self) -> ScrapeState {
        let live = self.live();
        live.routing.end_expired_holds();
        let usage = self.store.usage();
        let counters = self.store.counters();
        let each =
            |counters: &[AtomicU64; 2]| counters.each_ref().map(|c| c.load(Ordering::Relaxed));
        ScrapeState {
            doorkeeper: live.doorkeeper.as_ref().map(|door| {
                let settings = &live.config.admission.doorkeeper;
                DoorkeeperState {
                    stats: door.stats(),
                    rotate_at_fpr: settings.rotate_at_fpr,
                    capacity: settings.capacity,
                    max_age: settings.max_age,
                }
            }),
            cache_entries: usage.entries,
            cache_bytes: usage.bytes,
            cache_write_back_bytes: usage.write_back_bytes,
            cache_writes: each(&counters.writes),
            cache_written_bytes: each(&counters.written_bytes),
            cache_max_bytes: self.store.budget().total(),
            cache_promotions: counters.promotions.load(Ordering::Relaxed),
            cache_evictions: counters.evictions.load(Ordering::Relaxed),
            cache_expirations: counters.expirations.load(Ordering::Relaxed),
            disk: self.disk.as_ref().map(|disk| disk.stats()),
        }
    }
}

fn new_doorkeeper(config: &Config) -> Option<Arc<Doorkeeper>> {
    config.uses_doorkeeper().then(|| {
        Arc::new(
            Doorkeeper::builder(config.admission.doorkeeper.clone())
                .build()
                .expect("admission config validated when read"),
        )
    })
}
