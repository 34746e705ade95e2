//! What the E2B API keeps about a sandbox beside its session: the key that created it (its
//! envd calls act as that key), the envd access token, the template and metadata, the E2B
//! process ids of its commands and the default code context of each language.
//!
//! The access token lives in memory with the session (sandboxes do not outlive the server)
//! and is shown to the tenant's keys only (create and connect answers).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use super::process::E2bProc;

pub struct Entry {
    pub sandbox_id: String,
    pub tenant: String,
    /// The API key that created it; envd calls act as this key (and fail once it is revoked).
    pub credential_id: String,
    pub template: String,
    pub access_token: String,
    pub metadata: BTreeMap<String, String>,
    procs: Mutex<BTreeMap<u32, Arc<E2bProc>>>,
    next_pid: AtomicU32,
    /// The default context of each language for `/execute` without a `context_id`.
    pub default_contexts: Mutex<BTreeMap<String, String>>,
}

impl Entry {
    pub fn new(
        sandbox_id: String,
        tenant: String,
        credential_id: String,
        template: String,
        metadata: BTreeMap<String, String>,
    ) -> Entry {
        Entry {
            sandbox_id,
            tenant,
            credential_id,
            template,
            access_token: format!("sbxe_{}", crate::context::random_hex(32)),
            metadata,
            procs: Mutex::new(BTreeMap::new()),
            next_pid: AtomicU32::new(1000),
            default_contexts: Mutex::new(BTreeMap::new()),
        }
    }

    /// Whether `token` is this sandbox's access token (compared in constant time).
    pub fn token_matches(&self, token: &str) -> bool {
        let a = self.access_token.as_bytes();
        let b = token.as_bytes();
        if a.len() != b.len() {
            return false;
        }
        a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }

    pub fn next_pid(&self) -> u32 {
        self.next_pid.fetch_add(1, Ordering::Relaxed)
    }

    pub fn add_proc(&self, p: Arc<E2bProc>) {
        if let Ok(mut m) = self.procs.lock() {
            // Ended commands are kept for a while (a late `connect` sees their end).
            if m.len() >= 256 {
                let done: Vec<u32> = m
                    .iter()
                    .filter(|(_, p)| !p.running())
                    .map(|(k, _)| *k)
                    .collect();
                for k in done.iter().take(m.len().saturating_sub(128)) {
                    m.remove(k);
                }
            }
            m.insert(p.pid, p);
        }
    }

    pub fn proc_by_pid(&self, pid: u32) -> Option<Arc<E2bProc>> {
        self.procs.lock().ok()?.get(&pid).cloned()
    }

    pub fn proc_by_tag(&self, tag: &str) -> Option<Arc<E2bProc>> {
        self.procs
            .lock()
            .ok()?
            .values()
            .find(|p| p.tag.as_deref() == Some(tag) && p.running())
            .cloned()
    }

    pub fn running_procs(&self) -> Vec<Arc<E2bProc>> {
        self.procs
            .lock()
            .map(|m| m.values().filter(|p| p.running()).cloned().collect())
            .unwrap_or_default()
    }
}

#[derive(Default)]
pub struct Registry {
    map: RwLock<HashMap<String, Arc<Entry>>>,
}

impl Registry {
    pub fn insert(&self, e: Arc<Entry>) {
        if let Ok(mut m) = self.map.write() {
            m.insert(e.sandbox_id.clone(), e);
        }
    }

    pub fn get(&self, id: &str) -> Option<Arc<Entry>> {
        self.map.read().ok()?.get(id).cloned()
    }

    pub fn remove(&self, id: &str) -> Option<Arc<Entry>> {
        self.map.write().ok()?.remove(id)
    }

    /// Forgets the entries whose sandbox is gone (deleted, reaped, closed over the native API).
    pub fn prune(&self, alive: impl Fn(&Entry) -> bool) {
        if let Ok(mut m) = self.map.write() {
            m.retain(|_, e| alive(e));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_access_token_matches_only_itself() {
        let e = Entry::new(
            "s".into(),
            "t".into(),
            "k".into(),
            "base".into(),
            BTreeMap::new(),
        );
        let tok = e.access_token.clone();
        assert!(e.token_matches(&tok));
        assert!(!e.token_matches(""));
        assert!(!e.token_matches(&format!("{tok}x")));
        let mut wrong = tok.into_bytes();
        let last = wrong.len() - 1;
        wrong[last] = if wrong[last] == b'0' { b'1' } else { b'0' };
        assert!(!e.token_matches(&String::from_utf8_lossy(&wrong)));
    }
}
