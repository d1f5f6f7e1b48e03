//! A group's servers and how one is picked for a request: among the servers in rotation (the
//! backups only when no other is), by weighted round-robin, fewest outstanding requests per
//! weight, or a rendezvous hash of the cache key.

use std::hash::Hasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use siphasher::sip::SipHasher13;

use super::health::now_ms;
use super::server::Server;
use crate::config::Balance;

pub struct Group {
    pub name: Arc<str>,
    pub servers: Vec<Arc<Server>>,
    balance: Balance,
    /// The round-robin position, and the tie-breaker of least-outstanding.
    next: AtomicUsize,
}

impl Group {
    pub fn new(name: &str, servers: Vec<Arc<Server>>, balance: Balance) -> Group {
        Group {
            name: name.into(),
            servers,
            balance,
            next: AtomicUsize::new(0),
        }
    }

    /// The server for a request whose cache key is `key`, other than `avoid` (a retry's first
    /// server); `None` when no server is in rotation.
    pub fn pick(&self, key: &str, avoid: Option<&Server>) -> Option<&Arc<Server>> {
        let now = now_ms();
        let usable = |server: &&Arc<Server>| {
            avoid.is_none_or(|avoid| !std::ptr::eq(avoid, server.as_ref())) && server.available(now)
        };
        let primary = |server: &&Arc<Server>| !server.backup && usable(server);
        let backup = |server: &&Arc<Server>| server.backup && usable(server);
        if let [only] = self.servers.as_slice() {
            return usable(&only).then_some(only);
        }
        self.pick_among(key, primary)
            .or_else(|| self.pick_among(key, backup))
    }

    fn pick_among(
        &self,
        key: &str,
        eligible: impl Fn(&&Arc<Server>) -> bool,
    ) -> Option<&Arc<Server>> {
        match self.balance {
            Balance::RoundRobin => {
                let total: u64 = self
                    .servers
                    .iter()
                    .filter(&eligible)
                    .map(|server| u64::from(server.weight))
                    .sum();
                if total == 0 {
                    return None;
                }
                let turn = self.next.fetch_add(1, Ordering::Relaxed) as u64 % total;
                let mut passed = 0;
                self.servers.iter().filter(&eligible).find(|server| {
                    passed += u64::from(server.weight);
                    turn < passed
                })
            }
            Balance::LeastOutstanding => {
                // Start the scan at a turning position, so that ties (an idle group) rotate.
                let start = self.next.fetch_add(1, Ordering::Relaxed) % self.servers.len();
                let (later, earlier) = self.servers.split_at(start);
                earlier
                    .iter()
                    .chain(later)
                    .filter(&eligible)
                    .min_by(|a, b| {
                        // a.outstanding / a.weight against b's, without division.
                        let load = |s: &Server| s.state.outstanding.load(Ordering::Relaxed) as u64;
                        (load(a) * u64::from(b.weight)).cmp(&(load(b) * u64::from(a.weight)))
                    })
            }
            Balance::ConsistentHash => self
                .servers
                .iter()
                .filter(&eligible)
                .map(|server| (rendezvous(key, server), server))
                .max_by(|(a, _), (b, _)| a.total_cmp(b))
                .map(|(_, server)| server),
        }
    }
}

/// A fixed hash of a text: the same in every process and every run, so that every bloomgate of a
/// tier sends a key to the same server.
pub fn seed(text: &str) -> u64 {
    let mut hasher = SipHasher13::new_with_keys(0, 0);
    hasher.write(text.as_bytes());
    hasher.finish()
}

