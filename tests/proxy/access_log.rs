//! End to end: the access log (`[log.access]`) of the real binary: a line per request with the
//! right fields in both formats, bytes sent to a client that leaves mid-body, escaping that stops
//! forged lines, reopening for logrotate, reload, a writer that cannot keep up, and the log read
//! back by `bloomgate simulate` and `bloomgate replay`.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bloomgate::traffic::object_path::{PathMode, request_path};
use bytes::Bytes;
use common::{Client, Origin, ProxyConfig, ProxyProcess, Reply, TempDir, metric};
use http::{Method, StatusCode};
use http_body_util::{BodyExt, Full};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const FORMATS: [&str; 2] = ["combined", "json"];

fn cacheable(body: &str) -> Reply {
    Reply::ok(body).header("cache-control", "max-age=60")
}

/// A TOML string of a path.
fn toml_path(path: &Path) -> String {
    format!("\"{}\"", path.display())
}

/// The proxy config of a proxy in front of `origin` logging to `path` in `format`.
fn logging(origin: &Origin, path: &Path, format: &str) -> ProxyConfig {
    let mut config = ProxyConfig::new(&origin.url());
    config.set("log.access", "path", &toml_path(path)).set(
        "log.access",
        "format",
        &format!("\"{format}\""),
    );
    config
}

