//! The cache: keys, stored responses with their RFC 9111 policy, and the byte-bounded store.

mod authority;
pub mod disk;
mod entry;
pub mod field;
mod key;
mod store;
pub mod weight;

pub use authority::{Authority, AuthorityError};
pub use entry::{
    Freshness, NotStored, PolicyRequest, PolicyResponse, StoredResponse, directives, owned_headers,
    policy_for, policy_request_fields, storability,
};
pub use key::{CacheKey, ClientTls, KeyError, keyed_query, scheme};
pub use store::{Evicted, EvictionListener, Proof, Store, StoreCounters, Usage, Variants};
