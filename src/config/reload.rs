//! A reload's rule, read from the key table: which changed keys a reload applies, which keep
//! their running values until a restart, and the configuration then in force.

use std::collections::BTreeMap;

use toml::{Table, Value};

use super::keys::{self, ReloadClass};
use super::{Config, ConfigErrors};

/// What reloading a file changes in a running proxy.
#[derive(Clone, Debug, PartialEq)]
pub struct Reload {
    /// The configuration in force after the reload: the file's, with every key that needs a
    /// restart as the running proxy has it.
    pub config: Config,
    /// Keys whose new values are in force, in the table's order.
    pub applied: Vec<&'static str>,
    /// Keys the file changes that keep their running values until a restart.
    pub need_restart: Vec<&'static str>,
}

impl Config {
    /// Compares `file` with this running configuration key by key, as [`keys::KEYS`] classes
    /// them. Fails when a new value cannot work beside a running one that needs a restart to
    /// change (a `cache.max_object_bytes` above the running `cache.max_bytes`).
    pub fn reload(&self, file: &Config) -> Result<Reload, ConfigErrors> {
        let running = self.to_toml().parse::<Table>().map_err(syntax)?;
        let text = file.to_toml();
        let mut merged = text.parse::<Table>().map_err(syntax)?;
        let (was, now) = (values(&running), values(&merged));
        let mut applied = Vec::new();
        let mut need_restart = Vec::new();
        for key in keys::KEYS {
            if was.get(key.name) == now.get(key.name) {
                continue;
            }
            match key.reload {
                ReloadClass::Applied => applied.push(key.name),
                ReloadClass::Restart => need_restart.push(key.name),
            }
        }
        for &key in &need_restart {
            keep_running(&mut merged, &running, key);
        }
        let config = Config::from_toml_str(&merged.to_string())?;
        Ok(Reload {
            config,
            applied,
            need_restart,
        })
    }
}

/// A config written by [`Config::to_toml`] is TOML; this is for the impossible case.
fn syntax(error: toml::de::Error) -> ConfigErrors {
    ConfigErrors::new(vec![super::ConfigError::Unreadable {
        reason: error.to_string(),
    }])
}

/// Every value of a config table by the key table's name: a group's keys and a route's are one
/// list of (group or route, value) per key, so that a renamed group or a reordered route is a
/// change.
fn values(table: &Table) -> BTreeMap<String, Vec<(String, Value)>> {
    let mut found = BTreeMap::new();
    for (name, value) in table {
        match (name.as_str(), value) {
            ("upstreams", Value::Table(groups)) => {
                for (group, table) in groups {
                    if let Value::Table(table) = table {
                        leaves(table, "upstreams.<name>", group, &mut found);
                    }
                }
            }
            ("routes", Value::Array(routes)) => {
                for (index, route) in routes.iter().enumerate() {
                    if let Value::Table(route) = route {
                        leaves(route, "routes[]", &index.to_string(), &mut found);
                    }
                }
            }
            (_, Value::Table(inner)) => leaves(inner, name, "", &mut found),
            (_, value) => push(&mut found, name.to_owned(), "", value),
        }
    }
    found
}

fn leaves(
    table: &Table,
    prefix: &str,
    instance: &str,
    found: &mut BTreeMap<String, Vec<(String, Value)>>,
) {
    for (name, value) in table {
        let dotted = format!("{prefix}.{name}");
        match value {
            // A key whose value is a table (`routes[].cache.override_ttl`) is one value.
            Value::Table(inner) if keys::key(&dotted).is_none() => {
                leaves(inner, &dotted, instance, found)
            }
            value => push(found, dotted, instance, value),
        }
    }
}

fn push(
    found: &mut BTreeMap<String, Vec<(String, Value)>>,
    key: String,
    instance: &str,
    value: &Value,
) {
    found
        .entry(key)
        .or_default()
        .push((instance.to_owned(), value.clone()));
}

