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

use crate::cache::field::split_outside_quotes;

/// The field (RFC 8586 section 2).
pub(crate) const CDN_LOOP: HeaderName = HeaderName::from_static("cdn-loop");

/// The pseudonym in this proxy's entry.
const PSEUDONYM: &str = "bloomgate";

/// This process's id and the entry that carries it.
struct Own {
    /// 16 hex digits.
    id: String,
    /// `bloomgate; id=<id>`.
    entry: HeaderValue,
}

fn own() -> &'static Own {
    static OWN: OnceLock<Own> = OnceLock::new();
    OWN.get_or_init(|| {
        // RandomState is keyed from the operating system's randomness once per process.
        let id = format!("{:016x}", RandomState::new().hash_one(std::process::id()));
        let entry = HeaderValue::from_str(&format!("{PSEUDONYM}; id={id}"))
            .unwrap_or_else(|_| HeaderValue::from_static(PSEUDONYM));
        Own { id, entry }
    })
}

/// This process's entry: `bloomgate; id=` and 16 hex digits.
pub(crate) fn entry() -> &'static HeaderValue {
    &own().entry
}

/// Whether `headers` hold this process's own `CDN-Loop` entry, on any field line, anywhere in
/// the list.
pub(crate) fn came_back(headers: &HeaderMap) -> bool {
    let own_id = own().id.as_str();
    headers.get_all(&CDN_LOOP).iter().any(|line| {
        // Bytes that are not UTF-8 cannot be part of the id, and leave the rest readable.
        let text = String::from_utf8_lossy(line.as_bytes());
        split_outside_quotes(&text, b',').any(|info| names(info, own_id))
    })
}

/// Whether one `cdn-info` (`cdn-id *( OWS ";" OWS parameter )`) is this proxy's pseudonym with
/// an `id` parameter equal to `own_id`. Names compare case-insensitively, the id as sent.
fn names(info: &str, own_id: &str) -> bool {
    let mut parts = split_outside_quotes(info, b';').map(ows_trimmed);
    let Some(cdn_id) = parts.next() else {
        return false;
    };
    cdn_id.eq_ignore_ascii_case(PSEUDONYM)
        && parts.any(|parameter| {
            let Some((name, value)) = parameter.split_once('=') else {
                return false;
            };
            let value = ows_trimmed(value);
            let value = value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(value);
            ows_trimmed(name).eq_ignore_ascii_case("id") && value == own_id
        })
}

/// `text` without optional whitespace (`OWS`: spaces and tabs) around it.
fn ows_trimmed(text: &str) -> &str {
    text.trim_matches([' ', '\t'])
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
        own().id.clone()
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
}
