//! The real `bloomgate serve` binary, started on ports chosen by the system, stopped when dropped.

use std::ffi::OsString;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek};
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use bloomgate::listening::ListeningLine;

/// A config file for one proxy: the keys a test sets, by table; everything else is the default.
pub struct ProxyConfig {
    origin: String,
    tables: Vec<(&'static str, Vec<String>)>,
    /// `[upstreams.NAME]` and `[[routes]]` as TOML, given in place of `origin.url`.
    upstreams: Option<String>,
}

impl ProxyConfig {
    /// Listeners on 127.0.0.1:0, the given origin, admission on, 1 s origin timeouts.
    pub fn new(origin_url: &str) -> ProxyConfig {
        let mut config = ProxyConfig {
            origin: origin_url.to_string(),
            tables: Vec::new(),
            upstreams: None,
        };
        config
            .set("server", "listen", "\"127.0.0.1:0\"")
            .set("server", "shutdown_grace", "\"0s\"")
            .set("admin", "listen", "\"127.0.0.1:0\"")
            .set("origin", "connect_timeout", "\"1s\"")
            .set("origin", "first_byte_timeout", "\"1s\"")
            .set("origin", "idle_timeout", "\"1s\"")
            .set("log", "level", "\"warn\"");
        // The HTTP/1.1 server every test's proxy runs, so that the whole suite can run on either.
        if let Ok(server) = std::env::var("BLOOMGATE_TEST_HTTP1") {
            config.set("server", "http1", &format!("\"{server}\""));
        }
        config
    }

    /// Sets `table.key = value`, where `value` is TOML (strings quoted).
    pub fn set(&mut self, table: &'static str, key: &str, value: &str) -> &mut ProxyConfig {
        let line = format!("{key} = {value}");
        match self.tables.iter_mut().find(|(name, _)| *name == table) {
            Some((_, lines)) => {
                lines.retain(|l| !l.starts_with(&format!("{key} =")));
                lines.push(line);
            }
            None => self.tables.push((table, vec![line])),
        }
        self
    }

    /// Listeners and timeouts as [`ProxyConfig::new`], and `upstreams` (TOML: the groups and
    /// routes) in place of an origin URL.
    pub fn with_upstreams(upstreams: &str) -> ProxyConfig {
        let mut config = ProxyConfig::new("");
        config.upstreams = Some(upstreams.to_owned());
        config
    }

    pub fn admission(&mut self, enabled: bool) -> &mut ProxyConfig {
        self.set(
            "admission",
            "enabled",
            if enabled { "true" } else { "false" },
        )
    }

    /// Sets `admission.mode`: "probation", "second-hit" or "off".
    pub fn mode(&mut self, mode: &str) -> &mut ProxyConfig {
        self.set("admission", "mode", &format!("\"{mode}\""))
    }

    /// Sets `admission.probation_share`, probation's share of `cache.max_bytes`.
    pub fn probation_share(&mut self, share: f64) -> &mut ProxyConfig {
        // Debug keeps the decimal point (`1.0`, not `1`), so TOML reads a float.
        self.set("admission", "probation_share", &format!("{share:?}"))
    }

    fn render(&self) -> String {
        let mut text = String::new();
        let mut origin_written = false;
        for (table, lines) in &self.tables {
            text.push_str(&format!("[{table}]\n"));
            if *table == "origin" && self.upstreams.is_none() {
                text.push_str(&format!("url = \"{}\"\n", self.origin));
                origin_written = true;
            }
            for line in lines {
                text.push_str(line);
                text.push('\n');
            }
        }
        match &self.upstreams {
            Some(upstreams) => text.push_str(upstreams),
            None if !origin_written => {
                text.push_str(&format!("[origin]\nurl = \"{}\"\n", self.origin));
            }
            None => {}
        }
        text
    }

    /// Writes the config and starts the proxy with it; with a disk tier, returns once the tier
    /// has recovered its index (the proxy serves before, with disk lookups missing).
    pub fn start(&self) -> ProxyProcess {
        let proxy = ProxyProcess::start(&self.render(), None);
        self.until_disk_open(&proxy);
        proxy
    }

    /// Starts the proxy with its config at `path`, left in place so that a test can change it and
    /// make the proxy reload it; waits for a disk tier as [`ProxyConfig::start`] does.
    pub fn start_with_file(&self, path: &std::path::Path) -> ProxyProcess {
        let proxy = ProxyProcess::start(&self.render(), Some(path));
        self.until_disk_open(&proxy);
        proxy
    }

