//! The store: probation and main segments over one byte budget, one slot per cache key holding
//! its `Vary` variants ([`Variants`]).

use std::hash::{BuildHasher, RandomState};
use std::mem::size_of;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use dashmap::DashMap;

use crate::admission::frequency::FrequencySketch;
use crate::admission::probation::{self, Budget, Leaving, Segment};

use super::entry::StoredResponse;
use super::key::CacheKey;
use super::variants::Variants;
use super::weight;

mod below;
mod main_admission;
mod proof;
mod queues;
mod tick;

pub use below::{Evicted, EvictionListener};
use main_admission::MainAdmission;
pub use proof::Proof;
use proof::{PROOF_BELOW, PROOF_NONE, PROOF_RAM_HIT};
use queues::Queues;
use tick::Tick;

/// An index slot with its key: what [`weight::key_bookkeeping`] counts for the index.
pub(super) const SLOT: usize = size_of::<(CacheKey, Slot)>();

/// Counters the store keeps about itself, read by the metrics exporter.
#[derive(Debug, Default)]
pub struct StoreCounters {
    /// Responses written into each segment (indexed by [`Segment::index`]) and their body bytes;
    /// a promotion counts as a write into main.
    pub writes: [AtomicU64; 2],
    pub written_bytes: [AtomicU64; 2],
    /// Entries moved from probation to main because they were hit there.
    pub promotions: AtomicU64,
    /// Entries dropped to make room, and expired entries dropped.
    pub evictions: AtomicU64,
    pub expirations: AtomicU64,
}

impl StoreCounters {
    /// Counts a write of an entry with `body_bytes` into `segment`.
    fn written(&self, segment: Segment, body_bytes: u64) {
        self.writes[segment.index()].fetch_add(1, Ordering::Relaxed);
        self.written_bytes[segment.index()].fetch_add(body_bytes, Ordering::Relaxed);
    }

    /// Counts a promotion of an entry with `body_bytes`: a write into main.
    fn promoted(&self, body_bytes: u64) {
        self.promotions.fetch_add(1, Ordering::Relaxed);
        self.written(Segment::Main, body_bytes);
    }
}

/// What each segment holds now (indexed by [`Segment::index`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub entries: [u64; 2],
    pub bytes: [u64; 2],
    /// Bytes of main (counted in `bytes`) in its write-back queue: proven entries waiting in RAM
    /// for the tier below ([`Store::write_back_first_copy`]).
    pub write_back_bytes: u64,
}

/// One key's place in the store.
struct Slot {
    variants: Variants,
    segment: Segment,
    /// The queue node that stands for this slot; nodes with another ticket are stale.
    ticket: u64,
    /// Hits since the slot entered its segment or was last reinserted, up to
    /// [`probation::MAX_USES`]; raised by readers without the queue lock.
    uses: AtomicU8,
    /// When the slot stops being servable (freshness plus the stale windows).
    expires: Tick,
    /// How the entry has proved itself since it entered the store, if it has (a [`Proof`] as
    /// `PROOF_*`): what a tier below RAM may take when the entry leaves ([`Evicted::proof`]).
    proof: AtomicU8,
    /// In main's write-back queue (its node is there, not in main's FIFO).
    written_back: bool,
}

impl Slot {
    /// Records a hit. An approximate counter, as S3-FIFO's: a hit lost to a racing one costs
    /// nothing, and a hot entry's counter, once full, is only read.
    fn used(&self) {
        let uses = self.uses.load(Ordering::Relaxed);
        if uses < probation::MAX_USES {
            self.uses.store(probation::used(uses), Ordering::Relaxed);
        }
        if self.proof.load(Ordering::Relaxed) == PROOF_NONE {
            self.proof.store(PROOF_RAM_HIT, Ordering::Relaxed);
        }
    }

    fn proof(&self) -> Option<Proof> {
        Proof::from_u8(self.proof.load(Ordering::Relaxed))
    }
}

/// How a write came about.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Write {
    /// A body fetched from the origin: counted, and placed at the back of its segment.
    Fetched,
    /// Headers refreshed by a revalidation: not counted, and the entry keeps its place.
    Refreshed,
    /// Read back from a tier below RAM: placed in main as proven (it was hit), not counted.
    Restored,
    /// Read back from a tier below RAM that keeps it: placed at the front of probation only into
    /// room the store has, and dropped when it leaves, never promoted; not counted.
    Idle,
}

/// What a write keeps of the slot it replaces.
struct Replaced {
    /// Its variants, if still live: the written response joins them.
    existing: Option<Variants>,
    /// Where the write goes.
    segment: Segment,
    /// Its ticket, when the write refreshes it in place.
    kept_ticket: Option<u64>,
    /// Its hits, when it stays live in its segment.
    uses: u8,
    /// Its proof, while live (`PROOF_*`).
    proof: u8,
    /// Whether it was in main.
    in_main: bool,
    /// Whether it was in main's write-back queue.
    written_back: bool,
}

