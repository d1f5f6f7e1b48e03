//! The on-disk encoding: segment headers, records, seal summaries and footers.
//!
//! Every integer is little-endian. Every structure is a multiple of 8 bytes long and starts at
//! an 8-byte aligned offset, so the index can count offsets and lengths in 8-byte units.

use bytes::{BufMut, Bytes, BytesMut};

/// Bytes at the start of a segment reserved for its [`SegmentHeader`].
pub(crate) const SEGMENT_HEADER_BYTES: u32 = 64;
/// Bytes of a record's header, before its key.
pub(crate) const RECORD_HEADER_BYTES: u32 = 32;
/// Bytes of one seal summary entry.
pub(crate) const SUMMARY_ENTRY_BYTES: u32 = 16;
/// The longest key a record holds: its length shares a word with the flags.
pub(crate) const MAX_KEY_BYTES: usize = (1 << 24) - 1;
/// Bytes at the end of a segment reserved for its [`Footer`].
pub(crate) const FOOTER_BYTES: u32 = 64;
/// The version of this layout, written in every segment header and footer. Segments of another
/// version are not read: they are free space.
///
/// 2: record headers of 32 bytes (no magic; key length and flags in one word) and summary
/// entries of 16 (length and tombstone flag in one word); 1 had 40 and 24.
pub(crate) const FORMAT_VERSION: u32 = 2;

const SEGMENT_MAGIC: u32 = u32::from_le_bytes(*b"BGSG");
const FOOTER_MAGIC: u32 = u32::from_le_bytes(*b"BGSF");

/// Record flag: the record removes its key instead of storing a value.
pub(crate) const FLAG_TOMBSTONE: u32 = 1;

/// Rounds `bytes` up to the next multiple of 8.
pub(crate) const fn align8(bytes: u64) -> u64 {
    (bytes + 7) & !7
}

