//! Snapshot bytes of a filter: a versioned, checksummed header, then the bits.
//!
//! Layout (little-endian), version 1:
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | magic `BGBF` |
//! | 4..6 | format version (1) |
//! | 6..8 | zero |
//! | 8..16 | number of 512-bit blocks |
//! | 16..20 | bits per key `k` |
//! | 20..24 | zero |
//! | 24..32 | capacity |
//! | 32..40 | target false-positive rate (f64 bits) |
//! | 40..56 | hash seed: the secret, so keep snapshots as private as the process |
//! | 56..64 | CRC-64/XZ of bytes 0..56 |
//! | 64.. | the blocks, 8 words of 8 bytes each |
//! | last 8 | CRC-64/XZ of the blocks |
//!
//! Separate header and body checksums let a reader tell a cut-off file (the header is intact and
//! promises more bytes than there are) from a corrupt one. A CRC-64 detects every error burst up
//! to 64 bits long, so every single-byte corruption is caught, not just most.

use super::hash::{BLOCK_WORDS, Seed};
use super::math::MAX_HASHES;
use super::{BloomFilter, Sizing};

const MAGIC: [u8; 4] = *b"BGBF";
const VERSION: u16 = 1;
const HEADER_LEN: usize = 64;
const CHECKSUM_LEN: usize = 8;
const BLOCK_BYTES: usize = BLOCK_WORDS * 8;

/// Why snapshot bytes could not be read back into a filter.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SnapshotError {
    /// Fewer bytes than the fixed header.
    #[error("filter snapshot truncated: {len} bytes is shorter than the {HEADER_LEN}-byte header")]
    TooShort {
        /// Bytes given.
        len: usize,
    },
    /// The bytes do not start with the snapshot magic.
    #[error("not a bloomgate filter snapshot: starts with {found:02x?}, expected {MAGIC:02x?}")]
    BadMagic {
        /// The first bytes found.
        found: Vec<u8>,
    },
    /// A format version this build cannot read.
    #[error("filter snapshot format version {found} is not supported (this build reads {VERSION})")]
    UnsupportedVersion {
        /// The version found.
        found: u16,
    },
    /// The header's checksum does not match its bytes.
    #[error(
        "filter snapshot header is corrupt: checksum {stored:016x} does not match {computed:016x}"
    )]
    CorruptHeader {
        /// Checksum stored in the snapshot.
        stored: u64,
        /// Checksum of the bytes read.
        computed: u64,
    },
    /// The header is intact but describes an impossible filter.
    #[error("filter snapshot header is invalid: {0}")]
    InvalidHeader(String),
    /// Fewer bytes than the header promises.
    #[error("filter snapshot truncated: header promises {expected} bytes, got {actual}")]
    Truncated {
        /// Bytes the header promises.
        expected: usize,
        /// Bytes given.
        actual: usize,
    },
    /// More bytes than the header promises.
    #[error("filter snapshot has {} unexpected trailing bytes after {expected}", actual - expected)]
    TrailingBytes {
        /// Bytes the header promises.
        expected: usize,
        /// Bytes given.
        actual: usize,
    },
    /// The bits' checksum does not match.
    #[error(
        "filter snapshot bits are corrupt: checksum {stored:016x} does not match {computed:016x}"
    )]
    CorruptBits {
        /// Checksum stored in the snapshot.
        stored: u64,
        /// Checksum of the bytes read.
        computed: u64,
    },
}

impl BloomFilter {
    /// The filter as snapshot bytes, seed included (see the module docs for the layout).
    ///
    /// Bits set by inserts running concurrently may or may not be included.
    ///
    /// # Examples
    /// ```
    /// use doorkeeper::bloom::BloomFilter;
    ///
    /// let filter = BloomFilter::with_capacity(1000, 0.01);
    /// filter.insert(b"a");
    /// let copy = BloomFilter::from_bytes(&filter.to_bytes())?;
    /// assert_eq!(copy, filter);
    /// # Ok::<(), doorkeeper::bloom::SnapshotError>(())
    /// ```
    pub fn to_bytes(&self) -> Vec<u8> {
        let body_len = self.blocks.len() * BLOCK_BYTES;
        let mut bytes = Vec::with_capacity(HEADER_LEN + body_len + CHECKSUM_LEN);
        bytes.extend_from_slice(&MAGIC);
        bytes.extend_from_slice(&VERSION.to_le_bytes());
        bytes.extend_from_slice(&[0; 2]);
        bytes.extend_from_slice(&(self.blocks.len() as u64).to_le_bytes());
        bytes.extend_from_slice(&self.num_hashes.to_le_bytes());
        bytes.extend_from_slice(&[0; 4]);
        bytes.extend_from_slice(&self.capacity.to_le_bytes());
        bytes.extend_from_slice(&self.target_fpr.to_bits().to_le_bytes());
        bytes.extend_from_slice(&self.seed.to_bytes());
        let header_checksum = crc64(&bytes);
        bytes.extend_from_slice(&header_checksum.to_le_bytes());
        for word in self.words() {
            bytes.extend_from_slice(&word.to_le_bytes());
        }
        let body_checksum = crc64(&bytes[HEADER_LEN..]);
        bytes.extend_from_slice(&body_checksum.to_le_bytes());
        bytes
    }

