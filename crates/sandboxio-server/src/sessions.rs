//! Sandboxes as sessions: a workspace that outlives single operations, owned by one tenant,
//! closed on delete, after its idle timeout or at the end of its lifetime. A sandbox may be
//! paused (what runs in it is cancelled, its files stay, nothing new starts until it is
//! resumed). With a manifest directory (`crate::manifest`) every sandbox is written down,
//! so a restarted server restores it with its files or reports it lost with a reason.

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
use crate::manifest::{Lost, Manifest, Manifests, SaveError};

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
    /// Whether it runs or is paused, and the token every operation in it is linked to.
    gate: Mutex<Gate>,
    /// When a restarted server restored it (its processes did not survive the restart).
    pub restored_at: Option<DateTime<Utc>>,
    /// Where it is written down (none: it lives in memory only).
    manifests: Option<Arc<Manifests>>,
    /// What runs in it now (and background processes that ended, until read).
    pub processes: crate::processes::Processes,
    /// Stateful code contexts (their kernels run as processes of kind `context`).
    pub contexts: crate::contexts::Contexts,
}

/// Paused or not, and the token of the current run: cancelled and replaced at each pause,
/// cancelled for good when the sandbox closes.
struct Gate {
    token: CancelToken,
    paused_at: Option<DateTime<Utc>>,
    closed: bool,
}

impl Gate {
    fn new(paused_at: Option<DateTime<Utc>>) -> Mutex<Gate> {
        Mutex::new(Gate {
            token: CancelToken::new(),
            paused_at,
            closed: false,
        })
    }
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

/// `at + d`, or the latest time there is when that is past it (never a panic: `d` may be
/// a caller's).
pub fn add_saturating(at: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    at.checked_add_signed(chrono_dur(d))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
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

    /// When its lifetime ends. A clock whose lock was poisoned (a panic while it was
    /// held) is not trusted: it ended at creation, so the reaper closes it (fail closed).
    pub fn expires_at(&self) -> DateTime<Utc> {
        self.expires_at
            .lock()
            .map(|t| *t)
            .unwrap_or(self.created_at)
    }

    /// When it was last used (a poisoned clock: at creation, so it counts as idle).
    pub fn last_active(&self) -> DateTime<Utc> {
        self.last_active
            .lock()
            .map(|t| *t)
            .unwrap_or(self.created_at)
    }

    pub fn busy(&self) -> usize {
        self.busy.load(Ordering::SeqCst)
    }

    /// Extends the lifetime by `by`, never past `max` from creation. Returns the new end.
    pub fn extend(&self, by: Duration, max: Duration) -> DateTime<Utc> {
        let cap = add_saturating(self.created_at, max);
        let Ok(mut t) = self.expires_at.lock() else {
            // Poisoned: its end is the creation (see `expires_at`), never extended.
            return self.expires_at();
        };
        let base = (*t).max(Utc::now());
        *t = add_saturating(base, by).min(cap);
        let end = *t;
        drop(t);
        self.save();
        end
    }

    /// Sets its end to `at` (earlier or later than now's), never past `max` from creation.
    /// Returns the new end.
    pub fn set_end(&self, at: DateTime<Utc>, max: Duration) -> DateTime<Utc> {
        let cap = add_saturating(self.created_at, max);
        let Ok(mut t) = self.expires_at.lock() else {
            return self.expires_at();
        };
        *t = at.min(cap);
        let end = *t;
        drop(t);
        self.save();
        end
    }

    fn gate(&self) -> std::sync::MutexGuard<'_, Gate> {
        match self.gate.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// The token an operation starting in it links to (cancelled when the sandbox is paused
    /// or closed). A paused sandbox starts nothing: `Paused` (409).
    pub fn run_token(&self) -> Result<CancelToken, ServerError> {
        let g = self.gate();
        if g.closed {
            return Err(ServerError::NotFound {
                what: "sandbox",
                id: self.id.clone(),
            });
        }
        if g.paused_at.is_some() {
            return Err(ServerError::Paused {
                id: self.id.clone(),
            });
        }
        Ok(g.token.clone())
    }

    /// When it was paused, if it is.
    pub fn paused_at(&self) -> Option<DateTime<Utc>> {
        self.gate().paused_at
    }

    /// `running` or `paused`.
    pub fn state(&self) -> &'static str {
        if self.paused_at().is_some() {
            "paused"
        } else {
            "running"
        }
    }

