//! A response shared by the requests that waited for one fetch (coalescing): the entry built from
//! the origin's answer, stored or not.

use std::sync::Arc;

use crate::cache::StoredResponse;
use crate::proxy::outcome::served::Detail;

/// A complete response the leader of a flight hands to the requests that waited for it: the entry
/// built from it (stored or not), which also says which `Vary` selection it answers.
#[derive(Debug)]
pub struct SharedResponse {
    pub entry: Arc<StoredResponse>,
    pub stored: bool,
    pub detail: Option<Detail>,
}

impl SharedResponse {
    pub fn new(entry: Arc<StoredResponse>, stored: bool, detail: Option<Detail>) -> Arc<Self> {
        Arc::new(SharedResponse {
            entry,
            stored,
            detail,
        })
    }
}