/// The in-memory cache of responses: a probation FIFO and a main segment over one byte budget,
/// run by the rules of [`crate::admission::probation`] (S3-FIFO with the doorkeeper as its ghost).
///
/// Lookups never take the store's lock: the index is a sharded map, and a hit records itself in
/// an atomic counter. Writes, purges and evictions take the lock (the queues and the byte
/// accounting), then the index's shard; nothing takes them in the other order. A key has one slot,
/// in one segment: a promotion changes the slot's segment in place, so the entry is never in both
/// segments and never missing while it moves.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    index: DashMap<CacheKey, Slot>,
    queues: Mutex<Queues>,
    counters: StoreCounters,
    budget: Budget,
    max_variants: usize,
    listener: Option<EvictionListener>,
    /// How often keys were written from the origin lately (storable misses; hits are not
    /// counted, so the hit path never touches it): what main's admission compares.
    frequency: FrequencySketch,
    /// Whether a first copy was ever stored in probation (the probation mode runs): only then
    /// may a seen-before miss that main would not take go to probation instead.
    runs_probation: AtomicBool,
}

impl Store {
    /// A store holding at most `budget.total()` bytes of entries (headers, bodies and bookkeeping)
    /// and at most `max_variants` `Vary` variants per key (the oldest goes).
    pub fn new(budget: Budget, max_variants: usize) -> Store {
        Store::build(budget, max_variants, None)
    }

    /// [`Self::new`], telling `listener` of every entry dropped to make room.
    pub fn with_eviction_listener(
        budget: Budget,
        max_variants: usize,
        listener: EvictionListener,
    ) -> Store {
        Store::build(budget, max_variants, Some(listener))
    }

    fn build(budget: Budget, max_variants: usize, listener: Option<EvictionListener>) -> Store {
        Store {
            inner: Arc::new(Inner {
                index: DashMap::new(),
                queues: Mutex::new(Queues::default()),
                counters: StoreCounters::default(),
                budget,
                max_variants,
                listener,
                // A random key, so that no one can make keys share counters on purpose.
                frequency: FrequencySketch::for_budget(
                    budget.total(),
                    RandomState::new().hash_one("bloomgate frequency sketch"),
                ),
                runs_probation: AtomicBool::new(false),
            }),
        }
    }

    /// The variants stored under `key`, if any can still be served; the hit is recorded.
    pub fn get(&self, key: &CacheKey) -> Option<Variants> {
        let slot = self.inner.index.get(key)?;
        if Tick::now() >= slot.expires {
            return None;
        }
        slot.used();
        Some(slot.variants.clone())
    }

    /// Records a use of the entry under `key`, if there is one, without reading it: for a request
    /// that shared the response that stored it (coalesced), which is a second request all the same.
    pub fn touch(&self, key: &CacheKey) {
        if let Some(slot) = self.inner.index.get(key) {
            slot.used();
        }
    }

    /// Stores a response fetched from the origin in `segment`, replacing the variant that the same
    /// `Vary` selection had. A key already in main stays there; one in probation moves to main
    /// when `segment` is main. Returns the stored response (also when it could not be stored: larger
    /// than the whole store).
    pub fn insert(
        &self,
        key: CacheKey,
        response: StoredResponse,
        segment: Segment,
    ) -> Arc<StoredResponse> {
        let response = Arc::new(response);
        self.write(key, &response, segment, Write::Fetched);
        response
    }

    /// Replaces the stored variant after a revalidation refreshed its headers, without counting a
    /// write of the body (it was not transferred again) and without moving the entry.
    pub fn refresh(&self, key: CacheKey, response: StoredResponse) -> Arc<StoredResponse> {
        let response = Arc::new(response);
        self.write(key, &response, Segment::Main, Write::Refreshed);
        response
    }

    /// The variants stored under `key`, expired or not, without recording a use.
    pub fn peek(&self, key: &CacheKey) -> Option<Variants> {
        self.inner.index.get(key).map(|slot| slot.variants.clone())
    }

    /// Writes `response` under `key` as `how` came about: joined to the live variants the key
    /// has, placed in `segment` or where the slot it replaces places it, and counted when it was
    /// fetched; then the store is brought back within its budget.
    fn write(&self, key: CacheKey, response: &Arc<StoredResponse>, segment: Segment, how: Write) {
        self.write_placed(key, response, segment, how, false);
    }

