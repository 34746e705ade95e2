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
        m.host = real;
    }
    Ok(())
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
        let mut r = req_with(&format!("{}/link/../link:/p:rw", d.path().display()));
        assert!(resolve(&GatewayConfig::default(), &mut r).is_ok());
        assert_eq!(r.mounts[0].host, std::fs::canonicalize(&real).unwrap());
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
