//! The read path: a lookup on the calling thread that serves the RAM batch or page-cached data
//! at once (`preadv2(RWF_NOWAIT)`), and hands anything that would block to a [`ColdRead`].

use std::fmt;
use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use rustix::buffer::spare_capacity;
use rustix::io::{Errno, ReadWriteFlags};

use crate::Shared;
use crate::files::{self, Generation, InFile, SegmentFile};
use crate::index::Location;
use crate::layout::RecordHeader;

/// Values read through a mapping ([`ReadMode::Mapped`]) shorter than this are copied out rather
/// than pinned: a pin of a reclaimed segment holds at least a page, at most two more than the
/// value spans, so from 16 KiB up what it holds beyond the value is at most half of it.
pub(crate) const COPY_BELOW: usize = 16 << 10;

/// How [`Engine::get`](crate::Engine::get) reads a record from its file, chosen when the engine
/// opens from what the file system takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadMode {
    /// `preadv2(RWF_NOWAIT)` on the calling thread: what the page cache holds comes at once, the
    /// rest is a [`Lookup::Cold`].
    NoWait,
    /// A memory-backed file system (tmpfs, ramfs) that refuses `RWF_NOWAIT`: a plain read on the
    /// calling thread, which never waits for a device (only for swap).
    Memory,
    /// A memory-backed file system, its segments mapped: a value is a slice of the mapping,
    /// pinned while held (no copy, no system call). A reclaim that meets a pinned segment gives
    /// it a new inode instead of rewriting it ([`Stats::renewed`](crate::Stats::renewed)).
    Mapped,
    /// Every read of a flushed record is a [`Lookup::Cold`]: a file system without
    /// `RWF_NOWAIT` on a device, or [`Options::nowait_reads`](crate::Options::nowait_reads) off.
    Blocking,
}

impl ReadMode {
    /// The mode for reads of `file` (a segment file), `nowait` unless the caller turned it off.
    pub(crate) fn probe(file: &SegmentFile, nowait: bool) -> ReadMode {
        if !nowait {
            return ReadMode::Blocking;
        }
        let mut byte = [0u8; 1];
        let mut slices = [io::IoSliceMut::new(&mut byte)];
        let generation = file.current();
        match rustix::io::preadv2(&generation.file, &mut slices, 0, ReadWriteFlags::NOWAIT) {
            Err(Errno::OPNOTSUPP) if memory_backed(&generation.file) => ReadMode::Memory,
            Err(Errno::OPNOTSUPP) => ReadMode::Blocking,
            // Read, or EAGAIN (not cached, which is the point), or an error every read will
            // meet and report.
            _ => ReadMode::NoWait,
        }
    }

    /// The mode's name, for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            ReadMode::NoWait => "nowait",
            ReadMode::Memory => "memory",
            ReadMode::Mapped => "mapped",
            ReadMode::Blocking => "blocking",
        }
    }
}

/// Whether `file` lives on tmpfs or ramfs (`statfs` magic numbers from `linux/magic.h`).
fn memory_backed(file: &File) -> bool {
    const TMPFS_MAGIC: u64 = 0x0102_1994;
    const RAMFS_MAGIC: u64 = 0x8584_58f6;
    rustix::fs::fstatfs(file).is_ok_and(|stat| {
        // `f_type`'s width differs between architectures.
        #[allow(clippy::unnecessary_cast, clippy::cast_sign_loss)]
        let kind = stat.f_type as u64;
        kind == TMPFS_MAGIC || kind == RAMFS_MAGIC
    })
}

/// What [`Engine::get`](crate::Engine::get) found.
#[derive(Debug)]
pub enum Lookup {
    /// No record under the key (or the one there failed its checks and was dropped).
    Miss,
    /// The value, a slice of the buffer the record was read into (or of the RAM batch).
    Hit(Bytes),
    /// The value, a slice of a segment's mapping ([`ReadMode::Mapped`], values of 16 KiB and
    /// more), with its place in the file: both hold the same pin.
    Mapped(Bytes, InFile),
    /// The record is not (all) in the page cache: finish the read where blocking is allowed.
    Cold(ColdRead),
}

