//! The accept loop: a Unix socket (0600) or TCP, optionally TLS; a bound on open
//! connections, where a new connection takes the place of one with no request in progress
//! once it is reached (`conns.rs`); a header timeout per connection (slow or idle clients
//! are cut); graceful
//! shutdown: stop accepting, let running requests finish up to the grace period, then cancel
//! what still runs and wait for it to be recorded.

use std::future::Future;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};
use tokio_rustls::TlsAcceptor;

use crate::error::ServerError;
use crate::options::{Listen, ServeOptions};
use crate::state::AppState;

/// How long a TLS handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// After cancelling, how long to wait for cancelled operations to be recorded.
const CANCEL_WAIT: Duration = Duration::from_secs(10);

enum Bound {
    Unix(UnixListener, std::path::PathBuf),
    Tcp(TcpListener),
}

/// A listening socket, before serving (tests and the CLI learn the address from it).
pub struct Listener {
    bound: Bound,
    tls: Option<TlsAcceptor>,
}

impl Listener {
    pub async fn bind(opts: &ServeOptions) -> Result<Listener, ServerError> {
        let tls = match &opts.tls {
            Some(files) => Some(crate::tls::acceptor(files)?),
            None => None,
        };
        let bound = match &opts.listen {
            Listen::Tcp(addr) => {
                Bound::Tcp(
                    TcpListener::bind(addr)
                        .await
                        .map_err(|e| ServerError::Listen {
                            addr: addr.to_string(),
                            source: e,
                        })?,
                )
            }
            Listen::Unix(path) => Bound::Unix(bind_unix(path)?, path.clone()),
        };
        Ok(Listener { bound, tls })
    }

    /// Where it listens (`unix:/path` or `ip:port`).
    pub fn address(&self) -> String {
        match &self.bound {
            Bound::Unix(_, p) => format!("unix:{}", p.display()),
            Bound::Tcp(l) => l
                .local_addr()
                .map(|a| a.to_string())
                .unwrap_or_else(|_| "tcp:?".into()),
        }
    }

    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }
}

/// A Unix socket readable and writable by its owner only. A stale socket file (nobody
/// listening) is replaced; anything else at the path is an error.
fn bind_unix(path: &Path) -> Result<UnixListener, ServerError> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let err = |e: std::io::Error| ServerError::Listen {
        addr: format!("unix:{}", path.display()),
        source: e,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        let live = std::os::unix::net::UnixStream::connect(path).is_ok();
        if !meta.file_type().is_socket() || live {
            return Err(err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                "the path exists and is not a stale socket",
            )));
        }
        std::fs::remove_file(path).map_err(err)?;
    }
    // Bound under a temporary name, made 0600, then renamed into place: nobody can connect
    // through the final path before its mode is set.
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.{}", crate::context::random_hex(6)));
    let l = UnixListener::bind(&tmp).map_err(err)?;
    let placed = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
        .and_then(|_| std::fs::rename(&tmp, path));
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&tmp);
        return Err(err(e));
    }
    Ok(l)
}

