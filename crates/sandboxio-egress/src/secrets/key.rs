//! The key that seals stored secrets: 32 random bytes, written as 64 hex digits, kept in
//! its own 0600 file outside the state directory, or supplied by the environment.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use ring::rand::SecureRandom;
use zeroize::Zeroizing;

use super::SecretError;

/// Where the key comes from.
#[derive(Clone)]
pub enum KeySource {
    /// A key given directly (64 hex digits), e.g. from `SBX_SECRETS_KEY`.
    Value {
        /// What to call it in messages (the variable's name; never the key).
        name: String,
        hex: Zeroizing<String>,
    },
    /// A key file; created (0600, in a 0700 directory) by the first `set` when absent.
    File(PathBuf),
}

impl std::fmt::Debug for KeySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

/// The 32-byte sealing key; wiped on drop, never printed.
pub struct SecretKey(Zeroizing<[u8; 32]>);

impl SecretKey {
    pub(crate) fn bytes(&self) -> &[u8; 32] {
        &self.0
    }

    fn parse(text: &str, source_name: &str) -> Result<SecretKey, SecretError> {
        let unusable = |why: &str| SecretError::KeyUnusable {
            source_name: source_name.to_string(),
            why: why.to_string(),
        };
        let text = text.trim();
        if text.len() != 64 {
            return Err(unusable("a key is 64 hex digits (32 bytes)"));
        }
        let mut k = Zeroizing::new([0u8; 32]);
        hex::decode_to_slice(text, &mut k[..]).map_err(|_| unusable("not hex digits"))?;
        Ok(SecretKey(k))
    }

    fn generate() -> Result<SecretKey, SecretError> {
        let mut k = Zeroizing::new([0u8; 32]);
        ring::rand::SystemRandom::new()
            .fill(&mut k[..])
            .map_err(|_| SecretError::KeyUnusable {
                source_name: "new key".into(),
                why: "the system random source failed".into(),
            })?;
        Ok(SecretKey(k))
    }
}

impl SecretKey {
    /// Seals `plain` under this key (a fresh random nonce) bound to `aad`: for a front end
    /// that keeps other values at rest under the same key (e.g. a sandbox's environment in
    /// the server's manifests).
    pub fn seal(&self, aad: &[u8], plain: &[u8]) -> Result<super::Sealed, SecretError> {
        super::store::seal(self, aad, plain)
    }

    /// Opens what [`SecretKey::seal`] sealed with the same `aad`; `what` names it in the
    /// error (a wrong key or an altered value: `SBX_E2427`).
    pub fn open(
        &self,
        aad: &[u8],
        sealed: &super::Sealed,
        what: &str,
    ) -> Result<Zeroizing<Vec<u8>>, SecretError> {
        super::store::open(self, aad, sealed).map_err(|why| SecretError::Damaged {
            store: what.to_string(),
            why: why.to_string(),
        })
    }
}

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<secrets key>")
    }
}

impl KeySource {
    /// A key given directly; `name` is what messages call it (never the key).
    pub fn value(name: &str, hex: String) -> KeySource {
        KeySource::Value {
            name: name.to_string(),
            hex: Zeroizing::new(hex),
        }
    }

    /// Names the source for messages (`SBX_SECRETS_KEY`, or the file's path).
    pub fn describe(&self) -> String {
        match self {
            KeySource::Value { name, .. } => name.clone(),
            KeySource::File(p) => p.display().to_string(),
        }
    }

