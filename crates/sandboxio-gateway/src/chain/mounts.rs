//! Mounts as the chain sees them: each host path absolute with its symlinks resolved, so
//! policy, the fingerprint, approvals and the record all name the directory that will be
//! bound (a link cannot dress a denied directory up as an allowed one), and never one that
//! reaches the gateway's own files.

use std::path::Path;

use sandboxio_core::{ErrorCode, ExecRequest, Layer};

use super::resolve::MOUNT_REFUSED;
use super::stop::Stop;
use crate::config::GatewayConfig;

/// Resolves every mount's host path in place. The sandbox opens the resolved path again
/// without following any symlink, so a link swapped in after this check is refused there.
pub(crate) fn resolve(cfg: &GatewayConfig, req: &mut ExecRequest) -> Result<(), Stop> {
    sandboxio_core::mount::check_request(&req.mounts, req.workdir.as_deref())
        .map_err(|e| Stop::deny(Layer::Admit, e.to_string()).code(e.code()))?;
    for m in &mut req.mounts {
        if m.mode == sandboxio_core::MountMode::Rw {
            refuse_foreign_symlink("mount", &m.host)?;
        }
        let real = std::fs::canonicalize(&m.host).map_err(|e| {
            Stop::deny(
                Layer::Admit,
                format!(
                    "mount refused: the host path `{}` cannot be resolved: {e}",
                    m.host.display()
                ),
            )
            .code(MOUNT_REFUSED)
        })?;
        if let Some(p) = reaches_protected(&real, &cfg.protected_paths) {
            return Err(Stop::deny(
                Layer::Admit,
                format!(
                    "mount refused: the host path `{}` reaches `{}`, which holds sandboxio's \
                     own state or policy",
                    m.host.display(),
                    p.display()
                ),
            )
            .code(MOUNT_REFUSED));
        }
        if m.mode == sandboxio_core::MountMode::Rw {
            refuse_write_protected("mount", &m.host, &real, cfg)?;
        }
        m.host = real;
    }
    // The input directory is bound read-only and the output directory receives the copy-out:
    // both are host paths reaching into the sandbox like a mount, and get the same checks
    // (and, through the policy's facts, the same mount rules).
    if let Some(d) = &req.input_dir {
        let real = std::fs::canonicalize(d).map_err(|e| {
            Stop::deny(
                Layer::Admit,
                format!(
                    "input directory refused: `{}` cannot be resolved: {e}",
                    d.display()
                ),
            )
            .code(MOUNT_REFUSED)
        })?;
        refuse_protected("input directory", d, &real, cfg)?;
        req.input_dir = Some(real);
    }
    if let Some(d) = &req.output_dir {
        refuse_foreign_symlink("output directory", d)?;
        let real = resolve_path_to_be(d).map_err(|e| {
            Stop::deny(
                Layer::Admit,
                format!(
                    "output directory refused: `{}` cannot be resolved: {e}",
                    d.display()
                ),
            )
            .code(MOUNT_REFUSED)
        })?;
        refuse_protected("output directory", d, &real, cfg)?;
        refuse_write_protected("output directory", d, &real, cfg)?;
        req.output_dir = Some(real);
    }
    Ok(())
}

fn refuse_protected(
    what: &str,
    asked: &Path,
    real: &Path,
    cfg: &GatewayConfig,
) -> Result<(), Stop> {
    match reaches_protected(real, &cfg.protected_paths) {
        Some(p) => Err(Stop::deny(
            Layer::Admit,
            format!(
                "{what} refused: the host path `{}` reaches `{}`, which holds sandboxio's own \
                 state or policy",
                asked.display(),
                p.display()
            ),
        )
        .code(MOUNT_REFUSED)),
        None => Ok(()),
    }
}

