//! Store calls off the async workers. SQLite waits for its write lock (up to its busy
//! timeout, while another process holds it) and fsyncs on commit; run inline on an async
//! worker, either would stall every other task of that worker: a server's health checks,
//! other clients' requests, the approval poll of another operation. So every store call
//! the chain makes from async code runs on the runtime's blocking pool; without a runtime
//! (a plain thread) it runs inline.

use std::sync::Arc;

use super::Gateway;
use crate::config::GatewayConfig;
use crate::error::GatewayError;
use crate::store::{Store, StoreResult};

impl Gateway {
    /// Runs `f` with the store and the settings on the blocking pool and awaits it.
    pub(crate) async fn on_store<T, F>(&self, action: &'static str, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&dyn Store, &GatewayConfig) -> StoreResult<T> + Send + 'static,
    {
        off_worker(action, self.store.clone(), self.cfg.clone(), f).await
    }
}

/// See the module docs; `action` names the call in the error when the task is lost (the
/// runtime shutting down, or a panic in the store).
pub(crate) async fn off_worker<T, F>(
    action: &'static str,
    store: Arc<dyn Store>,
    cfg: Arc<GatewayConfig>,
    f: F,
) -> StoreResult<T>
where
    T: Send + 'static,
    F: FnOnce(&dyn Store, &GatewayConfig) -> StoreResult<T> + Send + 'static,
{
    match tokio::runtime::Handle::try_current() {
        Ok(h) => {
            // What the closure logs (the logging sink's audit line, store warnings) stays
            // inside the operation's span on the blocking thread too.
            let span = tracing::Span::current();
            h.spawn_blocking(move || {
                let _in_span = span.enter();
                f(store.as_ref(), &cfg)
            })
            .await
            .unwrap_or_else(|e| {
                Err(GatewayError::StoreTask {
                    action,
                    why: e.to_string(),
                })
            })
        }
        Err(_) => f(store.as_ref(), &cfg),
    }
}
