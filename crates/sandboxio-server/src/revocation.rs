//! The credentials of long-lived answers and commands, watched for revocation and expiry.
//! A request checks its credential once, at its start; what outlives that start (an E2B
//! command stream, a native streamed exec or WebSocket, a background command) holds a
//! [`Revoked`] for the credential it was started with. One task checks every watched
//! credential against the store each [`POLL`] (keys are revoked by `sandboxio keys revoke`,
//! another process, so there is nothing to be told by), and wakes the holders of those
//! no longer live: a stream ends with `SBX_E1802` and a command is cancelled. A store that
//! cannot be read changes nothing (the next check tries again). The dashboard's event
//! stream checks its session the same way, every two seconds.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use chrono::Utc;
use sandboxio_gateway::store::Store;
use tokio::sync::watch;

/// How often the watched credentials are checked.
pub const POLL: Duration = Duration::from_secs(1);

/// Why a command started with a credential no longer live was cancelled.
pub const CANCELLED: &str = "the credential that started it was revoked or expired (SBX_E1802)";

struct Watched {
    tx: watch::Sender<bool>,
    holders: usize,
}

/// The watched credentials (in `AppState`).
#[derive(Default)]
pub struct Revocations {
    watched: Mutex<HashMap<String, Watched>>,
    running: AtomicBool,
}

/// A watch on one credential: [`Revoked::wait`] returns once it is revoked or expired (or
/// its key is, for a capability token). Dropping it ends the watch.
pub struct Revoked {
    rx: watch::Receiver<bool>,
    id: String,
    owner: Weak<Revocations>,
}

impl Revoked {
    /// Returns once the credential is no longer live; never otherwise.
    pub async fn wait(&mut self) {
        if self.rx.wait_for(|r| *r).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// [`Revoked::wait`], owning the watch (for a task of its own).
    pub async fn wait_owned(mut self) {
        self.wait().await
    }
}

impl Drop for Revoked {
    fn drop(&mut self) {
        let Some(owner) = self.owner.upgrade() else {
            return;
        };
        if let Ok(mut m) = owner.watched.lock() {
            if let Some(w) = m.get_mut(&self.id) {
                w.holders = w.holders.saturating_sub(1);
                if w.holders == 0 {
                    m.remove(&self.id);
                }
            }
        };
    }
}

/// Whether credential `id` is live now (and its key, for a capability token); `None` when
/// the store could not say.
fn live(store: &dyn Store, id: &str) -> Option<bool> {
    let now = Utc::now();
    let Some(c) = store.credential(id).ok()? else {
        return Some(false);
    };
    if !c.is_live(now) {
        return Some(false);
    }
    match &c.parent {
        Some(p) => Some(store.credential(p).ok()?.is_some_and(|p| p.is_live(now))),
        None => Some(true),
    }
}

impl Revocations {
    /// Watches credential `id` (checked in `store`) from now on.
    pub fn watch(self: &Arc<Self>, store: &Arc<dyn Store>, id: &str) -> Revoked {
        let rx = match self.watched.lock() {
            Ok(mut m) => {
                let w = m.entry(id.to_string()).or_insert_with(|| Watched {
                    tx: watch::channel(false).0,
                    holders: 0,
                });
                w.holders += 1;
                w.tx.subscribe()
            }
            // A poisoned map watches nothing: the holder is never woken (as before).
            Err(_) => watch::channel(false).1,
        };
        if !self.running.swap(true, Ordering::AcqRel) {
            tokio::spawn(poll(Arc::downgrade(self), store.clone()));
        }
        Revoked {
            rx,
            id: id.to_string(),
            owner: Arc::downgrade(self),
        }
    }

    /// How many credentials are watched now.
    pub fn watched(&self) -> usize {
        self.watched.lock().map(|m| m.len()).unwrap_or(0)
    }
}

async fn poll(me: Weak<Revocations>, store: Arc<dyn Store>) {
    loop {
        tokio::time::sleep(POLL).await;
        let Some(r) = me.upgrade() else {
            return;
        };
        let ids: Vec<String> = match r.watched.lock() {
            Ok(m) => m.keys().cloned().collect(),
            Err(_) => return,
        };
        drop(r);
        if ids.is_empty() {
            continue;
        }
        let st = store.clone();
        let gone = tokio::task::spawn_blocking(move || {
            ids.into_iter()
                .filter(|id| live(st.as_ref(), id) == Some(false))
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        let Some(r) = me.upgrade() else {
            return;
        };
        if let Ok(m) = r.watched.lock() {
            for id in gone {
                if let Some(w) = m.get(&id) {
                    w.tx.send_replace(true);
                }
            }
        };
    }
}
