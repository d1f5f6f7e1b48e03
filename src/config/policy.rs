//! A route's cache policy, `[routes.cache]`: what the operator says about caching a route's
//! responses where the origin's headers say otherwise, read and checked against itself.
//!
//! A route without the table gets [`CachePolicy::default`], which is RFC 9111 as the rest of the
//! cache follows it: every rule here is an exception an operator writes down.

use std::time::Duration;

use http::{HeaderName, HeaderValue, Method, StatusCode};
use toml::Value;

use super::parse::Section;
use super::values::{self, shown};
use super::{CacheKeyConfig, format_size};
use crate::admission::probation::Mode;

/// `[routes.cache]`: the cache policy of one route.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CachePolicy {
    /// False: the route's requests are never looked up and their responses never stored (a
    /// pass). Default true.
    pub enabled: bool,
    /// The route's admission mode; `None` = `[admission] mode`.
    pub admission: Option<Mode>,
    /// Objects larger than this (by `Content-Length`) need the doorkeeper's second request even
    /// where the route admits first requests (probation or off). Default none.
    pub second_hit_above: Option<u64>,
    /// Objects larger than this are cached in slices; `None` = `cache.slice_above`.
    pub slice_above: Option<u64>,
    /// The route's slice size; `None` = `cache.slice_bytes`.
    pub slice_bytes: Option<u64>,
    /// The lifetime of a response the origin gives no freshness information (no `max-age`,
    /// `s-maxage` or `Expires`): this makes its status storable too (a 404 for a minute).
    pub default_ttl: StatusTtl,
    /// The lifetime that replaces the origin's (its `max-age`, `s-maxage`, `Expires` or a
    /// heuristic), by status.
    pub override_ttl: StatusTtl,
    /// Bounds for the origin's own lifetime (not for the two above). Default none.
    pub min_ttl: Option<Duration>,
    pub max_ttl: Option<Duration>,
    /// A stale entry is served this long past its freshness when the origin fails (RFC 5861
    /// `stale-if-error`, granted by the operator). Default none.
    pub stale_if_error: Option<Duration>,
    /// A stale entry is served this long past its freshness while it is revalidated in the
    /// background (RFC 5861 `stale-while-revalidate`). Default none.
    pub stale_while_revalidate: Option<Duration>,
    /// What the origin's response says that the cache ignores.
    pub ignore_origin: OriginIgnores,
    /// `Vary` fields ignored: the stored copy does not vary on them.
    pub ignore_vary: Vec<HeaderName>,
    /// The client's `Cache-Control` and `Pragma` are ignored (removed from the request), so a
    /// browser's reload is answered from the cache. Default false.
    pub ignore_client_cache_control: bool,
    /// Responses to requests with `Authorization` may be stored without `public`, `s-maxage` or
    /// `must-revalidate` (RFC 9111 section 3.5 waived for this route). Default false.
    pub share_authorized: bool,
    /// Requests that are neither looked up nor stored.
    pub bypass: Conditions,
    /// Requests that are looked up but whose responses are not stored.
    pub no_store: Conditions,
    /// `[routes.cache.key]`: the route's cache key, over `[cache.key]`; `None` = that one.
    pub key: Option<CacheKeyConfig>,
}

/// What in the origin's response a route ignores.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OriginIgnores {
    /// `Cache-Control` as a whole (and the targeted fields): every directive, for storing and
    /// freshness.
    pub cache_control: bool,
    pub expires: bool,
    pub private: bool,
    pub no_cache: bool,
    pub no_store: bool,
    /// `Set-Cookie` is removed from every response the route fetches for the cache, so a stored
    /// copy never carries one client's cookie to another.
    pub set_cookie: bool,
}

/// The names `ignore_origin` takes.
pub const ORIGIN_IGNORES: [&str; 6] = [
    "cache-control",
    "expires",
    "private",
    "no-cache",
    "no-store",
    "set-cookie",
];

/// Lifetimes by status: `"1h"` (for 200, 301 and 302, as nginx's `proxy_cache_valid` without
/// codes) or `{ "200" = "1h", "404" = "1m", "any" = "5s" }`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatusTtl {
    pub by_status: Vec<(StatusCode, Duration)>,
    /// For every status not listed.
    pub any: Option<Duration>,
}

/// The statuses a bare duration applies to.
const BARE_TTL_STATUSES: [u16; 3] = [200, 301, 302];

