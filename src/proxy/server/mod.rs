//! The public listeners: HTTP/1.1 with keep-alive and HTTP/2 cleartext, and the same over TLS
//! when `[server.tls]` is set; a connection limit shared by both, a header-read (and handshake)
//! timeout, and graceful shutdown.

mod accept;
pub mod h1;
pub(crate) mod idle;
pub(crate) mod stall;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use self::accept::accept_loop;
use crate::cache::disk::DiskTier;
use crate::config::Config;
use crate::proxy::Proxy;
use crate::proxy::admin;
use crate::proxy::admin::persist;
use crate::proxy::outcome::access_log::{AccessLog, AccessLogError};
use crate::proxy::server::stall::StallScope;
use crate::telemetry;
use crate::tls::TlsError;

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr} ({what}): {source}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Disk(#[from] crate::cache::disk::DiskError),
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error(transparent)]
    AccessLog(#[from] AccessLogError),
}

/// The shortest wait at shutdown for RAM's proven entries to reach the disk tier.
const SAVE_AT_LEAST: Duration = Duration::from_secs(2);

/// The longest wait at shutdown for the access log's last lines to reach its file.
const ACCESS_LOG_FLUSH: Duration = Duration::from_secs(2);

/// A started proxy: where it listens, and how to stop it.
pub struct RunningProxy {
    pub addr: SocketAddr,
    /// The HTTPS listener, when `[server.tls]` is set.
    pub tls_addr: Option<SocketAddr>,
    pub admin_addr: SocketAddr,
    pub proxy: Arc<Proxy>,
    shutdown: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl RunningProxy {
    /// Stops accepting, lets requests in flight finish within `server.shutdown_grace`, then saves
    /// the doorkeeper to `admission.snapshot_path` (if set), writes the proven entries still in
    /// RAM to the disk tier (if any, within the same grace, at least 2 s; a tier still
    /// recovering its index is waited for first, as long again), writes out the access log's
    /// queued lines (within 2 s), and returns.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let _ = self.task.await;
        if let Some(disk) = self.proxy.disk() {
            let started = std::time::Instant::now();
            // At least a moment, even with no grace for requests: a restart is warm only with them.
            let grace = self.proxy.config().server.shutdown_grace.max(SAVE_AT_LEAST);
            let written = disk.save_from(self.proxy.store(), grace).await;
            tracing::info!(written, elapsed = ?started.elapsed(), "disk tier: entries in RAM saved");
        }
        if let Some(path) = persist::save(&self.proxy).await {
            tracing::info!(path = %path.display(), "doorkeeper snapshot saved");
        }
        if let Some(log) = self.proxy.live().access_log.clone() {
            let flushed = tokio::task::spawn_blocking(move || log.flush(ACCESS_LOG_FLUSH)).await;
            if !matches!(flushed, Ok(true)) {
                tracing::warn!(within = ?ACCESS_LOG_FLUSH, "access log: queued lines not all written at shutdown");
            }
        }
    }

    /// Runs until the process receives SIGTERM or SIGINT, then shuts down gracefully; SIGHUP
    /// reloads the configuration file and reopens the access log, SIGUSR1 reopens the access log.
    /// `signals` must have been installed before the proxy told anyone it is listening (see
    /// [`Signals::install`]).
    pub async fn run_until_signal(self, signals: Signals) {
        signals.wait(&self.proxy).await;
        tracing::info!("shutting down: no new connections, finishing requests in flight");
        self.shutdown().await;
    }
}

/// The signals a serving process acts on: SIGTERM and SIGINT stop it gracefully, SIGHUP reloads
/// (and reopens the access log), SIGUSR1 reopens the access log (logrotate's `postrotate`).
///
/// They are caught from the moment this is made. Made before the "listening" line is printed, a
/// SIGTERM sent as soon as the line appears still saves the doorkeeper's snapshot, instead of
/// meeting the default action and killing the process.
pub struct Signals {
    caught: Option<[tokio::signal::unix::Signal; 4]>,
}

impl Signals {
    pub fn install() -> Signals {
        use tokio::signal::unix::{SignalKind, signal};
        let caught = match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
            signal(SignalKind::hangup()),
            signal(SignalKind::user_defined1()),
        ) {
            (Ok(term), Ok(int), Ok(hup), Ok(usr1)) => Some([term, int, hup, usr1]),
            _ => None,
        };
        Signals { caught }
    }

    async fn wait(self, proxy: &Proxy) {
        let Some([mut term, mut int, mut hup, mut usr1]) = self.caught else {
            let _ = tokio::signal::ctrl_c().await;
            return;
        };
        loop {
            tokio::select! {
                _ = term.recv() => return,
                _ = int.recv() => return,
                _ = hup.recv() => {
                    crate::proxy::admin::reload::log_reload(proxy.reload());
                    proxy.reopen_access_log();
                }
                _ = usr1.recv() => proxy.reopen_access_log(),
            }
        }
    }
}

