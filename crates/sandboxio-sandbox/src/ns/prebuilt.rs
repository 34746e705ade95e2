//! Pre-built namespaces for the warm pool, the pure part: which parts of a
//! [`NamespacePlan`] a pooled init builds before its request is known (the *base*: the
//! namespaces, the read-only system view, `/proc`, `/dev`, `/tmp`, the staged workspace and
//! output, pivot_root, the read-only root), and which a request may still change when it
//! arrives (the *request-time* part).
//!
//! Request-time, applied by the helper and the waiting init just before the payload forks:
//! argv, env, cwd, rlimits, the Landlock rules, the seccomp rules (payload, last), the
//! sizes of the staged workspace and output tmpfs (remounted by the helper), the size and
//! exec flag of `/tmp` and `/dev/shm` and the exec flag of `/workspace` and `/output`
//! (remounted by the init), the host workspace copied in and the host output directory.
//!
//! Everything else must be equal between the base and the request's own plan (compared
//! by [`shape`]); a request that differs (network, an input directory, the caller's
//! mounts: binds of host paths cannot be added after pivot_root) runs cold.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::plan::{MountFlags, MountOp, NamespacePlan, INSIDE_TMP};

/// The tmpfs mounts whose size and flags a request sets.
const REQUEST_TMPFS: [&str; 2] = [INSIDE_TMP, "/dev/shm"];

fn request_tmpfs(path: &Path) -> bool {
    REQUEST_TMPFS.iter().any(|p| path == Path::new(p))
}

/// `plan` with every request-time field blanked: two plans with equal shapes can be served
/// by the same pre-built base (pure).
pub fn shape(plan: &NamespacePlan) -> NamespacePlan {
    let mut s = plan.clone();
    s.argv.clear();
    s.env.clear();
    s.cwd = PathBuf::new();
    s.workspace_host = PathBuf::new();
    s.output_host = PathBuf::new();
    s.workspace_size = 0;
    s.output_size = 0;
    s.landlock.clear();
    s.seccomp.clear();
    for m in &mut s.mounts {
        match m {
            MountOp::Tmpfs {
                path, size, flags, ..
            } if request_tmpfs(path) => {
                *size = 0;
                *flags = MountFlags::default();
            }
            MountOp::StagedBind { flags, .. } => *flags = MountFlags::default(),
            _ => {}
        }
    }
    s
}

/// Why `real` cannot be served by a base built from `base`, or `None` when it can (pure).
pub fn mismatch(base: &NamespacePlan, real: &NamespacePlan) -> Option<&'static str> {
    let (b, r) = (shape(base), shape(real));
    if b == r {
        return None;
    }
    Some(if b.egress_port != r.egress_port {
        "network"
    } else if b.mounts.len() != r.mounts.len() {
        "mounts"
    } else if b.sockets != r.sockets {
        "network"
    } else if b.tty != r.tty {
        "tty"
    } else if (b.uid_map.as_str(), b.gid_map.as_str()) != (r.uid_map.as_str(), r.gid_map.as_str()) {
        "id maps"
    } else {
        "shape"
    })
}

/// A mount the waiting init changes once the request is known.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "op", deny_unknown_fields)]
pub enum Remount {
    /// Remount the sandbox's own tmpfs at `path` with the request's size and flags.
    Tmpfs {
        path: PathBuf,
        size: u64,
        mode: u32,
        flags: MountFlags,
    },
    /// Change the flags of the bind at `path` (the staged workspace or output).
    Bind { path: PathBuf, flags: MountFlags },
}

/// What differs between the base and the request's plan, once [`mismatch`] said none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestTime {
    /// Inside the sandbox, in plan order (done by the init after pivot_root).
    pub remounts: Vec<Remount>,
    /// New size of the staged workspace tmpfs (done by the helper).
    pub workspace_size: Option<u64>,
    /// New size of the staged output tmpfs (done by the helper).
    pub output_size: Option<u64>,
}

/// The request-time changes that turn the built `base` into `real` (pure). Call only when
/// [`mismatch`] is `None` (the mount lists then pair up one to one).
pub fn request_time(base: &NamespacePlan, real: &NamespacePlan) -> RequestTime {
    let mut out = RequestTime {
        workspace_size: (base.workspace_size != real.workspace_size).then_some(real.workspace_size),
        output_size: (base.output_size != real.output_size).then_some(real.output_size),
        ..RequestTime::default()
    };
    for (b, r) in base.mounts.iter().zip(&real.mounts) {
        match (b, r) {
            (
                MountOp::Tmpfs {
                    size: bs,
                    flags: bf,
                    mode: bm,
                    ..
                },
                MountOp::Tmpfs {
                    path,
                    size,
                    mode,
                    flags,
                },
            ) if request_tmpfs(path) && (bs, bf, bm) != (size, flags, mode) => {
                out.remounts.push(Remount::Tmpfs {
                    path: path.clone(),
                    size: *size,
                    mode: *mode,
                    flags: *flags,
                })
            }
            (MountOp::StagedBind { flags: bf, .. }, MountOp::StagedBind { path, flags, .. })
                if bf != flags =>
            {
                out.remounts.push(Remount::Bind {
                    path: path.clone(),
                    flags: *flags,
                })
            }
            _ => {}
        }
    }
    out
}