    /// The key, or `None` when its file does not exist yet. A file that group or others
    /// can read is refused.
    pub fn load(&self) -> Result<Option<SecretKey>, SecretError> {
        match self {
            KeySource::Value { name, hex } => SecretKey::parse(hex, name).map(Some),
            KeySource::File(path) => {
                let meta = match std::fs::metadata(path) {
                    Ok(m) => m,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                    Err(e) => return Err(SecretError::io(path)(e)),
                };
                let mode = meta.permissions().mode() & 0o777;
                if mode & 0o077 != 0 {
                    return Err(SecretError::KeyExposed {
                        path: path.display().to_string(),
                        mode,
                    });
                }
                let text = Zeroizing::new(std::fs::read_to_string(path).map_err(|e| {
                    if e.kind() == std::io::ErrorKind::InvalidData {
                        SecretError::KeyUnusable {
                            source_name: self.describe(),
                            why: "not text".into(),
                        }
                    } else {
                        SecretError::io(path)(e)
                    }
                })?);
                SecretKey::parse(&text, &self.describe()).map(Some)
            }
        }
    }

    /// The key, created (as the first `secrets set` would) when its file does not exist.
    pub fn load_or_create(&self) -> Result<SecretKey, SecretError> {
        match self.load()? {
            Some(k) => Ok(k),
            None => match self.create() {
                Ok(k) => Ok(k),
                // Another process created it first: use theirs.
                Err(SecretError::Io { .. }) => self.load()?.ok_or(SecretError::KeyUnusable {
                    source_name: self.describe(),
                    why: "it could not be created".into(),
                }),
                Err(e) => Err(e),
            },
        }
    }

    /// Generates a key and writes it to the key file (never over an existing one).
    pub fn create(&self) -> Result<SecretKey, SecretError> {
        let KeySource::File(path) = self else {
            return Err(SecretError::KeyUnusable {
                source_name: self.describe(),
                why: "a key given by the environment is never generated".into(),
            });
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(SecretError::io(dir))?;
        }
        let key = SecretKey::generate()?;
        let text = Zeroizing::new(format!("{}\n", hex::encode(key.bytes())));
        write_new(path, text.as_bytes())?;
        Ok(key)
    }
}

fn write_new(path: &Path, bytes: &[u8]) -> Result<(), SecretError> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(SecretError::io(path))?;
    f.write_all(bytes).map_err(SecretError::io(path))?;
    f.sync_all().map_err(SecretError::io(path))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use sandboxio_core::ErrorCode;

    #[test]
    fn a_created_key_file_is_private_and_loads_back() {
        let d = tempfile::tempdir().unwrap();
        let src = KeySource::File(d.path().join("keys/secrets.key"));
        assert!(src.load().unwrap().is_none());
        let k = src.create().unwrap();
        let p = d.path().join("keys/secrets.key");
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(src.load().unwrap().unwrap().bytes(), k.bytes());
        // never over an existing key
        assert!(src.create().is_err());
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(src.load().unwrap_err().code(), "SBX_E2425");
    }

    #[test]
    fn a_value_sealed_under_a_key_opens_only_with_it_and_its_associated_data() {
        let d = tempfile::tempdir().unwrap();
        let src = KeySource::File(d.path().join("keys/secrets.key"));
        let k = src.load_or_create().unwrap();
        assert_eq!(src.load_or_create().unwrap().bytes(), k.bytes());
        let s = k.seal(b"aad-1", b"canary-value-91c2").unwrap();
        assert!(!s.sealed.contains("canary"));
        assert_eq!(
            &k.open(b"aad-1", &s, "v").unwrap()[..],
            b"canary-value-91c2"
        );
        assert_eq!(k.open(b"aad-2", &s, "v").unwrap_err().code(), "SBX_E2427");
        let other = KeySource::value("K", "22".repeat(32))
            .load()
            .unwrap()
            .unwrap();
        assert_eq!(
            other.open(b"aad-1", &s, "v").unwrap_err().code(),
            "SBX_E2427"
        );
    }

    #[test]
    fn malformed_keys_are_refused_with_a_code() {
        for bad in ["", "abc", &"zz".repeat(32), &"ab".repeat(33)] {
            let src = KeySource::Value {
                name: "SBX_SECRETS_KEY".into(),
                hex: Zeroizing::new(bad.to_string()),
            };
            let e = src.load().unwrap_err();
            assert_eq!(e.code(), "SBX_E2423");
            assert!(!e.to_string().contains(&"zz".repeat(32)));
        }
    }
}
