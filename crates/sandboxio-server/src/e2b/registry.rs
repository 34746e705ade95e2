//! What the E2B API keeps about a sandbox beside its session: the key that created it, the
//! template and metadata, the E2B process ids of its commands and the default code context
//! of each language; and the key envd access tokens are derived from.
//!
//! An access token is given to one credential (by create, to the key that creates; by
//! connect, to the caller that connects) and calls made with it act as that credential:
//! its scopes, its sandbox and directory, its expiry and revocation all apply, and records
//! name it. With a directory (`persist.rs`) the facts are written down and tokens are
//! derived from the sandbox id and the credential id, so both outlive a restart; without
//! one they live in memory.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use super::persist::{Damaged, Saved, Store, TokenKey};
use super::process::E2bProc;

pub struct Entry {
    pub sandbox_id: String,
    pub tenant: String,
    /// The API key that created it.
    pub credential_id: String,
    pub template: String,
    pub metadata: BTreeMap<String, String>,
    procs: Mutex<BTreeMap<u32, Arc<E2bProc>>>,
    next_pid: AtomicU32,
    /// The default context of each language for `/execute` without a `context_id`.
    pub default_contexts: Mutex<BTreeMap<String, String>>,
}

impl Entry {
    fn new(saved: Saved) -> Entry {
        Entry {
            sandbox_id: saved.sandbox_id,
            tenant: saved.tenant,
            credential_id: saved.credential_id,
            template: saved.template,
            metadata: saved.metadata,
            procs: Mutex::new(BTreeMap::new()),
            next_pid: AtomicU32::new(1000),
            default_contexts: Mutex::new(BTreeMap::new()),
        }
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

pub struct Registry {
    map: RwLock<HashMap<String, Arc<Entry>>>,
    key: TokenKey,
    store: Option<Store>,
}

impl Default for Registry {
    fn default() -> Registry {
        Registry {
            map: RwLock::default(),
            key: TokenKey::ephemeral(),
            store: None,
        }
    }
}

impl Registry {
    /// A registry that writes its sandboxes down in `dir`. A directory or token key that
    /// cannot be used is an error, never a silent fresh start: the sandboxes written down
    /// there would lose their access tokens.
    pub fn at(dir: PathBuf) -> std::io::Result<Registry> {
        let (store, key) = Store::open(dir)?;
        Ok(Registry {
            map: RwLock::default(),
            key,
            store: Some(store),
        })
    }

    /// A new sandbox's entry (not registered yet).
    pub fn entry(
        &self,
        sandbox_id: &str,
        tenant: &str,
        credential_id: &str,
        template: &str,
        metadata: &BTreeMap<String, String>,
    ) -> Entry {
        let saved = Saved::new(sandbox_id, tenant, credential_id, template, metadata);
        Entry::new(saved)
    }

    /// Sandbox `id`'s access token for credential `credential_id`.
    pub fn access_token(&self, id: &str, credential_id: &str) -> String {
        self.key.token(id, credential_id)
    }

    /// The credential a token of sandbox `id` was given to, when it is one of its access
    /// tokens (derived from the ids alone, so it can be checked when the sandbox's facts
    /// cannot be read).
    pub fn credential_of<'t>(&self, id: &str, token: &'t str) -> Option<&'t str> {
        self.key.credential_of(id, token)
    }

    pub fn insert(&self, e: Arc<Entry>) {
        if let Some(s) = &self.store {
            s.save(&Saved::new(
                &e.sandbox_id,
                &e.tenant,
                &e.credential_id,
                &e.template,
                &e.metadata,
            ));
        }
        if let Ok(mut m) = self.map.write() {
            m.insert(e.sandbox_id.clone(), e);
        }
    }

    /// The entry of sandbox `id`, read back from the directory after a restart; a facts
    /// file that is there but damaged is an error, not an unknown sandbox.
    pub fn get(&self, id: &str) -> Result<Option<Arc<Entry>>, Damaged> {
        if let Some(e) = self.map.read().ok().and_then(|m| m.get(id).cloned()) {
            return Ok(Some(e));
        }
        let Some(store) = &self.store else {
            return Ok(None);
        };
        let Some(saved) = store.load(id)? else {
            return Ok(None);
        };
        let e = Arc::new(Entry::new(saved));
        Ok(self
            .map
            .write()
            .ok()
            .map(|mut m| m.entry(id.to_string()).or_insert(e).clone()))
    }

    pub fn remove(&self, id: &str) -> Option<Arc<Entry>> {
        if let Some(s) = &self.store {
            s.remove(id);
        }
        self.map.write().ok()?.remove(id)
    }

    /// Forgets the entries whose sandbox is gone (deleted, reaped, closed over the native API).
    pub fn prune(&self, alive: impl Fn(&Entry) -> bool) {
        if let Ok(mut m) = self.map.write() {
            m.retain(|id, e| {
                let keep = alive(e);
                if let (false, Some(s)) = (keep, &self.store) {
                    s.remove(id);
                }
                keep
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_access_token_names_its_credential_and_matches_only_itself() {
        let r = Registry::default();
        let tok = r.access_token("s", "k1");
        assert_eq!(r.credential_of("s", &tok), Some("k1"));
        assert_eq!(r.credential_of("s2", &tok), None, "another sandbox's");
        assert_ne!(tok, r.access_token("s", "k2"));
        for bad in ["", "sbxe_", "sbxe_k1", "sbxe_k1_", &format!("{tok}x")] {
            assert_eq!(r.credential_of("s", bad), None, "{bad}");
        }
        let mut wrong = tok.clone().into_bytes();
        let last = wrong.len() - 1;
        wrong[last] = if wrong[last] == b'0' { b'1' } else { b'0' };
        assert_eq!(r.credential_of("s", &String::from_utf8_lossy(&wrong)), None);
        // Naming another credential in a token's text does not make it that credential's.
        let forged = tok.replacen("sbxe_k1_", "sbxe_k2_", 1);
        assert_eq!(r.credential_of("s", &forged), None);
    }

    #[test]
    fn a_registry_at_a_directory_restores_entries_and_tokens() {
        #![allow(clippy::unwrap_used)]
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("e2b");
        let a = Registry::at(dir.clone()).unwrap();
        let e = Arc::new(a.entry("ab12", "acme", "k1", "base", &BTreeMap::new()));
        a.insert(e.clone());
        let tok = a.access_token("ab12", "k1");
        // A restarted server: a new registry over the same directory.
        let b = Registry::at(dir.clone()).unwrap();
        let r = b.get("ab12").unwrap().unwrap();
        assert_eq!(
            (r.tenant.as_str(), r.credential_id.as_str()),
            ("acme", "k1")
        );
        assert_eq!(b.credential_of("ab12", &tok), Some("k1"));
        assert!(b.get("cd34").unwrap().is_none());
        b.remove("ab12");
        assert!(Registry::at(dir.clone())
            .unwrap()
            .get("ab12")
            .unwrap()
            .is_none());
        // Without a directory nothing is restored, and tokens differ.
        let m = Registry::default();
        assert!(m.get("ab12").unwrap().is_none());
        assert_eq!(m.credential_of("ab12", &tok), None);
    }
}
