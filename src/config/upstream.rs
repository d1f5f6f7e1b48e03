//! Upstream groups: `[upstreams.NAME]` (servers, balancing, health checks), and the groups and
//! routes in force, read together (the routes themselves are `route.rs`).

use std::sync::LazyLock;
use std::time::Duration;

use http::Uri;
use http::uri::PathAndQuery;
use toml::{Table, Value};

use super::parse::{Section, overlay};
pub use super::route::{HostPattern, RouteConfig};
use super::route::{check_routes, default_route, read_routes};
use super::values::{self, shown};
use super::{CacheKeyConfig, OriginConfig};

/// The name of the group `[origin] url` stands for when no `[upstreams]` are given.
pub const IMPLICIT_GROUP: &str = "origin";

/// `[upstreams.NAME]`: origin servers that serve the same content, requests balanced over them.
#[derive(Clone, Debug, PartialEq)]
pub struct UpstreamConfig {
    /// The table's name: the `upstream` label of the per-server metrics. Lower-case letters,
    /// digits, `-` and `_`.
    pub name: String,
    /// At least one that is not a backup. No URL twice.
    pub servers: Vec<UpstreamServer>,
    /// Default [`Balance::RoundRobin`].
    pub balance: Balance,
    /// `[upstreams.NAME.health]`
    pub health: HealthConfig,
}

/// One entry of `servers`: a table, or its URL alone (weight 1, not a backup).
#[derive(Clone, Debug, PartialEq)]
pub struct UpstreamServer {
    /// `http://host:port` or `https://host:port`, no path.
    pub url: Uri,
    /// Its share of the group's requests, 1 to 1000. Default 1.
    pub weight: u32,
    /// Gets requests only when every server that is not a backup is out of rotation. Default false.
    pub backup: bool,
}

/// How a group picks a server among those in rotation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Balance {
    /// Each server in turn, as often as its weight says.
    RoundRobin,
    /// The server with the fewest requests awaiting a response head, relative to its weight.
    LeastOutstanding,
    /// A rendezvous hash of the cache key: each object goes to one server while that server is in
    /// rotation, and only the objects of a server that leaves move.
    ConsistentHash,
}

impl Balance {
    pub const ALL: [Balance; 3] = [
        Balance::RoundRobin,
        Balance::LeastOutstanding,
        Balance::ConsistentHash,
    ];

    /// Its name in a config file: kebab-case, as every enumerated value is.
    pub fn as_str(self) -> &'static str {
        match self {
            Balance::RoundRobin => "round-robin",
            Balance::LeastOutstanding => "least-outstanding",
            Balance::ConsistentHash => "consistent-hash",
        }
    }

    /// The spelling of earlier versions (`round_robin`), still read; `check-config` warns of it.
    pub fn old_spelling(self) -> &'static str {
        match self {
            Balance::RoundRobin => "round_robin",
            Balance::LeastOutstanding => "least_outstanding",
            Balance::ConsistentHash => "consistent_hash",
        }
    }
}

/// `[upstreams.NAME.health]`: when a server leaves rotation and when it comes back.
#[derive(Clone, Debug, PartialEq)]
pub struct HealthConfig {
    /// Passive: this many failed connects, TLS handshakes or timeouts within `fail_timeout` take a
    /// server out for `fail_timeout` (nginx's `max_fails`); 0 = never. Default 1.
    pub max_fails: u32,
    /// Default 10s.
    pub fail_timeout: Duration,
    /// Active: the path probed with a GET every `probe_interval`; `None` (an empty string in the
    /// file) = no probes. Default none.
    pub probe_path: Option<PathAndQuery>,
    /// Default 5s.
    pub probe_interval: Duration,
    /// A probe without a response head within this fails. Default 2s.
    pub probe_timeout: Duration,
    /// The status a passing probe answers with. Default 200.
    pub expect_status: u16,
    /// Passing probes in a row that bring a server back. Default 2.
    pub rise: u32,
    /// Failing probes in a row that take a server out. Default 3.
    pub fall: u32,
}

