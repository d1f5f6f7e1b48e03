//! Request coalescing: one origin fetch per cache key in flight; later requests wait for its result.

use std::sync::Arc;

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use tokio::sync::watch;

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

type Slot = watch::Receiver<Option<FlightOutcome>>;

/// The fetches in flight, by cache key.
#[derive(Default)]
pub struct Coalescer {
    flights: DashMap<CacheKey, Slot>,
}

/// The role a request takes for its key.
pub enum Role {
    Leader(Flight),
    Follower(Slot),
}

impl Coalescer {
    /// Joins the flight for `key`, or starts one and leads it.
    pub fn join(self: &Arc<Self>, key: &CacheKey) -> Role {
        match self.flights.entry(key.clone()) {
            Entry::Occupied(entry) => Role::Follower(entry.get().clone()),
            Entry::Vacant(entry) => {
                let (sender, receiver) = watch::channel(None);
                entry.insert(receiver);
                Role::Leader(Flight {
                    coalescer: Arc::clone(self),
                    key: key.clone(),
                    sender: Some(sender),
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
    sender: Option<watch::Sender<Option<FlightOutcome>>>,
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
        if let Some(sender) = self.sender.take() {
            self.coalescer.flights.remove(&self.key);
            sender.send_replace(Some(outcome));
        }
    }
}

impl Drop for Flight {
    fn drop(&mut self) {
        self.end(FlightOutcome::FetchAlone);
    }
}

/// Waits for the flight's outcome; a leader that vanished counts as `FetchAlone`.
pub async fn wait(mut slot: Slot) -> FlightOutcome {
    match slot.wait_for(Option::is_some).await {
        Ok(outcome) => outcome.clone().unwrap_or(FlightOutcome::FetchAlone),
        Err(_) => FlightOutcome::FetchAlone,
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
}
