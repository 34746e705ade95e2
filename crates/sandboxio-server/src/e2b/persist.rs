//! What the E2B API knows about a sandbox, written down so that a restarted server (which
//! restores its sandboxes, `crate::manifest`) still answers the SDKs that hold them: one
//! JSON file per sandbox (`<dir>/<id>.json`, 0600 in a 0700 directory: its tenant, the key
//! that created it, its template and metadata), removed with the sandbox. No access token
//! is written: a token is derived from the sandbox id and the credential it was given to
//! with the key in `<dir>/access.key` (HMAC-SHA256, made once, 0600), so the same token is
//! valid after a restart.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::PathBuf;

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

const VERSION: u32 = 1;
const KEY_FILE: &str = "access.key";

/// A sandbox's facts file that is there but cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damaged {
    pub path: PathBuf,
    pub why: String,
}

/// The key access tokens are derived from.
pub struct TokenKey([u8; 32]);

impl TokenKey {
    /// A key for this process only (tokens do not survive a restart).
    pub fn ephemeral() -> TokenKey {
        let mut k = [0u8; 32];
        rand::Rng::fill(&mut rand::thread_rng(), &mut k[..]);
        TokenKey(k)
    }

    /// The access token of sandbox `id` for credential `credential_id`: calls made with it
    /// act as that credential (its scopes, its expiry, its revocation), named in the token
    /// (`sbxe_<credential id>_<mac>`) so that it can be found without a lookup.
    pub fn token(&self, id: &str, credential_id: &str) -> String {
        match Hmac::<Sha256>::new_from_slice(&self.0) {
            Ok(mut m) => {
                m.update(b"sandboxio e2b envd access token v2\0");
                m.update(id.as_bytes());
                m.update(b"\0");
                m.update(credential_id.as_bytes());
                format!(
                    "sbxe_{credential_id}_{}",
                    hex::encode(m.finalize().into_bytes())
                )
            }
            // HMAC takes a key of any length; a token no one can present otherwise.
            Err(_) => format!("sbxe_{credential_id}_{}", crate::context::random_hex(32)),
        }
    }

    /// The credential an access token of sandbox `id` was given to, if it is one
    /// (compared in constant time).
    pub fn credential_of<'t>(&self, id: &str, token: &'t str) -> Option<&'t str> {
        let (cred, _) = token.strip_prefix("sbxe_")?.split_once('_')?;
        if cred.is_empty() || !cred.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return None;
        }
        sandboxio_gateway::credential::same_secret(&self.token(id, cred), token).then_some(cred)
    }
}

/// One sandbox's E2B facts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Saved {
    pub version: u32,
    pub sandbox_id: String,
    pub tenant: String,
    pub credential_id: String,
    pub template: String,
    pub metadata: BTreeMap<String, String>,
}

impl Saved {
    pub fn new(
        sandbox_id: &str,
        tenant: &str,
        credential_id: &str,
        template: &str,
        metadata: &BTreeMap<String, String>,
    ) -> Saved {
        Saved {
            version: VERSION,
            sandbox_id: sandbox_id.to_string(),
            tenant: tenant.to_string(),
            credential_id: credential_id.to_string(),
            template: template.to_string(),
            metadata: metadata.clone(),
        }
    }
}

/// The directory of saved sandboxes.
pub struct Store {
    dir: PathBuf,
}

/// Sandbox ids are ours (hex); a header naming anything else names no file.
fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// Makes `dir` (0700), tightening a looser mode left by someone else.
fn private_dir(dir: &PathBuf) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

