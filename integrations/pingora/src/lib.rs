//! Second-hit admission for any Pingora cache: bloomgate's doorkeeper as a `pingora-cache`
//! [`AdmissionPolicy`].
//!
//! `pingora-cache` asks an admission policy about every key its storage does not hold
//! ([`HttpCache::set_admission_policy`](pingora_cache::HttpCache::set_admission_policy)). This one
//! answers from the doorkeeper, a rotating pair of Bloom filters: a key not seen within the recent
//! window is deferred (served from the origin, not stored: `Defer { observed: 1 }`), a key seen
//! before may fill the cache (`Ready { observed: 2 }`). So objects requested once, most of a CDN's,
//! never cost a cache write, for about 1.2 bytes of memory per key instead of a map entry.
//!
//! ```no_run
//! use std::sync::LazyLock;
//! use std::time::Duration;
//! use bloomgate_pingora::DoorkeeperPolicy;
//!
//! static ADMISSION: LazyLock<DoorkeeperPolicy> = LazyLock::new(|| {
//!     DoorkeeperPolicy::from_toml("[admission]\ncapacity = 1000000\n").expect("valid [admission]")
//! });
//! // In `ProxyHttp::request_cache_filter`, after `session.cache.enable(...)`:
//! //     session.cache.set_admission_policy(&*ADMISSION);
//! let _timer = ADMISSION.start_rotation_timer(Duration::from_secs(10));
//! prometheus::register(Box::new(ADMISSION.collector())).expect("registered once");
//! ```

#![warn(unreachable_pub)]

mod collector;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use bloomgate_admission::Mode;
use bloomgate_admission::table::{AdmissionTable, TableErrors};
use doorkeeper::{Admission, Doorkeeper, DoorkeeperConfig};
use pingora_cache::CacheKey;
use pingora_cache::admission::{AdmissionPolicy, Decision};
use pingora_cache::key::CacheHashKey;

pub use collector::DoorkeeperCollector;

/// A `pingora-cache` admission policy over bloomgate's [`Doorkeeper`]: second-hit admission.
pub struct DoorkeeperPolicy {
    /// `None` for `admission.mode = "off"`: every key is ready at once.
    doorkeeper: Option<Arc<Doorkeeper>>,
    rotate_at_fpr: f64,
    counts: Arc<DecisionCounts>,
}

/// Decisions so far, exported as `bloomgate_admission_total{decision}`.
#[derive(Debug, Default)]
pub struct DecisionCounts {
    /// Keys deferred: first seen within the window.
    pub first_hit: AtomicU64,
    /// Keys ready: seen before (or admission off).
    pub admitted: AtomicU64,
}

impl DoorkeeperPolicy {
    /// A policy with a doorkeeper sized and rotated as `config` says.
    ///
    /// # Panics
    /// If `config` is out of range; check it with [`DoorkeeperConfig::validate`], or build the
    /// policy with [`Self::from_toml`], which reports every problem against its key.
    pub fn new(config: DoorkeeperConfig) -> DoorkeeperPolicy {
        let rotate_at_fpr = config.rotate_at_fpr;
        DoorkeeperPolicy {
            doorkeeper: Some(Arc::new(
                Doorkeeper::builder(config)
                    .build()
                    .unwrap_or_else(|e| panic!("{e}")),
            )),
            rotate_at_fpr,
            counts: Arc::default(),
        }
    }

    /// The policy an `[admission]` table describes, read by the parser bloomgate reads it with
    /// (the doorkeeper crate's [`AdmissionTable`]): the same keys, defaults, ranges and error
    /// messages as `bloomgate.toml` (`capacity`, `target_fpr`, `rotate_at_fpr`, `max_age`,
    /// `mode`). The text may be a whole `bloomgate.toml`: its other tables, and the `[admission]`
    /// keys only the proxy uses (`probation_share`, `snapshot_*`), are ignored; any other key in
    /// `[admission]` is an error.
    ///
    /// `mode = "off"` admits every key. Pingora's hook can only defer or admit, so it has no
    /// probation segment: `"probation"` (the default) and `"second-hit"` both mean second-hit here.
    pub fn from_toml(text: &str) -> Result<DoorkeeperPolicy, TableErrors> {
        Ok(DoorkeeperPolicy::from_table(&AdmissionTable::from_toml(
            text,
        )?))
    }

