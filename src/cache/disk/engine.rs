//! The storage engine under the disk tier, behind the crate's own trait: the request path sees
//! keyed records, never the engine.
//!
//! [`FoyerEngine`] is foyer's block engine (pinned): records are appended to large blocks written
//! sequentially, each entry checksummed, the index rebuilt from the blocks at start, whole blocks
//! reclaimed oldest first when the device is full, and deletions kept in a tombstone log so a
//! purged entry does not come back after a restart.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use foyer::{
    BlockEngineConfig, Cache, CacheBuilder, CacheProperties, DefaultHasher, DeviceBuilder,
    FsDeviceBuilder, Load, PsyncIoEngineConfig, RecoverMode, Statistics, StorageFilter,
    StorageFilterCondition, StorageFilterResult, Store, StoreBuilder,
};

pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What the disk tier needs of a storage engine: records under string keys, written in the
/// background, read back whole and verified, or not at all.
pub trait DiskEngine: Send + Sync + 'static {
    /// Queues `record` to be written under `key`, replacing any older one.
    fn put(&self, key: &str, record: Bytes);
    /// The record under `key`: `Ok(None)` when there is none, or when the one there failed its
    /// checksum (the engine drops it; see [`EngineCounters::dropped`]).
    fn get(&self, key: &str) -> BoxFuture<std::io::Result<Option<Bytes>>>;
    /// Removes the record under `key`, now and across restarts.
    fn remove(&self, key: &str);
    /// Whether a record may be stored under `key` (no false negatives).
    fn may_contain(&self, key: &str) -> bool;
    /// Bytes the engine has written to its files since it opened, by its own count.
    fn written_bytes(&self) -> u64;
    /// Waits for the writes queued so far to reach the files.
    fn wait(&self) -> BoxFuture<()>;
    /// Waits for queued writes, then refuses new ones.
    fn close(&self) -> BoxFuture<()>;
}

/// How the engine is laid out; see `[disk]` in `config/bloomgate.toml`.
#[derive(Clone, Debug)]
pub struct EngineOptions {
    pub dir: PathBuf,
    pub max_bytes: u64,
    pub block_bytes: u64,
    pub write_buffer: u64,
}

/// Counters the engine keeps that its own API does not report.
#[derive(Debug, Default)]
pub struct EngineCounters {
    /// Entries in blocks reclaimed to make room.
    pub reclaimed: AtomicU64,
    /// Entries the index named but that failed their checksum or would not decode when read.
    pub dropped: AtomicU64,
}

/// What opening the engine found.
#[derive(Clone, Copy, Debug, Default)]
pub struct Recovery {
    pub entries: u64,
    pub elapsed: Duration,
}

/// foyer's block engine over files in one directory.
pub struct FoyerEngine {
    store: Store<String, Bytes, DefaultHasher, CacheProperties>,
    /// foyer hands the engine "pieces" of in-memory cache entries; this cache only makes them
    /// (each entry is removed as soon as its piece is queued).
    pieces: Cache<String, Bytes>,
    counters: Arc<EngineCounters>,
}

impl FoyerEngine {
    /// Opens (creating if needed) the engine in `options.dir`, recovering its index from the
    /// blocks there; torn or corrupt entries are skipped.
    pub async fn open(
        options: &EngineOptions,
        counters: Arc<EngineCounters>,
    ) -> Result<(FoyerEngine, Recovery), foyer::Error> {
        let started = Instant::now();
        let device = FsDeviceBuilder::new(&options.dir)
            .with_capacity(to_usize(options.max_bytes))
            .build()?;
        let pieces: Cache<String, Bytes> = CacheBuilder::new(1024).build();
        let metrics = Arc::new(foyer_common::metrics::Metrics::noop());
        let engine = BlockEngineConfig::new(device)
            .with_block_size(to_usize(options.block_bytes))
            .with_buffer_pool_size(to_usize(options.write_buffer))
            .with_submit_queue_size_threshold(to_usize(options.write_buffer))
            .with_tombstone_log(true)
            .with_reinsertion_filter(
                StorageFilter::new().with_condition(CountReclaimed(Arc::clone(&counters))),
            );
        let (store, recovered) = recovery::counting(
            StoreBuilder::new("bloomgate-disk", pieces.clone(), metrics)
                .with_io_engine_config(PsyncIoEngineConfig::new())
                .with_engine_config(engine)
                .with_recover_mode(RecoverMode::Quiet)
                .build(),
        )
        .await;
        let store = store?;
        let recovery = Recovery {
            entries: recovered,
            elapsed: started.elapsed(),
        };
        Ok((
            FoyerEngine {
                store,
                pieces,
                counters,
            },
            recovery,
        ))
    }
}

impl DiskEngine for FoyerEngine {
    fn put(&self, key: &str, record: Bytes) {
        let entry = self.pieces.insert(key.to_owned(), record);
        let piece = entry.piece();
        drop(entry);
        self.pieces.remove(key);
        self.store.enqueue(piece, true);
    }

