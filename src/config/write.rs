//! Writing a `Config` back as a config file, for a process that must run on the same configuration.

use std::fmt::Display;
use std::time::Duration;

use toml::{Table, Value};

use super::size::format_size;
use super::{
    AdmissionConfig, CacheConfig, CacheKeyConfig, CachePolicy, Conditions, Config, DiskConfig,
    LogConfig, ORIGIN_IGNORES, OriginConfig, ServerConfig, Upstreams,
};

impl Config {
    /// The whole configuration as config-file text, every key written out, so that
    /// [`Config::from_toml_str`] reads it back as this same `Config`.
    pub fn to_toml(&self) -> String {
        let Config {
            server,
            origin,
            cache,
            admission,
            disk,
            admin,
            log,
            upstreams,
        } = self;
        let mut root: Table = [
            ("server", server_table(server)),
            ("origin", origin_table(origin)),
            ("cache", cache_table(cache)),
            ("admission", admission_table(admission)),
            ("disk", disk_table(disk)),
            ("admin", table([("listen", text(admin.listen))])),
            ("log", log_table(log)),
        ]
        .into_iter()
        .map(|(name, table)| (name.to_owned(), table))
        .collect();
        if let Some(upstreams) = upstreams {
            // The groups replace origin.url, which may not be given beside them.
            if let Some(Value::Table(origin)) = root.get_mut("origin") {
                origin.remove("url");
            }
            root.insert("upstreams".to_owned(), groups(upstreams));
            root.insert("routes".to_owned(), routes(upstreams));
        }
        root.to_string()
    }
}

/// `[server]`, with `[server.tls]` when it listens for TLS.
fn server_table(server: &ServerConfig) -> Value {
    let tls = server.tls.as_ref().map(|tls| {
        table([
            ("listen", text(tls.listen)),
            ("cert_file", text(tls.cert_file.display())),
            ("key_file", text(tls.key_file.display())),
        ])
    });
    let mut server = table([
        ("listen", text(server.listen)),
        ("max_connections", count(server.max_connections)),
        ("header_read_timeout", duration(server.header_read_timeout)),
        ("idle_timeout", duration(server.idle_timeout)),
        ("send_timeout", duration(server.send_timeout)),
        ("stream_send_timeout", duration(server.stream_send_timeout)),
        ("max_header_bytes", size(server.max_header_bytes as u64)),
        ("shutdown_grace", duration(server.shutdown_grace)),
        (
            "purge_allowed_networks",
            texts(&server.purge_allowed_networks),
        ),
        ("http1", text(server.http1.as_str())),
        ("sendfile", Value::Boolean(server.sendfile)),
    ]);
    if let (Value::Table(server), Some(tls)) = (&mut server, tls) {
        server.insert("tls".to_owned(), tls);
    }
    server
}

/// `[origin]`.
fn origin_table(origin: &OriginConfig) -> Value {
    table([
        ("url", text(&origin.url)),
        ("ca_file", text(optional_path(origin.ca_file.as_deref()))),
        (
            "tls_server_name",
            text(origin.tls_server_name.as_deref().unwrap_or_default()),
        ),
        ("connect_timeout", duration(origin.connect_timeout)),
        ("first_byte_timeout", duration(origin.first_byte_timeout)),
        ("idle_timeout", duration(origin.idle_timeout)),
        ("pool_idle_timeout", duration(origin.pool_idle_timeout)),
        (
            "pool_max_idle_per_host",
            count(origin.pool_max_idle_per_host),
        ),
        ("preserve_host", Value::Boolean(origin.preserve_host)),
        (
            "trusted_forwarding_headers",
            texts(&origin.trusted_forwarding_headers),
        ),
    ])
}

/// `[cache]`.
fn cache_table(cache: &CacheConfig) -> Value {
    let key = key_table(&cache.key);
    let slice_above = cache.slice_above;
    let mut cache = table([
        ("max_bytes", size(cache.max_bytes)),
        ("max_object_bytes", size(cache.max_object_bytes)),
        ("max_variants", count(cache.max_variants)),
        (
            "targeted_fields",
            Value::Array(
                cache
                    .targeted_fields
                    .iter()
                    .map(|name| text(name.as_str()))
                    .collect(),
            ),
        ),
        (
            "forward_targeted_fields",
            Value::Boolean(cache.forward_targeted_fields),
        ),
        ("tag_header", text(cache.tag_header.as_str())),
        (
            "forward_tag_header",
            Value::Boolean(cache.forward_tag_header),
        ),
        ("tag_purge_keep", duration(cache.tag_purge_keep)),
        ("slice_bytes", size(cache.slice_bytes)),
        ("key", key),
    ]);
    if let (Value::Table(cache), Some(above)) = (&mut cache, slice_above) {
        cache.insert("slice_above".to_owned(), size(above));
    }
    cache
}

