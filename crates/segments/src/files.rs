//! Segment files: naming, preallocation, whole reads and writes at an offset, and the mapping
//! that memory-backed segments are read through.
//!
//! A segment's file is a [`Generation`]: normally one inode for the engine's life, rewritten in
//! place when its segment is reclaimed. When reads go through a mapping, a value handed out is a
//! [`Pin`] of the bytes it was read from; a reclaim that finds pins does not rewrite those bytes
//! but gives the segment a new inode (the old one, unlinked, keeps only the pinned pages until the
//! last pin goes; the rest of it is punched out at once).

use std::collections::BTreeMap;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, IoSlice};
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use parking_lot::Mutex;
use rustix::fs::{Advice, FallocateFlags};

/// The most buffers one `pwritev` takes (Linux's `IOV_MAX`).
const MAX_IOVECS: usize = 1024;

/// Holes are punched in whole pages only: a partial page would be zeroed, pinned bytes with it.
const PAGE: u64 = 4096;

/// One preallocated segment file: its path and the inode behind it now.
pub(crate) struct SegmentFile {
    pub path: PathBuf,
    bytes: u64,
    current: Mutex<Arc<Generation>>,
}

/// One inode of a segment file, and its read-only mapping when reads go through one.
pub(crate) struct Generation {
    pub file: File,
    map: OnceLock<Mapping>,
    /// Byte ranges `(offset, len)` handed out as [`Pin`]s, with how many of each.
    pins: Mutex<BTreeMap<(u32, u32), u32>>,
}

/// A whole segment file mapped shared and read-only.
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is read-only memory owned by this value until `Drop` unmaps it; reading
// it from any thread is sound (what is read is checked, and pinned ranges are never rewritten).
unsafe impl Send for Mapping {}
// SAFETY: as above; `&Mapping` only reads.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr` and `len` are exactly what `mmap` returned, and no `Pin` outlives this
        // mapping (each holds the `Arc<Generation>` that owns it).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Bytes of a mapped segment, held in place: while a pin lives, a reclaim leaves its pages as
/// they are. It becomes a [`Bytes`] without a copy.
pub struct Pin {
    generation: Arc<Generation>,
    offset: u32,
    len: u32,
}

impl Pin {
    /// The pinned bytes.
    pub fn bytes(&self) -> &[u8] {
        let map = self
            .generation
            .map
            .get()
            .expect("a pin is only made of a mapped generation");
        // SAFETY: `Generation::pin` checked `offset + len <= map.len`; the mapping lives as long
        // as `self.generation`, and pinned pages are never written or punched.
        unsafe {
            std::slice::from_raw_parts(
                map.ptr.as_ptr().add(self.offset as usize),
                self.len as usize,
            )
        }
    }
}

impl AsRef<[u8]> for Pin {
    fn as_ref(&self) -> &[u8] {
        self.bytes()
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        let mut pins = self.generation.pins.lock();
        let key = (self.offset, self.len);
        if let Some(count) = pins.get_mut(&key) {
            *count -= 1;
            if *count == 0 {
                pins.remove(&key);
            }
        }
    }
}

impl From<Pin> for Bytes {
    fn from(pin: Pin) -> Bytes {
        Bytes::from_owner(pin)
    }
}

/// A pin shared by the [`Bytes`] made of it and the [`InFile`]s that name its place.
struct SharedPin(Arc<Pin>);

impl AsRef<[u8]> for SharedPin {
    fn as_ref(&self) -> &[u8] {
        self.0.bytes()
    }
}

/// A value's place in its segment file, pinned: while it lives, a reclaim leaves those bytes of
/// that inode as they are (it gives the segment a new inode instead), so a `sendfile` of
/// [`InFile::len`] bytes from [`InFile::file`] at [`InFile::offset`] sends the value and nothing
/// else, however long the send takes and whatever the engine writes meanwhile.
#[derive(Clone)]
pub struct InFile {
    pin: Arc<Pin>,
    /// The value's bytes within the pinned range.
    start: u32,
    len: u32,
}

impl fmt::Debug for InFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InFile")
            .field("offset", &self.offset())
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl InFile {
    /// The segment file's inode the value lies in (not necessarily the segment's current one).
    pub fn file(&self) -> &File {
        &self.pin.generation.file
    }

    /// Where the value starts in [`InFile::file`].
    pub fn offset(&self) -> u64 {
        u64::from(self.pin.offset) + u64::from(self.start)
    }

    /// The value's length in bytes.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether the value is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The value's bytes as the mapping shows them: what a send from the file sends.
    pub fn bytes(&self) -> &[u8] {
        let start = self.start as usize;
        &self.pin.bytes()[start..start + self.len as usize]
    }

    /// The part `range` of the value (relative to its start), still pinned; `None` when `range`
    /// passes its end.
    pub fn slice(&self, range: Range<usize>) -> Option<InFile> {
        if range.start > range.end || range.end > self.len as usize {
            return None;
        }
        Some(InFile {
            pin: Arc::clone(&self.pin),
            start: self.start + range.start as u32,
            len: (range.end - range.start) as u32,
        })
    }
}

