//! Configuration: the TOML schema, its embedded defaults, loading, and validation that names the bad key.
//!
//! `config/bloomgate.toml` is the single source of the defaults: it is embedded in the binary and a
//! user's file is laid over it, so a file may give any subset of keys. Parsing is a pure function of
//! the text, so a live reload can re-run it and keep the old `Config` when the new text has errors.

mod check;
mod deprecated;
mod error;
mod keys;
mod parse;
mod policy;
mod reload;
mod route;
mod section;
mod size;
mod upstream;
mod values;
mod write;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;
use std::time::Duration;

use toml::Table;

use crate::admission::DoorkeeperConfig;
use crate::admission::probation::Mode;

pub use check::{CheckConfigArgs, Checked, check_config};
pub use deprecated::{Deprecated, deprecations};
pub use error::{ConfigError, ConfigErrors};
pub use keys::{KEYS, Key, ReloadClass, key};
pub use policy::{CachePolicy, Conditions, ORIGIN_IGNORES, OriginIgnores, StatusTtl};
pub use reload::Reload;
pub use size::{SizeError, format_size, parse_size};
pub use upstream::{
    Balance, HealthConfig, HostPattern, IMPLICIT_GROUP, RouteConfig, UpstreamConfig,
    UpstreamServer, Upstreams,
};
pub use values::FORWARDING_HEADERS;

/// The annotated default configuration, as shipped in `config/bloomgate.toml`.
pub const DEFAULT_TOML: &str = include_str!("../../config/bloomgate.toml");

/// Where `serve` looks for its config file when none is given.
pub const DEFAULT_PATH: &str = "config/bloomgate.toml";

static DEFAULT_TABLE: LazyLock<Table> = LazyLock::new(|| {
    DEFAULT_TOML
        .parse()
        .expect("the embedded config/bloomgate.toml is valid TOML (tested)")
});

static DEFAULTS: LazyLock<Config> = LazyLock::new(|| {
    parse::read(&DEFAULT_TABLE)
        .expect("the embedded config/bloomgate.toml is a valid config (tested)")
});

/// The whole configuration. Every field has a default from the embedded `config/bloomgate.toml`.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub server: ServerConfig,
    pub origin: OriginConfig,
    pub cache: CacheConfig,
    pub admission: AdmissionConfig,
    pub disk: DiskConfig,
    pub admin: AdminConfig,
    pub log: LogConfig,
    /// `[upstreams.NAME]` and `[[routes]]`; `None` when the file gives none, and `origin.url`
    /// stands for them (see [`Config::upstreams`]).
    pub upstreams: Option<Upstreams>,
}

/// `[server]`: the public listener.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerConfig {
    /// Address the proxy listens on. Default `127.0.0.1:8080`.
    pub listen: SocketAddr,
    /// Open client connections beyond this are refused (closed). Default 10000.
    pub max_connections: usize,
    /// A request head must arrive within this (slowloris guard). Default 10s.
    pub header_read_timeout: Duration,
    /// A keep-alive connection with no request in progress is closed after this. Default 60s.
    pub idle_timeout: Duration,
    /// A connection that owes its client bytes and writes none for this long is closed (a socket
    /// write that waits this long fails). Default 60s.
    pub send_timeout: Duration,
    /// An HTTP/2 stream whose response body the client takes nothing of for this long is reset
    /// (RST_STREAM), the connection's other streams going on. Default 60s.
    pub stream_send_timeout: Duration,
    /// Larger request heads get 431. At least 8KiB. Default 64KiB.
    pub max_header_bytes: usize,
    /// How long graceful shutdown waits for requests in flight. Default 10s.
    pub shutdown_grace: Duration,
    /// Networks allowed to send PURGE to the public listener. Default none.
    pub purge_allowed_networks: Vec<ipnet::IpNet>,
    /// `[server.tls]`: the HTTPS listener; `None` (no table) = plain HTTP only. Default none.
    pub tls: Option<TlsListenerConfig>,
    /// Which server reads plain HTTP/1.1 connections. Default [`Http1Server::Native`].
    pub http1: Http1Server,
    /// The native server sends a disk hit's body from its segment file with `sendfile` (segments
    /// read through a mapping only). Default false.
    pub sendfile: bool,
}

