//! The sealed store: one JSON file in the state directory (0600), each value sealed with
//! ChaCha20-Poly1305 under the key, its name and bound hosts as associated data (so a
//! value cannot be moved to another name or rebound to other hosts). A check value sealed
//! under the same key tells a wrong key from a damaged file. The file is replaced
//! atomically; a file that does not parse or open is refused and kept as it is.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use ring::rand::SecureRandom;
use serde::{Deserialize, Serialize};

use super::{validate_hosts, validate_name, KeySource, SecretError, SecretKey, SecretValue};

const VERSION: u32 = 1;
const CHECK_PLAIN: &[u8] = b"sandboxio secrets key check";
const CHECK_AAD: &[u8] = b"sandboxio-secrets-check-v1";

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoreFile {
    version: u32,
    check: Sealed,
    secrets: BTreeMap<String, Entry>,
}

/// A value sealed with ChaCha20-Poly1305: its random nonce and the ciphertext with its
/// tag, both base64. Opens only under the same key and associated data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sealed {
    pub nonce: String,
    pub sealed: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    hosts: Vec<String>,
    value: Sealed,
}

/// A stored secret as listed: its name and bound hosts, never its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SecretInfo {
    pub name: String,
    pub hosts: Vec<String>,
}

/// What the store held before a change (to put back when the change cannot be recorded).
#[derive(Debug)]
pub struct Undo(Option<Vec<u8>>);

/// The sealed secrets in `path`, opened with the key from `key`.
#[derive(Debug, Clone)]
pub struct SecretStore {
    path: PathBuf,
    key: KeySource,
}

impl SecretStore {
    pub fn new(path: PathBuf, key: KeySource) -> SecretStore {
        SecretStore { path, key }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Names and bound hosts (no key needed); a damaged file is an error.
    pub fn list(&self) -> Result<Vec<SecretInfo>, SecretError> {
        let Some((file, _)) = self.read()? else {
            return Ok(vec![]);
        };
        Ok(file
            .secrets
            .into_iter()
            .map(|(name, e)| SecretInfo {
                name,
                hosts: e.hosts,
            })
            .collect())
    }

    /// Seals `value` as `name`, bound to `hosts` (replacing a secret of that name).
    pub fn set(
        &self,
        name: &str,
        hosts: &[String],
        value: &SecretValue,
    ) -> Result<Undo, SecretError> {
        validate_name(name)?;
        validate_hosts(hosts)?;
        let _lock = self.lock()?;
        let (mut file, key, before) = match self.read()? {
            Some((file, before)) => {
                let key = self.key_for_existing()?;
                self.check(&file, &key)?;
                (file, key, Some(before))
            }
            None => {
                let key = match self.key.load()? {
                    Some(k) => k,
                    None => self.key.create()?,
                };
                let check = seal(&key, CHECK_AAD, CHECK_PLAIN)?;
                let file = StoreFile {
                    version: VERSION,
                    check,
                    secrets: BTreeMap::new(),
                };
                (file, key, None)
            }
        };
        let sealed = seal(&key, &aad(name, hosts), value.expose())?;
        file.secrets.insert(
            name.to_string(),
            Entry {
                hosts: hosts.to_vec(),
                value: sealed,
            },
        );
        self.write(&file)?;
        Ok(Undo(before))
    }

    /// Removes `name`; the key must open the store (nobody removes what they cannot read).
    pub fn remove(&self, name: &str) -> Result<Undo, SecretError> {
        let unknown = || SecretError::Unknown {
            name: name.chars().take(140).collect(),
        };
        let _lock = self.lock()?;
        let Some((mut file, before)) = self.read()? else {
            return Err(unknown());
        };
        let key = self.key_for_existing()?;
        self.check(&file, &key)?;
        if file.secrets.remove(name).is_none() {
            return Err(unknown());
        }
        self.write(&file)?;
        Ok(Undo(Some(before)))
    }

    /// Whether a change could be made now, without making it: the store (if any) reads, the
    /// key opens it and every entry in it, and (with `name`) it holds `name`. For a caller
    /// that must refuse bad input before journalling the change.
    pub fn check_change(&self, name: Option<&str>) -> Result<(), SecretError> {
        let Some((file, _)) = self.read()? else {
            return match name {
                Some(n) => Err(SecretError::Unknown {
                    name: n.chars().take(140).collect(),
                }),
                None => Ok(()),
            };
        };
        let key = self.key_for_existing()?;
        self.check(&file, &key)?;
        match name {
            Some(n) if !file.secrets.contains_key(n) => Err(SecretError::Unknown {
                name: n.chars().take(140).collect(),
            }),
            _ => Ok(()),
        }
    }

    /// The value of `name` and its bound hosts.
    pub fn reveal(&self, name: &str) -> Result<(SecretValue, Vec<String>), SecretError> {
        let unknown = || SecretError::Unknown {
            name: name.chars().take(140).collect(),
        };
        let Some((file, _)) = self.read()? else {
            return Err(unknown());
        };
        let key = self.key_for_existing()?;
        self.check(&file, &key)?;
        let e = file.secrets.get(name).ok_or_else(unknown)?;
        let plain = open(&key, &aad(name, &e.hosts), &e.value)
            .map_err(|why| self.damaged(&format!("secret `{name}`: {why}")))?;
        let value = SecretValue::new(plain.to_vec())
            .map_err(|_| self.damaged(&format!("secret `{name}` holds an invalid value")))?;
        Ok((value, e.hosts.clone()))
    }

    /// Puts back what the store held before a change.
    pub fn restore(&self, undo: Undo) -> Result<(), SecretError> {
        match undo.0 {
            Some(bytes) => write_atomic(&self.path, &bytes),
            None => match std::fs::remove_file(&self.path) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(SecretError::io(&self.path)(e)),
            },
        }
    }

