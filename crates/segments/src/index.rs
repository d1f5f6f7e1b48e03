//! The in-memory index: key hash to the record's place on disk, in 64 shards of packed `u64`s.
//!
//! A location packs into 64 bits:
//!
//! | bits | field | limit it implies |
//! |---|---|---|
//! | 0..25 | record length, 8-byte units | records under 256 MiB |
//! | 25..50 | record offset in its segment, 8-byte units | segments of at most 256 MiB |
//! | 50..63 | segment number | at most 8192 segments |
//! | 63 | hit bit: set by a read, cleared when the record is (re)written | |

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::table::Table;

const LEN_BITS: u32 = 25;
const OFFSET_BITS: u32 = 25;
const SEGMENT_BITS: u32 = 13;
const HIT: u64 = 1 << 63;
const SHARDS: usize = 64;

/// The largest segment a location can address, in bytes.
pub const MAX_SEGMENT_BYTES: u64 = (1 << OFFSET_BITS) * 8;
/// The most segments a location can name.
pub const MAX_SEGMENTS: u64 = 1 << SEGMENT_BITS;

/// Where a record sits: its segment, and its byte range there (both multiples of 8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Location {
    pub segment: u32,
    pub offset: u32,
    pub len: u32,
}

impl Location {
    fn pack(self) -> u64 {
        debug_assert!(self.offset.is_multiple_of(8) && self.len.is_multiple_of(8));
        debug_assert!(u64::from(self.segment) < MAX_SEGMENTS);
        u64::from(self.len / 8)
            | u64::from(self.offset / 8) << LEN_BITS
            | u64::from(self.segment) << (LEN_BITS + OFFSET_BITS)
    }

    fn unpack(packed: u64) -> Location {
        let field = |shift: u32, bits: u32| (packed >> shift) & ((1 << bits) - 1);
        Location {
            segment: field(LEN_BITS + OFFSET_BITS, SEGMENT_BITS) as u32,
            offset: (field(LEN_BITS, OFFSET_BITS) * 8) as u32,
            len: (field(0, LEN_BITS) * 8) as u32,
        }
    }
}

/// Key hash to [`Location`], sharded by the hash's low bits so threads rarely meet on a lock.
pub(crate) struct Index {
    shards: Box<[Mutex<Table>]>,
    live_bytes: AtomicU64,
}

impl Default for Index {
    fn default() -> Index {
        Index {
            shards: (0..SHARDS).map(|_| Mutex::new(Table::default())).collect(),
            live_bytes: AtomicU64::new(0),
        }
    }
}

impl Index {
    fn shard(&self, hash: u64) -> &Mutex<Table> {
        &self.shards[hash as usize % SHARDS]
    }

    fn added(&self, location: Location) {
        self.live_bytes
            .fetch_add(u64::from(location.len), Ordering::Relaxed);
    }

    fn gone(&self, location: Location) {
        self.live_bytes
            .fetch_sub(u64::from(location.len), Ordering::Relaxed);
    }

    pub(crate) fn get(&self, hash: u64) -> Option<Location> {
        self.shard(hash).lock().get(hash).map(Location::unpack)
    }

    /// The location of `hash` and whether it was read since it was written.
    pub(crate) fn get_with_hit(&self, hash: u64) -> Option<(Location, bool)> {
        let packed = self.shard(hash).lock().get(hash)?;
        Some((Location::unpack(packed), packed & HIT != 0))
    }

    /// The location of `hash`, marking it as read.
    pub(crate) fn get_marking_hit(&self, hash: u64) -> Option<Location> {
        let mut shard = self.shard(hash).lock();
        let packed = shard.get_mut(hash)?;
        *packed |= HIT;
        Some(Location::unpack(*packed))
    }

    /// Points `hash` at `location` (not yet hit), returning where it pointed before.
    pub(crate) fn insert(&self, hash: u64, location: Location) -> Option<Location> {
        let old = self.shard(hash).lock().insert(hash, location.pack());
        let old = old.map(Location::unpack);
        self.added(location);
        if let Some(old) = old {
            self.gone(old);
        }
        old
    }

