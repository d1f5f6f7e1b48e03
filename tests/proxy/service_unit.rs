//! `config/bloomgate.service` and the config it runs, `config/bloomgate.service.toml`, kept in step
//! with the binary without systemd: the unit's command lines run as written (only the file system
//! moved into a temporary directory), and the config writes only where the unit lets it.

use crate::common;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use bloomgate::config::Config;
use common::{Client, Origin, ProxyProcess, Reply, TempDir};

const UNIT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/config/bloomgate.service");
const SERVICE_CONFIG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/config/bloomgate.service.toml");
/// Where docs/install.md's `cargo install --locked --path . --root /usr/local` puts the binary.
const INSTALLED_BINARY: &str = "/usr/local/bin/bloomgate";

/// The `[Service]` section of the unit: its settings in order (a key may repeat).
struct Unit {
    service: Vec<(String, String)>,
}

impl Unit {
    fn read() -> Unit {
        let text = std::fs::read_to_string(UNIT).expect("read config/bloomgate.service");
        let mut section = "";
        let mut service = Vec::new();
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            assert!(!line.ends_with('\\'), "no continued lines, please: {line}");
            if line.starts_with('[') {
                section = line;
                continue;
            }
            let (key, value) = line.split_once('=').expect("key=value");
            if section == "[Service]" {
                service.push((key.trim().to_owned(), value.trim().to_owned()));
            }
        }
        Unit { service }
    }

    fn all(&self, key: &str) -> Vec<&str> {
        self.service
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    fn one(&self, key: &str) -> &str {
        match self.all(key)[..] {
            [value] => value,
            ref values => panic!("{key}= set {} times in the unit: {values:?}", values.len()),
        }
    }

    /// The directories the service may write to: the ones systemd makes for it, and
    /// ReadWritePaths (everything else is read only under ProtectSystem=strict).
    fn writable(&self) -> Vec<PathBuf> {
        let mut dirs = Vec::new();
        for (key, root) in [
            ("StateDirectory", "/var/lib"),
            ("CacheDirectory", "/var/cache"),
            ("LogsDirectory", "/var/log"),
        ] {
            for names in self.all(key) {
                dirs.extend(
                    names
                        .split_whitespace()
                        .map(|name| Path::new(root).join(name)),
                );
            }
        }
        for paths in self.all("ReadWritePaths") {
            dirs.extend(paths.split_whitespace().map(PathBuf::from));
        }
        dirs
    }

    fn config_directory(&self) -> PathBuf {
        Path::new("/etc").join(self.one("ConfigurationDirectory"))
    }

    /// A command line of the unit, split as systemd splits this simple one (no quotes).
    fn command(&self, line: &str) -> Vec<String> {
        assert!(
            !line.contains(['"', '\'']),
            "quoting in {line}: split it as systemd does"
        );
        line.split_whitespace().map(str::to_owned).collect()
    }
}

fn service_config() -> (Config, toml::Table) {
    let config = Config::load(Path::new(SERVICE_CONFIG)).expect("the service config is valid");
    let text = std::fs::read_to_string(SERVICE_CONFIG).expect("read the service config");
    (config, text.parse().expect("TOML"))
}

/// Calls `f` with every string in the table that is an absolute path, and its key.
fn each_path(table: &mut toml::Table, prefix: &str, f: &mut dyn FnMut(&str, &mut String)) {
    for (key, value) in table.iter_mut() {
        let key = format!("{prefix}{key}");
        match value {
            toml::Value::String(s) if s.starts_with('/') => f(&key, s),
            toml::Value::Table(inner) => each_path(inner, &format!("{key}."), f),
            _ => {}
        }
    }
}

/// `path` moved under `root`, as if `root` were `/`.
fn under(root: &Path, path: &Path) -> PathBuf {
    root.join(path.strip_prefix("/").expect("an absolute path"))
}

