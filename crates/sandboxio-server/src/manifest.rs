//! Sandboxes written down, so that a restarted server restores them: one JSON manifest per
//! sandbox (`<dir>/<id>.json`, mode 0600 in a 0700 directory), rewritten when it is
//! extended, paused or resumed and removed when it closes. It holds what the sandbox was
//! created with, its workspace and its clocks. The environment's **values** are never in
//! it in the clear: they are sealed together (ChaCha20-Poly1305, the stored secrets' key,
//! kept outside the state directory; the sandbox's id and tenant as associated data) and
//! only their names are readable. A manifest is written atomically and durably: a
//! temporary file, fsynced, renamed into place, then the directory fsynced; so a crash or
//! a power loss leaves the old manifest or the new one, never half of one.
//! A sandbox that cannot be restored keeps a manifest that says why (`lost`) until its
//! owner deletes it.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sandboxio_core::{IsolationTier, Limits};
use sandboxio_gateway::egress::secrets::{KeySource, Sealed, SecretKey};
use serde::{Deserialize, Serialize};

use crate::sessions::{Session, SessionSpec};

/// Version 2: env values sealed. Version 1 (values in the clear) is still read, and
/// rewritten sealed at restore.
const VERSION: u32 = 2;
const SUFFIX: &str = ".json";
const ENV_AAD: &[u8] = b"sandboxio-manifest-env-v1\0";

/// A sandbox a restart could not restore, and why. Reported to its tenant (listed, and
/// `410 Gone` for its id) until deleted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Lost {
    pub id: String,
    #[serde(default)]
    pub tenant: String,
    pub reason: String,
    pub lost_at: DateTime<Utc>,
}

/// A sandbox as written down (in memory: the env values in the clear).
#[derive(Debug, Clone)]
pub struct Manifest {
    pub id: String,
    pub tenant: String,
    pub tier: IsolationTier,
    pub limits: Limits,
    pub env: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
    pub idle_timeout_s: u64,
    pub lifetime_s: u64,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub paused_at: Option<DateTime<Utc>>,
    pub dir: PathBuf,
    pub lost: Option<Lost>,
}

/// The file's form: the env's names, and its values sealed.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct OnDisk {
    version: u32,
    id: String,
    tenant: String,
    tier: IsolationTier,
    limits: Limits,
    /// Version 1 only (read, never written).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    env: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    env_names: Vec<String>,
    /// The env map as JSON, sealed (absent when it is empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    env_sealed: Option<Sealed>,
    labels: BTreeMap<String, String>,
    idle_timeout_s: u64,
    lifetime_s: u64,
    created_at: DateTime<Utc>,
    expires_at: DateTime<Utc>,
    paused_at: Option<DateTime<Utc>>,
    dir: PathBuf,
    #[serde(default)]
    lost: Option<Lost>,
}

impl Manifest {
    pub fn of(s: &Session) -> Manifest {
        Manifest {
            id: s.id.clone(),
            tenant: s.tenant.clone(),
            tier: s.spec.tier,
            limits: s.spec.limits.clone(),
            env: s.spec.env.clone(),
            labels: s.spec.labels.clone(),
            idle_timeout_s: s.spec.idle_timeout.as_secs(),
            lifetime_s: s.spec.lifetime.as_secs(),
            created_at: s.created_at,
            expires_at: s.expires_at(),
            paused_at: s.paused_at(),
            dir: s.dir.clone(),
            lost: None,
        }
    }

    pub fn spec(&self) -> SessionSpec {
        SessionSpec {
            tier: self.tier,
            limits: self.limits.clone(),
            env: self.env.clone(),
            labels: self.labels.clone(),
            idle_timeout: Duration::from_secs(self.idle_timeout_s),
            lifetime: Duration::from_secs(self.lifetime_s),
        }
    }
}

/// Why a manifest could not be written.
#[derive(Debug)]
pub enum SaveError {
    /// The environment's values could not be sealed (no usable key): nothing was written.
    Seal(String),
    Io(std::io::Error),
}

impl std::fmt::Display for SaveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SaveError::Seal(why) => write!(f, "the environment could not be sealed: {why}"),
            SaveError::Io(e) => write!(f, "{e}"),
        }
    }
}

/// The directory of manifests, and the key that seals environments.
pub struct Manifests {
    dir: PathBuf,
    key_source: Option<KeySource>,
    /// Loaded (or created) at the first environment to seal or open.
    key: Mutex<Option<Arc<SecretKey>>>,
}

/// Sandbox ids are ours (hex); anything else in the directory is not a manifest.
fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric())
}