/// `server.http1`: the server that reads plain-HTTP/1.1 client connections. HTTP/2 and every
/// connection over TLS stay on hyper either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Http1Server {
    /// bloomgate's own connection loop (`proxy::server::h1`).
    Native,
    /// hyper's server, as before the native one existed.
    Hyper,
}

impl Http1Server {
    pub const ALL: [Http1Server; 2] = [Http1Server::Native, Http1Server::Hyper];

    pub fn as_str(self) -> &'static str {
        match self {
            Http1Server::Native => "native",
            Http1Server::Hyper => "hyper",
        }
    }
}

/// `[server.tls]`: a second listener that speaks HTTPS (TLS 1.2 and 1.3, ALPN `h2` and
/// `http/1.1`). Its certificate and key are read at start and again on every reload.
#[derive(Clone, Debug, PartialEq)]
pub struct TlsListenerConfig {
    /// Address of the HTTPS listener; plain HTTP stays on `server.listen`.
    pub listen: SocketAddr,
    /// PEM file: the certificate chain, leaf first.
    pub cert_file: PathBuf,
    /// PEM file: the private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
}

/// `[origin]`: the server behind the proxy.
#[derive(Clone, Debug, PartialEq)]
pub struct OriginConfig {
    /// `http://host:port` or `https://host:port`, no path. Default `http://127.0.0.1:8081`.
    pub url: http::Uri,
    /// PEM file of the CA certificates an `https` origin's certificate is verified against,
    /// instead of the system's roots; `None` = the system's roots. Default none.
    pub ca_file: Option<PathBuf>,
    /// The name sent in SNI and checked against an `https` origin's certificate; `None` = the
    /// URL's host. Default none.
    pub tls_server_name: Option<String>,
    /// Default 2s.
    pub connect_timeout: Duration,
    /// A silent origin gets the client a 504 within this. Default 15s.
    pub first_byte_timeout: Duration,
    /// Longest gap between body chunks before the response is aborted. Default 10s.
    pub idle_timeout: Duration,
    /// Idle pooled connections are closed after this. Default 90s.
    pub pool_idle_timeout: Duration,
    /// Idle connections kept to the origin in all, split evenly among the serving threads (each has
    /// its own pool); 0 disables pooling. Default 256.
    pub pool_max_idle_per_host: usize,
    /// False: send the origin's authority as Host; true: forward the client's Host. Default false.
    pub preserve_host: bool,
    /// Client-sent forwarding fields passed to the origin as sent; the rest are removed. Default none.
    pub trusted_forwarding_headers: Vec<http::HeaderName>,
}

/// `[cache]`: the in-memory store.
#[derive(Clone, Debug, PartialEq)]
pub struct CacheConfig {
    /// Bytes of headers plus bodies the store may hold. Default 512MiB.
    pub max_bytes: u64,
    /// Larger responses are streamed through, never buffered or stored. At most `max_bytes`. Default 8MiB.
    pub max_object_bytes: u64,
    /// `Vary` variants kept per URL; the oldest goes. At least 1. Default 16.
    pub max_variants: usize,
    /// Targeted cache-control fields (RFC 9213), in order: the first present with a valid,
    /// non-empty value replaces `Cache-Control` and `Expires` for bloomgate's own storing and
    /// freshness. Lower-cased field names; empty to obey `Cache-Control` only. Default
    /// `["cdn-cache-control"]`.
    pub targeted_fields: Vec<http::HeaderName>,
    /// Whether those fields go on to the client (RFC 9213 section 3: CDNs typically forward
    /// them for caches further down). Default true.
    pub forward_targeted_fields: bool,
    /// The response field naming an entry's tags for purge by tag, space-separated (Fastly's
    /// `Surrogate-Key`); `Cache-Tag`, comma-separated, is read too. Lower-cased. Default
    /// `surrogate-key`.
    pub tag_header: http::HeaderName,
    /// Whether the tag fields go on to the client. Default false: they name the origin's
    /// purge groups, which clients have no use for.
    pub forward_tag_header: bool,
    /// How long a purge of a tag is remembered: entries stored before it are purged when next
    /// looked up, until then. Default 30d.
    pub tag_purge_keep: Duration,
    /// Objects larger than this (by their announced length) are fetched and stored in slices;
    /// `None`: no slicing. Default none.
    pub slice_above: Option<u64>,
    /// The size of a slice: a power of two from 64KiB to 64MiB. Default 1MiB.
    pub slice_bytes: u64,
    /// `[cache.key]`
    pub key: CacheKeyConfig,
}