/// The lines of `path` once it has at least `count` (waiting up to 5 s); panics with what it has
/// otherwise.
async fn lines(path: &Path, count: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        if lines.len() >= count {
            return lines;
        }
        assert!(
            Instant::now() < deadline,
            "{} has {} lines, expected {count}:\n{text}",
            path.display(),
            lines.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The fields of a line of either format, named as the JSON format names them, as text (`-` for
/// none; the combined format's escapes left as they are).
fn fields(line: &str) -> BTreeMap<String, String> {
    if line.starts_with('{') {
        let value: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
        return value
            .as_object()
            .expect("an object")
            .iter()
            .map(|(name, value)| {
                let text = match value {
                    serde_json::Value::Null => "-".to_owned(),
                    serde_json::Value::String(text) => text.clone(),
                    other => other.to_string(),
                };
                (name.clone(), text)
            })
            .collect();
    }
    let mut found = BTreeMap::new();
    let (client, rest) = line.split_once(" - - [").expect("client");
    found.insert("client".to_owned(), client.to_owned());
    let (time, rest) = rest.split_once("] \"").expect("time");
    found.insert("time".to_owned(), time.to_owned());
    let (request, rest) = rest.split_once('"').expect("request");
    let request: Vec<&str> = request.split(' ').collect();
    assert_eq!(request.len(), 3, "{line}");
    for (name, value) in ["method", "target", "protocol"].iter().zip(request) {
        found.insert((*name).to_owned(), value.to_owned());
    }
    let mut words = rest.trim_start().splitn(3, ' ');
    found.insert("status".to_owned(), words.next().unwrap().to_owned());
    found.insert("bytes_sent".to_owned(), words.next().unwrap().to_owned());
    let rest = words.next().unwrap();
    let (referer, rest) = rest[1..].split_once('"').expect("referer");
    let (user_agent, mut rest) = rest[2..].split_once('"').expect("user agent");
    found.insert("referer".to_owned(), referer.to_owned());
    found.insert("user_agent".to_owned(), user_agent.to_owned());
    while let Some((name, value)) = rest.trim_start().split_once('=') {
        let (value, after) = match value.strip_prefix('"') {
            Some(quoted) => quoted.split_once('"').expect("closing quote"),
            None => value.split_once(' ').unwrap_or((value, "")),
        };
        found.insert(name.to_owned(), value.to_owned());
        rest = after;
    }
    found
}

/// Asserts `expected` (name, value) pairs of a line's fields.
fn assert_fields(line: &str, expected: &[(&str, &str)]) {
    let found = fields(line);
    for (name, value) in expected {
        assert_eq!(
            found.get(*name).map(String::as_str),
            Some(*value),
            "{name} in {line}"
        );
    }
}

fn number(line: &str, name: &str) -> f64 {
    fields(line)[name]
        .parse()
        .unwrap_or_else(|_| panic!("{name} is no number in {line}"))
}

/// A GET over HTTP/2 (prior knowledge), body read whole.
async fn h2_get(url: &str) -> StatusCode {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<Full<Bytes>>();
    let response = client
        .request(
            http::Request::get(url)
                .body(Full::new(Bytes::new()))
                .unwrap(),
        )
        .await
        .expect("h2 response");
    let status = response.status();
    response.into_body().collect().await.expect("h2 body");
    status
}

async fn scrape(client: &Client, proxy: &ProxyProcess) -> String {
    client.get(&proxy.admin_url("/metrics")).await.text()
}

#[tokio::test]
async fn each_request_gets_one_line_with_its_fields_in_both_formats() {
    for format in FORMATS {
        let mut origin = Origin::start();
        origin.set("/a", cacheable(&"a".repeat(100)));
        origin.set("/p", Reply::ok("posted").status(201));
        let dir = TempDir::new("access-log-fields");
        let path = dir.join("access.log");
        let proxy = logging(&origin, &path, format).start();
        let client = Client::new();
        let host = proxy.addr.to_string();

        let miss = client
            .get_with(
                &proxy.url("/a"),
                &[
                    ("user-agent", "tester/1.0"),
                    ("referer", "http://ref.example/page"),
                ],
            )
            .await;
        assert_eq!(miss.status, StatusCode::OK);
        assert!(client.get(&proxy.url("/a")).await.is_hit());
        let part = client
            .get_with(&proxy.url("/a"), &[("range", "bytes=10-19")])
            .await;
        assert_eq!(part.status, StatusCode::PARTIAL_CONTENT);
        let pass = client.send(Method::POST, &proxy.url("/p"), &[]).await;
        assert_eq!(pass.unwrap().status, StatusCode::CREATED);
        let bad = common::raw_exchange(
            proxy.addr,
            b"GET /bad HTTP/1.1\r\nHost: a/b\r\nConnection: close\r\n\r\n",
            Duration::from_millis(500),
        )
        .await;
        assert_eq!(common::raw_status(&bad), Some(400), "{bad}");
        assert_eq!(h2_get(&proxy.url("/a")).await, StatusCode::OK);
        origin.stop();
        let failed = client.get(&proxy.url("/gone")).await;
        assert_eq!(failed.status, StatusCode::BAD_GATEWAY);

        let lines = lines(&path, 7).await;
        assert_eq!(
            lines.len(),
            7,
            "{format}: one line per request:\n{lines:#?}"
        );
        // A line is written when its response body ends, so requests on other connections may
        // log in another order: each is found by what it asked and got.
        let find = |method: &str, target: &str, status: &str, protocol: &str, nth: usize| {
            let mut found = lines.iter().filter(|line| {
                let f = fields(line);
                let asked = [&f["method"], &f["target"], &f["status"], &f["protocol"]];
                asked.map(String::as_str) == [method, target, status, protocol]
            });
            found.nth(nth).unwrap_or_else(|| {
                panic!("{format}: no line {nth} for {method} {target} {status}:\n{lines:#?}")
            })
        };
        // The miss and the hit came one after the other on one connection.
        let miss = find("GET", "/a", "200", "HTTP/1.1", 0);
        let hit = find("GET", "/a", "200", "HTTP/1.1", 1);
        let part = find("GET", "/a", "206", "HTTP/1.1", 0);
        let pass = find("POST", "/p", "201", "HTTP/1.1", 0);
        let bad = find("GET", "/bad", "400", "HTTP/1.1", 0);
        let h2 = find("GET", "/a", "200", "HTTP/2.0", 0);
        let failed = find("GET", "/gone", "502", "HTTP/1.1", 0);
        assert_fields(
            miss,
            &[
                ("client", "127.0.0.1"),
                ("method", "GET"),
                ("target", "/a"),
                ("host", &host),
                ("protocol", "HTTP/1.1"),
                ("status", "200"),
                ("bytes_sent", "100"),
                ("cache", "miss"),
                ("fwd", "miss"),
                ("detail", "probation"),
                ("decision", "probation"),
                ("origin_status", "200"),
                ("size", "100"),
                ("user_agent", "tester/1.0"),
                ("referer", "http://ref.example/page"),
            ],
        );
        let origin_ms = number(miss, "origin_ms");
        assert!(
            origin_ms > 0.0 && origin_ms <= number(miss, "duration_ms"),
            "{miss}"
        );
        assert_fields(
            hit,
            &[
                ("target", "/a"),
                ("status", "200"),
                ("bytes_sent", "100"),
                ("cache", "hit"),
                ("fwd", "-"),
                ("decision", "-"),
                ("origin_status", "-"),
                ("origin_ms", "-"),
                ("size", "100"),
                ("range", "-"),
                ("referer", "-"),
            ],
        );
        // A part logs the whole object's size and the range asked for: a trace of both.
        assert_fields(
            part,
            &[
                ("status", "206"),
                ("bytes_sent", "10"),
                ("cache", "hit"),
                ("size", "100"),
                ("range", "bytes=10-19"),
            ],
        );
        assert_fields(
            pass,
            &[
                ("method", "POST"),
                ("target", "/p"),
                ("status", "201"),
                ("bytes_sent", "6"),
                ("cache", "pass"),
                ("fwd", "method"),
                ("decision", "-"),
                ("origin_status", "201"),
            ],
        );
        assert_fields(
            bad,
            &[
                ("target", "/bad"),
                ("host", "a/b"),
                ("status", "400"),
                ("cache", "pass"),
                ("fwd", "request"),
                ("decision", "-"),
                ("origin_status", "-"),
                ("size", "-"),
            ],
        );
        assert_fields(
            h2,
            &[
                ("target", "/a"),
                ("host", &host),
                ("protocol", "HTTP/2.0"),
                ("status", "200"),
                ("bytes_sent", "100"),
                ("cache", "hit"),
            ],
        );
        assert_fields(
            failed,
            &[
                ("target", "/gone"),
                ("status", "502"),
                ("detail", "origin-error"),
                ("decision", "-"),
                ("origin_status", "-"),
                ("origin_ms", "-"),
                ("size", "-"),
            ],
        );
        let time = &fields(miss)["time"];
        match format {
            "json" => assert!(
                humantime::parse_rfc3339(time).is_ok() && time.len() == 24,
                "RFC 3339 with milliseconds: {time}"
            ),
            _ => assert!(
                time.len() == 26 && time.ends_with(" +0000"),
                "dd/Mon/yyyy:hh:mm:ss +0000: {time}"
            ),
        }
    }
}

#[tokio::test]
async fn a_client_that_leaves_mid_body_is_logged_with_the_bytes_it_was_sent() {
    let origin = Origin::start();
    let body = "t".repeat(1000);
    origin.set("/slow", cacheable(&body).paced(Duration::from_millis(5)));
    let dir = TempDir::new("access-log-leave");
    let path = dir.join("access.log");
    let proxy = logging(&origin, &path, "combined").start();

    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    stream
        .write_all(b"GET /slow HTTP/1.1\r\nHost: leave.test\r\n\r\n")
        .await
        .unwrap();
    let mut received = Vec::new();
    let mut chunk = [0u8; 1024];
    // The head and some 20 bytes of body, then the client goes.
    while received
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .is_none_or(|head| received.len() < head + 4 + 20)
    {
        let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut chunk))
            .await
            .expect("bytes in time")
            .unwrap();
        assert!(n > 0, "closed early");
        received.extend_from_slice(&chunk[..n]);
    }
    let head = received.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let got = (received.len() - head) as f64;
    drop(stream);

    let lines = lines(&path, 1).await;
    let line = &lines[0];
    assert_fields(
        line,
        &[("target", "/slow"), ("status", "200"), ("size", "1000")],
    );
    let sent = number(line, "bytes_sent");
    assert!(
        sent >= got && sent < 1000.0,
        "client got {got} bytes, log says {sent}: {line}"
    );
}

#[tokio::test]
async fn a_forged_user_agent_or_referer_cannot_start_a_line_or_change_a_field() {
    let origin = Origin::start();
    origin.set("/x", cacheable("x"));
    for format in FORMATS {
        let dir = TempDir::new("access-log-forge");
        let path = dir.join("access.log");
        let proxy = logging(&origin, &path, format).start();
        let forged_agent = b"a\" cache=hit size=999 host=\"victim.example\\\tb\xff";
        let mut request = b"GET /x HTTP/1.1\r\nHost: forge.test\r\nUser-Agent: ".to_vec();
        request.extend_from_slice(forged_agent);
        request.extend_from_slice(b"\r\nReferer: r\" 200 1 \"-\" \"x\r\nConnection: close\r\n\r\n");
        let reply = common::raw_exchange(proxy.addr, &request, Duration::from_millis(500)).await;
        assert_eq!(common::raw_status(&reply), Some(200), "{reply}");
        let probe = Client::new().get(&proxy.url("/x")).await;
        assert_eq!(probe.status, StatusCode::OK);

        let lines = lines(&path, 2).await;
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 2, "{format}: no forged line:\n{text}");
        let line = &lines[0];
        let found = fields(line);
        assert_eq!(found["host"], "forge.test", "{line}");
        assert_eq!(found["size"], "1", "{line}");
        assert_eq!(found["cache"], "miss", "{line}");
        match format {
            "json" => {
                assert_eq!(
                    found["user_agent"],
                    "a\" cache=hit size=999 host=\"victim.example\\\tb\u{fffd}"
                );
                assert_eq!(found["referer"], "r\" 200 1 \"-\" \"x");
            }
            _ => {
                assert_eq!(
                    found["user_agent"],
                    "a\\x22 cache=hit size=999 host=\\x22victim.example\\x5C\\x09b\\xFF"
                );
                assert_eq!(found["referer"], "r\\x22 200 1 \\x22-\\x22 \\x22x");
            }
        }
    }
}

