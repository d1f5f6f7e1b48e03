//! The disk tier below the memory store: larger than memory, kept across restarts, and written
//! only by objects that have proved themselves.
//!
//! An entry leaving RAM to make room is written to disk only if it was hit while in RAM or was
//! stored on a request the doorkeeper had seen before ([`Proof`](crate::cache::Proof)); a
//! first-and-only request never costs a disk write. Asking the doorkeeper again at eviction
//! would not do: the first request already put the key there. A RAM miss looks here; a record
//! found is verified (the engine's checksum, then this crate's layout), served and copied back
//! into RAM.
//!
//! Writes leave the request path at once: the store's eviction listener hands the entry to one
//! writer thread, which encodes it and gives it to the engine. Queued entries are bounded in bytes
//! (`disk.write_buffer`), disk writes in bytes per second (`disk.write_budget`), and writes stop
//! while the file system has less than a block free; every refusal is counted by its reason.
//!
//! The tier opens in the background: the engine rebuilds its index from its files on a thread
//! of its own while the proxy serves. Until it is open, lookups are misses, entries RAM evicts
//! are not written (counted as `recovering`), and purges are kept and applied to the engine
//! before its first lookup, so that the recovered index never brings back a purged object.

mod counts;
mod engine;
mod pending;
mod purges;
mod record;
mod writer;

use std::collections::HashSet;
use std::os::unix::fs::DirBuilderExt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use futures_util::FutureExt;

use super::{CacheKey, Evicted, Store, StoredResponse, Variants};
use crate::config::{DiskConfig, DiskSync};

pub use counts::{DiskCounters, DiskStats, Rejection, WriteReason};
pub use engine::{
    BoxFuture, DiskEngine, EngineOptions, Found, Recovery, SegmentEngine, engine_files,
};
pub use record::{RecordError, decode, encode};
pub use segments::InFile;

use pending::Pending;
use purges::{PURGE_SETTLES, Purges};
use writer::{Job, Rate, Writer, allocated, panic_text};

/// Where the tier stands.
#[derive(Clone, Debug)]
pub enum TierState {
    /// The engine is rebuilding its index from its files: lookups miss, nothing is written.
    Recovering,
    /// Open, with what the recovery found.
    Open(Recovery),
    /// The engine could not open (the error): serving goes on from RAM alone until a restart.
    Unavailable(String),
}

/// Why the disk tier could not open.
#[derive(Debug, thiserror::Error)]
#[error("disk tier in {dir}: {reason}")]
pub struct DiskError {
    pub dir: PathBuf,
    pub reason: String,
}

struct Shared {
    /// Set once the engine has recovered its index; reading it is one atomic load.
    engine: OnceLock<Arc<dyn DiskEngine>>,
    dir: PathBuf,
    max_bytes: u64,
    block_bytes: u64,
    write_buffer: u64,
    counters: DiskCounters,
    purges: Purges,
    /// Entries queued for the writer thread, by key.
    pending: Pending,
    /// Bytes of entries queued for the writer thread.
    queued: AtomicU64,
    /// Told whenever the writer thread finishes a job: room in its queue.
    drained: tokio::sync::Notify,
    full: AtomicBool,
    /// The engine panicked or could not open: reads and writes stop until a restart.
    failed: AtomicBool,
    opening: Mutex<Opening>,
    /// Turns true when the opening ends, open or not.
    opened: tokio::sync::watch::Sender<bool>,
}

/// Where opening stands, and the keys removed meanwhile.
struct Opening {
    state: TierState,
    /// Removed while recovering: removed from the engine before it serves.
    removed: HashSet<CacheKey>,
}

/// What opens the engine, on the tier's opening thread: the engine and what it recovered.
pub type OpenResult =
    Result<(Arc<dyn DiskEngine>, Recovery), Box<dyn std::error::Error + Send + Sync>>;

/// The disk tier: an engine, its writer thread, and its counters.
pub struct DiskTier {
    shared: Arc<Shared>,
    jobs: Mutex<mpsc::Sender<Job>>,
}

