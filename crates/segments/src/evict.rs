//! Eviction: reclaiming the oldest sealed segment, re-appending the entries in it that were read
//! since they were written (up to a fifth of a segment), dropping the rest from the index.

use std::sync::atomic::Ordering;

use bytes::{Bytes, BytesMut};

use crate::Shared;
use crate::files::Renewed;
use crate::index::Location;
use crate::layout::{
    self, FOOTER_BYTES, Footer, RecordHeader, SEGMENT_HEADER_BYTES, SUMMARY_ENTRY_BYTES,
    SummaryEntry,
};
use crate::writer::Room;

/// The share of a segment's bytes that may be re-appended when it is reclaimed (Navy's and the
/// design note's 20%): enough to keep a hot set alive, little enough that a segment of nothing
/// but hits still frees most of its room.
const REINSERT_DIVISOR: u32 = 5;

/// A record kept from a reclaimed segment: its key hash, where it was, and its bytes.
type Kept = (u64, Location, BytesMut);

impl Shared {
    /// Frees the oldest sealed segment, if there is one, and wakes appends waiting for room.
    pub(crate) fn reclaim_oldest(&self) {
        let Some(segment) = self.log.lock().sealed.pop_front() else {
            return;
        };
        let file = &self.files[segment as usize];
        let keep = match self.read_summary(segment) {
            Ok(entries) => self.sort_reclaimed(segment, &entries),
            Err(reason) => {
                tracing::warn!(path = %file.path.display(), reason, "sealed segment has no readable summary; sweeping the index for its entries");
                let swept = self.index.remove_segment(segment);
                self.counters.reclaimed.fetch_add(swept, Ordering::Relaxed);
                Vec::new()
            }
        };
        // They move while this segment is still readable, into the room the active segment
        // kept for them (see `Active::reserved`).
        self.reinsert(keep);
        self.seqs[segment as usize].store(0, Ordering::Release);
        if let Some(verified) = &self.verified {
            verified.forget(segment);
        }
        // Values handed out as pins of the mapping keep their bytes: the segment moves to a new
        // inode rather than be rewritten under them.
        match file.renew_if_pinned() {
            Ok(Renewed::InPlace) => {
                // A zeroed header makes the segment free on disk too: after a crash it is not
                // replayed. (A new inode is all zeros already.)
                let blank = Bytes::from_static(&[0; SEGMENT_HEADER_BYTES as usize]);
                if let Err(error) = file.write_all_at(&[blank], 0) {
                    tracing::warn!(path = %file.path.display(), %error, "could not blank a reclaimed segment's header");
                    self.counters.write_errors.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok(Renewed::NewInode { .. }) => {
                self.counters.renewed.fetch_add(1, Ordering::Relaxed);
            }
            Err(error) => {
                // Not rewritten while pinned: it waits at the back of the line, its index
                // entries gone, and is tried again when its turn comes.
                tracing::warn!(path = %file.path.display(), %error, "could not give a pinned segment a new inode; it is left as it is for now");
                self.counters.write_errors.fetch_add(1, Ordering::Relaxed);
                self.log.lock().sealed.push_back(segment);
                self.log_changed.notify_all();
                return;
            }
        }
        self.log.lock().free.push_back(segment);
        self.log_changed.notify_all();
    }

    /// Re-appends records kept from a reclaimed segment (where their index entries still point
    /// at them) into the active segment's reserved room, then frees that room for puts.
    fn reinsert(&self, keep: Vec<Kept>) {
        let mut log = self.log.lock();
        for (hash, old, record) in keep {
            // Overwritten or removed since: the newer state wins.
            if self.index.get(hash) != Some(old) {
                continue;
            }
            match self.append(&mut log, hash, record, 0, Room::Reserved) {
                Ok(new) => {
                    self.index.replace_if(hash, old, new);
                    self.counters.reinserted.fetch_add(1, Ordering::Relaxed);
                }
                Err(_) => {
                    if self.index.remove_if(hash, old) {
                        self.counters.reclaimed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
        if let Some(active) = log.active.as_mut() {
            active.reserved = 0;
        }
    }

    /// Drops the entries of `segment` from the index, except those that were read since they were
    /// written and fit the re-append budget: those are read back and returned.
    fn sort_reclaimed(&self, segment: u32, entries: &[SummaryEntry]) -> Vec<Kept> {
        let budget = self.reinsert_budget();
        let mut kept_bytes = 0;
        let mut keep = Vec::new();
        for entry in entries
            .iter()
            .filter(|entry| entry.flags & layout::FLAG_TOMBSTONE == 0)
        {
            let location = Location {
                segment,
                offset: entry.offset,
                len: entry.len,
            };
            let Some((indexed, hit)) = self.index.get_with_hit(entry.hash) else {
                continue;
            };
            if indexed != location {
                continue;
            }
            // A kept record takes its summary entry too.
            let cost = entry.len + SUMMARY_ENTRY_BYTES;
            if hit && kept_bytes + cost <= budget {
                if let Some(record) = self.read_for_move(entry.hash, location) {
                    kept_bytes += cost;
                    keep.push((entry.hash, location, record));
                    continue;
                }
                if self.index.remove_if(entry.hash, location) {
                    self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                }
                continue;
            }
            if self.index.remove_if(entry.hash, location) {
                self.counters.reclaimed.fetch_add(1, Ordering::Relaxed);
            }
        }
        keep
    }

    /// Bytes (records and their summary entries) a reclaim may re-append.
    pub(crate) fn reinsert_budget(&self) -> u32 {
        self.segment_bytes / REINSERT_DIVISOR
    }

    /// The summary of sealed `segment`, read from its file.
    fn read_summary(&self, segment: u32) -> Result<Vec<SummaryEntry>, String> {
        let file = &self.files[segment as usize];
        let footer_at = u64::from(self.segment_bytes - FOOTER_BYTES);
        let footer = file
            .read_at(footer_at, FOOTER_BYTES as usize)
            .map_err(|error| format!("footer unreadable: {error}"))?;
        let footer = Footer::parse(&footer).ok_or("footer invalid")?;
        if footer.seq != self.seqs[segment as usize].load(Ordering::Acquire) {
            return Err(format!(
                "footer seals sequence {}, not the segment's",
                footer.seq
            ));
        }
        if footer.summary_offset + footer.summary_bytes() > footer_at {
            return Err("summary runs past the footer".into());
        }
        let summary = file
            .read_at(footer.summary_offset, footer.summary_bytes() as usize)
            .map_err(|error| format!("summary unreadable: {error}"))?;
        layout::parse_summary(&footer, &summary).ok_or_else(|| "summary CRC mismatch".into())
    }

    /// The whole record at `location`, checked, ready to be stamped into the active segment.
    fn read_for_move(&self, hash: u64, location: Location) -> Option<BytesMut> {
        let file = &self.files[location.segment as usize];
        let record = file
            .read_at(u64::from(location.offset), location.len as usize)
            .ok()?;
        let header = RecordHeader::parse(&record)?;
        let seq = self.seqs[location.segment as usize].load(Ordering::Acquire);
        let whole = header.hash == hash
            && header.seq == seq
            && header.record_bytes() == u64::from(location.len)
            && header.payload_ok(&record);
        // No copy: the read buffer becomes the record to re-append.
        whole.then(|| BytesMut::from(Bytes::from(record)))
    }
}