/// A read that would have blocked the calling thread: [`ColdRead::finish`] completes it, on a
/// thread that may block (e.g. tokio's `spawn_blocking`).
pub struct ColdRead {
    shared: Arc<Shared>,
    /// The inode the read began on: a reclaim may give the segment a new one meanwhile.
    generation: Arc<Generation>,
    hash: u64,
    key: Box<[u8]>,
    pub(crate) location: Location,
    seq: u64,
    /// The record so far: its capacity is the record's length, its length what has been read.
    pub(crate) buf: Vec<u8>,
}

impl fmt::Debug for ColdRead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ColdRead")
            .field("location", &self.location)
            .field("filled", &self.buf.len())
            .finish_non_exhaustive()
    }
}

impl ColdRead {
    /// Reads the rest of the record (blocking), checks it and returns its value: `Ok(None)` when
    /// it failed a check (it is then dropped from the index) or belongs to another key.
    ///
    /// # Errors
    ///
    /// The read's error when the file could not be read.
    pub fn finish(mut self) -> io::Result<Option<Bytes>> {
        if !read_rest(&self.generation.file, self.location, &mut self.buf)? {
            // The file ends inside the record: it was cut short, the record is not whole.
            drop_entry(&self.shared, self.hash, self.location);
            return Ok(None);
        }
        let value = check(
            &self.shared,
            self.hash,
            &self.key,
            self.location,
            self.seq,
            &self.buf,
        );
        // No copy: the read buffer becomes the `Bytes` the value is sliced from.
        Ok(value.map(|range| Bytes::from(self.buf).slice(range)))
    }

    /// Bytes of the record already read without blocking.
    pub fn filled(&self) -> usize {
        self.buf.len()
    }
}

/// Looks `key` up and reads its record as far as it can without blocking.
pub(crate) fn lookup(shared: &Arc<Shared>, key: &[u8]) -> Lookup {
    let hash = shared.hasher.hash(key);
    // A reclaim re-appends the entries it keeps before it retires their segment, so an entry
    // found retired under the read has moved: one more look finds it.
    for _ in 0..2 {
        let Some(location) = shared.index.get_marking_hit(hash) else {
            return Lookup::Miss;
        };
        if let Some(record) = shared.find_in_ram(location) {
            return match value_in(&record, hash, key) {
                Some(value) => Lookup::Hit(value),
                None => Lookup::Miss,
            };
        }
        let seqs = &shared.seqs[location.segment as usize];
        let seq = seqs.load(Ordering::Acquire);
        if seq == 0 {
            continue;
        }
        let generation = shared.files[location.segment as usize].current();
        if shared.read_mode == ReadMode::Mapped
            && let Some(pin) = generation.pin(location.offset, location.len)
        {
            // The pin is in place before this look: a reclaim either sees it and leaves its
            // pages alone, or has already retired the segment, which this look sees.
            if seqs.load(Ordering::Acquire) != seq {
                continue;
            }
            return match check(shared, hash, key, location, seq, pin.bytes()) {
                // A small value is copied out: a held pin keeps whole pages of an old inode once
                // its segment is reclaimed, 4 KiB or more for a few hundred bytes.
                Some(range) if range.len() < COPY_BELOW => {
                    Lookup::Hit(Bytes::copy_from_slice(&pin.bytes()[range]))
                }
                Some(range) => {
                    let (value, file) = files::in_file(pin, range);
                    Lookup::Mapped(value, file)
                }
                None => Lookup::Miss,
            };
        }
        // Not zeroed: the reads fill it (zeroing 64 KiB cost 4% of a disk hit's CPU).
        let mut buf = Vec::with_capacity(location.len as usize);
        let file = &generation.file;
        match shared.read_mode {
            ReadMode::NoWait => read_nowait(file, location, &mut buf),
            // `Mapped` reads here only a generation not mapped, which `map_reads` prevents.
            ReadMode::Memory | ReadMode::Mapped => match read_rest(file, location, &mut buf) {
                Ok(true) => {}
                // Cut short or failed: the blocking read meets it again, drops or reports it.
                Ok(false) | Err(_) => buf.clear(),
            },
            ReadMode::Blocking => {}
        }
        if buf.len() < buf.capacity() {
            shared.counters.cold_reads.fetch_add(1, Ordering::Relaxed);
            return Lookup::Cold(ColdRead {
                shared: Arc::clone(shared),
                generation,
                hash,
                key: key.into(),
                location,
                seq,
                buf,
            });
        }
        if seqs.load(Ordering::Acquire) != seq {
            continue;
        }
        return match check(shared, hash, key, location, seq, &buf) {
            // No copy: the read buffer becomes the `Bytes` the value is sliced from.
            Some(range) => Lookup::Hit(Bytes::from(buf).slice(range)),
            None => Lookup::Miss,
        };
    }
    Lookup::Miss
}