    /// Waits until `/readyz` no longer says the disk tier is recovering, when there is one.
    fn until_disk_open(&self, proxy: &ProxyProcess) {
        let has_disk = self.tables.iter().any(|(table, lines)| {
            *table == "disk"
                && lines
                    .iter()
                    .any(|line| line.starts_with("path =") && line != "path = \"\"")
        });
        if !has_disk {
            return;
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        loop {
            let ready = blocking_get(proxy.admin, "/readyz");
            if ready.contains(" 200 ") && !ready.contains("disk: recovering") {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the disk tier still recovers after 15 s: {ready:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    /// The config file text, for a test that rewrites it.
    pub fn text(&self) -> String {
        self.render()
    }
}

/// A running `bloomgate serve`. Dropping it (or the test process ending) stops the proxy.
pub struct ProxyProcess {
    pub addr: SocketAddr,
    /// The HTTPS listener, when the config has `[server.tls]`.
    pub tls_addr: Option<SocketAddr>,
    pub admin: SocketAddr,
    /// Where the startup line says requests go (`origin URL`, or the upstream groups).
    pub destination: String,
    child: Child,
    stdin: Option<ChildStdin>,
    /// The proxy's stderr, already unlinked so that nothing is left behind in the temp dir.
    log: File,
}

/// The response to `GET path` from `addr` over HTTP/1.0, read to the end ("" if it fails).
fn blocking_get(addr: SocketAddr, path: &str) -> String {
    use std::io::Write;
    let Ok(mut stream) = std::net::TcpStream::connect(addr) else {
        return String::new();
    };
    let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    let mut response = String::new();
    if stream.write_all(request.as_bytes()).is_ok() {
        let _ = stream.read_to_string(&mut response);
    }
    response
}

static STARTED: AtomicUsize = AtomicUsize::new(0);

/// A name no other proxy of this test run has, for its temporary files.
fn unique_name() -> String {
    format!(
        "bloomgate-e2e-{}-{}",
        std::process::id(),
        STARTED.fetch_add(1, Ordering::Relaxed)
    )
}

impl ProxyProcess {
    fn start(config: &str, keep_at: Option<&std::path::Path>) -> ProxyProcess {
        let unique = unique_name();
        let config_path = match keep_at {
            Some(path) => path.to_path_buf(),
            None => std::env::temp_dir().join(format!("{unique}.toml")),
        };
        std::fs::write(&config_path, config).expect("write proxy config");
        let args = [
            OsString::from("serve"),
            OsString::from("--config"),
            config_path.clone().into_os_string(),
        ];
        let proxy = ProxyProcess::spawn(&unique, &args, config);
        // The proxy has read its config; a shared proxy is never dropped, so clean up now.
        if keep_at.is_none() {
            let _ = std::fs::remove_file(&config_path);
        }
        proxy
    }

    /// Starts `bloomgate ARGS`, for a test of the command line itself (a service unit's): the
    /// config is wherever ARGS name it, written and removed by the test.
    pub fn start_with_args(args: &[OsString]) -> ProxyProcess {
        ProxyProcess::spawn(&unique_name(), args, "(named by the arguments)")
    }

    fn spawn(unique: &str, args: &[OsString], config: &str) -> ProxyProcess {
        let log_path = std::env::temp_dir().join(format!("{unique}.log"));
        let log = std::fs::File::create(&log_path).expect("create proxy log");
        // A shell holds the proxy: it kills the proxy when its stdin closes, which happens when this
        // guard is dropped or when the test process exits for any reason (a shared proxy in a
        // static is never dropped). The shell hands its stdout to the proxy alone, so the pipe
        // reaches end-of-file if the proxy dies before printing its addresses.
        let mut child = Command::new("sh")
            .arg("-c")
            .arg("\"$0\" \"$@\" & exec >/dev/null; read _; kill $!")
            .arg(env!("CARGO_BIN_EXE_bloomgate"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn bloomgate");
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().expect("proxy stdout"));
        let mut line = String::new();
        let _ = stdout.read_line(&mut line);
        let listening = line.parse::<ListeningLine>();
        let log = File::open(&log_path).expect("open proxy log");
        let _ = std::fs::remove_file(&log_path);
        let Ok(listening) = listening else {
            let mut log = log;
            let mut text = String::new();
            let _ = log.read_to_string(&mut text);
            let log = text;
            panic!(
                "bloomgate {args:?} did not start; stdout {line:?}; stderr:\n{log}\nconfig:\n{config}"
            );
        };
        ProxyProcess {
            addr: listening.addr,
            tls_addr: listening.tls_addr,
            admin: listening.admin_addr,
            destination: listening.destination,
            child,
            stdin,
            log,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn admin_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.admin)
    }

    /// The proxy's own pid (the harness runs it under a shell).
    pub fn pid(&self) -> Option<u32> {
        let shell = self.child.id();
        let children =
            std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children")).ok()?;
        children.split_whitespace().next()?.parse().ok()
    }

    /// Open file descriptors of the proxy process.
    pub fn open_fds(&self) -> Option<usize> {
        let pid = self.pid()?;
        Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count())
    }

    /// Sends SIGTERM (graceful shutdown), waits until the proxy has exited and returns its log.
    pub fn terminate(self) -> String {
        self.signal_and_wait("-TERM")
    }

    /// Sends SIGKILL, waits until the proxy is gone and returns its log.
    pub fn kill(self) -> String {
        self.signal_and_wait("-KILL")
    }

    fn signal_and_wait(self, signal: &str) -> String {
        let pid = self.pid().expect("the proxy process under its shell");
        let status = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} {pid} failed");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        while is_running(pid) {
            assert!(
                std::time::Instant::now() < deadline,
                "the proxy did not exit after kill {signal}; log:\n{}",
                self.log()
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        self.log()
    }

    /// What the proxy wrote to stderr so far.
    pub fn log(&self) -> String {
        let mut log = &self.log;
        let mut text = String::new();
        let _ = log.rewind();
        let _ = log.read_to_string(&mut text);
        text
    }
}

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// True until the process has exited (a zombie waiting for its shell to reap it has exited).
fn is_running(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .is_some_and(|state| state != "Z" && state != "X")
}