/// `[cache.key]`: which parts of a request make its cache key (the path always does).
#[derive(Clone, Debug, PartialEq)]
pub struct CacheKeyConfig {
    /// Default false.
    pub include_scheme: bool,
    /// Default true.
    pub include_host: bool,
    /// Default true.
    pub include_query: bool,
    /// Sort query parameters so `?a=1&b=2` and `?b=2&a=1` share an entry. Default false.
    pub sort_query: bool,
    /// Query parameters left out of the key (e.g. `utm_source`). Default none.
    pub drop_query_params: Vec<String>,
    /// When not empty, the only query parameters kept in the key (and sent to the origin); the
    /// rest are dropped. Default empty (every parameter not dropped is kept).
    pub keep_query_params: Vec<String>,
    /// Request fields whose values are part of the key (lower case). Default none.
    pub headers: Vec<http::HeaderName>,
    /// Cookies whose values are part of the key. Default none.
    pub cookies: Vec<String>,
    /// `Accept-Encoding` reduced, before the variant lookup and the fetch, to the one coding of
    /// `br`, `zstd`, `gzip` the client accepts first in that order (or none), so that browsers
    /// that accept the same codings in other words share a variant. Default false.
    pub normalize_accept_encoding: bool,
}

/// `[admission]`: how a storable miss is admitted, and the doorkeeper that remembers keys.
#[derive(Clone, Debug, PartialEq)]
pub struct AdmissionConfig {
    /// `"probation"` (default): a first-seen object is stored in the probation segment, a
    /// seen-before one in main; `"second-hit"`: a first-seen object is not stored; `"off"`: every
    /// storable response goes to main and the doorkeeper is not kept. The key `enabled` of earlier
    /// versions is read as `"second-hit"` (true) or `"off"` (false).
    pub mode: Mode,
    /// Probation's share of `cache.max_bytes` once main is full, in (0, 1). Default 0.1.
    pub probation_share: f64,
    /// The keys `capacity` (default 1000000), `target_fpr` (0.01), `rotate_at_fpr` (0.02) and
    /// `max_age` (1h), which sit directly in `[admission]`; their ranges are checked by
    /// [`DoorkeeperConfig::problems`].
    pub doorkeeper: DoorkeeperConfig,
    /// File the filters are saved to and restored from across restarts; `None` (an empty string
    /// in the file) keeps them in memory only. Default none.
    pub snapshot_path: Option<PathBuf>,
    /// How often the filters are saved, besides at graceful shutdown. Default 5m.
    pub snapshot_interval: Duration,
}

