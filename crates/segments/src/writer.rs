//! The write path: appends into the active segment's RAM batch, segment rotation and sealing, and
//! the writer thread that lands batches in the files with large `pwritev`s.

use std::collections::VecDeque;
use std::mem;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use parking_lot::MutexGuard;

use crate::Shared;
use crate::files::SegmentFile;
use crate::index::Location;
use crate::layout::{
    self, FOOTER_BYTES, SEGMENT_HEADER_BYTES, SUMMARY_ENTRY_BYTES, SegmentHeader, SummaryEntry,
};

/// Where appends go, and which segments are free or sealed; guarded by `Shared::log`.
///
/// Appends and the index updates they make happen under this one lock, so the order of records
/// in the files is the order the index saw them: recovery, replaying the files in order, reaches
/// the same newest record for every key.
pub(crate) struct Log {
    /// The segment being appended to; `None` once closed (or before the first rotation).
    pub active: Option<Active>,
    /// Writes to the active segment not yet handed to the writer.
    pub open: Batch,
    /// Segments holding nothing, next to be started first.
    pub free: VecDeque<u32>,
    /// Sealed segments, oldest first: the order they are reclaimed in.
    pub sealed: VecDeque<u32>,
    pub next_seq: u64,
    pub closed: bool,
}

/// The segment being appended to.
pub(crate) struct Active {
    pub segment: u32,
    pub seq: u64,
    /// Where the next record goes.
    pub tail: u32,
    /// The summary it will be sealed with: one entry per record so far.
    pub summary: Vec<SummaryEntry>,
    /// Bytes at the end kept from puts for the records the pending reclaim re-appends: with
    /// them, a reclaim never waits for room, and a re-appended entry is readable throughout.
    pub reserved: u32,
}

impl Active {
    /// Whether a `len`-byte record fits, leaving room for the summary (its entry included), the
    /// footer, and (but for re-appends) the reserved room.
    fn fits(&self, len: u32, segment_bytes: u32, room: Room) -> bool {
        let summary = (self.summary.len() as u64 + 1) * u64::from(SUMMARY_ENTRY_BYTES);
        let reserved = if room == Room::Reserved {
            0
        } else {
            self.reserved
        };
        u64::from(self.tail) + u64::from(len) + summary + u64::from(FOOTER_BYTES + reserved)
            <= u64::from(segment_bytes)
    }
}

/// One write of a batch: bytes for a place in the batch's segment.
pub(crate) struct Write {
    pub offset: u32,
    pub bytes: Bytes,
    /// The key hash when the write is a record the index may point at (not a tombstone, header,
    /// summary or footer): dropped from the index if the write fails.
    pub indexed: Option<u64>,
}

/// Writes to one segment, in increasing offset order.
pub(crate) struct Batch {
    pub segment: u32,
    pub writes: Vec<Write>,
    pub bytes: u64,
    /// The batch ends with the segment's summary and footer (its last write).
    pub seals: bool,
}

impl Batch {
    pub(crate) fn new(segment: u32) -> Batch {
        Batch {
            segment,
            writes: Vec::new(),
            bytes: 0,
            seals: false,
        }
    }

    fn push(&mut self, write: Write) {
        self.bytes += write.bytes.len() as u64;
        self.writes.push(write);
    }

    /// The record at `location` if this batch holds it.
    fn find(&self, location: Location) -> Option<Bytes> {
        if self.segment != location.segment {
            return None;
        }
        let at = self
            .writes
            .binary_search_by_key(&location.offset, |write| write.offset)
            .ok()?;
        let bytes = &self.writes[at].bytes;
        (bytes.len() == location.len as usize).then(|| bytes.clone())
    }
}

/// Batches handed to the writer thread, oldest first; guarded by `Shared::queue`.
#[derive(Default)]
pub(crate) struct Queue {
    /// A batch stays here (and readable) until it is in its file.
    pub batches: VecDeque<Arc<Batch>>,
    pub pushed: u64,
    pub written: u64,
    pub reclaim_wanted: bool,
    pub reclaiming: bool,
    pub shutdown: bool,
    pub stopped: bool,
}

/// What an append may do when the active segment is full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Room {
    /// Seal it and start the next, waiting for the writer to free one if none is free.
    Wait,
    /// Use the room the active segment keeps for re-appends (see [`Active::reserved`]), and
    /// refuse if that is not enough: the writer thread, which frees segments, must never wait
    /// for itself.
    Reserved,
}

