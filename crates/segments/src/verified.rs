//! Records whose checksum a read has already checked since their segment last started: later
//! reads of them check header and key, not the payload's checksum again.
//!
//! A record never changes in place while its segment keeps its sequence (segments are appended
//! to, then reclaimed whole, which starts a new sequence), so the checksum's answer for the bytes
//! at one offset holds until the sequence changes. What this gives up: bytes that change under a
//! running engine without its writes (another process writing the file, a device returning other
//! bytes for a page the kernel dropped and read back) are caught only by a record's first read.
//! Damage at rest between runs, torn writes and crashes are always met by a first read.

use std::collections::HashSet;

use parking_lot::Mutex;

/// Per segment, the offsets of records checked under one sequence.
pub(crate) struct Verified {
    segments: Box<[Mutex<Memo>]>,
}

#[derive(Default)]
struct Memo {
    seq: u64,
    offsets: HashSet<u32>,
}

impl Verified {
    pub(crate) fn new(segments: usize) -> Verified {
        Verified {
            segments: (0..segments).map(|_| Mutex::default()).collect(),
        }
    }

    /// Whether the record at `offset` of `segment` passed its checksum while the segment had
    /// sequence `seq`.
    pub(crate) fn contains(&self, segment: u32, seq: u64, offset: u32) -> bool {
        let memo = self.segments[segment as usize].lock();
        memo.seq == seq && memo.offsets.contains(&offset)
    }

    /// Notes that the record at `offset` of `segment` passed its checksum under sequence `seq`;
    /// offsets noted under another sequence are forgotten.
    pub(crate) fn insert(&self, segment: u32, seq: u64, offset: u32) {
        let mut memo = self.segments[segment as usize].lock();
        if memo.seq != seq {
            memo.seq = seq;
            memo.offsets.clear();
        }
        memo.offsets.insert(offset);
    }

    /// Forgets every record of `segment` (it is being reclaimed).
    pub(crate) fn forget(&self, segment: u32) {
        let mut memo = self.segments[segment as usize].lock();
        memo.seq = 0;
        memo.offsets = HashSet::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_check_holds_only_under_the_sequence_it_was_made_in() {
        let verified = Verified::new(2);
        verified.insert(1, 7, 64);
        assert!(verified.contains(1, 7, 64));
        assert!(!verified.contains(1, 8, 64), "a restarted segment's record");
        assert!(!verified.contains(0, 7, 64), "another segment's record");
        assert!(!verified.contains(1, 7, 128), "another record");
        verified.insert(1, 8, 128);
        assert!(
            !verified.contains(1, 7, 64),
            "forgotten when the sequence moved on"
        );
        verified.forget(1);
        assert!(!verified.contains(1, 8, 128));
    }
}
