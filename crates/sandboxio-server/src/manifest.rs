//! Sandboxes written down, so that a restarted server restores them: one JSON manifest per
//! sandbox (`<dir>/<id>.json`, mode 0600 in a 0700 directory, written to a temporary name
//! and renamed into place), rewritten when it is extended, paused or resumed and removed
//! when it closes. It holds what the sandbox was created with (including its environment's
//! values, which is why it lives in the state directory), its workspace and its clocks.
//! A sandbox that cannot be restored keeps a manifest that says why (`lost`) until its
//! owner deletes it. Survives a crash of the server (SIGKILL), not a power loss: the
//! files are not fsynced (`docs/DURABILITY.md`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sandboxio_core::{IsolationTier, Limits};
use serde::{Deserialize, Serialize};

use crate::sessions::{Session, SessionSpec};

const VERSION: u32 = 1;
const SUFFIX: &str = ".json";

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

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub version: u32,
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
    #[serde(default)]
    pub lost: Option<Lost>,
}

impl Manifest {
    pub fn of(s: &Session) -> Manifest {
        Manifest {
            version: VERSION,
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

/// The directory of manifests.
pub struct Manifests {
    dir: PathBuf,
}

/// Sandbox ids are ours (hex); anything else in the directory is not a manifest.
fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric())
}

impl Manifests {
    pub fn new(dir: PathBuf) -> Manifests {
        Manifests { dir }
    }

    fn path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}{SUFFIX}"))
    }

    fn write(&self, m: &Manifest) -> std::io::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)?;
        let text = serde_json::to_vec_pretty(m).map_err(std::io::Error::other)?;
        let tmp = self
            .dir
            .join(format!(".{}.{}.tmp", m.id, crate::context::random_hex(4)));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        let written = f.write_all(&text).and_then(|_| {
            drop(f);
            std::fs::rename(&tmp, self.path(&m.id))
        });
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written
    }

    /// Writes a sandbox's manifest; `false` (and a warning) when it could not.
    pub fn save(&self, m: &Manifest) -> bool {
        if !valid_id(&m.id) {
            return false;
        }
        match self.write(m) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(sandbox = %m.id, "writing a sandbox manifest failed: {e}");
                false
            }
        }
    }

    /// Keeps the manifest of a sandbox that could not be restored, saying why.
    pub fn save_lost(&self, m: &Manifest, lost: &Lost) {
        let mut m = m.clone();
        m.lost = Some(lost.clone());
        self.save(&m);
    }

    pub fn remove(&self, id: &str) {
        if !valid_id(id) {
            return;
        }
        if let Err(e) = std::fs::remove_file(self.path(id)) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(sandbox = %id, "removing a sandbox manifest failed: {e}");
            }
        }
    }

    /// Every manifest in the directory: parsed, or (unreadable) a loss to report. An
    /// unreadable file is renamed aside (`<id>.json.unreadable`) and its tenant is not known.
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
                .and_then(|b| serde_json::from_slice::<Manifest>(&b).map_err(|e| e.to_string()))
                .and_then(|m| {
                    if m.id != id || m.version != VERSION {
                        Err(format!("it names sandbox `{}` version {}", m.id, m.version))
                    } else {
                        Ok(m)
                    }
                });
            match parsed {
                Ok(m) => out.push(Ok(m)),
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
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(id: &str, dir: PathBuf) -> Manifest {
        Manifest {
            version: VERSION,
            id: id.into(),
            tenant: "acme".into(),
            tier: IsolationTier::Process,
            limits: Limits::default(),
            env: BTreeMap::from([("A".into(), "1".into())]),
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

    #[test]
    fn manifests_round_trip_with_owner_only_modes_and_garbage_is_reported() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let ms = Manifests::new(t.path().join("sessions"));
        assert!(ms.save(&manifest("ab12", t.path().join("w"))));
        assert!(!ms.save(&manifest("../x", t.path().join("w"))));
        let mode = |p: PathBuf| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(t.path().join("sessions")), 0o700);
        assert_eq!(mode(t.path().join("sessions/ab12.json")), 0o600);
        std::fs::write(t.path().join("sessions/cd34.json"), b"{not json").unwrap();
        let all = ms.load_all();
        assert_eq!(all.len(), 2);
        let m = all[0].as_ref().unwrap();
        assert_eq!((m.id.as_str(), m.env["A"].as_str()), ("ab12", "1"));
        let lost = all[1].as_ref().unwrap_err();
        assert_eq!(lost.id, "cd34");
        assert!(lost.reason.contains("could not be read"), "{}", lost.reason);
        assert!(t.path().join("sessions/cd34.json.unreadable").exists());
        ms.remove("ab12");
        assert!(ms.load_all().is_empty());
    }
}