/// `[admission]`.
fn admission_table(admission: &AdmissionConfig) -> Value {
    // The file says "no snapshot" with an empty path.
    let snapshot_path = optional_path(admission.snapshot_path.as_deref());
    table([
        ("mode", text(admission.mode.as_str())),
        ("probation_share", Value::Float(admission.probation_share)),
        ("capacity", count(admission.doorkeeper.capacity)),
        ("target_fpr", Value::Float(admission.doorkeeper.target_fpr)),
        (
            "rotate_at_fpr",
            Value::Float(admission.doorkeeper.rotate_at_fpr),
        ),
        ("max_age", duration(admission.doorkeeper.max_age)),
        ("snapshot_path", text(snapshot_path)),
        ("snapshot_interval", duration(admission.snapshot_interval)),
    ])
}

/// `[disk]`.
fn disk_table(disk: &DiskConfig) -> Value {
    let disk_path = optional_path(disk.path.as_deref());
    table([
        ("path", text(disk_path)),
        ("max_bytes", size(disk.max_bytes)),
        ("block_bytes", size(disk.block_bytes)),
        ("write_buffer", size(disk.write_buffer)),
        ("write_budget", size(disk.write_budget)),
        ("mmap", Value::Boolean(disk.mmap)),
        ("sync", text(disk.sync.as_str())),
        (
            "verify_reads",
            text(if disk.verify_first_read_only {
                "first"
            } else {
                "every"
            }),
        ),
    ])
}

/// `[log]`.
fn log_table(log: &LogConfig) -> Value {
    // The file says "no access log" with an empty path, and standard output with "-".
    let access_path = log
        .access
        .path
        .as_ref()
        .map_or_else(String::new, ToString::to_string);
    table([
        ("level", text(&log.level)),
        (
            "access",
            table([
                ("path", text(access_path)),
                ("format", text(log.access.format.as_str())),
                ("buffer", size(log.access.buffer)),
            ]),
        ),
    ])
}

fn groups(upstreams: &Upstreams) -> Value {
    let groups = upstreams.groups.iter().map(|group| {
        let servers = group.servers.iter().map(|server| {
            table([
                ("url", text(&server.url)),
                ("weight", count(server.weight)),
                ("backup", Value::Boolean(server.backup)),
            ])
        });
        let health = &group.health;
        let probe_path = health.probe_path.as_ref().map_or("", |path| path.as_str());
        let health = table([
            ("max_fails", count(health.max_fails)),
            ("fail_timeout", duration(health.fail_timeout)),
            ("probe_path", text(probe_path)),
            ("probe_interval", duration(health.probe_interval)),
            ("probe_timeout", duration(health.probe_timeout)),
            ("expect_status", count(health.expect_status)),
            ("rise", count(health.rise)),
            ("fall", count(health.fall)),
        ]);
        let group_table = table([
            ("servers", Value::Array(servers.collect())),
            ("balance", text(group.balance.as_str())),
            ("health", health),
        ]);
        (group.name.clone(), group_table)
    });
    Value::Table(groups.collect())
}

fn routes(upstreams: &Upstreams) -> Value {
    let routes = upstreams.routes.iter().map(|route| {
        let mut entry = Table::new();
        if let Some(host) = &route.host {
            entry.insert("host".to_owned(), text(host));
        }
        entry.insert("name".to_owned(), text(&route.name));
        entry.insert("path_prefix".to_owned(), text(&route.path_prefix));
        entry.insert("upstream".to_owned(), text(&route.upstream));
        if !route.early_hints.is_empty() {
            let links = route
                .early_hints
                .iter()
                .map(|link| text(link.to_str().unwrap_or("")));
            entry.insert("early_hints".to_owned(), Value::Array(links.collect()));
        }
        if *route.cache != CachePolicy::rfc() {
            entry.insert("cache".to_owned(), policy_table(&route.cache));
        }
        Value::Table(entry)
    });
    Value::Array(routes.collect())
}

fn key_table(key: &CacheKeyConfig) -> Value {
    table([
        ("include_scheme", Value::Boolean(key.include_scheme)),
        ("include_host", Value::Boolean(key.include_host)),
        ("include_query", Value::Boolean(key.include_query)),
        ("sort_query", Value::Boolean(key.sort_query)),
        ("drop_query_params", texts(&key.drop_query_params)),
        ("keep_query_params", texts(&key.keep_query_params)),
        ("headers", texts(&key.headers)),
        ("cookies", texts(&key.cookies)),
        (
            "normalize_accept_encoding",
            Value::Boolean(key.normalize_accept_encoding),
        ),
    ])
}

