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
    location: Location,
    seq: u64,
    buf: Vec<u8>,
    filled: usize,
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
    let Some(location) = shared.index.get_marking_hit(hash) else {
        return Lookup::Miss;
    };
    if let Some(record) = shared.find_in_ram(location) {
        return match value_in(&record, key) {
            Some(value) => Lookup::Hit(value),
            None => Lookup::Miss,
        };
    }
    let seq = shared.seqs[location.segment as usize].load(Ordering::Acquire);
    let mut buf = vec![0; location.len as usize];
    let filled = if shared.options.nowait_reads {
        read_nowait(shared, location, &mut buf)
    } else {
        0
    };
    if filled == buf.len() {
        return match check(shared, hash, key, location, seq, buf) {
            Some(value) => Lookup::Hit(value),
            None => Lookup::Miss,
        };
    }
    Lookup::Cold(ColdRead {
        shared: Arc::clone(shared),
        hash,
        key: key.into(),
        location,
        seq,
        buf,
        filled,
    })
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
fn value_in(record: &Bytes, key: &[u8]) -> Option<Bytes> {
    let header = RecordHeader::parse(record)?;
    (record.get(header.key_range())? == key).then(|| record.slice(header.value_range()))
}

/// Checks a record read from its file and returns its value as a slice of `buf` (no copy).
/// A record that fails a check is dropped from the index; one of another key is just a miss.
fn check(
    shared: &Shared,
    hash: u64,
    key: &[u8],
    location: Location,
    seq: u64,
    buf: Vec<u8>,
) -> Option<Bytes> {
    let Some(header) = RecordHeader::parse(&buf) else {
        drop_entry(shared, hash, location);
        return None;
    };
    // A changed sequence means the segment was reclaimed (and maybe restarted) under the read.
    let still = shared.seqs[location.segment as usize].load(Ordering::Acquire) == seq;
    let whole = header.hash == hash
        && header.seq == seq
        && still
        && !header.is_tombstone()
        && header.record_bytes() == u64::from(location.len);
    if !whole {
        drop_entry(shared, hash, location);
        return None;
    }
    if buf.get(header.key_range())? != key {
        return None;
    }
    if !header.payload_ok(&buf) {
        drop_entry(shared, hash, location);
        return None;
    }
    Some(Bytes::from(buf).slice(header.value_range()))
}

fn drop_entry(shared: &Shared, hash: u64, location: Location) {
    if shared.index.remove_if(hash, location) {
        shared.counters.dropped.fetch_add(1, Ordering::Relaxed);
        let path = &shared.files[location.segment as usize].path;
        tracing::debug!(path = %path.display(), offset = location.offset, "record failed its checks; dropped");
    }
}
