#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![warn(unreachable_pub)]

mod error;
mod evict;
mod files;
mod hash;
mod index;
mod layout;
mod meta;
mod read;
mod recover;
mod table;
mod verified;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};

pub use error::OpenError;
pub use files::InFile;
pub use index::{MAX_SEGMENT_BYTES, MAX_SEGMENTS};
pub use layout::record_bytes;
pub use read::{ColdRead, Lookup, ReadMode};

use files::SegmentFile;
use hash::KeyHasher;
use index::Index;
use writer::{Batch, Log, Queue, Room};

/// What `engine.meta` may take on the file system: one block.
const META_RESERVE: u64 = 4096;

/// The smallest segment accepted, in bytes.
pub const MIN_SEGMENT_BYTES: u64 = 4096;

/// How an engine is laid out and buffered. Built as a sentence:
/// `Options::new(dir, max_bytes).segment_bytes(64 << 20)`.
#[derive(Clone, Debug)]
pub struct Options {
    dir: PathBuf,
    max_bytes: u64,
    segment_bytes: u64,
    flush_bytes: u64,
    write_buffer: u64,
    nowait_reads: bool,
    mmap_reads: bool,
    sync_on_seal: bool,
    remember_checks: bool,
}

impl Options {
    /// An engine in `dir` whose segment files take at most `max_bytes` in all.
    pub fn new(dir: impl Into<PathBuf>, max_bytes: u64) -> Options {
        Options {
            dir: dir.into(),
            max_bytes,
            segment_bytes: 64 << 20,
            flush_bytes: 1 << 20,
            write_buffer: 16 << 20,
            nowait_reads: true,
            mmap_reads: true,
            sync_on_seal: true,
            remember_checks: false,
        }
    }

    /// Bytes of each segment file (default 64 MiB): a multiple of 8 from
    /// [`MIN_SEGMENT_BYTES`] to [`MAX_SEGMENT_BYTES`]. The largest record is a little smaller.
    /// There are `max_bytes / segment_bytes` segments, at least 2 and at most [`MAX_SEGMENTS`].
    pub fn segment_bytes(mut self, bytes: u64) -> Options {
        self.segment_bytes = bytes;
        self
    }

    /// Bytes the RAM batch gathers before the writer thread writes it (default 1 MiB); a
    /// sealed segment's last batch is written whatever its size.
    pub fn flush_bytes(mut self, bytes: u64) -> Options {
        self.flush_bytes = bytes;
        self
    }

    /// Bytes of records that may wait in RAM for the writer (default 16 MiB). A put that would
    /// pass it is refused ([`Stored::BufferFull`]) and removes the key's older record.
    pub fn write_buffer(mut self, bytes: u64) -> Options {
        self.write_buffer = bytes;
        self
    }

    /// Whether [`Engine::get`] reads on the calling thread what it can without blocking
    /// (default true; see [`ReadMode`]). Off, every read of a flushed record is a
    /// [`Lookup::Cold`].
    pub fn nowait_reads(mut self, enabled: bool) -> Options {
        self.nowait_reads = enabled;
        self
    }

    /// Whether segments on a memory-backed file system (tmpfs, ramfs: [`ReadMode::Memory`]) are
    /// read through a mapping ([`ReadMode::Mapped`]), values handed out as slices of it with no
    /// copy (default true).
    /// Off, they are read with `pread` into a buffer. Segments on a device are never mapped: a
    /// page the kernel evicted would be read back by a fault on the serving thread.
    pub fn mmap_reads(mut self, enabled: bool) -> Options {
        self.mmap_reads = enabled;
        self
    }

    /// Whether a record's payload checksum, once it passed, is remembered while its segment keeps
    /// its sequence, so later reads check header and key only (default false: every read checks
    /// every byte). Records of 16 KiB and more; see `verified.rs` for what this gives up.
    pub fn remember_checks(mut self, enabled: bool) -> Options {
        self.remember_checks = enabled;
        self
    }

