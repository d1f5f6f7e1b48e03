//! Segment files: naming, preallocation, and whole reads and writes at an offset.

use std::fs::{File, OpenOptions};
use std::io::{self, IoSlice};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use rustix::fs::{Advice, FallocateFlags};

/// The most buffers one `pwritev` takes (Linux's `IOV_MAX`).
const MAX_IOVECS: usize = 1024;

/// One preallocated segment file, opened for reading and writing.
pub struct SegmentFile {
    pub path: PathBuf,
    pub file: File,
}

/// The name of segment `index`'s file.
pub fn segment_name(index: u32) -> String {
    format!("segment-{index:05}")
}

/// The segment number in a file name made by [`segment_name`].
pub fn parse_segment_name(name: &str) -> Option<u32> {
    let digits = name.strip_prefix("segment-")?;
    if digits.len() < 5 || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

impl SegmentFile {
    /// Opens (creating if needed) segment `index` in `dir`, sized to exactly `segment_bytes`
    /// and preallocated, so a full disk shows at open rather than mid-write.
    pub fn open(dir: &Path, index: u32, segment_bytes: u64) -> io::Result<SegmentFile> {
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
            match rustix::fs::fallocate(&file, FallocateFlags::empty(), 0, segment_bytes) {
                Ok(()) => {}
                // No room for the whole segment: the caller decides (see `Engine::open`).
                Err(rustix::io::Errno::NOSPC) => {
                    return Err(io::Error::from(io::ErrorKind::StorageFull));
                }
                // File systems without fallocate get a sparse file; its blocks come with the
                // writes, which may then meet a full disk (counted as write errors).
                Err(_) => file.set_len(segment_bytes)?,
            }
        }
        // Reads are of single records at scattered offsets: readahead would only evict.
        if let Err(error) = rustix::fs::fadvise(&file, 0, None, Advice::Random) {
            tracing::debug!(path = %path.display(), %error, "fadvise(RANDOM) refused");
        }
        Ok(SegmentFile { path, file })
    }

    /// Reads exactly `buf.len()` bytes at `offset`; reading past the end is `UnexpectedEof`.
    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(&self.file, buf, offset)
    }

    /// Reads `len` bytes at `offset` into a new buffer.
    pub fn read_at(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut buf = vec![0; len];
        self.read_exact_at(&mut buf, offset)?;
        Ok(buf)
    }

    /// Waits until the file's data written so far is on the device (`fdatasync`).
    pub fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    /// Writes `pieces` one after the other from `offset`, in as few `pwritev` calls as the
    /// kernel allows.
    pub fn write_all_at(&self, pieces: &[Bytes], mut offset: u64) -> io::Result<()> {
        for group in pieces.chunks(MAX_IOVECS) {
            let mut slices: Vec<IoSlice<'_>> =
                group.iter().map(|piece| IoSlice::new(piece)).collect();
            let mut remaining: &mut [IoSlice<'_>] = &mut slices;
            while !remaining.is_empty() {
                let written = match rustix::io::pwritev(&self.file, remaining, offset) {
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
        assert_eq!(segment.file.metadata().expect("stat").len(), 1 << 16);
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
