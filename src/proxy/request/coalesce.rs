//! Request coalescing: one origin fetch per cache key in flight; later requests wait for its result.

use std::sync::{Arc, Mutex, PoisonError};

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use tokio::sync::Notify;

use crate::cache::CacheKey;
pub use crate::proxy::response::shared::SharedResponse;
use crate::proxy::upstream::origin::OriginFailure;

/// How a flight ended, as its waiters see it.
#[derive(Clone, Debug)]
pub enum FlightOutcome {
    Response(Arc<SharedResponse>),
    /// The origin failed before the leader could send a response head: waiters fail the same way.
    Failed(OriginFailure),
    /// The leader gave up (its response is not storable, too large, aborted, or was answered
    /// from a stale entry): fetch alone.
    FetchAlone,
}

/// A flight's outcome as its waiters share it: set once, by the leader, who then wakes them.
///
/// Every miss leads a flight, and almost none has a follower, so it is one small allocation with
/// one `Notify` (a `tokio::sync::watch` channel, used before, holds nine, and its send woke eight
/// lists under eight locks).
#[derive(Debug, Default)]
pub struct Slot {
    outcome: Mutex<Option<FlightOutcome>>,
    ended: Notify,
}

impl Slot {
    fn outcome(&self) -> Option<FlightOutcome> {
        self.outcome
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The fetches in flight, by cache key.
#[derive(Default)]
pub struct Coalescer {
    flights: DashMap<CacheKey, Arc<Slot>>,
}

/// The role a request takes for its key.
pub enum Role {
    Leader(Flight),
    Follower(Arc<Slot>),
}

impl Coalescer {
    /// Joins the flight for `key`, or starts one and leads it.
    pub fn join(self: &Arc<Self>, key: &CacheKey) -> Role {
        match self.flights.entry(key.clone()) {
            Entry::Occupied(entry) => Role::Follower(Arc::clone(entry.get())),
            Entry::Vacant(entry) => {
                let slot = Arc::new(Slot::default());
                entry.insert(Arc::clone(&slot));
                Role::Leader(Flight {
                    coalescer: Arc::clone(self),
                    key: key.clone(),
                    slot: Some(slot),
                })
            }
        }
    }

    #[cfg(test)]
    fn in_flight(&self) -> usize {
        self.flights.len()
    }
}

/// A flight being led; dropping it without finishing tells the waiters to fetch alone.
pub struct Flight {
    coalescer: Arc<Coalescer>,
    key: CacheKey,
    /// Taken when the flight ends, once.
    slot: Option<Arc<Slot>>,
}

impl Flight {
    /// Ends the flight: the key is free for the next miss, and every waiter receives the outcome.
    pub fn finish(mut self, outcome: FlightOutcome) {
        self.end(outcome);
    }

    /// Gives up leading: the waiters fetch alone.
    pub fn abandon(self) {
        self.finish(FlightOutcome::FetchAlone);
    }

    fn end(&mut self, outcome: FlightOutcome) {
        if let Some(slot) = self.slot.take() {
            self.coalescer.flights.remove(&self.key);
            *slot.outcome.lock().unwrap_or_else(PoisonError::into_inner) = Some(outcome);
            slot.ended.notify_waiters();
        }
    }
}

impl Drop for Flight {
    fn drop(&mut self) {
        self.end(FlightOutcome::FetchAlone);
    }
}

/// Waits for the flight's outcome; a leader that vanished counts as `FetchAlone` (its `Flight`'s
/// drop ends the flight so).
pub async fn wait(slot: Arc<Slot>) -> FlightOutcome {
    loop {
        // Registered before the look, so that an outcome set between the two still wakes it.
        let ended = slot.ended.notified();
        let mut ended = std::pin::pin!(ended);
        ended.as_mut().enable();
        if let Some(outcome) = slot.outcome() {
            return outcome;
        }
        ended.await;
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use bytes::Bytes;
    use http::{HeaderMap, StatusCode};

    use super::*;
    use crate::cache::StoredResponse;

    #[tokio::test]
    async fn followers_get_the_leaders_outcome_and_the_key_is_released() {
        let coalescer = Arc::new(Coalescer::default());
        let key = CacheKey::from_string("h/a".into());
        let Role::Leader(flight) = coalescer.join(&key) else {
            panic!("first request leads")
        };
        let Role::Follower(slot) = coalescer.join(&key) else {
            panic!("second request follows")
        };
        let waiter = tokio::spawn(wait(slot));
        let now = SystemTime::now();
        let none = HeaderMap::new();
        let entry = StoredResponse::new(
            StatusCode::OK,
            HeaderMap::new(),
            Bytes::from_static(b"x"),
            &none,
            &[],
            now,
        );
        flight.finish(FlightOutcome::Response(SharedResponse::new(
            Arc::new(entry),
            false,
            None,
        )));
        let outcome = waiter.await.expect("waiter");
        assert!(matches!(outcome, FlightOutcome::Response(r) if r.entry.body == "x"));
        assert_eq!(coalescer.in_flight(), 0);
        assert!(matches!(coalescer.join(&key), Role::Leader(_)));
    }

    #[tokio::test]
    async fn dropped_leader_releases_followers() {
        let coalescer = Arc::new(Coalescer::default());
        let key = CacheKey::from_string("h/b".into());
        let leader = coalescer.join(&key);
        let Role::Follower(slot) = coalescer.join(&key) else {
            panic!("second request follows")
        };
        drop(leader);
        assert!(matches!(wait(slot).await, FlightOutcome::FetchAlone));
    }

    /// Followers on other threads, some waiting before the leader ends and some after, all get
    /// its outcome: an end between a follower's look and its wait must still wake it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn followers_on_other_threads_get_the_outcome_however_late_they_wait() {
        for round in 0..200 {
            let coalescer = Arc::new(Coalescer::default());
            let key = CacheKey::from_string(format!("h/c{round}"));
            let Role::Leader(flight) = coalescer.join(&key) else {
                panic!("first request leads")
            };
            let followers: Vec<_> = (0..6)
                .map(|_| match coalescer.join(&key) {
                    Role::Follower(slot) => tokio::spawn(wait(slot)),
                    Role::Leader(_) => panic!("later requests follow"),
                })
                .collect();
            let late = match coalescer.join(&key) {
                Role::Follower(slot) => slot,
                Role::Leader(_) => panic!("later requests follow"),
            };
            tokio::spawn(async move { flight.finish(FlightOutcome::Failed(OriginFailure::Error)) });
            for follower in followers {
                let outcome = tokio::time::timeout(std::time::Duration::from_secs(5), follower)
                    .await
                    .expect("woken")
                    .expect("follower");
                assert!(matches!(outcome, FlightOutcome::Failed(_)));
            }
            assert!(matches!(wait(late).await, FlightOutcome::Failed(_)));
        }
    }
}