    /// Whether sealing a segment waits for the device (default true): its records and summary
    /// are written and `fdatasync`ed, then its footer is written and synced, so that after a
    /// power cut no segment looks sealed without its records on the device. [`Engine::close`]
    /// seals, so it syncs too. Off, the files reach the device when the kernel writes them back;
    /// a killed process loses nothing either way (the page cache survives it), and recovery's
    /// checksums catch what a power cut tore.
    pub fn sync_on_seal(mut self, enabled: bool) -> Options {
        self.sync_on_seal = enabled;
        self
    }

    /// The directory the engine keeps its files in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The number of segments, once the options are checked.
    fn segments(&self) -> Result<u32, OpenError> {
        let invalid = |option, value, requirement: String| OpenError::InvalidOption {
            option,
            value,
            requirement,
        };
        if !self.segment_bytes.is_multiple_of(8)
            || !(MIN_SEGMENT_BYTES..=MAX_SEGMENT_BYTES).contains(&self.segment_bytes)
        {
            return Err(invalid(
                "segment_bytes",
                self.segment_bytes,
                format!("must be a multiple of 8 in [{MIN_SEGMENT_BYTES}, {MAX_SEGMENT_BYTES}]"),
            ));
        }
        // `max_bytes` bounds every file of the engine: the segments and `engine.meta`, which
        // takes one file-system block.
        let segments = self.max_bytes.saturating_sub(META_RESERVE) / self.segment_bytes;
        if !(2..=MAX_SEGMENTS).contains(&segments) {
            return Err(invalid(
                "max_bytes",
                self.max_bytes,
                format!(
                    "must hold 2 to {MAX_SEGMENTS} segments of {} bytes",
                    self.segment_bytes
                ),
            ));
        }
        if self.flush_bytes == 0 {
            return Err(invalid("flush_bytes", 0, "must be above 0".into()));
        }
        Ok(segments as u32)
    }
}

/// What [`Engine::put`] did with a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stored {
    /// Appended: readable at once, in its file after the writer's next flush.
    Queued,
    /// Larger than a segment can hold; the key's older record was removed.
    TooLarge,
    /// The RAM buffer is full (the disk is behind); the key's older record was removed.
    BufferFull,
    /// The engine is closed.
    Closed,
}

impl Stored {
    /// The outcome's name, for metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Stored::Queued => "queued",
            Stored::TooLarge => "too_large",
            Stored::BufferFull => "buffer_full",
            Stored::Closed => "closed",
        }
    }
}

/// What opening the engine found.
#[derive(Clone, Copy, Debug, Default)]
pub struct Recovery {
    /// Entries in the index after replaying the segments.
    pub entries: u64,
    /// Sealed segments whose summaries were read.
    pub summaries_read: u64,
    /// Segments scanned record by record because they were not sealed (an unclean stop).
    pub segments_scanned: u64,
    /// Records skipped in those scans because their key or value failed the checksum.
    pub records_skipped: u64,
    /// How long opening took, recovery included.
    pub elapsed: Duration,
    /// Segments in use: fewer than [`Recovery::configured_segments`] when the file system could
    /// not hold them all.
    pub segments: u32,
    /// Segments `max_bytes` asked for.
    pub configured_segments: u32,
}

/// The engine's counters and sizes at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Bytes written to the segment files since open, by the engine's count.
    pub written_bytes: u64,
    /// Entries in the index.
    pub entries: u64,
    /// Bytes of the records the index points at.
    pub live_bytes: u64,
    /// Heap bytes of the index's tables.
    pub index_bytes: u64,
    /// Entries dropped from the index because their segment was reclaimed.
    pub reclaimed: u64,
    /// Entries re-appended from a reclaimed segment because they had been read.
    pub reinserted: u64,
    /// Entries dropped because their record failed its checks or its write failed.
    pub dropped: u64,
    /// Writes to the segment files that failed.
    pub write_errors: u64,
    /// Puts refused ([`Stored::TooLarge`], [`Stored::BufferFull`]).
    pub skipped: u64,
    /// Lookups answered [`Lookup::Cold`]: the record was not (all) in the page cache, or the
    /// file system does not read without blocking.
    pub cold_reads: u64,
    /// Reclaimed segments given a new inode because values read from them were still held
    /// (see [`ReadMode::Mapped`]).
    pub renewed: u64,
    /// `fdatasync`s of segment files (two per sealed segment with [`Options::sync_on_seal`]).
    pub syncs: u64,
    /// Time spent in those syncs.
    pub sync_time: Duration,
}