/// `[routes.cache]`: every key that differs from a route that says nothing.
fn policy_table(policy: &CachePolicy) -> Value {
    let mut out = Table::new();
    let mut put = |key: &str, value: Value| {
        out.insert(key.to_owned(), value);
    };
    put("enabled", Value::Boolean(policy.enabled));
    if let Some(mode) = policy.admission {
        put("admission", text(mode.as_str()));
    }
    if let Some(above) = policy.second_hit_above {
        put("second_hit_above", size(above));
    }
    if let Some(above) = policy.slice_above {
        put("slice_above", size(above));
    }
    if let Some(bytes) = policy.slice_bytes {
        put("slice_bytes", size(bytes));
    }
    for (key, ttl) in [
        ("default_ttl", &policy.default_ttl),
        ("override_ttl", &policy.override_ttl),
    ] {
        if !ttl.is_empty() {
            let mut by_status: Table = ttl
                .by_status
                .iter()
                .map(|(status, ttl)| (status.as_u16().to_string(), duration(*ttl)))
                .collect();
            if let Some(any) = ttl.any {
                by_status.insert("any".to_owned(), duration(any));
            }
            put(key, Value::Table(by_status));
        }
    }
    for (key, value) in [
        ("min_ttl", policy.min_ttl),
        ("max_ttl", policy.max_ttl),
        ("stale_if_error", policy.stale_if_error),
        ("stale_while_revalidate", policy.stale_while_revalidate),
    ] {
        if let Some(value) = value {
            put(key, duration(value));
        }
    }
    let ignores = &policy.ignore_origin;
    let ignored: Vec<&str> = ORIGIN_IGNORES
        .into_iter()
        .zip([
            ignores.cache_control,
            ignores.expires,
            ignores.private,
            ignores.no_cache,
            ignores.no_store,
            ignores.set_cookie,
        ])
        .filter_map(|(name, on)| on.then_some(name))
        .collect();
    put("ignore_origin", texts(&ignored));
    put("ignore_vary", texts(&policy.ignore_vary));
    put(
        "ignore_client_cache_control",
        Value::Boolean(policy.ignore_client_cache_control),
    );
    put("share_authorized", Value::Boolean(policy.share_authorized));
    put("bypass", conditions_table(&policy.bypass));
    put("no_store", conditions_table(&policy.no_store));
    if let Some(key) = &policy.key {
        put("key", key_table(key));
    }
    Value::Table(out)
}

fn conditions_table(conditions: &Conditions) -> Value {
    let headers: Vec<String> = conditions
        .headers
        .iter()
        .map(|(name, value)| match value {
            Some(value) => format!("{name}: {}", String::from_utf8_lossy(value.as_bytes())),
            None => name.to_string(),
        })
        .collect();
    table([
        ("cookies", texts(&conditions.cookies)),
        ("headers", texts(&headers)),
        ("query_params", texts(&conditions.query_params)),
        ("methods", texts(&conditions.methods)),
    ])
}

/// A path the file spells "" when there is none.
fn optional_path(path: Option<&std::path::Path>) -> String {
    path.map_or_else(String::new, |path| path.to_string_lossy().into_owned())
}

fn table<const N: usize>(entries: [(&str, Value); N]) -> Value {
    Value::Table(
        entries
            .into_iter()
            .map(|(key, value)| (key.to_owned(), value))
            .collect::<Table>(),
    )
}

fn text(value: impl Display) -> Value {
    Value::String(value.to_string())
}

fn texts(values: &[impl Display]) -> Value {
    Value::Array(values.iter().map(text).collect())
}

fn size(bytes: u64) -> Value {
    // A string with a unit, because a TOML integer stops at i64::MAX.
    text(format_size(bytes))
}

fn duration(duration: Duration) -> Value {
    text(humantime::format_duration(duration))
}