#[test]
fn the_example_config_writes_only_where_the_unit_lets_it() {
    let unit = Unit::read();
    assert_eq!(unit.one("ProtectSystem"), "strict");
    let writable = unit.writable();
    let (config, mut table) = service_config();

    let mut paths = 0;
    each_path(&mut table, "", &mut |key, path| {
        paths += 1;
        assert!(
            writable.iter().any(|dir| Path::new(path).starts_with(dir)),
            "{key} = {path} is outside what the unit lets the service write: {writable:?}"
        );
    });
    assert!(paths > 0, "the service config names no path");
    let state = Path::new("/var/lib").join(unit.one("StateDirectory"));
    let snapshot = config.admission.snapshot_path.expect("a snapshot path");
    assert!(snapshot.starts_with(&state), "{}", snapshot.display());
    let cache = Path::new("/var/cache").join(unit.one("CacheDirectory"));
    let disk = config.disk.path.expect("a disk tier");
    assert!(disk.starts_with(&cache), "{}", disk.display());

    let start = unit.command(unit.one("ExecStart"));
    let config_path = Path::new(start.last().expect("ExecStart names a config"));
    assert!(
        config_path.starts_with(unit.config_directory()),
        "ExecStart reads {}, outside ConfigurationDirectory",
        config_path.display()
    );
}

#[test]
fn the_unit_grants_what_the_example_config_needs() {
    let unit = Unit::read();
    let (config, _) = service_config();

    // Stopping takes the drain (shutdown_grace), then the disk save (the same grace, at least
    // 2 s), then the snapshot: systemd must not SIGKILL the proxy in the middle of them.
    let grace = config.server.shutdown_grace;
    let needed = grace + grace.max(Duration::from_secs(2)) + Duration::from_secs(5);
    let stop = humantime::parse_duration(unit.one("TimeoutStopSec")).expect("a time span");
    assert!(stop >= needed, "TimeoutStopSec {stop:?} < {needed:?}");
    assert_eq!(unit.one("KillSignal"), "SIGTERM", "the graceful stop");

    // A descriptor per client connection and one per origin connection, and some to spare.
    let files: usize = unit.one("LimitNOFILE").parse().expect("a number");
    let needed = 2 * config.server.max_connections + 1024;
    assert!(files >= needed, "LimitNOFILE {files} < {needed}");

    // Only the capability to bind a low port, and only because the config listens on one.
    let low_port = [config.server.listen, config.admin.listen]
        .iter()
        .any(|addr| addr.port() < 1024);
    let capabilities = if low_port { "CAP_NET_BIND_SERVICE" } else { "" };
    assert_eq!(unit.one("CapabilityBoundingSet"), capabilities);
    assert_eq!(unit.one("AmbientCapabilities"), capabilities);
}

/// The unit's command lines with the installed binary replaced by the one under test and every
/// absolute path after it moved under `root`; `$MAINPID` becomes `pid`.
fn runnable(line: &[String], root: &Path, pid: Option<u32>) -> (PathBuf, Vec<OsString>) {
    let program = match line[0].as_str() {
        INSTALLED_BINARY => PathBuf::from(env!("CARGO_BIN_EXE_bloomgate")),
        other => PathBuf::from(other),
    };
    let args = line[1..]
        .iter()
        .map(|arg| match arg.as_str() {
            "$MAINPID" => pid.expect("a main pid").to_string().into(),
            path if path.starts_with('/') => under(root, Path::new(path)).into_os_string(),
            other => other.into(),
        })
        .collect();
    (program, args)
}

