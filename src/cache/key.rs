//! Cache key: which parts of a request name a stored object.

use std::borrow::Cow;
use std::sync::Arc;

use http::request::Parts;

use super::authority::{Authority, AuthorityError};
use crate::config::CacheKeyConfig;

/// A request extension the listener sets on every request that came over TLS.
///
/// The scheme in a cache key is the connection's, never the request's own claim: a client can send
/// `GET https://site/ HTTP/1.1` (absolute form) or an HTTP/2 `:scheme` of `https` over plain TCP,
/// and must not reach or fill the entries of HTTPS clients that way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientTls;

/// `https` for a request that came over TLS, `http` otherwise.
pub fn scheme(parts: &Parts) -> &'static str {
    match parts.extensions.get::<ClientTls>() {
        Some(ClientTls) => "https",
        None => "http",
    }
}

/// The primary cache key of a request: `[scheme://]host/path[?query]`, normalised by the configuration.
///
/// Two requests with the same key share one stored object (per `Vary` variant). Shared, not copied:
/// the store's index and its eviction queue hold the same key.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CacheKey(Arc<str>);

/// Why a request has no cache key; each is answered with 400.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error(transparent)]
    Authority(#[from] AuthorityError),
    /// Only origin-form (`/path`) and absolute-form targets name an object (RFC 9112 section 3.2).
    #[error("request target is not a path")]
    Target,
}

impl CacheKey {
    /// Builds the key of a request from its validated authority, path and query.
    ///
    /// The authority comes from [`Authority::of_request`]. The key is unambiguous: a valid
    /// authority holds no `/`, a path starts with `/` and holds no `?`, so no two different
    /// (scheme, host, path, query) tuples give the same key unless the configuration asks for it
    /// (query sorting and dropped parameters).
    pub fn from_request(parts: &Parts, config: &CacheKeyConfig) -> Result<CacheKey, KeyError> {
        let authority = Authority::of_request(parts)?;
        let query = keyed_query(parts.uri.query(), config);
        CacheKey::for_target(&authority, parts, query.as_deref(), config)
    }

    /// The key of a request whose authority and keyed query ([`keyed_query`]) are already known.
    pub fn for_target(
        authority: &Authority,
        parts: &Parts,
        keyed_query: Option<&str>,
        config: &CacheKeyConfig,
    ) -> Result<CacheKey, KeyError> {
        let path = parts.uri.path();
        if !path.starts_with('/') {
            return Err(KeyError::Target);
        }
        let host = authority.as_str();
        let mut key = String::with_capacity(host.len() + path.len() + 16);
        if config.include_scheme {
            key.push_str(scheme(parts));
            key.push_str("://");
        }
        if config.include_host {
            key.push_str(host);
        }
        key.push_str(path);
        if let Some(query) = keyed_query {
            key.push('?');
            key.push_str(query);
        }
        keyed_fields(&mut key, parts, config);
        Ok(CacheKey(key.into()))
    }

    /// A key taken as it is written, without the normalisation of [`Self::from_request`]: for
    /// tests (PURGE builds its key with `from_request`, like the request it removes).
    #[cfg(test)]
    pub(crate) fn from_string(key: String) -> CacheKey {
        CacheKey(key.into())
    }