/// A writable host path (a `rw` mount, the output directory) as the caller named it may go
/// through a symlink only if root owns it: any other could have been left by a sandbox
/// (through a writable mount of its directory) to send a later run's writes somewhere the
/// caller never named (a root-owned file in `/run/systemd/system`). The system's own links
/// (`/var/run`, merged `/usr`) are root's.
fn refuse_foreign_symlink(what: &str, asked: &Path) -> Result<(), Stop> {
    use std::os::unix::fs::MetadataExt as _;
    let mut at = std::path::PathBuf::new();
    for c in asked.components() {
        at.push(c);
        let Ok(meta) = std::fs::symlink_metadata(&at) else {
            // The rest does not exist yet: nothing further to follow.
            return Ok(());
        };
        if meta.file_type().is_symlink() && meta.uid() != 0 {
            return Err(Stop::deny(
                Layer::Admit,
                format!(
                    "{what} refused: the writable host path `{}` goes through the symlink \
                     `{}`, which is not root's (a sandbox may have left it); name the \
                     directory it points to instead",
                    asked.display(),
                    at.display()
                ),
            )
            .code(MOUNT_REFUSED));
        }
    }
    Ok(())
}

/// A writable host tree that holds a configuration file in use: the program could change
/// what governs the next run (its tier, policy, state directory). Only a file that exists
/// is refused here; one a program creates where a front end looks by default is the front
/// end's to catch (the CLI sets aside a `sandboxio.toml` that appeared during a run).
fn refuse_write_protected(
    what: &str,
    asked: &Path,
    real: &Path,
    cfg: &GatewayConfig,
) -> Result<(), Stop> {
    match cfg
        .write_protected
        .iter()
        .find(|p| p.starts_with(real) && p.exists())
    {
        Some(p) => Err(Stop::deny(
            Layer::Admit,
            format!(
                "{what} refused: the writable host path `{}` holds `{}`, the configuration in \
                 use (a program could change how the next run is governed); mount it \
                 read-only, or keep the configuration outside it (`--config`)",
                asked.display(),
                p.display()
            ),
        )
        .code(MOUNT_REFUSED)),
        None => Ok(()),
    }
}

/// `path` with its symlinks resolved, for a path that may not exist yet (an output
/// directory made when the sandbox starts, a configuration file looked for): its deepest
/// existing ancestor resolved, the rest appended.
pub fn resolve_path_to_be(path: &Path) -> std::io::Result<std::path::PathBuf> {
    if !path.is_absolute() {
        return Err(std::io::Error::other("the path is not absolute"));
    }
    let mut rest = Vec::new();
    let mut at = path;
    loop {
        match std::fs::canonicalize(at) {
            Ok(real) => {
                return Ok(rest.iter().rev().fold(real, |p, c| p.join(c)));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let (Some(parent), Some(name)) = (at.parent(), at.file_name()) else {
                    return Err(e);
                };
                if name == ".." {
                    return Err(std::io::Error::other("`..` in a path still to be made"));
                }
                rest.push(name.to_os_string());
                at = parent;
            }
            Err(e) => return Err(e),
        }
    }
}