    /// [`Self::write`], into main's write-back queue when `write_back` (see
    /// [`Self::write_back_first_copy`]).
    fn write_placed(
        &self,
        key: CacheKey,
        response: &Arc<StoredResponse>,
        segment: Segment,
        how: Write,
        write_back: bool,
    ) {
        let inner = &*self.inner;
        let mut queues = inner.lock();
        if how == Write::Idle && inner.index.contains_key(&key) {
            return;
        }
        let now = Tick::now();
        if how == Write::Fetched {
            inner.count_miss(&queues, &key, segment);
        }
        let Replaced {
            existing,
            segment,
            kept_ticket,
            uses,
            proof,
            in_main,
            written_back: was_written_back,
        } = inner.replace(&mut queues, &key, segment, how, now);
        let proof = proof::of_write(proof, how, segment);
        let variants = inner.variants(&key, existing.as_ref(), response);
        let weight = u64::from(variants.weight());
        if how == Write::Idle && queues.total_bytes() + weight > inner.budget.total() {
            return;
        }
        if weight > inner.budget.total() {
            if inner.index.remove(&key).is_some() && kept_ticket.is_some() {
                queues.stale += 1;
            }
            return;
        }
        // A seen-before miss that a full main would not take waits in probation, where a hit can
        // still earn it a place.
        let segment = if how == Write::Fetched
            && segment == Segment::Main
            && !write_back
            && !in_main
            && inner.waits_in_probation(&queues, &key, weight)
        {
            Segment::Probation
        } else {
            segment
        };
        // A refresh keeps its node, and so its queue; a new node goes where the write asks.
        let written_back = match kept_ticket {
            Some(_) => was_written_back,
            None => write_back && segment == Segment::Main,
        };
        let ticket = kept_ticket.unwrap_or_else(|| queues.ticket());
        inner.index.insert(
            key.clone(),
            Slot {
                expires: Tick::after(now, variants.keep_for()),
                variants,
                segment,
                ticket,
                uses: AtomicU8::new(uses),
                proof: AtomicU8::new(proof),
                written_back,
            },
        );
        queues.add(segment, weight, written_back);
        match (kept_ticket, how) {
            (Some(_), _) => {}
            (None, _) if written_back => {
                queues.write_back.push_back((key, ticket));
            }
            // Idle room's copy is the first to give it up.
            (None, Write::Idle) => queues.fifo[segment.index()].push_front((key, ticket)),
            (None, _) => queues.fifo[segment.index()].push_back((key, ticket)),
        }
        if how == Write::Fetched {
            inner.counters.written(segment, response.body.len() as u64);
        }
        inner.make_room(&mut queues, now);
        inner.compact_if_stale(&mut queues);
    }

    /// Removes every variant stored under the key, from whichever segment holds it; returns
    /// whether there was one.
    pub fn purge(&self, key: &CacheKey) -> bool {
        let inner = &*self.inner;
        let mut queues = inner.lock();
        let Some((_, slot)) = inner.index.remove(key) else {
            return false;
        };
        queues.subtract(
            slot.segment,
            u64::from(slot.variants.weight()),
            slot.written_back,
        );
        queues.stale += 1;
        inner.compact_if_stale(&mut queues);
        true
    }

    /// Entries and bytes per segment (expired entries count until their turn to leave comes).
    pub fn usage(&self) -> Usage {
        self.inner.lock().usage
    }

    /// The segment holding `key`, if any.
    pub fn segment_of(&self, key: &CacheKey) -> Option<Segment> {
        self.inner.index.get(key).map(|slot| slot.segment)
    }

    /// The byte budget and its split.
    pub fn budget(&self) -> Budget {
        self.inner.budget
    }

    pub fn counters(&self) -> &StoreCounters {
        &self.inner.counters
    }
}

impl Inner {
    /// Takes the slot `key` holds, if any, out of the accounting before a write replaces it
    /// (its weight, and its queue node made stale unless the write refreshes it in place), and
    /// says what the write keeps of it.
    fn replace(
        &self,
        queues: &mut Queues,
        key: &CacheKey,
        segment: Segment,
        how: Write,
        now: Tick,
    ) -> Replaced {
        let Some(slot) = self.index.get(key) else {
            return Replaced {
                existing: None,
                segment,
                kept_ticket: None,
                uses: 0,
                proof: PROOF_NONE,
                in_main: false,
                written_back: false,
            };
        };
        let live = now < slot.expires;
        if !live {
            self.counters.expirations.fetch_add(1, Ordering::Relaxed);
        }
        let placed = match how {
            Write::Refreshed => slot.segment,
            Write::Fetched | Write::Restored if slot.segment == Segment::Main => Segment::Main,
            Write::Fetched | Write::Restored | Write::Idle => segment,
        };
        let uses = if placed == slot.segment && live {
            slot.uses.load(Ordering::Relaxed)
        } else {
            0
        };
        let kept_ticket = (how == Write::Refreshed).then_some(slot.ticket);
        let proof = if live {
            slot.proof.load(Ordering::Relaxed)
        } else {
            PROOF_NONE
        };
        queues.subtract(
            slot.segment,
            u64::from(slot.variants.weight()),
            slot.written_back,
        );
        if kept_ticket.is_none() {
            queues.stale += 1;
        }
        Replaced {
            existing: live.then(|| slot.variants.clone()),
            segment: placed,
            kept_ticket,
            uses,
            proof,
            in_main: slot.segment == Segment::Main,
            written_back: slot.written_back,
        }
    }

    /// Counts a storable miss for `key` in the frequency sketch, and notes that the probation mode
    /// runs when its first copy goes to probation.
    fn count_miss(&self, queues: &Queues, key: &CacheKey, segment: Segment) {
        let held = queues.usage.entries[0] + queues.usage.entries[1];
        self.frequency.increment(key.as_str(), held);
        if segment == Segment::Probation {
            self.runs_probation.store(true, Ordering::Relaxed);
        }
    }

    /// `response` joined to the `existing` variants of `key` (the oldest going past the cap); the
    /// newest alone when they are too large together for the whole store.
    fn variants(
        &self,
        key: &CacheKey,
        existing: Option<&Variants>,
        response: &Arc<StoredResponse>,
    ) -> Variants {
        let cap = self.max_variants;
        let bookkeeping = |variants| weight::key_bookkeeping(key.as_str().len(), variants);
        let variants = Variants::with(existing, Arc::clone(response), cap, bookkeeping);
        if existing.is_none() || u64::from(variants.weight()) <= self.budget.total() {
            return variants;
        }
        // Too large with its siblings: the newest variant alone, if it fits.
        Variants::with(None, Arc::clone(response), cap, bookkeeping)
    }

