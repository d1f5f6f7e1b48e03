//! What the disk tier counts: why records were written or refused, its counters, its stats.

use std::sync::atomic::AtomicU64;

use crate::cache::Proof;

/// Why a record was written to disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteReason {
    /// Hit while in RAM.
    RamHit,
    /// Stored in RAM on a request the doorkeeper had seen before.
    SeenBefore,
    /// A revalidation (304) refreshed the headers of a record already on disk.
    Revalidated,
}

impl WriteReason {
    pub const ALL: [WriteReason; 3] = [
        WriteReason::RamHit,
        WriteReason::SeenBefore,
        WriteReason::Revalidated,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            WriteReason::RamHit => "ram_hit",
            WriteReason::SeenBefore => "seen_before",
            WriteReason::Revalidated => "revalidated",
        }
    }

    pub(super) fn from_proof(proof: Proof) -> WriteReason {
        match proof {
            Proof::RamHit => WriteReason::RamHit,
            Proof::SeenBefore => WriteReason::SeenBefore,
        }
    }
}

/// Why an entry leaving RAM was not written to disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// Never hit in RAM, and stored on a first request: a one-hit wonder.
    FirstHit,
    /// The write queue (`disk.write_buffer`) or the write rate (`disk.write_budget`) was full.
    Budget,
    /// The file system had less than a block free.
    Full,
    /// The record is larger than a block.
    TooLarge,
    /// The engine failed (a panic inside it, or it could not open): the tier stops until a
    /// restart.
    Failed,
    /// The engine was still recovering its index.
    Recovering,
}

impl Rejection {
    pub const ALL: [Rejection; 6] = [
        Rejection::FirstHit,
        Rejection::Budget,
        Rejection::Full,
        Rejection::TooLarge,
        Rejection::Failed,
        Rejection::Recovering,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Rejection::FirstHit => "first_hit",
            Rejection::Budget => "budget",
            Rejection::Full => "full",
            Rejection::TooLarge => "too_large",
            Rejection::Failed => "failed",
            Rejection::Recovering => "recovering",
        }
    }
}

/// What the tier counts about itself, read by the metrics exporter.
#[derive(Debug, Default)]
pub struct DiskCounters {
    /// Records written, and their bytes, by [`WriteReason`] (in `ALL` order).
    pub writes: [AtomicU64; 3],
    pub written_bytes: [AtomicU64; 3],
    /// Entries not written, by [`Rejection`] (in `ALL` order).
    pub rejected: [AtomicU64; 6],
    /// Lookups that found a usable record, its body bytes, and lookups that found none.
    pub hits: AtomicU64,
    pub hit_bytes: AtomicU64,
    pub misses: AtomicU64,
    /// Reads the engine failed (I/O errors).
    pub read_errors: AtomicU64,
    /// Records removed by purge or invalidation.
    pub removed: AtomicU64,
    /// Proven entries leaving RAM not written again: their record is still on disk (they were
    /// read back from it).
    pub skipped: AtomicU64,
    /// Records that passed the engine's checks but did not decode (dropped like the engine's).
    pub(super) undecodable: AtomicU64,
}

/// The tier's state at scrape time.
#[derive(Clone, Copy, Debug, Default)]
pub struct DiskStats {
    /// Bytes the tier's files take on the file system (allocated blocks).
    pub bytes: u64,
    pub max_bytes: u64,
    /// Records on disk, by the engine's index.
    pub entries: u64,
    /// Bytes of those records: what the tier holds (`bytes` counts its files, which are
    /// preallocated).
    pub live_bytes: u64,
    pub writes: [u64; 3],
    pub written_bytes: [u64; 3],
    /// Bytes the engine wrote to its files (records, their headers and padding, tombstones).
    pub engine_written_bytes: u64,
    /// Disk hits that were not in the page cache and were read on the blocking pool.
    pub cold_reads: u64,
    /// Reclaimed segments given a new inode because responses still held values read from them.
    pub renewed_segments: u64,
    /// `fdatasync`s of the engine's files (`disk.sync`), and the time they took.
    pub syncs: u64,
    pub sync_seconds: f64,
    pub rejected: [u64; 6],
    pub hits: u64,
    pub hit_bytes: u64,
    pub misses: u64,
    pub read_errors: u64,
    /// Records that failed their checksum or layout when read, dropped and never served.
    pub dropped: u64,
    pub removed: u64,
    pub skipped: u64,
    pub full: bool,
    /// The engine is still recovering its index (lookups miss, nothing is written).
    pub recovering: bool,
    /// What the recovery found, once the tier is open (0 before).
    pub recovered_entries: u64,
    pub recovery_seconds: f64,
}
