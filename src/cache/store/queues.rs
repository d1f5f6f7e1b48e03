//! The store's two FIFO queues and their accounting, behind its one lock.

use std::collections::VecDeque;

use crate::admission::probation::Segment;

use super::super::key::CacheKey;
use super::Usage;

/// The two FIFO queues and their accounting, behind the store's one lock.
#[derive(Default)]
pub(super) struct Queues {
    pub(super) fifo: [VecDeque<(CacheKey, u64)>; 2],
    /// Entries of main on their way to the tier below ([`super::Store::write_back_first_copy`]):
    /// the first to leave when room is needed, handed to the eviction listener as they go.
    pub(super) write_back: VecDeque<(CacheKey, u64)>,
    pub(super) usage: Usage,
    next_ticket: u64,
    /// Queue nodes whose slot was replaced or removed; skipped when reached, compacted when many.
    pub(super) stale: usize,
}

impl Queues {
    pub(super) fn ticket(&mut self) -> u64 {
        self.next_ticket += 1;
        self.next_ticket
    }

    pub(super) fn total_bytes(&self) -> u64 {
        self.usage.bytes[0] + self.usage.bytes[1]
    }

    /// Counts an entry of `weight` bytes into `segment`, and into main's write-back queue when
    /// `written_back`.
    pub(super) fn add(&mut self, segment: Segment, weight: u64, written_back: bool) {
        self.usage.bytes[segment.index()] += weight;
        self.usage.entries[segment.index()] += 1;
        if written_back {
            self.usage.write_back_bytes += weight;
        }
    }

    /// Takes back what [`Self::add`] counted.
    pub(super) fn subtract(&mut self, segment: Segment, weight: u64, written_back: bool) {
        self.usage.bytes[segment.index()] -= weight;
        self.usage.entries[segment.index()] -= 1;
        if written_back {
            self.usage.write_back_bytes -= weight;
        }
    }
}