fn env_aad(id: &str, tenant: &str) -> Vec<u8> {
    let mut a = ENV_AAD.to_vec();
    a.extend_from_slice(id.as_bytes());
    a.push(0);
    a.extend_from_slice(tenant.as_bytes());
    a
}

/// Fsyncs directory `dir` (a rename or an unlink in it is then durable).
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

impl Manifests {
    /// Manifests in `dir`; environments sealed under the key from `key_source` (none: a
    /// sandbox with an environment cannot be written down, and is refused).
    pub fn new(dir: PathBuf, key_source: Option<KeySource>) -> Manifests {
        Manifests {
            dir,
            key_source,
            key: Mutex::new(None),
        }
    }

    fn path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}{SUFFIX}"))
    }

    /// The sealing key: loaded once; created (as `sandboxio secrets set` would) when
    /// `create` and its file does not exist yet.
    fn key(&self, create: bool) -> Result<Arc<SecretKey>, String> {
        let mut slot = self.key.lock().map_err(|_| "the key slot is poisoned")?;
        if let Some(k) = slot.as_ref() {
            return Ok(k.clone());
        }
        let Some(src) = &self.key_source else {
            return Err("no secrets key is configured".into());
        };
        let loaded = if create {
            src.load_or_create().map(Some)
        } else {
            src.load()
        };
        match loaded {
            Ok(Some(k)) => {
                let k = Arc::new(k);
                *slot = Some(k.clone());
                Ok(k)
            }
            Ok(None) => Err(format!("the secrets key `{}` is missing", src.describe())),
            Err(e) => Err(e.to_string()),
        }
    }

    fn seal_disk(&self, m: &Manifest) -> Result<OnDisk, SaveError> {
        let env_sealed = if m.env.is_empty() {
            None
        } else {
            let key = self.key(true).map_err(SaveError::Seal)?;
            let plain = zeroize::Zeroizing::new(
                serde_json::to_vec(&m.env).map_err(|e| SaveError::Seal(e.to_string()))?,
            );
            Some(
                key.seal(&env_aad(&m.id, &m.tenant), &plain)
                    .map_err(|e| SaveError::Seal(e.to_string()))?,
            )
        };
        Ok(OnDisk {
            version: VERSION,
            id: m.id.clone(),
            tenant: m.tenant.clone(),
            tier: m.tier,
            limits: m.limits.clone(),
            env: BTreeMap::new(),
            env_names: m.env.keys().cloned().collect(),
            env_sealed,
            labels: m.labels.clone(),
            idle_timeout_s: m.idle_timeout_s,
            lifetime_s: m.lifetime_s,
            created_at: m.created_at,
            expires_at: m.expires_at,
            paused_at: m.paused_at,
            dir: m.dir.clone(),
            lost: m.lost.clone(),
        })
    }

    fn open_disk(&self, d: OnDisk) -> Result<Manifest, String> {
        let env = match (&d.env_sealed, d.version) {
            (_, 1) => d.env,
            (None, _) if d.env_names.is_empty() => BTreeMap::new(),
            (None, _) => return Err("its environment's sealed values are missing".into()),
            (Some(sealed), _) => {
                let key = self.key(false)?;
                let plain = key
                    .open(
                        &env_aad(&d.id, &d.tenant),
                        sealed,
                        "the sandbox's environment",
                    )
                    .map_err(|e| e.to_string())?;
                let env: BTreeMap<String, String> =
                    serde_json::from_slice(&plain).map_err(|e| e.to_string())?;
                if !env.keys().eq(d.env_names.iter()) {
                    return Err("its environment's names do not match its sealed values".into());
                }
                env
            }
        };
        Ok(Manifest {
            id: d.id,
            tenant: d.tenant,
            tier: d.tier,
            limits: d.limits,
            env,
            labels: d.labels,
            idle_timeout_s: d.idle_timeout_s,
            lifetime_s: d.lifetime_s,
            created_at: d.created_at,
            expires_at: d.expires_at,
            paused_at: d.paused_at,
            dir: d.dir,
            lost: d.lost,
        })
    }

    fn write(&self, m: &Manifest) -> Result<(), SaveError> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let text = serde_json::to_vec_pretty(&self.seal_disk(m)?)
            .map_err(|e| SaveError::Io(std::io::Error::other(e)))?;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(SaveError::Io)?;
        let tmp = self
            .dir
            .join(format!(".{}.{}.tmp", m.id, crate::context::random_hex(4)));
        let written = (|| {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(&text)?;
            f.sync_all()?;
            drop(f);
            std::fs::rename(&tmp, self.path(&m.id))?;
            sync_dir(&self.dir)
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written.map_err(SaveError::Io)
    }

    /// Writes a sandbox's manifest (atomically and durably).
    pub fn save(&self, m: &Manifest) -> Result<(), SaveError> {
        if !valid_id(&m.id) {
            return Err(SaveError::Io(std::io::Error::other("not a sandbox id")));
        }
        self.write(m).inspect_err(|e| {
            tracing::warn!(sandbox = %m.id, "writing a sandbox manifest failed: {e}");
        })
    }

    /// Keeps the manifest of a sandbox that could not be restored, saying why (its
    /// environment is dropped: a lost sandbox never runs again).
    pub fn save_lost(&self, m: &Manifest, lost: &Lost) {
        let mut m = m.clone();
        m.env.clear();
        m.lost = Some(lost.clone());
        let _ = self.save(&m);
    }

    /// Keeps what is known of a manifest whose environment could not be opened, saying why.
    fn save_lost_head(&self, d: &OnDisk, lost: &Lost) {
        if let Ok(mut m) = self.open_disk(clone_head(d)) {
            m.lost = Some(lost.clone());
            let _ = self.save(&m);
        }
    }

    pub fn remove(&self, id: &str) {
        if !valid_id(id) {
            return;
        }
        match std::fs::remove_file(self.path(id)) {
            Ok(()) => {
                let _ = sync_dir(&self.dir);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(sandbox = %id, "removing a sandbox manifest failed: {e}"),
        }
    }

    /// Every manifest in the directory: opened, or a loss to report. An unparsable file is
    /// renamed aside (`<id>.json.unreadable`) and its tenant is not known; one whose
    /// environment does not open (a missing or different key, an altered file) is kept as
    /// lost, with its tenant.
    pub fn load_all(&self) -> Vec<Result<Manifest, Lost>> {
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut names: Vec<String> = rd
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.ends_with(SUFFIX) && !n.starts_with('.'))
            .collect();
        names.sort();
        let mut out = Vec::new();
        for name in names {
            let id = name.trim_end_matches(SUFFIX).to_string();
            if !valid_id(&id) {
                continue;
            }
            let path = self.dir.join(&name);
            let parsed = std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice::<OnDisk>(&b).map_err(|e| e.to_string()))
                .and_then(|d| {
                    if d.id != id || d.version == 0 || d.version > VERSION {
                        Err(format!("it names sandbox `{}` version {}", d.id, d.version))
                    } else {
                        Ok(d)
                    }
                });
            let d = match parsed {
                Ok(d) => d,
                Err(why) => {
                    let aside = self.dir.join(format!("{name}.unreadable"));
                    let _ = std::fs::rename(&path, &aside);
                    tracing::warn!(sandbox = %id, kept = %aside.display(), "a sandbox manifest is unreadable: {why}");
                    out.push(Err(Lost {
                        id,
                        tenant: String::new(),
                        reason: format!("its manifest could not be read ({why})"),
                        lost_at: Utc::now(),
                    }));
                    continue;
                }
            };
            if d.lost.is_some() {
                // Already lost at an earlier start: nothing to open.
                if let Ok(m) = self.open_disk(clone_head(&d)) {
                    out.push(Ok(m));
                }
                continue;
            }
            let legacy = d.version == 1;
            let head = clone_head(&d);
            match self.open_disk(d) {
                Ok(m) => {
                    if legacy {
                        // Rewritten in the current form: its values sealed.
                        let _ = self.save(&m);
                    }
                    out.push(Ok(m));
                }
                Err(why) => {
                    tracing::warn!(sandbox = %id, "a sandbox's environment could not be opened: {why}");
                    if head.dir.is_dir() {
                        let _ = std::fs::remove_dir_all(&head.dir);
                    }
                    let lost = Lost {
                        id,
                        tenant: head.tenant.clone(),
                        reason: format!("its environment could not be opened ({why})"),
                        lost_at: Utc::now(),
                    };
                    self.save_lost_head(&head, &lost);
                    out.push(Err(lost));
                }
            }
        }
        out
    }
}

