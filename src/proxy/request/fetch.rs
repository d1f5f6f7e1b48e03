//! The coalesce and origin phases: a miss is fetched from the origin once per key in flight (the
//! requests that wait for it get its outcome); the stale entry it revalidates is refreshed by a
//! 304 or served when the origin fails; any other answer goes on to the response phase.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use http::header::{self, HeaderMap, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;

use super::Step;
use crate::cache::policy as cache_policy;
use crate::cache::{Freshness, StoredResponse};
use crate::proxy::Proxy;
use crate::proxy::outcome::served::{Fwd, OriginHead, Served, Tier};
use crate::proxy::request::coalesce::{self, Flight, FlightOutcome, Role, SharedResponse};
use crate::proxy::request::exchange::Exchange;
use crate::proxy::response::headers::strip_hop_by_hop;
use crate::proxy::response::respond::{self, Answer};
use crate::proxy::upstream::origin::{OriginError, OriginFailure};

/// A miss on its way to the origin: the request, why it went forward, the stale entry it may
/// revalidate, and the flight it leads when it leads one (the requests waiting on it get what it
/// fetches).
pub(crate) struct Fetch {
    pub exchange: Exchange,
    pub fwd: Fwd,
    pub stale: Option<Arc<StoredResponse>>,
    pub flight: Option<Flight>,
}

impl Fetch {
    /// A fetch for `exchange`, which went forward for `fwd`, revalidating `stale` if given.
    pub fn new(exchange: Exchange, fwd: Fwd, stale: Option<Arc<StoredResponse>>) -> Fetch {
        Fetch {
            exchange,
            fwd,
            stale,
            flight: None,
        }
    }

    /// Asks the origin for the object, with the stale entry's validators when `conditional`, and
    /// for only `range` of it when given (the first slice of an object not known yet).
    pub(super) async fn send(
        &self,
        conditional: bool,
        range: Option<&HeaderValue>,
    ) -> Result<Response<Incoming>, OriginError> {
        let stale = self.stale.as_deref().filter(|_| conditional);
        let exchange = &self.exchange;
        exchange
            .live
            .origin
            .send_idempotent(&exchange.routed.group, exchange.key.as_str(), |server| {
                let mut request = exchange.fetch_request(stale, server);
                if let Some(range) = range {
                    request.headers_mut().insert(header::RANGE, range.clone());
                }
                request
            })
            .await
    }

    /// Gives up leading the flight, if this fetch leads one: its waiters fetch alone.
    pub fn abandon_flight(&mut self) {
        if let Some(flight) = self.flight.take() {
            flight.abandon();
        }
    }

    /// The stale entry, served because the origin failed with `origin_status`, when
    /// `stale-if-error` allows it now; the waiters then fetch alone.
    fn stale_on_error(&mut self, origin_status: u16) -> Option<Answer> {
        let entry = self
            .stale
            .as_ref()
            .filter(|entry| entry.usable_on_error(SystemTime::now()))
            .map(Arc::clone)?;
        self.abandon_flight();
        Some(respond::stale_on_error(
            &self.exchange.parts,
            &entry,
            origin_status,
        ))
    }

    /// Ends the fetch on the origin's `failure`: the waiters fail alike, and the client gets the
    /// proxy's 502 or 504.
    pub fn fail(self, failure: OriginFailure) -> Answer {
        if let Some(flight) = self.flight {
            flight.finish(FlightOutcome::Failed(failure));
        }
        respond::origin_failed(failure, self.fwd)
    }
}

impl Proxy {
    /// The coalesce phase: one fetch per key in flight. The first request leads and goes to the
    /// origin; the others wait for its response and use it when it answers them too.
    pub(super) async fn coalesce(self: &Arc<Self>, mut fetch: Fetch) -> Step {
        let slot = match self.flights.join(&fetch.exchange.key) {
            Role::Leader(flight) => {
                fetch.flight = Some(flight);
                return Step::Origin(fetch);
            }
            Role::Follower(slot) => slot,
        };
        // A leader whose client reads slowly must not hold its waiters for long.
        let origin = &fetch.exchange.config().origin;
        let patience = origin.first_byte_timeout + origin.idle_timeout;
        let outcome = tokio::time::timeout(patience, coalesce::wait(slot))
            .await
            .unwrap_or(FlightOutcome::FetchAlone);
        let gave_up = matches!(outcome, FlightOutcome::FetchAlone);
        if let Some(answer) = self.follow(&mut fetch, outcome) {
            return Step::Done(answer);
        }
        // The leader found nothing to cut a range from (too large, not storable, or cut short):
        // the origin answers this range rather than a second whole fetch, unless the leader
        // found the object sliced (its slices answer the range).
        if gave_up
            && fetch.exchange.asks_for_range()
            && self.sliced_object(&fetch.exchange).is_none()
        {
            return Step::PassRange(fetch.exchange, None);
        }
        Step::Origin(fetch)
    }

