//! Upstream groups end to end: balancing over real origin servers, a server killed and brought
//! back, routing by host and path, every server down (stale content, or 503), a reload that
//! changes a group, and which requests are retried on another server.

use std::net::SocketAddr;
use std::time::Duration;

use http::{Method, StatusCode};

use crate::common::{
    Client, Origin, ProxyConfig, ProxyProcess, RefusingPort, Reply, TempDir, has_member, metric,
    reload, scrape_until,
};

/// An uncacheable answer, so that every request reaches a server.
fn uncacheable(body: &str) -> Reply {
    Reply::ok(body).header("cache-control", "no-store")
}

/// Origins that each answer `/health` and `/obj` (uncacheable).
fn origins(n: usize) -> Vec<Origin> {
    (0..n).map(|_| serving(Origin::start())).collect()
}

fn serving(origin: Origin) -> Origin {
    origin.set("/health", Reply::ok("ok\n"));
    origin.set("/obj", uncacheable("obj\n"));
    origin
}

fn servers(addrs: &[SocketAddr]) -> String {
    let urls: Vec<String> = addrs.iter().map(|a| format!("\"http://{a}\"")).collect();
    format!("[{}]", urls.join(", "))
}

fn healthy(server: SocketAddr) -> String {
    format!("bloomgate_upstream_healthy{{upstream=\"a\",server=\"http://{server}\"}}")
}

fn errors(server: SocketAddr, kind: &str) -> String {
    format!(
        "bloomgate_upstream_errors_total{{upstream=\"a\",server=\"http://{server}\",kind=\"{kind}\"}}"
    )
}

/// Sends `n` GETs of `/obj`; every one must succeed.
async fn all_succeed(client: &Client, proxy: &ProxyProcess, n: usize) {
    for _ in 0..n {
        let reply = client.get(&proxy.url("/obj")).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.cache_status());
    }
}

#[tokio::test]
async fn a_killed_server_leaves_rotation_within_its_window_and_returns_when_it_does() {
    let mut group = origins(3);
    let addrs: Vec<SocketAddr> = group.iter().map(|o| o.addr).collect();
    let proxy = ProxyConfig::with_upstreams(&format!(
        "[upstreams.a]\nservers = {}\n[upstreams.a.health]\nmax_fails = 1\n\
         fail_timeout = \"300ms\"\nprobe_path = \"/health\"\nprobe_interval = \"50ms\"\n\
         probe_timeout = \"200ms\"\nrise = 2\nfall = 2\n",
        servers(&addrs)
    ))
    .start();
    let client = Client::new();
    all_succeed(&client, &proxy, 30).await;
    for origin in &group {
        assert_eq!(origin.count("/obj"), 10, "round-robin over three");
    }

    group[1].stop();
    let killed = addrs[1];
    // No request fails: the one that meets the dead server is retried on another.
    all_succeed(&client, &proxy, 30).await;
    let scrape = scrape_until(&client, &proxy, |s| metric(s, &healthy(killed)) == 0.0).await;
    assert_eq!(metric(&scrape, &healthy(killed)), 0.0, "{scrape}");
    // The status page says so, for that server only.
    let status = client.get(&proxy.admin_url("/status.json")).await.text();
    let health = |server: SocketAddr| {
        format!("\"upstream\":\"a\",\"url\":\"http://{server}\",\"health\":\"")
    };
    assert!(status.contains(&(health(killed) + "down\"")), "{status}");
    assert!(status.contains(&(health(addrs[0]) + "up\"")), "{status}");
    let failed = metric(&scrape, &errors(killed, "connect_error"));
    assert!((1.0..=2.0).contains(&failed), "{failed} connects failed");
    all_succeed(&client, &proxy, 30).await;
    let scrape = client.get(&proxy.admin_url("/metrics")).await.text();
    assert_eq!(
        metric(&scrape, &errors(killed, "connect_error")),
        failed,
        "a server out of rotation gets no traffic"
    );

    let back = serving(group.remove(1).revive());
    let changes = |to: &str| {
        format!(
            "bloomgate_upstream_health_changes_total{{upstream=\"a\",server=\"http://{killed}\",to=\"{to}\"}}"
        )
    };
    // A scrape is not a snapshot: the gauge can be read after a change the counter was read
    // before, so wait for both.
    let scrape = scrape_until(&client, &proxy, |s| {
        metric(s, &healthy(killed)) == 1.0 && metric(s, &changes("up")) >= 1.0
    })
    .await;
    assert_eq!(metric(&scrape, &healthy(killed)), 1.0, "{scrape}");
    assert!(metric(&scrape, &changes("up")) >= 1.0, "{scrape}");
    assert!(metric(&scrape, &changes("down")) >= 1.0, "{scrape}");
    all_succeed(&client, &proxy, 30).await;
    assert!(back.count("/obj") >= 9, "{} requests", back.count("/obj"));
}