/// Bytes a record of a `key_len`-byte key and a `value_len`-byte value takes in a segment,
/// header and alignment padding included.
pub const fn record_bytes(key_len: u64, value_len: u64) -> u64 {
    align8(RECORD_HEADER_BYTES as u64 + key_len + value_len)
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(word)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

/// The header at offset 0 of every segment in use.
///
/// | bytes | field |
/// |---|---|
/// | 0..4 | magic `BGSG` |
/// | 4..8 | CRC32C of bytes 8..40 |
/// | 8..12 | format version |
/// | 12..16 | zero |
/// | 16..24 | sequence: increases every time a segment is (re)started |
/// | 24..32 | segment size in bytes |
/// | 32..64 | zero |
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SegmentHeader {
    pub seq: u64,
    pub segment_bytes: u64,
}

impl SegmentHeader {
    pub(crate) fn encode(&self) -> Bytes {
        let mut out = BytesMut::zeroed(SEGMENT_HEADER_BYTES as usize);
        out[0..4].copy_from_slice(&SEGMENT_MAGIC.to_le_bytes());
        out[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        out[16..24].copy_from_slice(&self.seq.to_le_bytes());
        out[24..32].copy_from_slice(&self.segment_bytes.to_le_bytes());
        let crc = crc32c_of(&out[8..40]);
        out[4..8].copy_from_slice(&crc.to_le_bytes());
        out.freeze()
    }

    /// The header in `bytes`, or `None` when they hold no valid one (a free segment).
    pub(crate) fn parse(bytes: &[u8]) -> Option<SegmentHeader> {
        if bytes.len() < SEGMENT_HEADER_BYTES as usize
            || u32_at(bytes, 0) != SEGMENT_MAGIC
            || u32_at(bytes, 4) != crc32c_of(&bytes[8..40])
            || u32_at(bytes, 8) != FORMAT_VERSION
        {
            return None;
        }
        Some(SegmentHeader {
            seq: u64_at(bytes, 16),
            segment_bytes: u64_at(bytes, 24),
        })
    }
}

/// The header before every record's key and value.
///
/// | bytes | field |
/// |---|---|
/// | 0..4 | CRC32C of bytes 4..32 |
/// | 4..8 | key length (bits 0..24) and flags (bits 24..32: [`FLAG_TOMBSTONE`]) |
/// | 8..16 | key hash |
/// | 16..24 | sequence of the segment (incarnation) the record was written into |
/// | 24..28 | value length |
/// | 28..32 | CRC32C of the key and the value |
///
/// The key, then the value, follow; then zeros up to the next multiple of 8. There is no magic:
/// a header is one whose CRC matches and whose sequence is its segment's, and recovery walks
/// records from the segment's start, never searching for one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RecordHeader {
    pub hash: u64,
    pub seq: u64,
    pub key_len: u32,
    pub value_len: u32,
    pub payload_crc: u32,
    pub flags: u32,
}

impl RecordHeader {
    /// The header at the start of `bytes`, or `None` when its CRC is wrong.
    pub(crate) fn parse(bytes: &[u8]) -> Option<RecordHeader> {
        if bytes.len() < RECORD_HEADER_BYTES as usize
            || u32_at(bytes, 0) != crc32c_of(&bytes[4..RECORD_HEADER_BYTES as usize])
        {
            return None;
        }
        let key_and_flags = u32_at(bytes, 4);
        Some(RecordHeader {
            hash: u64_at(bytes, 8),
            seq: u64_at(bytes, 16),
            key_len: key_and_flags & MAX_KEY_BYTES as u32,
            value_len: u32_at(bytes, 24),
            payload_crc: u32_at(bytes, 28),
            flags: key_and_flags >> 24,
        })
    }

    /// Bytes the whole record takes, padding included.
    pub(crate) fn record_bytes(&self) -> u64 {
        record_bytes(u64::from(self.key_len), u64::from(self.value_len))
    }

    /// Where the key sits in the record.
    pub(crate) fn key_range(&self) -> std::ops::Range<usize> {
        let start = RECORD_HEADER_BYTES as usize;
        start..start + self.key_len as usize
    }

    /// Where the value sits in the record.
    pub(crate) fn value_range(&self) -> std::ops::Range<usize> {
        let start = self.key_range().end;
        start..start + self.value_len as usize
    }

    /// Whether `record` (starting with this header) is long enough and its key and value match
    /// the payload CRC.
    pub(crate) fn payload_ok(&self, record: &[u8]) -> bool {
        let end = self.value_range().end;
        end <= record.len()
            && crc32c_of(&record[RECORD_HEADER_BYTES as usize..end]) == self.payload_crc
    }

    pub(crate) fn is_tombstone(&self) -> bool {
        self.flags & FLAG_TOMBSTONE != 0
    }
}

/// The CRC32C (Castagnoli, iSCSI's) of `bytes`: every checksum the files carry (segment headers
/// and footers, summaries, record headers, payloads, the meta file). A record's payload is the
/// bulk of what a disk hit checks (a 64 KiB body on every read under `verify_reads = "every"`):
/// `crc-fast` folds it with carry-less multiplies (VPCLMULQDQ where the CPU has it), about 4x the
/// `crc32c` crate's three-way `crc32` instruction on data in cache and a sixth less time on a body
/// read from memory (64 KiB: 0.77 against 3.05 us, 4.50 against 5.49), and no slower on a 32-byte
/// header (10.8 against 13.6 ns). The same function as `crc32c`'s, which the tests hold it to:
/// files written by either read with the other.
pub(crate) fn crc32c_of(bytes: &[u8]) -> u32 {
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, bytes) as u32
}

/// Encodes a record of `key` (at most [`MAX_KEY_BYTES`]) and `value` with sequence 0 and no
/// header CRC: [`stamp_record`] completes it once the segment it goes into is known. The value
/// is copied here, once.
pub(crate) fn encode_record(hash: u64, key: &[u8], value: &[u8], flags: u32) -> BytesMut {
    debug_assert!(key.len() <= MAX_KEY_BYTES && flags < 1 << 8);
    let total = record_bytes(key.len() as u64, value.len() as u64) as usize;
    let mut out = BytesMut::with_capacity(total);
    out.put_u32_le(0);
    out.put_u32_le(key.len() as u32 | flags << 24);
    out.put_u64_le(hash);
    out.put_u64_le(0);
    out.put_u32_le(value.len() as u32);
    let payload_crc = {
        let mut digest = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi);
        digest.update(key);
        digest.update(value);
        digest.finalize() as u32
    };
    out.put_u32_le(payload_crc);
    out.put_slice(key);
    out.put_slice(value);
    out.resize(total, 0);
    out
}