/// `[disk]`: the disk tier below the memory store. Restart to change.
#[derive(Clone, Debug, PartialEq)]
pub struct DiskConfig {
    /// Directory of the tier's files; `None` (an empty string in the file) = no disk tier. Default none.
    pub path: Option<PathBuf>,
    /// Disk space the tier's files may take. At least four blocks. Default 1GiB.
    pub max_bytes: u64,
    /// The engine's write and reclaim unit; bounds a record's size. Default 16MiB.
    pub block_bytes: u64,
    /// Memory for records queued for disk. At least `block_bytes`. Default 64MiB.
    pub write_buffer: u64,
    /// Bytes per second written at most; 0 = no limit. Default 0.
    pub write_budget: u64,
    /// Whether segments on tmpfs or ramfs are read through a mapping, with no copy. Default true.
    pub mmap: bool,
    /// When the engine waits for the device. Default [`DiskSync::Seal`].
    pub sync: DiskSync,
    /// Whether only a record's first read checks its checksum (`disk.verify_reads = "first"`).
    /// Default false (`"every"`).
    pub verify_first_read_only: bool,
}

/// `disk.sync`: when the disk engine waits for the device, for what a power cut may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskSync {
    /// Never: the kernel writes the files back when it will. A killed process loses nothing (the
    /// page cache survives it); a power cut may tear sealed segments, whose records then fail
    /// their checksums and are dropped.
    None,
    /// Each segment as it is sealed: its records and summary, then its footer, each `fdatasync`ed,
    /// so a power cut takes at most the segment being filled.
    Seal,
}

impl DiskSync {
    pub const ALL: [DiskSync; 2] = [DiskSync::None, DiskSync::Seal];

    pub fn as_str(self) -> &'static str {
        match self {
            DiskSync::None => "none",
            DiskSync::Seal => "seal",
        }
    }
}

/// `[admin]`: the metrics, health and purge listener.
#[derive(Clone, Debug, PartialEq)]
pub struct AdminConfig {
    /// Default `127.0.0.1:9091` (loopback only).
    pub listen: SocketAddr,
}

/// `[log]`
#[derive(Clone, Debug, PartialEq)]
pub struct LogConfig {
    /// A `tracing` level or `EnvFilter` directives (`"info,bloomgate=debug"`). Default `"info"`.
    pub level: String,
    /// `[log.access]`
    pub access: AccessLogConfig,
}

/// `[log.access]`: one line per request, written off the request path. Applies on reload.
#[derive(Clone, Debug, PartialEq)]
pub struct AccessLogConfig {
    /// Where the lines go; `None` (an empty string in the file) = no access log. Default none.
    pub path: Option<AccessLogPath>,
    /// Default [`AccessLogFormat::Combined`].
    pub format: AccessLogFormat,
    /// Bytes of lines waiting for the writer; a line that does not fit is dropped and counted.
    /// At least 4KiB. Default 8MiB.
    pub buffer: u64,
}

/// Where the access log goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AccessLogPath {
    /// `"-"`: the process's standard output.
    Stdout,
    /// A file, appended to (created if missing).
    File(PathBuf),
}

impl std::fmt::Display for AccessLogPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AccessLogPath::Stdout => f.write_str("-"),
            AccessLogPath::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// The line format of the access log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessLogFormat {
    /// nginx's `combined`, then bloomgate's fields as `key=value`: what log tools already read.
    Combined,
    /// One JSON object per line: what log shippers read without a pattern.
    Json,
}

impl AccessLogFormat {
    pub const ALL: [AccessLogFormat; 2] = [AccessLogFormat::Combined, AccessLogFormat::Json];

    pub fn as_str(self) -> &'static str {
        match self {
            AccessLogFormat::Combined => "combined",
            AccessLogFormat::Json => "json",
        }
    }
}

impl Config {
    /// Parses a config text laid over the defaults, collecting every error rather than the first.
    pub fn from_toml_str(text: &str) -> Result<Config, ConfigErrors> {
        let mut user: Table = text
            .parse()
            .map_err(|error| ConfigErrors::new(vec![ConfigError::syntax(text, &error)]))?;
        // Keys given together that may not be, and keys of earlier versions given wrongly, are
        // errors; the rest of the file is read all the same, so that one run names every error.
        let mut errors: Vec<ConfigError> = parse::conflicts(&user).into_iter().collect();
        errors.extend(parse::migrate(&mut user));
        let mut table = DEFAULT_TABLE.clone();
        parse::overlay(&mut table, user);
        match parse::read(&table) {
            Ok(config) if errors.is_empty() => Ok(config),
            Ok(_) => Err(ConfigErrors::new(errors)),
            Err(more) => {
                errors.extend(more);
                Err(ConfigErrors::new(errors))
            }
        }
    }

