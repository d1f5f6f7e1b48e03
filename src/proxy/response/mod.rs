//! Building the client's response: from a stored entry or the origin's, its header fields (a
//! memory hit's kept as its stored block), the ranges cut from a whole body, the origin body
//! streamed through, and a body assembled from slices.

pub(crate) mod assembled;
pub(crate) mod headers;
pub(crate) mod range;
pub(crate) mod respond;
pub(crate) mod shared;
pub(crate) mod slice;
pub(crate) mod stored_head;
pub(crate) mod stream;
