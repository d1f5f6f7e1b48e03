//! Object paths: how a trace key becomes a request path, and back.
//!
//! The replay client sends `/obj/<key>?size=<bytes>` (or `/<key>`); the origin reads the key back.
//! Keys are arbitrary strings (numbers in most traces, URIs in access logs), so they are
//! percent-encoded: every byte outside RFC 3986's unreserved set becomes `%XX`.

use std::fmt::Write;

/// The path prefix under which the origin serves objects.
pub const OBJECT_PREFIX: &str = "/obj/";

/// How the replay client turns a key into a request path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PathMode {
    /// `/obj/<encoded key>?size=<bytes>`: the synthetic origin serves exactly that many bytes.
    #[default]
    Obj,
    /// `/<key>`: the key is the path (and query) itself, as in access logs.
    Key,
}

/// The path and query for one request.
pub fn request_path(mode: PathMode, key: &str, size: u64) -> String {
    match mode {
        PathMode::Obj => {
            let mut path = String::with_capacity(OBJECT_PREFIX.len() + key.len() + 16);
            path.push_str(OBJECT_PREFIX);
            encode_into(&mut path, key, false);
            // Writing to a String cannot fail.
            let _ = write!(path, "?size={size}");
            path
        }
        PathMode::Key if key.starts_with('/') && key.bytes().all(is_uri_byte) => key.to_owned(),
        PathMode::Key => {
            let mut path = String::with_capacity(key.len() + 1);
            if !key.starts_with('/') {
                path.push('/');
            }
            encode_into(&mut path, key, true);
            path
        }
    }
}

/// Percent-encodes `key` as one path segment.
pub fn encode_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    encode_into(&mut out, key, false);
    out
}

/// Decodes `%XX` escapes; returns None if an escape is malformed or the result is not UTF-8.
pub use crate::cache::percent_decoded as decode_key;

fn encode_into(out: &mut String, key: &str, keep_slash: bool) {
    for byte in key.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else if keep_slash && byte == b'/' {
            out.push('/');
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
}

/// Bytes that may appear unescaped in an origin-form request target (RFC 3986 `pchar`, `/`, `?`, `%`).
fn is_uri_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/?%".contains(&byte)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_survive_encoding() {
        for key in ["42", "a b/c?d=e&f", "ünï%code", "/images/x.png?w=1", ""] {
            assert_eq!(decode_key(&encode_key(key)).as_deref(), Some(key));
        }
    }

    #[test]
    fn obj_mode_path_carries_size() {
        assert_eq!(request_path(PathMode::Obj, "a/b", 10), "/obj/a%2Fb?size=10");
    }

    #[test]
    fn key_mode_keeps_uris_and_escapes_the_rest() {
        assert_eq!(
            request_path(PathMode::Key, "/img/x.png?w=1", 5),
            "/img/x.png?w=1"
        );
        assert_eq!(request_path(PathMode::Key, "12345", 5), "/12345");
        assert_eq!(request_path(PathMode::Key, "/a b", 5), "/a%20b");
    }

    #[test]
    fn malformed_escapes_are_rejected() {
        assert_eq!(decode_key("abc%2"), None);
        assert_eq!(decode_key("abc%zz"), None);
        assert_eq!(decode_key("%FF"), None);
    }
}