impl StatusTtl {
    /// The lifetime for `status`, if one is given.
    pub fn get(&self, status: StatusCode) -> Option<Duration> {
        self.by_status
            .iter()
            .find(|(listed, _)| *listed == status)
            .map(|(_, ttl)| *ttl)
            .or(self.any)
    }

    pub fn is_empty(&self) -> bool {
        self.by_status.is_empty() && self.any.is_none()
    }
}

/// Conditions on a request, any one of which matches.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Conditions {
    /// A cookie of one of these names is present.
    pub cookies: Vec<String>,
    /// A field of this name is present (with this value, when one is given).
    pub headers: Vec<(HeaderName, Option<HeaderValue>)>,
    /// A query parameter of one of these names is present.
    pub query_params: Vec<String>,
    pub methods: Vec<Method>,
}

impl Conditions {
    pub fn is_empty(&self) -> bool {
        self.cookies.is_empty()
            && self.headers.is_empty()
            && self.query_params.is_empty()
            && self.methods.is_empty()
    }
}

impl CachePolicy {
    /// The policy of a route that says nothing: RFC 9111 as the cache follows it.
    pub fn rfc() -> CachePolicy {
        CachePolicy {
            enabled: true,
            ..CachePolicy::default()
        }
    }

    /// Whether the route ever asks the doorkeeper, besides what `[admission]` says.
    pub fn uses_doorkeeper(&self) -> bool {
        self.enabled
            && (self.admission.is_some_and(Mode::uses_doorkeeper)
                || self.second_hit_above.is_some())
    }
}

/// Reads `[routes.cache]`; `global_key` is `[cache.key]`, which `[routes.cache.key]` is laid over.
pub(super) fn read(s: &mut Section, global_key: Option<&CacheKeyConfig>) -> Option<CachePolicy> {
    let enabled = s.optional("enabled", values::boolean);
    let admission = s.optional("admission", |v| values::one_of(v, &Mode::ALL, Mode::as_str));
    let second_hit_above = s.optional("second_hit_above", values::size);
    let slice_above = s.optional("slice_above", values::size);
    let slice_bytes = s.optional("slice_bytes", values::slice_size);
    let default_ttl = s.optional("default_ttl", status_ttl);
    let override_ttl = s.optional("override_ttl", status_ttl);
    let min_ttl = s.optional("min_ttl", values::duration);
    let max_ttl = s.optional("max_ttl", values::positive_duration);
    let stale_if_error = s.optional("stale_if_error", values::duration);
    let stale_while_revalidate = s.optional("stale_while_revalidate", values::duration);
    let ignore_origin = s.optional("ignore_origin", origin_ignores);
    let ignore_vary = s.optional("ignore_vary", values::field_names);
    let ignore_client = s.optional("ignore_client_cache_control", values::boolean);
    let share_authorized = s.optional("share_authorized", values::boolean);
    let bypass = s.optional_child("bypass", read_conditions);
    let no_store = s.optional_child("no_store", read_conditions);
    let key = s.optional_child("key", |s| read_route_key(s, global_key));
    let policy = CachePolicy {
        enabled: enabled?.unwrap_or(true),
        admission: admission?,
        second_hit_above: second_hit_above?,
        slice_above: slice_above?,
        slice_bytes: slice_bytes?,
        default_ttl: default_ttl?.unwrap_or_default(),
        override_ttl: override_ttl?.unwrap_or_default(),
        min_ttl: min_ttl?,
        max_ttl: max_ttl?,
        stale_if_error: stale_if_error?,
        stale_while_revalidate: stale_while_revalidate?,
        ignore_origin: ignore_origin?.unwrap_or_default(),
        ignore_vary: ignore_vary?.unwrap_or_default(),
        ignore_client_cache_control: ignore_client?.unwrap_or(false),
        share_authorized: share_authorized?.unwrap_or(false),
        bypass: bypass?.unwrap_or_default(),
        no_store: no_store?.unwrap_or_default(),
        key: key?,
    };
    check(s, &policy).then_some(policy)
}

