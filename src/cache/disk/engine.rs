//! The storage engine under the disk tier, behind the crate's own trait: the request path sees
//! keyed records, never the engine.
//!
//! [`SegmentEngine`] is bloomgate's own (`crates/segments`): records packed byte to byte into
//! preallocated segment files through a RAM batch, a compact index, reads of page-cached records
//! on the calling thread (`preadv2` with `RWF_NOWAIT`, or a plain read on tmpfs) and only cold
//! ones on the blocking pool,
//! eviction by whole segment with reinsertion of records read since they were written, and an
//! index rebuilt at start from sealed segments' summaries and a scan of the others.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use segments::{Engine, InFile, Lookup, Options, Stored};

pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What the disk tier needs of a storage engine: records under string keys, written in the
/// background, read back whole and verified, or not at all.
pub trait DiskEngine: Send + Sync + 'static {
    /// Queues `record` to be written under `key`, replacing any older one.
    fn put(&self, key: &str, record: Bytes);
    /// The record under `key`: `Ok(None)` when there is none, or when the one there failed its
    /// checksum (the engine drops it; see [`EngineCounts::dropped`]).
    fn get(&self, key: &str) -> BoxFuture<std::io::Result<Option<Found>>>;
    /// Removes the record under `key`, now and across restarts.
    fn remove(&self, key: &str);
    /// Whether a record may be stored under `key` (no false negatives).
    fn may_contain(&self, key: &str) -> bool;
    /// The engine's own counts since it opened; read at scrape time, not per request.
    fn counts(&self) -> EngineCounts;
    /// Bytes the engine's files may take on the file system, at most.
    fn capacity(&self) -> u64;
    /// Waits for the writes queued so far to reach the files.
    fn wait(&self) -> BoxFuture<()>;
    /// Waits for queued writes, then refuses new ones.
    fn close(&self) -> BoxFuture<()>;
}

/// A record read back, checked.
#[derive(Debug)]
pub struct Found {
    pub record: Bytes,
    /// Where `record` lies in its segment file, held there, when it was read through a mapping.
    pub file: Option<InFile>,
}

impl Found {
    fn of(record: Bytes) -> Found {
        Found { record, file: None }
    }
}

/// How the engine is laid out; see `[disk]` in `config/bloomgate.toml`.
#[derive(Clone, Debug)]
pub struct EngineOptions {
    pub dir: PathBuf,
    pub max_bytes: u64,
    pub block_bytes: u64,
    pub write_buffer: u64,
    /// Read segments on tmpfs or ramfs through a mapping (`disk.mmap`).
    pub mmap: bool,
    /// `fdatasync` each segment as it is sealed (`disk.sync = "seal"`).
    pub sync_on_seal: bool,
    /// Check a record's checksum on its first read only (`disk.verify_reads = "first"`).
    pub verify_first_read_only: bool,
}

/// What the engine counts of itself.
#[derive(Clone, Copy, Debug, Default)]
pub struct EngineCounts {
    /// Bytes written to its files, by its own count.
    pub written_bytes: u64,
    /// Entries the index named that failed their checks when read.
    pub dropped: u64,
    /// Records in the index now.
    pub entries: u64,
    /// Bytes of those records: what the tier holds, apart from its preallocated files.
    pub live_bytes: u64,
    /// Reads that left the serving thread for the blocking pool (not in the page cache).
    pub cold_reads: u64,
    /// Reclaimed segments given a new inode because values read from them were still held.
    pub renewed: u64,
    /// `fdatasync`s of its files, and the time they took.
    pub syncs: u64,
    pub sync_time: Duration,
}

/// What opening the engine found.
#[derive(Clone, Copy, Debug, Default)]
pub struct Recovery {
    pub entries: u64,
    pub elapsed: Duration,
}

/// bloomgate's segment engine over files in one directory.
pub struct SegmentEngine {
    engine: Arc<Engine>,
}

