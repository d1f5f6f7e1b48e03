//! One slice's body read from the origin: exactly the slice's bytes, or the error that names its
//! length or the origin's failure.

use std::ops::Range;

use bytes::Bytes;

use super::SliceError;
use crate::proxy::request::exchange::Exchange;
use crate::proxy::response::stream::{OriginStream, Prefix};

/// The body of slice `index` read whole from the origin: exactly as many bytes as `bounds` holds.
pub(super) async fn read_slice(
    exchange: &Exchange,
    body: hyper::body::Incoming,
    index: u64,
    bounds: Range<u64>,
) -> Result<Bytes, SliceError> {
    let length = bounds.end - bounds.start;
    let idle_timeout = exchange.config().origin.idle_timeout;
    let bytes = exchange.routed.series.origin_bytes.clone();
    match OriginStream::new(body, idle_timeout, None, bytes)
        .read_up_to(length)
        .await
    {
        Ok(Prefix::Whole(body)) if body.len() as u64 == length => Ok(body),
        Ok(Prefix::Whole(body)) => Err(SliceError::WrongLength {
            index,
            expected: bounds,
            got: body.len() as u64,
        }),
        Ok(Prefix::TooLarge(_)) => Err(SliceError::WrongLength {
            index,
            expected: bounds,
            got: length + 1,
        }),
        Err(error) => Err(SliceError::Origin {
            index,
            failure: error.failure(),
        }),
    }
}