#[derive(Default)]
struct Counters {
    written_bytes: AtomicU64,
    reclaimed: AtomicU64,
    reinserted: AtomicU64,
    dropped: AtomicU64,
    write_errors: AtomicU64,
    skipped: AtomicU64,
    cold_reads: AtomicU64,
    renewed: AtomicU64,
    syncs: AtomicU64,
    sync_nanos: AtomicU64,
}

impl Counters {
    /// `fdatasync`s `file`, counted and timed; a failure is logged and counted as a write error.
    fn sync(&self, file: &SegmentFile) -> bool {
        let started = Instant::now();
        let synced = file.sync_data();
        let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.syncs.fetch_add(1, Ordering::Relaxed);
        self.sync_nanos.fetch_add(nanos, Ordering::Relaxed);
        match synced {
            Ok(()) => true,
            Err(error) => {
                tracing::warn!(path = %file.path.display(), %error, "segment sync failed; the segment is left unsealed");
                self.write_errors.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }
}

/// What the engine's handle and its writer thread share.
struct Shared {
    options: Options,
    segment_bytes: u32,
    /// The largest record a segment takes, in bytes.
    max_record: u64,
    files: Box<[SegmentFile]>,
    /// Each segment's current sequence; 0 while it is free.
    seqs: Box<[AtomicU64]>,
    hasher: KeyHasher,
    index: Index,
    log: Mutex<Log>,
    /// A segment was freed or the engine closed: for appends waiting to rotate.
    log_changed: Condvar,
    queue: Mutex<Queue>,
    /// The queue changed: for the writer thread and for `wait`.
    queue_changed: Condvar,
    /// Bytes appended and not yet written.
    queued_bytes: AtomicU64,
    counters: Counters,
    read_mode: ReadMode,
    /// Records whose payload checksum a read has checked under their segment's sequence, when
    /// checks are remembered ([`Options::remember_checks`]).
    verified: Option<verified::Verified>,
}

/// A disk cache of byte records under byte keys, in fixed-size segment files in one directory.
///
/// `put` and `remove` append on the calling thread into a RAM batch (readable at once) that a
/// writer thread lands in the files; `get` reads on the calling thread as far as it can without
/// blocking. When no segment is free the oldest is reclaimed, keeping a capped share of the
/// records read since they were written.
pub struct Engine {
    shared: Arc<Shared>,
    writer: Mutex<Option<JoinHandle<()>>>,
}

impl Engine {
    /// Opens (creating if needed) the engine in `options.dir`, rebuilding its index from the
    /// segments there: summaries of sealed segments, a scan of the others up to their first
    /// torn record. A directory laid out for another segment size is started afresh.
    ///
    /// # Errors
    ///
    /// [`OpenError::InvalidOption`] for options out of range; [`OpenError::Io`] naming the file
    /// or directory that could not be created or opened.
    pub fn open(options: Options) -> Result<(Engine, Recovery), OpenError> {
        Engine::open_with(options, u64::MAX)
    }

    /// Opens with key hashes cut to `hash_mask`'s bits: tests use it to make collisions.
    fn open_with(options: Options, hash_mask: u64) -> Result<(Engine, Recovery), OpenError> {
        let started = Instant::now();
        let segments = options.segments()?;
        let dir = options.dir.clone();
        std::fs::create_dir_all(&dir).map_err(io_at(&dir))?;
        let meta_path = meta::meta_path(&dir);
        let known = meta::read(&dir).map_err(io_at(&meta_path))?;
        let (hasher, fresh) = match known {
            Some(meta) if meta.segment_bytes == options.segment_bytes => (meta.hasher, false),
            Some(meta) => {
                tracing::warn!(dir = %dir.display(), was = meta.segment_bytes, now = options.segment_bytes, "segment size changed; starting the disk cache afresh");
                (
                    meta::random_hasher().map_err(io_at(Path::new("/dev/urandom")))?,
                    true,
                )
            }
            None => (
                meta::random_hasher().map_err(io_at(Path::new("/dev/urandom")))?,
                true,
            ),
        };
        // Without the meta file the hashes in the summaries mean nothing: old segments go.
        remove_stray_segments(&dir, segments, fresh)?;
        if fresh {
            let meta = meta::Meta {
                segment_bytes: options.segment_bytes,
                hasher,
            };
            meta::write(&dir, &meta).map_err(io_at(&meta_path))?;
        }
        let hasher = hasher.masked(hash_mask);
        let configured = segments;
        let mut opened = Vec::with_capacity(segments as usize);
        for segment in 0..segments {
            match SegmentFile::open(&dir, segment, options.segment_bytes) {
                Ok(file) => opened.push(file),
                // The file system holds fewer segments than `max_bytes` asks for: run with those
                // (all preallocated, so no write meets a full disk), and remove the others so
                // that they hold no space.
                Err(error)
                    if error.kind() == std::io::ErrorKind::StorageFull && opened.len() >= 2 =>
                {
                    for extra in segment..segments {
                        let _ = std::fs::remove_file(dir.join(files::segment_name(extra)));
                    }
                    tracing::warn!(dir = %dir.display(), configured, allocated = opened.len(),
                        "file system full: the disk cache runs with the segments it could allocate");
                    break;
                }
                Err(error) => return Err(io_at(&dir.join(files::segment_name(segment)))(error)),
            }
        }
        let files: Box<[SegmentFile]> = opened.into();
        let segments = files.len() as u32;
        let seqs: Box<[AtomicU64]> = (0..segments).map(|_| AtomicU64::new(0)).collect();
        let index = Index::default();
        let segment_bytes = options.segment_bytes as u32;
        let remember_checks = options.remember_checks;
        let counters = Counters::default();
        let sync = options.sync_on_seal.then_some(&counters);
        let recovered = recover::recover(&files, segment_bytes, &index, &seqs, sync);
        let mut read_mode = ReadMode::probe(&files[0], options.nowait_reads);
        if read_mode == ReadMode::Memory && options.mmap_reads {
            // Memory-backed pages never wait for a device: values are read in place.
            match files.iter().try_for_each(SegmentFile::map_reads) {
                Ok(()) => read_mode = ReadMode::Mapped,
                Err(error) => {
                    tracing::warn!(dir = %dir.display(), %error, "cannot map the segments; reading them with pread");
                }
            }
        }
        let max_record = u64::from(
            segment_bytes
                - layout::SEGMENT_HEADER_BYTES
                - layout::SUMMARY_ENTRY_BYTES
                - layout::FOOTER_BYTES,
        );
        let shared = Arc::new(Shared {
            options,
            segment_bytes,
            max_record,
            files,
            seqs,
            hasher,
            index,
            log: Mutex::new(Log {
                active: None,
                open: Batch::new(0),
                free: recovered.free,
                sealed: recovered.sealed,
                next_seq: recovered.next_seq,
                closed: false,
            }),
            log_changed: Condvar::new(),
            queue: Mutex::new(Queue::default()),
            queue_changed: Condvar::new(),
            queued_bytes: AtomicU64::new(0),
            counters,
            read_mode,
            verified: remember_checks
                .then(|| verified::Verified::new(segments as usize, segment_bytes)),
        });
        if shared.log.lock().free.is_empty() {
            // Every segment holds records: the oldest makes room (recovered entries carry no
            // hit bit, so none is re-appended).
            shared.reclaim_oldest();
        }
        shared.rotate(&mut shared.log.lock());
        let writer = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("segments-writer".into())
                .spawn(move || writer::run(shared))
                .map_err(OpenError::Writer)?
        };
        let recovery = Recovery {
            entries: shared.index.entries(),
            summaries_read: recovered.summaries_read,
            segments_scanned: recovered.segments_scanned,
            records_skipped: recovered.records_skipped,
            elapsed: started.elapsed(),
            segments,
            configured_segments: configured,
        };
        tracing::info!(dir = %shared.options.dir.display(), entries = recovery.entries, scanned = recovery.segments_scanned, elapsed = ?recovery.elapsed, "disk cache opened");
        let engine = Engine {
            shared,
            writer: Mutex::new(Some(writer)),
        };
        Ok((engine, recovery))
    }

    /// Stores `value` under `key`, replacing any older record. The record is readable at once
    /// (from RAM) and reaches its file with the writer's next flush. Blocks only when the
    /// active segment is full and the writer has not yet freed the next one.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Stored {
        let shared = &self.shared;
        let len = record_bytes(key.len() as u64, value.len() as u64);
        let refused = if len > shared.max_record || key.len() > layout::MAX_KEY_BYTES {
            Some(Stored::TooLarge)
        } else {
            let queued = shared.queued_bytes.load(Ordering::Relaxed);
            (queued > 0 && queued + len > shared.options.write_buffer).then_some(Stored::BufferFull)
        };
        if let Some(refused) = refused {
            shared.counters.skipped.fetch_add(1, Ordering::Relaxed);
            self.remove(key);
            return refused;
        }
        let hash = shared.hasher.hash(key);
        // The copy and the checksum happen before taking the lock.
        let record = layout::encode_record(hash, key, value, 0);
        let mut log = shared.log.lock();
        match shared.append(&mut log, hash, record, 0, Room::Wait) {
            Ok(location) => {
                shared.index.insert(hash, location);
                Stored::Queued
            }
            Err(_) => Stored::Closed,
        }
    }