    /// Pauses it: every operation running in it is cancelled (its whole process tree
    /// killed, its record written, its reservation released) and its code contexts end;
    /// its files stay. `false` when it was already paused. See `crate::lifecycle::pause`.
    pub fn pause(&self) -> Result<bool, ServerError> {
        let old = {
            let mut g = self.gate();
            if g.closed {
                return Err(ServerError::NotFound {
                    what: "sandbox",
                    id: self.id.clone(),
                });
            }
            if g.paused_at.is_some() {
                return Ok(false);
            }
            g.paused_at = Some(Utc::now());
            std::mem::replace(&mut g.token, CancelToken::new())
        };
        old.cancel("the sandbox was paused");
        self.contexts.clear("the sandbox was paused");
        self.save();
        Ok(true)
    }

    /// Resumes a paused sandbox (its idle clock starts again). `false` when it was not paused.
    pub fn resume(&self) -> Result<bool, ServerError> {
        {
            let mut g = self.gate();
            if g.closed {
                return Err(ServerError::NotFound {
                    what: "sandbox",
                    id: self.id.clone(),
                });
            }
            if g.paused_at.take().is_none() {
                return Ok(false);
            }
        }
        self.touch();
        self.save();
        Ok(true)
    }

    /// Cancels what runs in it and ends its contexts, keeping its files and its manifest
    /// (server shutdown: the next start restores it).
    fn suspend(&self, why: &str) {
        let mut g = self.gate();
        g.closed = true;
        g.token.cancel(why.to_string());
        drop(g);
        self.contexts.clear(why);
    }

    /// Writes its manifest (when the server keeps them; atomically and durably, so it
    /// blocks on the disk); a failure is logged.
    pub fn save(&self) {
        if let Some(m) = &self.manifests {
            let _ = m.save(&Manifest::of(self));
        }
    }

    /// Why the reaper should close it at `now`, if it should. A paused sandbox is never
    /// idle; its lifetime still ends.
    pub fn reap_reason(&self, now: DateTime<Utc>) -> Option<&'static str> {
        if now >= self.expires_at() {
            return Some("its lifetime ended");
        }
        if self.paused_at().is_none()
            && self.busy() == 0
            && now - self.last_active() >= chrono_dur(self.spec.idle_timeout)
        {
            return Some("it was idle past its idle timeout");
        }
        None
    }

    fn close(&self, why: &str) {
        {
            let mut g = self.gate();
            g.closed = true;
            g.token.cancel(format!("sandbox closed: {why}"));
        }
        self.contexts.clear(why);
        if let Some(m) = &self.manifests {
            m.remove(&self.id);
        }
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(sandbox = %self.id, "removing a sandbox workspace failed: {e}");
            }
        }
    }
}

pub struct Sessions {
    map: RwLock<HashMap<String, Arc<Session>>>,
    /// Sandboxes a restart could not restore, with the reason, until deleted.
    lost: RwLock<HashMap<String, Lost>>,
    root: PathBuf,
    /// The workspace root exists with its mode (set by the first create).
    root_ready: std::sync::atomic::AtomicBool,
    max_per_tenant: usize,
    /// Tenants with a sandbox quota of their own.
    tenant_max: BTreeMap<String, usize>,
    manifests: Option<Arc<Manifests>>,
    /// Sandboxes a tenant holds through the server's other front ends (MCP sessions),
    /// which count against the same quota.
    elsewhere: std::sync::OnceLock<Box<Elsewhere>>,
    /// Held by every front end while it checks a tenant's quota and takes the place, so
    /// two front ends creating at once cannot both take the last one.
    quota_gate: Arc<std::sync::Mutex<()>>,
}

/// How many sandboxes a tenant holds outside this map.
pub type Elsewhere = dyn Fn(&str) -> usize + Send + Sync;

/// What a restart found: sandboxes restored, and those reported lost.
#[derive(Default)]
pub struct Restored {
    pub restored: Vec<Arc<Session>>,
    pub lost: Vec<Lost>,
}

impl Sessions {
    /// Sandboxes in memory only: a restart forgets them (their workspaces are removed at
    /// shutdown).
    pub fn new(root: PathBuf, max_per_tenant: usize) -> Sessions {
        Sessions {
            map: RwLock::new(HashMap::new()),
            lost: RwLock::new(HashMap::new()),
            root,
            root_ready: std::sync::atomic::AtomicBool::new(false),
            max_per_tenant,
            tenant_max: BTreeMap::new(),
            manifests: None,
            elsewhere: std::sync::OnceLock::new(),
            quota_gate: Arc::default(),
        }
    }