fn count(n: impl TryInto<i64>) -> Value {
    // A count read from a file fits an i64; one set in code beyond it is written as the largest.
    Value::Integer(n.try_into().unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::admission::probation::Mode;
    use crate::config::DEFAULT_TABLE;

    /// The dotted key of every value in a table.
    fn keys(table: &Table, prefix: &str, found: &mut Vec<String>) {
        for (key, value) in table {
            let dotted = format!("{prefix}{key}");
            match value {
                Value::Table(inner) => keys(inner, &format!("{dotted}."), found),
                _ => found.push(dotted),
            }
        }
    }

    #[test]
    fn every_key_of_the_defaults_is_written() {
        let written: Table = Config::defaults().to_toml().parse().unwrap();
        let (mut expected, mut found) = (Vec::new(), Vec::new());
        keys(&DEFAULT_TABLE, "", &mut expected);
        keys(&written, "", &mut found);
        expected.sort();
        found.sort();
        assert_eq!(found, expected);
    }

    #[test]
    fn a_written_config_reads_back_the_same() {
        let mut config = Config::defaults();
        config.server.listen = "[::1]:0".parse().unwrap();
        config.server.max_connections = 7;
        config.server.header_read_timeout = Duration::from_millis(1500);
        config.server.max_header_bytes = 10_000;
        config.server.shutdown_grace = Duration::ZERO;
        config.server.idle_timeout = Duration::from_secs(3);
        config.server.send_timeout = Duration::from_millis(2500);
        config.server.stream_send_timeout = Duration::from_millis(1500);
        config.server.purge_allowed_networks = vec!["10.0.0.0/8".parse().unwrap()];
        config.server.tls = Some(crate::config::TlsListenerConfig {
            listen: "0.0.0.0:8443".parse().unwrap(),
            cert_file: PathBuf::from("/etc/bloomgate/cert.pem"),
            key_file: PathBuf::from("/etc/bloomgate/key.pem"),
        });
        config.origin.url = "https://origin.internal:8443".parse().unwrap();
        config.origin.ca_file = Some(PathBuf::from("/etc/bloomgate/origin-ca.pem"));
        config.origin.tls_server_name = Some("origin.internal".into());
        config.origin.connect_timeout = Duration::from_nanos(1_000_000_001);
        config.origin.pool_max_idle_per_host = 0;
        config.origin.preserve_host = true;
        config.origin.trusted_forwarding_headers =
            vec![http::HeaderName::from_static("x-forwarded-host")];
        config.cache.max_bytes = 1_500_000_000;
        config.cache.max_object_bytes = 1;
        config.cache.max_variants = 3;
        config.cache.targeted_fields = vec![
            http::HeaderName::from_static("bloomgate-cache-control"),
            http::HeaderName::from_static("cdn-cache-control"),
        ];
        config.cache.forward_targeted_fields = false;
        config.cache.tag_header = http::HeaderName::from_static("cache-tag");
        config.cache.forward_tag_header = true;
        config.cache.tag_purge_keep = Duration::from_secs(3 * 86_400);
        config.cache.key.include_scheme = true;
        config.cache.key.sort_query = true;
        config.cache.key.drop_query_params = vec!["utm_source".into(), "a \"quoted\" name".into()];
        config.admission.mode = Mode::SecondHit;
        config.admission.probation_share = 0.25;
        config.admission.doorkeeper.capacity = 12_345;
        config.admission.doorkeeper.target_fpr = 0.001;
        config.admission.doorkeeper.rotate_at_fpr = 0.1 + 0.2;
        config.admission.doorkeeper.max_age = Duration::from_secs(5400);
        config.admission.snapshot_path = Some(PathBuf::from("/var/lib/bloomgate/doorkeeper"));
        config.admin.listen = "127.0.0.1:9999".parse().unwrap();
        config.log.level = "info,bloomgate=debug".into();
        config.log.access.path = Some(crate::config::AccessLogPath::File(PathBuf::from(
            "/var/log/bloomgate/access.log",
        )));
        config.log.access.format = crate::config::AccessLogFormat::Json;
        config.log.access.buffer = 64 << 10;
        assert_eq!(Config::from_toml_str(&config.to_toml()), Ok(config.clone()));
        let groups = Config::from_toml_str(
            "[upstreams.a]\nservers = [{ url = \"http://127.0.0.1:1\", weight = 2 }, \
             { url = \"https://b.internal\", backup = true }]\nbalance = \"consistent-hash\"\n\
             [upstreams.a.health]\nprobe_path = \"/up?deep=1\"\n\
             [upstreams.b]\nservers = [\"http://127.0.0.1:2\"]\n\
             [[routes]]\nhost = \"*.b.example\"\npath_prefix = \"/x/\"\nupstream = \"b\"\n\
             [[routes]]\nupstream = \"a\"",
        )
        .expect("valid");
        config.upstreams = groups.upstreams;
        // Not written beside groups, which stand in its place.
        config.origin.url = Config::defaults().origin.url;
        assert_eq!(Config::from_toml_str(&config.to_toml()), Ok(config));
        let defaults = Config::defaults();
        assert_eq!(Config::from_toml_str(&defaults.to_toml()), Ok(defaults));
    }
}
