//! The variants stored under one cache key (one per `Vary` selection), and what they weigh.

use std::collections::{HashMap, VecDeque};
use std::mem::{size_of, size_of_val};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::header::{HeaderMap, HeaderName, HeaderValue};

use super::entry::StoredResponse;
use super::{field, weight};

/// The variants stored under one key (usually one; more when the origin sends `Vary`), indexed by
/// the request field values that select them, so a lookup costs the same with 1 or 1,000 variants.
///
/// A handle as cheap to clone as an `Arc`, kept in the store's slot itself: most keys hold one
/// variant, which then costs no allocation beyond its response.
#[derive(Clone, Debug)]
pub struct Variants(Stored);

/// One variant needs no map: its `Vary` names and selection are its own. Each holds the bytes the
/// variants cost the store: beside the tag, in two words where a struct of the enum and its weight
/// took three.
#[derive(Clone, Debug)]
enum Stored {
    One(Arc<StoredResponse>, u32),
    Many(Arc<Many>, u32),
}

#[derive(Debug)]
struct Many {
    /// The fields every variant here varies on; a response that varies on others replaces them all.
    names: Box<[HeaderName]>,
    by_selection: HashMap<Selection, Arc<StoredResponse>>,
    /// Selections from oldest to newest write: the oldest goes when the cap is reached.
    order: VecDeque<Selection>,
}

type Selection = Box<[Option<HeaderValue>]>;

/// What several variants of a key cost beside their responses' own weight (the handle is counted
/// in the key's slot; one variant costs nothing more): their `Vary` names, their selections' map
/// and order (two copies of each selection, whose values share their buffers). Measured in
/// `tests/memory`.
fn bookkeeping(many: &Many) -> usize {
    let names = weight::allocation(size_of_val(&*many.names));
    // Both made with room for their count: hashbrown's table has a power of two of buckets, at
    // most seven eighths full and at least 4, with 16 control bytes more.
    let count = many.order.len();
    let buckets = match count {
        0..4 => 4,
        4..8 => 8,
        _ => (count * 8 / 7).next_power_of_two(),
    };
    let map = weight::allocation(buckets * (size_of::<(Selection, usize)>() + 1) + 16);
    let order = weight::allocation(count * size_of::<Selection>());
    let copies: usize = many
        .order
        .iter()
        .map(|selection| {
            2 * weight::allocation(size_of_val(&**selection))
                + weight::SHARED * selection.iter().flatten().count()
        })
        .sum();
    weight::allocation(size_of::<Many>() + 16) + names + map + order + copies
}

impl Variants {
    /// The variants after writing `response`: it replaces the variant with the same selection,
    /// keeps the others while they vary on the same fields, and drops the oldest beyond `cap`.
    /// Their weight counts what the key costs the store for that many variants, as
    /// `key_bookkeeping` says.
    pub(super) fn with(
        existing: Option<&Variants>,
        response: Arc<StoredResponse>,
        cap: usize,
        key_bookkeeping: impl Fn(usize) -> usize,
    ) -> Variants {
        let kept: Vec<Arc<StoredResponse>> = existing
            .into_iter()
            .flat_map(Variants::responses)
            .filter(|kept| {
                kept.vary_names() == response.vary_names()
                    && kept.vary_selection() != response.vary_selection()
            })
            .cloned()
            .collect();
        // The newest `cap` (at least one), oldest first.
        let skip = (kept.len() + 1).saturating_sub(cap.max(1));
        let mut all: Vec<Arc<StoredResponse>> = kept.into_iter().skip(skip).collect();
        all.push(response);
        let responses = all
            .iter()
            .fold(0u32, |sum, v| sum.saturating_add(v.weight()));
        let weight = |bookkeeping: usize| {
            u32::try_from(bookkeeping)
                .unwrap_or(u32::MAX)
                .saturating_add(responses)
        };
        let key = key_bookkeeping(all.len());
        Variants(match <[_; 1]>::try_from(all) {
            Ok([one]) => Stored::One(one, weight(key)),
            Err(all) => {
                let many = Many::of(all);
                let weight = weight(key + bookkeeping(&many));
                Stored::Many(Arc::new(many), weight)
            }
        })
    }

    /// The variant stored for a request with these headers, if any.
    pub fn select(&self, request_headers: &HeaderMap) -> Option<&Arc<StoredResponse>> {
        match &self.0 {
            Stored::One(one, _) => one.vary_matches(request_headers).then_some(one),
            Stored::Many(many, _) => many
                .by_selection
                .get(&field::selection(request_headers, &many.names)),
        }
    }

    /// Bytes the variants cost the store.
    pub fn weight(&self) -> u32 {
        match self.0 {
            Stored::One(_, weight) | Stored::Many(_, weight) => weight,
        }
    }

    /// Every variant, oldest write first.
    pub fn responses(&self) -> impl Iterator<Item = &Arc<StoredResponse>> {
        let (one, many) = match &self.0 {
            Stored::One(one, _) => (Some(one), None),
            Stored::Many(many, _) => (None, Some(many)),
        };
        let many = many.into_iter().flat_map(|many| {
            many.order
                .iter()
                .filter_map(|selection| many.by_selection.get(selection))
        });
        one.into_iter().chain(many)
    }

    /// How many variants are stored.
    pub fn len(&self) -> usize {
        match &self.0 {
            Stored::One(..) => 1,
            Stored::Many(many, _) => many.by_selection.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How long the longest-lived variant can still be served (freshness plus the stale windows),
    /// from when they were written.
    pub(super) fn keep_for(&self) -> Duration {
        let now = SystemTime::now();
        self.responses()
            .map(|v| v.keep_for(now))
            .max()
            .unwrap_or_default()
    }

    /// The body bytes of all variants.
    pub(super) fn body_bytes(&self) -> u64 {
        self.responses().map(|v| v.body.len() as u64).sum()
    }
}

impl Many {
    /// The map of several variants, `all` oldest first (they vary on the same fields).
    fn of(all: Vec<Arc<StoredResponse>>) -> Many {
        let names = all
            .first()
            .map(|first| Box::from(first.vary_names()))
            .unwrap_or_default();
        let mut by_selection = HashMap::with_capacity(all.len());
        let mut order = VecDeque::with_capacity(all.len());
        for response in all {
            order.push_back(Selection::from(response.vary_selection()));
            by_selection.insert(Selection::from(response.vary_selection()), response);
        }
        Many {
            names,
            by_selection,
            order,
        }
    }
}