/// The weighted rendezvous score of `server` for `key`: `-weight / ln(u)`, with `u` uniform in
/// (0, 1] from the key hashed under the server's own seed (Schindelhauer and Schomaker, "Weighted
/// distributed hash tables", 2005), so a server gets keys in proportion to its weight and only
/// its own keys move when it leaves.
fn rendezvous(key: &str, server: &Server) -> f64 {
    let mut hasher = SipHasher13::new_with_keys(server.seed, 0);
    hasher.write(key.as_bytes());
    // 53 bits of the hash, as a float in (0, 1].
    let unit = ((hasher.finish() >> 11) + 1) as f64 / (1u64 << 53) as f64;
    -f64::from(server.weight) / unit.ln()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::config::{HealthConfig, UpstreamServer};
    use crate::proxy::upstream::health::ServerState;

    fn group(balance: Balance, weights: &[(u32, bool)]) -> Group {
        let health = HealthConfig {
            max_fails: 1,
            fail_timeout: std::time::Duration::from_secs(60),
            probe_path: None,
            probe_interval: std::time::Duration::from_secs(1),
            probe_timeout: std::time::Duration::from_secs(1),
            expect_status: 200,
            rise: 1,
            fall: 1,
        };
        let servers = weights
            .iter()
            .enumerate()
            .map(|(index, &(weight, backup))| {
                let config = UpstreamServer {
                    url: format!("http://10.0.0.{index}:80").parse().expect("url"),
                    weight,
                    backup,
                };
                Arc::new(Server::new(
                    "test",
                    &config,
                    &health,
                    Arc::new(ServerState::default()),
                ))
            })
            .collect();
        Group::new("test", servers, balance)
    }

    fn counts(group: &Group, picks: usize) -> Vec<usize> {
        let mut counts = vec![0; group.servers.len()];
        for n in 0..picks {
            let server = group.pick(&format!("k{n}"), None).expect("a server");
            let index = group
                .servers
                .iter()
                .position(|s| Arc::ptr_eq(s, server))
                .expect("one of the group's");
            counts[index] += 1;
        }
        counts
    }

    #[test]
    fn round_robin_follows_the_weights() {
        let group = group(Balance::RoundRobin, &[(1, false), (3, false), (1, true)]);
        assert_eq!(counts(&group, 400), vec![100, 300, 0]);
    }

    #[test]
    fn a_server_out_of_rotation_gets_nothing_and_backups_stand_in_last() {
        let group = group(Balance::RoundRobin, &[(1, false), (1, false), (1, true)]);
        group.servers[0].failed(super::super::server::ErrorKind::Connect);
        assert_eq!(counts(&group, 10), vec![0, 10, 0]);
        group.servers[1].failed(super::super::server::ErrorKind::Timeout);
        assert_eq!(counts(&group, 10), vec![0, 0, 10]);
        group.servers[2].failed(super::super::server::ErrorKind::Tls);
        assert!(group.pick("k", None).is_none());
    }

    #[test]
    fn a_retry_avoids_the_server_that_failed() {
        let group = group(Balance::ConsistentHash, &[(1, false), (1, false)]);
        let first = Arc::clone(group.pick("k", None).expect("a server"));
        let second = group.pick("k", Some(&first)).expect("another server");
        assert!(!Arc::ptr_eq(&first, second));
    }

    #[test]
    fn least_outstanding_prefers_the_idle_server() {
        let group = group(
            Balance::LeastOutstanding,
            &[(1, false), (1, false), (1, false)],
        );
        let _busy = [group.servers[0].begin(), group.servers[2].begin()];
        assert_eq!(counts(&group, 5), vec![0, 5, 0]);
        let _busier = group.servers[1].begin();
        let _again = group.servers[1].begin();
        assert_eq!(counts(&group, 1).iter().sum::<usize>(), 1);
        assert_eq!(counts(&group, 4)[1], 0, "the busiest waits");
    }

    #[test]
    fn the_consistent_hash_moves_only_the_keys_of_a_server_that_leaves() {
        let group = group(
            Balance::ConsistentHash,
            &[(1, false), (1, false), (2, false)],
        );
        let keys: Vec<String> = (0..3000).map(|n| format!("site.example/{n}")).collect();
        let before: HashMap<&str, String> = keys
            .iter()
            .map(|k| {
                (
                    k.as_str(),
                    group.pick(k, None).expect("a server").label.to_string(),
                )
            })
            .collect();
        let share = before.values().filter(|s| s.ends_with(".2:80")).count();
        assert!(
            (1350..1650).contains(&share),
            "weight 2 of 4 got {share} of 3000"
        );
        group.servers[0].failed(super::super::server::ErrorKind::Connect);
        for key in &keys {
            let now = group.pick(key, None).expect("a server").label.to_string();
            if !before[key.as_str()].ends_with(".0:80") {
                assert_eq!(
                    now,
                    before[key.as_str()],
                    "{key} moved off a server that stayed"
                );
            }
        }
    }
}
