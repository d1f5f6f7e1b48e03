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
#[derive(Debug)]
pub struct Variants {
    /// The fields every variant here varies on; a response that varies on others replaces them all.
    names: Box<[HeaderName]>,
    by_selection: HashMap<Selection, Arc<StoredResponse>>,
    /// Selections from oldest to newest write: the oldest goes when the cap is reached.
    order: VecDeque<Selection>,
    weight: u32,
    keep_for: Duration,
}

type Selection = Box<[Option<HeaderValue>]>;

/// What the variants of a key cost beside their responses' own weight: their struct, with their
/// `Vary` names, and their selections' map and order (two copies of each selection, whose values
/// share their buffers). Measured in `tests/memory`.
fn bookkeeping(names: &[HeaderName], selections: &[Selection]) -> usize {
    let variants = size_of::<Variants>() + 16 + weight::allocation(size_of_val(names));
    // hashbrown's table of at least 4 buckets with 16 control bytes more; a deque of at least 4.
    let count = selections.len();
    let buckets = (count * 8 / 7).next_power_of_two().max(4);
    let map = weight::allocation(buckets * (size_of::<(Selection, usize)>() + 1) + 16);
    let order = weight::allocation(count.next_power_of_two().max(4) * size_of::<Selection>());
    let copies: usize = selections
        .iter()
        .map(|selection| {
            2 * weight::allocation(size_of_val(&**selection))
                + weight::SHARED * selection.iter().flatten().count()
        })
        .sum();
    variants + map + order + copies
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
        let names = response.vary_names.clone();
        let mut by_selection = HashMap::new();
        let mut order = VecDeque::new();
        if let Some(existing) = existing.filter(|e| e.names == names) {
            for selection in &existing.order {
                if *selection != response.vary_selection
                    && let Some(variant) = existing.by_selection.get(selection)
                {
                    order.push_back(selection.clone());
                    by_selection.insert(selection.clone(), Arc::clone(variant));
                }
            }
        }
        while order.len() >= cap.max(1) {
            if let Some(oldest) = order.pop_front() {
                by_selection.remove(&oldest);
            }
        }
        order.push_back(response.vary_selection.clone());
        by_selection.insert(response.vary_selection.clone(), response);
        let now = SystemTime::now();
        let bookkeeping =
            key_bookkeeping(order.len()) + bookkeeping(&names, order.make_contiguous());
        let weight = by_selection
            .values()
            .fold(u32::try_from(bookkeeping).unwrap_or(u32::MAX), |sum, v| {
                sum.saturating_add(v.weight)
            });
        let keep_for = by_selection
            .values()
            .map(|v| v.keep_for(now))
            .max()
            .unwrap_or_default();
        Variants {
            names,
            by_selection,
            order,
            weight,
            keep_for,
        }
    }

    /// The variant stored for a request with these headers, if any.
    pub fn select(&self, request_headers: &HeaderMap) -> Option<&Arc<StoredResponse>> {
        self.by_selection
            .get(&field::selection(request_headers, &self.names))
    }

    /// Bytes the variants cost the store.
    pub fn weight(&self) -> u32 {
        self.weight
    }

    /// Every variant, oldest write first.
    pub fn responses(&self) -> impl Iterator<Item = &Arc<StoredResponse>> {
        self.order
            .iter()
            .filter_map(|selection| self.by_selection.get(selection))
    }

    /// How many variants are stored.
    pub fn len(&self) -> usize {
        self.by_selection.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_selection.is_empty()
    }

    /// How long the longest-lived variant can still be served (freshness plus the stale windows),
    /// from when they were written.
    pub(super) fn keep_for(&self) -> Duration {
        self.keep_for
    }

    /// The body bytes of all variants.
    pub(super) fn body_bytes(&self) -> u64 {
        self.by_selection
            .values()
            .map(|v| v.body.len() as u64)
            .sum()
    }
}