fn run(line: &[String], root: &Path, pid: Option<u32>) {
    let (program, args) = runnable(line, root, pid);
    let output = Command::new(&program)
        .args(&args)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
    assert!(
        output.status.success(),
        "{line:?} failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test]
async fn the_unit_starts_reloads_and_stops_the_binary_as_written() {
    let unit = Unit::read();
    let start = unit.command(unit.one("ExecStart"));
    assert_eq!(
        start[0], INSTALLED_BINARY,
        "the path docs/install.md installs to"
    );
    let root = TempDir::new("service-unit");
    for dir in unit.writable() {
        std::fs::create_dir_all(under(root.path(), &dir)).expect("make a unit directory");
    }

    // The example config as the unit's host would hold it, moved under the temporary root, with
    // loopback listeners on free ports, a test origin and a disk that fits a temporary directory.
    let origin = Origin::start();
    origin.set(
        "/page",
        Reply::ok("page").header("cache-control", "max-age=60"),
    );
    let (_, mut table) = service_config();
    each_path(&mut table, "", &mut |_, path| {
        let moved = under(root.path(), Path::new(path));
        *path = moved.to_str().expect("a UTF-8 temp path").to_owned();
    });
    for (name, key, value) in [
        ("server", "listen", "127.0.0.1:0".to_owned()),
        ("admin", "listen", "127.0.0.1:0".to_owned()),
        ("origin", "url", origin.url()),
        ("disk", "max_bytes", "64MiB".to_owned()),
    ] {
        let section = table
            .get_mut(name)
            .and_then(|t| t.as_table_mut())
            .expect("a table");
        section.insert(key.to_owned(), value.into());
    }
    let config_path = under(root.path(), Path::new(start.last().expect("a config path")));
    std::fs::create_dir_all(config_path.parent().expect("a directory")).expect("mkdir");
    std::fs::write(&config_path, table.to_string()).expect("write the config");

    for line in unit.all("ExecStartPre") {
        run(&unit.command(line), root.path(), None);
    }
    let (_, args) = runnable(&start, root.path(), None);
    let proxy = ProxyProcess::start_with_args(&args);
    let client = Client::new();
    for _ in 0..3 {
        let reply = client.get(&proxy.url("/page")).await;
        assert_eq!(reply.status, 200, "{}", proxy.log());
    }

    let pid = proxy.pid().expect("the proxy's pid");
    for line in unit.all("ExecReload") {
        run(&unit.command(line), root.path(), Some(pid));
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while !proxy.log().contains("configuration reloaded") {
        assert!(
            Instant::now() < deadline,
            "ExecReload did not reload; log:\n{}",
            proxy.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // KillSignal is SIGTERM (the test above), which `terminate` sends.
    let stopping = Instant::now();
    let log = proxy.terminate();
    let stop = humantime::parse_duration(unit.one("TimeoutStopSec")).expect("a time span");
    assert!(
        stopping.elapsed() < stop,
        "stopped in {:?}",
        stopping.elapsed()
    );
    let (config, _) = service_config();
    let snapshot = under(root.path(), &config.admission.snapshot_path.expect("set"));
    assert!(
        snapshot.exists(),
        "no snapshot in the state directory; log:\n{log}"
    );
    let disk = under(root.path(), &config.disk.path.expect("set"));
    let on_disk = std::fs::read_dir(&disk).map_or(0, |dir| dir.count());
    assert!(
        on_disk > 0,
        "no disk tier files in {}; log:\n{log}",
        disk.display()
    );
}

/// Fails while the example config told the operator to give the TLS files to group `bloomgate`:
/// under `DynamicUser=yes` that group exists only while the service runs.
#[test]
fn the_group_the_example_gives_the_tls_files_is_one_the_unit_can_grant() {
    let text = std::fs::read_to_string(SERVICE_CONFIG).expect("read the service config");
    let unit = std::fs::read_to_string(UNIT).expect("read the unit");
    let groups: Vec<&str> = text
        .split_whitespace()
        .zip(text.split_whitespace().skip(1))
        .filter(|(word, _)| *word == "group")
        .map(|(_, group)| group.trim_end_matches([',', '.', ';', ')']))
        // The service's groups are named after it; other words after "group" are prose.
        .filter(|group| group.starts_with("bloomgate"))
        .collect();
    assert!(
        !groups.is_empty(),
        "{SERVICE_CONFIG} names no group for the TLS files"
    );
    let dynamic = Unit::read().one("DynamicUser") == "yes";
    for group in groups {
        // The dynamic user is named after the unit, and so is its group.
        assert!(
            !(dynamic && group == "bloomgate"),
            "group {group} is the unit's dynamic user's, which exists only while it runs"
        );
        let granted = format!("SupplementaryGroups={group}");
        assert!(
            unit.lines()
                .any(|line| line.trim_start_matches('#').trim() == granted),
            "{UNIT} has no {granted} line (commented or not) for the group the config names"
        );
    }
}