    fn damaged(&self, why: &str) -> SecretError {
        SecretError::Damaged {
            store: self.path.display().to_string(),
            why: why.to_string(),
        }
    }

    fn key_for_existing(&self) -> Result<SecretKey, SecretError> {
        self.key.load()?.ok_or_else(|| SecretError::KeyMissing {
            source_name: self.key.describe(),
            store: self.path.display().to_string(),
        })
    }

    /// The key opens the check value and every entry (a change never rewrites a store
    /// with a damaged entry in it).
    fn check(&self, file: &StoreFile, key: &SecretKey) -> Result<(), SecretError> {
        match open(key, CHECK_AAD, &file.check) {
            Ok(p) if p.as_slice() == CHECK_PLAIN => {
                for (name, e) in &file.secrets {
                    open(key, &aad(name, &e.hosts), &e.value)
                        .map_err(|why| self.damaged(&format!("secret `{name}`: {why}")))?;
                }
                Ok(())
            }
            Ok(_) => Err(self.damaged("the key check holds another value")),
            Err(Malformed::Encoding(why)) => Err(self.damaged(why)),
            Err(Malformed::Auth) => Err(SecretError::WrongKey {
                source_name: self.key.describe(),
                store: self.path.display().to_string(),
            }),
        }
    }

    fn read(&self) -> Result<Option<(StoreFile, Vec<u8>)>, SecretError> {
        let bytes = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(SecretError::io(&self.path)(e)),
        };
        let file: StoreFile = serde_json::from_slice(&bytes)
            .map_err(|e| self.damaged(&format!("not a secret store: {e}")))?;
        if file.version != VERSION {
            return Err(self.damaged(&format!("unknown version {}", file.version)));
        }
        for (name, e) in &file.secrets {
            if validate_name(name).is_err() || validate_hosts(&e.hosts).is_err() {
                return Err(self.damaged("an entry has an invalid name or bound host"));
            }
        }
        Ok(Some((file, bytes)))
    }

    /// Held around a change: two processes setting secrets at once both keep theirs.
    fn lock(&self) -> Result<sandboxio_core::filewrite::Locked, SecretError> {
        sandboxio_core::filewrite::lock_beside(&self.path)
            .map_err(|(at, e)| SecretError::io(&at)(e))
    }

    fn write(&self, file: &StoreFile) -> Result<(), SecretError> {
        let bytes = serde_json::to_vec_pretty(file).map_err(|e| self.damaged(&e.to_string()))?;
        write_atomic(&self.path, &bytes)
    }
}