    /// The value under `key`: [`Lookup::Hit`] when it is in RAM or the page cache (or
    /// [`Lookup::Mapped`], with its place in the file, when read through a mapping),
    /// [`Lookup::Cold`] when reading it would block (finish it on a blocking thread). Records
    /// are checked (header, key, checksums) before their value is returned, the key-and-value
    /// checksum once per record while its segment keeps its sequence; one that fails is
    /// dropped and counted ([`Stats::dropped`]) and reads as a miss.
    pub fn get(&self, key: &[u8]) -> Lookup {
        read::lookup(&self.shared, key)
    }

    /// [`Engine::get`] that finishes a cold read on the calling thread (which may block).
    ///
    /// # Errors
    ///
    /// The read's error when a segment file could not be read.
    pub fn read(&self, key: &[u8]) -> std::io::Result<Option<Bytes>> {
        match self.get(key) {
            Lookup::Miss => Ok(None),
            Lookup::Hit(value) | Lookup::Mapped(value, _) => Ok(Some(value)),
            Lookup::Cold(cold) => cold.finish(),
        }
    }

    /// Removes the record under `key`, now and across restarts (a tombstone record is appended
    /// when the key was indexed).
    pub fn remove(&self, key: &[u8]) {
        let shared = &self.shared;
        if key.len() > layout::MAX_KEY_BYTES {
            // Never stored: `put` refuses such a key.
            return;
        }
        let hash = shared.hasher.hash(key);
        let mut log = shared.log.lock();
        if shared.index.remove(hash).is_some() {
            let tombstone = layout::encode_record(hash, key, &[], layout::FLAG_TOMBSTONE);
            // Refused only once closed; then nothing more reaches the files anyway.
            let _ = shared.append(
                &mut log,
                hash,
                tombstone,
                layout::FLAG_TOMBSTONE,
                Room::Wait,
            );
        }
    }