    /// This key with `suffix` appended: the key of a part of its object (see
    /// [`super::slice::slice_key`]).
    pub(crate) fn with_suffix(&self, suffix: std::fmt::Arguments<'_>) -> CacheKey {
        CacheKey(format!("{}{suffix}", self.0).into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl std::fmt::Display for CacheKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The query as the key names it: without the dropped parameters, sorted if configured, `None`
/// when the key leaves the query out or nothing is left of it. A cacheable request is forwarded
/// with this query too, so the origin's answer can never depend on a part of the target that the
/// key ignores.
pub fn keyed_query<'q>(query: Option<&'q str>, config: &CacheKeyConfig) -> Option<Cow<'q, str>> {
    let query = query.filter(|q| config.include_query && !q.is_empty())?;
    if !config.sort_query
        && config.drop_query_params.is_empty()
        && config.keep_query_params.is_empty()
    {
        return Some(Cow::Borrowed(query));
    }
    let kept = |param: &&str| {
        let name = param.split('=').next().unwrap_or(param);
        !config.drop_query_params.iter().any(|drop| drop == name)
            && (config.keep_query_params.is_empty()
                || config.keep_query_params.iter().any(|keep| keep == name))
    };
    // Most requests carry no parameter a rule removes and come in order: their query is the
    // key's as it is, with no copy (each request would otherwise pay for a new string and a new
    // target to the origin).
    let mut previous = "";
    let unchanged = query.split('&').all(|param| {
        let in_order = !config.sort_query || previous <= param;
        previous = param;
        !param.is_empty() && in_order && kept(&param)
    });
    if unchanged {
        return Some(Cow::Borrowed(query));
    }
    let mut params: Vec<&str> = query
        .split('&')
        .filter(|param| !param.is_empty())
        .filter(kept)
        .collect();
    if config.sort_query {
        params.sort_unstable();
    }
    (!params.is_empty()).then(|| Cow::Owned(params.join("&")))
}

/// Appends the request fields and cookies `config` keys on, each after a unit separator (a byte
/// no request target, field value or cookie holds, so no value can pose as another part). Values
/// are written with `%` and every byte outside printable ASCII percent-encoded: two different
/// values never make one key.
fn keyed_fields(key: &mut String, parts: &Parts, config: &CacheKeyConfig) {
    for name in &config.headers {
        let mut values = parts.headers.get_all(name).iter().peekable();
        if values.peek().is_none() {
            continue;
        }
        key.push_str("\x1fh:");
        key.push_str(name.as_str());
        key.push('=');
        for (index, value) in values.enumerate() {
            if index > 0 {
                key.push_str(", ");
            }
            push_encoded(key, value.as_bytes());
        }
    }
    for name in &config.cookies {
        if let Some(value) = super::policy::cookie(&parts.headers, name) {
            key.push_str("\x1fc:");
            key.push_str(name);
            key.push('=');
            push_encoded(key, value);
        }
    }
}

/// Decodes `%XX` escapes (a `+` stays a `+`); `None` if an escape is malformed or the result is
/// not UTF-8.
pub fn percent_decoded(encoded: &str) -> Option<String> {
    let bytes = encoded.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn push_encoded(key: &mut String, bytes: &[u8]) {
    for &byte in bytes {
        match byte {
            b' '..=b'~' if byte != b'%' => key.push(char::from(byte)),
            _ => key.push_str(&format!("%{byte:02X}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn config() -> CacheKeyConfig {
        CacheKeyConfig {
            include_scheme: false,
            include_host: true,
            include_query: true,
            sort_query: false,
            drop_query_params: Vec::new(),
            keep_query_params: Vec::new(),
            headers: Vec::new(),
            cookies: Vec::new(),
            normalize_accept_encoding: false,
        }
    }

    fn key(target: &str, host: Option<&str>, config: &CacheKeyConfig) -> Option<String> {
        let mut builder = http::Request::builder().uri(target);
        if let Some(host) = host {
            builder = builder.header("host", host);
        }
        let (parts, ()) = builder.body(()).expect("valid request").into_parts();
        CacheKey::from_request(&parts, config)
            .ok()
            .map(|k| k.0.to_string())
    }

    #[test]
    fn host_is_lower_cased_and_query_kept() {
        assert_eq!(
            key("/a.jpg?x=1", Some("Example.COM"), &config()).as_deref(),
            Some("example.com/a.jpg?x=1")
        );
    }

    #[test]
    fn absolute_form_target_names_its_own_host() {
        assert_eq!(
            key("http://other.test/a", Some("example.com"), &config()).as_deref(),
            Some("other.test/a")
        );
    }

    #[test]
    fn request_without_host_has_no_key() {
        assert_eq!(key("/a", None, &config()), None);
    }

    #[test]
    fn a_url_is_percent_decoded_and_a_bad_escape_refused() {
        assert_eq!(
            percent_decoded("http%3A%2F%2Fa.example%2Fp%3Fq%3D1%26page%3D2").as_deref(),
            Some("http://a.example/p?q=1&page=2")
        );
        assert_eq!(percent_decoded("a%2").as_deref(), None);
        assert_eq!(percent_decoded("a%zz").as_deref(), None);
    }

    #[test]
    fn query_can_be_sorted_and_filtered() {
        let mut config = config();
        config.sort_query = true;
        config.drop_query_params = vec!["utm_source".into()];
        assert_eq!(
            key("/a?b=2&utm_source=x&a=1", Some("h"), &config).as_deref(),
            Some("h/a?a=1&b=2")
        );
        config.include_query = false;
        assert_eq!(key("/a?b=2", Some("h"), &config).as_deref(), Some("h/a"));
    }

    proptest::proptest! {
        /// A query no rule changes is the key's as it is (no copy), and any query keys as the
        /// rules say: filtered, then sorted, then joined.
        #[test]
        fn a_query_keys_as_its_rules_say_copied_only_when_they_change_it(
            params in proptest::collection::vec("[abu]{0,2}(=[0-9]{0,1})?", 0..5),
            sort in proptest::bool::ANY,
            drop in proptest::bool::ANY,
            keep in proptest::bool::ANY,
        ) {
            let mut config = config();
            config.sort_query = sort;
            if drop {
                config.drop_query_params = vec!["u".into()];
            }
            if keep {
                config.keep_query_params = vec!["a".into(), "b".into(), "ab".into()];
            }
            let query = params.join("&");
            let mut expected: Vec<&str> = query
                .split('&')
                .filter(|p| !p.is_empty())
                .filter(|p| {
                    let name = p.split('=').next().unwrap_or(p);
                    !config.drop_query_params.iter().any(|d| d == name)
                        && (config.keep_query_params.is_empty()
                            || config.keep_query_params.iter().any(|k| k == name))
                })
                .collect();
            if sort {
                expected.sort_unstable();
            }
            // With no rule at all the query is keyed verbatim, empty parameters and all.
            let expected = match sort || drop || keep {
                true => (!expected.is_empty()).then(|| expected.join("&")),
                false => Some(query.clone()),
            };
            let keyed = keyed_query(Some(&query), &config);
            proptest::prop_assert_eq!(keyed.as_deref(), expected.as_deref().filter(|_| !query.is_empty()));
            if let (Some(Cow::Borrowed(_)), Some(expected)) = (&keyed, &expected) {
                proptest::prop_assert_eq!(expected, &query);
            }
        }
    }
}

#[cfg(test)]
mod uniqueness {
    use proptest::prelude::*;

    use super::*;

    fn parts(host: &str, target: &str) -> Option<Parts> {
        let request = http::Request::builder()
            .uri(target)
            .header("host", host)
            .body(())
            .ok()?;
        Some(request.into_parts().0)
    }

    proptest! {
        /// No two different (host, path, query) triples share a key: a valid host holds no `/`, a
        /// path starts with `/` and holds no `?`.
        #[test]
        fn different_requests_never_share_a_key(
            hosts in proptest::collection::vec("[a-z0-9./?#@:%-]{1,8}", 2),
            paths in proptest::collection::vec("/[a-z/.%?]{0,8}", 2),
            queries in proptest::collection::vec(proptest::option::of("[a-z=&/?]{0,6}"), 2),
        ) {
            let config = super::tests::config();
            let mut seen = Vec::new();
            for i in 0..2 {
                let target = match &queries[i] {
                    Some(query) => format!("{}?{query}", paths[i]),
                    None => paths[i].clone(),
                };
                let Some(parts) = parts(&hosts[i], &target) else { continue };
                if let Ok(key) = CacheKey::from_request(&parts, &config) {
                    let authority = Authority::of_request(&parts).map(|a| a.as_str().to_owned());
                    let triple = (authority.ok(), parts.uri.path().to_owned(), parts.uri.query().map(str::to_owned));
                    seen.push((triple, key));
                }
            }
            if let [(a, key_a), (b, key_b)] = seen.as_slice() {
                prop_assert_eq!(a == b, key_a == key_b, "{:?} {:?} -> {} {}", a, b, key_a, key_b);
            }
        }
    }

    #[test]
    fn a_host_with_a_path_in_it_has_no_key() {
        let Some(attack) = parts("victim.example/some/prefix", "/x") else {
            panic!("the request builds")
        };
        let config = super::tests::config();
        assert_eq!(
            CacheKey::from_request(&attack, &config),
            Err(KeyError::Authority(AuthorityError::Invalid))
        );
    }
}
