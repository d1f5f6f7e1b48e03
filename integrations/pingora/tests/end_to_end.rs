//! The example Pingora caching proxy (`examples/caching_proxy.rs`) in front of a test origin that
//! counts requests, over real sockets: what second-hit admission stores, and the collector's
//! output checked by the real `promtool` (Debian's `prometheus`; skipped with a note outside CI
//! when absent).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// An origin that answers every GET with a cacheable body naming the path, and counts requests.
struct Origin {
    addr: SocketAddr,
    counts: Arc<Mutex<HashMap<String, usize>>>,
}

impl Origin {
    fn start() -> Origin {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let counts = Arc::new(Mutex::new(HashMap::new()));
        let shared = Arc::clone(&counts);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let counts = Arc::clone(&shared);
                std::thread::spawn(move || serve(stream, &counts));
            }
        });
        Origin { addr, counts }
    }

    fn count(&self, path: &str) -> usize {
        self.counts.lock().unwrap().get(path).copied().unwrap_or(0)
    }
}

/// Serves keep-alive HTTP/1.1 GETs on one connection.
fn serve(stream: TcpStream, counts: &Mutex<HashMap<String, usize>>) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut writer = stream;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
        }
        let path = request_line
            .split_whitespace()
            .nth(1)
            .unwrap_or("/")
            .to_owned();
        *counts.lock().unwrap().entry(path.clone()).or_default() += 1;
        let body = format!("body of {path}\n");
        let response = format!(
            "HTTP/1.1 200 OK\r\ncache-control: max-age=300\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        if writer.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

/// The example proxy, killed when dropped.
struct Proxy {
    child: Child,
    listen: SocketAddr,
    metrics: SocketAddr,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
}

/// `cargo test` builds the examples beside the test binaries: target/<profile>/examples/.
fn example_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    profile_dir.join("examples").join("caching_proxy")
}

impl Proxy {
    fn start(origin: &Origin) -> Proxy {
        let (listen, metrics) = (free_port(), free_port());
        let child = Command::new(example_binary())
            .arg("--listen")
            .arg(listen.to_string())
            .arg("--origin")
            .arg(origin.addr.to_string())
            .arg("--metrics")
            .arg(metrics.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the caching_proxy example (built by cargo test)");
        let proxy = Proxy {
            child,
            listen,
            metrics,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(listen).is_err() || TcpStream::connect(metrics).is_err() {
            assert!(Instant::now() < deadline, "the example proxy did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        proxy
    }
}

/// One GET with `Connection: close`: the status line's code, the headers and the body.
fn get(addr: SocketAddr, path: &str) -> (u16, HashMap<String, String>, String) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: test.example\r\nConnection: close\r\n\r\n"
    )
    .expect("write");
    let mut raw = String::new();
    stream.read_to_string(&mut raw).expect("read");
    let (head, body) = raw.split_once("\r\n\r\n").expect("a response head");
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|code| code.parse().ok())
        .expect("a status line");
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    (status, headers, body.to_owned())
}

fn cache_status(proxy: &Proxy, path: &str) -> String {
    let (status, headers, body) = get(proxy.listen, path);
    assert_eq!(status, 200, "{path}");
    assert_eq!(body, format!("body of {path}\n"));
    headers.get("x-cache-status").cloned().unwrap_or_default()
}

#[test]
fn the_same_key_reaches_the_origin_once_deferred_then_once_stored_then_never() {
    let origin = Origin::start();
    let proxy = Proxy::start(&origin);
    let path = "/three-times.jpg";
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push((cache_status(&proxy, path), origin.count(path)));
    }
    assert_eq!(
        seen,
        [
            ("deferred".to_owned(), 1),
            ("miss".to_owned(), 2),
            ("hit".to_owned(), 2)
        ]
    );
}

#[test]
fn one_hit_keys_never_fill_the_cache() {
    let origin = Origin::start();
    let proxy = Proxy::start(&origin);
    let paths: Vec<String> = (0..40).map(|i| format!("/once/{i}.jpg")).collect();
    for path in &paths {
        assert_eq!(cache_status(&proxy, path), "deferred", "{path}");
    }
    // Had any first request been stored, its second would be a hit: each is a stored miss.
    for path in &paths {
        assert_eq!(cache_status(&proxy, path), "miss", "{path}");
        assert_eq!(origin.count(path), 2, "{path}");
    }
}

#[test]
fn the_collectors_output_passes_promtool() {
    let origin = Origin::start();
    let proxy = Proxy::start(&origin);
    for path in ["/m/a", "/m/a", "/m/b"] {
        cache_status(&proxy, path);
    }
    let (status, _, text) = get(proxy.metrics, "/metrics");
    assert_eq!(status, 200);
    for series in [
        "bloomgate_admission_total{decision=\"first_hit\"} 2",
        "bloomgate_admission_total{decision=\"admitted\"} 1",
        "bloomgate_filter_fill_ratio{generation=\"current\"}",
        "bloomgate_filter_estimated_items{generation=\"previous\"}",
        "bloomgate_filter_estimated_fpr",
        "bloomgate_filter_rotations_total{reason=\"max_age\"}",
        "bloomgate_filter_bytes",
    ] {
        assert!(text.contains(series), "{series} missing from:\n{text}");
    }
    let Ok(mut promtool) = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    else {
        assert!(
            std::env::var_os("CI").is_none(),
            "promtool is missing in CI (.ci/run installs Debian's prometheus)"
        );
        eprintln!("note: promtool not installed; the exposition was not checked by it");
        return;
    };
    promtool
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write");
    let output = promtool.wait_with_output().expect("promtool ran");
    assert!(
        output.status.success(),
        "promtool check metrics:\n{}{}\n{text}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