    /// Whether a record may be stored under `key`: the index knows its hash (no false
    /// negatives; a rare 64-bit collision is a false positive).
    pub fn may_contain(&self, key: &[u8]) -> bool {
        self.shared
            .index
            .get(self.shared.hasher.hash(key))
            .is_some()
    }

    /// Blocks until the records appended so far are in the files (the page cache) and no
    /// segment is being reclaimed.
    pub fn wait(&self) {
        self.shared.wait_idle();
    }

    /// Seals the active segment, writes everything queued and stops the writer thread. Later
    /// puts return [`Stored::Closed`]; gets still read. The next open reads summaries only.
    pub fn close(&self) {
        {
            let mut log = self.shared.log.lock();
            if !log.closed {
                log.closed = true;
                self.shared.seal(&mut log);
            }
            self.shared.hand_over(&mut log);
        }
        self.shared.log_changed.notify_all();
        self.stop_writer();
    }

    fn stop_writer(&self) {
        {
            let mut queue = self.shared.queue.lock();
            queue.shutdown = true;
            self.shared.queue_changed.notify_all();
        }
        if let Some(writer) = self.writer.lock().take()
            && writer.join().is_err()
        {
            tracing::error!("segments writer thread panicked");
        }
    }

    /// The engine's counters and sizes now.
    pub fn stats(&self) -> Stats {
        let shared = &self.shared;
        let counter = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        Stats {
            written_bytes: counter(&shared.counters.written_bytes),
            entries: shared.index.entries(),
            live_bytes: shared.index.live_bytes(),
            index_bytes: shared.index.table_bytes(),
            reclaimed: counter(&shared.counters.reclaimed),
            reinserted: counter(&shared.counters.reinserted),
            dropped: counter(&shared.counters.dropped),
            write_errors: counter(&shared.counters.write_errors),
            skipped: counter(&shared.counters.skipped),
            cold_reads: counter(&shared.counters.cold_reads),
            renewed: counter(&shared.counters.renewed),
            syncs: counter(&shared.counters.syncs),
            sync_time: Duration::from_nanos(counter(&shared.counters.sync_nanos)),
        }
    }