    fn lock(&self) -> MutexGuard<'_, Queues> {
        // The accounting is updated in steps that cannot panic halfway; a panic elsewhere while
        // the lock was held leaves it usable.
        self.queues.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Promotes, reinserts or drops the oldest entries of the segment the budget names until the
    /// store is within its budget.
    fn make_room(&self, queues: &mut Queues, now: Tick) {
        // Hits race with this loop; past this many reinsertions the use counters are ignored, so
        // the loop ends however hot the entries are.
        let mut reinsertions_left =
            (queues.usage.entries[Segment::Main.index()] + 1) * u64::from(probation::MAX_USES);
        while queues.total_bytes() > self.budget.total() {
            if let Some((key, ticket)) = queues.write_back.pop_front() {
                self.write_back_oldest(queues, &key, ticket, now);
                continue;
            }
            let from = self.budget.evict_from(
                queues.usage.bytes[Segment::Probation.index()],
                queues.usage.bytes[Segment::Main.index()],
            );
            let Some((key, ticket)) = queues.fifo[from.index()].pop_front() else {
                debug_assert!(false, "{from:?} holds bytes but has no queue node");
                return;
            };
            // Main's admission reads the index for no key, so it is settled before the slot is.
            let candidate = (from == Segment::Probation).then(|| self.main_admission(queues, &key));
            let leaving = match self.index.get_mut(&key) {
                Some(mut slot) if slot.ticket == ticket && slot.segment == from => {
                    let live = now < slot.expires;
                    let mut uses = *slot.uses.get_mut();
                    if reinsertions_left == 0 {
                        uses = 0;
                    }
                    let weight = u64::from(slot.variants.weight());
                    let below = slot.proof.load(Ordering::Relaxed) == PROOF_BELOW;
                    let leaving = match probation::leaving(from, uses, live) {
                        Leaving::Promote if below => Leaving::Drop,
                        Leaving::Promote if candidate.is_some_and(|c| !c.takes(uses, weight)) => {
                            Leaving::Drop
                        }
                        leaving => leaving,
                    };
                    // Promoted and reinserted entries go to the back of main with these uses.
                    let kept_uses = match leaving {
                        Leaving::Promote => Some(0),
                        Leaving::Reinsert(uses) => {
                            reinsertions_left -= 1;
                            Some(uses)
                        }
                        Leaving::Drop => None,
                    };
                    if let Some(uses) = kept_uses {
                        *slot.uses.get_mut() = uses;
                        slot.segment = Segment::Main;
                        slot.ticket = queues.ticket();
                        // Nodes in the FIFOs stand for slots outside the write-back queue.
                        queues.subtract(from, weight, false);
                        queues.add(Segment::Main, weight, false);
                        queues.fifo[Segment::Main.index()].push_back((key.clone(), slot.ticket));
                    }
                    if leaving == Leaving::Promote {
                        self.counters.promoted(slot.variants.body_bytes());
                    }
                    Some((leaving, live, weight))
                }
                _ => None,
            };
            match leaving {
                None => queues.stale = queues.stale.saturating_sub(1),
                Some((Leaving::Drop, live, weight)) => {
                    self.drop_oldest(queues, from, &key, live, weight);
                }
                Some(_) => {}
            }
        }
    }

    /// Hands on the oldest entry of main's write-back queue, `key` under `ticket` (nothing if the
    /// node is stale): out of the store, to the eviction listener.
    fn write_back_oldest(&self, queues: &mut Queues, key: &CacheKey, ticket: u64, now: Tick) {
        let leaving = self
            .index
            .get(key)
            .filter(|slot| slot.ticket == ticket && slot.segment == Segment::Main)
            .map(|slot| (now < slot.expires, u64::from(slot.variants.weight())));
        match leaving {
            Some((live, weight)) => self.drop_oldest(queues, Segment::Main, key, live, weight),
            None => queues.stale = queues.stale.saturating_sub(1),
        }
    }