impl HealthConfig {
    /// No passive checks (one server alone has nowhere else to send a request) and no probes.
    fn none() -> HealthConfig {
        HealthConfig {
            max_fails: 0,
            probe_path: None,
            ..GROUP_DEFAULTS.health.clone()
        }
    }
}

/// The groups and routes in force: `[upstreams]` and `[[routes]]` as given, or the one group and
/// route `[origin] url` stands for ([`Config::upstreams`](super::Config::upstreams)).
#[derive(Clone, Debug, PartialEq)]
pub struct Upstreams {
    /// Sorted by name.
    pub groups: Vec<UpstreamConfig>,
    /// In order; the last one takes every request (the default route).
    pub routes: Vec<RouteConfig>,
}

impl Upstreams {
    /// One group, `origin`, of the one server `origin.url`, without health checks, and one route
    /// to it: what a file without `[upstreams]` means.
    pub fn implicit(origin: &OriginConfig) -> Upstreams {
        Upstreams {
            groups: vec![UpstreamConfig {
                name: IMPLICIT_GROUP.to_owned(),
                servers: vec![UpstreamServer {
                    url: origin.url.clone(),
                    weight: 1,
                    backup: false,
                }],
                balance: Balance::RoundRobin,
                health: HealthConfig::none(),
            }],
            routes: vec![default_route(IMPLICIT_GROUP)],
        }
    }

    /// Whether any server is reached over TLS.
    pub fn any_https(&self) -> bool {
        self.groups
            .iter()
            .flat_map(|group| &group.servers)
            .any(|server| server.url.scheme_str() == Some("https"))
    }
}

/// What a group's keys are when its table leaves them out: the place the defaults are written
/// once (a group's table has a name of the user's, so the built-in file cannot hold them).
const GROUP_DEFAULTS_TOML: &str = r#"
balance = "round-robin"
[health]
max_fails = 1
fail_timeout = "10s"
probe_path = ""
probe_interval = "5s"
probe_timeout = "2s"
expect_status = 200
rise = 2
fall = 3
"#;

static GROUP_DEFAULTS_TABLE: LazyLock<Table> = LazyLock::new(|| {
    GROUP_DEFAULTS_TOML
        .parse()
        .expect("the group defaults are valid TOML (tested)")
});

static GROUP_DEFAULTS: LazyLock<UpstreamConfig> = LazyLock::new(|| {
    let mut table = GROUP_DEFAULTS_TABLE.clone();
    table.insert(
        "servers".to_owned(),
        Value::Array(vec![Value::String("http://127.0.0.1:8081".to_owned())]),
    );
    let mut section = Section::new(String::new(), &table, false);
    read_group("default".to_owned(), &mut section)
        .expect("the group defaults are a valid group (tested)")
});

/// The name a listing of keys gives a group (`upstreams.<name>.balance`).
const ANY_NAME: &str = "<name>";

/// Reads `[upstreams]` and `[[routes]]`: `Some(None)` when neither is given.
pub(super) fn read(
    root: &mut Section,
    global_key: Option<&CacheKeyConfig>,
) -> Option<Option<Upstreams>> {
    let groups = read_groups(root);
    let routes = read_routes(root, global_key);
    let (
        Groups {
            groups,
            names,
            all_read,
        },
        routes,
    ) = (groups?, routes?);
    if names.is_empty() {
        if !routes.is_empty() {
            root.report("routes", "given without any [upstreams.NAME] to route to");
            return None;
        }
        return Some(None);
    }
    let routes = if routes.is_empty() {
        match names.as_slice() {
            [only] => vec![default_route(only)],
            _ => {
                root.report(
                    "routes",
                    "missing: with more than one upstream group, [[routes]] must say which \
                     requests go to which, the last one without host and path_prefix",
                );
                return None;
            }
        }
    } else {
        routes
    };
    // Checked against every group's name, read or not, so that one file shows every error.
    check_routes(root, &names, &routes)?;
    all_read.then_some(Some(Upstreams { groups, routes }))
}

/// The groups read, and the names of all that were given (a group with errors too).
struct Groups {
    groups: Vec<UpstreamConfig>,
    names: Vec<String>,
    all_read: bool,
}