    /// How [`Engine::get`] reads records from their files on this file system.
    pub fn read_mode(&self) -> ReadMode {
        self.shared.read_mode
    }

    /// Bytes the engine's files take on the file system at most: its segments, preallocated, and
    /// `engine.meta`'s block.
    pub fn capacity_bytes(&self) -> u64 {
        self.shared.files.len() as u64 * u64::from(self.shared.segment_bytes) + META_RESERVE
    }

    /// The paths of the engine's files (segments and `engine.meta`), for disk usage.
    pub fn files(&self) -> Vec<PathBuf> {
        let mut paths: Vec<PathBuf> = self
            .shared
            .files
            .iter()
            .map(|file| file.path.clone())
            .collect();
        paths.push(meta::meta_path(&self.shared.options.dir));
        paths
    }
}

impl Drop for Engine {
    /// Writes what is queued and stops the writer without sealing: the active segment is left
    /// as a crash would leave it, and is scanned at the next open.
    fn drop(&mut self) {
        {
            let mut log = self.shared.log.lock();
            log.closed = true;
            self.shared.hand_over(&mut log);
        }
        self.shared.log_changed.notify_all();
        self.stop_writer();
    }
}

fn io_at(path: &Path) -> impl FnOnce(std::io::Error) -> OpenError + use<> {
    let path = path.to_owned();
    move |source| OpenError::Io { path, source }
}

/// Deletes segment files past the configured count (so the files stay within `max_bytes`), or
/// all of them when the directory starts afresh, and any half-made next inode.
fn remove_stray_segments(dir: &Path, segments: u32, all: bool) -> Result<(), OpenError> {
    for entry in std::fs::read_dir(dir).map_err(io_at(dir))? {
        let entry = entry.map_err(io_at(dir))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        let next = Path::new(name).extension() == Some(files::NEXT_EXTENSION.as_ref());
        if next && name.starts_with("segment-") {
            // A new inode a crash left before it was renamed into place.
            std::fs::remove_file(entry.path()).map_err(io_at(&entry.path()))?;
            continue;
        }
        let Some(segment) = files::parse_segment_name(name) else {
            continue;
        };
        if all || segment >= segments {
            std::fs::remove_file(entry.path()).map_err(io_at(&entry.path()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
