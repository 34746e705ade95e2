//! A host directory bound into the sandbox: `HOST:SANDBOX[:ro|rw]`.

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::CoreError;

/// Whether the program may change what it sees through a mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MountMode {
    /// Read-only (the default).
    #[default]
    Ro,
    /// Read-write, confined: no device nodes, no setuid, no exec unless the request
    /// allows exec in writable places, no way out through symlinks or hard links.
    Rw,
}

impl MountMode {
    pub fn as_str(&self) -> &'static str {
        match self {
            MountMode::Ro => "ro",
            MountMode::Rw => "rw",
        }
    }
}

/// One bind mount of a host directory (or file) into the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mount {
    /// Absolute host path.
    pub host: PathBuf,
    /// Absolute path inside the sandbox, without `.` or `..` components.
    pub sandbox: PathBuf,
    #[serde(default)]
    pub mode: MountMode,
}

impl Mount {
    /// Parses `HOST:SANDBOX[:ro|rw]`; a relative `HOST` is taken relative to `cwd`.
    /// Paths that contain `:` cannot be written in this form.
    pub fn parse(spec: &str, cwd: &Path) -> Result<Mount, CoreError> {
        let bad = |why: &'static str| CoreError::InvalidMount {
            input: spec.to_string(),
            why,
        };
        let parts: Vec<&str> = spec.split(':').collect();
        let (host, sandbox, mode) = match parts.as_slice() {
            [h, s] => (*h, *s, MountMode::Ro),
            [h, s, "ro"] => (*h, *s, MountMode::Ro),
            [h, s, "rw"] => (*h, *s, MountMode::Rw),
            [_, _, _] => return Err(bad("the mode must be `ro` or `rw`")),
            _ => return Err(bad("expected HOST:SANDBOX[:ro|rw]")),
        };
        if host.is_empty() {
            return Err(bad("the host path is empty"));
        }
        let host = Path::new(host);
        let host = if host.is_absolute() {
            host.to_path_buf()
        } else {
            cwd.join(host)
        };
        let m = Mount {
            host,
            sandbox: PathBuf::from(sandbox),
            mode,
        };
        m.validate().map_err(bad)?;
        Ok(m)
    }

    /// What must hold for any mount, however it was built (also for deserialised ones).
    pub fn validate(&self) -> Result<(), &'static str> {
        if !self.host.is_absolute() {
            return Err("the host path must be absolute");
        }
        if self.host.as_os_str().as_encoded_bytes().contains(&0) {
            return Err("the host path contains a NUL byte");
        }
        validate_sandbox_path(&self.sandbox)
    }
}

/// An absolute sandbox path made of normal components only, not `/` itself.
pub fn validate_sandbox_path(p: &Path) -> Result<(), &'static str> {
    if !p.is_absolute() {
        return Err("the sandbox path must be absolute");
    }
    if p.as_os_str().as_encoded_bytes().contains(&0) {
        return Err("the sandbox path contains a NUL byte");
    }
    // `components()` drops `.` silently, so look at the raw segments too.
    let raw = p.as_os_str().as_encoded_bytes();
    if raw
        .split(|b| *b == b'/')
        .any(|seg| seg == b"." || seg == b"..")
    {
        return Err("the sandbox path must not contain `.` or `..`");
    }
    let mut normal = 0;
    for c in p.components() {
        match c {
            Component::RootDir => {}
            Component::Normal(_) => normal += 1,
            _ => return Err("the sandbox path must not contain `.` or `..`"),
        }
    }
    if normal == 0 {
        return Err("the sandbox path must not be `/`");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn parses_modes_and_resolves_relative_host_paths() {
        let cwd = Path::new("/home/u/proj");
        let m = Mount::parse("src:/project/src", cwd).unwrap();
        assert_eq!(m.host, PathBuf::from("/home/u/proj/src"));
        assert_eq!(m.sandbox, PathBuf::from("/project/src"));
        assert_eq!(m.mode, MountMode::Ro);
        let m = Mount::parse("/data:/data:rw", cwd).unwrap();
        assert_eq!(
            (m.host.as_path(), m.mode),
            (Path::new("/data"), MountMode::Rw)
        );
        assert_eq!(Mount::parse("/d:/d:ro", cwd).unwrap().mode, MountMode::Ro);
    }

    #[test]
    fn refuses_bad_specs() {
        let cwd = Path::new("/");
        for spec in [
            "/a",
            "/a:/b:rx",
            ":/b",
            "/a:b",
            "/a:/",
            "/a:/x/../etc",
            "/a:/x/./y",
            "/a:/b:rw:x",
        ] {
            let e = Mount::parse(spec, cwd).unwrap_err();
            assert!(matches!(e, CoreError::InvalidMount { .. }), "{spec}: {e}");
        }
    }
}