    /// Counts the sandboxes each tenant holds through another front end (MCP) against its
    /// quota too. Set once, by the front end when it is mounted; a second call is ignored.
    pub fn count_elsewhere(&self, count: Box<Elsewhere>) {
        let _ = self.elsewhere.set(count);
    }

    /// The lock a front end holds while it checks a tenant's quota and takes a place (the
    /// MCP sessions' quota takes it too): the check and the place are one step for all.
    pub fn quota_gate(&self) -> Arc<std::sync::Mutex<()>> {
        self.quota_gate.clone()
    }

    /// Sandboxes `tenant` holds elsewhere. Read before this map's lock is taken, never
    /// under it: the other front end reads this map under its own lock (the two locks
    /// taken in both orders would deadlock).
    fn held_elsewhere(&self, tenant: &str) -> usize {
        self.elsewhere.get().map_or(0, |f| f(tenant))
    }

    /// Sandboxes `tenant` holds in this map, plus `elsewhere`.
    fn held(map: &HashMap<String, Arc<Session>>, tenant: &str, elsewhere: usize) -> usize {
        map.values().filter(|x| x.tenant == tenant).count() + elsewhere
    }

    /// Sandbox quotas of particular tenants (the others have `max_per_tenant`).
    pub fn with_tenant_max(mut self, tenant_max: BTreeMap<String, usize>) -> Sessions {
        self.tenant_max = tenant_max;
        self
    }

    /// The most sandboxes `tenant` may hold.
    pub fn max_for(&self, tenant: &str) -> usize {
        self.tenant_max
            .get(tenant)
            .copied()
            .unwrap_or(self.max_per_tenant)
    }

    /// Background processes running now in the tenant's sandboxes.
    pub fn background_running(&self, tenant: &str) -> usize {
        self.list(tenant)
            .iter()
            .map(|s| s.processes.background_running())
            .sum()
    }

    /// Sandboxes written down in `dir` (see `crate::manifest`): a restart restores them.
    /// Their environments' values are sealed under the key from `key` (none: a sandbox
    /// with an environment is refused, `SBX_E1855`).
    pub fn with_manifests(
        mut self,
        dir: PathBuf,
        key: Option<sandboxio_gateway::egress::secrets::KeySource>,
    ) -> Sessions {
        self.manifests = Some(Arc::new(Manifests::new(dir, key)));
        self
    }

    pub fn keeps_manifests(&self) -> bool {
        self.manifests.is_some()
    }

    /// Creates a sandbox of `tenant`: its workspace, and its manifest written down
    /// (durably) before it is answered. The disk work runs on the blocking pool, never on
    /// the async workers, and outside the sandboxes' lock (the quota is checked before and
    /// again when it is inserted).
    pub async fn create(
        self: &Arc<Self>,
        tenant: &str,
        spec: SessionSpec,
    ) -> Result<Arc<Session>, ServerError> {
        self.check_quota(tenant)?;
        let me = self.clone();
        let t = tenant.to_string();
        let s = tokio::task::spawn_blocking(move || me.prepare(&t, spec))
            .await
            .map_err(|_| ServerError::Internal {
                action: "creating a sandbox",
            })??;
        let gate = self.quota_gate.clone();
        let _gate = gate.lock().unwrap_or_else(|p| p.into_inner());
        let elsewhere = self.held_elsewhere(tenant);
        let mut map = self.map.write().map_err(|_| ServerError::Internal {
            action: "creating a sandbox",
        })?;
        let max = self.max_for(tenant);
        if Self::held(&map, tenant, elsewhere) >= max {
            drop(map);
            // Another create took the last place meanwhile: undo this one.
            let me = self.clone();
            let s2 = s.clone();
            tokio::task::spawn_blocking(move || me.discard(&s2));
            return Err(ServerError::Quota {
                tenant: tenant.to_string(),
                limit: max,
            });
        }
        map.insert(s.id.clone(), s.clone());
        Ok(s)
    }

    fn check_quota(&self, tenant: &str) -> Result<(), ServerError> {
        let elsewhere = self.held_elsewhere(tenant);
        let map = self.map.read().map_err(|_| ServerError::Internal {
            action: "creating a sandbox",
        })?;
        let max = self.max_for(tenant);
        if Self::held(&map, tenant, elsewhere) >= max {
            return Err(ServerError::Quota {
                tenant: tenant.to_string(),
                limit: max,
            });
        }
        Ok(())
    }