fn read_groups(root: &mut Section) -> Option<Groups> {
    let named = root.named_tables("upstreams", ANY_NAME)?;
    let mut groups = Vec::new();
    let names = named.iter().map(|(name, _)| name.clone()).collect();
    let mut failed = false;
    for (name, table) in named {
        let mut table = table.clone();
        let mut merged = GROUP_DEFAULTS_TABLE.clone();
        // `servers` has no default: a listing of keys reads an empty table.
        if root.listing() {
            table.insert("servers".to_owned(), Value::Array(Vec::new()));
        }
        overlay(&mut merged, table);
        let path = format!("upstreams.{name}");
        let group = root.nested(path, &merged, |s| {
            if name != ANY_NAME && !is_group_name(&name) {
                s.report_here(
                    "expected a name of lower-case letters, digits, '-' and '_' (it is a metric \
                     label)",
                );
                return None;
            }
            read_group(name.clone(), s)
        });
        match group {
            Some(group) => groups.push(group),
            None => failed = true,
        }
    }
    Some(Groups {
        groups,
        names,
        all_read: !failed,
    })
}

fn is_group_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

fn read_group(name: String, s: &mut Section) -> Option<UpstreamConfig> {
    let listing = s.listing();
    let servers = s.get("servers", |v| read_servers(v, listing));
    let balance = s.get("balance", |v| {
        let old = Balance::ALL
            .into_iter()
            .find(|balance| v.as_str() == Some(balance.old_spelling()));
        old.map_or_else(|| values::one_of(v, &Balance::ALL, Balance::as_str), Ok)
    });
    let health = s.child("health", read_health);
    let servers = servers?;
    if !servers.is_empty() && servers.iter().all(|server| server.backup) {
        s.report(
            "servers",
            "every server is a backup: at least one must not be",
        );
        return None;
    }
    Some(UpstreamConfig {
        name,
        servers,
        balance: balance?,
        health: health?,
    })
}

/// The servers of a group; `listing` (keys being listed) reads an empty list.
fn read_servers(value: &Value, listing: bool) -> Result<Vec<UpstreamServer>, String> {
    let Some(entries) = value.as_array() else {
        return Err(format!(
            "expected a list of servers like [{{ url = \"http://10.0.0.1:8080\", weight = 1 }}], \
             got {}",
            shown(value)
        ));
    };
    if entries.is_empty() && !listing {
        return Err("expected at least one server, got []".to_owned());
    }
    let mut servers: Vec<UpstreamServer> = Vec::with_capacity(entries.len());
    for (index, entry) in entries.iter().enumerate() {
        let server = read_server(entry).map_err(|problem| format!("[{index}]: {problem}"))?;
        if servers.iter().any(|other| other.url == server.url) {
            return Err(format!("[{index}]: {} is listed twice", server.url));
        }
        servers.push(server);
    }
    Ok(servers)
}

fn read_server(entry: &Value) -> Result<UpstreamServer, String> {
    let table = match entry {
        Value::String(_) => {
            return Ok(UpstreamServer {
                url: values::origin_url(entry)?,
                weight: 1,
                backup: false,
            });
        }
        Value::Table(table) => table,
        other => {
            return Err(format!(
                "expected a URL or a table with url, weight and backup, got {}",
                shown(other)
            ));
        }
    };
    if let Some(unknown) = table
        .keys()
        .find(|key| !matches!(key.as_str(), "url" | "weight" | "backup"))
    {
        return Err(format!(
            "{unknown}: unknown key (a server has url, weight and backup)"
        ));
    }
    let url = table
        .get("url")
        .ok_or_else(|| "url: missing".to_owned())
        .and_then(|url| values::origin_url(url).map_err(|problem| format!("url: {problem}")))?;
    let weight = match table.get("weight") {
        None => 1,
        Some(weight) => match values::count(weight) {
            Ok(n @ 1..=1000) => n as u32,
            _ => return Err(format!("weight: expected 1 to 1000, got {}", shown(weight))),
        },
    };
    let backup = match table.get("backup") {
        None => false,
        Some(backup) => values::boolean(backup).map_err(|problem| format!("backup: {problem}"))?,
    };
    Ok(UpstreamServer {
        url,
        weight,
        backup,
    })
}

