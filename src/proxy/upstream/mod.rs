//! Upstream groups and routes: which group a request goes to (by host and path prefix, the
//! first route that matches), the group's servers and their health, and the probes that check
//! them. Built anew for each configuration; a server the new one keeps (same group, same URL)
//! keeps its health state.

mod balance;
mod health;
pub(crate) mod origin;
mod pool;
mod probe;
mod route_path;
mod server;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::config::{CachePolicy, Config, HealthConfig, HostPattern, Upstreams};
use crate::telemetry::RouteSeries;

pub use balance::Group;
pub use server::{ErrorKind, Server, label};

use health::ServerState;

/// Where a route leads: its name, its upstream group and its cache policy.
pub struct Routed {
    pub name: Arc<str>,
    pub group: Arc<Group>,
    pub policy: Arc<CachePolicy>,
    /// The `Link` values of its `103 Early Hints` (`routes[].early_hints`).
    pub early_hints: Arc<[http::HeaderValue]>,
    /// Its requests and bytes (the `route` label).
    pub series: RouteSeries,
}

/// The groups and routes of one configuration.
pub struct Routing {
    groups: Vec<Arc<Group>>,
    /// Each route's host, path prefix, and where it leads.
    routes: Vec<(Option<HostPattern>, String, Arc<Routed>)>,
    /// What a request no route matches gets (never, in a valid configuration): the first group
    /// and the RFC's policy.
    fallback: Arc<Routed>,
    /// Each group's health settings, in the order of `groups`, for its probes.
    health: Vec<HealthConfig>,
    /// The probe tasks of this configuration, stopped when another replaces it.
    probes: Mutex<Vec<tokio::task::AbortHandle>>,
}

impl Routing {
    /// The routing of `config`; servers found in `old` (same group, same URL) keep its state.
    pub fn new(config: &Config, old: Option<&Routing>) -> Routing {
        let upstreams: std::borrow::Cow<'_, Upstreams> = config.upstreams();
        let mut states: HashMap<(&str, &str), &Arc<ServerState>> = HashMap::new();
        if let Some(old) = old {
            for group in &old.groups {
                for server in &group.servers {
                    states.insert((&group.name, &server.label), &server.state);
                }
            }
        }
        let groups: Vec<Arc<Group>> = upstreams
            .groups
            .iter()
            .map(|group| {
                let servers = group
                    .servers
                    .iter()
                    .map(|server| {
                        let label = server::label(&server.url);
                        let state = states
                            .get(&(group.name.as_str(), label.as_str()))
                            .map_or_else(Arc::default, |state| Arc::clone(state));
                        Arc::new(Server::new(&group.name, server, &group.health, state))
                    })
                    .collect();
                Arc::new(Group::new(&group.name, servers, group.balance))
            })
            .collect();
        let routes: Vec<(Option<HostPattern>, String, Arc<Routed>)> = upstreams
            .routes
            .iter()
            .filter_map(|route| {
                let group = groups.iter().find(|g| *g.name == route.upstream)?;
                let routed = Arc::new(Routed {
                    name: Arc::from(route.name.as_str()),
                    group: Arc::clone(group),
                    policy: Arc::clone(&route.cache),
                    early_hints: Arc::clone(&route.early_hints),
                    series: RouteSeries::new(&route.name),
                });
                Some((route.host.clone(), route.path_prefix.clone(), routed))
            })
            .collect();
        // A valid configuration's last route takes every request; this stands in for it otherwise.
        let fallback = match routes.last() {
            Some((_, _, last)) => Arc::clone(last),
            None => Arc::new(Routed {
                name: Arc::from("default"),
                group: Arc::clone(&groups[0]),
                policy: Arc::new(CachePolicy::rfc()),
                early_hints: Arc::new([]),
                series: RouteSeries::new("default"),
            }),
        };
        Routing {
            groups,
            routes,
            fallback,
            health: upstreams.groups.iter().map(|g| g.health.clone()).collect(),
            probes: Mutex::new(Vec::new()),
        }
    }

    /// The group of a request for `authority` (`host[:port]`, lower case) and `path`: the first
    /// route that matches. The last route of a valid configuration matches every request.
    pub fn route(&self, authority: &str, path: &str) -> &Arc<Group> {
        &self.routed(authority, path).group
    }

    /// The route a request for `authority` and `path` takes: the first that matches (the last
    /// route of a valid configuration matches every request).
    pub fn routed(&self, authority: &str, path: &str) -> &Arc<Routed> {
        let host = host_of(authority);
        let path = route_path::route_path(path);
        let found = self.routes.iter().find(|(pattern, prefix, _)| {
            pattern.as_ref().is_none_or(|p| p.matches(host)) && path.starts_with(prefix.as_str())
        });
        match found {
            Some((_, _, routed)) => routed,
            None => &self.fallback,
        }
    }