/// A copy of a manifest's file form without its environment.
fn clone_head(d: &OnDisk) -> OnDisk {
    OnDisk {
        version: VERSION,
        id: d.id.clone(),
        tenant: d.tenant.clone(),
        tier: d.tier,
        limits: d.limits.clone(),
        env: BTreeMap::new(),
        env_names: Vec::new(),
        env_sealed: None,
        labels: d.labels.clone(),
        idle_timeout_s: d.idle_timeout_s,
        lifetime_s: d.lifetime_s,
        created_at: d.created_at,
        expires_at: d.expires_at,
        paused_at: d.paused_at,
        dir: d.dir.clone(),
        lost: d.lost.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CANARY: &str = "canary-5e1d9b0c7a2f";

    fn manifest(id: &str, dir: PathBuf) -> Manifest {
        Manifest {
            id: id.into(),
            tenant: "acme".into(),
            tier: IsolationTier::Process,
            limits: Limits::default(),
            env: BTreeMap::from([("A".into(), CANARY.into())]),
            labels: BTreeMap::new(),
            idle_timeout_s: 60,
            lifetime_s: 3600,
            created_at: Utc::now(),
            expires_at: Utc::now(),
            paused_at: None,
            dir,
            lost: None,
        }
    }

    fn key_file(t: &Path) -> Option<KeySource> {
        Some(KeySource::File(t.join("keys/secrets.key")))
    }

    #[test]
    fn manifests_round_trip_with_owner_only_modes_and_garbage_is_reported() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let ms = Manifests::new(t.path().join("sessions"), key_file(t.path()));
        ms.save(&manifest("ab12", t.path().join("w"))).unwrap();
        assert!(ms.save(&manifest("../x", t.path().join("w"))).is_err());
        let mode = |p: PathBuf| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(t.path().join("sessions")), 0o700);
        assert_eq!(mode(t.path().join("sessions/ab12.json")), 0o600);
        std::fs::write(t.path().join("sessions/cd34.json"), b"{not json").unwrap();
        let all = ms.load_all();
        assert_eq!(all.len(), 2);
        let m = all[0].as_ref().unwrap();
        assert_eq!((m.id.as_str(), m.env["A"].as_str()), ("ab12", CANARY));
        let lost = all[1].as_ref().unwrap_err();
        assert_eq!(lost.id, "cd34");
        assert!(lost.reason.contains("could not be read"), "{}", lost.reason);
        assert!(t.path().join("sessions/cd34.json.unreadable").exists());
        ms.remove("ab12");
        assert!(ms.load_all().is_empty());
    }

    #[test]
    fn env_values_are_sealed_and_open_only_with_the_key_that_sealed_them() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("sessions");
        Manifests::new(dir.clone(), key_file(t.path()))
            .save(&manifest("ab12", t.path().join("w")))
            .unwrap();
        let text = std::fs::read_to_string(dir.join("ab12.json")).unwrap();
        assert!(!text.contains(CANARY), "{text}");
        assert!(text.contains("\"A\""), "the name stays readable: {text}");
        // a fresh server with the same key opens it
        let again = Manifests::new(dir.clone(), key_file(t.path())).load_all();
        assert_eq!(again[0].as_ref().unwrap().env["A"], CANARY);
        // another key does not: the sandbox is reported lost, with its tenant
        let other = Some(KeySource::value("SBX_SECRETS_KEY", "33".repeat(32)));
        let lost = Manifests::new(dir.clone(), other).load_all();
        let lost = lost[0].as_ref().unwrap_err();
        assert_eq!(lost.tenant, "acme");
        assert!(lost.reason.contains("environment"), "{}", lost.reason);
        let text = std::fs::read_to_string(dir.join("ab12.json")).unwrap();
        assert!(text.contains("\"lost\""), "{text}");
    }

    #[test]
    fn without_a_key_an_environment_is_refused_and_nothing_is_written() {
        let t = tempfile::tempdir().unwrap();
        let ms = Manifests::new(t.path().join("sessions"), None);
        let err = ms.save(&manifest("ab12", t.path().join("w"))).unwrap_err();
        assert!(matches!(err, SaveError::Seal(_)), "{err}");
        assert!(!t.path().join("sessions/ab12.json").exists());
        let mut bare = manifest("cd34", t.path().join("w"));
        bare.env.clear();
        ms.save(&bare).unwrap();
    }

    #[test]
    fn a_version_1_manifest_with_values_in_the_clear_is_rewritten_sealed() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("sessions");
        let ms = Manifests::new(dir.clone(), key_file(t.path()));
        let m = manifest("ab12", t.path().join("w"));
        let mut d = ms.seal_disk(&m).unwrap();
        d.version = 1;
        d.env = m.env.clone();
        d.env_names.clear();
        d.env_sealed = None;
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("ab12.json"), serde_json::to_vec(&d).unwrap()).unwrap();
        let all = ms.load_all();
        assert_eq!(all[0].as_ref().unwrap().env["A"], CANARY);
        let text = std::fs::read_to_string(dir.join("ab12.json")).unwrap();
        assert!(!text.contains(CANARY), "{text}");
    }
}