    /// A waiting request's answer from its leader's outcome, or `None` to fetch alone.
    fn follow(&self, fetch: &mut Fetch, outcome: FlightOutcome) -> Option<Answer> {
        let parts = &fetch.exchange.parts;
        match outcome {
            FlightOutcome::Response(shared) if shared.entry.vary_matches(&parts.headers) => {
                if shared.stored {
                    // A second request for the object, as a hit would be: a first copy waiting
                    // in probation has proved itself.
                    self.store.touch(&fetch.exchange.key);
                }
                let served = Served::Collapsed {
                    fwd: fetch.fwd,
                    stored: shared.stored,
                    detail: shared.detail,
                };
                Some(respond::shared(parts, &shared, served))
            }
            FlightOutcome::Failed(failure) => {
                let answer = fetch.stale_on_error(failure.status().as_u16());
                answer.or_else(|| {
                    let served = Served::Collapsed {
                        fwd: fetch.fwd,
                        stored: false,
                        detail: Some(failure.into()),
                    };
                    Some(respond::short(failure.status(), failure.body(), served))
                })
            }
            // The leader's response was for another variant, or it gave up, or the wait ran out:
            // its fetch may have stored what this request needs.
            FlightOutcome::Response(_) | FlightOutcome::FetchAlone => {
                let entry = self
                    .store
                    .get(&fetch.exchange.key)
                    .and_then(|v| v.select(&parts.headers).cloned())?;
                let entry = self.unless_purged(&fetch.exchange, entry)?;
                let now = SystemTime::now();
                match entry.freshness(&parts.headers, now) {
                    Freshness::Fresh => Some(respond::hit(
                        parts,
                        &entry,
                        Tier::Ram,
                        fetch.exchange.stored_heads,
                        now,
                    )),
                    Freshness::StaleWhileRevalidate
                    | Freshness::Stale
                    | Freshness::RefusedByRequest => None,
                }
            }
        }
    }

    /// The origin phase: the fetch sent. A 304 refreshes the stale entry; a failure serves the
    /// stale entry where `stale-if-error` allows; anything else goes on to the response phase. On
    /// a route that slices, an object not known yet is asked for its first slice only
    /// (`slices/first.rs`), and one known sliced meanwhile goes to the slices phase.
    pub(super) async fn ask_origin(&self, mut fetch: Fetch) -> Step {
        if let Some(object) = self.sliced_object(&fetch.exchange) {
            // Learnt sliced by the fetch this one waited on.
            fetch.abandon_flight();
            return Step::Slices(fetch.exchange, object, None);
        }
        let asked = Instant::now();
        let mut conditional = fetch.stale.is_some();
        let first_slice = self.first_slice_range(&fetch);
        if first_slice.is_some()
            && let Some(object) = self.sliced_from_first_slice(&fetch.exchange).await
        {
            fetch.abandon_flight();
            return Step::Slices(fetch.exchange, object, None);
        }
        let first_range = first_slice.as_ref().map(|(_, range)| range);
        let mut sent = fetch.send(conditional, first_range).await;
        if let (Ok(response), Some(entry)) = (&sent, &fetch.stale)
            && response.status() == StatusCode::NOT_MODIFIED
        {
            let origin = OriginHead::of(response, asked);
            let not_modified = response.headers();
            if let Some(answer) = self.not_modified(
                &fetch.exchange,
                fetch.fwd,
                entry,
                not_modified,
                origin,
                &mut fetch.flight,
            ) {
                return Step::Done(answer);
            }
            // A 304 about nothing stored must not be used for this request: ask again without
            // the condition (RFC 9111 section 4.3.4).
            let key = &fetch.exchange.key;
            tracing::debug!(%key, "304 matches no stored response; fetching whole");
            conditional = false;
            sent = fetch.send(conditional, None).await;
        }
        let response = match sent {
            Ok(response) => response,
            Err(error) => {
                tracing::warn!(%error, key = %fetch.exchange.key, "origin request failed");
                let failure = error.failure();
                let answer = match fetch.stale_on_error(failure.status().as_u16()) {
                    Some(answer) => answer,
                    None => fetch.fail(failure),
                };
                return Step::Done(answer);
            }
        };
        let origin = OriginHead::of(&response, asked);
        if let Some((index, _)) = first_slice {
            return self.first_contact(fetch, response, origin, index).await;
        }
        if response.status() == StatusCode::NOT_MODIFIED && !conditional {
            // A 304 to a request without a condition stands for nothing: the client never asked
            // for one, and nothing can be stored from it.
            let key = &fetch.exchange.key;
            tracing::warn!(%key, "origin answered 304 to an unconditional request");
            return Step::Done(fetch.fail(OriginFailure::Error).answered_by(origin));
        }
        if response.status().is_server_error()
            && let Some(answer) = fetch.stale_on_error(response.status().as_u16())
        {
            return Step::Done(answer.answered_by(origin));
        }
        Step::Response(fetch, response, origin)
    }

