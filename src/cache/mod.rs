//! The cache: keys, stored responses with their RFC 9111 policy, and the byte-bounded store.

mod entry;
mod key;
mod store;

pub use entry::{
    Freshness, NotStored, PolicyRequest, PolicyResponse, StoredResponse, directives, owned_headers,
    policy_for, storability,
};
pub use key::CacheKey;
pub use store::{Store, StoreCounters, Variants};
