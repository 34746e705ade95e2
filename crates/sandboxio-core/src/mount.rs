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

/// Sandbox paths the sandbox builds itself: a mount may not be at or below them (it would
/// hide or replace the system, `/proc`, the devices or the output that is copied back).
pub const RESERVED: &[&str] = &[
    "/proc", "/dev", "/sys", "/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/output", "/input",
];
/// Sandbox paths a mount may go below but not replace (the workspace and `/tmp`, which
/// are `HOME` and `TMPDIR`).
pub const NOT_REPLACEABLE: &[&str] = &["/workspace", "/tmp"];
/// Places a working directory may be, besides the mounts.
pub const WORKDIR_ROOTS: &[&str] = &["/workspace", "/tmp", "/output", "/input"];
/// The most mounts one request may carry.
pub const MAX_MOUNTS: usize = 64;

/// Checks a request's mounts together and its working directory: each mount valid, no
/// reserved or repeated sandbox path, no mount inside another (its mount point would be
/// made in the host directory), and a working directory inside the workspace, `/tmp`,
/// the output, the input or a mount.
pub fn check_request(mounts: &[Mount], workdir: Option<&Path>) -> Result<(), CoreError> {
    let bad = |m: &Mount, why: &'static str| CoreError::InvalidMount {
        input: m.spec(),
        why,
    };
    if mounts.len() > MAX_MOUNTS {
        return Err(CoreError::InvalidMount {
            input: format!("{} mounts", mounts.len()),
            why: "too many mounts (at most 64)",
        });
    }
    for (i, m) in mounts.iter().enumerate() {
        m.validate().map_err(|why| bad(m, why))?;
        if RESERVED.iter().any(|r| m.sandbox.starts_with(r)) {
            return Err(bad(
                m,
                "the sandbox path is one the sandbox builds itself (`/proc`, `/dev`, `/sys`, \
                 `/usr`, `/etc`, `/bin`, `/sbin`, `/lib`, `/lib64`, `/output`, `/input`)",
            ));
        }
        if NOT_REPLACEABLE.iter().any(|r| m.sandbox == Path::new(r)) {
            return Err(bad(
                m,
                "`/workspace` and `/tmp` cannot be replaced; mount below them instead",
            ));
        }
        for other in &mounts[..i] {
            if other.sandbox == m.sandbox {
                return Err(bad(m, "two mounts at the same sandbox path"));
            }
            if other.sandbox.starts_with(&m.sandbox) || m.sandbox.starts_with(&other.sandbox) {
                return Err(bad(m, "a mount inside another mount"));
            }
        }
    }
    if let Some(w) = workdir {
        let bad = |why: &'static str| CoreError::InvalidWorkdir {
            input: w.display().to_string(),
            why,
        };
        validate_sandbox_path(w).map_err(bad)?;
        let inside = WORKDIR_ROOTS.iter().any(|r| w.starts_with(r))
            || mounts.iter().any(|m| w.starts_with(&m.sandbox));
        if !inside {
            return Err(bad(
                "it must be inside `/workspace`, `/tmp`, `/output`, `/input` or a mount",
            ));
        }
    }
    Ok(())
}

impl Mount {
    /// The mount as it is written on a command line (`HOST:SANDBOX:MODE`).
    pub fn spec(&self) -> String {
        format!(
            "{}:{}:{}",
            self.host.display(),
            self.sandbox.display(),
            self.mode.as_str()
        )
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
    use crate::error::ErrorCode;

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
    fn request_checks_reserved_repeated_nested_mounts_and_the_workdir() {
        let cwd = Path::new("/");
        let m = |s: &str| Mount::parse(s, cwd).unwrap();
        let ok = [
            m("/src:/project:rw"),
            m("/data:/workspace/data"),
            m("/c:/tmp/c"),
        ];
        check_request(&ok, Some(Path::new("/project/sub"))).unwrap();
        check_request(&ok, Some(Path::new("/workspace"))).unwrap();
        check_request(&[], None).unwrap();
        for bad in [
            vec![m("/x:/proc")],
            vec![m("/x:/proc/sys")],
            vec![m("/x:/dev/shm:rw")],
            vec![m("/x:/output")],
            vec![m("/x:/usr/local")],
            vec![m("/x:/etc:rw")],
            vec![m("/x:/workspace:rw")],
            vec![m("/x:/tmp")],
            vec![m("/x:/a"), m("/y:/a")],
            vec![m("/x:/a"), m("/y:/a/b")],
            vec![m("/x:/a/b"), m("/y:/a")],
        ] {
            let e = check_request(&bad, None).unwrap_err();
            assert_eq!(e.code(), "SBX_E1020", "{bad:?}: {e}");
        }
        for w in ["/etc", "relative", "/project/../etc", "/", "/workspacex"] {
            let e = check_request(&ok, Some(Path::new(w))).unwrap_err();
            assert_eq!(e.code(), "SBX_E1021", "{w}: {e}");
        }
        let many: Vec<Mount> = (0..65).map(|i| m(&format!("/x:/m{i}"))).collect();
        assert!(check_request(&many, None).is_err());
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
