//! One request as it moves through the proxy: what the client asked, who asked, the configuration
//! it started with (kept to the end, whatever a reload does meanwhile), and what goes to the origin.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::request::Parts;
use http::uri::PathAndQuery;
use http::{Method, Request, Uri};
use http_body_util::{BodyExt, Empty};

use crate::cache::policy::{self, PolicyRule};
use crate::cache::{Authority, CacheKey, ClientTls, KeyError, StoredResponse, keyed_query};
use crate::config::{CacheKeyConfig, CachePolicy, Config};
use crate::proxy::Live;
use crate::proxy::outcome::served::Fwd;
use crate::proxy::request::body::RequestBody;
use crate::proxy::request::interim::InterimSink;
use crate::proxy::response::headers::{Forwarding, OriginBody, strip_hop_by_hop, to_origin};
use crate::proxy::upstream::origin::OutgoingBody;
use crate::proxy::upstream::{Routed, Server};

/// A request the proxy has accepted: its parts, validated authority and cache key, and the `Live`
/// configuration loaded once when it arrived.
pub struct Exchange {
    pub parts: Parts,
    pub peer: SocketAddr,
    pub live: Arc<Live>,
    pub authority: Authority,
    pub key: CacheKey,
    route: Route,
    /// The route it took: its name, upstream group, cache policy and metric series.
    pub routed: Arc<Routed>,
    /// The path and query it is sent to a server with.
    target: PathAndQuery,
    /// Where the origin's interim responses go when the client's connection relays them (the
    /// native HTTP/1.1 server, to a client above HTTP/1.0); never on a detached copy, whose
    /// answer no client waits for.
    pub interim: Option<InterimSink>,
    /// Whether the server writes a memory hit's head from its stored block (see
    /// [`Writer`](super::Writer)).
    pub stored_heads: bool,
}

/// Where a request goes first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// The cache answers it, or fetches it for storing.
    Cache,
    /// Straight to the origin, body and all; the policy rule that sent it, if one did.
    Pass(Fwd, Option<PolicyRule>),
}

impl Exchange {
    /// Accepts a request, or says why it cannot be cached or forwarded (answered with 400). Its
    /// route's policy acts here first: what the client says that the route ignores is removed,
    /// the key is the route's, and a bypass sends it straight on.
    pub fn new(
        mut parts: Parts,
        peer: SocketAddr,
        live: Arc<Live>,
    ) -> Result<Exchange, TranslateError> {
        let authority = Authority::of_request(&parts).map_err(KeyError::from)?;
        // RFC 9110 section 7.6.1: what the client named as hop-by-hop never reaches the origin,
        // so neither the key, nor a variant's fields, nor a rule may read it: a stored answer
        // would otherwise be filed under a value the origin never saw.
        strip_hop_by_hop(&mut parts.headers);
        let routed = Arc::clone(live.routing.routed(authority.as_str(), parts.uri.path()));
        let policy = &routed.policy;
        let route = match policy::bypass(policy, &parts) {
            Some(rule) if is_cacheable(&parts) => Route::Pass(Fwd::Bypass, Some(rule)),
            _ => route(&parts),
        };
        let key_config = policy.key.as_ref().unwrap_or(&live.config.cache.key);
        if route == Route::Cache {
            prepare_keyed_headers(policy, key_config, &mut parts.headers);
        }
        let query = keyed_query(parts.uri.query(), key_config);
        let key = CacheKey::for_target(&authority, &parts, query.as_deref(), key_config)?;
        // A cacheable request asks the origin for exactly what its key names (see `keyed_query`);
        // a new target is built only when that differs from what the client sent.
        let rewritten = match (route, &query) {
            (Route::Cache, Some(Cow::Owned(query))) => {
                Some(format!("{}?{query}", parts.uri.path()))
            }
            (Route::Cache, None) if parts.uri.query().is_some() => {
                Some(parts.uri.path().to_owned())
            }
            _ => None,
        };
        let target = match rewritten {
            Some(target) => PathAndQuery::try_from(target).map_err(|_| TranslateError::Query)?,
            None => parts
                .uri
                .path_and_query()
                .cloned()
                .unwrap_or_else(|| PathAndQuery::from_static("/")),
        };
        // Every server's URL has a scheme and an authority, so a target that makes a URI with one
        // makes a URI with each.
        routed.group.servers[0].uri_for(target.clone())?;
        Ok(Exchange {
            parts,
            peer,
            live,
            authority,
            key,
            route,
            routed,
            target,
            interim: None,
            stored_heads: false,
        })
    }

    pub fn config(&self) -> &Config {
        &self.live.config
    }

    pub fn route(&self) -> Route {
        self.route
    }

    pub fn is_head(&self) -> bool {
        self.parts.method == Method::HEAD
    }

