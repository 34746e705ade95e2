//! The sandboxes of one MCP session: created by `create_sandbox` (or on first use, the
//! default one), owned by the tenant that created them, closed by `close_sandbox` or when
//! the MCP session ends. Another tenant's sandbox answers like a missing one.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use sandboxio_core::{IsolationTier, Principal};
use sandboxio_gateway::{Gateway, Sandbox};

use crate::error::McpError;

/// Sandboxes one MCP session may hold at once.
pub const MAX_SANDBOXES: usize = 16;

/// A tenant's most sandboxes, and how many it holds elsewhere (the HTTP API).
type Room = dyn Fn(&str) -> (usize, usize) + Send + Sync;

/// The sandbox quota of tenants over HTTP: the sandboxes every MCP session of a server
/// holds count, with the HTTP API's, against the tenant's `max_sandboxes`.
pub struct Quota {
    held: Mutex<HashMap<String, usize>>,
    room: Box<Room>,
    /// The server's quota lock (`Sessions::quota_gate`), held over the check and the
    /// place so that an HTTP create and an MCP create cannot both take the last one.
    gate: Option<Arc<Mutex<()>>>,
}

impl Quota {
    pub fn new(room: impl Fn(&str) -> (usize, usize) + Send + Sync + 'static) -> Quota {
        Quota {
            held: Mutex::new(HashMap::new()),
            room: Box::new(room),
            gate: None,
        }
    }

    /// Checks and takes places under `gate`, the lock the other front end takes too.
    pub fn with_gate(mut self, gate: Arc<Mutex<()>>) -> Quota {
        self.gate = Some(gate);
        self
    }

    /// Takes a place for one more sandbox of `tenant`, or refuses.
    fn take(&self, tenant: &str) -> Result<(), McpError> {
        let _gate = self
            .gate
            .as_ref()
            .map(|g| g.lock().unwrap_or_else(|p| p.into_inner()));
        // Read before this lock, never under it: the HTTP API reads this quota while it
        // holds its sandboxes' lock (the two locks in both orders would deadlock).
        let (max, elsewhere) = (self.room)(tenant);
        let mut held = self.held.lock().map_err(|_| McpError::Poisoned)?;
        let n = held.entry(tenant.to_string()).or_insert(0);
        if *n + elsewhere >= max {
            return Err(McpError::Quota {
                tenant: tenant.to_string(),
                limit: max,
            });
        }
        *n += 1;
        Ok(())
    }

    fn give(&self, tenant: &str) {
        if let Ok(mut held) = self.held.lock() {
            if let Some(n) = held.get_mut(tenant) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    held.remove(tenant);
                }
            }
        }
    }

    /// Sandboxes `tenant` holds through MCP sessions.
    pub fn held(&self, tenant: &str) -> usize {
        self.held
            .lock()
            .map(|h| h.get(tenant).copied().unwrap_or(0))
            .unwrap_or(0)
    }
}

struct Entry {
    tenant: String,
    sandbox: Arc<Sandbox>,
}

pub struct Sandboxes {
    gw: Arc<Gateway>,
    work_root: Option<PathBuf>,
    by_id: Mutex<HashMap<String, Entry>>,
    /// The default sandbox per tenant (calls that name none).
    defaults: Mutex<HashMap<String, String>>,
    /// The tenants' quota shared with the other sessions (HTTP).
    quota: Option<Arc<Quota>>,
}

impl Sandboxes {
    pub fn new(gw: Arc<Gateway>, work_root: Option<PathBuf>) -> Sandboxes {
        Sandboxes {
            gw,
            work_root,
            by_id: Mutex::new(HashMap::new()),
            defaults: Mutex::new(HashMap::new()),
            quota: None,
        }
    }

    /// Sandboxes counted against `quota` too.
    pub fn with_quota(mut self, quota: Option<Arc<Quota>>) -> Sandboxes {
        self.quota = quota;
        self
    }

    pub fn create(
        &self,
        principal: &Principal,
        tier: Option<IsolationTier>,
    ) -> Result<Arc<Sandbox>, McpError> {
        let mut map = self.by_id.lock().map_err(|_| McpError::Poisoned)?;
        if map.len() >= MAX_SANDBOXES {
            return Err(McpError::TooManySandboxes { max: MAX_SANDBOXES });
        }
        if let Some(q) = &self.quota {
            q.take(&principal.tenant)?;
        }
        let sandbox = Sandbox::create(
            self.gw.clone(),
            principal.clone(),
            tier,
            self.work_root.as_deref(),
        )
        .map_err(|e| {
            if let Some(q) = &self.quota {
                q.give(&principal.tenant);
            }
            McpError::Gateway {
                code: sandboxio_core::ErrorCode::code(&e),
                why: e.to_string(),
            }
        })?;
        let sandbox = Arc::new(sandbox);
        map.insert(
            sandbox.id().to_string(),
            Entry {
                tenant: principal.tenant.clone(),
                sandbox: sandbox.clone(),
            },
        );
        Ok(sandbox)
    }

    /// The named sandbox if `tenant` owns it, else the tenant's default sandbox (created on
    /// first use).
    pub fn get(&self, principal: &Principal, id: Option<&str>) -> Result<Arc<Sandbox>, McpError> {
        if let Some(id) = id {
            let map = self.by_id.lock().map_err(|_| McpError::Poisoned)?;
            return match map.get(id) {
                Some(e) if e.tenant == principal.tenant => Ok(e.sandbox.clone()),
                _ => Err(McpError::NoSandbox { id: id.to_string() }),
            };
        }
        let mut defaults = self.defaults.lock().map_err(|_| McpError::Poisoned)?;
        if let Some(id) = defaults.get(&principal.tenant) {
            let map = self.by_id.lock().map_err(|_| McpError::Poisoned)?;
            if let Some(e) = map.get(id) {
                return Ok(e.sandbox.clone());
            }
        }
        let s = self.create(principal, None)?;
        defaults.insert(principal.tenant.clone(), s.id().to_string());
        Ok(s)
    }

    /// Closes a sandbox the tenant owns; `false` when there is none by that id.
    pub fn close(&self, tenant: &str, id: &str) -> Result<bool, McpError> {
        let mut map = self.by_id.lock().map_err(|_| McpError::Poisoned)?;
        match map.get(id) {
            Some(e) if e.tenant == tenant => {}
            _ => return Ok(false),
        }
        if let Some(e) = map.remove(id) {
            e.sandbox.close();
            if let Some(q) = &self.quota {
                q.give(&e.tenant);
            }
        }
        if let Ok(mut d) = self.defaults.lock() {
            d.retain(|_, v| v != id);
        }
        Ok(true)
    }

    pub fn len(&self) -> usize {
        self.by_id.lock().map(|m| m.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for Sandboxes {
    fn drop(&mut self) {
        if let Ok(map) = self.by_id.get_mut() {
            for e in map.values() {
                e.sandbox.close();
                if let Some(q) = &self.quota {
                    q.give(&e.tenant);
                }
            }
        }
    }
}