#[tokio::test]
async fn routes_pick_the_group_by_host_then_path_and_sites_never_share_an_entry() {
    let [a, b, img] = [Origin::start(), Origin::start(), Origin::start()];
    for (origin, name) in [(&a, "a"), (&b, "b"), (&img, "img")] {
        let reply = Reply::ok(&format!("{name}\n")).header("cache-control", "max-age=60");
        origin.set("/page", reply.clone());
        origin.set("/img/x", reply);
    }
    let proxy = ProxyConfig::with_upstreams(&format!(
        "[upstreams.a]\nservers = {}\n[upstreams.b]\nservers = {}\n[upstreams.img]\nservers = {}\n\
         [[routes]]\nhost = \"*.b.example\"\npath_prefix = \"/img/\"\nupstream = \"img\"\n\
         [[routes]]\nhost = \"b.example\"\nupstream = \"b\"\n\
         [[routes]]\nupstream = \"a\"\n",
        servers(&[a.addr]),
        servers(&[b.addr]),
        servers(&[img.addr])
    ))
    .mode("off")
    .start();
    let client = Client::new();
    let get = |host: &'static str, path: &'static str| {
        let (client, url) = (client.clone(), proxy.url(path));
        async move { client.get_with(&url, &[("host", host)]).await }
    };
    assert_eq!(get("b.example", "/page").await.text(), "b\n");
    assert_eq!(
        get("b.example", "/img/x").await.text(),
        "b\n",
        "no * for b.example itself"
    );
    assert_eq!(get("www.b.example", "/img/x").await.text(), "img\n");
    assert_eq!(get("a.example", "/img/x").await.text(), "a\n");
    let again = get("b.example", "/page").await;
    assert!(again.is_hit(), "{}", again.cache_status());
    let other = get("a.example", "/page").await;
    assert_eq!(other.text(), "a\n", "another host's entry is never served");
    assert_eq!((a.count("/page"), b.count("/page")), (1, 1));
}