/// Writes the segment sequence `seq` into an encoded record and seals its header with the CRC.
pub(crate) fn stamp_record(record: &mut [u8], seq: u64) {
    record[16..24].copy_from_slice(&seq.to_le_bytes());
    let crc = crc32c_of(&record[4..RECORD_HEADER_BYTES as usize]);
    record[0..4].copy_from_slice(&crc.to_le_bytes());
}

/// One record of a sealed segment, as its summary lists it.
///
/// | bytes | field |
/// |---|---|
/// | 0..8 | key hash |
/// | 8..12 | record offset in the segment, bytes |
/// | 12..16 | record length in bytes, padding included (bits 0..31); bit 31: a tombstone |
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SummaryEntry {
    pub hash: u64,
    pub offset: u32,
    pub len: u32,
    pub flags: u32,
}

/// The footer in the last [`FOOTER_BYTES`] of a sealed segment, naming its summary.
///
/// | bytes | field |
/// |---|---|
/// | 0..4 | magic `BGSF` |
/// | 4..8 | CRC32C of bytes 8..40 |
/// | 8..16 | sequence of the segment it seals (must match the header's) |
/// | 16..24 | summary offset in the segment |
/// | 24..32 | summary entries |
/// | 32..36 | CRC32C of the summary |
/// | 36..40 | format version |
/// | 40..64 | zero |
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Footer {
    pub seq: u64,
    pub summary_offset: u64,
    pub entries: u64,
    pub summary_crc: u32,
}

impl Footer {
    pub(crate) fn parse(bytes: &[u8]) -> Option<Footer> {
        if bytes.len() < FOOTER_BYTES as usize
            || u32_at(bytes, 0) != FOOTER_MAGIC
            || u32_at(bytes, 4) != crc32c_of(&bytes[8..40])
            || u32_at(bytes, 36) != FORMAT_VERSION
        {
            return None;
        }
        Some(Footer {
            seq: u64_at(bytes, 8),
            summary_offset: u64_at(bytes, 16),
            entries: u64_at(bytes, 24),
            summary_crc: u32_at(bytes, 32),
        })
    }

    /// Bytes of the summary this footer names.
    pub(crate) fn summary_bytes(&self) -> u64 {
        self.entries.saturating_mul(u64::from(SUMMARY_ENTRY_BYTES))
    }
}

/// The writes that seal a segment of `segment_bytes` whose records end at `tail`: its summary at
/// `tail`, and its footer at the segment's end.
pub(crate) fn encode_seal(
    seq: u64,
    segment_bytes: u32,
    tail: u32,
    entries: &[SummaryEntry],
) -> [(u32, Bytes); 2] {
    let mut summary = BytesMut::with_capacity(entries.len() * SUMMARY_ENTRY_BYTES as usize);
    for entry in entries {
        // Segments are at most 256 MiB: a length never reaches bit 31.
        let tombstone = u32::from(entry.flags & FLAG_TOMBSTONE != 0) << 31;
        summary.put_u64_le(entry.hash);
        summary.put_u32_le(entry.offset);
        summary.put_u32_le(entry.len | tombstone);
    }
    let mut footer = BytesMut::zeroed(FOOTER_BYTES as usize);
    footer[0..4].copy_from_slice(&FOOTER_MAGIC.to_le_bytes());
    footer[8..16].copy_from_slice(&seq.to_le_bytes());
    footer[16..24].copy_from_slice(&u64::from(tail).to_le_bytes());
    footer[24..32].copy_from_slice(&(entries.len() as u64).to_le_bytes());
    footer[32..36].copy_from_slice(&crc32c_of(&summary).to_le_bytes());
    footer[36..40].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    let crc = crc32c_of(&footer[8..40]);
    footer[4..8].copy_from_slice(&crc.to_le_bytes());
    [
        (tail, summary.freeze()),
        (segment_bytes - FOOTER_BYTES, footer.freeze()),
    ]
}