/// A policy that contradicts itself: every contradiction reported, naming its key.
fn check(s: &mut Section, policy: &CachePolicy) -> bool {
    let mut ok = true;
    if let (Some(min), Some(max)) = (policy.min_ttl, policy.max_ttl)
        && min > max
    {
        s.report(
            "min_ttl",
            format!("{min:?} is longer than max_ttl ({max:?}): no lifetime fits between them"),
        );
        ok = false;
    }
    if !policy.enabled {
        let rules = [
            ("admission", policy.admission.is_some()),
            ("second_hit_above", policy.second_hit_above.is_some()),
            ("slice_above", policy.slice_above.is_some()),
            ("slice_bytes", policy.slice_bytes.is_some()),
            ("default_ttl", !policy.default_ttl.is_empty()),
            ("override_ttl", !policy.override_ttl.is_empty()),
            ("min_ttl", policy.min_ttl.is_some()),
            ("max_ttl", policy.max_ttl.is_some()),
            ("stale_if_error", policy.stale_if_error.is_some()),
            (
                "stale_while_revalidate",
                policy.stale_while_revalidate.is_some(),
            ),
            ("bypass", !policy.bypass.is_empty()),
            ("no_store", !policy.no_store.is_empty()),
            ("key", policy.key.is_some()),
        ];
        for (key, given) in rules {
            if given {
                s.report(
                    key,
                    "never applies: enabled = false sends every request of the route past the cache",
                );
                ok = false;
            }
        }
    }
    for (status, _) in &policy.default_ttl.by_status {
        if policy
            .override_ttl
            .by_status
            .iter()
            .any(|(s, _)| s == status)
        {
            s.report(
                "default_ttl",
                format!("{status} never applies: override_ttl gives {status} its lifetime"),
            );
            ok = false;
        }
    }
    if let (Some(above), Some(Mode::SecondHit)) = (policy.second_hit_above, policy.admission) {
        s.report(
            "second_hit_above",
            format!(
                "{} changes nothing: admission = \"second-hit\" already needs a second request",
                format_size(above)
            ),
        );
        ok = false;
    }
    ok
}

fn status_ttl(value: &Value) -> Result<StatusTtl, String> {
    let expected = || {
        format!(
            "expected a duration like \"1h\" (for 200, 301, 302) or a table like {{ \"200\" = \"1h\", \"404\" = \"1m\", \"any\" = \"5s\" }}, got {}",
            shown(value)
        )
    };
    match value {
        Value::String(_) => {
            let ttl = values::duration(value)?;
            let by_status = BARE_TTL_STATUSES
                .iter()
                .filter_map(|code| StatusCode::from_u16(*code).ok())
                .map(|status| (status, ttl))
                .collect();
            Ok(StatusTtl {
                by_status,
                any: None,
            })
        }
        Value::Table(table) => {
            let mut ttl = StatusTtl::default();
            for (name, value) in table {
                let duration =
                    values::duration(value).map_err(|problem| format!("{name}: {problem}"))?;
                if name == "any" {
                    ttl.any = Some(duration);
                    continue;
                }
                let status = name
                    .parse::<u16>()
                    .ok()
                    .filter(|code| (200..600).contains(code) && !matches!(code, 206 | 304))
                    .and_then(|code| StatusCode::from_u16(code).ok())
                    .ok_or_else(|| {
                        format!(
                            "{name:?} is not a final status a cache stores (200-599, not 206 or 304) nor \"any\""
                        )
                    })?;
                ttl.by_status.push((status, duration));
            }
            Ok(ttl)
        }
        _ => Err(expected()),
    }
}

fn origin_ignores(value: &Value) -> Result<OriginIgnores, String> {
    let mut ignores = OriginIgnores::default();
    for name in values::names(value)? {
        let name = name.to_ascii_lowercase();
        let flag = match name.as_str() {
            "cache-control" => &mut ignores.cache_control,
            "expires" => &mut ignores.expires,
            "private" => &mut ignores.private,
            "no-cache" => &mut ignores.no_cache,
            "no-store" => &mut ignores.no_store,
            "set-cookie" => &mut ignores.set_cookie,
            _ => {
                return Err(format!(
                    "{name:?} is not something the cache can ignore; expected some of {}",
                    ORIGIN_IGNORES.join(", ")
                ));
            }
        };
        *flag = true;
    }
    Ok(ignores)
}

/// A cookie or query parameter name: one token, no `=`, `;`, `&` or space, which could never
/// match one.
fn token_names(value: &Value) -> Result<Vec<String>, String> {
    let names = values::names(value)?;
    for name in &names {
        if name.bytes().any(|b| {
            matches!(b, b'=' | b';' | b'&' | b',')
                || b.is_ascii_whitespace()
                || b.is_ascii_control()
        }) {
            return Err(format!(
                "{name:?} can never match: a name has no '=', ';', '&', ',' or white space"
            ));
        }
    }
    Ok(names)
}