/// Sets `key` of `table` back to its value in `running`. `server.tls.listen` stands for the
/// whole `[server.tls]` table's presence: a listener is neither opened nor closed by a reload.
fn keep_running(table: &mut Table, running: &Table, key: &str) {
    let path: Vec<&str> = key.split('.').collect();
    let Some((leaf, tables)) = path.split_last() else {
        return;
    };
    if key == "server.tls.listen" {
        let running_tls = child(running, &["server"]).and_then(|server| server.get("tls"));
        let Some(server) = child_mut(table, &["server"]) else {
            return;
        };
        match (running_tls, server.get_mut("tls")) {
            (Some(Value::Table(was)), Some(Value::Table(now))) => {
                if let Some(listen) = was.get("listen") {
                    now.insert("listen".to_owned(), listen.clone());
                }
            }
            (Some(was), _) => {
                server.insert("tls".to_owned(), was.clone());
            }
            (None, _) => {
                server.remove("tls");
            }
        }
        return;
    }
    let was = child(running, tables).and_then(|parent| parent.get(*leaf));
    if let Some(parent) = child_mut(table, tables) {
        match was {
            Some(value) => parent.insert((*leaf).to_owned(), value.clone()),
            None => parent.remove(*leaf),
        };
    }
}

fn child<'t>(table: &'t Table, path: &[&str]) -> Option<&'t Table> {
    path.iter()
        .try_fold(table, |table, name| table.get(*name)?.as_table())
}

fn child_mut<'t>(table: &'t mut Table, path: &[&str]) -> Option<&'t mut Table> {
    path.iter()
        .try_fold(table, |table, name| table.get_mut(*name)?.as_table_mut())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        Config::from_toml_str(text).unwrap_or_else(|errors| panic!("{text}: {errors}"))
    }

    #[test]
    fn a_reload_compares_the_file_with_what_runs_not_with_the_last_file() {
        let started = config("[server]\nlisten = \"127.0.0.1:8080\"");
        let moved = started
            .reload(&config("[server]\nlisten = \"127.0.0.1:7000\""))
            .expect("valid");
        assert_eq!(moved.need_restart, ["server.listen"]);
        assert!(moved.applied.is_empty());
        assert_eq!(moved.config.server.listen, started.server.listen);
        let other = moved
            .config
            .reload(&config(
                "[server]\nlisten = \"127.0.0.1:7000\"\n[cache]\ntargeted_fields = []",
            ))
            .expect("valid");
        assert_eq!(
            other.need_restart,
            ["server.listen"],
            "still listening on the old address"
        );
        assert_eq!(other.applied, ["cache.targeted_fields"]);
        assert!(other.config.cache.targeted_fields.is_empty());
        let back = other
            .config
            .reload(&config("[cache]\ntargeted_fields = []"))
            .expect("valid");
        assert!(back.need_restart.is_empty(), "{:?}", back.need_restart);
        assert!(back.applied.is_empty(), "{:?}", back.applied);
    }

    #[test]
    fn every_key_of_the_table_is_compared() {
        let defaults = Config::defaults();
        let unchanged = defaults.reload(&defaults).expect("valid");
        assert!(unchanged.applied.is_empty() && unchanged.need_restart.is_empty());
        let listed = values(&defaults.to_toml().parse().expect("TOML"));
        for name in listed.keys() {
            assert!(keys::key(name).is_some(), "{name} is not in the key table");
        }
    }

    #[test]
    fn an_https_listener_is_neither_opened_nor_closed_by_a_reload() {
        let plain = Config::defaults();
        let tls =
            "[server.tls]\nlisten = \"127.0.0.1:8443\"\ncert_file = \"/c\"\nkey_file = \"/k\"";
        let opened = plain.reload(&config(tls)).expect("valid");
        assert_eq!(
            opened.need_restart,
            ["server.tls.listen"],
            "{:?}",
            opened.applied
        );
        assert_eq!(opened.config.server.tls, None);
        let with_tls = config(tls);
        let closed = with_tls.reload(&plain).expect("valid");
        assert_eq!(closed.need_restart, ["server.tls.listen"]);
        assert_eq!(closed.config.server.tls, with_tls.server.tls);
        let renewed = with_tls
            .reload(&config(&tls.replace("/c", "/new-cert")))
            .expect("valid");
        assert_eq!(renewed.applied, ["server.tls.cert_file"]);
        assert!(renewed.need_restart.is_empty());
    }

    #[test]
    fn a_new_value_that_cannot_work_beside_a_running_one_is_refused() {
        let small = config("[cache]\nmax_bytes = \"16MiB\"\nmax_object_bytes = \"1MiB\"");
        let errors = small
            .reload(&config(
                "[cache]\nmax_bytes = \"1GiB\"\nmax_object_bytes = \"32MiB\"",
            ))
            .expect_err("32MiB objects in a 16MiB cache");
        assert!(
            errors.to_string().contains("cache.max_object_bytes"),
            "{errors}"
        );
    }
}