/// Serves until `shutdown` resolves, then drains (see the module doc).
pub async fn serve(
    listener: Listener,
    app: Router,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServerError> {
    let opts = state.opts.clone();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let conns = crate::conns::Conns::new(opts.max_connections);
    let (restored, lost) = crate::lifecycle::restore(&state).await;
    if restored + lost > 0 {
        tracing::info!(restored, lost, "sandboxes from the last run");
    }
    let reaper = tokio::spawn(reap(state.clone()));
    tokio::pin!(shutdown);
    let Listener { bound, tls } = listener;
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => break,
            a = accept(&bound) => a,
        };
        let stream = match accepted {
            Ok(s) => s,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let app = app.clone();
        let tls = tls.clone();
        let header_timeout = opts.header_timeout;
        let stop = stop_rx.clone();
        let conns = conns.clone();
        tokio::spawn(async move {
            // Past the bound, with every connection busy: close this one at once.
            let Some(admitted) = conns.admit().await else {
                drop(stream);
                return;
            };
            let svc = TowerToHyperService::new(conns.service(app, admitted.state.clone()));
            let evict = &*admitted.state;
            match (stream, tls) {
                (Stream::Tcp(s), Some(acc)) => {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acc.accept(s)).await {
                        Ok(Ok(s)) => serve_conn(s, svc, header_timeout, stop, evict).await,
                        _ => tracing::debug!("tls handshake failed or timed out"),
                    }
                }
                (Stream::Tcp(s), None) => serve_conn(s, svc, header_timeout, stop, evict).await,
                (Stream::Unix(s), _) => serve_conn(s, svc, header_timeout, stop, evict).await,
            }
        });
    }
    // Stop accepting; refuse new requests on open connections; let running ones finish.
    state.draining.store(true, Ordering::SeqCst);
    drop(bound);
    if let Listen::Unix(p) = &opts.listen {
        let _ = std::fs::remove_file(p);
    }
    tracing::info!("shutting down: waiting for running requests");
    let _ = stop_tx.send(true);
    let all = u32::try_from(opts.max_connections).unwrap_or(u32::MAX);
    let slots = conns.slots();
    let drained = tokio::time::timeout(opts.shutdown_grace, slots.acquire_many(all)).await;
    if drained.is_err() {
        let n = state.backend.cancel_all("the server is shutting down");
        tracing::warn!(
            cancelled = n,
            "grace period over: cancelled running operations"
        );
        let deadline = tokio::time::Instant::now() + CANCEL_WAIT;
        while state.backend.running() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    reaper.abort();
    state.refusals.flush(&state, true).await;
    // With manifests, sandboxes keep their files for the next start; without, they close.
    let closed = state.sessions.close_all("the server shut down");
    // Closing cancelled what still ran in them (background processes, context kernels):
    // wait for their records before the runtime goes.
    let deadline = tokio::time::Instant::now() + CANCEL_WAIT;
    while state.backend.running() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tracing::info!(sandboxes = closed, "server stopped");
    Ok(())
}

enum Stream {
    Unix(tokio::net::UnixStream),
    Tcp(tokio::net::TcpStream),
}

async fn accept(b: &Bound) -> std::io::Result<Stream> {
    match b {
        Bound::Unix(l, _) => l.accept().await.map(|(s, _)| Stream::Unix(s)),
        Bound::Tcp(l) => l.accept().await.map(|(s, _)| {
            let _ = s.set_nodelay(true);
            Stream::Tcp(s)
        }),
    }
}

async fn serve_conn<S>(
    io: S,
    svc: TowerToHyperService<crate::conns::Tracked>,
    header_timeout: Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
    evict: &crate::conns::ConnState,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut b = hyper::server::conn::http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .keep_alive(true);
    let conn = b.serve_connection(TokioIo::new(io), svc).with_upgrades();
    tokio::pin!(conn);
    let ended = tokio::select! {
        r = conn.as_mut() => r,
        // Another connection needs the place of this idle one: closed (dropped), unless
        // a request started in between.
        _ = evicted(evict) => {
            tracing::debug!("closed an idle connection to make room for a new one");
            return;
        }
        _ = stopped(&mut stop) => {
            // Finish the request in flight (if any), then close.
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = ended {
        tracing::debug!("connection ended: {e}");
    }
}

/// Resolves when this connection is asked to make room while it waits for its client (no
/// request in progress, or a request body that stalled).
async fn evicted(c: &crate::conns::ConnState) {
    loop {
        c.evict.notified().await;
        if c.waiting() {
            return;
        }
        c.stay();
    }
}

async fn stopped(rx: &mut tokio::sync::watch::Receiver<bool>) {
    loop {
        if *rx.borrow_and_update() {
            return;
        }
        if rx.changed().await.is_err() {
            // The sender lives until the server returns: never resolve early.
            std::future::pending::<()>().await;
        }
    }
}

/// Closes sandboxes past their lifetime or idle timeout, and records it.
async fn reap(state: AppState) {
    loop {
        tokio::time::sleep(state.opts.reap_every).await;
        // Refusals past the recorded rate: the summary of each window that ended.
        state.refusals.flush(&state, false).await;
        for (s, why) in state.sessions.reap(chrono::Utc::now()) {
            let ctx = crate::context::RequestCtx::from_headers(&axum::http::HeaderMap::new());
            let mut rec = crate::backend::server_record(
                "sandbox.reap",
                &s.tenant,
                &ctx,
                sandboxio_core::Verdict::Allow,
                format!("sandbox {} closed: {why}", s.id),
            );
            rec.session_id = Some(s.id.clone());
            state.backend.record(rec).await;
        }
    }
}
