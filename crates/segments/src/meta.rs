//! `engine.meta`: the few facts every segment depends on (segment size, hash key), written once
//! when the directory is new.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use crate::hash::KeyHasher;
use crate::layout::crc32c_of;

pub(crate) const META_FILE: &str = "engine.meta";
const MAGIC: &[u8; 8] = b"BGSEGMET";
const VERSION: u32 = 1;
const META_BYTES: usize = 48;

/// What `engine.meta` holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Meta {
    pub segment_bytes: u64,
    pub hasher: KeyHasher,
}

impl Meta {
    fn encode(&self) -> [u8; META_BYTES] {
        let mut out = [0; META_BYTES];
        out[0..8].copy_from_slice(MAGIC);
        out[8..12].copy_from_slice(&VERSION.to_le_bytes());
        out[16..24].copy_from_slice(&self.segment_bytes.to_le_bytes());
        let [k0, k1] = self.hasher.key();
        out[24..32].copy_from_slice(&k0.to_le_bytes());
        out[32..40].copy_from_slice(&k1.to_le_bytes());
        let crc = crc32c_of(&out[0..40]);
        out[40..44].copy_from_slice(&crc.to_le_bytes());
        out
    }

    fn parse(bytes: &[u8]) -> Option<Meta> {
        let word = |at: usize| {
            let mut word = [0; 8];
            word.copy_from_slice(&bytes[at..at + 8]);
            u64::from_le_bytes(word)
        };
        if bytes.len() != META_BYTES
            || &bytes[0..8] != MAGIC
            || bytes[8..12] != VERSION.to_le_bytes()
            || bytes[40..44] != crc32c_of(&bytes[0..40]).to_le_bytes()
        {
            return None;
        }
        Some(Meta {
            segment_bytes: word(16),
            hasher: KeyHasher::new([word(24), word(32)]),
        })
    }
}

pub(crate) fn meta_path(dir: &Path) -> PathBuf {
    dir.join(META_FILE)
}

/// The meta file in `dir`: `Ok(None)` when it is missing, or unreadable as a meta file (logged,
/// naming the file: the caller starts the directory afresh).
pub(crate) fn read(dir: &Path) -> io::Result<Option<Meta>> {
    let path = meta_path(dir);
    let mut bytes = Vec::new();
    match std::fs::File::open(&path) {
        Ok(mut file) => file.read_to_end(&mut bytes)?,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error),
    };
    let meta = Meta::parse(&bytes);
    if meta.is_none() {
        tracing::warn!(path = %path.display(), "not a valid engine meta file; starting afresh");
    }
    Ok(meta)
}

/// Writes `meta` to `dir` durably (a temporary file renamed over the old one).
pub(crate) fn write(dir: &Path, meta: &Meta) -> io::Result<()> {
    let path = meta_path(dir);
    let temporary = dir.join(format!("{META_FILE}.new"));
    let mut file = std::fs::File::create(&temporary)?;
    file.write_all(&meta.encode())?;
    file.sync_all()?;
    std::fs::rename(&temporary, &path)?;
    std::fs::File::open(dir)?.sync_all()
}

/// A fresh random hash key, from the kernel's generator.
pub(crate) fn random_hasher() -> io::Result<KeyHasher> {
    let mut bytes = [0; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    let mut k0 = [0; 8];
    let mut k1 = [0; 8];
    k0.copy_from_slice(&bytes[0..8]);
    k1.copy_from_slice(&bytes[8..16]);
    Ok(KeyHasher::new([
        u64::from_le_bytes(k0),
        u64::from_le_bytes(k1),
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_round_trips_and_a_damaged_one_reads_as_missing() {
        let dir = tempfile::tempdir().expect("temp dir");
        let meta = Meta {
            segment_bytes: 1 << 20,
            hasher: random_hasher().expect("urandom"),
        };
        assert_eq!(read(dir.path()).expect("read"), None);
        write(dir.path(), &meta).expect("write");
        assert_eq!(read(dir.path()).expect("read"), Some(meta));
        let mut bytes = std::fs::read(meta_path(dir.path())).expect("read back");
        bytes[20] ^= 1;
        std::fs::write(meta_path(dir.path()), bytes).expect("damage");
        assert_eq!(read(dir.path()).expect("read"), None);
    }
}