#[tokio::test]
async fn sigusr1_reopens_the_file_after_logrotate_renamed_it() {
    let origin = Origin::start();
    origin.set("/before", cacheable("b"));
    origin.set("/after", cacheable("a"));
    let dir = TempDir::new("access-log-rotate");
    let path = dir.join("access.log");
    let rotated = dir.join("access.log.1");
    let proxy = logging(&origin, &path, "combined").start();
    let client = Client::new();
    client.get(&proxy.url("/before")).await;
    lines(&path, 1).await;

    std::fs::rename(&path, &rotated).unwrap();
    let pid = proxy.pid().expect("proxy pid");
    let status = Command::new("kill")
        .args(["-USR1", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(5);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "not reopened; log:\n{}",
            proxy.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    client.get(&proxy.url("/after")).await;

    let new = lines(&path, 1).await;
    assert_eq!(new.len(), 1, "{new:#?}");
    assert_fields(&new[0], &[("target", "/after")]);
    let old = lines(&rotated, 1).await;
    assert_eq!(old.len(), 1, "{old:#?}");
    assert_fields(&old[0], &[("target", "/before")]);
}

/// Starts `bloomgate serve` on `config` expecting it to fail; returns its stderr.
fn failed_start(config: &Path) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_bloomgate"))
        .args(["serve", "--config"])
        .arg(config)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("bloomgate started with an access log it cannot open");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(!status.success());
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    stderr
}

#[tokio::test]
async fn an_access_log_that_cannot_be_opened_stops_the_start_naming_the_file() {
    let origin = Origin::start();
    let dir = TempDir::new("access-log-unopenable");
    let unopenable = dir.join("no-such-directory").join("access.log");
    let config = dir.join("bloomgate.toml");
    std::fs::write(&config, logging(&origin, &unopenable, "combined").text()).unwrap();
    let stderr = failed_start(&config);
    assert!(
        stderr.contains(&format!(
            "cannot open the access log {}",
            unopenable.display()
        )),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_reload_switches_file_and_format_and_keeps_the_old_file_when_the_new_cannot_be_opened() {
    let origin = Origin::start();
    for target in ["/r1", "/r2", "/r3"] {
        origin.set(target, cacheable("r"));
    }
    let dir = TempDir::new("access-log-reload");
    let first = dir.join("first.log");
    let second = dir.join("second.log");
    let unopenable = dir.join("no-such-directory").join("access.log");
    let config_path = dir.join("bloomgate.toml");
    let proxy = logging(&origin, &first, "combined").start_with_file(&config_path);
    let client = Client::new();
    let reload = async |config: ProxyConfig| -> String {
        std::fs::write(&config_path, config.text()).unwrap();
        let reply = common::reload(&client, &proxy).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
        reply.text()
    };
    client.get(&proxy.url("/r1")).await;

    let answer = reload(logging(&origin, &unopenable, "json")).await;
    assert!(!answer.contains("log.access"), "{answer}");
    assert!(
        proxy.log().contains(&format!(
            "cannot open the access log {}",
            unopenable.display()
        )),
        "{}",
        proxy.log()
    );
    client.get(&proxy.url("/r2")).await;
    let kept = lines(&first, 2).await;
    assert_fields(&kept[1], &[("target", "/r2")]);
    assert!(
        !kept[1].starts_with('{'),
        "the old format kept: {}",
        kept[1]
    );

    let answer = reload(logging(&origin, &second, "json")).await;
    assert!(answer.contains("log.access"), "{answer}");
    client.get(&proxy.url("/r3")).await;
    let switched = lines(&second, 1).await;
    assert!(switched[0].starts_with('{'), "{}", switched[0]);
    assert_fields(&switched[0], &[("target", "/r3")]);
    assert_eq!(lines(&first, 2).await.len(), 2);
}

#[tokio::test]
async fn a_writer_that_cannot_keep_up_drops_and_counts_lines_and_requests_stay_prompt() {
    let origin = Origin::start();
    origin.set("/fast", cacheable(&"f".repeat(200)));
    let dir = TempDir::new("access-log-fifo");
    let fifo = dir.join("access.fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    // A reader that never reads: the pipe fills and the writer blocks on it.
    let reader = std::thread::spawn({
        let fifo = fifo.clone();
        move || std::fs::File::open(fifo).unwrap()
    });
    let mut config = logging(&origin, &fifo, "combined");
    config.set("log.access", "buffer", "\"4KiB\"");
    let proxy = config.start();
    let stalled_pipe = reader.join().unwrap();
    let client = Client::new();

    for request in 0..2000 {
        let started = Instant::now();
        let reply = client.get(&proxy.url("/fast")).await;
        assert_eq!(reply.status, StatusCode::OK);
        // Generous for a loaded machine: a request that waited on the stalled writer would wait
        // for ever.
        let took = started.elapsed();
        assert!(
            took < Duration::from_secs(2),
            "request {request} waited {took:?} on the log"
        );
    }
    let scrape = scrape(&client, &proxy).await;
    let dropped = metric(&scrape, "bloomgate_access_log_dropped_total");
    assert!(dropped > 500.0, "dropped {dropped}:\n{scrape}");

    // The writer is let go (its writes now fail), so the proxy stops without waiting on it.
    drop(stalled_pipe);
}

/// Runs the `bloomgate` binary with `args`; its standard output, once it has succeeded.
fn bloomgate(args: &[&std::ffi::OsStr]) -> Vec<u8> {
    let output = Command::new(env!("CARGO_BIN_EXE_bloomgate"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "bloomgate {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

/// The trace summary `bloomgate simulate --trace` gives for a log, and the requests `bloomgate
/// replay --trace` sent for it (to `origin`, one at a time), each with its `Range` when it had one.
fn simulate_and_replay(log: &Path, origin: &Origin) -> (serde_json::Value, Vec<String>) {
    let words = |text: &'static str| text.split(' ').map(std::ffi::OsStr::new);
    let simulate: Vec<_> = words("simulate --json --cache-bytes 1MiB --trace")
        .chain([log.as_os_str()])
        .collect();
    let report: serde_json::Value = serde_json::from_slice(&bloomgate(&simulate)).unwrap();
    let target = origin.url();
    let replay: Vec<_> = words("replay --json --concurrency 1 --target")
        .chain([
            std::ffi::OsStr::new(&target),
            "--trace".as_ref(),
            log.as_os_str(),
        ])
        .collect();
    bloomgate(&replay);
    let sent = origin
        .all_received()
        .into_iter()
        .map(|request| match request.header("range") {
            Some(range) => format!("{} {range}", request.target),
            None => request.target,
        })
        .collect();
    (report["trace"].clone(), sent)
}

#[tokio::test]
async fn simulate_and_replay_read_back_the_log_the_proxy_wrote_in_both_formats() {
    let origin = Origin::start();
    origin.set(
        "/img/a.png",
        cacheable(&"a".repeat(300)).header("etag", "\"v1\""),
    );
    origin.set("/img/b.png?w=2", cacheable(&"b".repeat(50)));
    origin.set("/form", Reply::ok("ok"));
    for format in FORMATS {
        let dir = TempDir::new("access-log-trace");
        let path = dir.join("access.log");
        let proxy = logging(&origin, &path, format).start();
        let client = Client::new();
        let host = proxy.addr.to_string();
        for target in ["/img/a.png", "/img/b.png?w=2", "/img/a.png", "/img/a.png"] {
            client.get(&proxy.url(target)).await;
        }
        client
            .send(Method::POST, &proxy.url("/form"), &[])
            .await
            .unwrap();
        let head = client
            .send(Method::HEAD, &proxy.url("/img/b.png?w=2"), &[])
            .await;
        assert_eq!(head.unwrap().status, StatusCode::OK);
        // A 304 to a conditional request: a request for the object, but not for its size.
        let not_modified = client
            .get_with(&proxy.url("/img/a.png"), &[("if-none-match", "\"v1\"")])
            .await;
        assert_eq!(not_modified.status, StatusCode::NOT_MODIFIED);
        // A part: a request for the object's bytes it names.
        let part = client
            .get_with(&proxy.url("/img/a.png"), &[("range", "bytes=100-199")])
            .await;
        assert_eq!(part.status, StatusCode::PARTIAL_CONTENT);
        lines(&path, 8).await;
        drop(proxy);

        let replayed = Origin::start();
        let (trace, sent) = simulate_and_replay(&path, &replayed);
        let expected: Vec<String> = [
            ("/img/a.png", 300, ""),
            ("/img/b.png?w=2", 50, ""),
            ("/img/a.png", 300, ""),
            ("/img/a.png", 300, ""),
            ("/img/b.png?w=2", 50, ""),
            ("/img/a.png", 300, " bytes=100-199"),
        ]
        .iter()
        .map(|(target, size, range)| {
            let path = request_path(PathMode::Obj, &format!("{host}{target}"), *size);
            format!("{path}{range}")
        })
        .collect();
        assert_eq!(
            sent, expected,
            "{format}: replay sends the logged GETs and HEADs"
        );
        assert_eq!(trace["format"], format!("bloomgate-{format}"));
        assert_eq!(trace["requests"], expected.len(), "{format}: {trace}");
        assert_eq!(trace["distinct_objects"], 2, "{format}: {trace}");
        assert_eq!(trace["footprint_bytes"], 350, "{format}: {trace}");
        assert_eq!(trace["ignored_lines"], 2, "{format}: the POST and the 304");
    }
}