    /// Every route's name, in order.
    pub fn route_names(&self) -> impl Iterator<Item = &Arc<str>> {
        self.routes.iter().map(|(_, _, routed)| &routed.name)
    }

    /// Starts the probes of every group that has a probe path, on the current runtime.
    pub fn start_probes(&self, client: &origin::OriginClient) {
        let mut probes = self.probes.lock().unwrap_or_else(|p| p.into_inner());
        for (group, health) in self.groups.iter().zip(&self.health) {
            let Some(path) = &health.probe_path else {
                continue;
            };
            for server in &group.servers {
                // A server URL has a scheme and an authority, and the path was checked when read.
                let Ok(uri) = server.uri_for(path.clone()) else {
                    tracing::error!(server = %server.label, %path, "no probe URI; not probed");
                    continue;
                };
                let probe = probe::run(Arc::clone(server), client.clone(), uri, health.clone());
                probes.push(tokio::spawn(probe).abort_handle());
            }
        }
    }

    /// Ends every passive hold that has run out, each counted and logged as a return: the health
    /// gauges then follow the clock rather than the traffic (a scrape calls it, so an idle group's
    /// gauge comes back without a request).
    pub fn end_expired_holds(&self) {
        let now = health::now_ms();
        for server in self.groups.iter().flat_map(|group| &group.servers) {
            server.available(now);
        }
    }

    /// Stops this configuration's probes (another configuration's take over).
    pub fn stop_probes(&self) {
        let probes = self.probes.lock().unwrap_or_else(|p| p.into_inner());
        for probe in probes.iter() {
            probe.abort();
        }
    }
}

impl Drop for Routing {
    fn drop(&mut self) {
        self.stop_probes();
    }
}

/// The host of an authority, without its port: `[::1]:80` is `[::1]`, `a.example:8080` is
/// `a.example`.
fn host_of(authority: &str) -> &str {
    match authority.strip_prefix('[') {
        Some(_) => authority
            .find(']')
            .map_or(authority, |end| &authority[..=end]),
        None => authority.split(':').next().unwrap_or(authority),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routing(text: &str) -> Routing {
        let config = Config::from_toml_str(text).expect("valid");
        Routing::new(&config, None)
    }

    const TWO_SITES: &str = r#"
        [upstreams.a]
        servers = ["http://127.0.0.1:1"]
        [upstreams.b]
        servers = ["http://127.0.0.1:2"]
        [upstreams.img]
        servers = ["http://127.0.0.1:3"]
        [[routes]]
        host = "*.b.example"
        path_prefix = "/img/"
        upstream = "img"
        [[routes]]
        host = "b.example"
        upstream = "b"
        [[routes]]
        host = "*.b.example"
        upstream = "b"
        [[routes]]
        upstream = "a"
    "#;

    #[test]
    fn the_first_route_that_matches_host_and_path_wins() {
        let routing = routing(TWO_SITES);
        let group = |authority, path| routing.route(authority, path).name.to_string();
        assert_eq!(group("b.example", "/img/x"), "b");
        assert_eq!(group("www.b.example:8080", "/img/x"), "img");
        assert_eq!(group("www.b.example", "/index"), "b");
        assert_eq!(group("a.example", "/img/x"), "a");
        assert_eq!(group("[::1]:80", "/"), "a");
    }

    #[test]
    fn a_server_kept_by_a_new_configuration_keeps_its_health() {
        let old = routing(TWO_SITES);
        old.groups[0].servers[0].failed(ErrorKind::Connect);
        let new = Routing::new(
            &Config::from_toml_str(&TWO_SITES.replace("127.0.0.1:2", "127.0.0.1:4"))
                .expect("valid"),
            Some(&old),
        );
        assert!(Arc::ptr_eq(
            &old.groups[0].servers[0].state,
            &new.groups[0].servers[0].state
        ));
        assert!(new.groups[0].pick("k", None).is_none(), "still out");
        assert!(!Arc::ptr_eq(
            &old.groups[1].servers[0].state,
            &new.groups[1].servers[0].state
        ));
    }

    #[test]
    fn hosts_lose_their_port() {
        assert_eq!(host_of("a.example:8080"), "a.example");
        assert_eq!(host_of("a.example"), "a.example");
        assert_eq!(host_of("[::1]:80"), "[::1]");
    }
}
