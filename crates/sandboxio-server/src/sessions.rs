//! Sandboxes as sessions: a workspace that outlives single operations, owned by one tenant,
//! closed on delete, after its idle timeout or at the end of its lifetime.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sandboxio_core::{IsolationTier, Limits};
use sandboxio_gateway::CancelToken;

use crate::context::random_hex;
use crate::error::ServerError;

/// What a sandbox is created with.
#[derive(Debug, Clone)]
pub struct SessionSpec {
    pub tier: IsolationTier,
    pub limits: Limits,
    pub env: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
    pub idle_timeout: Duration,
    pub lifetime: Duration,
}

pub struct Session {
    pub id: String,
    pub tenant: String,
    pub spec: SessionSpec,
    pub dir: PathBuf,
    pub created_at: DateTime<Utc>,
    expires_at: Mutex<DateTime<Utc>>,
    last_active: Mutex<DateTime<Utc>>,
    busy: AtomicUsize,
    /// Cancelled when the sandbox closes: every operation running in it stops.
    pub cancel: CancelToken,
    /// What runs in it now (and background processes that ended, until read).
    pub processes: crate::processes::Processes,
    /// Stateful code contexts (their kernels run as processes of kind `context`).
    pub contexts: crate::contexts::Contexts,
}

/// Marks a session busy while an operation runs in it (the idle reaper leaves it alone).
pub struct Busy(Arc<Session>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::SeqCst);
        self.0.touch();
    }
}

fn chrono_dur(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

impl Session {
    pub fn touch(&self) {
        if let Ok(mut t) = self.last_active.lock() {
            *t = Utc::now();
        }
    }

    pub fn begin(self: &Arc<Self>) -> Busy {
        self.busy.fetch_add(1, Ordering::SeqCst);
        self.touch();
        Busy(self.clone())
    }

    pub fn expires_at(&self) -> DateTime<Utc> {
        self.expires_at
            .lock()
            .map(|t| *t)
            .unwrap_or_else(|_| Utc::now())
    }

    pub fn last_active(&self) -> DateTime<Utc> {
        self.last_active
            .lock()
            .map(|t| *t)
            .unwrap_or_else(|_| Utc::now())
    }

    pub fn busy(&self) -> usize {
        self.busy.load(Ordering::SeqCst)
    }

    /// Extends the lifetime by `by`, never past `max` from creation. Returns the new end.
    pub fn extend(&self, by: Duration, max: Duration) -> DateTime<Utc> {
        let cap = self.created_at + chrono_dur(max);
        let mut t = match self.expires_at.lock() {
            Ok(t) => t,
            Err(p) => p.into_inner(),
        };
        let base = (*t).max(Utc::now());
        *t = (base + chrono_dur(by)).min(cap);
        *t
    }

    /// Why the reaper should close it at `now`, if it should.
    pub fn reap_reason(&self, now: DateTime<Utc>) -> Option<&'static str> {
        if now >= self.expires_at() {
            return Some("its lifetime ended");
        }
        if self.busy() == 0 && now - self.last_active() >= chrono_dur(self.spec.idle_timeout) {
            return Some("it was idle past its idle timeout");
        }
        None
    }

    fn close(&self, why: &str) {
        self.cancel.cancel(format!("sandbox closed: {why}"));
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(sandbox = %self.id, "removing a sandbox workspace failed: {e}");
            }
        }
    }
}

pub struct Sessions {
    map: RwLock<HashMap<String, Arc<Session>>>,
    root: PathBuf,
    max_per_tenant: usize,
}

impl Sessions {
    pub fn new(root: PathBuf, max_per_tenant: usize) -> Sessions {
        Sessions {
            map: RwLock::new(HashMap::new()),
            root,
            max_per_tenant,
        }
    }