    /// Whether this is a GET with a `Range`, valid or not: what the origin answers when the cache
    /// does not cut the range from the whole object.
    pub fn asks_for_range(&self) -> bool {
        self.parts.method == Method::GET && self.parts.headers.contains_key(header::RANGE)
    }

    /// A copy of the request for a background revalidation that outlives the client's request: its
    /// head, and of its extensions only the client's TLS (the scheme forwarded to the origin). It
    /// refreshes the whole object, so the client's range stays behind.
    pub fn detached(&self) -> Exchange {
        let mut request = Request::new(());
        *request.method_mut() = self.parts.method.clone();
        *request.uri_mut() = self.parts.uri.clone();
        *request.version_mut() = self.parts.version;
        *request.headers_mut() = self.parts.headers.clone();
        if let Some(tls) = self.parts.extensions.get::<ClientTls>() {
            request.extensions_mut().insert(*tls);
        }
        request.headers_mut().remove(header::RANGE);
        request.headers_mut().remove(header::IF_RANGE);
        Exchange {
            parts: request.into_parts().0,
            peer: self.peer,
            live: Arc::clone(&self.live),
            authority: self.authority.clone(),
            key: self.key.clone(),
            route: self.route,
            routed: Arc::clone(&self.routed),
            target: self.target.clone(),
            interim: None,
            stored_heads: false,
        }
    }

    /// The request a cacheable fetch sends: GET, no body, and the validators of the stale entry
    /// being revalidated, if any (RFC 9111 section 4.3.1).
    pub fn fetch_request(
        &self,
        stale: Option<&StoredResponse>,
        server: &Server,
    ) -> Request<OutgoingBody> {
        let mut head = self.origin_head(OriginBody::Dropped, server);
        if let Some(entry) = stale {
            if let Some(etag) = entry.etag() {
                head.headers_mut().insert(header::IF_NONE_MATCH, etag);
            }
            if let Some(modified) = entry.last_modified() {
                head.headers_mut()
                    .insert(header::IF_MODIFIED_SINCE, modified);
            }
        }
        head.map(|()| empty_body())
    }

    /// The request a pass sends: the client's method and body, with framing derived from the body.
    pub fn pass_request(&self, body: RequestBody, server: &Server) -> Request<OutgoingBody> {
        let length = hyper::body::Body::size_hint(&body).exact();
        let head = self.origin_head(OriginBody::Forwarded(length), server);
        head.map(|()| body.boxed())
    }

    /// The request that passes a GET's range to the origin: the client's `Range` and
    /// conditionals, no body, for the target its key names.
    pub fn range_request(&self, server: &Server) -> Request<OutgoingBody> {
        self.origin_head(OriginBody::Omitted, server)
            .map(|()| empty_body())
    }

    /// The head of the request to `server`: a cacheable fetch is always a GET (a HEAD is
    /// answered from the full response), a pass keeps the client's method.
    fn origin_head(&self, body: OriginBody, server: &Server) -> Request<()> {
        let method = match body {
            OriginBody::Dropped => Method::GET,
            OriginBody::Forwarded(_) | OriginBody::Omitted => self.parts.method.clone(),
        };
        let mut request = Request::new(());
        *request.method_mut() = method;
        // Checked when the exchange was made (see `new`).
        *request.uri_mut() = server
            .uri_for(self.target.clone())
            .unwrap_or_else(|_| Uri::from(self.target.clone()));
        *request.headers_mut() = to_origin(&self.parts.headers, &self.forwarding(server), body);
        if let Some(sink) = &self.interim {
            if matches!(self.parts.method, Method::GET | Method::HEAD) {
                sink.early_hints(&self.routed.early_hints);
            }
            sink.watch(&mut request);
        }
        request
    }

    /// The forwarding fields of a request to `server`, whose authority is its `Host` (RFC 9110
    /// section 7.2). With `preserve_host` it gets the validated authority the cache key was built
    /// from instead, so it answers for the host the entry is stored under.
    fn forwarding(&self, server: &Server) -> Forwarding<'_> {
        let authority = match self.config().origin.preserve_host {
            true => Some(self.authority.as_str()),
            false => server.url.authority().map(|a| a.as_str()),
        };
        let host = authority
            .and_then(|authority| HeaderValue::from_str(authority).ok())
            .unwrap_or_else(|| HeaderValue::from_static("localhost"));
        Forwarding {
            peer: self.peer,
            scheme: crate::cache::scheme(&self.parts),
            host,
            version: self.parts.version,
            trusted: &self.config().origin.trusted_forwarding_headers,
        }
    }
}

fn empty_body() -> OutgoingBody {
    Empty::<Bytes>::new()
        .map_err(|never| match never {})
        .boxed()
}

/// GET and HEAD go through the cache, ranges included (the cache stores whole objects and cuts
/// ranges from them); every other method goes to the origin.
fn route(parts: &Parts) -> Route {
    match is_cacheable(parts) {
        true => Route::Cache,
        false => Route::Pass(Fwd::Method, None),
    }
}