/// `range` of `pin` as [`Bytes`] (no copy) and as its place in the file, sharing the one pin.
pub(crate) fn in_file(pin: Pin, range: Range<usize>) -> (Bytes, InFile) {
    let pin = Arc::new(pin);
    let file = InFile {
        pin: Arc::clone(&pin),
        start: range.start as u32,
        len: range.len() as u32,
    };
    (Bytes::from_owner(SharedPin(pin)).slice(range), file)
}

impl Generation {
    fn new(file: File) -> Arc<Generation> {
        Arc::new(Generation {
            file,
            map: OnceLock::new(),
            pins: Mutex::new(BTreeMap::new()),
        })
    }

    /// Whether reads of this inode go through a mapping.
    pub(crate) fn is_mapped(&self) -> bool {
        self.map.get().is_some()
    }

    /// Maps the whole file (`len` bytes, its fixed size) for reading.
    fn map(&self, len: u64) -> io::Result<()> {
        let len = usize::try_from(len).map_err(io::Error::other)?;
        // SAFETY: a fresh shared read-only mapping of a file this value owns; the file is never
        // shortened while mapped (its size is fixed at open), so no access past its end faults.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                self.file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr.cast()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        // Mapped once per inode; a second mapping would be unmapped here, unused.
        let _ = self.map.set(Mapping { ptr, len });
        Ok(())
    }

    /// Pins `len` bytes at `offset` of the mapping; `None` when this inode is not mapped or the
    /// range passes its end. The caller must check afterwards that the segment still holds what
    /// it meant to read (its sequence): a reclaim that began first does not see this pin.
    pub(crate) fn pin(self: &Arc<Self>, offset: u32, len: u32) -> Option<Pin> {
        let map = self.map.get()?;
        if offset as usize + len as usize > map.len {
            return None;
        }
        *self.pins.lock().entry((offset, len)).or_insert(0) += 1;
        Some(Pin {
            generation: Arc::clone(self),
            offset,
            len,
        })
    }

    /// The pinned ranges now, in order.
    fn pinned(&self) -> Vec<(u32, u32)> {
        self.pins.lock().keys().copied().collect()
    }

    /// Frees the file's blocks outside `pinned` (page-aligned inward), keeping its size.
    fn punch_except(&self, pinned: &[(u32, u32)], bytes: u64) {
        let mut holes = Vec::new();
        let mut cursor = 0u64;
        for &(offset, len) in pinned {
            let start = u64::from(offset);
            holes.push((cursor.next_multiple_of(PAGE), start / PAGE * PAGE));
            cursor = cursor.max(start + u64::from(len));
        }
        holes.push((cursor.next_multiple_of(PAGE), bytes / PAGE * PAGE));
        for (start, end) in holes {
            if end <= start {
                continue;
            }
            let flags = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
            if let Err(error) = rustix::fs::fallocate(&self.file, flags, start, end - start) {
                tracing::debug!(%error, "could not punch a reclaimed inode's unpinned pages");
                return;
            }
        }
    }
}

/// What [`SegmentFile::renew_if_pinned`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Renewed {
    /// Nothing was pinned: the inode is rewritten in place.
    InPlace,
    /// `pinned` ranges were held: the segment has a new inode.
    NewInode { pinned: usize },
}

/// The extension of a segment's next inode while it is being made (`segment-00007.next`).
pub(crate) const NEXT_EXTENSION: &str = "next";

/// Sizes `file` to `bytes` with its blocks allocated, so a full disk shows now rather than
/// mid-write.
fn preallocate(file: &File, bytes: u64) -> io::Result<()> {
    match rustix::fs::fallocate(file, FallocateFlags::empty(), 0, bytes) {
        Ok(()) => Ok(()),
        // No room for the whole segment: the caller decides (see `Engine::open`).
        Err(rustix::io::Errno::NOSPC) => Err(io::Error::from(io::ErrorKind::StorageFull)),
        // File systems without fallocate get a sparse file; its blocks come with the writes,
        // which may then meet a full disk (counted as write errors).
        Err(_) => file.set_len(bytes),
    }
}

/// Reads are of single records at scattered offsets: readahead would only evict.
fn advise_random(file: &File, path: &Path) {
    if let Err(error) = rustix::fs::fadvise(file, 0, None, Advice::Random) {
        tracing::debug!(path = %path.display(), %error, "fadvise(RANDOM) refused");
    }
}

/// The name of segment `index`'s file.
pub(crate) fn segment_name(index: u32) -> String {
    format!("segment-{index:05}")
}