/// The associated data binding a value to its name and bound hosts.
fn aad(name: &str, hosts: &[String]) -> Vec<u8> {
    let mut a = b"sandboxio-secret-v1\0".to_vec();
    a.extend_from_slice(name.as_bytes());
    for h in hosts {
        a.push(0);
        a.extend_from_slice(h.as_bytes());
    }
    a
}

fn aead_key(key: &SecretKey) -> Result<LessSafeKey, SecretError> {
    UnboundKey::new(&CHACHA20_POLY1305, key.bytes())
        .map(LessSafeKey::new)
        .map_err(|_| SecretError::KeyUnusable {
            source_name: "secrets key".into(),
            why: "the AEAD refused it".into(),
        })
}

pub(crate) fn seal(key: &SecretKey, aad_bytes: &[u8], plain: &[u8]) -> Result<Sealed, SecretError> {
    let k = aead_key(key)?;
    let mut nonce = [0u8; NONCE_LEN];
    ring::rand::SystemRandom::new()
        .fill(&mut nonce)
        .map_err(|_| SecretError::InvalidValue {
            why: "the system random source failed",
        })?;
    let mut buf = zeroize::Zeroizing::new(plain.to_vec());
    k.seal_in_place_append_tag(
        Nonce::assume_unique_for_key(nonce),
        Aad::from(aad_bytes),
        &mut *buf,
    )
    .map_err(|_| SecretError::InvalidValue {
        why: "it could not be sealed",
    })?;
    Ok(Sealed {
        nonce: B64.encode(nonce),
        sealed: B64.encode(&*buf),
    })
}

pub(crate) enum Malformed {
    Encoding(&'static str),
    Auth,
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Malformed::Encoding(w) => f.write_str(w),
            Malformed::Auth => f.write_str("it does not open under the key (altered)"),
        }
    }
}

pub(crate) fn open(
    key: &SecretKey,
    aad_bytes: &[u8],
    s: &Sealed,
) -> Result<zeroize::Zeroizing<Vec<u8>>, Malformed> {
    let k = aead_key(key).map_err(|_| Malformed::Auth)?;
    let nonce: [u8; NONCE_LEN] = B64
        .decode(&s.nonce)
        .ok()
        .and_then(|n| n.try_into().ok())
        .ok_or(Malformed::Encoding("a nonce is not 12 bytes of base64"))?;
    let mut buf = zeroize::Zeroizing::new(
        B64.decode(&s.sealed)
            .map_err(|_| Malformed::Encoding("a sealed value is not base64"))?,
    );
    let len = k
        .open_in_place(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad_bytes),
            &mut buf,
        )
        .map_err(|_| Malformed::Auth)?
        .len();
    buf.truncate(len);
    Ok(buf)
}

