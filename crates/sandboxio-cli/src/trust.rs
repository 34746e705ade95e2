//! Trust in the `sandboxio.toml` a command finds in its working directory.
//!
//! That file decides how the command is governed (the tier, the policy, the state
//! directory, which host variables a sandbox gets), and a working directory is often a
//! project a sandbox had mounted read-write: a program could have left one there for the
//! next command to read. So a configuration found there is read only when its exact bytes
//! were trusted by the operator (`sandboxio init` trusts the file it writes; `sandboxio
//! trust` trusts a file after reviewing it, like direnv's `allow`). A file named with
//! `--config` is the operator's own choice and needs no trust.
//!
//! The digests live beside the default secrets key, outside every state directory and
//! every project: `/etc/sandboxio/trusted-configs` for root, else
//! `$XDG_CONFIG_HOME/sandboxio/trusted-configs` (`~/.config/...`), or
//! `$SBX_TRUSTED_CONFIGS`. One line per file: `<sha256 hex> <absolute path>`. No writable
//! mount may hold it.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::CliError;

/// Where the trusted digests are kept: `$SBX_TRUSTED_CONFIGS` when set (the operator's
/// own environment; a sandbox cannot set it), else beside the default secrets key.
pub fn store_path() -> PathBuf {
    if let Some(p) = std::env::var_os("SBX_TRUSTED_CONFIGS").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    // The default key file's directory, whatever `SBX_SECRETS_KEY*` say.
    let key = sandboxio_gateway::runtime::secrets_key(|k| {
        matches!(k, "XDG_CONFIG_HOME" | "HOME")
            .then(|| std::env::var(k).ok())
            .flatten()
    });
    // Never a shared directory such as `/tmp`: another user could list their own file
    // there as trusted.
    let nowhere = || PathBuf::from(sandboxio_gateway::runtime::NO_HOME);
    let dir = match &key {
        sandboxio_gateway::egress::secrets::KeySource::File(p) => {
            p.parent().map(Path::to_path_buf).unwrap_or_else(nowhere)
        }
        _ => nowhere(),
    };
    dir.join("trusted-configs")
}

fn digest(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn entries(store: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(store)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (d, p) = l.split_once(' ')?;
            Some((d.to_string(), p.to_string()))
        })
        .collect()
}

/// Whether `bytes` are the trusted content of the file at `path` (absolute).
pub fn is_trusted(path: &Path, bytes: &[u8]) -> bool {
    let want = digest(bytes);
    let shown = path.display().to_string();
    entries(&store_path())
        .iter()
        .any(|(d, p)| *p == shown && *d == want)
}

/// Trusts `bytes` as the content of the file at `path` (absolute), replacing what was
/// trusted for it before.
pub fn trust(path: &Path, bytes: &[u8]) -> Result<(), CliError> {
    use std::os::unix::fs::DirBuilderExt as _;
    let store = store_path();
    let fail = |source: std::io::Error| CliError::Trust {
        path: store.clone(),
        source,
    };
    if let Some(dir) = store.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(fail)?;
    }
    let shown = path.display().to_string();
    // Held from the read to the replace: two `trust` runs at once both keep their entry.
    let _lock = sandboxio_core::filewrite::lock_beside(&store)
        .map_err(|(path, source)| CliError::Trust { path, source })?;
    let mut lines: Vec<String> = entries(&store)
        .into_iter()
        .filter(|(_, p)| *p != shown)
        .map(|(d, p)| format!("{d} {p}"))
        .collect();
    lines.push(format!("{} {shown}", digest(bytes)));
    sandboxio_core::filewrite::write_private_atomic(&store, (lines.join("\n") + "\n").as_bytes())
        .map_err(|(path, source)| CliError::Trust { path, source })
}