fn write_new(path: &PathBuf, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// Makes a rename or removal in `dir` durable.
fn sync_dir(dir: &PathBuf) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

impl Store {
    /// Opens (making it if needed) the directory and its token key.
    pub fn open(dir: PathBuf) -> std::io::Result<(Store, TokenKey)> {
        private_dir(&dir)?;
        let key_path = dir.join(KEY_FILE);
        let key = match std::fs::read(&key_path) {
            Ok(k) => {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600))?;
                k
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let k = TokenKey::ephemeral();
                write_new(&key_path, &k.0)?;
                sync_dir(&dir)?;
                k.0.to_vec()
            }
            Err(e) => return Err(e),
        };
        let key: [u8; 32] = key
            .try_into()
            .map_err(|_| std::io::Error::other(format!("{} is not 32 bytes", KEY_FILE)))?;
        Ok((Store { dir }, TokenKey(key)))
    }

    fn path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    /// Writes a sandbox's facts; a failure is logged (the sandbox works until a restart).
    pub fn save(&self, s: &Saved) {
        if !valid_id(&s.sandbox_id) {
            return;
        }
        let go = || -> std::io::Result<()> {
            let text = serde_json::to_vec_pretty(s).map_err(std::io::Error::other)?;
            let tmp = self.dir.join(format!(
                ".{}.{}.tmp",
                s.sandbox_id,
                crate::context::random_hex(4)
            ));
            let written = write_new(&tmp, &text)
                .and_then(|_| std::fs::rename(&tmp, self.path(&s.sandbox_id)))
                .and_then(|_| sync_dir(&self.dir));
            if written.is_err() {
                let _ = std::fs::remove_file(&tmp);
            }
            written
        };
        if let Err(e) = go() {
            tracing::warn!(sandbox = %s.sandbox_id, "writing a sandbox's E2B facts failed: {e}");
        }
    }

    /// A sandbox's facts: `Ok(None)` when none were written down (or `id` cannot be one of
    /// ours); a file that is there but cannot be read or parsed, or names another sandbox or
    /// format version, is [`Damaged`] (and left as it is), never taken for "no sandbox".
    pub fn load(&self, id: &str) -> Result<Option<Saved>, Damaged> {
        if !valid_id(id) {
            return Ok(None);
        }
        let path = self.path(id);
        let damaged = |why: String| Damaged {
            path: path.clone(),
            why,
        };
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(damaged(format!("it cannot be read: {e}"))),
        };
        match serde_json::from_slice::<Saved>(&bytes) {
            Ok(s) if s.version != VERSION => Err(damaged(format!(
                "it has format version {}, this server reads {VERSION}",
                s.version
            ))),
            Ok(s) if s.sandbox_id != id => Err(damaged(format!(
                "it names sandbox `{}`",
                s.sandbox_id.chars().take(64).collect::<String>()
            ))),
            Ok(s) => Ok(Some(s)),
            Err(e) => Err(damaged(format!("it is not valid: {e}"))),
        }
    }

    pub fn remove(&self, id: &str) {
        if !valid_id(id) {
            return;
        }
        if let Err(e) = std::fs::remove_file(self.path(id)) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(sandbox = %id, "removing a sandbox's E2B facts failed: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn mode(p: PathBuf) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn facts_and_tokens_outlive_the_store_that_wrote_them() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("e2b");
        let (store, key) = Store::open(dir.clone()).unwrap();
        let meta = BTreeMap::from([("job".to_string(), "x".to_string())]);
        let saved = Saved::new("ab12", "acme", "cred1", "base", &meta);
        store.save(&saved);
        let token = key.token("ab12", "cred1");
        assert!(
            token.starts_with("sbxe_cred1_") && token.len() == 11 + 64,
            "{token}"
        );
        assert_ne!(token, key.token("ab13", "cred1"));
        assert_eq!(mode(dir.clone()), 0o700);
        assert_eq!(mode(dir.join("access.key")), 0o600);
        assert_eq!(mode(dir.join("ab12.json")), 0o600);
        let text = std::fs::read_to_string(dir.join("ab12.json")).unwrap();
        assert!(!text.contains(&token[11..]), "no token on disk");
        // Another process with the same directory: the same facts, the same token (and
        // modes loosened in between are tightened again).
        use std::os::unix::fs::PermissionsExt;
        let loose = std::fs::Permissions::from_mode(0o755);
        std::fs::set_permissions(dir.join("access.key"), loose.clone()).unwrap();
        std::fs::set_permissions(&dir, loose).unwrap();
        let (again, key2) = Store::open(dir.clone()).unwrap();
        assert_eq!(mode(dir.clone()), 0o700);
        assert_eq!(mode(dir.join("access.key")), 0o600);
        assert_eq!(again.load("ab12"), Ok(Some(saved)));
        assert_eq!(key2.token("ab12", "cred1"), token);
        // Another directory's key gives other tokens.
        let (_, other) = Store::open(d.path().join("other")).unwrap();
        assert_ne!(other.token("ab12", "cred1"), token);
        again.remove("ab12");
        assert_eq!(again.load("ab12"), Ok(None));
    }

    #[test]
    fn ids_that_are_not_ours_name_no_file() {
        let d = tempfile::tempdir().unwrap();
        let (store, _) = Store::open(d.path().join("e2b")).unwrap();
        std::fs::write(d.path().join("x.json"), b"{}").unwrap();
        for id in ["../x", "", "a/b", "access.key", &"a".repeat(65)] {
            assert_eq!(store.load(id), Ok(None), "{id}");
            store.remove(id);
        }
        assert!(d.path().join("x.json").exists());
    }

    #[test]
    fn a_damaged_token_key_is_refused_and_left_as_it_was() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("e2b");
        let (store, _) = Store::open(dir.clone()).unwrap();
        store.save(&Saved::new(
            "ab12",
            "acme",
            "k1",
            "base",
            &Default::default(),
        ));
        for damaged in [&b""[..], &b"short"[..], &[7u8; 33][..]] {
            std::fs::write(dir.join(KEY_FILE), damaged).unwrap();
            let err = Store::open(dir.clone())
                .err()
                .expect("a damaged key must be refused");
            assert!(err.to_string().contains("not 32 bytes"), "{err}");
            // Nothing was rewritten: the key and the facts are as they were.
            assert_eq!(std::fs::read(dir.join(KEY_FILE)).unwrap(), damaged);
            assert!(dir.join("ab12.json").exists());
        }
    }

    #[test]
    fn a_damaged_facts_file_is_reported_as_damaged_and_left_as_it_was() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("e2b");
        let (store, _) = Store::open(dir.clone()).unwrap();
        let good = Saved::new("ab12", "acme", "k1", "base", &Default::default());
        store.save(&good);
        let file = dir.join("ab12.json");
        let valid = std::fs::read(&file).unwrap();
        let other = serde_json::to_vec(&Saved::new(
            "cd34",
            "acme",
            "k1",
            "base",
            &Default::default(),
        ))
        .unwrap();
        let mut newer = good.clone();
        newer.version = VERSION + 1;
        let newer = serde_json::to_vec(&newer).unwrap();
        let cases: [(&[u8], &str); 6] = [
            (b"", "not valid"),
            (&valid[..valid.len() / 2], "not valid"),
            (b"\xff\xfe\x00garbage", "not valid"),
            (b"{}", "not valid"),
            (&other, "names sandbox `cd34`"),
            (&newer, "format version 2"),
        ];
        for (bytes, why) in cases {
            std::fs::write(&file, bytes).unwrap();
            let err = store
                .load("ab12")
                .expect_err("a damaged file must not load");
            assert_eq!(err.path, file);
            assert!(err.why.contains(why), "{why}: {}", err.why);
            assert_eq!(std::fs::read(&file).unwrap(), bytes, "left as it was");
        }
        // A directory where the file should be: unreadable, not absent.
        std::fs::remove_file(&file).unwrap();
        std::fs::create_dir(&file).unwrap();
        let err = store
            .load("ab12")
            .expect_err("a directory is not a facts file");
        assert!(err.why.contains("cannot be read"), "{}", err.why);
        std::fs::remove_dir(&file).unwrap();
        assert_eq!(store.load("ab12"), Ok(None));
    }
}