    pub fn create(&self, tenant: &str, spec: SessionSpec) -> Result<Arc<Session>, ServerError> {
        use std::os::unix::fs::PermissionsExt;
        let internal = |_| ServerError::Internal {
            action: "creating a sandbox workspace",
        };
        let mut map = self.map.write().map_err(|_| ServerError::Internal {
            action: "creating a sandbox",
        })?;
        if map.values().filter(|s| s.tenant == tenant).count() >= self.max_per_tenant {
            return Err(ServerError::Quota {
                tenant: tenant.to_string(),
                limit: self.max_per_tenant,
            });
        }
        std::fs::create_dir_all(&self.root).map_err(internal)?;
        // Sandboxed programs run as an unprivileged id: they may pass through, not list.
        std::fs::set_permissions(&self.root, std::fs::Permissions::from_mode(0o711))
            .map_err(internal)?;
        let id = random_hex(16);
        let dir = self.root.join(&id);
        std::fs::create_dir(&dir).map_err(internal)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).map_err(internal)?;
        let now = Utc::now();
        let s = Arc::new(Session {
            id: id.clone(),
            tenant: tenant.to_string(),
            expires_at: Mutex::new(now + chrono_dur(spec.lifetime)),
            spec,
            dir,
            created_at: now,
            last_active: Mutex::new(now),
            busy: AtomicUsize::new(0),
            cancel: CancelToken::new(),
            processes: crate::processes::Processes::default(),
            contexts: crate::contexts::Contexts::default(),
        });
        map.insert(id, s.clone());
        Ok(s)
    }

    /// The tenant's sandbox `id`; another tenant's is `None`, exactly like a missing one.
    pub fn get(&self, tenant: &str, id: &str) -> Option<Arc<Session>> {
        let map = self.map.read().ok()?;
        map.get(id).filter(|s| s.tenant == tenant).cloned()
    }

    pub fn list(&self, tenant: &str) -> Vec<Arc<Session>> {
        let mut v: Vec<Arc<Session>> = self
            .map
            .read()
            .map(|m| m.values().filter(|s| s.tenant == tenant).cloned().collect())
            .unwrap_or_default();
        v.sort_by_key(|s| s.created_at);
        v
    }

    /// Every open sandbox, oldest first (the dashboard's operator view).
    pub fn all(&self) -> Vec<Arc<Session>> {
        let mut v: Vec<Arc<Session>> = self
            .map
            .read()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        v.sort_by_key(|s| s.created_at);
        v
    }

    /// The tenants with an open sandbox.
    pub fn tenants(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .map
            .read()
            .map(|m| m.values().map(|s| s.tenant.clone()).collect())
            .unwrap_or_default();
        v.sort();
        v.dedup();
        v
    }

    pub fn count(&self) -> usize {
        self.map.read().map(|m| m.len()).unwrap_or(0)
    }

    /// Closes the tenant's sandbox `id` (cancels what runs in it, removes its workspace).
    pub fn remove(&self, tenant: &str, id: &str, why: &str) -> Option<Arc<Session>> {
        let s = {
            let mut map = self.map.write().ok()?;
            if map.get(id).is_some_and(|s| s.tenant == tenant) {
                map.remove(id)
            } else {
                None
            }
        }?;
        s.close(why);
        Some(s)
    }

    /// Closes every sandbox whose lifetime ended or that sat idle too long.
    pub fn reap(&self, now: DateTime<Utc>) -> Vec<(Arc<Session>, &'static str)> {
        let due: Vec<(Arc<Session>, &'static str)> = {
            let Ok(mut map) = self.map.write() else {
                return Vec::new();
            };
            let ids: Vec<(String, &'static str)> = map
                .values()
                .filter_map(|s| s.reap_reason(now).map(|r| (s.id.clone(), r)))
                .collect();
            ids.into_iter()
                .filter_map(|(id, r)| map.remove(&id).map(|s| (s, r)))
                .collect()
        };
        for (s, why) in &due {
            s.close(why);
        }
        due
    }

    /// Closes everything (shutdown).
    pub fn close_all(&self, why: &str) -> usize {
        let all: Vec<Arc<Session>> = self
            .map
            .write()
            .map(|mut m| m.drain().map(|(_, s)| s).collect())
            .unwrap_or_default();
        for s in &all {
            s.close(why);
        }
        all.len()
    }
}