    pub(crate) fn remove(&self, hash: u64) -> Option<Location> {
        let old = self.shard(hash).lock().remove(hash).map(Location::unpack)?;
        self.gone(old);
        Some(old)
    }

    /// Removes `hash` only if it still points at `location`; returns whether it did.
    pub(crate) fn remove_if(&self, hash: u64, location: Location) -> bool {
        let mut shard = self.shard(hash).lock();
        if shard.get(hash).map(Location::unpack) != Some(location) {
            return false;
        }
        shard.remove(hash);
        self.gone(location);
        true
    }

    /// Moves `hash` from `old` to `new` only if it still points at `old`.
    pub(crate) fn replace_if(&self, hash: u64, old: Location, new: Location) -> bool {
        let mut shard = self.shard(hash).lock();
        match shard.get_mut(hash) {
            Some(packed) if Location::unpack(*packed) == old => {
                *packed = new.pack();
                self.gone(old);
                self.added(new);
                true
            }
            _ => false,
        }
    }

    /// Removes every entry in `segment` (a sweep of the whole index); returns how many went.
    pub(crate) fn remove_segment(&self, segment: u32) -> u64 {
        let mut removed = 0;
        for shard in self.shards.iter() {
            removed += shard.lock().remove_where(|packed| {
                let location = Location::unpack(packed);
                let doomed = location.segment == segment;
                if doomed {
                    self.gone(location);
                }
                doomed
            }) as u64;
        }
        removed
    }

    pub(crate) fn entries(&self) -> u64 {
        self.shards
            .iter()
            .map(|shard| shard.lock().len() as u64)
            .sum()
    }

    /// Bytes of the records the index points at.
    pub(crate) fn live_bytes(&self) -> u64 {
        self.live_bytes.load(Ordering::Relaxed)
    }

    /// Heap bytes the index's tables take.
    pub(crate) fn table_bytes(&self) -> u64 {
        self.shards
            .iter()
            .map(|shard| shard.lock().slot_bytes() as u64)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn location_packs_its_largest_fields_without_overlap() {
        let largest = Location {
            segment: (MAX_SEGMENTS - 1) as u32,
            offset: (MAX_SEGMENT_BYTES - 8) as u32,
            len: (MAX_SEGMENT_BYTES - 8) as u32,
        };
        assert_eq!(Location::unpack(largest.pack()), largest);
        assert_eq!(largest.pack() & HIT, 0);
        let small = Location {
            segment: 1,
            offset: 64,
            len: 8,
        };
        assert_eq!(Location::unpack(small.pack() | HIT), small);
    }

    #[test]
    fn hit_bit_is_set_by_reads_and_cleared_by_rewrites() {
        let index = Index::default();
        let at = Location {
            segment: 0,
            offset: 64,
            len: 48,
        };
        index.insert(5, at);
        assert_eq!(index.get_with_hit(5), Some((at, false)));
        index.get_marking_hit(5);
        assert_eq!(index.get_with_hit(5), Some((at, true)));
        let moved = Location {
            segment: 1,
            offset: 64,
            len: 48,
        };
        assert!(index.replace_if(5, at, moved));
        assert_eq!(index.get_with_hit(5), Some((moved, false)));
        assert!(
            !index.remove_if(5, at),
            "a stale location must not remove the entry"
        );
        assert_eq!(index.live_bytes(), 48);
        assert_eq!(index.remove_segment(1), 1);
        assert_eq!((index.entries(), index.live_bytes()), (0, 0));
    }

    /// Measures the index's RAM per entry at one million entries: the tables' slot bytes
    /// (capacity × 16 B) over the entries. The shards' own structs add 64 × 40 B in all.
    #[test]
    fn one_million_entries_take_at_most_24_bytes_each() {
        let index = Index::default();
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        for n in 0..1_000_000u32 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            index.insert(
                state | 1,
                Location {
                    segment: 0,
                    offset: n % 1000 * 8,
                    len: 8,
                },
            );
        }
        let per_entry = index.table_bytes() as f64 / index.entries() as f64;
        println!(
            "index: {per_entry:.2} B per entry at {} entries",
            index.entries()
        );
        assert!(per_entry <= 24.0, "{per_entry} B per entry");
    }
}