    /// The policy for an already read `[admission]` table (see [`Self::from_toml`]).
    pub fn from_table(admission: &AdmissionTable) -> DoorkeeperPolicy {
        match admission.mode {
            Mode::Off => DoorkeeperPolicy {
                doorkeeper: None,
                rotate_at_fpr: admission.doorkeeper.rotate_at_fpr,
                counts: Arc::default(),
            },
            Mode::Probation | Mode::SecondHit => {
                DoorkeeperPolicy::new(admission.doorkeeper.clone())
            }
        }
    }

    /// The doorkeeper, for its statistics or a snapshot; `None` with admission off.
    pub fn doorkeeper(&self) -> Option<&Arc<Doorkeeper>> {
        self.doorkeeper.as_ref()
    }

    /// Decisions made so far.
    pub fn counts(&self) -> &DecisionCounts {
        &self.counts
    }

    /// Checks every `period` whether the doorkeeper is due to rotate (`max_age`), from a thread of
    /// its own, until the returned timer is dropped. Rotations by fill happen on `observe` itself;
    /// the timer is for a proxy that goes quiet, whose old keys must still age out.
    pub fn start_rotation_timer(&self, period: Duration) -> RotationTimer {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let thread = self.doorkeeper.clone().map(|doorkeeper| {
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("bloomgate-rotation".into())
                .spawn(move || {
                    let (stopped, wake) = &*stop;
                    let mut stopped = stopped.lock().unwrap_or_else(PoisonError::into_inner);
                    while !*stopped {
                        doorkeeper.rotate_if_due();
                        stopped = wake
                            .wait_timeout(stopped, period)
                            .unwrap_or_else(PoisonError::into_inner)
                            .0;
                    }
                })
                .expect("spawning the rotation timer thread")
        });
        RotationTimer { stop, thread }
    }

    /// A Prometheus collector of the doorkeeper's gauges and the decisions, under the metric
    /// names bloomgate's own `/metrics` uses. Register it once (Pingora's `pingora-prometheus`
    /// serves `prometheus::default_registry()`).
    pub fn collector(&self) -> DoorkeeperCollector {
        DoorkeeperCollector::new(
            self.doorkeeper.clone(),
            self.rotate_at_fpr,
            Arc::clone(&self.counts),
        )
    }

    fn decide(&self, doorkeeper: &Doorkeeper, key: &CacheKey) -> Admission {
        // Pingora's own hash of the key (the primary's, combined with the variance's when the
        // response varies), which its storage computes anyway: no string is rebuilt. The user tag
        // keeps tenants apart, as Pingora's `CompactCacheKey` does; the two are hashed in turn,
        // with no buffer between them.
        let hash = key.combined_bin();
        doorkeeper.observe_parts(&[&hash, key.user_tag().as_bytes()])
    }
}

impl AdmissionPolicy for DoorkeeperPolicy {
    fn observe(&self, key: &CacheKey) -> Decision {
        let admission = match &self.doorkeeper {
            Some(doorkeeper) => self.decide(doorkeeper, key),
            None => Admission::SeenBefore,
        };
        match admission {
            Admission::FirstSeen => {
                self.counts.first_hit.fetch_add(1, Ordering::Relaxed);
                Decision::Defer { observed: 1 }
            }
            Admission::SeenBefore => {
                self.counts.admitted.fetch_add(1, Ordering::Relaxed);
                Decision::Ready { observed: 2 }
            }
        }
    }
}