/// What the helper sends the waiting init when the request arrives: the request's own plan
/// (mapped like the base) and its rlimits. The init compiles the payload's filter and
/// Landlock rules from it and applies [`request_time`] itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Go {
    pub plan: NamespacePlan,
    pub rlimits: super::apply::Rlimits,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use std::collections::BTreeMap;
    use std::time::Duration;

    use sandboxio_core::{ByteSize, ExecRequest, Mount, MountMode, NetworkMode};

    use super::super::plan::{plan, NsHostPaths, INSIDE_OUTPUT, INSIDE_WORKSPACE};
    use super::*;

    fn host(n: u32) -> NsHostPaths {
        NsHostPaths {
            workspace: PathBuf::from(format!("/dev/shm/ws{n}")),
            output: PathBuf::from(format!("/dev/shm/out{n}")),
        }
    }

    fn base() -> NamespacePlan {
        let mut req = ExecRequest::new(["/bin/true"]);
        req.limits = req.limits.or_builtin_defaults();
        plan(&req, &host(0), &BTreeMap::new()).unwrap()
    }

    fn real(req: &ExecRequest) -> NamespacePlan {
        let mut req = req.clone();
        req.limits = req.limits.or_builtin_defaults();
        let env = BTreeMap::from([("LANG".to_string(), "C".to_string())]);
        plan(&req, &host(1), &env).unwrap()
    }

    #[test]
    fn argv_env_cwd_limits_and_host_paths_fit_the_base() {
        let mut req = ExecRequest::new(["python3", "-c", "print(1)"]);
        req.workdir = Some(PathBuf::from("/tmp"));
        req.limits.tmp_size = ByteSize::mib(7);
        req.limits.output_size = ByteSize::mib(3);
        req.limits.timeout = Duration::from_secs(3);
        req.allow_exec_in_writable = true;
        assert_eq!(mismatch(&base(), &real(&req)), None);
    }

    #[test]
    fn network_input_mounts_and_tty_do_not_fit() {
        let mut net = ExecRequest::new(["true"]);
        net.network = NetworkMode::Full;
        assert_eq!(mismatch(&base(), &real(&net)), Some("network"));
        let mut input = ExecRequest::new(["true"]);
        input.input_dir = Some(PathBuf::from("/srv/in"));
        assert!(mismatch(&base(), &real(&input)).is_some());
        let mut mounts = ExecRequest::new(["true"]);
        mounts.mounts = vec![Mount {
            host: PathBuf::from("/srv/data"),
            sandbox: PathBuf::from("/data"),
            mode: MountMode::Ro,
        }];
        assert_eq!(mismatch(&base(), &real(&mounts)), Some("mounts"));
        let mut tty = ExecRequest::new(["true"]);
        tty.tty = true;
        assert_eq!(mismatch(&base(), &real(&tty)), Some("tty"));
    }

    #[test]
    fn same_request_needs_no_remount() {
        let rt = request_time(&base(), &real(&ExecRequest::new(["true"])));
        assert_eq!(rt, RequestTime::default());
    }

    #[test]
    fn tmp_size_and_exec_become_remounts_in_plan_order() {
        let mut req = ExecRequest::new(["true"]);
        req.limits.tmp_size = ByteSize::mib(5);
        req.limits.output_size = ByteSize::mib(2);
        req.allow_exec_in_writable = true;
        let rt = request_time(&base(), &real(&req));
        assert_eq!(rt.workspace_size, Some(ByteSize::mib(5).bytes()));
        assert_eq!(rt.output_size, Some(ByteSize::mib(2).bytes()));
        let paths: Vec<&Path> = rt
            .remounts
            .iter()
            .map(|r| match r {
                Remount::Tmpfs { path, .. } | Remount::Bind { path, .. } => path.as_path(),
            })
            .collect();
        assert_eq!(
            paths,
            [
                Path::new("/dev/shm"),
                Path::new(INSIDE_TMP),
                Path::new(INSIDE_WORKSPACE),
                Path::new(INSIDE_OUTPUT)
            ]
        );
        for r in &rt.remounts {
            match r {
                Remount::Tmpfs { size, flags, .. } => {
                    assert_eq!(*size, ByteSize::mib(5).bytes());
                    assert!(!flags.noexec && flags.nosuid && flags.nodev);
                }
                Remount::Bind { flags, .. } => assert!(!flags.noexec && flags.nosuid),
            }
        }
    }

    #[test]
    fn only_the_exec_flag_remounts_the_binds_and_keeps_them_nosuid() {
        let mut req = ExecRequest::new(["true"]);
        req.allow_exec_in_writable = true;
        let rt = request_time(&base(), &real(&req));
        assert_eq!(rt.workspace_size, None);
        assert_eq!(rt.remounts.len(), 4);
        // A default request against a base built with exec: back to noexec everywhere.
        let mut exec_base = ExecRequest::new(["true"]);
        exec_base.allow_exec_in_writable = true;
        let rt = request_time(&real(&exec_base), &real(&ExecRequest::new(["true"])));
        for r in &rt.remounts {
            let (Remount::Tmpfs { flags, .. } | Remount::Bind { flags, .. }) = r;
            assert!(flags.noexec && flags.nosuid && flags.nodev, "{r:?}");
        }
    }

    #[test]
    fn go_round_trips_through_json() {
        let go = Go {
            plan: real(&ExecRequest::new(["echo", "hi"])),
            rlimits: vec![(libc::RLIMIT_CORE, 0), (libc::RLIMIT_NOFILE, 1024)],
        };
        let back: Go = serde_json::from_slice(&serde_json::to_vec(&go).unwrap()).unwrap();
        assert_eq!(back, go);
    }
}