/// Reads what the page cache holds of the record at `location` into `buf` (up to its capacity).
///
/// Linux 5.9 and 5.10 cut `RWF_NOWAIT` reads at 4096 bytes even when all is cached (tokio
/// #3803), so a short count is not an error: the rest is read by [`ColdRead::finish`].
fn read_nowait(file: &File, location: Location, buf: &mut Vec<u8>) {
    while buf.len() < buf.capacity() {
        let offset = u64::from(location.offset) + buf.len() as u64;
        match preadv2_nowait(file, buf, offset) {
            Ok(0) => break,
            Ok(_) => {}
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            // EAGAIN: not cached; anything else is met again, and reported, by the blocking read.
            Err(_) => break,
        }
    }
}

/// `preadv2(RWF_NOWAIT)` into `buf`'s spare capacity, which grows `buf` by what was read.
/// rustix's `preadv2` takes only initialised buffers; this one need not be zeroed first.
fn preadv2_nowait(file: &File, buf: &mut Vec<u8>, offset: u64) -> io::Result<usize> {
    let spare = buf.spare_capacity_mut();
    let iov = libc::iovec {
        iov_base: spare.as_mut_ptr().cast(),
        iov_len: spare.len(),
    };
    let offset = libc::off_t::try_from(offset).map_err(io::Error::other)?;
    // SAFETY: `iov` covers `spare`, memory `buf` owns and nothing else refers to during the
    // call; the kernel writes at most `iov_len` bytes there and reports how many.
    let read = unsafe { libc::preadv2(file.as_raw_fd(), &iov, 1, offset, libc::RWF_NOWAIT) };
    let read = usize::try_from(read).map_err(|_| io::Error::last_os_error())?;
    // SAFETY: the kernel initialised the first `read` bytes of the spare capacity.
    unsafe { buf.set_len(buf.len() + read) };
    Ok(read)
}

/// Reads the rest of the record at `location` into `buf` (up to its capacity), blocking if it
/// must; false when the file ends first.
fn read_rest(file: &File, location: Location, buf: &mut Vec<u8>) -> io::Result<bool> {
    while buf.len() < buf.capacity() {
        let offset = u64::from(location.offset) + buf.len() as u64;
        match rustix::io::pread(file, spare_capacity(buf), offset) {
            Ok(0) => return Ok(false),
            Ok(_) => {}
            Err(Errno::INTR) => {}
            Err(error) => return Err(error.into()),
        }
    }
    Ok(true)
}

/// The value of a RAM-held record if it is `key`'s (the index only knows the key's hash).
fn value_in(record: &Bytes, hash: u64, key: &[u8]) -> Option<Bytes> {
    let header = RecordHeader::parse(record)?;
    let ours = header.hash == hash && record.get(header.key_range())? == key;
    ours.then(|| record.slice(header.value_range()))
}

/// What a record read from its file turned out to be.
#[derive(Debug)]
enum Verdict {
    /// Whole and `key`'s: where its value lies in the record.
    Value(Range<usize>),
    /// Whole, but another key's (a 64-bit hash collision): a miss.
    OtherKey,
    /// Torn, damaged, or no longer what the index meant: dropped.
    Broken,
}