    /// The answer from a stale entry the origin's 304 is about: the entry refreshed with the 304's
    /// fields and served, and the requests waiting on the flight answered with it. `None` when
    /// the 304 names no stored response (its validators match none).
    fn not_modified(
        &self,
        exchange: &Exchange,
        fwd: Fwd,
        entry: &StoredResponse,
        not_modified: &HeaderMap,
        origin: OriginHead,
        flight: &mut Option<Flight>,
    ) -> Option<Answer> {
        let only_stored = self
            .store
            .peek(&exchange.key)
            .is_none_or(|variants| variants.len() <= 1);
        if !entry.validated_by(not_modified, only_stored) {
            return None;
        }
        let refreshed = self.refresh(exchange, entry, not_modified);
        if let Some(flight) = flight.take() {
            let shared = SharedResponse::new(Arc::clone(&refreshed), true, None);
            flight.finish(FlightOutcome::Response(shared));
        }
        let now = SystemTime::now();
        let served = Served::Revalidated {
            fwd,
            ttl: refreshed.ttl_seconds(now),
        };
        Some(respond::stored(&exchange.parts, &refreshed, served, now).answered_by(origin))
    }

    /// Applies a 304 from the origin to the stored entry: new headers, the same body, in RAM and
    /// on disk.
    fn refresh(
        &self,
        exchange: &Exchange,
        entry: &StoredResponse,
        not_modified: &HeaderMap,
    ) -> Arc<StoredResponse> {
        let mut not_modified = not_modified.clone();
        strip_hop_by_hop(&mut not_modified);
        // The refreshed entry is served to every client: one client's cookie in a 304 must not
        // become part of it (a stored response never carries `Set-Cookie`, RFC 9111 section 3
        // as `storability` applies it), and the route's policy reads the 304's fields as it read
        // the response's.
        not_modified.remove(http::header::SET_COOKIE);
        cache_policy::prepare_response(&exchange.routed.policy, &mut not_modified);
        let refreshed = entry.refreshed(
            &not_modified,
            &exchange.parts.headers,
            &exchange.config().cache.targeted_fields,
            &exchange.routed.policy,
            SystemTime::now(),
        );
        let refreshed = self.store.refresh(exchange.key.clone(), refreshed);
        if let Some(disk) = &self.disk
            && let Some(variants) = self.store.peek(&exchange.key)
        {
            disk.refreshed(&exchange.key, variants);
        }
        refreshed
    }

    /// Serves a stale entry right away and refreshes it in the background, once per key.
    pub(crate) fn revalidate_in_background(
        self: &Arc<Self>,
        exchange: &Exchange,
        entry: &Arc<StoredResponse>,
    ) {
        let Role::Leader(flight) = self.flights.join(&exchange.key) else {
            return;
        };
        let proxy = Arc::clone(self);
        let fetch = Fetch {
            exchange: exchange.detached(),
            fwd: Fwd::Stale,
            stale: Some(Arc::clone(entry)),
            flight: Some(flight),
        };
        tokio::spawn(async move {
            let answer = proxy.drive(Step::Origin(fetch)).await;
            let _ = answer.response.into_body().collect().await;
        });
    }
}