fn read_health(s: &mut Section) -> Option<HealthConfig> {
    let max_fails = s.get("max_fails", small_count);
    let fail_timeout = s.get("fail_timeout", values::positive_duration);
    let probe_path = s.get("probe_path", |v| {
        let path = values::string(v)?;
        if path.is_empty() {
            return Ok(None);
        }
        match PathAndQuery::try_from(path.as_str()) {
            Ok(path) if path.as_str().starts_with('/') => Ok(Some(path)),
            _ => Err(format!(
                "expected a path like \"/health\", got {}",
                shown(v)
            )),
        }
    });
    let probe_interval = s.get("probe_interval", values::positive_duration);
    let probe_timeout = s.get("probe_timeout", values::positive_duration);
    let expect_status = s.get("expect_status", |v| match values::count(v) {
        Ok(status @ 100..=599) => Ok(status as u16),
        _ => Err(format!(
            "expected a status from 100 to 599, got {}",
            shown(v)
        )),
    });
    let rise = s.get("rise", at_least_one);
    let fall = s.get("fall", at_least_one);
    Some(HealthConfig {
        max_fails: max_fails?,
        fail_timeout: fail_timeout?,
        probe_path: probe_path?,
        probe_interval: probe_interval?,
        probe_timeout: probe_timeout?,
        expect_status: expect_status?,
        rise: rise?,
        fall: fall?,
    })
}

fn small_count(value: &Value) -> Result<u32, String> {
    let n = values::count(value)?;
    u32::try_from(n).map_err(|_| format!("{n} is too large"))
}

