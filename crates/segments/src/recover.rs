//! Recovery at open: rebuilding the index from the segments, sealed ones from their summaries,
//! the others by scanning their records up to the first torn one.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::Counters;
use crate::files::SegmentFile;
use crate::index::{Index, Location};
use crate::layout::{
    self, FOOTER_BYTES, Footer, RECORD_HEADER_BYTES, RecordHeader, SEGMENT_HEADER_BYTES,
    SUMMARY_ENTRY_BYTES, SegmentHeader, SummaryEntry,
};

/// Bytes read at a time while scanning an unsealed segment.
const SCAN_WINDOW: usize = 4 << 20;

/// What recovery found, for the engine to start from.
pub(crate) struct Recovered {
    /// Segments in use, oldest first.
    pub sealed: VecDeque<u32>,
    pub free: VecDeque<u32>,
    pub next_seq: u64,
    /// Segments whose summary was read.
    pub summaries_read: u64,
    /// Segments scanned record by record (not sealed when the engine stopped).
    pub segments_scanned: u64,
    /// Records skipped in scans: whole headers whose key or value failed the payload CRC.
    pub records_skipped: u64,
}

/// What one segment file holds.
enum Found {
    /// Nothing to replay; `seq` is that of a header left without records (0 if none), which the
    /// next sequence must still pass so stale records can never match a restarted header.
    Free { seq: u64 },
    Used {
        seq: u64,
        entries: Vec<SummaryEntry>,
        /// Where a seal would go, for a segment that has none yet.
        unsealed_tail: Option<u32>,
        skipped: u64,
    },
}

/// Reads every segment, replays them into `index` oldest first (later records and tombstones
/// win), records each segment's sequence in `seqs`, and seals the segments that were left
/// unsealed so the next open reads their summaries (syncing them as the writer does, when `sync`
/// counts the syncs). Unreadable segments are logged, naming the file, and treated as free.
pub(crate) fn recover(
    files: &[SegmentFile],
    segment_bytes: u32,
    index: &Index,
    seqs: &[AtomicU64],
    sync: Option<&Counters>,
) -> Recovered {
    let mut used = Vec::new();
    let mut recovered = Recovered {
        sealed: VecDeque::new(),
        free: VecDeque::new(),
        next_seq: 1,
        summaries_read: 0,
        segments_scanned: 0,
        records_skipped: 0,
    };
    for (segment, file) in files.iter().enumerate() {
        match inspect(file, segment_bytes) {
            Ok(Found::Free { seq }) => {
                recovered.next_seq = recovered.next_seq.max(seq + 1);
                recovered.free.push_back(segment as u32);
            }
            Ok(Found::Used {
                seq,
                entries,
                unsealed_tail,
                skipped,
            }) => {
                used.push((seq, segment as u32, entries, unsealed_tail));
                recovered.records_skipped += skipped;
            }
            Err(error) => {
                tracing::warn!(path = %file.path.display(), %error, "segment unreadable; its records are lost and it is reused");
                recovered.free.push_back(segment as u32);
            }
        }
    }
    used.sort_by_key(|(seq, segment, ..)| (*seq, *segment));
    for (seq, segment, entries, unsealed_tail) in used {
        for entry in &entries {
            if entry.flags & layout::FLAG_TOMBSTONE != 0 {
                index.remove(entry.hash);
            } else {
                let location = Location {
                    segment,
                    offset: entry.offset,
                    len: entry.len,
                };
                index.insert(entry.hash, location);
            }
        }
        seqs[segment as usize].store(seq, Ordering::Release);
        recovered.next_seq = recovered.next_seq.max(seq + 1);
        recovered.sealed.push_back(segment);
        match unsealed_tail {
            None => recovered.summaries_read += 1,
            Some(tail) => {
                recovered.segments_scanned += 1;
                let file = &files[segment as usize];
                seal_scanned(file, segment_bytes, seq, tail, &entries, sync);
            }
        }
    }
    recovered
}

/// Writes the seal of a scanned segment, so the next open need not scan it. Failing leaves it
/// scannable, as it was. With `sync`, the footer goes last, between two syncs: the records read
/// may be in the page cache alone (a killed process), and the footer must not reach the device
/// before them.
fn seal_scanned(
    file: &SegmentFile,
    segment_bytes: u32,
    seq: u64,
    tail: u32,
    entries: &[SummaryEntry],
    sync: Option<&Counters>,
) {
    let summary = entries.len() as u64 * u64::from(SUMMARY_ENTRY_BYTES);
    if u64::from(tail) + summary + u64::from(FOOTER_BYTES) > u64::from(segment_bytes) {
        tracing::warn!(path = %file.path.display(), "no room to seal a scanned segment; it will be scanned again");
        return;
    }
    for (offset, bytes) in layout::encode_seal(seq, segment_bytes, tail, entries) {
        let is_footer = offset == segment_bytes - FOOTER_BYTES;
        if is_footer && sync.is_some_and(|counters| !counters.sync(file)) {
            return;
        }
        if let Err(error) = file.write_all_at(&[bytes], u64::from(offset)) {
            tracing::warn!(path = %file.path.display(), %error, "could not seal a scanned segment; it will be scanned again");
            return;
        }
        if is_footer && let Some(counters) = sync {
            counters.sync(file);
        }
    }
}