/// The segment number in a file name made by [`segment_name`].
pub(crate) fn parse_segment_name(name: &str) -> Option<u32> {
    let digits = name.strip_prefix("segment-")?;
    if digits.len() < 5 || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

impl SegmentFile {
    /// Opens (creating if needed) segment `index` in `dir`, sized to exactly `segment_bytes`
    /// and preallocated, so a full disk shows at open rather than mid-write.
    pub(crate) fn open(dir: &Path, index: u32, segment_bytes: u64) -> io::Result<SegmentFile> {
        let path = dir.join(segment_name(index));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        let len = file.metadata()?.len();
        if len > segment_bytes {
            file.set_len(segment_bytes)?;
        }
        if len < segment_bytes {
            preallocate(&file, segment_bytes)?;
        }
        advise_random(&file, &path);
        Ok(SegmentFile {
            path,
            bytes: segment_bytes,
            current: Mutex::new(Generation::new(file)),
        })
    }

    /// The inode the segment's reads and writes go to now.
    pub(crate) fn current(&self) -> Arc<Generation> {
        Arc::clone(&self.current.lock())
    }

    /// Maps the segment for reads ([`Generation::pin`]); later inodes are mapped too.
    pub(crate) fn map_reads(&self) -> io::Result<()> {
        self.current.lock().map(self.bytes)
    }

    /// Makes the segment safe to rewrite, once its sequence says it is retired (so no new pin
    /// of it can be used): in place when nothing is pinned; otherwise on a new inode, renamed
    /// over the old one, whose unpinned pages are punched out. Errors leave the old inode in
    /// place (the caller must not rewrite it).
    pub(crate) fn renew_if_pinned(&self) -> io::Result<Renewed> {
        // Only the writer thread renews, so `current` cannot change under this; it is not held
        // locked while the new file is made (a reader that finds this segment waits for nothing).
        let old = self.current();
        let pinned = old.pinned();
        if pinned.is_empty() {
            return Ok(Renewed::InPlace);
        }
        // Room first: on a full file system the new inode needs the old one's free pages.
        old.punch_except(&pinned, self.bytes);
        let next = self.path.with_extension(NEXT_EXTENSION);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&next)?;
        let made = preallocate(&file, self.bytes).and_then(|()| std::fs::rename(&next, &self.path));
        if let Err(error) = made {
            let _ = std::fs::remove_file(&next);
            return Err(error);
        }
        advise_random(&file, &self.path);
        let generation = Generation::new(file);
        // Unmapped, the new inode is still right: its reads fall back to `pread`.
        if old.is_mapped()
            && let Err(error) = generation.map(self.bytes)
        {
            tracing::warn!(path = %self.path.display(), %error, "cannot map a segment's new inode; reading it with pread");
        }
        *self.current.lock() = generation;
        Ok(Renewed::NewInode {
            pinned: pinned.len(),
        })
    }

    /// Reads exactly `buf.len()` bytes at `offset`; reading past the end is `UnexpectedEof`.
    pub(crate) fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(&self.current().file, buf, offset)
    }

    /// Reads `len` bytes at `offset` into a new buffer.
    pub(crate) fn read_at(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut buf = vec![0; len];
        self.read_exact_at(&mut buf, offset)?;
        Ok(buf)
    }

    /// Waits until the file's data written so far is on the device (`fdatasync`).
    pub(crate) fn sync_data(&self) -> io::Result<()> {
        self.current().file.sync_data()
    }

    /// Writes `pieces` one after the other from `offset`, in as few `pwritev` calls as the
    /// kernel allows.
    pub(crate) fn write_all_at(&self, pieces: &[Bytes], mut offset: u64) -> io::Result<()> {
        let generation = self.current();
        for group in pieces.chunks(MAX_IOVECS) {
            let mut slices: Vec<IoSlice<'_>> =
                group.iter().map(|piece| IoSlice::new(piece)).collect();
            let mut remaining: &mut [IoSlice<'_>] = &mut slices;
            while !remaining.is_empty() {
                let written = match rustix::io::pwritev(&generation.file, remaining, offset) {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(written) => written,
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(error) => return Err(error.into()),
                };
                offset += written as u64;
                IoSlice::advance_slices(&mut remaining, written);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_names_round_trip_and_others_are_ignored() {
        assert_eq!(segment_name(7), "segment-00007");
        assert_eq!(parse_segment_name("segment-00007"), Some(7));
        assert_eq!(parse_segment_name("segment-123456"), Some(123_456));
        assert_eq!(parse_segment_name("segment-7"), None);
        assert_eq!(parse_segment_name("engine.meta"), None);
    }

    #[test]
    fn open_sizes_the_file_and_vectored_writes_land_in_order() {
        let dir = tempfile::tempdir().expect("temp dir");
        let segment = SegmentFile::open(dir.path(), 3, 1 << 16).expect("open");
        assert_eq!(
            segment.current().file.metadata().expect("stat").len(),
            1 << 16
        );
        let pieces: Vec<Bytes> = (0..2000u32)
            .map(|n| Bytes::from(n.to_le_bytes().to_vec()))
            .collect();
        segment.write_all_at(&pieces, 8).expect("write");
        let back = segment.read_at(8, 8000).expect("read");
        for (n, word) in back.chunks_exact(4).enumerate() {
            assert_eq!(word, (n as u32).to_le_bytes());
        }
    }
}
