//! Loop detection with `CDN-Loop` (RFC 8586): every request this process sends to an origin
//! carries `CDN-Loop: bloomgate; id=<this process>`, and a request that arrives already carrying
//! this process's entry has come back to it (an origin, or a load balancer in front of one, that
//! points at the proxy). It is answered `508 Loop Detected` at once: forwarded, it would go round
//! until a limit gave out, and as a cache miss it would wait on the coalesced fetch that is
//! itself.
//!
//! The id is drawn once per process, so that bloomgate in front of bloomgate (a parent tier, the
//! same pseudonym) is not a loop, and so that a client cannot guess it (only origins see it).
//! `Via` is not used for this: its received-by names a protocol and a pseudonym that every
//! bloomgate shares. A client can list `CDN-Loop` in `Connection` to drop what came before the
//! proxy, but not the entry the proxy adds when it forwards.

use std::hash::{BuildHasher, RandomState};
use std::sync::OnceLock;

use http::{HeaderMap, HeaderName, HeaderValue};

/// The field (RFC 8586 section 2).
pub(crate) const CDN_LOOP: HeaderName = HeaderName::from_static("cdn-loop");

/// The pseudonym in this proxy's entry.
const PSEUDONYM: &str = "bloomgate";

/// This process's entry: `bloomgate; id=` and 16 hex digits.
pub(crate) fn entry() -> &'static HeaderValue {
    static ENTRY: OnceLock<HeaderValue> = OnceLock::new();
    ENTRY.get_or_init(|| {
        // RandomState is keyed from the operating system's randomness once per process.
        let id = RandomState::new().hash_one(std::process::id());
        HeaderValue::from_str(&format!("{PSEUDONYM}; id={id:016x}"))
            .unwrap_or_else(|_| HeaderValue::from_static(PSEUDONYM))
    })
}

/// Whether `headers` hold this process's own `CDN-Loop` entry, on any field line, anywhere in
/// the list.
pub(crate) fn came_back(headers: &HeaderMap) -> bool {
    let Ok(own) = entry().to_str() else {
        return false;
    };
    let own_id = own.rsplit('=').next().unwrap_or_default();
    headers
        .get_all(&CDN_LOOP)
        .iter()
        .flat_map(|line| split_outside_quotes(line.as_bytes(), b','))
        .any(|info| names(info, own_id))
}

/// Whether one `cdn-info` (`cdn-id *( OWS ";" OWS parameter )`) is this proxy's pseudonym with
/// an `id` parameter equal to `own_id`. Names compare case-insensitively, the id as sent.
fn names(info: &[u8], own_id: &str) -> bool {
    let mut parts = split_outside_quotes(info, b';').map(trim);
    let Some(cdn_id) = parts.next() else {
        return false;
    };
    cdn_id.eq_ignore_ascii_case(PSEUDONYM.as_bytes())
        && parts.any(|parameter| {
            let Some(equals) = parameter.iter().position(|&b| b == b'=') else {
                return false;
            };
            let (name, value) = (trim(&parameter[..equals]), trim(&parameter[equals + 1..]));
            let value = value
                .strip_prefix(b"\"")
                .and_then(|v| v.strip_suffix(b"\""))
                .unwrap_or(value);
            name.eq_ignore_ascii_case(b"id") && value == own_id.as_bytes()
        })
}

/// `bytes` cut at each `delimiter` that is not inside a quoted-string (RFC 9110 section 5.6.4;
/// a backslash inside quotes escapes the next byte).
fn split_outside_quotes(bytes: &[u8], delimiter: u8) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(bytes);
    std::iter::from_fn(move || {
        let text = rest?;
        let (mut quoted, mut escaped) = (false, false);
        for (at, &byte) in text.iter().enumerate() {
            match byte {
                _ if escaped => escaped = false,
                b'\\' if quoted => escaped = true,
                b'"' => quoted = !quoted,
                _ if byte == delimiter && !quoted => {
                    rest = Some(&text[at + 1..]);
                    return Some(&text[..at]);
                }
                _ => {}
            }
        }
        rest = None;
        Some(text)
    })
}

fn trim(bytes: &[u8]) -> &[u8] {
    bytes.trim_ascii()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(lines: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for line in lines {
            headers.append(CDN_LOOP, HeaderValue::from_str(line).unwrap());
        }
        headers
    }

    fn own_id() -> String {
        entry()
            .to_str()
            .unwrap()
            .rsplit('=')
            .next()
            .unwrap()
            .to_owned()
    }

    #[test]
    fn the_entry_is_a_pseudonym_with_a_16_digit_id() {
        let entry = entry().to_str().unwrap();
        assert!(entry.starts_with("bloomgate; id="), "{entry}");
        assert_eq!(own_id().len(), 16);
        assert!(own_id().bytes().all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn its_own_entry_is_found_on_any_line_and_in_any_place() {
        let id = own_id();
        assert!(came_back(&with(&[entry().to_str().unwrap()])));
        assert!(came_back(&with(&[&format!(
            "cdn.example; a=\"x, y; id={id}\", BloomGate ;ID={id} ; v=1"
        )])));
        assert!(came_back(&with(&[
            "other",
            &format!("bloomgate; id=\"{id}\"")
        ])));
    }

    #[test]
    fn another_proxy_or_another_bloomgate_is_not_a_loop() {
        let id = own_id();
        let other_id = if id == "0000000000000000" {
            "0000000000000001"
        } else {
            "0000000000000000"
        };
        assert!(!came_back(&HeaderMap::new()));
        assert!(!came_back(&with(&[&format!("bloomgate; id={other_id}")])));
        // The id inside another parameter's quoted value, or under another CDN's name.
        assert!(!came_back(&with(&[&format!(
            "bloomgate; note=\"id={id}\""
        )])));
        assert!(!came_back(&with(&[&format!("cdn.example; id={id}")])));
        assert!(!came_back(&with(&[&format!("bloomgate; id={id}0")])));
        assert!(!came_back(&with(&[
            "bloomgate",
            "bloomgate;",
            "\"unterminated"
        ])));
    }

    #[test]
    fn splitting_skips_delimiters_in_quoted_strings() {
        let parts: Vec<&[u8]> = split_outside_quotes(br#"a, "b, \"c, d", e"#, b',').collect();
        assert_eq!(parts, [&b"a"[..], br#" "b, \"c, d""#, b" e"]);
    }
}