    /// Drops `key`, the oldest entry of `from` of `weight` bytes, out of the store: an eviction
    /// the listener is told of when it was `live`, else an expiration.
    fn drop_oldest(
        &self,
        queues: &mut Queues,
        from: Segment,
        key: &CacheKey,
        live: bool,
        weight: u64,
    ) {
        let removed = self.index.remove(key);
        let written_back = removed.as_ref().is_some_and(|(_, slot)| slot.written_back);
        queues.subtract(from, weight, written_back);
        if let (Some(listener), Some((key, slot)), true) = (&self.listener, removed, live) {
            listener(Evicted {
                key,
                proof: slot.proof(),
                variants: slot.variants,
            });
        }
        let counter = if live {
            &self.counters.evictions
        } else {
            &self.counters.expirations
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether a seen-before miss for `key` of `weight` bytes waits in probation instead of main:
    /// only once a first copy was stored in probation (the mode runs), if it fits there, and if a
    /// full main would not take it.
    fn waits_in_probation(&self, queues: &Queues, key: &CacheKey, weight: u64) -> bool {
        weight <= self.budget.probation()
            && self.runs_probation.load(Ordering::Relaxed)
            && !self.main_admission(queues, key).takes(0, weight)
    }

    /// What main's admission weighs for `key` ([`MainAdmission::of`]).
    fn main_admission(&self, queues: &Queues, key: &CacheKey) -> MainAdmission {
        MainAdmission::of(&self.frequency, queues, self.budget, key.as_str())
    }

    /// Drops stale queue nodes once they outnumber the entries (purges and rewrites leave them;
    /// a store that never fills never reaches them by evicting).
    fn compact_if_stale(&self, queues: &mut Queues) {
        let entries = queues.usage.entries[0] + queues.usage.entries[1];
        if (queues.stale as u64) < entries.max(1024) {
            return;
        }
        let current = |key: &CacheKey, ticket: u64, segment: Segment| {
            self.index
                .get(key)
                .is_some_and(|slot| slot.ticket == ticket && slot.segment == segment)
        };
        for segment in Segment::ALL {
            queues.fifo[segment.index()].retain(|(key, ticket)| current(key, *ticket, segment));
        }
        queues
            .write_back
            .retain(|(key, ticket)| current(key, *ticket, Segment::Main));
        queues.stale = 0;
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use bytes::Bytes;
    use http::StatusCode;
    use http::header::{HeaderMap, HeaderValue};

    use super::*;

    fn variant(user_agent: &str) -> (HeaderMap, StoredResponse) {
        let mut request = HeaderMap::new();
        request.insert(
            "user-agent",
            HeaderValue::from_str(user_agent).expect("value"),
        );
        let mut response = HeaderMap::new();
        response.insert("cache-control", HeaderValue::from_static("max-age=60"));
        response.insert("vary", HeaderValue::from_static("User-Agent"));
        let now = SystemTime::now();
        let body = Bytes::from(user_agent.to_owned());
        let entry = StoredResponse::new(StatusCode::OK, response, body, &request, &[], now);
        (request, entry)
    }

    fn plain(body_bytes: usize) -> StoredResponse {
        let mut response = HeaderMap::new();
        response.insert("cache-control", HeaderValue::from_static("max-age=60"));
        let request = HeaderMap::new();
        let now = SystemTime::now();
        let body = Bytes::from(vec![b'x'; body_bytes]);
        StoredResponse::new(StatusCode::OK, response, body, &request, &[], now)
    }

    fn key(name: &str) -> CacheKey {
        CacheKey::from_string(format!("h/{name}"))
    }

    /// The weight of a key holding `plain(body_bytes)`, its bookkeeping included, to size budgets
    /// by (the tests' keys are short enough to cost the same).
    fn weight(body_bytes: usize) -> u64 {
        let store = Store::new(Budget::new(u64::MAX, 0.1), 4);
        store.insert(key("weighed"), plain(body_bytes), Segment::Main);
        let usage = store.usage();
        usage.bytes[0] + usage.bytes[1]
    }

    impl Store {
        /// Checks the accounting against the index: every slot has exactly one live queue node, in
        /// its segment, and the bytes and entries add up.
        fn check(&self) {
            let inner = &*self.inner;
            let queues = inner.lock();
            let mut usage = Usage::default();
            for slot in inner.index.iter() {
                let i = slot.segment.index();
                usage.entries[i] += 1;
                usage.bytes[i] += u64::from(slot.variants.weight());
                assert!(!slot.written_back || slot.segment == Segment::Main);
                if slot.written_back {
                    usage.write_back_bytes += u64::from(slot.variants.weight());
                }
                let live = |queue: &std::collections::VecDeque<(CacheKey, u64)>| {
                    queue
                        .iter()
                        .filter(|(k, t)| k == slot.key() && *t == slot.ticket)
                        .count()
                };
                let (own, other) = if slot.written_back {
                    (live(&queues.write_back), live(&queues.fifo[i]))
                } else {
                    (live(&queues.fifo[i]), live(&queues.write_back))
                };
                assert_eq!(
                    (own, other),
                    (1, 0),
                    "{}: live nodes in its queue, and in the other",
                    slot.key()
                );
            }
            assert_eq!(usage, queues.usage);
            assert!(queues.total_bytes() <= inner.budget.total());
        }
    }

    /// Every key pays for its slot about twice over (the index's tables run half to seven eighths
    /// full): a byte more here is two more a key.
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn a_key_takes_48_bytes_of_the_index() {
        assert_eq!(size_of::<Variants>(), 16);
        assert_eq!(size_of::<(CacheKey, Slot)>(), 48);
    }

    /// The simulator weighs an object with [`weight::entry`] (`simulate --weigh proxy`): the
    /// store must spend exactly that on a plain entry, so that the two cannot drift apart.
    #[test]
    fn a_plain_entry_weighs_what_the_shared_weight_function_says() {
        for (name, body) in [
            ("a", 0),
            ("b/c.jpg?size=1", 100),
            (&"k".repeat(300), 70_000),
        ] {
            let store = Store::new(Budget::new(u64::MAX, 0.1), 4);
            let entry = plain(body);
            let expected =
                weight::entry(entry.body.len(), entry.head.len(), key(name).as_str().len());
            store.insert(key(name), entry, Segment::Probation);
            let usage = store.usage();
            assert_eq!(
                usage.bytes[0] + usage.bytes[1],
                expected,
                "key {name:?}, body {body}"
            );
        }
    }

    #[test]
    fn an_unhit_probation_entry_is_dropped_and_a_hit_one_promoted() {
        let w = weight(1000);
        // Room for 10 entries, probation held to 2 once main is full.
        let store = Store::new(Budget::new(10 * w, 0.2), 4);
        for i in 0..8 {
            store.insert(key(&format!("main-{i}")), plain(1000), Segment::Main);
        }
        store.insert(key("unhit"), plain(1000), Segment::Probation);
        store.insert(key("hit"), plain(1000), Segment::Probation);
        assert!(store.get(&key("hit")).is_some());
        // Asked for more often than main's entries, as a promotion into a full main must be.
        store.inner.frequency.increment(key("hit").as_str(), 0);
        store.check();
        // A new entry about twice as heavy. Main holds its share: probation gives up room.
        // "unhit" is dropped; "hit" is promoted, which frees nothing, so main (now over its
        // share, probation empty) gives up its oldest.
        store.insert(key("new"), plain(2000), Segment::Probation);
        store.check();
        assert_eq!(store.segment_of(&key("unhit")), None);
        assert_eq!(store.segment_of(&key("main-0")), None);
        assert_eq!(store.segment_of(&key("hit")), Some(Segment::Main));
        assert_eq!(store.segment_of(&key("new")), Some(Segment::Probation));
        let counters = store.counters();
        assert_eq!(counters.promotions.load(Ordering::Relaxed), 1);
        assert_eq!(
            counters.writes[Segment::Main.index()].load(Ordering::Relaxed),
            9
        );
        assert_eq!(counters.evictions.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn main_reinserts_used_entries_and_evicts_the_others() {
        let w = weight(1000);
        let store = Store::new(Budget::new(4 * w, 0.1), 4);
        for name in ["a", "b", "c", "d"] {
            store.insert(key(name), plain(1000), Segment::Main);
        }
        assert!(store.get(&key("a")).is_some());
        store.insert(key("e"), plain(1000), Segment::Main);
        store.check();
        assert_eq!(store.segment_of(&key("a")), Some(Segment::Main));
        assert_eq!(store.segment_of(&key("b")), None);
        assert_eq!(store.usage().entries, [0, 4]);
    }

    #[test]
    fn a_key_in_main_stays_there_and_one_in_probation_moves_up_when_written_to_main() {
        let store = Store::new(Budget::new(1 << 20, 0.1), 4);
        store.insert(key("k"), plain(10), Segment::Probation);
        store.insert(key("k"), plain(20), Segment::Main);
        assert_eq!(store.segment_of(&key("k")), Some(Segment::Main));
        store.insert(key("k"), plain(30), Segment::Probation);
        assert_eq!(store.segment_of(&key("k")), Some(Segment::Main));
        store.check();
        assert_eq!(store.usage().entries, [0, 1]);
        assert!(store.purge(&key("k")));
        assert!(!store.purge(&key("k")));
        store.check();
        assert_eq!(store.usage(), Usage::default());
    }

    #[test]
    fn the_byte_bound_holds_under_random_writes_write_backs_hits_and_purges() {
        let w = weight(500);
        let store = Store::new(Budget::new(40 * w, 0.1), 4);
        let mut state = 7u64;
        for step in 0..20_000 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            let k = key(&format!("k{}", (state >> 33) % 200));
            let body = 100 + ((state >> 20) % 900) as usize;
            match (state >> 40) % 10 {
                0 => {
                    store.purge(&k);
                }
                1..=3 => {
                    store.get(&k);
                }
                4 => {
                    store.insert(k, plain(body), Segment::Main);
                }
                5 => {
                    store.write_back_first_copy(&k);
                }
                6 => {
                    store.insert_written_back(k, plain(body));
                }
                _ => {
                    store.insert(k, plain(body), Segment::Probation);
                }
            }
            if step % 97 == 0 {
                store.check();
            }
        }
        store.check();
    }

    #[test]
    fn an_entry_is_never_missing_while_it_is_promoted_under_concurrent_evictions() {
        let w = weight(1000);
        let store = Store::new(Budget::new(50 * w, 0.1), 4);
        store.insert(key("hot"), plain(1000), Segment::Probation);
        assert!(store.get(&key("hot")).is_some());
        let done = AtomicU64::new(0);
        std::thread::scope(|scope| {
            // Hit without pause: found every time while it moves from probation to main. Main
            // holds nothing else, so nothing may take it out once there.
            scope.spawn(|| {
                while done.load(Ordering::Relaxed) < 2 {
                    assert!(store.get(&key("hot")).is_some(), "the hot key was lost");
                }
            });
            for thread in 0..2 {
                let store = store.clone();
                let done = &done;
                scope.spawn(move || {
                    // One-hit wonders into probation, which must keep dropping them.
                    for i in 0..3000 {
                        store.insert(
                            key(&format!("t{thread}-{i}")),
                            plain(1000),
                            Segment::Probation,
                        );
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                });
            }
        });
        store.check();
        assert_eq!(store.segment_of(&key("hot")), Some(Segment::Main));
        assert_eq!(store.usage().entries[Segment::Main.index()], 1);
        assert_eq!(store.counters().promotions.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn concurrent_hits_writes_write_backs_purges_and_evictions_keep_the_bound_and_the_accounting() {
        let w = weight(1000);
        let store = Store::new(Budget::new(50 * w, 0.1), 4);
        std::thread::scope(|scope| {
            for thread in 0..4u64 {
                let store = store.clone();
                scope.spawn(move || {
                    let mut state = thread + 1;
                    for _ in 0..5000 {
                        state = state
                            .wrapping_mul(6_364_136_223_846_793_005)
                            .wrapping_add(1);
                        let k = key(&format!("k{}", (state >> 33) % 120));
                        match (state >> 45) % 12 {
                            0 => {
                                store.purge(&k);
                            }
                            1..=5 => {
                                store.get(&k);
                            }
                            6 | 7 => {
                                store.insert(k, plain(1000), Segment::Probation);
                            }
                            8 => {
                                store.write_back_first_copy(&k);
                            }
                            9 => {
                                store.insert_written_back(k, plain(1000));
                            }
                            _ => {
                                store.insert(k, plain(1000), Segment::Main);
                            }
                        }
                        let usage = store.usage();
                        assert!(usage.bytes[0] + usage.bytes[1] <= 50 * w);
                    }
                });
            }
        });
        store.check();
        assert!(store.counters().promotions.load(Ordering::Relaxed) > 0);
        assert!(store.counters().evictions.load(Ordering::Relaxed) > 0);
    }

    #[test]
    fn a_full_main_takes_only_keys_asked_for_more_often_than_its_oldest() {
        let w = weight(1000);
        // Room for 10 entries; main's share is 8.
        let store = Store::new(Budget::new(10 * w, 0.2), 4);
        for i in 0..8 {
            // Each asked for twice (missed twice) before main took it.
            let name = key(&format!("main-{i}"));
            store.inner.frequency.increment(name.as_str(), 0);
            store.insert(name, plain(1000), Segment::Main);
        }
        // Main is full, but no first copy was ever stored in probation (second-hit or off):
        // a seen-before miss goes to main as it always did.
        store.insert(key("second-hit"), plain(1000), Segment::Main);
        assert_eq!(store.segment_of(&key("second-hit")), Some(Segment::Main));
        store.insert(key("first"), plain(1000), Segment::Probation);
        // Now probation runs: a seen-before miss counted no more often than main's oldest
        // waits in probation; one counted more often goes to main.
        store.insert(key("seen"), plain(1000), Segment::Main);
        assert_eq!(store.segment_of(&key("seen")), Some(Segment::Probation));
        store.inner.frequency.increment(key("popular").as_str(), 0);
        store.inner.frequency.increment(key("popular").as_str(), 0);
        store.insert(key("popular"), plain(1000), Segment::Main);
        assert_eq!(store.segment_of(&key("popular")), Some(Segment::Main));
        // A miss and a hit in probation are not enough to be promoted into a full main whose
        // oldest was asked for as often: "first" and "seen" are dropped when probation gives up
        // room, hit or not.
        assert!(store.get(&key("first")).is_some());
        store.insert(key("next"), plain(1000), Segment::Probation);
        store.insert(key("last"), plain(1000), Segment::Probation);
        store.check();
        assert_eq!(store.segment_of(&key("first")), None);
        assert_eq!(store.counters().promotions.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn the_eviction_listener_hears_which_leaving_entries_proved_themselves() {
        let w = weight(1000);
        let heard = Arc::new(Mutex::new(Vec::new()));
        let told = Arc::clone(&heard);
        let listener: EvictionListener = Box::new(move |evicted: Evicted| {
            let name = evicted.key.as_str().trim_start_matches("h/").to_owned();
            told.lock().unwrap().push((name, evicted.proven()));
        });
        // Room for 4 entries; probation held to 1 once main is full.
        let store = Store::with_eviction_listener(Budget::new(4 * w, 0.25), 4, listener);
        store.insert(key("second"), plain(1000), Segment::Main);
        store.insert(key("hit"), plain(1000), Segment::Probation);
        assert!(store.get(&key("hit")).is_some());
        store.insert(key("once"), plain(1000), Segment::Probation);
        store.insert(key("purged"), plain(1000), Segment::Probation);
        assert!(store.purge(&key("purged")));
        store.insert(key("filler-1"), plain(1000), Segment::Probation);
        // Full (4): probation gives up "hit" (promoted, not dropped), then main is within its
        // share, so probation drops "once": a one-hit wonder.
        store.insert(key("filler-2"), plain(1000), Segment::Probation);
        assert_eq!(
            heard.lock().unwrap().as_slice(),
            [("once".to_owned(), false)]
        );
        // Enough second requests, each asked for more often than main's entries, to push
        // everything else out of probation and main.
        for i in 0..8 {
            let name = key(&format!("main-{i}"));
            store.inner.frequency.increment(name.as_str(), 0);
            store.insert(name, plain(1000), Segment::Main);
        }
        let heard = heard.lock().unwrap();
        let proven = |name: &str| heard.iter().find(|(n, _)| n == name).map(|(_, p)| *p);
        assert_eq!(proven("second"), Some(true), "written on a second request");
        assert_eq!(proven("hit"), Some(true), "hit while in RAM");
        assert_eq!(proven("filler-1"), Some(false));
        assert_eq!(proven("purged"), None, "purged, not evicted");
        store.check();
    }

    #[test]
    fn written_back_entries_stay_in_ram_until_room_is_needed_and_leave_first_proven() {
        let w = weight(1000);
        let heard = Arc::new(Mutex::new(Vec::new()));
        let told = Arc::clone(&heard);
        let listener: EvictionListener = Box::new(move |evicted: Evicted| {
            let name = evicted.key.as_str().trim_start_matches("h/").to_owned();
            told.lock().unwrap().push((name, evicted.proof));
        });
        let left = || std::mem::take(&mut *heard.lock().unwrap());
        // Room for 4 entries; probation held to 1 once main is full.
        let store = Store::with_eviction_listener(Budget::new(4 * w, 0.25), 4, listener);
        store.insert(key("main"), plain(1000), Segment::Main);
        store.insert(key("a"), plain(1000), Segment::Probation);
        store.insert(key("b"), plain(1000), Segment::Probation);
        // Only a live first copy in probation moves.
        assert!(!store.write_back_first_copy(&key("main")));
        assert!(!store.write_back_first_copy(&key("missing")));
        assert!(store.write_back_first_copy(&key("a")));
        assert!(!store.write_back_first_copy(&key("a")));
        assert_eq!(store.segment_of(&key("a")), Some(Segment::Main));
        assert_eq!(store.usage().write_back_bytes, w);
        assert_eq!(store.counters().promotions.load(Ordering::Relaxed), 1);
        store.check();
        // Not full: it stays, and is hit in RAM.
        store.insert(key("c"), plain(1000), Segment::Probation);
        assert!(left().is_empty());
        assert!(store.get(&key("a")).is_some());
        // Full: the written-back entry leaves first, proven, though probation is over its share
        // and main's own entry is older.
        store.insert(key("d"), plain(1000), Segment::Probation);
        assert_eq!(left(), [("a".to_owned(), Some(Proof::RamHit))]);
        assert_eq!(store.usage().write_back_bytes, 0);
        for name in ["main", "b", "c", "d"] {
            assert!(store.peek(&key(name)).is_some(), "{name}");
        }
        store.check();
        // Proven on arrival: placed in the write-back queue, and leaves before the first copies.
        // Over by one, and "seen" is the only one on its way below.
        store.insert_written_back(key("seen"), plain(1000));
        assert_eq!(left(), [("seen".to_owned(), Some(Proof::SeenBefore))]);
        assert_eq!(store.segment_of(&key("seen")), None);
        store.check();
        // A purged one leaves a stale node, skipped; then the store's own rule applies.
        assert!(store.write_back_first_copy(&key("b")));
        assert!(store.purge(&key("b")));
        store.insert(key("e"), plain(1000), Segment::Probation);
        store.insert(key("f"), plain(1000), Segment::Probation);
        assert_eq!(left(), [("c".to_owned(), None)]);
        store.check();
        assert_eq!(store.counters().evictions.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn a_response_kept_below_takes_only_idle_room_and_leaves_probation_unpromoted() {
        let w = weight(1000);
        let store = Store::new(Budget::new(3 * w, 0.1), 4);
        store.insert(key("a"), plain(1000), Segment::Probation);
        store.keep_while_idle(&key("below"), Arc::new(plain(1000)));
        assert!(store.get(&key("below")).is_some(), "hit while there");
        store.insert(key("b"), plain(1000), Segment::Probation);
        store.keep_while_idle(&key("no-room"), Arc::new(plain(1000)));
        assert_eq!(store.segment_of(&key("no-room")), None, "RAM is full");
        // A first copy needs room: the hit copy of what is below leaves before the older "a",
        // and not into main.
        store.insert(key("c"), plain(1000), Segment::Probation);
        assert_eq!(store.segment_of(&key("below")), None);
        assert_eq!(store.segment_of(&key("a")), Some(Segment::Probation));
        assert_eq!(store.usage().entries, [3, 0]);
        assert_eq!(store.counters().promotions.load(Ordering::Relaxed), 0);
        store.check();
    }

    #[test]
    fn variants_per_key_are_capped_and_the_oldest_goes() {
        let store = Store::new(Budget::new(1 << 20, 0.1), 4);
        let key = CacheKey::from_string("h/v".into());
        let mut requests = Vec::new();
        for i in 0..10 {
            let (request, entry) = variant(&format!("agent-{i}"));
            store.insert(key.clone(), entry, Segment::Main);
            requests.push(request);
        }
        let variants = store.get(&key).expect("stored");
        assert_eq!(variants.len(), 4);
        for (i, request) in requests.iter().enumerate() {
            let found = variants.select(request).map(|v| v.body.clone());
            if i < 6 {
                assert_eq!(found, None, "agent-{i} should have been dropped");
            } else {
                assert_eq!(found, Some(Bytes::from(format!("agent-{i}"))));
            }
        }
    }

    #[test]
    fn concurrent_writers_of_different_variants_all_land() {
        let store = Store::new(Budget::new(64 << 20, 0.1), 1000);
        let key = CacheKey::from_string("h/race".into());
        std::thread::scope(|scope| {
            for thread in 0..4 {
                let store = store.clone();
                let key = key.clone();
                scope.spawn(move || {
                    for i in 0..100 {
                        let (_, entry) = variant(&format!("agent-{thread}-{i}"));
                        store.insert(key.clone(), entry, Segment::Probation);
                    }
                });
            }
        });
        assert_eq!(store.get(&key).map(|v| v.len()), Some(400));
    }
}
