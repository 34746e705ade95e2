//! The egress proxy: an HTTP/1.1 forward proxy (absolute-form requests) and CONNECT
//! tunnels, serving one sandbox. Every tunnel and every forwarded request is decided
//! before anything leaves; the connection goes to the address the decision checked.

mod bodyless;
mod forward;
mod idle;
mod limits;
mod origin;
mod respond;
pub(crate) mod scrub;
mod stall;
mod terminate;
mod tunnel;

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::decide::{Decide, Verdict};
use crate::edge::Edge;
use crate::error::Refusal;
use crate::target::Target;
pub use limits::{Budget, Limits};
pub use respond::Body;

/// A client connection's slot, held by its tunnel once it becomes one.
type Slot = Arc<Mutex<Option<Permits>>>;

/// What one client connection holds: its place among its proxy's connections and among
/// the process's.
pub(super) struct Permits {
    _own: OwnedSemaphorePermit,
    _process: OwnedSemaphorePermit,
}

/// Connections one proxy serves at once, tunnels included; more wait in the listener's
/// backlog. Lower when the process may hold few descriptors (see [`Limits`]).
pub const MAX_CONNECTIONS: usize = 1024;
/// Tunnels one proxy (one sandbox) holds at once; a CONNECT past it gets 503.
pub const MAX_TUNNELS: usize = 512;
/// How long a tunnel may go without a byte either way.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an upstream may take to accept a connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client may take to send a request head.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest request head accepted.
pub const MAX_HEAD: usize = 64 * 1024;

/// What one proxy refused, for the sandbox's record and its caller.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Connections and requests refused (by rules, the SSRF guard, policy or the proxy).
    pub denials: u64,
    /// `host:port` of each refused target, once each.
    pub denied_hosts: BTreeSet<String>,
    /// Connections and requests allowed.
    pub allowed: u64,
}

pub struct Proxy {
    decider: Arc<dyn Decide>,
    summary: Mutex<Summary>,
    /// Client connections (tunnels keep theirs).
    slots: Arc<Semaphore>,
    /// Tunnels.
    tunnels: Arc<Semaphore>,
    limits: Limits,
    /// Connections all proxies of the process share.
    budget: Budget,
    /// Secrets at the edge, when the sandbox has any.
    edge: Option<Arc<Edge>>,
}

impl Proxy {
    pub fn new(decider: Arc<dyn Decide>) -> Arc<Proxy> {
        Proxy::with_edge(decider, None)
    }

    /// A proxy that also injects the secrets of `edge` (see [`crate::edge`]).
    pub fn with_edge(decider: Arc<dyn Decide>, edge: Option<Arc<Edge>>) -> Arc<Proxy> {
        Proxy::with_limits(decider, edge, Limits::default())
    }

    /// A proxy with its own [`Limits`].
    pub fn with_limits(
        decider: Arc<dyn Decide>,
        edge: Option<Arc<Edge>>,
        limits: Limits,
    ) -> Arc<Proxy> {
        Proxy::with_budget(decider, edge, limits, Budget::process())
    }