fn is_cacheable(parts: &Parts) -> bool {
    matches!(parts.method, Method::GET | Method::HEAD)
}

/// A cacheable request's fields as its route's policy and key see them: those the route ignores
/// removed, `Accept-Encoding` reduced when the key says so. A lookup and a purge of one target
/// prepare them alike, so they name the same key.
fn prepare_keyed_headers(
    policy: &CachePolicy,
    key_config: &CacheKeyConfig,
    headers: &mut HeaderMap,
) {
    policy::prepare_request(policy, headers);
    if key_config.normalize_accept_encoding {
        policy::normalize_accept_encoding(headers);
    }
}

/// The key a PURGE of `parts` removes: the one a GET of the same target would be stored under,
/// by the key of the route it takes.
pub fn purge_key(live: &Live, parts: &Parts) -> Result<CacheKey, KeyError> {
    let authority = Authority::of_request(parts)?;
    let routed = live.routing.routed(authority.as_str(), parts.uri.path());
    let key_config = routed.policy.key.as_ref().unwrap_or(&live.config.cache.key);
    let mut headers = parts.headers.clone();
    strip_hop_by_hop(&mut headers);
    prepare_keyed_headers(&routed.policy, key_config, &mut headers);
    let query = keyed_query(parts.uri.query(), key_config);
    let mut keyed = Request::new(());
    *keyed.uri_mut() = parts.uri.clone();
    *keyed.headers_mut() = headers;
    let (keyed, ()) = keyed.into_parts();
    CacheKey::for_target(&authority, &keyed, query.as_deref(), key_config)
}

/// What the origin receives for a client's request head, built exactly as the request path builds
/// it for the first server of its group, without any I/O: the cache key, the route, and the request head (`body_length` is the
/// length of a passed body, when known). `Err` is a request the proxy refuses with 400. For the
/// fuzz target (`fuzz/fuzz_targets/request_to_origin.rs`) and the tests below.
pub fn translate(
    live: &Arc<Live>,
    parts: Parts,
    peer: SocketAddr,
    body_length: Option<u64>,
) -> Result<(CacheKey, Route, Request<()>), TranslateError> {
    let exchange = Exchange::new(parts, peer, Arc::clone(live))?;
    let route = exchange.route();
    let body = match route {
        Route::Cache => OriginBody::Dropped,
        Route::Pass(..) => OriginBody::Forwarded(body_length),
    };
    // A request goes to one server of its group; any one shows what each gets.
    let head = exchange.origin_head(body, &exchange.routed.group.servers[0]);
    Ok((exchange.key, route, head))
}

/// Why a request is not forwarded.
#[derive(Debug, thiserror::Error)]
pub enum TranslateError {
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error("request target cannot be forwarded: {0}")]
    Target(#[from] http::uri::InvalidUriParts),
    #[error("request query cannot be forwarded")]
    Query,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn translated(
        config: crate::config::Config,
        method: &str,
        target: &str,
    ) -> Result<(CacheKey, Route, Request<()>), TranslateError> {
        let live = Arc::new(Live::new(config).expect("a plain-HTTP origin"));
        let request = Request::builder()
            .method(method)
            .uri(target)
            .header("host", "Site.example")
            .body(())
            .expect("request");
        let peer = "192.0.2.9:1234".parse().expect("address");
        translate(&live, request.into_parts().0, peer, None)
    }

    #[test]
    fn a_cacheable_request_asks_the_origin_for_exactly_what_the_key_names() {
        let mut config = crate::config::Config::defaults();
        config.cache.key.drop_query_params = vec!["utm_source".into()];
        config.cache.key.sort_query = true;
        let (key, route, head) =
            translated(config.clone(), "GET", "/p?z=1&utm_source=mail&a=2").expect("accepted");
        assert_eq!(route, Route::Cache);
        assert_eq!(key.as_str(), "site.example/p?a=2&z=1");
        assert_eq!(
            head.uri().path_and_query().map(|p| p.as_str()),
            Some("/p?a=2&z=1")
        );
        let (_, route, head) =
            translated(config, "POST", "/p?z=1&utm_source=mail").expect("accepted");
        assert_eq!(route, Route::Pass(Fwd::Method, None));
        assert_eq!(
            head.uri().path_and_query().map(|p| p.as_str()),
            Some("/p?z=1&utm_source=mail"),
            "a pass is forwarded as sent"
        );
    }

    #[test]
    fn without_the_query_in_the_key_the_origin_gets_none() {
        let mut config = crate::config::Config::defaults();
        config.cache.key.include_query = false;
        let (key, _, head) = translated(config, "GET", "/p?lang=%3Cscript%3E").expect("accepted");
        assert_eq!(key.as_str(), "site.example/p");
        assert_eq!(head.uri().path_and_query().map(|p| p.as_str()), Some("/p"));
    }
}
