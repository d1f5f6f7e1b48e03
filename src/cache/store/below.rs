//! What the store hands to the tier below RAM and takes back from it: entries leaving RAM
//! ([`Evicted`]), entries on their way below (main's write-back queue), and copies read back.

use std::sync::Arc;

use crate::admission::probation::Segment;

use super::super::entry::StoredResponse;
use super::super::key::CacheKey;
use super::super::variants::Variants;
use super::proof::{PROOF_NONE, PROOF_RAM_HIT, Proof};
use super::tick::Tick;
use super::{Store, Write};

/// An entry the store dropped to make room, as its eviction listener sees it.
pub struct Evicted {
    pub key: CacheKey,
    pub variants: Variants,
    /// Hit while in the store, or written on a second request (seen before): the rule for what a
    /// disk tier below RAM takes (a first-and-only request never costs a disk write).
    pub proof: Option<Proof>,
}

impl Evicted {
    pub fn proven(&self) -> bool {
        self.proof.is_some()
    }
}

/// Told of every entry the store drops to make room (not of purged, replaced or expired ones).
/// Called with the store's lock held: it must only hand the entry on (to a channel, say).
pub type EvictionListener = Box<dyn Fn(Evicted) + Send + Sync>;

impl Store {
    /// Places variants read back from a tier below RAM in main, as proven entries (a read from
    /// disk is a hit), without counting a write; returns what the store then holds for the key.
    pub fn restore(
        &self,
        key: &CacheKey,
        responses: impl IntoIterator<Item = StoredResponse>,
    ) -> Option<Variants> {
        for response in responses {
            let response = Arc::new(response);
            self.write(key.clone(), &response, Segment::Main, Write::Restored);
        }
        self.peek(key)
    }

    /// Moves a first copy on its second request from probation into main's write-back queue:
    /// the entry under `key`, if it is live in probation, stays in RAM, proven by this request,
    /// and is the first entry to leave when room is needed, handed to the tier below as it goes.
    /// So RAM's room goes to first copies waiting for their second request, proven entries keep
    /// only the room those do not need, and what is asked for while still in RAM never costs a
    /// write below. Returns whether it moved.
    pub fn write_back_first_copy(&self, key: &CacheKey) -> bool {
        let inner = &*self.inner;
        let mut queues = inner.lock();
        let Some(mut slot) = inner.index.get_mut(key) else {
            return false;
        };
        if slot.segment != Segment::Probation || Tick::now() >= slot.expires {
            return false;
        }
        let weight = u64::from(slot.variants.weight());
        let ticket = queues.ticket();
        slot.segment = Segment::Main;
        slot.ticket = ticket;
        slot.written_back = true;
        *slot.uses.get_mut() = 0;
        if *slot.proof.get_mut() == PROOF_NONE {
            *slot.proof.get_mut() = PROOF_RAM_HIT;
        }
        inner.counters.promoted(slot.variants.body_bytes());
        drop(slot);
        queues.subtract(Segment::Probation, weight, false);
        queues.add(Segment::Main, weight, true);
        // The probation node is stale now.
        queues.stale += 1;
        queues.write_back.push_back((key.clone(), ticket));
        inner.compact_if_stale(&mut queues);
        true
    }

    /// Stores `response`, fetched on a request that proved it (seen before, or admission off),
    /// in main's write-back queue, as [`Self::write_back_first_copy`] leaves a first copy.
    pub fn insert_written_back(
        &self,
        key: CacheKey,
        response: StoredResponse,
    ) -> Arc<StoredResponse> {
        let response = Arc::new(response);
        self.write_placed(key, &response, Segment::Main, Write::Fetched, true);
        response
    }

    /// Places `response`, read back from a tier below RAM that keeps it, in probation if the
    /// store has room for it without evicting anything and holds nothing under `key`: RAM that
    /// is idle serves it, and gives it up before any other entry (at the front of probation's
    /// FIFO; dropped, never promoted into main) once first copies need the room.
    pub fn keep_while_idle(&self, key: &CacheKey, response: Arc<StoredResponse>) {
        self.write(key.clone(), &response, Segment::Probation, Write::Idle);
    }

    /// Every live entry that has proved itself, as an eviction would hand it on: what a tier
    /// below RAM should take before the process stops.
    pub fn proven_entries(&self) -> Vec<Evicted> {
        let now = Tick::now();
        self.inner
            .index
            .iter()
            .filter(|slot| now < slot.expires)
            .filter_map(|slot| {
                Some(Evicted {
                    proof: Some(slot.proof()?),
                    key: slot.key().clone(),
                    variants: slot.variants.clone(),
                })
            })
            .collect()
    }
}