/// Writes `bytes` to a 0600 file beside `path`, syncs it and renames it over `path`.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), SecretError> {
    sandboxio_core::filewrite::write_private_atomic(path, bytes)
        .map_err(|(at, e)| SecretError::io(&at)(e))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use sandboxio_core::ErrorCode;

    const CANARY: &str = "canary-7f3a9c1e55d0b2";

    fn store(d: &Path) -> SecretStore {
        SecretStore::new(
            d.join("state/secrets.json"),
            KeySource::File(d.join("keys/secrets.key")),
        )
    }

    fn value() -> SecretValue {
        SecretValue::new(CANARY.as_bytes().to_vec()).unwrap()
    }

    #[test]
    fn set_reveal_list_remove_and_the_value_is_never_in_clear() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("state")).unwrap();
        let s = store(d.path());
        let hosts = vec!["api.example.com".to_string()];
        s.set("API_TOKEN", &hosts, &value()).unwrap();
        let raw = std::fs::read(s.path()).unwrap();
        let text = String::from_utf8_lossy(&raw);
        assert!(!text.contains(CANARY));
        assert!(!text.contains(&B64.encode(CANARY)));
        assert!(!text.contains(&hex::encode(CANARY)));
        let (v, h) = s.reveal("API_TOKEN").unwrap();
        assert_eq!(v.expose(), CANARY.as_bytes());
        assert_eq!(h, hosts);
        assert_eq!(
            s.list().unwrap(),
            vec![SecretInfo {
                name: "API_TOKEN".into(),
                hosts: hosts.clone()
            }]
        );
        s.remove("API_TOKEN").unwrap();
        assert!(s.list().unwrap().is_empty());
        assert_eq!(s.remove("API_TOKEN").unwrap_err().code(), "SBX_E2428");
    }

    #[test]
    fn secrets_set_at_once_are_all_kept() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("state")).unwrap();
        // The first one makes the key; then eight writers at once (as eight processes would).
        store(d.path())
            .set("FIRST", &["a.example".to_string()], &value())
            .unwrap();
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let root = d.path().to_path_buf();
                std::thread::spawn(move || {
                    store(&root)
                        .set(&format!("S{i}"), &["a.example".to_string()], &value())
                        .unwrap();
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(store(d.path()).list().unwrap().len(), 9);
    }

    #[test]
    fn a_wrong_key_is_refused_and_changes_nothing() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("state")).unwrap();
        let s = store(d.path());
        s.set("A", &["a.example".into()], &value()).unwrap();
        let before = std::fs::read(s.path()).unwrap();
        let other = SecretStore::new(
            s.path().to_path_buf(),
            KeySource::Value {
                name: "SBX_SECRETS_KEY".into(),
                hex: zeroize::Zeroizing::new("11".repeat(32)),
            },
        );
        for e in [
            other.set("B", &["b.example".into()], &value()).unwrap_err(),
            other.reveal("A").unwrap_err(),
            other.remove("A").unwrap_err(),
        ] {
            assert_eq!(e.code(), "SBX_E2426", "{e}");
        }
        assert_eq!(std::fs::read(s.path()).unwrap(), before);
        // a missing key never becomes a fresh one while sealed secrets exist
        std::fs::remove_file(d.path().join("keys/secrets.key")).unwrap();
        assert_eq!(
            s.set("B", &["b.example".into()], &value())
                .unwrap_err()
                .code(),
            "SBX_E2424"
        );
        assert!(!d.path().join("keys/secrets.key").exists());
    }

    #[test]
    fn damage_is_refused_never_reset() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("state")).unwrap();
        let s = store(d.path());
        s.set("A", &["a.example".into()], &value()).unwrap();
        let good = std::fs::read_to_string(s.path()).unwrap();
        // rebinding the value to another host is caught by the associated data
        let rebound = good.replace("\"a.example\"", "\"evil.example\"");
        std::fs::write(s.path(), &rebound).unwrap();
        assert_eq!(s.reveal("A").unwrap_err().code(), "SBX_E2427");
        assert_eq!(
            s.set("B", &["b.example".into()], &value())
                .unwrap_err()
                .code(),
            "SBX_E2427"
        );
        assert_eq!(std::fs::read_to_string(s.path()).unwrap(), rebound);
        for bad in [
            "",
            "{",
            "garbage",
            &good.replace("\"version\": 1", "\"version\": 9"),
        ] {
            std::fs::write(s.path(), bad).unwrap();
            for e in [
                s.list().unwrap_err(),
                s.set("B", &["b.example".into()], &value()).unwrap_err(),
            ] {
                assert_eq!(e.code(), "SBX_E2427", "{bad:?}: {e}");
            }
            assert_eq!(std::fs::read_to_string(s.path()).unwrap(), bad);
        }
    }

    #[test]
    fn restore_puts_back_what_was_there() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("state")).unwrap();
        let s = store(d.path());
        let undo = s.set("A", &["a.example".into()], &value()).unwrap();
        s.restore(undo).unwrap();
        assert!(!s.path().exists());
        s.set("A", &["a.example".into()], &value()).unwrap();
        let before = std::fs::read(s.path()).unwrap();
        let undo = s.remove("A").unwrap();
        s.restore(undo).unwrap();
        assert_eq!(std::fs::read(s.path()).unwrap(), before);
    }
}