/// The entries of a summary read back from disk, or `None` when its CRC does not match the
/// footer's.
pub(crate) fn parse_summary(footer: &Footer, bytes: &[u8]) -> Option<Vec<SummaryEntry>> {
    if bytes.len() as u64 != footer.summary_bytes() || crc32c_of(bytes) != footer.summary_crc {
        return None;
    }
    let entries = bytes
        .chunks_exact(SUMMARY_ENTRY_BYTES as usize)
        .map(|entry| {
            let len = u32_at(entry, 12);
            SummaryEntry {
                hash: u64_at(entry, 0),
                offset: u32_at(entry, 8),
                len: len & !(1 << 31),
                flags: if len >> 31 == 1 { FLAG_TOMBSTONE } else { 0 },
            }
        })
        .collect();
    Some(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The payload CRC is CRC32C as `crc32c` computes it, whole or appended: records
        /// written before the change (and by any CRC32C) still verify, and a changed byte fails.
        #[test]
        fn payload_crc_is_crc32c(
            key in proptest::collection::vec(proptest::num::u8::ANY, 0..300),
            value in proptest::collection::vec(proptest::num::u8::ANY, 0..70_000),
            flip in proptest::num::usize::ANY,
        ) {
            let expected = crc32c::crc32c_append(crc32c::crc32c(&key), &value);
            let mut payload = key.clone();
            payload.extend_from_slice(&value);
            proptest::prop_assert_eq!(crc32c_of(&payload), expected);
            let record = encode_record(1, &key, &value, 0);
            proptest::prop_assert_eq!(u32_at(&record, 28), expected);
            if !payload.is_empty() {
                let at = flip % payload.len();
                payload[at] ^= 1;
                proptest::prop_assert_ne!(crc32c_of(&payload), expected);
            }
        }
    }

    #[test]
    fn stamped_record_parses_back_and_checks_its_payload() {
        let mut record = encode_record(7, b"key", b"value", 0);
        assert_eq!(record.len() as u64, record_bytes(3, 5));
        assert_eq!(
            RecordHeader::parse(&record),
            None,
            "unstamped header must not parse"
        );
        stamp_record(&mut record, 42);
        let header = RecordHeader::parse(&record).expect("stamped header parses");
        assert_eq!((header.hash, header.seq), (7, 42));
        assert_eq!(&record[header.key_range()], b"key");
        assert_eq!(&record[header.value_range()], b"value");
        assert!(header.payload_ok(&record));
        record[header.value_range().start] ^= 1;
        assert!(!header.payload_ok(&record));
    }

    #[test]
    fn seal_round_trips_through_footer_and_summary() {
        let entries = [
            SummaryEntry {
                hash: 1,
                offset: 64,
                len: 48,
                flags: 0,
            },
            SummaryEntry {
                hash: 2,
                offset: 112,
                len: 48,
                flags: FLAG_TOMBSTONE,
            },
        ];
        let [(at, summary), (footer_at, footer)] = encode_seal(9, 4096, 160, &entries);
        assert_eq!((at, footer_at), (160, 4096 - FOOTER_BYTES));
        let footer = Footer::parse(&footer).expect("footer parses");
        assert_eq!(
            (footer.seq, footer.summary_offset, footer.entries),
            (9, 160, 2)
        );
        assert_eq!(
            parse_summary(&footer, &summary).as_deref(),
            Some(&entries[..])
        );
        let mut torn = summary.to_vec();
        torn[3] ^= 0x10;
        assert_eq!(parse_summary(&footer, &torn), None);
    }

    #[test]
    fn segment_header_rejects_a_flipped_bit() {
        let header = SegmentHeader {
            seq: 3,
            segment_bytes: 1 << 20,
        };
        let mut bytes = header.encode().to_vec();
        assert_eq!(SegmentHeader::parse(&bytes), Some(header));
        bytes[17] ^= 4;
        assert_eq!(SegmentHeader::parse(&bytes), None);
    }
}
