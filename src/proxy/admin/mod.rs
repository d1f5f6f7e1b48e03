//! The admin listener: the status page, `/status.json`, `/metrics`, `/healthz`, `/readyz`,
//! `POST /reload`, PURGE, and purge by tag.

pub(crate) mod inspect;
pub(crate) mod persist;
pub(crate) mod reload;
pub(crate) mod status;

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::cache::disk::TierState;
use crate::proxy::Proxy;
use crate::telemetry;
use status::History;

/// Answers the admin endpoints, and samples the status page's history, until dropped.
pub async fn serve(listener: TcpListener, proxy: Arc<Proxy>, shutdown: watch::Receiver<bool>) {
    let history = Arc::new(History::starting_now());
    tokio::select! {
        () = accept(listener, Arc::clone(&proxy), shutdown, Arc::clone(&history)) => {}
        () = sample(&proxy, &history) => {}
    }
}

async fn sample(proxy: &Proxy, history: &History) {
    let mut tick = tokio::time::interval(status::SAMPLE_EVERY);
    loop {
        tick.tick().await;
        history.sample(proxy);
    }
}

async fn accept(
    listener: TcpListener,
    proxy: Arc<Proxy>,
    shutdown: watch::Receiver<bool>,
    history: Arc<History>,
) {
    let builder = auto::Builder::new(TokioExecutor::new());
    loop {
        let Ok((stream, peer)) = listener.accept().await else {
            continue;
        };
        let proxy = Arc::clone(&proxy);
        let shutdown = shutdown.clone();
        let history = Arc::clone(&history);
        let service = service_fn(move |request: Request<Incoming>| {
            let proxy = Arc::clone(&proxy);
            let shutdown = shutdown.clone();
            let history = Arc::clone(&history);
            async move {
                if request.method() == Method::GET && request.uri().path() == "/cache/inspect" {
                    let (parts, _body) = request.into_parts();
                    let response = match proxy.inspect(&parts, peer).await {
                        Ok(json) => match serde_json::to_vec_pretty(&json) {
                            Ok(body) => typed(Bytes::from(body), "application/json"),
                            Err(error) => text_owned(
                                StatusCode::INTERNAL_SERVER_ERROR,
                                format!("inspect: encoding JSON: {error}\n"),
                            ),
                        },
                        Err((status, why)) => text_owned(status, why),
                    };
                    return Ok::<_, Infallible>(response);
                }
                Ok::<_, Infallible>(answer(&proxy, &shutdown, &history, request))
            }
        });
        let connection = builder
            .serve_connection(TokioIo::new(stream), service)
            .into_owned();
        tokio::spawn(async move {
            let _ = connection.await;
        });
    }
}

fn answer(
    proxy: &Proxy,
    shutdown: &watch::Receiver<bool>,
    history: &History,
    request: Request<Incoming>,
) -> Response<Full<Bytes>> {
    let (parts, _body) = request.into_parts();
    if parts.method.as_str() == "PURGE" {
        let (status, body) = proxy.purge(&parts);
        return text(status, body);
    }
    if parts.method == Method::POST
        && let Some(prefix) = parts.uri.path().strip_prefix("/purge/prefix/")
    {
        let (status, body) = proxy.purge_prefix(prefix, parts.uri.query());
        return text_owned(status, body);
    }
    if parts.method == Method::POST
        && let Some(tag) = parts.uri.path().strip_prefix("/purge/tag/")
    {
        let (status, body) = proxy.purge_tag(tag, parts.uri.query());
        return text_owned(status, body);
    }
    if parts.method == Method::POST && parts.uri.path() == "/reload" {
        return reload(proxy);
    }
    if parts.method != Method::GET {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "GET /, /status.json, /metrics, /healthz, /readyz, /cache/inspect?url=URL; \
             POST /reload, /purge/tag/<tag>, /purge/prefix/<host><path>; PURGE <path> with Host\n",
        );
    }
    match parts.uri.path() {
        "/" => typed(
            Bytes::from_static(status::PAGE.as_bytes()),
            "text/html; charset=utf-8",
        ),
        "/status.json" => match serde_json::to_vec(&status::status(proxy, history)) {
            Ok(body) => typed(Bytes::from(body), "application/json"),
            Err(error) => text_owned(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("status: encoding JSON: {error}\n"),
            ),
        },
        "/metrics" => typed(
            Bytes::from(telemetry::render(&proxy.scrape_state())),
            "text/plain; version=0.0.4; charset=utf-8",
        ),
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/readyz" => readiness(proxy, shutdown),
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

/// `POST /reload`: the configuration file read again and applied, what changed said and logged.
fn reload(proxy: &Proxy) -> Response<Full<Bytes>> {
    let result = proxy.reload();
    let response = match &result {
        Ok(outcome) => text_owned(
            StatusCode::OK,
            format!(
                "reloaded; applied: {:?}; need a restart: {:?}\n",
                outcome.applied, outcome.need_restart
            ),
        ),
        Err(error) => text_owned(StatusCode::BAD_REQUEST, format!("{error}\n")),
    };
    crate::proxy::admin::reload::log_reload(result);
    response
}

/// `GET /readyz`: unavailable once shutting down, else ready with the disk tier's state.
fn readiness(proxy: &Proxy, shutdown: &watch::Receiver<bool>) -> Response<Full<Bytes>> {
    if *shutdown.borrow() {
        return text(StatusCode::SERVICE_UNAVAILABLE, "shutting down\n");
    }
    // Ready while the disk tier recovers or cannot open: the proxy serves, from RAM alone.
    match proxy.disk().map(|disk| disk.state()) {
        Some(TierState::Recovering) => text(StatusCode::OK, "ready\ndisk: recovering\n"),
        Some(TierState::Open(recovery)) => text_owned(
            StatusCode::OK,
            format!(
                "ready\ndisk: {} entries recovered in {:.3}s\n",
                recovery.entries,
                recovery.elapsed.as_secs_f64()
            ),
        ),
        Some(TierState::Unavailable(error)) => text_owned(
            StatusCode::OK,
            format!("ready\ndisk: unavailable: {error}\n"),
        ),
        None => text(StatusCode::OK, "ready\n"),
    }
}

fn typed(body: Bytes, content_type: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn text_owned(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *response.status_mut() = status;
    response
}
