//! What the store hands to the tier below RAM and takes back from it: entries leaving RAM
//! ([`Evicted`]), first copies on their second request, writes that pass RAM by, and copies read
//! back.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::admission::probation::Segment;

use super::super::entry::StoredResponse;
use super::super::key::CacheKey;
use super::super::variants::Variants;
use super::proof::{PROOF_NONE, Proof};
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

    /// Takes a first copy out of probation on its second request: the entry under `key`, if it
    /// is live in probation, was never hit, and `below` takes its variants, leaves the store (not
    /// counted as an eviction) and is returned proven by this request, for the tier below RAM
    /// that `below` asks. `None` leaves the store as it was.
    pub fn take_first_copy(
        &self,
        key: &CacheKey,
        below: impl FnOnce(&Variants) -> bool,
    ) -> Option<Evicted> {
        let inner = &*self.inner;
        let mut queues = inner.lock();
        let taken = inner.index.remove_if(key, |_, slot| {
            slot.segment == Segment::Probation
                && Tick::now() < slot.expires
                && slot.proof.load(Ordering::Relaxed) == PROOF_NONE
                && below(&slot.variants)
        });
        let (key, slot) = taken?;
        queues.subtract(Segment::Probation, u64::from(slot.variants.weight()));
        queues.stale += 1;
        inner.compact_if_stale(&mut queues);
        Some(Evicted {
            key,
            variants: slot.variants,
            proof: Some(Proof::RamHit),
        })
    }

    /// `response` as an entry leaving the store with `proof` would be handed on, without its
    /// ever entering RAM: for a write that goes to a tier below directly.
    pub fn passed_below(
        &self,
        key: CacheKey,
        response: Arc<StoredResponse>,
        proof: Proof,
    ) -> Evicted {
        let variants = self.inner.variants(&key, None, &response);
        Evicted {
            key,
            variants,
            proof: Some(proof),
        }
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