/// Checks `record`, read at `location` from a segment of sequence `seq`, for `key`; its payload
/// checksum only when `checksum` (see [`crate::verified`]).
fn verify(
    hash: u64,
    key: &[u8],
    location: Location,
    seq: u64,
    record: &[u8],
    checksum: bool,
) -> Verdict {
    let Some(header) = RecordHeader::parse(record) else {
        return Verdict::Broken;
    };
    let whole = header.hash == hash
        && header.seq == seq
        && !header.is_tombstone()
        && header.record_bytes() == u64::from(location.len);
    if !whole {
        return Verdict::Broken;
    }
    if record.get(header.key_range()) != Some(key) {
        return Verdict::OtherKey;
    }
    if checksum && !header.payload_ok(record) {
        return Verdict::Broken;
    }
    Verdict::Value(header.value_range())
}

/// Checks a record read from its file (a buffer, or a pin of the mapping) and returns where its
/// value lies in it. One that fails a check is dropped from the index; one of another key is
/// just a miss.
fn check(
    shared: &Shared,
    hash: u64,
    key: &[u8],
    location: Location,
    seq: u64,
    record: &[u8],
) -> Option<Range<usize>> {
    // A changed sequence means the segment was reclaimed (and maybe restarted) under the read:
    // a miss, and the reclaim has dealt with the entry.
    let current = shared.seqs[location.segment as usize].load(Ordering::Acquire);
    // The payload checksum is the cost of a large record's read (a fifth of a 64 KiB disk hit's
    // CPU): with checks remembered, once per record and sequence, since a record is never
    // rewritten in place.
    let checked = shared.verified.as_ref().is_some_and(|verified| {
        verified.contains(location.segment, seq, location.offset, location.len)
    });
    let verdict = if current == seq {
        verify(hash, key, location, seq, record, !checked)
    } else {
        Verdict::OtherKey
    };
    match verdict {
        Verdict::Value(range) => {
            if let Some(verified) = shared.verified.as_ref().filter(|_| !checked) {
                verified.insert(location.segment, seq, location.offset, location.len);
            }
            Some(range)
        }
        Verdict::OtherKey => None,
        Verdict::Broken => {
            drop_entry(shared, hash, location);
            None
        }
    }
}

fn drop_entry(shared: &Shared, hash: u64, location: Location) {
    if shared.index.remove_if(hash, location) {
        shared.counters.dropped.fetch_add(1, Ordering::Relaxed);
        let path = &shared.files[location.segment as usize].path;
        tracing::warn!(path = %path.display(), offset = location.offset, "disk record dropped: it failed its checks (header, key or checksum)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout;

    fn record(hash: u64, key: &[u8], value: &[u8], seq: u64) -> (Vec<u8>, Location) {
        let mut record = layout::encode_record(hash, key, value, 0);
        layout::stamp_record(&mut record, seq);
        let location = Location {
            segment: 0,
            offset: 64,
            len: record.len() as u32,
        };
        (record.to_vec(), location)
    }

    #[test]
    fn a_whole_records_value_lies_after_its_header_and_key() {
        let (buf, location) = record(9, b"k", &[7; 65536], 3);
        let Verdict::Value(range) = verify(9, b"k", location, 3, &buf, true) else {
            panic!("whole record must verify");
        };
        assert_eq!(range.len(), 65536);
        assert_eq!(range.start, layout::RECORD_HEADER_BYTES as usize + 1);
    }

    #[test]
    fn another_keys_record_is_other_key_and_damage_is_broken() {
        let (buf, location) = record(9, b"key-a", b"value", 3);
        assert!(matches!(
            verify(9, b"key-b", location, 3, &buf, true),
            Verdict::OtherKey
        ));
        assert!(matches!(
            verify(9, b"key-a", location, 4, &buf, true),
            Verdict::Broken
        ));
        assert!(matches!(
            verify(8, b"key-a", location, 3, &buf, true),
            Verdict::Broken
        ));
        let mut flipped = buf;
        let last_value_byte = layout::RECORD_HEADER_BYTES as usize + 5 + 4;
        flipped[last_value_byte] ^= 0x80;
        assert!(matches!(
            verify(9, b"key-a", location, 3, &flipped, true),
            Verdict::Broken
        ));
    }
}
