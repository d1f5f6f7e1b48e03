//! `GET /cache/inspect?url=URL` on the admin listener: what the cache holds for the URL a client
//! would ask for, where, how fresh, and which route and policy apply. The admin request's own
//! header fields stand for the client's (the fields a response varies on select the variant).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::SystemTime;

use http::request::Parts;
use http::{HeaderValue, Request, StatusCode, Uri, header};
use serde_json::{Value, json};

use crate::admission::probation::Segment;
use crate::cache::StoredResponse;
use crate::cache::policy;
use crate::cache::tags::each_tag;
use crate::config::CachePolicy;
use crate::proxy::Proxy;
use crate::proxy::request::exchange::{Exchange, Route};

/// Where a stored entry was found.
#[derive(Clone, Copy)]
enum Place {
    RamMain,
    RamProbation,
    Disk,
}

impl Place {
    fn as_str(self) -> &'static str {
        match self {
            Place::RamMain => "ram-main",
            Place::RamProbation => "ram-probation",
            Place::Disk => "disk",
        }
    }
}

impl Proxy {
    /// The inspection of the URL in `parts`' query, as JSON; a 400 with the reason when the query
    /// names no usable absolute URL.
    pub(crate) async fn inspect(
        self: &Arc<Self>,
        parts: &Parts,
        peer: SocketAddr,
    ) -> Result<Value, (StatusCode, String)> {
        let bad = |why: &str| {
            (
                StatusCode::BAD_REQUEST,
                format!(
                    "GET /cache/inspect?url=URL with an absolute, percent-encoded URL \
                     (curl -G --data-urlencode url=http://site.example/path): {why}\n"
                ),
            )
        };
        let url = parts
            .uri
            .query()
            .unwrap_or_default()
            .split('&')
            .find_map(|pair| pair.strip_prefix("url="))
            .ok_or_else(|| bad("no url parameter"))?;
        let url = crate::cache::percent_decoded(url).ok_or_else(|| bad("bad percent-encoding"))?;
        let uri: Uri = url.parse().map_err(|_| bad("not a URL"))?;
        let authority = uri.authority().ok_or_else(|| bad("no host"))?.clone();
        let host = HeaderValue::from_str(authority.as_str()).map_err(|_| bad("bad host"))?;
        let mut request = Request::get(uri.path_and_query().map_or("/", |p| p.as_str()));
        if let Some(headers) = request.headers_mut() {
            *headers = parts.headers.clone();
            headers.insert(header::HOST, host);
        }
        let (asked, ()) = request
            .body(())
            .map_err(|_| bad("not a request target"))?
            .into_parts();
        let live = self.live();
        let exchange = Exchange::new(asked, peer, live).map_err(|error| bad(&error.to_string()))?;
        Ok(self.inspection(&url, &exchange).await)
    }

    async fn inspection(&self, url: &str, exchange: &Exchange) -> Value {
        let key = &exchange.key;
        let now = SystemTime::now();
        let mut found: Option<(Place, Vec<Arc<StoredResponse>>)> =
            self.store.peek(key).map(|variants| {
                let place = match self.store.segment_of(key) {
                    Some(Segment::Probation) => Place::RamProbation,
                    _ => Place::RamMain,
                };
                (place, variants.responses().cloned().collect())
            });
        if found.is_none()
            && let Some(disk) = &self.disk
        {
            let targeted = &exchange.config().cache.targeted_fields;
            if let Some(read) = disk.load(key, targeted, &exchange.routed.policy).await {
                found = Some((Place::Disk, read.into_iter().map(Arc::new).collect()));
            }
        }
        let tag_field = &exchange.config().cache.tag_header;
        let stored = found
            .as_ref()
            .map_or(&[][..], |(_, variants)| variants.as_slice());
        let selected = stored
            .iter()
            .find(|entry| entry.vary_matches(&exchange.parts.headers))
            .cloned();
        let variants: Vec<Value> = stored
            .iter()
            .map(|entry| {
                let chosen = selected.as_ref().is_some_and(|s| Arc::ptr_eq(s, entry));
                variant(entry, chosen, tag_field, now)
            })
            .collect();
        let seen = exchange
            .live
            .doorkeeper
            .as_ref()
            .map(|door| door.contains(key.as_bytes()));
        let bypassed = match exchange.route() {
            Route::Pass(_, rule) => rule.map(|rule| rule.as_str()),
            Route::Cache => None,
        };
        json!({
            "url": url,
            "key": key.as_str(),
            "route": &*exchange.routed.name,
            "upstream": &*exchange.routed.group.name,
            "policy": policy_summary(&exchange.routed.policy, exchange.config().admission.mode.as_str()),
            "bypassed_by": bypassed,
            "stored": selected.is_some(),
            "where": found.as_ref().map(|(place, _)| place.as_str()),
            "age": selected.as_ref().map(|entry| entry.age(now).as_secs()),
            "ttl": selected.as_ref().map(|entry| entry.ttl_seconds(now)),
            "variants": variants,
            "doorkeeper_seen": seen,
        })
    }
}

fn variant(
    entry: &StoredResponse,
    selected: bool,
    tag_field: &http::HeaderName,
    now: SystemTime,
) -> Value {
    let mut tags = Vec::new();
    each_tag(&entry.head, tag_field, |tag| tags.push(tag.to_owned()));
    let vary: serde_json::Map<String, Value> = entry
        .vary_names()
        .iter()
        .zip(entry.vary_selection())
        .map(|(name, value)| {
            let value = value
                .as_ref()
                .map(|v| Value::String(String::from_utf8_lossy(v.as_bytes()).into_owned()));
            (name.as_str().to_owned(), value.unwrap_or(Value::Null))
        })
        .collect();
    json!({
        "selected": selected,
        "status": entry.status.as_u16(),
        "vary": vary,
        "age": entry.age(now).as_secs(),
        "ttl": entry.ttl_seconds(now),
        "bytes": entry.body.len(),
        "tags": tags,
    })
}

fn policy_summary(policy: &CachePolicy, global_mode: &str) -> Value {
    let ttl = |ttl: &crate::config::StatusTtl| -> Value {
        let mut map: serde_json::Map<String, Value> = ttl
            .by_status
            .iter()
            .map(|(status, ttl)| (status.as_u16().to_string(), json!(ttl.as_secs())))
            .collect();
        if let Some(any) = ttl.any {
            map.insert("any".to_owned(), json!(any.as_secs()));
        }
        Value::Object(map)
    };
    json!({
        "enabled": policy.enabled,
        "admission": policy.admission.map_or(global_mode, |mode| mode.as_str()),
        "override_ttl": ttl(&policy.override_ttl),
        "default_ttl": ttl(&policy.default_ttl),
        "min_ttl": policy.min_ttl.map(|d| d.as_secs()),
        "max_ttl": policy.max_ttl.map(|d| d.as_secs()),
        "stale_if_error": policy.stale_if_error.map(|d| d.as_secs()),
        "stale_while_revalidate": policy.stale_while_revalidate.map(|d| d.as_secs()),
        "ignores_client_cache_control": policy.ignore_client_cache_control,
        "rfc": *policy == *policy::rfc(),
    })
}