/// The protected path that `host` is, lies inside, or contains.
fn reaches_protected<'a>(host: &Path, protected: &'a [std::path::PathBuf]) -> Option<&'a Path> {
    protected
        .iter()
        .find(|p| host.starts_with(p) || p.starts_with(host))
        .map(|p| p.as_path())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use sandboxio_core::Mount;
    use std::path::PathBuf;

    fn req_with(spec: &str) -> ExecRequest {
        let mut r = ExecRequest::new(["true"]);
        r.mounts = vec![Mount::parse(spec, Path::new("/")).unwrap()];
        r
    }

    #[test]
    fn host_paths_are_resolved_through_symlinks() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, d.path().join("link")).unwrap();
        let mut r = req_with(&format!("{}/link/../link:/p", d.path().display()));
        assert!(resolve(&GatewayConfig::default(), &mut r).is_ok());
        assert_eq!(r.mounts[0].host, std::fs::canonicalize(&real).unwrap());
    }

    fn running_as_root() -> bool {
        use std::os::unix::fs::MetadataExt as _;
        std::fs::metadata("/proc/self")
            .map(|m| m.uid() == 0)
            .unwrap_or(false)
    }

    #[test]
    fn input_and_output_directories_get_the_checks_of_a_mount() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        let state = root.join("state");
        std::fs::create_dir(&state).unwrap();
        std::os::unix::fs::symlink(&state, root.join("link")).unwrap();
        let cfg = GatewayConfig {
            protected_paths: vec![state.clone()],
            ..GatewayConfig::default()
        };
        let with = |input: Option<PathBuf>, output: Option<PathBuf>| {
            let mut r = ExecRequest::new(["true"]);
            r.input_dir = input;
            r.output_dir = output;
            r
        };
        // Into the state, directly, through a link, or a directory still to be made in it.
        for r in [
            with(Some(state.clone()), None),
            with(Some(root.join("link")), None),
            with(None, Some(state.join("new/out"))),
            with(None, Some(root.join("link/out"))),
            with(None, Some(root.clone())),
        ] {
            let e = resolve(&cfg, &mut r.clone()).unwrap_err();
            assert_eq!(e.code, Some(MOUNT_REFUSED), "{r:?}");
        }
        // Elsewhere: resolved (a link named through its target).
        let out = root.join("work");
        std::fs::create_dir(&out).unwrap();
        std::os::unix::fs::symlink(&out, root.join("wl")).unwrap();
        let mut r = with(Some(out.clone()), Some(root.join("wl/new/deeper")));
        assert!(resolve(&cfg, &mut r).is_ok());
        assert_eq!(r.input_dir, Some(out.clone()));
        assert_eq!(r.output_dir, Some(out.join("new/deeper")));
    }

    /// A symlink in a writable host path must be root's (a sandbox may leave others).
    #[test]
    fn a_writable_path_through_a_symlink_not_roots_is_refused() {
        if !running_as_root() {
            eprintln!("SKIP: giving a symlink to another owner needs root");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        let target = root.join("target");
        std::fs::create_dir(&target).unwrap();
        let link = root.join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        // Owned by a user that is not root (as a sandbox's would be).
        std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).unwrap();
        let cfg = GatewayConfig::default();
        let mut out = ExecRequest::new(["true"]);
        out.output_dir = Some(link.join("out"));
        let e = resolve(&cfg, &mut out).unwrap_err();
        assert_eq!(e.code, Some(MOUNT_REFUSED));
        let mut rw = req_with(&format!("{}:/p:rw", link.display()));
        assert_eq!(
            resolve(&cfg, &mut rw).unwrap_err().code,
            Some(MOUNT_REFUSED)
        );
        // Read-only: resolved through it (reading is not redirected writing).
        let mut ro = req_with(&format!("{}:/p", link.display()));
        assert!(resolve(&cfg, &mut ro).is_ok());
        // Root's own link: followed.
        std::os::unix::fs::lchown(&link, Some(0), Some(0)).unwrap();
        let mut out = ExecRequest::new(["true"]);
        out.output_dir = Some(link.join("out"));
        assert!(resolve(&cfg, &mut out).is_ok());
        assert_eq!(out.output_dir, Some(target.join("out")));
    }

    #[test]
    fn missing_and_protected_paths_are_refused_with_a_code() {
        let d = tempfile::tempdir().unwrap();
        let state = std::fs::canonicalize(d.path()).unwrap().join("state");
        std::fs::create_dir(&state).unwrap();
        let cfg = GatewayConfig {
            protected_paths: vec![state.clone()],
            ..GatewayConfig::default()
        };
        for spec in [
            format!("{}/missing:/p", d.path().display()),
            format!("{}:/p", state.display()),
            format!("{}:/p:rw", d.path().display()),
        ] {
            let e = resolve(&cfg, &mut req_with(&spec)).unwrap_err();
            assert_eq!(e.code, Some(MOUNT_REFUSED), "{spec}");
        }
    }
}
