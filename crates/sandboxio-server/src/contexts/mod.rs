//! Stateful code contexts: a kernel process inside the sandbox (a small driver script we
//! ship, `kernel.py` / `kernel.js`, run under the sandbox's tier and limits) keeps variables
//! between calls. The kernel speaks a framed protocol over its stdin and stdout
//! (`frames.rs`). Each call is a `run_code` operation through the whole chain with its one
//! record, carried out by the kernel instead of a fresh sandbox (`call.rs`, the gateway's
//! `Executor`); the kernel itself is one long `run_code` operation (`kernel.rs`).

pub mod call;
pub mod frames;
pub mod kernel;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use sandboxio_core::Language;

use crate::context::random_hex;
use kernel::Kernel;

/// The context's kernel has ended (or never started); restart the context.
pub const CONTEXT_GONE: &str = "SBX_E1830";

pub fn lang_name(l: Language) -> &'static str {
    match l {
        Language::Python => "python",
        Language::Node => "node",
        Language::Bash => "bash",
    }
}

pub struct Context {
    pub id: String,
    pub language: Language,
    pub created_at: DateTime<Utc>,
    kernel: Mutex<Arc<Kernel>>,
}

impl Context {
    pub fn kernel(&self) -> Option<Arc<Kernel>> {
        self.kernel.lock().ok().map(|k| k.clone())
    }

    /// Puts a new kernel in place of the old one, which is killed.
    pub fn replace(&self, k: Arc<Kernel>) {
        if let Ok(mut cur) = self.kernel.lock() {
            cur.kill("the context was restarted");
            *cur = k;
        }
    }
}

/// One sandbox's contexts.
#[derive(Default)]
pub struct Contexts {
    map: Mutex<BTreeMap<String, Arc<Context>>>,
}

impl Contexts {
    pub fn add(&self, language: Language, k: Arc<Kernel>) -> Arc<Context> {
        let c = Arc::new(Context {
            id: format!("c_{}", random_hex(8)),
            language,
            created_at: Utc::now(),
            kernel: Mutex::new(k),
        });
        if let Ok(mut m) = self.map.lock() {
            m.insert(c.id.clone(), c.clone());
        }
        c
    }

    pub fn get(&self, id: &str) -> Option<Arc<Context>> {
        self.map.lock().ok()?.get(id).cloned()
    }

    pub fn list(&self) -> Vec<Arc<Context>> {
        self.map
            .lock()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }

    pub fn count(&self) -> usize {
        self.map.lock().map(|m| m.len()).unwrap_or(0)
    }

    /// Removes every context and kills their kernels (the sandbox paused or closed).
    pub fn clear(&self, why: &str) {
        let all: Vec<Arc<Context>> = self
            .map
            .lock()
            .map(|mut m| std::mem::take(&mut *m).into_values().collect())
            .unwrap_or_default();
        for c in all {
            if let Some(k) = c.kernel() {
                k.kill(why);
            }
        }
    }

    /// Removes a context and kills its kernel.
    pub fn remove(&self, id: &str, why: &str) -> Option<Arc<Context>> {
        let c = self.map.lock().ok()?.remove(id)?;
        if let Some(k) = c.kernel() {
            k.kill(why);
        }
        Some(c)
    }
}