/// A field condition: `"x-preview"` (present) or `"x-debug: 1"` (present with that value).
fn header_conditions(value: &Value) -> Result<Vec<(HeaderName, Option<HeaderValue>)>, String> {
    values::names(value)?
        .into_iter()
        .map(|text| {
            let (name, wanted) = match text.split_once(':') {
                Some((name, wanted)) => (name.trim(), Some(wanted.trim())),
                None => (text.trim(), None),
            };
            let name = HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes())
                .map_err(|_| format!("{text:?}: expected \"name\" or \"name: value\""))?;
            let wanted = wanted
                .map(|value| {
                    HeaderValue::from_str(value)
                        .map_err(|_| format!("{text:?}: the value is not a field value"))
                })
                .transpose()?;
            Ok((name, wanted))
        })
        .collect()
}

fn methods(value: &Value) -> Result<Vec<Method>, String> {
    values::names(value)?
        .into_iter()
        .map(|name| match name.to_ascii_uppercase().as_str() {
            "GET" => Ok(Method::GET),
            "HEAD" => Ok(Method::HEAD),
            _ => Err(format!(
                "{name:?} is never looked up: only GET and HEAD go through the cache"
            )),
        })
        .collect()
}

fn read_conditions(s: &mut Section) -> Option<Conditions> {
    let cookies = s.optional("cookies", token_names);
    let headers = s.optional("headers", header_conditions);
    let query_params = s.optional("query_params", token_names);
    let methods = s.optional("methods", methods);
    Some(Conditions {
        cookies: cookies?.unwrap_or_default(),
        headers: headers?.unwrap_or_default(),
        query_params: query_params?.unwrap_or_default(),
        methods: methods?.unwrap_or_default(),
    })
}

/// `[routes.cache.key]`: each key given replaces `[cache.key]`'s.
fn read_route_key(s: &mut Section, global: Option<&CacheKeyConfig>) -> Option<CacheKeyConfig> {
    let include_scheme = s.optional("include_scheme", values::boolean);
    let include_host = s.optional("include_host", values::boolean);
    let include_query = s.optional("include_query", values::boolean);
    let sort_query = s.optional("sort_query", values::boolean);
    let drop_query_params = s.optional("drop_query_params", token_names);
    let keep_query_params = s.optional("keep_query_params", token_names);
    let headers = s.optional("headers", values::field_names);
    let cookies = s.optional("cookies", token_names);
    let normalize = s.optional("normalize_accept_encoding", values::boolean);
    let base = global
        .cloned()
        .unwrap_or_else(|| super::Config::defaults().cache.key);
    Some(CacheKeyConfig {
        include_scheme: include_scheme?.unwrap_or(base.include_scheme),
        include_host: include_host?.unwrap_or(base.include_host),
        include_query: include_query?.unwrap_or(base.include_query),
        sort_query: sort_query?.unwrap_or(base.sort_query),
        drop_query_params: drop_query_params?.unwrap_or(base.drop_query_params),
        keep_query_params: keep_query_params?.unwrap_or(base.keep_query_params),
        headers: headers?.unwrap_or(base.headers),
        cookies: cookies?.unwrap_or(base.cookies),
        normalize_accept_encoding: normalize?.unwrap_or(base.normalize_accept_encoding),
    })
}

#[cfg(test)]
mod tests {
    use super::super::Config;

    /// Every error of a file with one route whose `[routes.cache]` is `policy`, one per line.
    fn errors(policy: &str) -> String {
        let text = format!(
            "[upstreams.o]\nservers = [\"http://127.0.0.1:1\"]\n[[routes]]\nupstream = \"o\"\n\
             [routes.cache]\n{policy}"
        );
        match Config::from_toml_str(&text) {
            Ok(_) => String::new(),
            Err(errors) => errors.to_string(),
        }
    }