/// Why an append did not happen.
#[derive(Debug)]
pub(crate) enum Refused {
    Closed,
    /// The active segment has no room, and the caller may not wait for the next.
    NoRoom,
}

impl Shared {
    /// Appends an encoded record (see [`layout::encode_record`]) to the active segment and
    /// returns where it went. A full segment is sealed and the next free one started; `room`
    /// says whether to wait for one when none is free.
    pub(crate) fn append(
        &self,
        log: &mut MutexGuard<'_, Log>,
        hash: u64,
        mut record: BytesMut,
        flags: u32,
        room: Room,
    ) -> Result<Location, Refused> {
        let len = record.len() as u32;
        loop {
            if log.closed {
                return Err(Refused::Closed);
            }
            if let Some(active) = &log.active
                && active.fits(len, self.segment_bytes, room)
            {
                break;
            }
            if room == Room::Reserved {
                return Err(Refused::NoRoom);
            }
            if !self.rotate(log) {
                self.log_changed.wait(log);
            }
        }
        let log = &mut **log;
        let Some(active) = log.active.as_mut() else {
            return Err(Refused::NoRoom);
        };
        layout::stamp_record(&mut record, active.seq);
        let location = Location {
            segment: active.segment,
            offset: active.tail,
            len,
        };
        active.tail += len;
        active.summary.push(SummaryEntry {
            hash,
            offset: location.offset,
            len,
            flags,
        });
        let indexed = (flags & layout::FLAG_TOMBSTONE == 0).then_some(hash);
        self.push_write(log, location.offset, record.freeze(), indexed);
        if log.open.bytes >= self.options.flush_bytes {
            self.hand_over(log);
        }
        Ok(location)
    }

    fn push_write(&self, log: &mut Log, offset: u32, bytes: Bytes, indexed: Option<u64>) {
        self.queued_bytes
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        log.open.push(Write {
            offset,
            bytes,
            indexed,
        });
    }

    /// Seals the active segment (if any) and starts the next free one; `false` when none is
    /// free (the writer has been asked to reclaim one).
    pub(crate) fn rotate(&self, log: &mut Log) -> bool {
        let Some(next) = log.free.pop_front() else {
            self.want_reclaim();
            return false;
        };
        self.seal(log);
        self.hand_over(log);
        let seq = log.next_seq;
        log.next_seq += 1;
        // Before any index entry points into the segment: readers check records against it.
        self.seqs[next as usize].store(seq, Ordering::Release);
        // No segment left free: the writer reclaims one now, so the next rotation need not wait
        // for it, and this segment keeps room for what that reclaim re-appends.
        let reclaim = log.free.is_empty();
        log.active = Some(Active {
            segment: next,
            seq,
            tail: SEGMENT_HEADER_BYTES,
            summary: Vec::new(),
            reserved: if reclaim { self.reinsert_budget() } else { 0 },
        });
        log.open = Batch::new(next);
        let header = SegmentHeader {
            seq,
            segment_bytes: u64::from(self.segment_bytes),
        };
        self.push_write(log, 0, header.encode(), None);
        if reclaim {
            self.want_reclaim();
        }
        true
    }

    /// Writes the active segment's summary and footer into the open batch and files it as the
    /// newest sealed segment.
    pub(crate) fn seal(&self, log: &mut Log) {
        let Some(active) = log.active.take() else {
            return;
        };
        let writes =
            layout::encode_seal(active.seq, self.segment_bytes, active.tail, &active.summary);
        for (offset, bytes) in writes {
            self.push_write(log, offset, bytes, None);
        }
        log.open.seals = true;
        log.sealed.push_back(active.segment);
    }

    /// Hands the open batch to the writer thread.
    pub(crate) fn hand_over(&self, log: &mut Log) {
        if log.open.writes.is_empty() {
            return;
        }
        let segment = log.open.segment;
        let batch = mem::replace(&mut log.open, Batch::new(segment));
        let mut queue = self.queue.lock();
        queue.batches.push_back(Arc::new(batch));
        queue.pushed += 1;
        self.queue_changed.notify_all();
    }

    fn want_reclaim(&self) {
        let mut queue = self.queue.lock();
        queue.reclaim_wanted = true;
        self.queue_changed.notify_all();
    }

    /// The record at `location` while it is still in RAM (not yet in its file).
    pub(crate) fn find_in_ram(&self, location: Location) -> Option<Bytes> {
        // Batches only move from `open` to the queue to the file, so looking in that order
        // cannot miss one in flight.
        if let Some(record) = self.log.lock().open.find(location) {
            return Some(record);
        }
        let queue = self.queue.lock();
        queue.batches.iter().find_map(|batch| batch.find(location))
    }

