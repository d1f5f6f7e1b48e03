//! Records whose checksum a read has already checked since their segment last started: later
//! reads of them check header and key, not the payload's checksum again. Only with
//! `Options::remember_checks` (bloomgate's `disk.verify_reads = "first"`); by default every read
//! checks every byte.
//!
//! A record never changes in place while its segment keeps its sequence (segments are appended
//! to, then reclaimed whole, which starts a new sequence), so the checksum's answer for the bytes
//! at one offset holds until the sequence changes. What this gives up: bytes that change under a
//! running engine without its writes (another process writing the file, a device returning other
//! bytes for a page the kernel dropped and read back) are caught only by a record's first read.
//! Damage at rest between runs, torn writes and crashes are always met by a first read.
//!
//! Only records of [`REMEMBERED_FROM`] bytes or more are remembered, one bit per block of that
//! size: two such records cannot start in one block, so the bit of the block a record starts in
//! names it. 128 bytes per 16 MiB segment; below that size the checksum costs less than a look.

use parking_lot::Mutex;

/// The smallest record whose check is remembered, and the block each bit stands for.
pub(crate) const REMEMBERED_FROM: u32 = 16 << 10;

/// Per segment, the records of [`REMEMBERED_FROM`] bytes or more checked under one sequence.
pub(crate) struct Verified {
    segments: Box<[Mutex<Memo>]>,
}

struct Memo {
    seq: u64,
    /// Bit `n`: the record starting in block `n` of the segment was checked under `seq`.
    blocks: Box<[u64]>,
}

impl Verified {
    /// Room for `segments` segments of `segment_bytes` each.
    pub(crate) fn new(segments: usize, segment_bytes: u32) -> Verified {
        let words = segment_bytes.div_ceil(REMEMBERED_FROM).div_ceil(64) as usize;
        Verified {
            segments: (0..segments)
                .map(|_| {
                    Mutex::new(Memo {
                        seq: 0,
                        blocks: vec![0; words].into_boxed_slice(),
                    })
                })
                .collect(),
        }
    }

    /// Whether the record of `len` bytes at `offset` of `segment` passed its checksum while the
    /// segment had sequence `seq` (always false for records under [`REMEMBERED_FROM`]).
    pub(crate) fn contains(&self, segment: u32, seq: u64, offset: u32, len: u32) -> bool {
        let Some((word, bit)) = place(offset, len) else {
            return false;
        };
        let memo = self.segments[segment as usize].lock();
        memo.seq == seq && memo.blocks.get(word).is_some_and(|bits| bits & bit != 0)
    }

    /// Notes that the record of `len` bytes at `offset` of `segment` passed its checksum under
    /// sequence `seq`; records noted under another sequence are forgotten.
    pub(crate) fn insert(&self, segment: u32, seq: u64, offset: u32, len: u32) {
        let Some((word, bit)) = place(offset, len) else {
            return;
        };
        let mut memo = self.segments[segment as usize].lock();
        if memo.seq != seq {
            memo.seq = seq;
            memo.blocks.fill(0);
        }
        if let Some(bits) = memo.blocks.get_mut(word) {
            *bits |= bit;
        }
    }

    /// Forgets every record of `segment` (it is being reclaimed).
    pub(crate) fn forget(&self, segment: u32) {
        let mut memo = self.segments[segment as usize].lock();
        memo.seq = 0;
        memo.blocks.fill(0);
    }
}

/// The word and bit of the block a remembered record at `offset` starts in.
fn place(offset: u32, len: u32) -> Option<(usize, u64)> {
    if len < REMEMBERED_FROM {
        return None;
    }
    let block = offset / REMEMBERED_FROM;
    Some(((block / 64) as usize, 1 << (block % 64)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LARGE: u32 = REMEMBERED_FROM;

    #[test]
    fn a_check_holds_only_under_the_sequence_it_was_made_in() {
        let verified = Verified::new(2, 1 << 20);
        verified.insert(1, 7, 64, LARGE);
        assert!(verified.contains(1, 7, 64, LARGE));
        assert!(
            !verified.contains(1, 8, 64, LARGE),
            "a restarted segment's record"
        );
        assert!(
            !verified.contains(0, 7, 64, LARGE),
            "another segment's record"
        );
        assert!(
            !verified.contains(1, 7, 64 + LARGE, LARGE),
            "the next record"
        );
        verified.insert(1, 8, 64 + LARGE, LARGE);
        assert!(
            !verified.contains(1, 7, 64, LARGE),
            "forgotten when the sequence moved on"
        );
        verified.forget(1);
        assert!(!verified.contains(1, 8, 64 + LARGE, LARGE));
    }

    #[test]
    fn small_records_are_always_checked() {
        let verified = Verified::new(1, 1 << 20);
        verified.insert(0, 3, 64, LARGE - 8);
        assert!(!verified.contains(0, 3, 64, LARGE - 8));
    }

    #[test]
    fn the_last_block_of_a_segment_is_remembered() {
        let segment_bytes = 1 << 20;
        let verified = Verified::new(1, segment_bytes);
        let last = segment_bytes - LARGE;
        verified.insert(0, 3, last, LARGE);
        assert!(verified.contains(0, 3, last, LARGE));
    }
}