    /// Reads and parses a config file; every error is prefixed with the file's path.
    pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
        let text = std::fs::read_to_string(path).map_err(|error| {
            ConfigErrors::new(vec![ConfigError::Unreadable {
                reason: error.to_string(),
            }])
            .in_file(path)
        })?;
        Config::from_toml_str(&text).map_err(|errors| errors.in_file(path))
    }

    /// Like `load`, but a file that does not exist means the defaults (for `serve` without `--config`).
    pub fn load_or_defaults(path: &Path) -> Result<Config, ConfigErrors> {
        if path.exists() {
            Config::load(path)
        } else {
            Ok(Config::defaults())
        }
    }

    /// The groups and routes in force: those given, or one group of `origin.url` and one route
    /// to it.
    pub fn upstreams(&self) -> std::borrow::Cow<'_, Upstreams> {
        match &self.upstreams {
            Some(upstreams) => std::borrow::Cow::Borrowed(upstreams),
            None => std::borrow::Cow::Owned(Upstreams::implicit(&self.origin)),
        }
    }

    /// Whether the proxy keeps a doorkeeper: `[admission] mode` asks one, or a route's policy
    /// does.
    pub fn uses_doorkeeper(&self) -> bool {
        self.admission.mode.uses_doorkeeper()
            || self
                .upstreams
                .as_ref()
                .is_some_and(|u| u.routes.iter().any(|route| route.cache.uses_doorkeeper()))
    }

    /// Where requests go, in a few words: `origin URL`, or with upstream groups
    /// `upstreams a (3 servers), b (1 server) by 2 routes`. `check-config` and the line `serve`
    /// prints at start both say it.
    pub fn destination(&self) -> String {
        let Some(upstreams) = &self.upstreams else {
            return format!("origin {}", self.origin.url);
        };
        let groups: Vec<String> = upstreams
            .groups
            .iter()
            .map(|group| match group.servers.len() {
                1 => format!("{} (1 server)", group.name),
                n => format!("{} ({n} servers)", group.name),
            })
            .collect();
        let routes = match upstreams.routes.len() {
            1 => "1 route".to_owned(),
            n => format!("{n} routes"),
        };
        format!("upstreams {} by {routes}", groups.join(", "))
    }

    /// The embedded `config/bloomgate.toml`, parsed.
    pub fn defaults() -> Config {
        DEFAULTS.clone()
    }
}

/// Every key a config file may give, dotted (`cache.key.sort_query`), sorted: the keys the reader
/// takes, any other being an error. Tables themselves are left out; the keys of optional tables
/// (`server.tls.*`) are in.
pub fn keys() -> Vec<String> {
    parse::keys(&DEFAULT_TABLE)
}