    /// Lands `batch` in its file. With [`Options::sync_on_seal`](crate::Options::sync_on_seal),
    /// a sealing batch's footer goes last, between two syncs: it says the segment is sealed, so
    /// the device gets it only once it holds the records and summary it names. A failed sync
    /// leaves the segment unsealed on disk, to be scanned record by record at the next open.
    fn write_batch(&self, batch: &Batch) {
        let file = &self.files[batch.segment as usize];
        match batch.writes.split_last() {
            Some((footer, before)) if batch.seals && self.options.sync_on_seal => {
                self.write_runs(file, batch.segment, before);
                if self.counters.sync(file) {
                    self.write_runs(file, batch.segment, std::slice::from_ref(footer));
                    self.counters.sync(file);
                }
            }
            _ => self.write_runs(file, batch.segment, &batch.writes),
        }
    }

    /// Writes `writes` (in increasing offset order) into `file`, each run of adjoining ones in
    /// one `pwritev`. A failed run is logged and counted, and the records in it are dropped from
    /// the index.
    fn write_runs(&self, file: &SegmentFile, segment: u32, writes: &[Write]) {
        let mut start = 0;
        while start < writes.len() {
            let mut end = start + 1;
            let mut next_offset = writes[start].offset as usize + writes[start].bytes.len();
            while end < writes.len() && writes[end].offset as usize == next_offset {
                next_offset += writes[end].bytes.len();
                end += 1;
            }
            let run = &writes[start..end];
            let pieces: Vec<Bytes> = run.iter().map(|write| write.bytes.clone()).collect();
            let offset = u64::from(run[0].offset);
            match file.write_all_at(&pieces, offset) {
                Ok(()) => {
                    let bytes = next_offset as u64 - offset;
                    self.counters
                        .written_bytes
                        .fetch_add(bytes, Ordering::Relaxed);
                }
                Err(error) => {
                    tracing::warn!(path = %file.path.display(), offset, %error, "segment write failed; its records are dropped");
                    self.counters.write_errors.fetch_add(1, Ordering::Relaxed);
                    for write in run {
                        let Some(hash) = write.indexed else { continue };
                        let location = Location {
                            segment,
                            offset: write.offset,
                            len: write.bytes.len() as u32,
                        };
                        if self.index.remove_if(hash, location) {
                            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }
            start = end;
        }
    }

    /// Waits until every write appended so far is in the files and no reclaim is under way.
    pub(crate) fn wait_idle(&self) {
        self.hand_over(&mut self.log.lock());
        let mut queue = self.queue.lock();
        let target = queue.pushed;
        while !queue.stopped && (queue.written < target || queue.reclaim_wanted || queue.reclaiming)
        {
            self.queue_changed.wait(&mut queue);
        }
    }
}

/// How long records may wait in the open batch for more to fill it: after this long without a
/// batch to write, the writer writes what there is. A quiet proxy's records reach the files
/// within about this long (a crash loses no more), and the files' contents are up to date when
/// the writes stop.
pub(crate) const IDLE_FLUSH: Duration = Duration::from_secs(1);

/// The writer thread: lands queued batches in order, reclaims the oldest sealed segment when
/// asked, writes a part-filled batch after [`IDLE_FLUSH`] without work, and stops once shut
/// down with nothing left to write.
pub(crate) fn run(shared: Arc<Shared>) {
    let mut queue = shared.queue.lock();
    loop {
        if let Some(batch) = queue.batches.front().cloned() {
            MutexGuard::unlocked(&mut queue, || shared.write_batch(&batch));
            queue.batches.pop_front();
            queue.written += 1;
            shared
                .queued_bytes
                .fetch_sub(batch.bytes, Ordering::Relaxed);
            shared.queue_changed.notify_all();
        } else if queue.shutdown {
            queue.stopped = true;
            shared.queue_changed.notify_all();
            return;
        } else if queue.reclaim_wanted {
            queue.reclaim_wanted = false;
            queue.reclaiming = true;
            MutexGuard::unlocked(&mut queue, || shared.reclaim_oldest());
            queue.reclaiming = false;
            shared.queue_changed.notify_all();
        } else if shared
            .queue_changed
            .wait_for(&mut queue, IDLE_FLUSH)
            .timed_out()
        {
            // The log is locked before the queue everywhere: let go of the queue first.
            MutexGuard::unlocked(&mut queue, || shared.hand_over(&mut shared.log.lock()));
        }
    }
}