/// Binds both listeners and starts serving in the background, with no file to reload from.
pub async fn start(config: Config) -> Result<RunningProxy, ServeError> {
    start_with_file(config, None).await
}

/// Like [`start`]; SIGHUP and the admin `POST /reload` re-read `config_path`.
pub async fn start_with_file(
    config: Config,
    config_path: Option<PathBuf>,
) -> Result<RunningProxy, ServeError> {
    let bound = Bound::bind(&config).await?;
    // Only a directory that cannot be used stops the start: the index recovers while the
    // proxy serves.
    let disk = match &config.disk.path {
        Some(_) => Some(Arc::new(DiskTier::open(&config.disk)?)),
        None => None,
    };
    start_serving(config, config_path, disk, bound)
}

/// Like [`start`], over a disk tier the caller made (over an engine of its own: see
/// [`DiskTier::opening`]) in place of the one `disk.path` names.
pub async fn start_with_disk(config: Config, disk: DiskTier) -> Result<RunningProxy, ServeError> {
    let bound = Bound::bind(&config).await?;
    start_serving(config, None, Some(Arc::new(disk)), bound)
}

/// The access log and the listeners, opened before anything else: either failing stops the start.
struct Bound {
    access_log: Option<Arc<AccessLog>>,
    listeners: Vec<std::net::TcpListener>,
    tls_listeners: Vec<std::net::TcpListener>,
    admin_listener: TcpListener,
}

impl Bound {
    async fn bind(config: &Config) -> Result<Bound, ServeError> {
        telemetry::register_at_start(&[("scope", &StallScope::ALL.map(StallScope::as_str))]);
        // Each route registers its own series; these are the requests refused before routing.
        let _ = telemetry::RouteSeries::unrouted();
        let access_log = AccessLog::open(&config.log.access)?;
        let workers = std::thread::available_parallelism().map_or(1, usize::from);
        let listeners =
            bind_listeners(config.server.listen, workers).map_err(|source| ServeError::Bind {
                what: "proxy",
                addr: config.server.listen,
                source,
            })?;
        let tls_listeners = match &config.server.tls {
            Some(tls) => {
                bind_listeners(tls.listen, workers).map_err(|source| ServeError::Bind {
                    what: "https",
                    addr: tls.listen,
                    source,
                })?
            }
            None => Vec::new(),
        };
        let admin_listener = TcpListener::bind(config.admin.listen)
            .await
            .map_err(|source| ServeError::Bind {
                what: "admin",
                addr: config.admin.listen,
                source,
            })?;
        Ok(Bound {
            access_log,
            listeners,
            tls_listeners,
            admin_listener,
        })
    }
}

/// Starts serving on `bound`'s listeners in the background.
fn start_serving(
    config: Config,
    config_path: Option<PathBuf>,
    disk: Option<Arc<DiskTier>>,
    bound: Bound,
) -> Result<RunningProxy, ServeError> {
    let Bound {
        access_log,
        listeners,
        tls_listeners,
        admin_listener,
    } = bound;
    let tls_addr = tls_listeners
        .first()
        .and_then(|listener| listener.local_addr().ok());
    let addr = listeners
        .first()
        .and_then(|listener| listener.local_addr().ok())
        .unwrap_or(config.server.listen);
    let admin_addr = admin_listener
        .local_addr()
        .map_err(|source| ServeError::Bind {
            what: "admin",
            addr: config.admin.listen,
            source,
        })?;
    let proxy = Arc::new(Proxy::new(config, config_path, disk, access_log)?);
    proxy.start_probes();
    let acceptor = match proxy.certificates() {
        Some(certificates) => Some(TlsAcceptor::from(
            certificates.server_config().map_err(TlsError::from)?,
        )),
        None => None,
    };
    let (shutdown, shutdown_rx) = watch::channel(false);
    let admin_task = tokio::spawn(admin::serve(
        admin_listener,
        Arc::clone(&proxy),
        shutdown_rx.clone(),
    ));
    // observe() checks max_age as requests arrive; an idle proxy still rotates on time.
    let ticker = tokio::spawn({
        let proxy = Arc::clone(&proxy);
        async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                if let Some(door) = proxy.doorkeeper() {
                    door.rotate_if_due();
                }
            }
        }
    });
    let saver = tokio::spawn(persist::save_periodically(Arc::clone(&proxy)));
    let limit = Arc::new(Semaphore::new(proxy.config().server.max_connections));
    let tls = acceptor.map(|acceptor| (tls_listeners, acceptor));
    let finished = spawn_workers(listeners, tls, &proxy, &shutdown_rx, &limit);
    let task = tokio::spawn(async move {
        for worker in finished {
            let _ = worker.await;
        }
        admin_task.abort();
        ticker.abort();
        // A save in progress still completes: shutdown's own save waits for it.
        saver.abort();
    });
    tracing::info!(%addr, ?tls_addr, %admin_addr, "bloomgate listening");
    Ok(RunningProxy {
        addr,
        tls_addr,
        admin_addr,
        proxy,
        shutdown,
        task,
    })
}