impl Default for Config {
    fn default() -> Self {
        Config::defaults()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_defaults_parse_without_errors() {
        let table: Table = DEFAULT_TOML.parse().unwrap();
        if let Err(errors) = parse::read(&table) {
            panic!(
                "config/bloomgate.toml has errors:\n{}",
                ConfigErrors::new(errors)
            );
        }
    }

    #[test]
    fn a_slice_size_that_is_not_a_power_of_two_names_its_key() {
        let errors = match Config::from_toml_str("[cache]\nslice_bytes = \"1000KiB\"\n") {
            Ok(_) => panic!("1000KiB is not a power of two"),
            Err(errors) => errors.to_string(),
        };
        assert!(
            errors.contains("cache.slice_bytes: must be a power of two from 64KiB to 64MiB"),
            "{errors}"
        );
    }

    #[test]
    fn defaults_match_the_documented_values() {
        let config = Config::defaults();
        assert_eq!(config.server.listen, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(config.server.max_connections, 10_000);
        assert_eq!(config.server.header_read_timeout, Duration::from_secs(10));
        assert_eq!(config.server.idle_timeout, Duration::from_secs(60));
        assert_eq!(config.server.send_timeout, Duration::from_secs(60));
        assert_eq!(config.server.stream_send_timeout, Duration::from_secs(60));
        assert_eq!(config.server.max_header_bytes, 64 << 10);
        assert_eq!(config.server.shutdown_grace, Duration::from_secs(10));
        assert!(config.server.purge_allowed_networks.is_empty());
        assert_eq!(config.origin.url, "http://127.0.0.1:8081");
        assert_eq!(config.origin.connect_timeout, Duration::from_secs(2));
        assert_eq!(config.origin.first_byte_timeout, Duration::from_secs(15));
        assert_eq!(config.origin.idle_timeout, Duration::from_secs(10));
        assert_eq!(config.origin.pool_idle_timeout, Duration::from_secs(90));
        assert_eq!(config.origin.pool_max_idle_per_host, 256);
        assert!(!config.origin.preserve_host);
        assert!(config.origin.trusted_forwarding_headers.is_empty());
        assert_eq!(config.cache.targeted_fields, ["cdn-cache-control"]);
        assert!(config.cache.forward_targeted_fields);
        assert_eq!(config.cache.max_variants, 16);
        assert_eq!(config.cache.max_bytes, 512 << 20);
        assert_eq!(config.cache.max_object_bytes, 8 << 20);
        let key = &config.cache.key;
        assert!(!key.include_scheme && key.include_host && key.include_query && !key.sort_query);
        assert!(key.drop_query_params.is_empty());
        assert_eq!(config.admission.mode, Mode::Probation);
        assert_eq!(config.admission.probation_share, 0.1);
        assert_eq!(
            config.admission.doorkeeper,
            DoorkeeperConfig {
                capacity: 1_000_000,
                target_fpr: 0.01,
                rotate_at_fpr: 0.02,
                max_age: Duration::from_secs(3600),
            }
        );
        assert_eq!(
            config.admission.doorkeeper,
            DoorkeeperConfig::with_capacity(1_000_000)
        );
        // The Pingora plugin reads [admission] with the doorkeeper crate's defaults, not this file.
        let shared = bloomgate_admission::table::AdmissionTable::default();
        assert_eq!(
            (shared.mode, &shared.doorkeeper),
            (config.admission.mode, &config.admission.doorkeeper)
        );
        assert_eq!(config.admission.snapshot_path, None);
        assert_eq!(config.admission.snapshot_interval, Duration::from_secs(300));
        assert_eq!(config.admin.listen, "127.0.0.1:9091".parse().unwrap());
        assert_eq!(config.log.level, "info");
        assert_eq!(
            config.log.access,
            AccessLogConfig {
                path: None,
                format: AccessLogFormat::Combined,
                buffer: 8 << 20,
            }
        );
    }

    #[test]
    fn the_plugin_knows_every_admission_key_of_the_defaults() {
        // The Pingora plugin rejects an [admission] key outside these two lists: a key added here
        // without its line there would make the plugin refuse a bloomgate.toml.
        use bloomgate_admission::table::{KEYS, PROXY_KEYS};
        let defaults: toml::Table = DEFAULT_TOML.parse().expect("valid TOML");
        let mut keys: Vec<&str> = defaults["admission"]
            .as_table()
            .expect("a table")
            .keys()
            .map(String::as_str)
            .collect();
        let mut known: Vec<&str> = KEYS.iter().chain(&PROXY_KEYS).copied().collect();
        keys.sort_unstable();
        known.sort_unstable();
        assert_eq!(keys, known);
    }

    #[test]
    fn a_silent_origin_gets_a_504_within_30_seconds_by_default() {
        let origin = Config::defaults().origin;
        assert!(origin.connect_timeout + origin.first_byte_timeout < Duration::from_secs(30));
    }
}
