//! Snapshot bytes of a doorkeeper: its generation number, rotation counts and both filters, so
//! that a restarted proxy remembers what it has seen.
//!
//! Layout (little-endian), version 1: magic `BGDK` (4 bytes), version (2), flags (2; bit 0: a
//! previous filter follows), generation (8), rotations by reason in label order (3 x 8), length
//! of the current filter's snapshot (8), length of the previous one's (8), CRC-64/XZ of the 56
//! bytes before it (8); then the filter snapshots, each with its own checksums (see
//! [`BloomFilter::to_bytes`]). The filters' seeds are inside: keep snapshots private.

use std::sync::Arc;

use crate::bloom::snapshot::crc64;
use crate::bloom::{BloomFilter, SnapshotError};

use super::{Clock, Doorkeeper, DoorkeeperConfig, DoorkeeperConfigError, Generation};

const MAGIC: [u8; 4] = *b"BGDK";
const VERSION: u16 = 1;
const HEADER_LEN: usize = 64;
const HAS_PREVIOUS: u16 = 1;

/// Why doorkeeper snapshot bytes could not be restored.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DoorkeeperSnapshotError {
    /// The header's flags or lengths contradict each other (unknown flag bits, a previous filter's
    /// bytes without its flag, or a generation number at the end of its range).
    #[error("doorkeeper snapshot header is inconsistent: {0}")]
    Inconsistent(&'static str),
    /// Fewer bytes than the fixed header.
    #[error(
        "doorkeeper snapshot truncated: {len} bytes is shorter than the {HEADER_LEN}-byte header"
    )]
    TooShort {
        /// Bytes given.
        len: usize,
    },
    /// The bytes do not start with the snapshot magic.
    #[error("not a bloomgate doorkeeper snapshot: starts with {found:02x?}, expected {MAGIC:02x?}")]
    BadMagic {
        /// The first bytes found.
        found: Vec<u8>,
    },
    /// A format version this build cannot read.
    #[error(
        "doorkeeper snapshot format version {found} is not supported (this build reads {VERSION})"
    )]
    UnsupportedVersion {
        /// The version found.
        found: u16,
    },
    /// The header's checksum does not match its bytes.
    #[error(
        "doorkeeper snapshot header is corrupt: checksum {stored:016x} does not match {computed:016x}"
    )]
    CorruptHeader {
        /// Checksum stored in the snapshot.
        stored: u64,
        /// Checksum of the bytes read.
        computed: u64,
    },
    /// The byte count differs from what the header promises.
    #[error(
        "doorkeeper snapshot truncated or padded: header promises {expected} bytes, got {actual}"
    )]
    Length {
        /// Bytes the header promises.
        expected: u64,
        /// Bytes given.
        actual: usize,
    },
    /// One of the filters is unreadable.
    #[error("doorkeeper snapshot's {which} filter: {source}")]
    Filter {
        /// `current` or `previous`.
        which: &'static str,
        /// What is wrong with it.
        source: SnapshotError,
    },
    /// The filters were sized for another configuration.
    #[error(
        "doorkeeper snapshot's filters have {snapshot_bits} bits and k = {snapshot_hashes}, \
         but the config (capacity, target_fpr) sizes them at {config_bits} bits and k = {config_hashes}"
    )]
    ConfigMismatch {
        /// Bits of the snapshot's filters.
        snapshot_bits: u64,
        /// Bits per key of the snapshot's filters.
        snapshot_hashes: u32,
        /// Bits the config asks for.
        config_bits: u64,
        /// Bits per key the config asks for.
        config_hashes: u32,
    },
    /// The config itself is invalid.
    #[error(transparent)]
    Config(#[from] DoorkeeperConfigError),
}

impl Doorkeeper {
    /// The doorkeeper as snapshot bytes (see the module docs); restore with
    /// [`DoorkeeperBuilder::restore`](crate::DoorkeeperBuilder::restore).
    ///
    /// Observes running concurrently may or may not be included.
    pub fn snapshot(&self) -> Vec<u8> {
        let generation = self.generation.load_full();
        let current = generation.current.to_bytes();
        let previous = generation.previous.as_ref().map(|p| p.to_bytes());
        let mut bytes =
            Vec::with_capacity(HEADER_LEN + current.len() + previous.as_ref().map_or(0, Vec::len));
        bytes.extend_from_slice(&MAGIC);
        bytes.extend_from_slice(&VERSION.to_le_bytes());
        let flags = if previous.is_some() { HAS_PREVIOUS } else { 0 };
        bytes.extend_from_slice(&flags.to_le_bytes());
        bytes.extend_from_slice(&generation.number.to_le_bytes());
        let counts = self.rotation_counts();
        for reason in super::RotationReason::ALL {
            bytes.extend_from_slice(&counts.get(reason).to_le_bytes());
        }
        bytes.extend_from_slice(&(current.len() as u64).to_le_bytes());
        let previous_len = previous.as_ref().map_or(0, Vec::len) as u64;
        bytes.extend_from_slice(&previous_len.to_le_bytes());
        let checksum = crc64(&bytes);
        bytes.extend_from_slice(&checksum.to_le_bytes());
        bytes.extend_from_slice(&current);
        if let Some(previous) = previous {
            bytes.extend_from_slice(&previous);
        }
        bytes
    }

