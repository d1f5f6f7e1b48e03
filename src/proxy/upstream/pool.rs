//! Keep-alive connections to the origin servers, a pool per serving thread, over hyper's
//! connection-level HTTP/1.1 client.
//!
//! hyper-util's pooled client did this before, and its bookkeeping cost a miss about a tenth of
//! its CPU on a 2-core machine (a profile of one-hit misses: 12% of the process's user time under
//! `hyper_util::client::legacy`, beside 14% in hyper's own connection task): a pool shared
//! through a mutex, a checkout future raced against a lazy connect, a task spawned per request to
//! put the connection back once its body was read, and four allocations of extension maps. A
//! serving thread is one current-thread runtime (see `server`), so its pool needs no lock, and a
//! connection goes back to the list as soon as its response head came: it is lent again only once
//! hyper says it is ready, which it is when the previous response's body was read whole.
//!
//! What a connection does not survive is hyper's to decide, as before: a body dropped unread, a
//! response framed to the close, an error. Such a connection reports itself closed and leaves the
//! list on the next look.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use http::uri::{Authority, Scheme};
use http::{Request, Response, Uri};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use thread_local::ThreadLocal;
use tower_service::Service;

use super::origin::{Connector, OutgoingBody};

/// Why a request got no response head.
#[derive(Debug)]
pub(super) enum SendError {
    /// No connection (nor TLS session) could be made: nothing was sent.
    Connect(Box<dyn std::error::Error + Send + Sync>),
    /// hyper's: the request could not be sent whole, or its response could not be read.
    Hyper(hyper::Error),
}

type Sender = http1::SendRequest<OutgoingBody>;

/// A server, as a connection to it is pooled under.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key(Scheme, Authority);

/// A connection lent out or waiting: `since` is when it was last handed back.
struct Pooled {
    sender: Sender,
    since: Instant,
}

/// One thread's connections, by server.
#[derive(Default)]
struct ThreadPool {
    servers: HashMap<Key, Vec<Pooled>>,
    /// Whether a task closes this thread's idle connections when they time out.
    swept: bool,
}

pub(super) struct Pools {
    threads: ThreadLocal<RefCell<ThreadPool>>,
    connector: Connector,
    idle_timeout: Duration,
    /// The most idle connections a thread keeps to one server; 0: none is reused.
    max_idle: usize,
}

impl Pools {
    pub(super) fn new(connector: Connector, idle_timeout: Duration, max_idle: usize) -> Pools {
        Pools {
            threads: ThreadLocal::new(),
            connector,
            idle_timeout,
            max_idle,
        }
    }

    /// Sends `request`, whose URI is absolute (the server's), on an idle connection to its server
    /// or a new one; the response head, its body still to be read.
    pub(super) async fn send(
        self: &Arc<Self>,
        mut request: Request<OutgoingBody>,
    ) -> Result<Response<Incoming>, SendError> {
        let uri = request.uri().clone();
        let (Some(scheme), Some(authority)) = (uri.scheme(), uri.authority()) else {
            return Err(SendError::Connect(
                format!("{uri}: no scheme or authority to connect to").into(),
            ));
        };
        let key = Key(scheme.clone(), authority.clone());
        let mut sender = match self.checkout(&key) {
            Some(sender) => sender,
            None => self.connect(uri.clone()).await?,
        };
        // RFC 9112 section 3.2.1: to an origin server, the origin form.
        *request.uri_mut() = match uri.path_and_query() {
            Some(target) => Uri::from(target.clone()),
            None => Uri::from_static("/"),
        };
        let response = sender
            .send_request(request)
            .await
            .map_err(SendError::Hyper)?;
        self.checkin(key, sender);
        Ok(response)
    }

    /// The newest ready connection to `key`'s server (the list keeps the order they came back
    /// in), after a tidy.
    fn checkout(&self, key: &Key) -> Option<Sender> {
        let pool = self.threads.get_or_default();
        let mut pool = pool.borrow_mut();
        let list = pool.servers.get_mut(key)?;
        self.tidy(list, Instant::now());
        let newest = list.iter().rposition(|pooled| pooled.sender.is_ready())?;
        Some(list.remove(newest).sender)
    }

    /// Puts a connection whose response head came back on its server's list; it is ready again
    /// when that response's body has been read.
    fn checkin(self: &Arc<Self>, key: Key, sender: Sender) {
        if self.max_idle == 0 {
            return;
        }
        let pool = self.threads.get_or_default();
        let mut pool = pool.borrow_mut();
        if !pool.swept {
            pool.swept = self.sweep_this_thread();
        }
        // Tidied where it is looked at: the next checkout, or the thread's sweep.
        pool.servers.entry(key).or_default().push(Pooled {
            sender,
            since: Instant::now(),
        });
    }

    /// Drops from a server's list (at each checkout, and in the thread's sweep) the connections
    /// closed and those idle past the timeout, then the oldest idle ones beyond the idle limit
    /// (a burst of misses opens as many connections as it has requests; the ones it leaves idle
    /// go back to the limit).
    fn tidy(&self, list: &mut Vec<Pooled>, now: Instant) {
        list.retain(|pooled| !self.expired(pooled, now));
        let mut idle = list
            .iter()
            .filter(|pooled| pooled.sender.is_ready())
            .count();
        while idle > self.max_idle {
            let Some(oldest) = list.iter().position(|pooled| pooled.sender.is_ready()) else {
                break;
            };
            list.remove(oldest);
            idle -= 1;
        }
    }

    /// Closed, or idle for longer than the idle timeout.
    fn expired(&self, pooled: &Pooled, now: Instant) -> bool {
        pooled.sender.is_closed()
            || (pooled.sender.is_ready() && now.duration_since(pooled.since) > self.idle_timeout)
    }

    /// Starts a task that closes this thread's idle connections once they time out, as long as
    /// the pools live (a reload makes new ones): a serving thread's runtime runs its tasks on the
    /// thread itself, so the task sees this thread's pool. Elsewhere (a multi-thread runtime,
    /// which sends only health probes) expired connections are dropped at the next checkout, or
    /// closed by the server. Returns whether it started one.
    fn sweep_this_thread(self: &Arc<Self>) -> bool {
        let current_thread = tokio::runtime::Handle::try_current().is_ok_and(|runtime| {
            runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread
        });
        if !current_thread {
            return false;
        }
        let pools: Weak<Pools> = Arc::downgrade(self);
        let period = self.idle_timeout.max(Duration::from_millis(100));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                let Some(pools) = pools.upgrade() else {
                    return;
                };
                pools.sweep();
            }
        });
        true
    }

    fn sweep(&self) {
        let Some(pool) = self.threads.get() else {
            return;
        };
        let now = Instant::now();
        for list in pool.borrow_mut().servers.values_mut() {
            self.tidy(list, now);
        }
    }

    /// A new connection to `uri`'s server (TLS when its scheme says so), its task spawned on this
    /// thread's runtime.
    async fn connect(&self, uri: Uri) -> Result<Sender, SendError> {
        let io = self
            .connector
            .clone()
            .call(uri)
            .await
            .map_err(SendError::Connect)?;
        let (mut sender, connection) = http1::Builder::new()
            .handshake(io)
            .await
            .map_err(SendError::Hyper)?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "origin connection ended");
            }
        });
        sender.ready().await.map_err(SendError::Hyper)?;
        Ok(sender)
    }
}