impl DiskTier {
    /// Creates `config.path` if missing and opens the tier there: the engine recovers what an
    /// earlier run left on a thread of its own (see [`DiskTier::opening`]), and this returns at
    /// once. Fails when the directory cannot be created or is not one this process may write
    /// (a configuration error); an engine that cannot open is logged, and the tier stays
    /// unavailable. Call within a tokio runtime.
    pub fn open(config: &DiskConfig) -> Result<DiskTier, DiskError> {
        let dir = config.path.clone().unwrap_or_default();
        let failed = |reason: String| DiskError {
            dir: dir.clone(),
            reason,
        };
        if !dir.exists() {
            // Records hold responses and the request fields they vary on: bloomgate's alone.
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)
                .map_err(|error| failed(error.to_string()))?;
        }
        if !dir.is_dir() {
            return Err(failed("not a directory".into()));
        }
        let access = rustix::fs::Access::READ_OK
            | rustix::fs::Access::WRITE_OK
            | rustix::fs::Access::EXEC_OK;
        rustix::fs::access(&dir, access)
            .map_err(|error| failed(format!("cannot write in it: {error}")))?;
        let options = EngineOptions {
            dir: dir.clone(),
            max_bytes: config.max_bytes,
            block_bytes: config.block_bytes,
            write_buffer: config.write_buffer,
            mmap: config.mmap,
            sync_on_seal: config.sync == DiskSync::Seal,
            verify_first_read_only: config.verify_first_read_only,
        };
        Ok(DiskTier::opening(config, dir, move || {
            let (engine, recovery) = SegmentEngine::open(&options)?;
            Ok((Arc::new(engine), recovery))
        }))
    }

    /// The tier over the engine `open` returns, called on a thread of its own: until it
    /// returns, lookups miss, nothing is written, and removals wait to be applied to the engine
    /// before it serves. An error (or a panic) is logged and leaves the tier unavailable.
    pub fn opening(
        config: &DiskConfig,
        dir: PathBuf,
        open: impl FnOnce() -> OpenResult + Send + 'static,
    ) -> DiskTier {
        let tier = DiskTier::recovering(config, dir);
        let shared = Arc::clone(&tier.shared);
        let spawned = std::thread::Builder::new()
            .name("bloomgate-disk-open".into())
            .spawn(move || {
                let opened = catch_unwind(AssertUnwindSafe(open))
                    .unwrap_or_else(|panic| Err(panic_text(&panic).into()));
                shared.install(opened);
            });
        if let Err(error) = spawned {
            tier.shared.install(Err(error.into()));
        }
        tier
    }

    /// The tier over an engine already open (`open` uses bloomgate's own, [`SegmentEngine`]).
    pub fn with_engine(
        engine: Arc<dyn DiskEngine>,
        recovery: Recovery,
        config: &DiskConfig,
        dir: PathBuf,
    ) -> DiskTier {
        let tier = DiskTier::recovering(config, dir);
        tier.shared.install(Ok((engine, recovery)));
        tier
    }

    /// The tier with no engine yet, and its writer thread.
    fn recovering(config: &DiskConfig, dir: PathBuf) -> DiskTier {
        let shared = Arc::new(Shared {
            engine: OnceLock::new(),
            dir,
            max_bytes: config.max_bytes,
            block_bytes: config.block_bytes,
            write_buffer: config.write_buffer,
            counters: DiskCounters::default(),
            purges: Purges::default(),
            pending: Pending::default(),
            queued: AtomicU64::new(0),
            drained: tokio::sync::Notify::new(),
            full: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            opening: Mutex::new(Opening {
                state: TierState::Recovering,
                removed: HashSet::new(),
            }),
            opened: tokio::sync::watch::Sender::new(false),
        });
        let (jobs, received) = mpsc::channel();
        let writer = Writer {
            shared: Arc::clone(&shared),
            runtime: tokio::runtime::Handle::try_current().ok(),
            rate: Rate::new(config.write_budget),
            space_checked: None,
            since_wait: 0,
        };
        let spawned = std::thread::Builder::new()
            .name("bloomgate-disk-writer".into())
            .spawn(move || writer.run(received));
        if let Err(error) = spawned {
            // Without its writer the tier still serves what is on disk; writes are refused.
            tracing::error!(%error, "disk tier: cannot start the writer thread; no disk writes");
        }
        DiskTier {
            shared,
            jobs: Mutex::new(jobs),
        }
    }

    /// Where the tier stands: recovering, open (with what it recovered), or unavailable.
    pub fn state(&self) -> TierState {
        self.shared.opening().state.clone()
    }

    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// Waits, at most `patience`, until [`Self::has_room_for`] a write of `weight` bytes; whether
    /// it has. A tier that does not take writes answers at once.
    pub async fn room_for(&self, weight: u64, patience: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            // Listening before looking, so that a job finished in between is not missed.
            let drained = self.shared.drained.notified();
            let mut drained = std::pin::pin!(drained);
            drained.as_mut().enable();
            if self.has_room_for(weight) {
                return true;
            }
            if !self.takes_writes() || tokio::time::timeout_at(deadline, drained).await.is_err() {
                return false;
            }
        }
    }

    /// Whether the tier takes writes at all: open and not failed (its write queue may be full).
    pub fn takes_writes(&self) -> bool {
        self.shared.engine.get().is_some() && !self.shared.failed.load(Ordering::Relaxed)
    }

    /// Whether the tier would queue a write of `weight` bytes now: it takes writes, and its write
    /// queue (`disk.write_buffer`) has room for them.
    pub fn has_room_for(&self, weight: u64) -> bool {
        let shared = &self.shared;
        self.takes_writes() && shared.queued.load(Ordering::Acquire) + weight <= shared.write_buffer
    }

    /// Takes an entry RAM evicted: queued for disk if it proved itself and is not on disk
    /// already, else counted as refused. Called with the store's lock held: never blocks.
    pub fn offer(&self, evicted: Evicted) {
        let Some(proof) = evicted.proof else {
            self.shared.reject(Rejection::FirstHit);
            return;
        };
        if self.shared.failed.load(Ordering::Relaxed) {
            self.shared.reject(Rejection::Failed);
            return;
        }
        let Some(engine) = self.shared.engine.get() else {
            self.shared.reject(Rejection::Recovering);
            return;
        };
        if engine.may_contain(evicted.key.as_str())
            || self.shared.pending.get(&evicted.key).is_some()
        {
            // Read back from disk earlier, and still there: nothing new to write.
            self.shared.counters.skipped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.queue(
            evicted.key,
            evicted.variants,
            WriteReason::from_proof(proof),
            false,
        );
    }

    /// After a revalidation refreshed an entry's headers: the record on disk, if there is one,
    /// is rewritten with them.
    pub fn refreshed(&self, key: &CacheKey, variants: Variants) {
        if let Some(engine) = self.shared.engine.get()
            && engine.may_contain(key.as_str())
        {
            self.queue(key.clone(), variants, WriteReason::Revalidated, false);
        }
    }

    fn queue(&self, key: CacheKey, variants: Variants, reason: WriteReason, patient: bool) {
        let shared = &self.shared;
        let weight = u64::from(variants.weight());
        let queued = shared.queued.fetch_add(weight, Ordering::AcqRel);
        if !patient && queued + weight > shared.write_buffer {
            shared.queued.fetch_sub(weight, Ordering::AcqRel);
            shared.reject(Rejection::Budget);
            return;
        }
        let ticket = shared.pending.add(&key, &variants);
        let job = Job::Write {
            ticket,
            key,
            variants,
            reason,
            sequence: shared.purges.now(),
            patient,
            weight,
        };
        let sent = self
            .jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .send(job);
        if let Err(mpsc::SendError(job)) = sent {
            // The writer thread is gone.
            if let Job::Write { key, ticket, .. } = job {
                shared.pending.settled(&key, ticket);
            }
            shared.queued.fetch_sub(weight, Ordering::AcqRel);
            shared.fail("the writer thread stopped");
            shared.reject(Rejection::Failed);
        }
    }

    /// The variants on disk for `key`, verified and decoded with `targeted` as the fields whose
    /// directives replace `Cache-Control`; `None` when there is no usable record (a corrupt one
    /// is dropped, logged and counted).
    pub async fn load(
        &self,
        key: &CacheKey,
        targeted: &[http::HeaderName],
        policy: &crate::config::CachePolicy,
    ) -> Option<Vec<StoredResponse>> {
        let shared = &self.shared;
        let counters = &shared.counters;
        let Some(engine) = shared.engine.get() else {
            // Still recovering: a miss, never a wait.
            counters.misses.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        if shared.failed.load(Ordering::Relaxed)
            || !engine.may_contain(key.as_str())
            || shared.purges.recently(key, PURGE_SETTLES)
        {
            counters.misses.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        // A panic inside the engine fails the tier, not the request.
        let read = match AssertUnwindSafe(engine.get(key.as_str()))
            .catch_unwind()
            .await
        {
            Ok(read) => read,
            Err(panic) => {
                shared.fail(&panic_text(&panic));
                counters.read_errors.fetch_add(1, Ordering::Relaxed);
                return None;
            }
        };
        match read {
            Ok(Some(found)) => {
                match record::decode(found.record, found.file.as_ref(), targeted, policy) {
                    Ok(variants) => {
                        counters.hits.fetch_add(1, Ordering::Relaxed);
                        let bytes: usize = variants.iter().map(|v| v.body.len()).sum();
                        counters
                            .hit_bytes
                            .fetch_add(bytes as u64, Ordering::Relaxed);
                        Some(variants)
                    }
                    Err(error) => {
                        tracing::warn!(%error, %key, dir = %shared.dir.display(),
                        "disk record dropped: it passed the engine's checksum but does not decode");
                        counters.undecodable.fetch_add(1, Ordering::Relaxed);
                        // A miss, as one the engine's checksum caught is.
                        counters.misses.fetch_add(1, Ordering::Relaxed);
                        engine.remove(key.as_str());
                        None
                    }
                }
            }
            Ok(None) => {
                counters.misses.fetch_add(1, Ordering::Relaxed);
                None
            }
            Err(error) => {
                tracing::warn!(%error, %key, dir = %shared.dir.display(), "disk read failed");
                counters.read_errors.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// The variants queued to be written under `key` that the engine does not have yet: what
    /// the disk will hold, for a lookup that comes before the write.
    pub fn queued(&self, key: &CacheKey) -> Option<Variants> {
        self.shared.pending.get(key)
    }

    /// Removes `key`'s record (purge, invalidation) now and across restarts, and drops any write
    /// of it still queued; returns whether there may have been one. While the engine recovers,
    /// the removal waits to be applied before it serves, and there may have been one.
    pub fn remove(&self, key: &CacheKey) -> bool {
        let shared = &self.shared;
        shared.purges.record(key);
        shared.pending.remove(key);
        let engine = match shared.engine.get() {
            Some(engine) => engine,
            None => {
                let mut opening = shared.opening();
                // The engine is installed under this lock: checked again, it cannot slip past.
                match shared.engine.get() {
                    Some(engine) => engine,
                    None => {
                        let recovering = matches!(opening.state, TierState::Recovering);
                        if recovering {
                            opening.removed.insert(key.clone());
                        }
                        return recovering;
                    }
                }
            }
        };
        shared.remove_from(engine, key)
    }

    /// Writes every proven entry still in RAM and not on disk, and waits (at most `within`) until
    /// the engine has them: at graceful shutdown, so that a restart comes back warm.
    /// A tier still recovering is waited for first, as long again; one that does not open in
    /// time writes nothing (logged).
    pub async fn save_from(&self, store: &Store, within: Duration) -> usize {
        let mut opened = self.shared.opened.subscribe();
        if tokio::time::timeout(within, opened.wait_for(|opened| *opened))
            .await
            .is_err()
        {
            let purges = self.shared.opening().removed.len();
            tracing::warn!(?within, dir = %self.shared.dir.display(), purges,
                "disk tier: still recovering at shutdown; the entries in RAM are not written, and these purges may be undone at the next start");
            return 0;
        }
        let Some(engine) = self.shared.engine.get() else {
            return 0;
        };
        let entries = store.proven_entries();
        let mut queued = 0;
        for evicted in entries {
            if engine.may_contain(evicted.key.as_str()) {
                continue;
            }
            if let Some(proof) = evicted.proof {
                let reason = WriteReason::from_proof(proof);
                self.queue(evicted.key, evicted.variants, reason, true);
                queued += 1;
            }
        }
        let (done, finished) = mpsc::channel();
        let sent = self
            .jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .send(Job::Barrier(done));
        if sent.is_ok() {
            let waited =
                tokio::task::spawn_blocking(move || finished.recv_timeout(within).is_ok()).await;
            if !matches!(waited, Ok(true)) {
                tracing::warn!(
                    ?within,
                    "disk tier: not every entry was written before shutdown"
                );
            }
        }
        engine.close().await;
        queued
    }

    /// The tier's state now; reads the size of its files.
    pub fn stats(&self) -> DiskStats {
        let shared = &self.shared;
        let counters = &shared.counters;
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let engine = shared
            .engine
            .get()
            .map(|engine| engine.counts())
            .unwrap_or_default();
        let dropped = engine.dropped + load(&counters.undecodable);
        let bytes = allocated(&shared.dir);
        let state = self.state();
        let recovery = match &state {
            TierState::Open(recovery) => *recovery,
            TierState::Recovering | TierState::Unavailable(_) => Recovery::default(),
        };
        DiskStats {
            bytes,
            max_bytes: shared.max_bytes,
            entries: engine.entries,
            live_bytes: engine.live_bytes,
            writes: counters.writes.each_ref().map(load),
            written_bytes: counters.written_bytes.each_ref().map(load),
            engine_written_bytes: engine.written_bytes,
            cold_reads: engine.cold_reads,
            renewed_segments: engine.renewed,
            syncs: engine.syncs,
            sync_seconds: engine.sync_time.as_secs_f64(),
            rejected: counters.rejected.each_ref().map(load),
            hits: load(&counters.hits),
            hit_bytes: load(&counters.hit_bytes),
            misses: load(&counters.misses),
            read_errors: load(&counters.read_errors),
            dropped,
            removed: load(&counters.removed),
            skipped: load(&counters.skipped),
            full: shared.full.load(Ordering::Relaxed),
            recovering: matches!(state, TierState::Recovering),
            recovered_entries: recovery.entries,
            recovery_seconds: recovery.elapsed.as_secs_f64(),
        }
    }
}

impl Shared {
    fn opening(&self) -> std::sync::MutexGuard<'_, Opening> {
        self.opening.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Ends the opening: the engine, once the removals made while it recovered are applied to
    /// it, or the error that leaves the tier unavailable.
    fn install(&self, opened: OpenResult) {
        let mut opening = self.opening();
        match opened {
            Ok((engine, recovery)) => {
                for key in std::mem::take(&mut opening.removed) {
                    self.remove_from(&engine, &key);
                }
                let _ = self.engine.set(engine);
                opening.state = TierState::Open(recovery);
                tracing::info!(dir = %self.dir.display(), entries = recovery.entries,
                    elapsed = ?recovery.elapsed, "disk tier open: index recovered");
            }
            Err(error) => {
                self.failed.store(true, Ordering::Relaxed);
                opening.removed.clear();
                opening.state = TierState::Unavailable(error.to_string());
                tracing::error!(dir = %self.dir.display(), %error,
                    "disk tier: cannot open; serving goes on from RAM alone until a restart");
            }
        }
        drop(opening);
        self.opened.send_replace(true);
    }

    fn remove_from(&self, engine: &Arc<dyn DiskEngine>, key: &CacheKey) -> bool {
        let present = engine.may_contain(key.as_str());
        engine.remove(key.as_str());
        if present {
            self.counters.removed.fetch_add(1, Ordering::Relaxed);
        }
        present
    }

    fn reject(&self, why: Rejection) {
        self.counters.rejected[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Stops the tier after the engine failed; logged once.
    fn fail(&self, what: &str) {
        if !self.failed.swap(true, Ordering::Relaxed) {
            tracing::error!(dir = %self.dir.display(), what,
                "disk tier: the engine failed; disk reads and writes stop until a restart (serving from RAM goes on)");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Proof;
    use crate::config::Config;
    use bytes::Bytes;
    use engine::EngineCounts;
    use http::{HeaderMap, StatusCode};
    use std::collections::HashMap;
    use std::time::Instant;
    use std::time::SystemTime;

    /// Records in a map: an engine for the tier's own rules.
    #[derive(Default)]
    struct MapEngine {
        records: Mutex<HashMap<String, Bytes>>,
    }

    impl MapEngine {
        fn records(&self) -> std::sync::MutexGuard<'_, HashMap<String, Bytes>> {
            self.records.lock().unwrap_or_else(PoisonError::into_inner)
        }
    }

    impl DiskEngine for MapEngine {
        fn put(&self, key: &str, record: Bytes) {
            self.records().insert(key.to_owned(), record);
        }
        fn get(&self, key: &str) -> BoxFuture<std::io::Result<Option<Found>>> {
            let found = self
                .records()
                .get(key)
                .cloned()
                .map(|record| Found { record, file: None });
            Box::pin(std::future::ready(Ok(found)))
        }
        fn remove(&self, key: &str) {
            self.records().remove(key);
        }
        fn may_contain(&self, key: &str) -> bool {
            self.records().contains_key(key)
        }
        fn counts(&self) -> EngineCounts {
            EngineCounts {
                entries: self.records().len() as u64,
                ..EngineCounts::default()
            }
        }
        fn capacity(&self) -> u64 {
            1 << 30
        }
        fn wait(&self) -> BoxFuture<()> {
            Box::pin(std::future::ready(()))
        }
        fn close(&self) -> BoxFuture<()> {
            Box::pin(std::future::ready(()))
        }
    }

    fn key(text: &str) -> CacheKey {
        CacheKey::from_string(text.into())
    }

    pub(super) fn variants() -> Variants {
        let response = StoredResponse::new(
            StatusCode::OK,
            HeaderMap::new(),
            Bytes::from_static(b"body"),
            &HeaderMap::new(),
            &[],
            SystemTime::now(),
        );
        Variants::with(None, Arc::new(response), 1, |_| 0)
    }

    /// A tier whose engine opens only when the returned sender says so (or is dropped).
    fn gated(engine: &Arc<MapEngine>) -> (DiskTier, mpsc::Sender<()>) {
        let (release, gate) = mpsc::channel();
        let engine: Arc<dyn DiskEngine> = Arc::clone(engine) as Arc<dyn DiskEngine>;
        let recovery = Recovery {
            entries: 2,
            elapsed: Duration::from_millis(7),
        };
        let config = Config::defaults().disk;
        let tier = DiskTier::opening(&config, PathBuf::from("/nonexistent"), move || {
            let _ = gate.recv();
            Ok((engine, recovery))
        });
        (tier, release)
    }

    async fn until_open(tier: &DiskTier) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(tier.state(), TierState::Recovering) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    #[tokio::test]
    async fn while_recovering_lookups_miss_evictions_are_refused_and_purges_wait_for_the_engine() {
        let engine = Arc::new(MapEngine::default());
        let responses: Vec<_> = variants().responses().cloned().collect();
        let record = Bytes::from(record::encode(&responses));
        engine.put("h/purged", record.clone());
        engine.put("h/kept", record);
        let (tier, release) = gated(&engine);
        assert!(matches!(tier.state(), TierState::Recovering));
        assert!(
            tier.load(&key("h/kept"), &[], crate::cache::policy::rfc())
                .await
                .is_none(),
            "a miss, never a wait"
        );
        tier.offer(Evicted {
            key: key("h/new"),
            variants: variants(),
            proof: Some(Proof::RamHit),
        });
        assert!(tier.remove(&key("h/purged")), "there may be a record");
        assert!(
            engine.may_contain("h/purged"),
            "kept until the engine is open"
        );
        let stats = tier.stats();
        assert!(stats.recovering);
        assert_eq!(stats.rejected[Rejection::Recovering as usize], 1);
        assert_eq!((stats.misses, stats.recovered_entries), (1, 0));

        release.send(()).expect("the opening thread waits");
        until_open(&tier).await;
        assert!(matches!(tier.state(), TierState::Open(found) if found.entries == 2));
        assert!(
            !engine.may_contain("h/purged"),
            "the purge reached the engine"
        );
        assert!(
            !engine.may_contain("h/new"),
            "a refused write stays refused"
        );
        assert!(
            tier.load(&key("h/kept"), &[], crate::cache::policy::rfc())
                .await
                .is_some()
        );
        let stats = tier.stats();
        assert!(!stats.recovering);
        assert_eq!(
            (stats.hits, stats.removed, stats.recovered_entries),
            (1, 1, 2)
        );
    }

    #[tokio::test]
    async fn an_engine_that_cannot_open_leaves_the_tier_unavailable_and_serving_goes_on() {
        let config = Config::defaults().disk;
        let tier = DiskTier::opening(&config, PathBuf::from("/nonexistent"), || {
            Err("segments: /nonexistent/segment-00000: Input/output error".into())
        });
        until_open(&tier).await;
        let TierState::Unavailable(error) = tier.state() else {
            panic!("{:?}", tier.state());
        };
        assert!(error.contains("Input/output error"), "{error}");
        assert!(
            tier.load(&key("h/a"), &[], crate::cache::policy::rfc())
                .await
                .is_none()
        );
        tier.offer(Evicted {
            key: key("h/a"),
            variants: variants(),
            proof: Some(Proof::SeenBefore),
        });
        assert!(!tier.remove(&key("h/a")), "no engine, no record");
        let stats = tier.stats();
        assert_eq!(stats.rejected[Rejection::Failed as usize], 1);
        assert!(!stats.recovering);
    }

    #[test]
    fn a_directory_that_cannot_be_used_stops_the_open_naming_it() {
        let file = std::env::temp_dir().join(format!("bloomgate-disk-file-{}", std::process::id()));
        std::fs::write(&file, b"").expect("a file in the temp dir");
        for (path, reason) in [
            (file.clone(), "not a directory"),
            (file.join("below"), "Not a directory"),
        ] {
            let mut config = Config::defaults().disk;
            config.path = Some(path.clone());
            let error = DiskTier::open(&config)
                .err()
                .expect("refused at start")
                .to_string();
            assert!(
                error.contains(&path.display().to_string()) && error.contains(reason),
                "{error}"
            );
        }
        let _ = std::fs::remove_file(&file);
    }

    #[tokio::test]
    async fn shutdown_waits_for_a_recovery_no_longer_than_it_was_given() {
        let engine = Arc::new(MapEngine::default());
        let (tier, release) = gated(&engine);
        let store = Store::new(crate::admission::probation::Budget::new(1 << 20, 0.25), 4);
        let started = Instant::now();
        assert_eq!(tier.save_from(&store, Duration::from_millis(50)).await, 0);
        assert!(started.elapsed() < Duration::from_secs(5));
        drop(release);
    }
}