    /// The doorkeeper `bytes` describe, on `clock`: what
    /// [`DoorkeeperBuilder::restore`](crate::DoorkeeperBuilder::restore) builds.
    pub(super) fn from_snapshot(
        config: DoorkeeperConfig,
        clock: Arc<dyn Clock>,
        bytes: &[u8],
    ) -> Result<Self, DoorkeeperSnapshotError> {
        config.validate()?;
        let magic = bytes.get(..MAGIC.len()).unwrap_or(bytes);
        if magic != MAGIC {
            if magic.len() < MAGIC.len() && MAGIC.starts_with(magic) {
                return Err(DoorkeeperSnapshotError::TooShort { len: bytes.len() });
            }
            return Err(DoorkeeperSnapshotError::BadMagic {
                found: magic.to_vec(),
            });
        }
        let Some(header) = bytes.get(..HEADER_LEN) else {
            return Err(DoorkeeperSnapshotError::TooShort { len: bytes.len() });
        };
        let version = u16::from_le_bytes([header[4], header[5]]);
        if version != VERSION {
            return Err(DoorkeeperSnapshotError::UnsupportedVersion { found: version });
        }
        let stored = read_u64(header, 56);
        let computed = crc64(&header[..56]);
        if stored != computed {
            return Err(DoorkeeperSnapshotError::CorruptHeader { stored, computed });
        }
        let flags = u16::from_le_bytes([header[6], header[7]]);
        let number = read_u64(header, 8);
        let rotations = [
            read_u64(header, 16),
            read_u64(header, 24),
            read_u64(header, 32),
        ];
        let current_len = read_u64(header, 40);
        let previous_len = read_u64(header, 48);
        if flags & !HAS_PREVIOUS != 0 {
            return Err(DoorkeeperSnapshotError::Inconsistent("unknown flag bits"));
        }
        if (flags & HAS_PREVIOUS == 0) != (previous_len == 0) {
            return Err(DoorkeeperSnapshotError::Inconsistent(
                "previous filter bytes do not match the has-previous flag",
            ));
        }
        if number == u64::MAX {
            // The next rotation could not number its generation.
            return Err(DoorkeeperSnapshotError::Inconsistent(
                "generation number out of range",
            ));
        }
        let expected = (HEADER_LEN as u64)
            .saturating_add(current_len)
            .saturating_add(previous_len);
        if expected != bytes.len() as u64 {
            return Err(DoorkeeperSnapshotError::Length {
                expected,
                actual: bytes.len(),
            });
        }
        let (current, previous) = bytes[HEADER_LEN..].split_at(current_len as usize);
        let current =
            BloomFilter::from_bytes(current).map_err(|source| DoorkeeperSnapshotError::Filter {
                which: "current",
                source,
            })?;
        let previous = if flags & HAS_PREVIOUS != 0 {
            let previous = BloomFilter::from_bytes(previous).map_err(|source| {
                DoorkeeperSnapshotError::Filter {
                    which: "previous",
                    source,
                }
            })?;
            Some(previous)
        } else {
            None
        };

        let sizing = config.sizing();
        for filter in std::iter::once(&current).chain(&previous) {
            if filter.sizing() != sizing {
                return Err(DoorkeeperSnapshotError::ConfigMismatch {
                    snapshot_bits: filter.num_bits(),
                    snapshot_hashes: filter.num_hashes(),
                    config_bits: sizing.num_bits(),
                    config_hashes: sizing.num_hashes,
                });
            }
        }
        let generation = Generation::new(
            number,
            Arc::new(current),
            previous.map(Arc::new),
            None,
            &config,
            clock.now(),
        );
        Ok(Self::from_generation(
            config, sizing, clock, generation, rotations,
        ))
    }
}

fn read_u64(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

#[cfg(test)]
mod tests {

    use super::*;

    fn config() -> DoorkeeperConfig {
        DoorkeeperConfig::with_capacity(1000)
    }

    /// A snapshot with header bytes `at..at + value.len()` replaced and the header checksum redone,
    /// as a crafted (not merely corrupted) file would be.
    fn crafted(at: usize, value: &[u8]) -> Vec<u8> {
        let door = Doorkeeper::builder(config()).build().unwrap();
        door.observe(b"key");
        let mut bytes = door.snapshot();
        bytes[at..at + value.len()].copy_from_slice(value);
        let checksum = crc64(&bytes[..56]);
        bytes[56..64].copy_from_slice(&checksum.to_le_bytes());
        bytes
    }

    #[test]
    fn crafted_headers_that_contradict_themselves_are_rejected() {
        for (what, bytes) in [
            ("unknown flag bits", crafted(6, &0x8000u16.to_le_bytes())),
            (
                "flag without previous bytes",
                crafted(6, &HAS_PREVIOUS.to_le_bytes()),
            ),
            (
                "last generation number",
                crafted(8, &u64::MAX.to_le_bytes()),
            ),
        ] {
            let result = Doorkeeper::builder(config()).restore(&bytes);
            assert!(
                matches!(result, Err(DoorkeeperSnapshotError::Inconsistent(_))),
                "{what}: {:?}",
                result.err()
            );
        }
        assert!(
            Doorkeeper::builder(config())
                .restore(&crafted(8, &7u64.to_le_bytes()))
                .is_ok()
        );
    }
}