    /// Reads a filter back from [`Self::to_bytes`]; a truncated or corrupt snapshot is an error
    /// that says which.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, SnapshotError> {
        let magic = bytes.get(..MAGIC.len()).unwrap_or(bytes);
        if magic != MAGIC {
            if magic.len() < MAGIC.len() && MAGIC.starts_with(magic) {
                return Err(SnapshotError::TooShort { len: bytes.len() });
            }
            return Err(SnapshotError::BadMagic {
                found: magic.to_vec(),
            });
        }
        let Some(header) = bytes.get(..HEADER_LEN) else {
            return Err(SnapshotError::TooShort { len: bytes.len() });
        };
        let version = u16::from_le_bytes([header[4], header[5]]);
        if version != VERSION {
            return Err(SnapshotError::UnsupportedVersion { found: version });
        }
        let stored = read_u64(header, 56);
        let computed = crc64(&header[..56]);
        if stored != computed {
            return Err(SnapshotError::CorruptHeader { stored, computed });
        }

        // Reserved bytes must be zero, so that every accepted snapshot is the one `to_bytes` writes.
        if header[6..8] != [0; 2] || header[20..24] != [0; 4] {
            return Err(SnapshotError::InvalidHeader(
                "reserved bytes 6..8 and 20..24 must be zero".into(),
            ));
        }
        let num_blocks = read_u64(header, 8);
        let num_hashes = u32::from_le_bytes([header[16], header[17], header[18], header[19]]);
        let capacity = read_u64(header, 24);
        let target_fpr = f64::from_bits(read_u64(header, 32));
        let mut seed = [0; 16];
        seed.copy_from_slice(&header[40..56]);
        if !(1..=MAX_HASHES).contains(&num_hashes) {
            return Err(SnapshotError::InvalidHeader(format!(
                "num_hashes = {num_hashes} must be in 1..={MAX_HASHES}"
            )));
        }
        if capacity == 0 {
            return Err(SnapshotError::InvalidHeader("capacity = 0".into()));
        }
        if !(target_fpr > 0.0 && target_fpr < 1.0) {
            return Err(SnapshotError::InvalidHeader(format!(
                "target_fpr = {target_fpr} must be in (0, 1)"
            )));
        }
        let expected = usize::try_from(num_blocks)
            .ok()
            .filter(|n| *n > 0)
            .and_then(|n| n.checked_mul(BLOCK_BYTES))
            .and_then(|n| n.checked_add(HEADER_LEN + CHECKSUM_LEN))
            .ok_or_else(|| {
                SnapshotError::InvalidHeader(format!("num_blocks = {num_blocks} is not a size"))
            })?;
        if bytes.len() < expected {
            return Err(SnapshotError::Truncated {
                expected,
                actual: bytes.len(),
            });
        }
        if bytes.len() > expected {
            return Err(SnapshotError::TrailingBytes {
                expected,
                actual: bytes.len(),
            });
        }
        let body = &bytes[HEADER_LEN..expected - CHECKSUM_LEN];
        let stored = read_u64(bytes, expected - CHECKSUM_LEN);
        let computed = crc64(body);
        if stored != computed {
            return Err(SnapshotError::CorruptBits { stored, computed });
        }

        let words: Vec<u64> = body
            .chunks_exact(8)
            .map(|w| u64::from_le_bytes(w.try_into().unwrap_or_default()))
            .collect();
        let sizing = Sizing {
            num_blocks,
            num_hashes,
        };
        Ok(Self::from_parts(
            sizing,
            capacity,
            target_fpr,
            Seed::from(seed),
            Some(&words),
        ))
    }
}

fn read_u64(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

/// CRC-64/XZ (ECMA-182 polynomial, reflected), table-driven.
pub(crate) fn crc64(bytes: &[u8]) -> u64 {
    let crc = bytes.iter().fold(!0u64, |crc, byte| {
        CRC64_TABLE[((crc ^ u64::from(*byte)) & 0xff) as usize] ^ (crc >> 8)
    });
    !crc
}

const CRC64_TABLE: [u64; 256] = {
    const POLY: u64 = 0xc96c_5795_d787_0f42;
    let mut table = [0u64; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u64;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ POLY
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc64_matches_the_xz_check_value() {
        assert_eq!(crc64(b"123456789"), 0x995d_c9bb_df19_39fa);
    }

    #[test]
    fn nonzero_reserved_bytes_are_rejected_even_with_a_valid_checksum() {
        let snapshot = BloomFilter::builder(100, 0.01).seed(1).build().to_bytes();
        for reserved in [6, 7, 20, 23] {
            let mut bytes = snapshot.clone();
            bytes[reserved] = 1;
            let checksum = crc64(&bytes[..56]);
            bytes[56..64].copy_from_slice(&checksum.to_le_bytes());
            assert!(
                matches!(
                    BloomFilter::from_bytes(&bytes),
                    Err(SnapshotError::InvalidHeader(_))
                ),
                "byte {reserved}"
            );
        }
    }
}