#[tokio::test]
async fn with_every_server_down_stale_content_is_served_where_allowed_else_503() {
    let group = [Origin::start(), Origin::start()];
    for origin in &group {
        origin.set(
            "/stale",
            Reply::ok("kept\n").header("cache-control", "max-age=1, stale-if-error=60"),
        );
        origin.set("/fresh", uncacheable("x\n"));
    }
    let addrs: Vec<SocketAddr> = group.iter().map(|o| o.addr).collect();
    let proxy = ProxyConfig::with_upstreams(&format!(
        "[upstreams.a]\nservers = {}\n[upstreams.a.health]\nfail_timeout = \"60s\"\n",
        servers(&addrs)
    ))
    .mode("off")
    .start();
    let client = Client::new();
    assert!(client.get(&proxy.url("/stale")).await.is_stored());
    drop(group);
    // The first request meets both servers dead and takes them out of rotation.
    let failed = client.get(&proxy.url("/fresh")).await;
    assert_eq!(failed.status, StatusCode::BAD_GATEWAY);
    let scrape = client.get(&proxy.admin_url("/metrics")).await.text();
    let sent = |scrape: &str| {
        addrs
            .iter()
            .map(|a| {
                metric(
                    scrape,
                    &format!(
                        "bloomgate_upstream_requests_total{{upstream=\"a\",server=\"http://{a}\"}}"
                    ),
                )
            })
            .sum::<f64>()
    };
    let sent_before = sent(&scrape);

    let down = client.get(&proxy.url("/fresh")).await;
    assert_eq!(down.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        has_member(down.cache_status(), "detail=upstream-down"),
        "{}",
        down.cache_status()
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let stale = client.get(&proxy.url("/stale")).await;
    assert_eq!(
        (stale.status, stale.text().as_str()),
        (StatusCode::OK, "kept\n")
    );
    let status = stale.cache_status();
    assert!(has_member(status, "detail=stale-if-error"), "{status}");
    assert!(has_member(status, "fwd-status=503"), "{status}");
    let scrape = client.get(&proxy.admin_url("/metrics")).await.text();
    assert_eq!(
        sent(&scrape),
        sent_before,
        "nothing is sent to a group with no server"
    );
}

#[tokio::test]
async fn a_reload_that_changes_a_group_moves_traffic_and_keeps_each_kept_servers_health() {
    let (a, c) = (serving(Origin::start()), serving(Origin::start()));
    let refusing = RefusingPort::new();
    let dead = refusing.addr;
    let group = |addrs: &[SocketAddr]| {
        format!(
            "[upstreams.a]\nservers = {}\n[upstreams.a.health]\nfail_timeout = \"60s\"\n",
            servers(addrs)
        )
    };
    let dir = TempDir::new("upstreams-reload");
    let path = dir.path().join("bloomgate.toml");
    let config = ProxyConfig::with_upstreams(&group(&[dead, a.addr]));
    let proxy = config.start_with_file(&path);
    let client = Client::new();
    all_succeed(&client, &proxy, 4).await;
    assert_eq!(a.count("/obj"), 4);

    // A bad file first: refused, naming the key, and the running groups stay.
    let unknown = format!(
        "{}[[routes]]\nupstream = \"nope\"\n",
        group(&[a.addr, c.addr])
    );
    std::fs::write(&path, ProxyConfig::with_upstreams(&unknown).text()).expect("write config");
    let refused = reload(&client, &proxy).await;
    assert_eq!(
        refused.status,
        StatusCode::BAD_REQUEST,
        "{}",
        refused.text()
    );
    assert!(
        refused.text().contains("routes[0].upstream"),
        "{}",
        refused.text()
    );
    all_succeed(&client, &proxy, 2).await;
    assert_eq!(
        (a.count("/obj"), c.count("/obj")),
        (6, 0),
        "the old group stays"
    );

    let changed = ProxyConfig::with_upstreams(&group(&[dead, a.addr, c.addr])).text();
    std::fs::write(&path, changed).expect("write config");
    let reloaded = reload(&client, &proxy).await;
    assert_eq!(reloaded.status, StatusCode::OK, "{}", reloaded.text());
    all_succeed(&client, &proxy, 10).await;
    assert_eq!((a.count("/obj"), c.count("/obj")), (11, 5));
    let scrape = client.get(&proxy.admin_url("/metrics")).await.text();
    assert_eq!(
        metric(&scrape, &errors(dead, "connect_error")),
        1.0,
        "the dead server stays out of rotation across the reload"
    );
}

/// A group of a dead server, then a live one: round-robin asks the dead one first. The dead
/// server's port is held for as long as the proxy runs.
fn dead_first(origin: &Origin) -> (ProxyProcess, RefusingPort) {
    let dead = RefusingPort::new();
    let proxy = ProxyConfig::with_upstreams(&format!(
        "[upstreams.a]\nservers = {}\n",
        servers(&[dead.addr, origin.addr])
    ))
    .start();
    (proxy, dead)
}

#[tokio::test]
async fn a_get_whose_connect_fails_is_retried_once_on_another_server_and_a_post_never() {
    let origin = serving(Origin::start());
    origin.set("/form", uncacheable("posted\n"));
    let client = Client::new();

    let (proxy, _dead) = dead_first(&origin);
    let reply = client.get(&proxy.url("/obj")).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(origin.count("/obj"), 1);

    let (proxy, _dead) = dead_first(&origin);
    let reply = client
        .send(Method::POST, &proxy.url("/form"), &[])
        .await
        .expect("a response");
    assert_eq!(reply.status, StatusCode::BAD_GATEWAY);
    assert_eq!(origin.count("/form"), 0, "a POST is never sent twice");
}

#[tokio::test]
async fn the_startup_line_names_every_group_and_route_as_check_config_does() {
    let held: Vec<RefusingPort> = (0..4).map(|_| RefusingPort::new()).collect();
    let addrs: Vec<SocketAddr> = held.iter().map(|port| port.addr).collect();
    let proxy = ProxyConfig::with_upstreams(&format!(
        "[upstreams.a]\nservers = {}\n[upstreams.b]\nservers = {}\n\
         [[routes]]\nhost = \"b.example\"\nupstream = \"b\"\n[[routes]]\nupstream = \"a\"\n",
        servers(&addrs[..3]),
        servers(&addrs[3..])
    ))
    .start();
    assert_eq!(
        proxy.destination,
        "upstreams a (3 servers), b (1 server) by 2 routes"
    );
}

#[tokio::test]
async fn an_idle_groups_health_gauge_returns_when_its_fail_timeout_has_passed() {
    let live = serving(Origin::start());
    let dead = RefusingPort::new();
    // Passive checks only: nothing but the clock can bring the dead server back.
    let proxy = ProxyConfig::with_upstreams(&format!(
        "[upstreams.a]\nservers = {}\n[upstreams.a.health]\nmax_fails = 1\nfail_timeout = \"500ms\"\n",
        servers(&[dead.addr, live.addr])
    ))
    .start();
    let client = Client::new();
    all_succeed(&client, &proxy, 2).await;
    let scrape = client.get(&proxy.admin_url("/metrics")).await.text();
    assert_eq!(
        metric(&scrape, &errors(dead.addr, "connect_error")),
        1.0,
        "{scrape}"
    );
    let scrape = scrape_until(&client, &proxy, |s| metric(s, &healthy(dead.addr)) == 1.0).await;
    assert_eq!(
        metric(&scrape, &healthy(dead.addr)),
        1.0,
        "still out with no request sent: {scrape}"
    );
    let returned = format!(
        "bloomgate_upstream_health_changes_total{{upstream=\"a\",server=\"http://{}\",to=\"up\"}}",
        dead.addr
    );
    assert_eq!(metric(&scrape, &returned), 1.0, "{scrape}");
}