    fn get(&self, key: &str) -> BoxFuture<std::io::Result<Option<Bytes>>> {
        let store = self.store.clone();
        let counters = Arc::clone(&self.counters);
        let key = key.to_owned();
        Box::pin(async move {
            let indexed = store.may_contains(&key);
            match store.load(&key).await {
                Ok(Load::Entry { value, .. }) => Ok(Some(value)),
                Ok(Load::Piece { piece, .. }) => Ok(Some(piece.value().clone())),
                Ok(Load::Miss) | Ok(Load::Throttled) => {
                    // The index named an entry and the engine refused it: a torn or corrupt
                    // entry, dropped by the engine (also counted: a record whose block was
                    // reclaimed between the two looks, and a 64-bit hash collision).
                    if indexed {
                        counters.dropped.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(None)
                }
                Err(error) => Err(std::io::Error::other(error)),
            }
        })
    }

    fn remove(&self, key: &str) {
        self.store.delete(key);
    }

    fn may_contain(&self, key: &str) -> bool {
        self.store.may_contains(key)
    }

    fn written_bytes(&self) -> u64 {
        self.store.device().statistics().disk_write_bytes() as u64
    }

    fn wait(&self) -> BoxFuture<()> {
        let store = self.store.clone();
        Box::pin(async move { store.wait().await })
    }

    fn close(&self) -> BoxFuture<()> {
        let store = self.store.clone();
        Box::pin(async move {
            if let Err(error) = store.close().await {
                tracing::warn!(%error, "disk tier did not close cleanly");
            }
        })
    }
}

/// Sees every entry of a block being reclaimed (foyer asks whether to reinsert it) and counts
/// it; reinserts none.
#[derive(Debug)]
struct CountReclaimed(Arc<EngineCounters>);

impl StorageFilterCondition for CountReclaimed {
    fn filter(&self, _: &Arc<Statistics>, _hash: u64, _size: usize) -> StorageFilterResult {
        self.0.reclaimed.fetch_add(1, Ordering::Relaxed);
        StorageFilterResult::Reject
    }
}

fn to_usize(bytes: u64) -> usize {
    usize::try_from(bytes).unwrap_or(usize::MAX)
}

/// The files the engine keeps in `dir` (its blocks and tombstone log), for disk usage.
pub fn engine_files(dir: &Path) -> impl Iterator<Item = PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with("foyer-storage-"))
        })
}

mod recovery {
    //! foyer reports how many entries it recovered only in a log line; this listens for that line
    //! while the engine opens, and passes every event on to the subscriber in force.

    use std::future::Future;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use tracing::field::{Field, Visit};
    use tracing::instrument::WithSubscriber;
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Dispatch, Event, Metadata, Subscriber};

    /// Runs `open` and returns its output with the number of entries foyer said it recovered.
    pub async fn counting<T>(open: impl Future<Output = T>) -> (T, u64) {
        let outer = tracing::dispatcher::get_default(Dispatch::clone);
        let recovered = Arc::new(AtomicU64::new(0));
        let listener = Listener {
            outer,
            recovered: Arc::clone(&recovered),
        };
        let output = open.with_subscriber(listener).await;
        (output, recovered.load(Ordering::Relaxed))
    }

    struct Listener {
        outer: Dispatch,
        recovered: Arc<AtomicU64>,
    }

    /// Finds "... N total entries ..." in an event's message.
    struct TotalEntries(Option<u64>);

    impl Visit for TotalEntries {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            if field.name() != "message" {
                return;
            }
            let message = format!("{value:?}");
            let Some(before) = message.split(" total entries").next() else {
                return;
            };
            if before.len() < message.len() {
                self.0 = before
                    .rsplit(' ')
                    .next()
                    .and_then(|count| count.parse().ok());
            }
        }
    }

    impl Subscriber for Listener {
        fn enabled(&self, metadata: &Metadata<'_>) -> bool {
            metadata.target().starts_with("foyer_storage") || self.outer.enabled(metadata)
        }
        fn new_span(&self, span: &Attributes<'_>) -> Id {
            self.outer.new_span(span)
        }
        fn record(&self, span: &Id, values: &Record<'_>) {
            self.outer.record(span, values)
        }
        fn record_follows_from(&self, span: &Id, follows: &Id) {
            self.outer.record_follows_from(span, follows)
        }
        fn event(&self, event: &Event<'_>) {
            if event.metadata().target().starts_with("foyer_storage") {
                let mut total = TotalEntries(None);
                event.record(&mut total);
                if let Some(count) = total.0 {
                    self.recovered.store(count, Ordering::Relaxed);
                }
            }
            if self.outer.enabled(event.metadata()) {
                self.outer.event(event);
            }
        }
        fn enter(&self, span: &Id) {
            self.outer.enter(span)
        }
        fn exit(&self, span: &Id) {
            self.outer.exit(span)
        }
        fn clone_span(&self, id: &Id) -> Id {
            self.outer.clone_span(id)
        }
        fn try_close(&self, id: Id) -> bool {
            self.outer.try_close(id)
        }
    }
}
