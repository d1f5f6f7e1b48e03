//! The cache: keys, stored responses with the RFC 9111 rules for storing and reusing them, and
//! the byte-bounded store.

mod authority;
pub mod control;
pub mod disk;
mod entry;
pub mod field;
pub mod freshness;
mod head;
mod key;
pub mod policy;
pub mod slice;
mod store;
pub mod tags;
mod variants;
pub mod weight;

pub use authority::{Authority, AuthorityError};
pub use control::{RequestDirectives, ResponseControl};
pub use entry::{
    Freshness, NotStored, StoredResponse, storability, varied_request_fields, vary_header_names,
};
pub use head::{Head, Value as FieldValue};
pub use key::{CacheKey, ClientTls, KeyError, keyed_query, percent_decoded, scheme};
pub use store::{Evicted, EvictionListener, Proof, Store, StoreCounters, Usage};
pub use tags::{PurgeKind, TagPurge, TagPurgeFileError, TagPurges};
pub use variants::Variants;
