//! bloomgate's own HTTP/1.1 server path for client connections: the request head parser and the
//! chunked body decoder (a security boundary, fuzzed against hyper's), and the connection that
//! serves with them, reading request bodies and writing responses.

mod body;
pub mod chunked;
pub mod parse;

pub(crate) mod conn;
mod send;
pub(crate) mod write;
