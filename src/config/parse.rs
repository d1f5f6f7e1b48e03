//! Reading a TOML table into a `Config`: defaults underneath, every error collected with its dotted key.

use std::path::PathBuf;

use toml::{Table, Value};

use bloomgate_admission::table::{self, AdmissionTable};

use crate::admission::probation::Mode;

use super::error::ConfigError;
pub(super) use super::section::Section;
use super::size::format_size;
use super::upstream::{self, Upstreams};
use super::values::{self, shown};
use super::{
    AccessLogConfig, AccessLogFormat, AccessLogPath, AdminConfig, AdmissionConfig, CacheConfig,
    CacheKeyConfig, Config, DiskConfig, DiskSync, Http1Server, LogConfig, OriginConfig,
    ServerConfig, TlsListenerConfig,
};

/// Lays `user` over `base`: tables merge key by key, any other value replaces the base's.
pub(super) fn overlay(base: &mut Table, user: Table) {
    for (key, value) in user {
        match (base.get_mut(&key), value) {
            (Some(Value::Table(below)), Value::Table(above)) => overlay(below, above),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

/// Keys of the user's table that cannot be given together, checked before the defaults go
/// underneath (the default `origin.url` lies under every file; only the user's own conflicts).
pub(super) fn conflicts(user: &Table) -> Option<ConfigError> {
    let origin_url = user
        .get("origin")
        .and_then(Value::as_table)
        .is_some_and(|origin| origin.contains_key("url"));
    (origin_url && user.contains_key("upstreams")).then(|| {
        ConfigError::invalid(
            "origin.url".to_owned(),
            "given with [upstreams]: list the server in a group instead ([origin] keeps the \
             client settings every group shares)",
        )
    })
}

/// Rewrites keys of older versions in the user's table into today's, before the defaults go
/// underneath: `admission.enabled` (true: `mode = "second-hit"`, what it meant; false:
/// `mode = "off"`). Giving it beside its replacement is an error naming both.
pub(super) fn migrate(user: &mut Table) -> Vec<ConfigError> {
    let Some(Value::Table(admission)) = user.get_mut("admission") else {
        return Vec::new();
    };
    let Some(enabled) = admission.remove("enabled") else {
        return Vec::new();
    };
    if admission.contains_key("mode") {
        return vec![ConfigError::invalid(
            "admission.enabled".to_owned(),
            "replaced by admission.mode, which is also given: remove admission.enabled",
        )];
    }
    match values::boolean(&enabled) {
        Ok(enabled) => {
            let mode = if enabled { Mode::SecondHit } else { Mode::Off };
            admission.insert("mode".to_owned(), Value::String(mode.as_str().to_owned()));
            Vec::new()
        }
        Err(problem) => vec![ConfigError::invalid(
            "admission.enabled".to_owned(),
            format!("{problem} (and it is replaced by admission.mode)"),
        )],
    }
}

/// Reads a complete table (defaults already laid underneath) into a `Config`, or every error found.
pub(super) fn read(table: &Table) -> Result<Config, Vec<ConfigError>> {
    let mut root = Section::new(String::new(), table, false);
    let config = read_config(&mut root);
    let errors = root.finish();
    match config {
        Some(config) if errors.is_empty() => Ok(config),
        _ => Err(errors),
    }
}

/// Every key the reader takes, dotted (`cache.key.sort_query`), tables themselves left out: the
/// keys a file may give, any other being an error. Found by reading `table` (the defaults) with
/// the optional tables, which have no defaults, read as if empty.
pub(super) fn keys(table: &Table) -> Vec<String> {
    let mut root = Section::new(String::new(), table, true);
    read_config(&mut root);
    let mut keys = std::mem::take(&mut root.keys);
    keys.sort();
    keys.dedup();
    keys
}

fn read_config(root: &mut Section) -> Option<Config> {
    let server = root.child("server", read_server);
    let origin = root.child("origin", read_origin);
    let cache = root.child("cache", read_cache);
    let admission = root.child("admission", read_admission);
    let disk = root.child("disk", read_disk);
    let admin = root.child("admin", read_admin);
    let log = root.child("log", read_log);
    let upstreams = upstream::read(root, cache.as_ref().map(|cache| &cache.key));
    let (origin, cache, disk) = (origin?, cache?, disk?);
    let upstreams = upstreams?;
    let https = match &upstreams {
        Some(upstreams) => upstreams.any_https(),
        None => Upstreams::implicit(&origin).any_https(),
    };
    if !https {
        // A CA or name for plain-HTTP servers would be silently unused: the operator meant https.
        let servers = match upstreams {
            Some(_) => "no upstream server is https",
            None => "origin.url is not https",
        };
        if origin.ca_file.is_some() {
            root.report("origin.ca_file", format!("is set, but {servers}"));
            return None;
        }
        if origin.tls_server_name.is_some() {
            root.report("origin.tls_server_name", format!("is set, but {servers}"));
            return None;
        }
    }
    if disk.path.is_some() && disk.block_bytes <= cache.max_object_bytes {
        // A record is the object plus its headers: a block no larger than the largest object
        // could not hold it.
        root.report(
            "disk.block_bytes",
            format!(
                "{} must be more than cache.max_object_bytes ({})",
                format_size(disk.block_bytes),
                format_size(cache.max_object_bytes)
            ),
        );
        return None;
    }
    if origin.preserve_host && !cache.key.include_host {
        // The origin would answer for the client's host, and every host would share one entry.
        root.report(
            "origin.preserve_host",
            "true needs cache.key.include_host = true: with the client's Host sent to the origin \
             but left out of the key, one host's response would be served for every other",
        );
        return None;
    }
    Some(Config {
        server: server?,
        origin,
        cache,
        admission: admission?,
        disk,
        admin: admin?,
        log: log?,
        upstreams,
    })
}

// hyper panics if its HTTP/1 read buffer limit is below 8 KiB, so a smaller head limit cannot be honoured.
const SMALLEST_HEADER_LIMIT: usize = 8 << 10;

fn read_server(s: &mut Section) -> Option<ServerConfig> {
    let listen = s.get("listen", values::socket_addr);
    let max_connections = s.get("max_connections", at_least_one);
    let header_read_timeout = s.get("header_read_timeout", values::positive_duration);
    let idle_timeout = s.get("idle_timeout", values::positive_duration);
    let send_timeout = s.get("send_timeout", values::positive_duration);
    let stream_send_timeout = s.get("stream_send_timeout", values::positive_duration);
    let max_header_bytes = s.get("max_header_bytes", |v| {
        let bytes =
            usize::try_from(values::size(v)?).map_err(|_| format!("{} is too large", shown(v)))?;
        if bytes < SMALLEST_HEADER_LIMIT {
            return Err(format!(
                "must be at least {} (the HTTP/1 parser's smallest buffer), got {}",
                format_size(SMALLEST_HEADER_LIMIT as u64),
                shown(v)
            ));
        }
        Ok(bytes)
    });
    let shutdown_grace = s.get("shutdown_grace", values::duration);
    let purge_allowed_networks = s.get("purge_allowed_networks", values::networks);
    let tls = s.optional_child("tls", read_tls_listener);
    let http1 = s.get("http1", |v| {
        values::one_of(v, &Http1Server::ALL, Http1Server::as_str)
    });
    let sendfile = s.get("sendfile", values::boolean);
    Some(ServerConfig {
        listen: listen?,
        max_connections: max_connections?,
        header_read_timeout: header_read_timeout?,
        idle_timeout: idle_timeout?,
        send_timeout: send_timeout?,
        stream_send_timeout: stream_send_timeout?,
        max_header_bytes: max_header_bytes?,
        shutdown_grace: shutdown_grace?,
        purge_allowed_networks: purge_allowed_networks?,
        tls: tls?,
        http1: http1?,
        sendfile: sendfile?,
    })
}

fn read_tls_listener(s: &mut Section) -> Option<TlsListenerConfig> {
    let listen = s.required("listen", values::socket_addr);
    let cert_file = s.required("cert_file", values::file_path);
    let key_file = s.required("key_file", values::file_path);
    Some(TlsListenerConfig {
        listen: listen?,
        cert_file: cert_file?,
        key_file: key_file?,
    })
}

fn read_origin(s: &mut Section) -> Option<OriginConfig> {
    let url = s.get("url", values::origin_url);
    let optional_path = |v: &Value| {
        let path = values::string(v)?;
        Ok((!path.is_empty()).then(|| PathBuf::from(path)))
    };
    let ca_file = s.get("ca_file", optional_path);
    let tls_server_name = s.get("tls_server_name", |v| {
        let name = values::string(v)?;
        if name.is_empty() {
            return Ok(None);
        }
        rustls_pki_types::ServerName::try_from(name.as_str())
            .map_err(|_| format!("expected a DNS name or an IP address, got {}", shown(v)))?;
        Ok(Some(name))
    });
    let connect_timeout = s.get("connect_timeout", values::positive_duration);
    let first_byte_timeout = s.get("first_byte_timeout", values::positive_duration);
    let idle_timeout = s.get("idle_timeout", values::positive_duration);
    let pool_idle_timeout = s.get("pool_idle_timeout", values::positive_duration);
    let pool_max_idle_per_host = s.get("pool_max_idle_per_host", values::count_usize);
    let preserve_host = s.get("preserve_host", values::boolean);
    let trusted_forwarding_headers =
        s.get("trusted_forwarding_headers", values::forwarding_headers);
    Some(OriginConfig {
        url: url?,
        ca_file: ca_file?,
        tls_server_name: tls_server_name?,
        connect_timeout: connect_timeout?,
        first_byte_timeout: first_byte_timeout?,
        idle_timeout: idle_timeout?,
        pool_idle_timeout: pool_idle_timeout?,
        pool_max_idle_per_host: pool_max_idle_per_host?,
        preserve_host: preserve_host?,
        trusted_forwarding_headers: trusted_forwarding_headers?,
    })
}

fn read_cache(s: &mut Section) -> Option<CacheConfig> {
    let max_bytes = s.get("max_bytes", values::size);
    let max_object_bytes = s.get("max_object_bytes", values::size);
    let max_variants = s.get("max_variants", at_least_one);
    let targeted_fields = s.get("targeted_fields", values::targeted_fields);
    let forward_targeted_fields = s.get("forward_targeted_fields", values::boolean);
    let tag_header = s.get("tag_header", values::field_name);
    let forward_tag_header = s.get("forward_tag_header", values::boolean);
    let tag_purge_keep = s.get("tag_purge_keep", values::positive_duration);
    let slice_above = s.optional("slice_above", values::size);
    let slice_bytes = s.get("slice_bytes", values::slice_size);
    let key = s.child("key", read_cache_key);
    let (max_bytes, max_object_bytes) = (max_bytes?, max_object_bytes?);
    if max_object_bytes > max_bytes {
        s.report(
            "max_object_bytes",
            format!(
                "{} is larger than cache.max_bytes ({})",
                format_size(max_object_bytes),
                format_size(max_bytes)
            ),
        );
        return None;
    }
    Some(CacheConfig {
        max_bytes,
        max_object_bytes,
        max_variants: max_variants?,
        targeted_fields: targeted_fields?,
        forward_targeted_fields: forward_targeted_fields?,
        tag_header: tag_header?,
        forward_tag_header: forward_tag_header?,
        tag_purge_keep: tag_purge_keep?,
        slice_above: slice_above?,
        slice_bytes: slice_bytes?,
        key: key?,
    })
}

fn read_cache_key(s: &mut Section) -> Option<CacheKeyConfig> {
    let include_scheme = s.get("include_scheme", values::boolean);
    let include_host = s.get("include_host", values::boolean);
    let include_query = s.get("include_query", values::boolean);
    let sort_query = s.get("sort_query", values::boolean);
    let drop_query_params = s.get("drop_query_params", values::names);
    let keep_query_params = s.get("keep_query_params", values::names);
    let headers = s.get("headers", values::field_names);
    let cookies = s.get("cookies", values::names);
    let normalize_accept_encoding = s.get("normalize_accept_encoding", values::boolean);
    Some(CacheKeyConfig {
        include_scheme: include_scheme?,
        include_host: include_host?,
        include_query: include_query?,
        sort_query: sort_query?,
        drop_query_params: drop_query_params?,
        keep_query_params: keep_query_params?,
        headers: headers?,
        cookies: cookies?,
        normalize_accept_encoding: normalize_accept_encoding?,
    })
}

fn read_admission(s: &mut Section) -> Option<AdmissionConfig> {
    // The mode and the doorkeeper's keys are read by the doorkeeper crate, as the Pingora plugin
    // reads them: one parser, one set of messages.
    s.read_elsewhere(&table::KEYS);
    let shared = AdmissionTable::read(s.table).map_err(|errors| {
        for error in errors {
            s.report(error.key, error.problem);
        }
    });
    let probation_share = s.get("probation_share", |v| {
        let share = values::number(v)?;
        if share > 0.0 && share < 1.0 {
            Ok(share)
        } else {
            Err(format!(
                "expected a share of the cache strictly between 0 and 1, got {share}"
            ))
        }
    });
    let snapshot_path = s.get("snapshot_path", |v| {
        let path = values::string(v)?;
        Ok((!path.is_empty()).then(|| PathBuf::from(path)))
    });
    let snapshot_interval = s.get("snapshot_interval", values::positive_duration);
    let shared = shared.ok()?;
    Some(AdmissionConfig {
        mode: shared.mode,
        probation_share: probation_share?,
        doorkeeper: shared.doorkeeper,
        snapshot_path: snapshot_path?,
        snapshot_interval: snapshot_interval?,
    })
}

/// Pages the disk engine aligns its blocks to.
const DISK_PAGE: u64 = 4 << 10;

fn read_disk(s: &mut Section) -> Option<DiskConfig> {
    let path = s.get("path", |v| {
        let path = values::string(v)?;
        Ok((!path.is_empty()).then(|| PathBuf::from(path)))
    });
    let block_bytes = s.get("block_bytes", |v| {
        let bytes = values::size(v)?;
        if bytes == 0 || bytes % DISK_PAGE != 0 || bytes > segments::MAX_SEGMENT_BYTES {
            return Err(format!(
                "must be a positive multiple of 4KiB, at most {}, got {}",
                format_size(segments::MAX_SEGMENT_BYTES),
                shown(v)
            ));
        }
        Ok(bytes)
    });
    let max_bytes = s.get("max_bytes", values::size);
    let write_buffer = s.get("write_buffer", values::size);
    let write_budget = s.get("write_budget", values::size);
    let mmap = s.get("mmap", values::boolean);
    let sync = s.get("sync", |v| {
        values::one_of(v, &DiskSync::ALL, DiskSync::as_str)
    });
    let verify_reads = s.get("verify_reads", |v| {
        values::one_of(v, &["every", "first"], |name| name)
    });
    let (block_bytes, max_bytes, write_buffer) = (block_bytes?, max_bytes?, write_buffer?);
    if max_bytes < 4 * block_bytes {
        s.report(
            "max_bytes",
            format!(
                "{} is less than four blocks of disk.block_bytes ({})",
                format_size(max_bytes),
                format_size(block_bytes)
            ),
        );
        return None;
    }
    if max_bytes / block_bytes > segments::MAX_SEGMENTS {
        s.report(
            "max_bytes",
            format!(
                "{} is more than {} segments of disk.block_bytes ({}): raise block_bytes",
                format_size(max_bytes),
                segments::MAX_SEGMENTS,
                format_size(block_bytes)
            ),
        );
        return None;
    }
    if write_buffer < block_bytes {
        s.report(
            "write_buffer",
            format!(
                "{} is less than one block of disk.block_bytes ({})",
                format_size(write_buffer),
                format_size(block_bytes)
            ),
        );
        return None;
    }
    Some(DiskConfig {
        path: path?,
        max_bytes,
        block_bytes,
        write_buffer,
        write_budget: write_budget?,
        mmap: mmap?,
        sync: sync?,
        verify_first_read_only: verify_reads? == "first",
    })
}

fn read_admin(s: &mut Section) -> Option<AdminConfig> {
    let listen = s.get("listen", values::socket_addr);
    Some(AdminConfig { listen: listen? })
}

const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

fn read_log(s: &mut Section) -> Option<LogConfig> {
    let level = s.get("level", |v| {
        let level = values::string(v)?;
        let expected = || {
            format!(
                "expected a level ({}) or directives like \"info,bloomgate=debug\", got {}",
                LEVELS.join(", "),
                shown(v)
            )
        };
        // EnvFilter reads a lone word as a target name ("inf" = everything from target "inf"), which
        // would silently turn a mistyped level into no logging at all.
        let lone_word = !level.contains(['=', ',', '[']);
        if lone_word && !LEVELS.contains(&level.trim().to_ascii_lowercase().as_str()) {
            return Err(expected());
        }
        match tracing_subscriber::EnvFilter::try_new(&level) {
            Ok(_) => Ok(level),
            Err(error) => Err(format!("{} ({error})", expected())),
        }
    });
    let access = s.child("access", read_access_log);
    Some(LogConfig {
        level: level?,
        access: access?,
    })
}

// Room for a few long lines: a smaller queue would drop lines on any burst.
const SMALLEST_ACCESS_LOG_BUFFER: u64 = 4 << 10;

fn read_access_log(s: &mut Section) -> Option<AccessLogConfig> {
    let path = s.get("path", |v| {
        let path = values::string(v)?;
        Ok(match path.as_str() {
            "" => None,
            "-" => Some(AccessLogPath::Stdout),
            _ => Some(AccessLogPath::File(PathBuf::from(path))),
        })
    });
    let format = s.get("format", |v| {
        values::one_of(v, &AccessLogFormat::ALL, AccessLogFormat::as_str)
    });
    let buffer = s.get("buffer", |v| {
        let bytes = values::size(v)?;
        if bytes < SMALLEST_ACCESS_LOG_BUFFER {
            return Err(format!(
                "must be at least {}, got {}",
                format_size(SMALLEST_ACCESS_LOG_BUFFER),
                shown(v)
            ));
        }
        Ok(bytes)
    });
    Some(AccessLogConfig {
        path: path?,
        format: format?,
        buffer: buffer?,
    })
}

fn at_least_one(value: &Value) -> Result<usize, String> {
    match values::count_usize(value)? {
        0 => Err("must be at least 1, got 0".to_owned()),
        n => Ok(n),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn overlay_merges_tables_and_replaces_values() {
        let mut base: Table = "a = 1\n[t]\nx = 1\ny = 2\n".parse().unwrap();
        let user: Table = "a = 5\n[t]\ny = 3\n".parse().unwrap();
        overlay(&mut base, user);
        let expected: Table = "a = 5\n[t]\nx = 1\ny = 3\n".parse().unwrap();
        assert_eq!(base, expected);
    }

    #[test]
    fn the_key_list_is_every_default_key_and_the_optional_tables_keys() {
        fn leaves(table: &Table, prefix: &str, out: &mut Vec<String>) {
            for (key, value) in table {
                let dotted = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                match value {
                    Value::Table(inner) => leaves(inner, &dotted, out),
                    _ => out.push(dotted),
                }
            }
        }
        let defaults: Table = super::super::DEFAULT_TOML.parse().unwrap();
        let mut expected = Vec::new();
        leaves(&defaults, "", &mut expected);
        expected.extend(
            [
                "cache.slice_above",
                "server.tls.listen",
                "server.tls.cert_file",
                "server.tls.key_file",
                "upstreams.<name>.servers",
                "upstreams.<name>.balance",
                "upstreams.<name>.health.max_fails",
                "upstreams.<name>.health.fail_timeout",
                "upstreams.<name>.health.probe_path",
                "upstreams.<name>.health.probe_interval",
                "upstreams.<name>.health.probe_timeout",
                "upstreams.<name>.health.expect_status",
                "upstreams.<name>.health.rise",
                "upstreams.<name>.health.fall",
                "routes[].host",
                "routes[].path_prefix",
                "routes[].upstream",
                "routes[].early_hints",
                "routes[].name",
                "routes[].cache.admission",
                "routes[].cache.default_ttl",
                "routes[].cache.enabled",
                "routes[].cache.ignore_client_cache_control",
                "routes[].cache.ignore_origin",
                "routes[].cache.ignore_vary",
                "routes[].cache.max_ttl",
                "routes[].cache.min_ttl",
                "routes[].cache.override_ttl",
                "routes[].cache.second_hit_above",
                "routes[].cache.share_authorized",
                "routes[].cache.slice_above",
                "routes[].cache.slice_bytes",
                "routes[].cache.stale_if_error",
                "routes[].cache.stale_while_revalidate",
                "routes[].cache.bypass.cookies",
                "routes[].cache.bypass.headers",
                "routes[].cache.bypass.methods",
                "routes[].cache.bypass.query_params",
                "routes[].cache.no_store.cookies",
                "routes[].cache.no_store.headers",
                "routes[].cache.no_store.methods",
                "routes[].cache.no_store.query_params",
                "routes[].cache.key.cookies",
                "routes[].cache.key.drop_query_params",
                "routes[].cache.key.headers",
                "routes[].cache.key.include_host",
                "routes[].cache.key.include_query",
                "routes[].cache.key.include_scheme",
                "routes[].cache.key.keep_query_params",
                "routes[].cache.key.normalize_accept_encoding",
                "routes[].cache.key.sort_query",
            ]
            .map(String::from),
        );
        expected.sort();
        assert_eq!(keys(&defaults), expected);
    }

    #[test]
    fn every_missing_key_is_reported_against_an_empty_table() {
        let errors = read(&Table::new()).unwrap_err();
        assert_eq!(errors.len(), 7, "{errors:?}");
    }

    #[test]
    fn disk_sizes_that_cannot_work_are_refused_naming_the_key() {
        let cases = [
            (
                "[disk]\npath = \"/d\"\nblock_bytes = \"8MiB\"",
                "disk.block_bytes",
                "more than cache.max_object_bytes",
            ),
            (
                "[disk]\nblock_bytes = \"10000\"",
                "disk.block_bytes",
                "multiple of 4KiB",
            ),
            (
                "[disk]\nmax_bytes = \"32MiB\"",
                "disk.max_bytes",
                "four blocks",
            ),
            (
                "[disk]\nwrite_buffer = \"1MiB\"",
                "disk.write_buffer",
                "one block",
            ),
        ];
        for (text, key, problem) in cases {
            let message = Config::from_toml_str(text).unwrap_err().to_string();
            assert!(
                message.contains(key) && message.contains(problem),
                "{text}: {message}"
            );
        }
        let config = Config::from_toml_str("[disk]\npath = \"/var/cache/bloomgate\"").unwrap();
        assert_eq!(
            config.disk.path.as_deref(),
            Some(Path::new("/var/cache/bloomgate"))
        );
        assert_eq!(config.disk.block_bytes, 16 << 20);
        assert!(
            Config::defaults().disk.path.is_none(),
            "no disk tier by default"
        );
    }

    #[test]
    fn disk_reads_check_every_record_by_default_or_only_its_first_read() {
        assert!(!Config::defaults().disk.verify_first_read_only);
        let config = Config::from_toml_str("[disk]\nverify_reads = \"first\"").unwrap();
        assert!(config.disk.verify_first_read_only);
        let message = Config::from_toml_str("[disk]\nverify_reads = \"never\"")
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("disk.verify_reads") && message.contains("every"),
            "{message}"
        );
    }

    #[test]
    fn disk_sync_takes_none_or_seal_and_seals_by_default() {
        assert_eq!(Config::defaults().disk.sync, DiskSync::Seal);
        let config = Config::from_toml_str("[disk]\nsync = \"none\"").unwrap();
        assert_eq!(config.disk.sync, DiskSync::None);
        let message = Config::from_toml_str("[disk]\nsync = \"always\"")
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("disk.sync") && message.contains("seal"),
            "{message}"
        );
    }

    #[test]
    fn tls_settings_are_checked_and_errors_name_the_key() {
        let cases = [
            (
                "[server.tls]\nlisten = \"127.0.0.1:8443\"\ncert_file = \"/c.pem\"",
                "server.tls.key_file",
                "missing",
            ),
            (
                "[server.tls]\nlisten = \"nowhere\"\ncert_file = \"/c\"\nkey_file = \"/k\"",
                "server.tls.listen",
                "nowhere",
            ),
            (
                "[server.tls]\nlisten = \"127.0.0.1:8443\"\ncert_file = \"\"\nkey_file = \"/k\"",
                "server.tls.cert_file",
                "file path",
            ),
            (
                "[server.tls]\nlisten = \"127.0.0.1:8443\"\ncert_file = \"/c\"\nkey_file = \"/k\"\nciphers = \"x\"",
                "server.tls.ciphers",
                "unknown",
            ),
            (
                "[origin]\nca_file = \"/ca.pem\"",
                "origin.ca_file",
                "not https",
            ),
            (
                "[origin]\nurl = \"https://o.example\"\ntls_server_name = \"not a name!\"",
                "origin.tls_server_name",
                "dns name",
            ),
        ];
        for (text, key, problem) in cases {
            let message = Config::from_toml_str(text).unwrap_err().to_string();
            assert!(
                message.contains(key) && message.to_lowercase().contains(problem),
                "{text}: {message}"
            );
        }
        let config = Config::from_toml_str(
            "[server.tls]\nlisten = \"0.0.0.0:8443\"\ncert_file = \"/c.pem\"\nkey_file = \"/k.pem\"\n\
             [origin]\nurl = \"https://10.0.0.5:443\"\nca_file = \"/ca.pem\"\n\
             tls_server_name = \"origin.internal\"",
        )
        .unwrap();
        let tls = config.server.tls.expect("the table was given");
        assert_eq!(tls.cert_file, Path::new("/c.pem"));
        assert_eq!(config.origin.ca_file.as_deref(), Some(Path::new("/ca.pem")));
        assert_eq!(
            config.origin.tls_server_name.as_deref(),
            Some("origin.internal")
        );
        assert!(
            Config::defaults().server.tls.is_none(),
            "no HTTPS by default"
        );
    }

    #[test]
    fn a_mistyped_log_level_is_not_taken_for_a_target() {
        let mut table: Table = super::super::DEFAULT_TOML.parse().unwrap();
        overlay(&mut table, "[log]\nlevel = \"inf\"\n".parse().unwrap());
        let errors = read(&table).unwrap_err();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].key(), Some("log.level"));
        for ok in ["debug", "WARN", "info,bloomgate=debug", "bloomgate=trace"] {
            let mut table: Table = super::super::DEFAULT_TOML.parse().unwrap();
            overlay(
                &mut table,
                format!("[log]\nlevel = \"{ok}\"\n").parse().unwrap(),
            );
            assert!(read(&table).is_ok(), "{ok} should be accepted");
        }
    }

    #[test]
    fn access_log_keys_are_read_and_their_errors_name_the_key() {
        let config = Config::from_toml_str(
            "[log.access]\npath = \"/var/log/bloomgate/access.log\"\nformat = \"json\"",
        )
        .unwrap();
        assert_eq!(
            config.log.access.path,
            Some(AccessLogPath::File(PathBuf::from(
                "/var/log/bloomgate/access.log"
            )))
        );
        assert_eq!(config.log.access.format, AccessLogFormat::Json);
        let stdout = Config::from_toml_str("[log.access]\npath = \"-\"").unwrap();
        assert_eq!(stdout.log.access.path, Some(AccessLogPath::Stdout));
        for (text, key, problem) in [
            (
                "[log.access]\nformat = \"xml\"",
                "log.access.format",
                "expected one of \"combined\", \"json\", got \"xml\"",
            ),
            (
                "[log.access]\nbuffer = \"1KiB\"",
                "log.access.buffer",
                "at least 4KiB",
            ),
            ("[log.access]\npath = 3", "log.access.path", "expected"),
            (
                "[log.access]\nfile = \"x\"",
                "log.access.file",
                "unknown key",
            ),
        ] {
            let message = Config::from_toml_str(text).unwrap_err().to_string();
            assert!(
                message.contains(key) && message.contains(problem),
                "{text}: {message}"
            );
        }
    }
}