fn at_least_one(value: &Value) -> Result<u32, String> {
    match small_count(value)? {
        0 => Err("must be at least 1, got 0".to_owned()),
        n => Ok(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn errors(text: &str) -> String {
        match Config::from_toml_str(text) {
            Ok(_) => panic!("accepted:\n{text}"),
            Err(errors) => errors.to_string(),
        }
    }

    #[test]
    fn the_group_defaults_are_a_valid_group() {
        assert_eq!(GROUP_DEFAULTS.health.max_fails, 1);
        assert_eq!(GROUP_DEFAULTS.balance, Balance::RoundRobin);
    }

    #[test]
    fn a_file_without_upstreams_has_one_group_of_the_origin_url() {
        let config =
            Config::from_toml_str("[origin]\nurl = \"http://10.0.0.1:80\"").expect("valid");
        assert_eq!(config.upstreams, None);
        let upstreams = config.upstreams();
        assert_eq!(upstreams.groups.len(), 1);
        assert_eq!(upstreams.groups[0].servers[0].url, "http://10.0.0.1:80/");
        assert_eq!(upstreams.groups[0].health.max_fails, 0);
        assert_eq!(upstreams.routes, vec![default_route(IMPLICIT_GROUP)]);
    }

    #[test]
    fn groups_and_routes_are_read_with_their_defaults() {
        let config = Config::from_toml_str(
            r#"
            [upstreams.a]
            servers = [{ url = "http://127.0.0.1:8081", weight = 3 }, "https://b.internal", { url = "http://127.0.0.1:8083", backup = true }]
            balance = "least-outstanding"
            [upstreams.a.health]
            probe_path = "/health"
            [upstreams.b]
            servers = ["http://127.0.0.1:8084"]
            [[routes]]
            host = "*.Example.com"
            path_prefix = "/img/"
            upstream = "b"
            [[routes]]
            upstream = "a"
            early_hints = ["</app.css>; rel=preload; as=style"]
            "#,
        )
        .expect("valid");
        let upstreams = config.upstreams();
        assert_eq!(
            upstreams.routes[1].early_hints.as_ref(),
            [http::HeaderValue::from_static(
                "</app.css>; rel=preload; as=style"
            )]
        );
        assert!(upstreams.routes[0].early_hints.is_empty());
        let a = &upstreams.groups[0];
        assert_eq!(a.servers[0].weight, 3);
        assert!(a.servers[2].backup);
        assert_eq!(a.balance, Balance::LeastOutstanding);
        assert_eq!(
            a.health.probe_path.as_ref().map(|p| p.as_str()),
            Some("/health")
        );
        assert_eq!(a.health.rise, 2);
        assert_eq!(upstreams.groups[1].balance, Balance::RoundRobin);
        let host = upstreams.routes[0].host.as_ref().expect("a host");
        assert!(host.matches("img.example.com"));
        assert!(!host.matches("example.com"));
        assert!(upstreams.any_https());
    }

    #[test]
    fn a_route_is_checked_even_when_a_group_has_errors() {
        let found = errors(
            "[upstreams.a]\nservers = [\"http://127.0.0.1:1/app\"]\n[[routes]]\nupstream = \"b\"",
        );
        assert!(found.contains("upstreams.a.servers: [0]"), "{found}");
        assert!(
            found.contains("routes[0].upstream: no upstream group \"b\""),
            "{found}"
        );
    }

    #[test]
    fn every_bad_field_is_refused_naming_its_key() {
        let group = "[upstreams.a]\nservers = [\"http://127.0.0.1:1\"]\n";
        let cases = [
            (
                format!("{group}[[routes]]\nupstream = \"nope\""),
                "routes[0].upstream: no upstream group \"nope\"",
            ),
            (
                format!(
                    "{group}[[routes]]\nhost = \"*.example.com\"\nupstream = \"a\"\n\
                     [[routes]]\nhost = \"a.example.com\"\npath_prefix = \"/x/\"\nupstream = \"a\"\n\
                     [[routes]]\nupstream = \"a\""
                ),
                "routes[1]: overlaps routes[0]",
            ),
            (
                format!("{group}[[routes]]\nhost = \"a.example\"\nupstream = \"a\""),
                "routes[0]: the last route must take every request",
            ),
            (
                "[upstreams.a]\nservers = [\"http://127.0.0.1:1/app\"]".to_owned(),
                "upstreams.a.servers: [0]: the origin URL must not have a path",
            ),
            (
                "[upstreams.a]\nservers = [{ url = \"http://127.0.0.1:1\", weight = 0 }]"
                    .to_owned(),
                "upstreams.a.servers: [0]: weight: expected 1 to 1000",
            ),
            (
                "[upstreams.a]\nservers = [{ url = \"http://127.0.0.1:1\", backup = true }]"
                    .to_owned(),
                "upstreams.a.servers: every server is a backup",
            ),
            (
                format!("{group}balance = \"random\""),
                "upstreams.a.balance: expected one of",
            ),
            (
                format!("{group}[upstreams.a.health]\nrise = 0"),
                "upstreams.a.health.rise: must be at least 1",
            ),
            (
                format!("{group}[upstreams.a.health]\nprobe_path = \"health\""),
                "upstreams.a.health.probe_path: expected a path",
            ),
            (
                format!("{group}[upstreams.a.health]\nfails = 2"),
                "upstreams.a.health.fails: unknown key",
            ),
            (
                "[upstreams.A]\nservers = [\"http://127.0.0.1:1\"]".to_owned(),
                "upstreams.A: expected a name",
            ),
            (
                format!("{group}[upstreams.b]\nservers = [\"http://127.0.0.1:2\"]"),
                "routes: missing",
            ),
            (
                format!("{group}[origin]\nurl = \"http://127.0.0.1:3\""),
                "origin.url: given with [upstreams]",
            ),
            (
                "[[routes]]\nupstream = \"a\"".to_owned(),
                "routes: given without any [upstreams.NAME]",
            ),
            (
                format!("{group}[[routes]]\nupstream = \"a\"\nearly_hints = [\"/app.css\"]"),
                "routes[0].early_hints: \"/app.css\" is not a Link value",
            ),
            (
                format!("{group}[[routes]]\nupstream = \"a\"\nearly_hints = [\"</a>\\r\\nx: y\"]"),
                "routes[0].early_hints: \"</a>\\r\\nx: y\" is not a Link value",
            ),
            (
                format!("{group}[[routes]]\nupstream = \"a\"\nearly_hints = \"</a>\""),
                "routes[0].early_hints: expected a list of Link values",
            ),
        ];
        for (text, expected) in cases {
            let found = errors(&text);
            assert!(
                found.contains(expected),
                "{text}\nexpected {expected:?}, got:\n{found}"
            );
        }
    }
}