    /// The workspace and the manifest of a new sandbox (blocking).
    fn prepare(&self, tenant: &str, spec: SessionSpec) -> Result<Arc<Session>, ServerError> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let internal = |e: std::io::Error| {
            tracing::warn!("creating a sandbox workspace failed: {e}");
            ServerError::Internal {
                action: "creating a sandbox workspace",
            }
        };
        let ready_root = || -> std::io::Result<()> {
            std::fs::create_dir_all(&self.root)?;
            // Sandboxed programs run as an unprivileged id: they may pass through, not list.
            std::fs::set_permissions(&self.root, std::fs::Permissions::from_mode(0o711))?;
            self.root_ready.store(true, Ordering::Release);
            Ok(())
        };
        if !self.root_ready.load(Ordering::Acquire) {
            ready_root().map_err(internal)?;
        }
        let id = random_hex(16);
        let dir = self.root.join(&id);
        let mkdir = || std::fs::DirBuilder::new().mode(0o755).create(&dir);
        match mkdir() {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // The root went away since: make it again.
                ready_root().and_then(|_| mkdir()).map_err(internal)?;
            }
            other => other.map_err(internal)?,
        }
        // The umask may have taken bits away.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).map_err(internal)?;
        let now = Utc::now();
        let s = Arc::new(Session {
            id: id.clone(),
            tenant: tenant.to_string(),
            expires_at: Mutex::new(add_saturating(now, spec.lifetime)),
            spec,
            dir,
            created_at: now,
            last_active: Mutex::new(now),
            busy: AtomicUsize::new(0),
            gate: Gate::new(None),
            restored_at: None,
            manifests: self.manifests.clone(),
            processes: crate::processes::Processes::default(),
            contexts: crate::contexts::Contexts::default(),
        });
        if let Some(m) = &self.manifests {
            if let Err(e) = m.save(&Manifest::of(&s)) {
                let _ = std::fs::remove_dir_all(&s.dir);
                return Err(match e {
                    SaveError::Seal(_) => ServerError::EnvNotSealed,
                    SaveError::Io(_) => ServerError::Internal {
                        action: "writing a sandbox's manifest",
                    },
                });
            }
        }
        Ok(s)
    }

    /// Removes a prepared sandbox that was not inserted (blocking).
    fn discard(&self, s: &Session) {
        if let Some(m) = &self.manifests {
            m.remove(&s.id);
        }
        let _ = std::fs::remove_dir_all(&s.dir);
    }

    /// Restores every sandbox written down by an earlier run of the server: with its files
    /// (and paused if it was), or reported lost with the reason (its workspace is gone, its
    /// manifest is unreadable, its lifetime ended while the server was stopped). Call once,
    /// before serving.
    pub fn restore(&self, now: DateTime<Utc>) -> Restored {
        let Some(m) = &self.manifests else {
            return Restored::default();
        };
        let mut out = Restored::default();
        for found in m.load_all() {
            let man = match found {
                Ok(man) => man,
                Err(lost) => {
                    out.lost.push(lost);
                    continue;
                }
            };
            if let Some(lost) = man.lost.clone() {
                // Reported at an earlier start and not deleted yet: still lost.
                if let Ok(mut l) = self.lost.write() {
                    l.insert(lost.id.clone(), lost);
                }
                continue;
            }
            let why = if !man.dir.is_dir() {
                tracing::warn!(sandbox = %man.id, dir = %man.dir.display(), "a sandbox workspace is missing");
                Some("its workspace was missing when the server restarted".to_string())
            } else if now >= man.expires_at {
                Some("its lifetime ended while the server was stopped".to_string())
            } else {
                None
            };
            if let Some(reason) = why {
                if man.dir.is_dir() {
                    let _ = std::fs::remove_dir_all(&man.dir);
                }
                let lost = Lost {
                    id: man.id.clone(),
                    tenant: man.tenant.clone(),
                    reason,
                    lost_at: now,
                };
                m.save_lost(&man, &lost);
                out.lost.push(lost);
                continue;
            }
            let s = Arc::new(Session {
                id: man.id.clone(),
                tenant: man.tenant.clone(),
                expires_at: Mutex::new(man.expires_at),
                spec: man.spec(),
                dir: man.dir.clone(),
                created_at: man.created_at,
                last_active: Mutex::new(now),
                busy: AtomicUsize::new(0),
                gate: Gate::new(man.paused_at),
                restored_at: Some(now),
                manifests: self.manifests.clone(),
                processes: crate::processes::Processes::default(),
                contexts: crate::contexts::Contexts::default(),
            });
            if let Ok(mut map) = self.map.write() {
                map.insert(s.id.clone(), s.clone());
            }
            out.restored.push(s);
        }
        if let Ok(mut l) = self.lost.write() {
            for x in &out.lost {
                l.insert(x.id.clone(), x.clone());
            }
        }
        out
    }

    /// The tenant's sandbox `id` that a restart could not restore.
    pub fn lost(&self, tenant: &str, id: &str) -> Option<Lost> {
        let l = self.lost.read().ok()?;
        l.get(id).filter(|x| x.tenant == tenant).cloned()
    }

    /// The tenant's lost sandboxes, oldest first.
    pub fn lost_list(&self, tenant: &str) -> Vec<Lost> {
        let mut v: Vec<Lost> = self
            .lost
            .read()
            .map(|l| l.values().filter(|x| x.tenant == tenant).cloned().collect())
            .unwrap_or_default();
        v.sort_by(|a, b| a.lost_at.cmp(&b.lost_at).then(a.id.cmp(&b.id)));
        v
    }

    /// Forgets a lost sandbox of the tenant (its report is acknowledged).
    pub fn forget_lost(&self, tenant: &str, id: &str) -> Option<Lost> {
        let x = {
            let mut l = self.lost.write().ok()?;
            if l.get(id).is_some_and(|x| x.tenant == tenant) {
                l.remove(id)
            } else {
                None
            }
        }?;
        if let Some(m) = &self.manifests {
            m.remove(id);
        }
        Some(x)
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

    /// At shutdown: cancels what runs in every sandbox. With manifests their files and
    /// manifests stay for the next start to restore; without, they are closed.
    pub fn close_all(&self, why: &str) -> usize {
        let all: Vec<Arc<Session>> = self
            .map
            .write()
            .map(|mut m| m.drain().map(|(_, s)| s).collect())
            .unwrap_or_default();
        for s in &all {
            if self.manifests.is_some() {
                s.suspend(why);
            } else {
                s.close(why);
            }
        }
        all.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(lifetime: Duration) -> Session {
        let now = Utc::now();
        Session {
            id: "s".into(),
            tenant: "t".into(),
            spec: SessionSpec {
                tier: IsolationTier::Process,
                limits: Limits::default(),
                env: BTreeMap::new(),
                labels: BTreeMap::new(),
                idle_timeout: Duration::from_secs(600),
                lifetime,
            },
            dir: PathBuf::from("/nonexistent"),
            created_at: now,
            expires_at: Mutex::new(add_saturating(now, lifetime)),
            last_active: Mutex::new(now),
            busy: AtomicUsize::new(0),
            gate: Gate::new(None),
            restored_at: None,
            manifests: None,
            processes: crate::processes::Processes::default(),
            contexts: crate::contexts::Contexts::default(),
        }
    }

    #[test]
    fn an_extension_past_any_date_is_capped_not_a_panic() {
        let max = Duration::from_secs(24 * 3600);
        let s = session(Duration::from_secs(30));
        let end = s.extend(Duration::from_secs(u64::MAX), max);
        assert_eq!(end, s.created_at + chrono::Duration::hours(24));
        let end = s.set_end(DateTime::<Utc>::MAX_UTC, Duration::from_secs(u64::MAX));
        assert_eq!(end, DateTime::<Utc>::MAX_UTC);
        assert_eq!(
            add_saturating(Utc::now(), Duration::from_secs(u64::MAX)),
            DateTime::<Utc>::MAX_UTC
        );
    }

    #[test]
    fn a_poisoned_clock_ends_the_sandbox() {
        let s = session(Duration::from_secs(3600));
        assert_eq!(s.reap_reason(Utc::now()), None);
        std::thread::scope(|t| {
            let _ = t
                .spawn(|| {
                    let _held = s.expires_at.lock().unwrap();
                    panic!("poisons the clock");
                })
                .join();
        });
        assert!(s.expires_at.is_poisoned());
        assert_eq!(s.reap_reason(Utc::now()), Some("its lifetime ended"));
        // And it is never extended again.
        s.extend(Duration::from_secs(60), Duration::from_secs(3600));
        assert_eq!(s.reap_reason(Utc::now()), Some("its lifetime ended"));
    }
}