    /// [`Proxy::with_limits`] drawing on `budget` (what all proxies of the process share)
    /// instead of the process's own.
    pub fn with_budget(
        decider: Arc<dyn Decide>,
        edge: Option<Arc<Edge>>,
        limits: Limits,
        budget: Budget,
    ) -> Arc<Proxy> {
        let limits = limits.checked();
        Arc::new(Proxy {
            budget,
            decider,
            summary: Mutex::new(Summary::default()),
            slots: Arc::new(Semaphore::new(limits.connections)),
            tunnels: Arc::new(Semaphore::new(limits.tunnels)),
            limits,
            edge,
        })
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    pub fn summary(&self) -> Summary {
        self.summary.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Accepts and serves connections until the future is dropped (or the task aborted).
    pub async fn serve(self: Arc<Self>, listener: TcpListener) {
        loop {
            let Ok(permit) = self.slots.clone().acquire_owned().await else {
                return;
            };
            match listener.accept().await {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    let me = self.clone();
                    // The slot goes with the connection, and with its tunnel if it becomes one.
                    match self.budget.try_take() {
                        Some(process) => {
                            let held = Permits {
                                _own: permit,
                                _process: process,
                            };
                            tokio::spawn(me.serve_in_slot(stream, Some(held)));
                        }
                        // Past the process's cap: a 503 and the connection closed.
                        None => {
                            tokio::spawn(full(stream, self.budget.limit(), permit));
                        }
                    }
                }
                Err(e) => {
                    // Out of fds or a connection reset before accept: wait and go on.
                    tracing::debug!("egress proxy accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    /// Serves one client connection (several requests with keep-alive, or one tunnel).
    pub async fn serve_connection<S>(self: Arc<Self>, io: S)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        self.serve_in_slot(io, None).await;
    }

    async fn serve_in_slot<S>(self: Arc<Self>, io: S, permit: Option<Permits>)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let me = self.clone();
        let slot: Slot = Arc::new(Mutex::new(permit));
        let service = hyper::service::service_fn(move |req| me.clone().handle(req, slot.clone()));
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_TIMEOUT)
            .max_buf_size(MAX_HEAD)
            .serve_connection(TokioIo::new(io), service)
            .with_upgrades();
        if let Err(e) = conn.await {
            tracing::debug!("egress proxy connection ended: {e}");
        }
    }

    async fn handle(
        self: Arc<Self>,
        req: Request<Incoming>,
        slot: Slot,
    ) -> Result<Response<Body>, Infallible> {
        Ok(if req.method() == Method::CONNECT {
            self.connect(req, slot).await
        } else {
            self.forward(req).await
        })
    }

    /// Asks the decider; counts what it refused.
    async fn decide(&self, target: &Target) -> Verdict {
        let v = self.decider.decide(target.clone()).await;
        self.count(target, &v);
        v
    }

    fn count(&self, target: &Target, v: &Verdict) {
        if let Ok(mut s) = self.summary.lock() {
            match v {
                Verdict::Allow(_) => s.allowed += 1,
                Verdict::Deny { .. } => {
                    s.denials += 1;
                    s.denied_hosts.insert(target.authority());
                }
            }
        }
    }

    /// Decides `target`, then connects to an address the decision checked: the stream, or
    /// the answer a refusal or an unreachable upstream gets.
    async fn open(&self, target: &Target) -> Result<TcpStream, Response<Body>> {
        let addrs = match self.decide(target).await {
            Verdict::Allow(a) => a,
            deny => return Err(respond::denied(&deny)),
        };
        connect_any(&addrs)
            .await
            .map_err(|why| upstream_unreachable(target, why))
    }

    /// A refusal by the proxy itself, counted and told to the decider (to be recorded).
    async fn refuse(&self, target: &Target, refusal: Refusal) -> Verdict {
        use sandboxio_core::ErrorCode;
        let v = Verdict::Deny {
            code: refusal.code().to_string(),
            layer: "egress".into(),
            reason: refusal.to_string(),
        };
        self.count(target, &v);
        self.decider.refused(target.clone(), refusal).await;
        v
    }
}

/// The answer when `target` was allowed but could not be reached.
/// The 503 for a connection past the process's cap (`SBX_E2432`), written as it is.
async fn full(mut stream: TcpStream, limit: usize, _permit: OwnedSemaphorePermit) {
    use sandboxio_core::ErrorCode;
    use tokio::io::AsyncWriteExt;
    let refusal = Refusal::ProcessFull { limit };
    tracing::warn!("egress proxy: {refusal}");
    let body = format!("sandboxio[{}]: egress refused: {refusal}\n", refusal.code());
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\nx-sandboxio-code: {}\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        refusal.code(),
        body.len()
    );
    let write = stream.write_all(answer.as_bytes());
    let _ = tokio::time::timeout(Duration::from_secs(5), write).await;
    let _ = stream.shutdown().await;
}

fn upstream_unreachable(target: &Target, why: String) -> Response<Body> {
    respond::unreachable(&Refusal::Unreachable {
        target: target.authority(),
        why,
    })
}

/// An HTTP/1 client connection to the upstream over `io`, driven by a task of its own.
async fn http1_client<S, B>(io: S) -> Result<SendRequest<B>, String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// Connects to the first checked address that answers.
async fn connect_any(addrs: &[SocketAddr]) -> Result<TcpStream, String> {
    let mut last = String::from("no address to connect to");
    for a in addrs {
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(a)).await {
            Ok(Ok(s)) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Ok(Err(e)) => last = format!("{a}: {e}"),
            Err(_) => last = format!("{a}: timed out"),
        }
    }
    Err(last)
}
