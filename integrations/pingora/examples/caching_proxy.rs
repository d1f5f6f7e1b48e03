//! A Pingora caching proxy with second-hit admission: what `bloomgate-pingora` adds to an existing
//! Pingora cache is marked `ADMISSION` below (a static policy, one line in `request_cache_filter`,
//! the rotation timer, the collector).
//!
//! ```sh
//! cargo run -p bloomgate-pingora --example caching_proxy -- \
//!     --listen 127.0.0.1:6188 --origin 127.0.0.1:8081 --metrics 127.0.0.1:6192 [--admission FILE]
//! ```
//!
//! `--admission FILE` is a TOML file with an `[admission]` table as bloomgate reads it (its
//! defaults otherwise). Every response says what the cache did in `x-cache-status`: `hit`,
//! `miss` (stored), `deferred` (first request within the window: served, not stored), or another
//! of Pingora's cache phases.

use std::sync::LazyLock;
use std::time::Duration;

use async_trait::async_trait;
use bloomgate_pingora::DoorkeeperPolicy;
use pingora_cache::cache_control::CacheControl;
use pingora_cache::eviction::simple_lru;
use pingora_cache::filters::{request_cacheable, resp_cacheable};
use pingora_cache::{
    CacheKey, CacheMetaDefaults, CachePhase, MemCache, NoCacheReason, RespCacheable,
};
use pingora_core::server::Server;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_core::{Error, ErrorType, Result};
use pingora_http::ResponseHeader;
use pingora_proxy::{ProxyHttp, Session};

static STORAGE: LazyLock<MemCache> = LazyLock::new(MemCache::new);
static EVICTION: LazyLock<simple_lru::Manager> =
    LazyLock::new(|| simple_lru::Manager::new(64 << 20));
/// Responses without freshness information are fresh for a minute.
const DEFAULTS: CacheMetaDefaults = CacheMetaDefaults::new(|_| Some(Duration::from_secs(60)), 0, 0);

// ADMISSION: the policy, built once from an [admission] table.
static ADMISSION: LazyLock<DoorkeeperPolicy> = LazyLock::new(|| {
    let text = match arg("--admission") {
        Some(path) => std::fs::read_to_string(&path)
            .unwrap_or_else(|error| panic!("reading --admission {path}: {error}")),
        None => String::new(),
    };
    DoorkeeperPolicy::from_toml(&text).unwrap_or_else(|errors| panic!("--admission: {errors}"))
});

struct CachingProxy {
    origin: String,
}

#[async_trait]
impl ProxyHttp for CachingProxy {
    type CTX = ();

    fn new_ctx(&self) {}

    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut ()) -> Result<Box<HttpPeer>> {
        Ok(Box::new(HttpPeer::new(
            self.origin.as_str(),
            false,
            String::new(),
        )))
    }

    fn request_cache_filter(&self, session: &mut Session, _ctx: &mut ()) -> Result<()> {
        if request_cacheable(session.req_header()) {
            session
                .cache
                .enable(&*STORAGE, Some(&*EVICTION), None, None, None);
            // ADMISSION: store an object only on its second request within the window.
            session.cache.set_admission_policy(&*ADMISSION);
        }
        Ok(())
    }

    fn cache_key_callback(&self, session: &Session, _ctx: &mut ()) -> Result<CacheKey> {
        let request = session.req_header();
        let host = request
            .headers
            .get(http::header::HOST)
            .map(|host| host.as_bytes())
            .unwrap_or_default();
        // Host and target framed by the host's length, so no two different pairs share a key.
        let mut primary = format!("{}:", host.len()).into_bytes();
        primary.extend_from_slice(host);
        primary.extend_from_slice(request.uri.to_string().as_bytes());
        Ok(CacheKey::new(primary, ""))
    }

    fn response_cache_filter(
        &self,
        session: &Session,
        response: &ResponseHeader,
        _ctx: &mut (),
    ) -> Result<RespCacheable> {
        let authorization = session
            .req_header()
            .headers
            .contains_key(http::header::AUTHORIZATION);
        let cache_control = CacheControl::from_resp_headers(response);
        Ok(resp_cacheable(
            cache_control.as_ref(),
            response.clone(),
            authorization,
            &DEFAULTS,
        ))
    }

    async fn response_filter(
        &self,
        session: &mut Session,
        response: &mut ResponseHeader,
        _ctx: &mut (),
    ) -> Result<()> {
        let status = match session.cache.phase() {
            CachePhase::Disabled(NoCacheReason::Deferred) => "deferred",
            phase => phase.as_str(),
        };
        response.insert_header("x-cache-status", status)
    }
}

/// The value after `name` on the command line.
fn arg(name: &str) -> Option<String> {
    let mut args = std::env::args().skip_while(|a| a != name);
    args.next()?;
    args.next()
}

fn required(name: &str) -> Result<String> {
    arg(name).ok_or_else(|| Error::explain(ErrorType::InternalError, format!("{name} is required")))
}

fn main() -> Result<()> {
    let listen = required("--listen")?;
    let origin = required("--origin")?;
    let metrics = required("--metrics")?;

    // Pingora reads its own options from the command line; this example keeps its own.
    let mut server = Server::new(None)?;
    server.bootstrap();
    let proxy_app = CachingProxy {
        origin: origin.clone(),
    };
    let mut proxy = pingora_proxy::http_proxy_service(&server.configuration, proxy_app);
    proxy.add_tcp(&listen);
    server.add_service(proxy);

    // ADMISSION: a timer for max_age in quiet periods, and the doorkeeper's gauges at /metrics.
    let _rotation = ADMISSION.start_rotation_timer(Duration::from_secs(10));
    prometheus::register(Box::new(ADMISSION.collector()))
        .map_err(|error| Error::explain(ErrorType::InternalError, error.to_string()))?;
    let mut exporter = pingora_prometheus::prometheus_http_service();
    exporter.add_tcp(&metrics);
    server.add_service(exporter);

    println!("caching_proxy listening on {listen}, origin {origin}, metrics {metrics}");
    server.run_forever()
}
