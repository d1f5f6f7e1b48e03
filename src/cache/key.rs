//! Cache key: which parts of a request name a stored object.

use http::request::Parts;

use crate::config::CacheKeyConfig;

/// The primary cache key of a request: `[scheme://]host/path[?query]`, normalised by the configuration.
///
/// Two requests with the same key share one stored object (per `Vary` variant).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CacheKey(String);

impl CacheKey {
    /// Builds the key of a request, or `None` when the request names no host (an HTTP/1.1 request
    /// without `Host`), which the caller answers with 400.
    ///
    /// The host comes from the absolute-form target or the `:authority` of HTTP/2 when present, and
    /// otherwise from `Host`, lower-cased, so `Example.COM` and `example.com` are one object.
    pub fn from_request(parts: &Parts, config: &CacheKeyConfig) -> Option<CacheKey> {
        let host = match parts.uri.authority() {
            Some(authority) => authority.as_str().to_ascii_lowercase(),
            None => parts
                .headers
                .get(http::header::HOST)?
                .to_str()
                .ok()?
                .to_ascii_lowercase(),
        };
        if host.is_empty() {
            return None;
        }
        let mut key = String::with_capacity(host.len() + parts.uri.path().len() + 16);
        if config.include_scheme {
            key.push_str(parts.uri.scheme_str().unwrap_or("http"));
            key.push_str("://");
        }
        if config.include_host {
            key.push_str(&host);
        }
        key.push_str(parts.uri.path());
        if config.include_query
            && let Some(query) = parts.uri.query()
        {
            push_query(&mut key, query, config);
        }
        Some(CacheKey(key))
    }

    /// A key taken as it is written, without the normalisation of [`Self::from_request`] (tests
    /// use it; PURGE builds its key with `from_request`, like the request it removes).
    pub fn from_string(key: String) -> CacheKey {
        CacheKey(key)
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

fn push_query(key: &mut String, query: &str, config: &CacheKeyConfig) {
    if !config.sort_query && config.drop_query_params.is_empty() {
        if !query.is_empty() {
            key.push('?');
            key.push_str(query);
        }
        return;
    }
    let mut params: Vec<&str> = query
        .split('&')
        .filter(|param| !param.is_empty())
        .filter(|param| {
            let name = param.split('=').next().unwrap_or(param);
            !config.drop_query_params.iter().any(|drop| drop == name)
        })
        .collect();
    if config.sort_query {
        params.sort_unstable();
    }
    if !params.is_empty() {
        key.push('?');
        key.push_str(&params.join("&"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> CacheKeyConfig {
        CacheKeyConfig {
            include_scheme: false,
            include_host: true,
            include_query: true,
            sort_query: false,
            drop_query_params: Vec::new(),
        }
    }

    fn key(target: &str, host: Option<&str>, config: &CacheKeyConfig) -> Option<String> {
        let mut builder = http::Request::builder().uri(target);
        if let Some(host) = host {
            builder = builder.header("host", host);
        }
        let (parts, ()) = builder.body(()).expect("valid request").into_parts();
        CacheKey::from_request(&parts, config).map(|k| k.0)
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
}
