//! What the gateway redacts: host credentials found in the environment, configured
//! secrets, and per-request secrets. One keyed hash for all, so equal values correlate.

use std::sync::Arc;

use sandboxio_audit::{AuditError, Redactor, Secret};

pub struct Redaction {
    key: [u8; 32],
    env: Vec<(String, String)>,
    secrets: Vec<Secret>,
    base: std::sync::OnceLock<Arc<Redactor>>,
}

impl std::fmt::Debug for Redaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "<Redaction env_vars={} secrets={}>",
            self.env.len(),
            self.secrets.len()
        )
    }
}

impl Redaction {
    /// Credential-shaped values of these variables are redacted everywhere.
    pub fn from_env(env: Vec<(String, String)>) -> Self {
        let mut key = [0u8; 32];
        rand::Rng::fill(&mut rand::thread_rng(), &mut key);
        Redaction {
            key,
            env,
            secrets: Vec::new(),
            base: std::sync::OnceLock::new(),
        }
    }

    /// Uses a fixed hash key (placeholders then correlate across processes).
    pub fn with_key(mut self, key: [u8; 32]) -> Self {
        self.key = key;
        self
    }

    pub fn with_secrets(mut self, secrets: Vec<Secret>) -> Self {
        self.secrets = secrets;
        self
    }

    fn build(&self, extra: &[Secret]) -> Result<Redactor, AuditError> {
        Redactor::builder()
            .hmac_key(self.key)
            .env(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .secrets(self.secrets.iter())
            .secrets(extra.iter())
            .build()
    }

    /// The redactor without per-request secrets (built once).
    pub fn base(&self) -> Result<Arc<Redactor>, AuditError> {
        if let Some(r) = self.base.get() {
            return Ok(r.clone());
        }
        let r = Arc::new(self.build(&[])?);
        Ok(self.base.get_or_init(|| r).clone())
    }

    /// The redactor for one request: the base plus that request's secrets.
    pub fn for_request(&self, extra: &[Secret]) -> Result<Arc<Redactor>, AuditError> {
        if extra.is_empty() {
            self.base()
        } else {
            Ok(Arc::new(self.build(extra)?))
        }
    }
}
