//! The admin listener: `/metrics`, `/healthz`, `/readyz`, PURGE, and purge by tag.

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

use super::Proxy;
use crate::telemetry;

pub async fn serve(listener: TcpListener, proxy: Arc<Proxy>, shutdown: watch::Receiver<bool>) {
    let builder = auto::Builder::new(TokioExecutor::new());
    loop {
        let Ok((stream, _peer)) = listener.accept().await else {
            continue;
        };
        let proxy = Arc::clone(&proxy);
        let shutdown = shutdown.clone();
        let service = service_fn(move |request| {
            let response = answer(&proxy, &shutdown, request);
            async move { Ok::<_, Infallible>(response) }
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
    request: Request<Incoming>,
) -> Response<Full<Bytes>> {
    let (parts, _body) = request.into_parts();
    if parts.method.as_str() == "PURGE" {
        let (status, body) = proxy.purge(&parts);
        return text(status, body);
    }
    if parts.method == Method::POST
        && let Some(tag) = parts.uri.path().strip_prefix("/purge/tag/")
    {
        let (status, body) = proxy.purge_tag(tag, parts.uri.query());
        return text_owned(status, body);
    }
    if parts.method == Method::POST && parts.uri.path() == "/reload" {
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
        super::reload::log_reload(result);
        return response;
    }
    if parts.method != Method::GET {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "GET /metrics, /healthz, /readyz; POST /reload, /purge/tag/<tag>; PURGE <path> with Host\n",
        );
    }
    match parts.uri.path() {
        "/metrics" => {
            let body = telemetry::render(&proxy.scrape_state());
            let mut response = Response::new(Full::new(Bytes::from(body)));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            response
        }
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/readyz" if *shutdown.borrow() => text(StatusCode::SERVICE_UNAVAILABLE, "shutting down\n"),
        "/readyz" => match proxy.disk() {
            // The tier is open (its index recovered) before the proxy listens.
            Some(disk) => {
                let recovery = disk.recovery();
                let body = format!(
                    "ready\ndisk: {} entries recovered in {:.3}s\n",
                    recovery.entries,
                    recovery.elapsed.as_secs_f64()
                );
                text_owned(StatusCode::OK, body)
            }
            None => text(StatusCode::OK, "ready\n"),
        },
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
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