    #[test]
    fn each_bad_policy_key_is_named_in_its_error() {
        let cases = [
            ("enabled = \"no\"", "routes[0].cache.enabled: expected"),
            (
                "override_ttl = 3600",
                "routes[0].cache.override_ttl: expected a duration",
            ),
            (
                "default_ttl = { \"299x\" = \"1m\" }",
                "routes[0].cache.default_ttl: \"299x\"",
            ),
            (
                "default_ttl = { \"304\" = \"1m\" }",
                "routes[0].cache.default_ttl: \"304\"",
            ),
            (
                "stale_if_error = \"-1s\"",
                "routes[0].cache.stale_if_error: expected a duration",
            ),
            (
                "max_ttl = \"0s\"",
                "routes[0].cache.max_ttl: must be greater than 0",
            ),
            (
                "slice_bytes = \"100KiB\"",
                "routes[0].cache.slice_bytes: must be a power of two from 64KiB to 64MiB",
            ),
            (
                "slice_bytes = \"128MiB\"",
                "routes[0].cache.slice_bytes: must be a power of two from 64KiB to 64MiB",
            ),
            (
                "slice_above = \"big\"",
                "routes[0].cache.slice_above: expected a size",
            ),
            (
                "ignore_origin = [\"cookies\"]",
                "routes[0].cache.ignore_origin: \"cookies\"",
            ),
            ("admission = \"sometimes\"", "routes[0].cache.admission:"),
            (
                "max_ttl_s = \"1h\"",
                "routes[0].cache.max_ttl_s: unknown key",
            ),
            (
                "[routes.cache.bypass]\ncookies = [\"\"]",
                "routes[0].cache.bypass.cookies:",
            ),
            (
                "[routes.cache.bypass]\ncookies = [\"a=b\"]",
                "routes[0].cache.bypass.cookies: \"a=b\" can never match",
            ),
            (
                "[routes.cache.bypass]\nmethods = [\"POST\"]",
                "routes[0].cache.bypass.methods: \"POST\" is never looked up",
            ),
            (
                "[routes.cache.bypass]\nheaders = [\"bad name: 1\"]",
                "routes[0].cache.bypass.headers:",
            ),
            (
                "[routes.cache.key]\nkeep_query_params = \"page\"",
                "routes[0].cache.key.keep_query_params:",
            ),
            (
                "[routes.cache.no_store]\ncolor = [\"x\"]",
                "routes[0].cache.no_store.color: unknown key",
            ),
        ];
        for (policy, expected) in cases {
            let errors = errors(policy);
            assert!(errors.contains(expected), "{policy}:\n{errors}");
        }
    }

    #[test]
    fn a_policy_that_contradicts_itself_is_refused_naming_each_contradiction() {
        let both = errors(
            "min_ttl = \"1h\"\nmax_ttl = \"1m\"\ndefault_ttl = { \"404\" = \"1m\" }\noverride_ttl = { \"404\" = \"5m\" }",
        );
        assert!(
            both.contains("routes[0].cache.min_ttl: 3600s is longer than max_ttl"),
            "{both}"
        );
        assert!(
            both.contains("routes[0].cache.default_ttl: 404 Not Found never applies"),
            "{both}"
        );
        let disabled = errors(
            "enabled = false\nstale_if_error = \"1d\"\n[routes.cache.bypass]\ncookies = [\"s\"]",
        );
        assert!(
            disabled.contains("routes[0].cache.stale_if_error: never applies"),
            "{disabled}"
        );
        assert!(
            disabled.contains("routes[0].cache.bypass: never applies"),
            "{disabled}"
        );
        let needless = errors("admission = \"second-hit\"\nsecond_hit_above = \"1MiB\"");
        assert!(
            needless.contains("routes[0].cache.second_hit_above: 1MiB changes nothing"),
            "{needless}"
        );
        assert_eq!(errors("min_ttl = \"1m\"\nmax_ttl = \"1h\""), "");
    }

    #[test]
    fn a_route_name_must_be_a_label_and_its_own() {
        let text = "[upstreams.o]\nservers = [\"http://127.0.0.1:1\"]\n\
                    [[routes]]\nname = \"a\"\npath_prefix = \"/a/\"\nupstream = \"o\"\n\
                    [[routes]]\nname = \"a\"\nupstream = \"o\"\n";
        let errors = Config::from_toml_str(text)
            .expect_err("two routes called a")
            .to_string();
        assert!(
            errors.contains("routes[1].name: \"a\" is routes[0]'s name too"),
            "{errors}"
        );
        let text = "[upstreams.o]\nservers = [\"http://127.0.0.1:1\"]\n\
                    [[routes]]\nname = \"Static Files\"\nupstream = \"o\"\n";
        let errors = Config::from_toml_str(text)
            .expect_err("not a label")
            .to_string();
        assert!(
            errors.contains("routes[0].name: expected a name"),
            "{errors}"
        );
    }

    #[test]
    fn a_policy_is_written_back_as_it_was_read() {
        let text = include_str!("../../config/examples/site-policy.toml");
        let config = Config::from_toml_str(text).expect("the example is valid");
        assert_eq!(Config::from_toml_str(&config.to_toml()), Ok(config));
    }
}