/// The thread started by [`DoorkeeperPolicy::start_rotation_timer`]; dropping it stops the thread.
pub struct RotationTimer {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for RotationTimer {
    fn drop(&mut self) {
        let (stopped, wake) = &*self.stop;
        *stopped.lock().unwrap_or_else(PoisonError::into_inner) = true;
        wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(capacity: u64) -> DoorkeeperPolicy {
        DoorkeeperPolicy::new(DoorkeeperConfig {
            capacity,
            target_fpr: 0.01,
            rotate_at_fpr: 0.02,
            max_age: Duration::from_secs(3600),
        })
    }

    #[test]
    fn a_key_is_deferred_on_its_first_observation_and_ready_after() {
        let policy = policy(10_000);
        let key = CacheKey::new("example.com/a.jpg", "");
        assert_eq!(policy.observe(&key), Decision::Defer { observed: 1 });
        assert_eq!(policy.observe(&key), Decision::Ready { observed: 2 });
        assert_eq!(policy.observe(&key), Decision::Ready { observed: 2 });
        let other = CacheKey::new("example.com/b.jpg", "");
        assert!(policy.observe(&other).is_deferred());
        assert_eq!(policy.counts().first_hit.load(Ordering::Relaxed), 2);
        assert_eq!(policy.counts().admitted.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn variance_and_user_tag_make_different_keys() {
        let policy = policy(10_000);
        let plain = CacheKey::new("example.com/v", "");
        assert!(policy.observe(&plain).is_deferred());
        let mut varied = CacheKey::new("example.com/v", "");
        varied.set_variance_key(pingora_cache::key::hash_key("gzip"));
        assert!(policy.observe(&varied).is_deferred(), "another variant");
        assert!(!policy.observe(&varied).is_deferred());
        let tenant = CacheKey::new("example.com/v", "tenant-b");
        assert!(policy.observe(&tenant).is_deferred(), "another tenant");
        let long = CacheKey::new("example.com/v", "t".repeat(100));
        assert!(policy.observe(&long).is_deferred());
        assert!(!policy.observe(&long).is_deferred());
    }

    #[test]
    fn the_admission_table_is_read_as_bloomgate_reads_it() {
        let policy = DoorkeeperPolicy::from_toml(
            "[admission]\ncapacity = 5000\nrotate_at_fpr = 0.05\nmax_age = \"30m\"\n",
        )
        .expect("valid");
        let door = policy.doorkeeper().expect("admission on");
        assert_eq!(door.config().capacity, 5000);
        assert_eq!(door.config().max_age, Duration::from_secs(1800));
        let errors = DoorkeeperPolicy::from_toml("[admission]\ncapacity = 0\nflavour = 1\n")
            .err()
            .expect("invalid");
        let text = errors.to_string();
        assert!(text.contains("admission.capacity"), "{text}");
        assert!(text.contains("admission.flavour"), "{text}");
        let proxy_only = "[admission]\nprobation_share = 0.2\nsnapshot_interval = \"1m\"\n";
        assert!(DoorkeeperPolicy::from_toml(proxy_only).is_ok());
        let off = DoorkeeperPolicy::from_toml("[admission]\nmode = \"off\"\n").expect("valid");
        let key = CacheKey::new("k", "");
        assert_eq!(off.observe(&key), Decision::Ready { observed: 2 });
        assert!(off.doorkeeper().is_none());
    }

    #[test]
    fn the_rotation_timer_rotates_an_idle_doorkeeper_on_max_age() {
        let policy = DoorkeeperPolicy::from_toml("[admission]\nmax_age = \"50ms\"\n").expect("ok");
        let key = CacheKey::new("idle", "");
        assert!(policy.observe(&key).is_deferred());
        let door = Arc::clone(policy.doorkeeper().expect("on"));
        let timer = policy.start_rotation_timer(Duration::from_millis(10));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while door.stats().rotations.max_age < 2 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        drop(timer);
        assert!(door.stats().rotations.max_age >= 2, "{:?}", door.stats());
        // Two generations later the key is forgotten: first seen again.
        assert!(policy.observe(&key).is_deferred());
    }
}
