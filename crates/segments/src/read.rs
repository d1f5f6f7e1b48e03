//! The read path: a lookup on the calling thread that serves the RAM batch or page-cached data
//! at once (`preadv2(RWF_NOWAIT)`), and hands anything that would block to a [`ColdRead`].

use std::fmt;
use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use rustix::io::{Errno, ReadWriteFlags};

use crate::Shared;
use crate::index::Location;
use crate::layout::RecordHeader;

/// What [`Engine::get`](crate::Engine::get) found.
#[derive(Debug)]
pub enum Lookup {
    /// No record under the key (or the one there failed its checks and was dropped).
    Miss,
    /// The value, a slice of the buffer the record was read into (or of the RAM batch).
    Hit(Bytes),
    /// The record is not (all) in the page cache: finish the read where blocking is allowed.
    Cold(ColdRead),
}

/// A read that would have blocked the calling thread: [`ColdRead::finish`] completes it, on a
/// thread that may block (e.g. tokio's `spawn_blocking`).
pub struct ColdRead {
    shared: Arc<Shared>,
    hash: u64,
    key: Box<[u8]>,
    pub(crate) location: Location,
    seq: u64,
    pub(crate) buf: Vec<u8>,
    pub(crate) filled: usize,
}

impl fmt::Debug for ColdRead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ColdRead")
            .field("location", &self.location)
            .field("filled", &self.filled)
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
        let file = &self.shared.files[self.location.segment as usize];
        while self.filled < self.buf.len() {
            let offset = u64::from(self.location.offset) + self.filled as u64;
            match std::os::unix::fs::FileExt::read_at(
                &file.file,
                &mut self.buf[self.filled..],
                offset,
            ) {
                // The file ends inside the record: it was cut short, the record is not whole.
                Ok(0) => {
                    drop_entry(&self.shared, self.hash, self.location);
                    return Ok(None);
                }
                Ok(read) => self.filled += read,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
        Ok(check(
            &self.shared,
            self.hash,
            &self.key,
            self.location,
            self.seq,
            self.buf,
        ))
    }

    /// Bytes of the record already read without blocking.
    pub fn filled(&self) -> usize {
        self.filled
    }
}

/// Looks `key` up and reads its record as far as it can without blocking.
pub fn lookup(shared: &Arc<Shared>, key: &[u8]) -> Lookup {
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
        let mut buf = vec![0; location.len as usize];
        let filled = if shared.options.nowait_reads {
            read_nowait(shared, location, &mut buf)
        } else {
            0
        };
        if filled < buf.len() {
            return Lookup::Cold(ColdRead {
                shared: Arc::clone(shared),
                hash,
                key: key.into(),
                location,
                seq,
                buf,
                filled,
            });
        }
        if seqs.load(Ordering::Acquire) != seq {
            continue;
        }
        return match check(shared, hash, key, location, seq, buf) {
            Some(value) => Lookup::Hit(value),
            None => Lookup::Miss,
        };
    }
    Lookup::Miss
}

/// Reads what the page cache holds of the record into `buf`; returns how many bytes came.
///
/// Linux 5.9 and 5.10 cut `RWF_NOWAIT` reads at 4096 bytes even when all is cached (tokio
/// #3803), so a short count is not an error: the rest is read by [`ColdRead::finish`].
fn read_nowait(shared: &Shared, location: Location, buf: &mut [u8]) -> usize {
    let file = &shared.files[location.segment as usize];
    let mut filled = 0;
    while filled < buf.len() {
        let offset = u64::from(location.offset) + filled as u64;
        let mut slices = [io::IoSliceMut::new(&mut buf[filled..])];
        match rustix::io::preadv2(&file.file, &mut slices, offset, ReadWriteFlags::NOWAIT) {
            Ok(0) => break,
            Ok(read) => filled += read,
            Err(Errno::INTR) => {}
            // EAGAIN: not cached; EOPNOTSUPP: a filesystem without NOWAIT; anything else is
            // met again, and reported, by the blocking read.
            Err(_) => break,
        }
    }
    filled
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
    /// Whole and `key`'s: its value, a slice of the read buffer.
    Value(Bytes),
    /// Whole, but another key's (a 64-bit hash collision): a miss.
    OtherKey,
    /// Torn, damaged, or no longer what the index meant: dropped.
    Broken,
}

/// Checks `buf`, a record read at `location` from a segment of sequence `seq`, for `key`.
fn verify(hash: u64, key: &[u8], location: Location, seq: u64, buf: Vec<u8>) -> Verdict {
    let Some(header) = RecordHeader::parse(&buf) else {
        return Verdict::Broken;
    };
    let whole = header.hash == hash
        && header.seq == seq
        && !header.is_tombstone()
        && header.record_bytes() == u64::from(location.len);
    if !whole {
        return Verdict::Broken;
    }
    if buf.get(header.key_range()) != Some(key) {
        return Verdict::OtherKey;
    }
    if !header.payload_ok(&buf) {
        return Verdict::Broken;
    }
    // No copy: the read buffer becomes the `Bytes` the value is sliced from.
    Verdict::Value(Bytes::from(buf).slice(header.value_range()))
}

/// Checks a record read from its file and returns its value. One that fails a check is dropped
/// from the index; one of another key is just a miss.
fn check(
    shared: &Shared,
    hash: u64,
    key: &[u8],
    location: Location,
    seq: u64,
    buf: Vec<u8>,
) -> Option<Bytes> {
    // A changed sequence means the segment was reclaimed (and maybe restarted) under the read:
    // a miss, and the reclaim has dealt with the entry.
    let current = shared.seqs[location.segment as usize].load(Ordering::Acquire);
    let verdict = if current == seq {
        verify(hash, key, location, seq, buf)
    } else {
        Verdict::OtherKey
    };
    match verdict {
        Verdict::Value(value) => Some(value),
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
    fn value_is_a_slice_of_the_read_buffer_not_a_copy() {
        let (buf, location) = record(9, b"k", &[7; 65536], 3);
        let start = buf.as_ptr() as usize;
        let Verdict::Value(value) = verify(9, b"k", location, 3, buf) else {
            panic!("whole record must verify");
        };
        assert_eq!(value.len(), 65536);
        assert_eq!(value.as_ptr() as usize, start + 40 + 1);
    }

    #[test]
    fn another_keys_record_is_other_key_and_damage_is_broken() {
        let (buf, location) = record(9, b"key-a", b"value", 3);
        assert!(matches!(
            verify(9, b"key-b", location, 3, buf.clone()),
            Verdict::OtherKey
        ));
        assert!(matches!(
            verify(9, b"key-a", location, 4, buf.clone()),
            Verdict::Broken
        ));
        assert!(matches!(
            verify(8, b"key-a", location, 3, buf.clone()),
            Verdict::Broken
        ));
        let mut flipped = buf;
        let last_value_byte = 40 + 5 + 4;
        flipped[last_value_byte] ^= 0x80;
        assert!(matches!(
            verify(9, b"key-a", location, 3, flipped),
            Verdict::Broken
        ));
    }
}