/// Binds `count` listeners on one address with SO_REUSEPORT, so the kernel spreads connections
/// over the serving threads; the first fixes the port when the address asks for port 0.
///
/// SO_REUSEPORT would also let a second process of the same user bind the address and silently
/// take a share of its connections (a second `bloomgate serve` started by mistake, or before the
/// first has exited). A plain bind first proves the address is free, as nginx's bind would.
fn bind_listeners(addr: SocketAddr, count: usize) -> std::io::Result<Vec<std::net::TcpListener>> {
    let mut listeners = Vec::with_capacity(count);
    let mut bind_to = std::net::TcpListener::bind(addr)?.local_addr()?;
    for _ in 0..count.max(1) {
        let socket = match bind_to {
            SocketAddr::V4(_) => {
                socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?
            }
            SocketAddr::V6(_) => {
                socket2::Socket::new(socket2::Domain::IPV6, socket2::Type::STREAM, None)?
            }
        };
        socket.set_reuse_address(true)?;
        socket.set_reuse_port(true)?;
        socket.set_nonblocking(true)?;
        socket.bind(&bind_to.into())?;
        socket.listen(1024)?;
        let listener: std::net::TcpListener = socket.into();
        bind_to = listener.local_addr()?;
        listeners.push(listener);
    }
    Ok(listeners)
}

/// One serving thread per listener (per pair of listeners, plain and TLS), each with its own
/// single-threaded runtime, as nginx runs one worker per core: a connection stays on the thread
/// that accepted it, with no work stealing or cross-thread wake-ups on the hit path. Returns a
/// receiver per thread that fires when it is done.
fn spawn_workers(
    listeners: Vec<std::net::TcpListener>,
    tls: Option<(Vec<std::net::TcpListener>, TlsAcceptor)>,
    proxy: &Arc<Proxy>,
    shutdown: &watch::Receiver<bool>,
    limit: &Arc<Semaphore>,
) -> Vec<tokio::sync::oneshot::Receiver<()>> {
    let mut finished = Vec::with_capacity(listeners.len());
    let (tls_listeners, acceptor) = match tls {
        Some((listeners, acceptor)) => (listeners, Some(acceptor)),
        None => (Vec::new(), None),
    };
    let mut tls_listeners = tls_listeners.into_iter();
    for (index, listener) in listeners.into_iter().enumerate() {
        let (done, done_rx) = tokio::sync::oneshot::channel();
        let proxy = Arc::clone(proxy);
        let shutdown = shutdown.clone();
        let limit = Arc::clone(limit);
        let tls = tls_listeners.next().zip(acceptor.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("bloomgate-worker-{index}"))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build();
                match runtime {
                    Ok(runtime) => runtime.block_on(async move {
                        let plain = accept_loop(
                            listener,
                            None,
                            Arc::clone(&proxy),
                            shutdown.clone(),
                            Arc::clone(&limit),
                        );
                        let secure = async move {
                            if let Some((listener, acceptor)) = tls {
                                accept_loop(listener, Some(acceptor), proxy, shutdown, limit).await
                            }
                        };
                        tokio::join!(plain, secure);
                    }),
                    Err(error) => {
                        tracing::error!(%error, "serving thread cannot start its runtime")
                    }
                }
                let _ = done.send(());
            });
        match spawned {
            Ok(_) => finished.push(done_rx),
            Err(error) => tracing::error!(%error, "cannot start a serving thread"),
        }
    }
    finished
}
