//! Routes: `[[routes]]` (which upstream group a request's host and path go to), read and checked
//! against the groups.

use super::CacheKeyConfig;
use super::policy::{self, CachePolicy};
use super::section::Section;
use super::values::{self, shown};

/// `[[routes]]`: requests whose host and path match go to `upstream`; the first match wins.
#[derive(Clone, Debug, PartialEq)]
pub struct RouteConfig {
    /// Its name in metrics, `Cache-Status` and the status page: `[a-z0-9_-]`, unique. Default
    /// `route-<index>` (`default` for the one route `origin.url` stands for).
    pub name: String,
    /// `None` (no `host` key) = any host.
    pub host: Option<HostPattern>,
    /// Starts with `/`. Default `/` (every path).
    pub path_prefix: String,
    pub upstream: String,
    /// `[routes.cache]`: what the operator says about caching this route's responses.
    pub cache: std::sync::Arc<CachePolicy>,
    /// `Link` values sent as a `103 Early Hints` to an HTTP/1.1 client whose GET or HEAD goes to
    /// the origin (a miss, a revalidation or a pass), before the final response.
    pub early_hints: std::sync::Arc<[http::HeaderValue]>,
}

/// A `host` of a route: `a.example` or `*.example.com` (any name below `example.com`, not
/// `example.com` itself). Lower case; the request's port is not compared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostPattern {
    Exact(String),
    /// The suffix with its leading dot: `.example.com`.
    Below(String),
}

impl HostPattern {
    /// Whether a request for `host` (lower case, no port) matches.
    pub fn matches(&self, host: &str) -> bool {
        match self {
            HostPattern::Exact(name) => host == name,
            HostPattern::Below(suffix) => host.len() > suffix.len() && host.ends_with(suffix),
        }
    }

    /// Whether every host `other` matches, this matches too.
    fn covers(&self, other: &HostPattern) -> bool {
        match (self, other) {
            (HostPattern::Exact(a), HostPattern::Exact(b)) => a == b,
            (HostPattern::Below(_), HostPattern::Exact(name)) => self.matches(name),
            (HostPattern::Below(a), HostPattern::Below(b)) => b.ends_with(a.as_str()),
            (HostPattern::Exact(_), HostPattern::Below(_)) => false,
        }
    }
}

impl std::fmt::Display for HostPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostPattern::Exact(name) => f.write_str(name),
            HostPattern::Below(suffix) => write!(f, "*{suffix}"),
        }
    }
}

impl RouteConfig {
    /// Whether every request this route takes is taken by `earlier` first.
    fn shadowed_by(&self, earlier: &RouteConfig) -> bool {
        let host = match (&earlier.host, &self.host) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(earlier), Some(this)) => earlier.covers(this),
        };
        host && self.path_prefix.starts_with(&earlier.path_prefix)
    }
}

/// The one route to `upstream`, taking every request.
pub(super) fn default_route(upstream: &str) -> RouteConfig {
    RouteConfig {
        name: "default".to_owned(),
        cache: std::sync::Arc::new(CachePolicy::rfc()),
        early_hints: std::sync::Arc::new([]),
        host: None,
        path_prefix: "/".to_owned(),
        upstream: upstream.to_owned(),
    }
}

pub(super) fn read_routes(
    root: &mut Section,
    global_key: Option<&CacheKeyConfig>,
) -> Option<Vec<RouteConfig>> {
    let tables = root.array_of_tables("routes")?;
    let mut routes = Vec::new();
    let mut failed = false;
    for (index, table) in tables {
        let path = match index {
            Some(index) => format!("routes[{index}]"),
            None => "routes[]".to_owned(),
        };
        let index_name = format!("route-{}", index.unwrap_or(routes.len()));
        match root.nested(path, table, |s| read_route(s, index_name, global_key)) {
            Some(route) => routes.push(route),
            None => failed = true,
        }
    }
    (!failed).then_some(routes)
}

fn read_route(
    s: &mut Section,
    default_name: String,
    global_key: Option<&CacheKeyConfig>,
) -> Option<RouteConfig> {
    let name = s.optional("name", |v| {
        let name = values::string(v)?;
        let valid = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        match valid {
            true => Ok(name),
            false => Err(format!(
                "expected a name of 1 to 64 characters from a-z, 0-9, '-' and '_' (it is a metric label), got {}",
                shown(v)
            )),
        }
    });
    let cache = s.optional_child("cache", |s| policy::read(s, global_key));
    let host = s.optional("host", |v| {
        let host = values::string(v)?.to_ascii_lowercase();
        let (below, name) = match host.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, host.as_str()),
        };
        let valid = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
            && !name.starts_with('.')
            && !name.ends_with('.');
        if !valid {
            return Err(format!(
                "expected a host name like \"a.example\" or \"*.example.com\" (no port), got {}",
                shown(v)
            ));
        }
        Ok(match below {
            true => HostPattern::Below(format!(".{name}")),
            false => HostPattern::Exact(name.to_owned()),
        })
    });
    let path_prefix = s.optional("path_prefix", |v| {
        let prefix = values::string(v)?;
        if !prefix.starts_with('/') {
            return Err(format!("expected a path starting with /, got {}", shown(v)));
        }
        Ok(prefix)
    });
    let upstream = s.required("upstream", values::string);
    let early_hints = s.optional("early_hints", values::links);
    Some(RouteConfig {
        name: name?.unwrap_or(default_name),
        cache: std::sync::Arc::new(cache?.unwrap_or_else(CachePolicy::rfc)),
        host: host?,
        path_prefix: path_prefix?.unwrap_or_else(|| "/".to_owned()),
        upstream: upstream?,
        early_hints: early_hints?.unwrap_or_default().into(),
    })
}

/// Every route names a group, none is hidden behind an earlier one, and the last takes every
/// request.
pub(super) fn check_routes(
    root: &mut Section,
    names: &[String],
    routes: &[RouteConfig],
) -> Option<()> {
    let mut ok = true;
    for (index, route) in routes.iter().enumerate() {
        if !names.contains(&route.upstream) {
            root.report(
                &format!("routes[{index}].upstream"),
                format!(
                    "no upstream group {:?} (the groups are {})",
                    route.upstream,
                    names.join(", ")
                ),
            );
            ok = false;
        }
        if let Some(earlier) = routes[..index]
            .iter()
            .position(|earlier| earlier.name == route.name)
        {
            root.report(
                &format!("routes[{index}].name"),
                format!(
                    "{:?} is routes[{earlier}]'s name too: a route's name must be its own",
                    route.name
                ),
            );
            ok = false;
        }
        if let Some(earlier) = routes[..index]
            .iter()
            .position(|earlier| route.shadowed_by(earlier))
        {
            root.report(
                &format!("routes[{index}]"),
                format!(
                    "overlaps routes[{earlier}], which comes first and takes every request this \
                     one would: put the narrower route first"
                ),
            );
            ok = false;
        }
    }
    if let Some(last) = routes.last()
        && (last.host.is_some() || last.path_prefix != "/")
    {
        root.report(
            &format!("routes[{}]", routes.len() - 1),
            "the last route must take every request (no host, no path_prefix): the default route",
        );
        ok = false;
    }
    ok.then_some(())
}