fn inspect(file: &SegmentFile, segment_bytes: u32) -> io::Result<Found> {
    let header = file.read_at(0, SEGMENT_HEADER_BYTES as usize)?;
    let Some(header) = SegmentHeader::parse(&header) else {
        return Ok(Found::Free { seq: 0 });
    };
    if header.segment_bytes != u64::from(segment_bytes) || header.seq == 0 {
        tracing::warn!(path = %file.path.display(), "segment header names another segment size; segment reused");
        return Ok(Found::Free { seq: header.seq });
    }
    if let Some(entries) = read_seal(file, segment_bytes, header.seq)? {
        return Ok(Found::Used {
            seq: header.seq,
            entries,
            unsealed_tail: None,
            skipped: 0,
        });
    }
    let (entries, tail, skipped) = scan(file, segment_bytes, header.seq)?;
    if entries.is_empty() {
        return Ok(Found::Free { seq: header.seq });
    }
    Ok(Found::Used {
        seq: header.seq,
        entries,
        unsealed_tail: Some(tail),
        skipped,
    })
}

/// The summary of a segment sealed under sequence `seq`, or `None` if it has no valid seal.
fn read_seal(
    file: &SegmentFile,
    segment_bytes: u32,
    seq: u64,
) -> io::Result<Option<Vec<SummaryEntry>>> {
    let footer_at = segment_bytes - FOOTER_BYTES;
    let footer = file.read_at(u64::from(footer_at), FOOTER_BYTES as usize)?;
    let Some(footer) = Footer::parse(&footer) else {
        return Ok(None);
    };
    if footer.seq != seq
        || footer.summary_offset < u64::from(SEGMENT_HEADER_BYTES)
        || footer.summary_offset + footer.summary_bytes() > u64::from(footer_at)
    {
        return Ok(None);
    }
    let summary = file.read_at(footer.summary_offset, footer.summary_bytes() as usize)?;
    let Some(entries) = layout::parse_summary(&footer, &summary) else {
        tracing::warn!(path = %file.path.display(), "segment summary fails its CRC; scanning the segment");
        return Ok(None);
    };
    let in_bounds = entries.iter().all(|entry| {
        entry.offset >= SEGMENT_HEADER_BYTES
            && entry.offset.is_multiple_of(8)
            && entry.len.is_multiple_of(8)
            && u64::from(entry.offset) + u64::from(entry.len) <= footer.summary_offset
    });
    Ok(in_bounds.then_some(entries))
}

/// Scans records from the segment's start: stops at the first record whose header is not whole
/// (bad magic or CRC, another sequence, a length past the end) and skips whole headers whose
/// key or value fails the payload CRC. Returns the records, where the scan stopped, and how many
/// it skipped.
fn scan(
    file: &SegmentFile,
    segment_bytes: u32,
    seq: u64,
) -> io::Result<(Vec<SummaryEntry>, u32, u64)> {
    let end = u64::from(segment_bytes - FOOTER_BYTES);
    let mut window = Window::new(file, end);
    let mut offset = u64::from(SEGMENT_HEADER_BYTES);
    let mut entries = Vec::new();
    let mut skipped = 0;
    while offset + u64::from(RECORD_HEADER_BYTES) <= end {
        let Some(header) = RecordHeader::parse(window.bytes(offset, RECORD_HEADER_BYTES as usize)?)
        else {
            break;
        };
        let len = header.record_bytes();
        if header.seq != seq || offset + len > end {
            break;
        }
        let record = window.bytes(offset, len as usize)?;
        if header.payload_ok(record) {
            entries.push(SummaryEntry {
                hash: header.hash,
                offset: offset as u32,
                len: len as u32,
                flags: header.flags,
            });
        } else {
            skipped += 1;
        }
        offset += len;
    }
    Ok((entries, offset as u32, skipped))
}

/// Sequential reads of a file in large pieces, for a scan.
struct Window<'a> {
    file: &'a SegmentFile,
    end: u64,
    start: u64,
    buf: Vec<u8>,
}

impl<'a> Window<'a> {
    fn new(file: &'a SegmentFile, end: u64) -> Window<'a> {
        Window {
            file,
            end,
            start: 0,
            buf: Vec::new(),
        }
    }

    /// `len` bytes at `offset` (which the caller keeps below `end`).
    fn bytes(&mut self, offset: u64, len: usize) -> io::Result<&[u8]> {
        let have =
            offset >= self.start && offset + len as u64 <= self.start + self.buf.len() as u64;
        if !have {
            let size = (self.end - offset).min(len.max(SCAN_WINDOW) as u64) as usize;
            self.buf.resize(size, 0);
            self.file.read_exact_at(&mut self.buf, offset)?;
            self.start = offset;
        }
        let at = (offset - self.start) as usize;
        Ok(&self.buf[at..at + len])
    }
}