impl SegmentEngine {
    /// Opens (creating if needed) the engine in `options.dir`, rebuilding its index from the
    /// segments there; torn or corrupt records are skipped. Blocks while it reads every sealed
    /// segment's summary and scans the others: seconds for terabytes.
    pub fn open(options: &EngineOptions) -> Result<(SegmentEngine, Recovery), segments::OpenError> {
        let dir = options.dir.clone();
        let options = Options::new(&options.dir, options.max_bytes)
            .segment_bytes(options.block_bytes)
            .write_buffer(options.write_buffer)
            .mmap_reads(options.mmap)
            .sync_on_seal(options.sync_on_seal)
            .remember_checks(options.verify_first_read_only);
        let (engine, found) = Engine::open(options)?;
        // "memory": a tmpfs refuses RWF_NOWAIT, and its reads never wait for a device;
        // "mapped": the same, read through a mapping with no copy (`disk.mmap`);
        // "blocking": every disk hit crosses to the blocking pool (slower, still correct).
        tracing::info!(
            dir = %dir.display(),
            read_mode = engine.read_mode().as_str(),
            "disk tier reads records on the serving thread unless they would block"
        );
        let recovery = Recovery {
            entries: found.entries,
            elapsed: found.elapsed,
        };
        let engine = SegmentEngine {
            engine: Arc::new(engine),
        };
        Ok((engine, recovery))
    }
}

impl DiskEngine for SegmentEngine {
    fn put(&self, key: &str, record: Bytes) {
        match self.engine.put(key.as_bytes(), &record) {
            Stored::Queued => {}
            // The engine removed the key's older record: nothing stale is served.
            refused => tracing::debug!(key, outcome = refused.as_str(), "disk record not written"),
        }
    }

    fn get(&self, key: &str) -> BoxFuture<std::io::Result<Option<Found>>> {
        let found = match self.engine.get(key.as_bytes()) {
            Lookup::Miss => None,
            Lookup::Hit(record) => Some(Found::of(record)),
            Lookup::Mapped(record, file) => Some(Found {
                record,
                file: Some(file),
            }),
            // Only a record not in the page cache leaves this thread.
            Lookup::Cold(read) => {
                return Box::pin(async move {
                    let record = tokio::task::spawn_blocking(move || read.finish())
                        .await
                        .map_err(std::io::Error::other)??;
                    Ok(record.map(Found::of))
                });
            }
        };
        Box::pin(std::future::ready(Ok(found)))
    }

    fn remove(&self, key: &str) {
        self.engine.remove(key.as_bytes());
    }

    fn may_contain(&self, key: &str) -> bool {
        self.engine.may_contain(key.as_bytes())
    }

    fn counts(&self) -> EngineCounts {
        let stats = self.engine.stats();
        EngineCounts {
            written_bytes: stats.written_bytes,
            dropped: stats.dropped,
            entries: stats.entries,
            live_bytes: stats.live_bytes,
            cold_reads: stats.cold_reads,
            renewed: stats.renewed,
            syncs: stats.syncs,
            sync_time: stats.sync_time,
        }
    }

    fn capacity(&self) -> u64 {
        self.engine.capacity_bytes()
    }

    fn wait(&self) -> BoxFuture<()> {
        let engine = Arc::clone(&self.engine);
        Box::pin(async move {
            let _ = tokio::task::spawn_blocking(move || engine.wait()).await;
        })
    }

    fn close(&self) -> BoxFuture<()> {
        let engine = Arc::clone(&self.engine);
        Box::pin(async move {
            if tokio::task::spawn_blocking(move || engine.close())
                .await
                .is_err()
            {
                tracing::warn!("disk tier did not close cleanly");
            }
        })
    }
}

/// The files the engine keeps in `dir` (its segment files and its key file), for disk usage.
pub fn engine_files(dir: &Path) -> impl Iterator<Item = PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with("segment-") || name == "engine.meta")
        })
}
