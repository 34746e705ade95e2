//! The `landlock` fallback tier: for hosts that forbid user namespaces. Landlock + seccomp +
//! rlimits + cgroups in a plain fork of the helper, no namespaces at all. Weaker than the
//! namespace tier and used only when `SandboxConfig.landlock_fallback` allows it.
//!
//! - [`plan`] (pure; `plan::build` calls it for `TierRequest::Landlock`, whose uid and
//!   random number `TierRequest::for_host` reads; [`check_allowed`] is the config's gate): host
//!   Landlock rules, the seccomp rules, the staged output directory, the id to run as.
//! - [`spawn`] (helper, syscalls): prepares the workspace, the Landlock ruleset and the
//!   seccomp filter, and starts the payload with the process tier's launcher
//!   (`launch::spawn_payload` with its `Confine` steps); the payload joins its cgroups, lowers rlimits, changes to a fresh unprivileged uid/gid (when the
//!   helper is root), drops every capability, sets `no_new_privs`, applies Landlock (required:
//!   no Landlock, no run, `SBX_E1469`), closes fds, installs seccomp last and execs.
//! - [`finish`] (helper, after the whole tree is dead): copies the staged output to the
//!   requested output directory with the caps of copy-out (sparse-aware, hard links once,
//!   at most `output_size` bytes, all or nothing) and says what was enforced and what not.
//!
//! What this tier does NOT give (also listed in every `Enforcement.gaps`): no pid namespace
//! (host processes exist beside the payload; `/proc` is not readable under Landlock and
//! signals are scoped to the sandbox from Landlock ABI 6), no mount namespace (the host
//! tree is there to path walks; only Landlock decides what may be opened, and `stat` of
//! host paths is not restricted), no network namespace (network is refused by seccomp
//! alone: `socket()` fails for every family, AF_UNIX included, because host Unix sockets
//! would be reachable; `socketpair(AF_UNIX)` works), no ipc/uts namespace, no private tmpfs
//! (`tmp_size` is not enforced; files land in the host work root, on disk or a shared
//! tmpfs, bounded per file by `RLIMIT_FSIZE`).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use sandboxio_core::{
    ByteSize, Enforcement, ErrorCode, ExecRequest, ExecResult, IsolationTier, NetworkMode,
};
use serde::{Deserialize, Serialize};

use crate::config::SandboxConfig;
use crate::error::SandboxError;
use crate::launch::{spawn_payload, Confine, Steps};
use crate::ns::landlock::{self, Access, LandlockRule};
use crate::ns::restriction::{self, Restriction};
use crate::ns::seccomp::{self, RuleAction, SeccompRule, SocketPolicy};
use crate::ns::NsError;
use crate::plan::cstring;
use crate::plan::{SandboxPlan, WorkspacePaths};

/// Name of the directory, inside the workspace, where the payload writes its output.
pub const STAGED_OUTPUT: &str = "sandbox-output";
/// Fresh ids for sandboxes of a root helper are drawn from `[ID_BASE, ID_BASE + ID_SPAN)`:
/// far above distribution users, systemd dynamic users (61184..65519) and `nobody`.
pub const ID_BASE: u32 = 0x6000_0000;
pub const ID_SPAN: u32 = 0x1000_0000;

/// Read-only host files and directories a dynamically linked program and Python need.
const READ_EXEC: &[&str] = &["/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32"];
const READ_ONLY: &[&str] = &[
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/etc/hosts",
    "/etc/ssl/certs",
    "/etc/alternatives",
];
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// Everything the helper needs for the landlock tier. Travels inside `SandboxPlan`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LandlockTierPlan {
    /// uid and gid the payload runs as (a fresh one per sandbox when the helper is root);
    /// `None`: the helper's own ids (not root), which is listed as a gap.
    pub run_as: Option<u32>,
    /// Landlock rules on host paths. Paths that do not exist are skipped.
    pub rules: Vec<LandlockRule>,
    pub seccomp: Vec<SeccompRule>,
    /// Where the payload writes (`SANDBOX_OUTPUT`), inside the workspace.
    pub staged_output: PathBuf,
    /// Copy-out cap in bytes (`limits.output_size`; 0: none).
    pub output_size: u64,
    /// RLIMIT_NPROC for the fresh uid (counted per uid host-wide, so only with `run_as`).
    pub nproc: Option<u64>,
}

/// The seccomp rules of this tier: the namespace tier's table for a sandbox with host
/// directories bound in and no network ([`SocketPolicy::PairsOnly`]): without a network or
/// mount namespace of its own, an AF_UNIX socket reaches the host's Unix sockets (D-Bus,
/// journald, container runtimes), so `socket()` fails for every family, and only a stream
/// or seqpacket pair can be made (a datagram pair can `sendto` any socket path, which
/// Landlock does not mediate). `memfd_create` must seal its file non-executable (no pid
/// namespace of its own, so `vm.memfd_noexec` cannot be set for the payload alone).
pub fn seccomp_rules() -> Vec<SeccompRule> {
    seccomp::rules_for(SocketPolicy::PairsOnly)
        .into_iter()
        .chain([seccomp::memfd_rule()])
        .map(|mut r| {
            if r.syscall == "socket" {
                r.action = RuleAction::Errno(libc::EAFNOSUPPORT);
                r.why = "landlock tier: no network namespace, so no sockets of any family \
                         (an AF_UNIX stream or seqpacket socketpair stays allowed)"
                    .to_string();
            }
            r
        })
        .collect()
}

/// Plans the tier (pure): `euid` is the helper's effective uid, `random` picks the fresh id.
pub fn plan(
    req: &ExecRequest,
    paths: &WorkspacePaths,
    euid: u32,
    random: u32,
) -> Result<LandlockTierPlan, SandboxError> {
    match req.network {
        NetworkMode::None => {}
        NetworkMode::Allowlist { .. } => {
            return Err(SandboxError::FallbackNetwork { mode: "allowlist" })
        }
        NetworkMode::Full => return Err(SandboxError::FallbackNetwork { mode: "full" }),
    }
    let writable = if req.allow_exec_in_writable {
        Access::ReadWriteExec
    } else {
        Access::ReadWrite
    };
    let rule = |path: &Path, access| LandlockRule {
        path: path.to_path_buf(),
        access,
    };
    let mut rules: Vec<LandlockRule> = Vec::new();
    rules.extend(
        READ_EXEC
            .iter()
            .map(|p| rule(Path::new(p), Access::ReadExec)),
    );
    rules.extend(READ_ONLY.iter().map(|p| rule(Path::new(p), Access::Read)));
    rules.extend(DEVICES.iter().map(|p| rule(Path::new(p), Access::Device)));
    // The workspace holds HOME/cwd, TMPDIR and the staged output.
    rules.push(rule(&paths.workspace, writable));
    if let Some(input) = &req.input_dir {
        if !input.starts_with(&paths.workspace) {
            rules.push(rule(input, Access::Read));
        }
    }
    // The caller's mounts, at their host paths (`plan::host_view_cwd` checked that): read
    // and execute for `ro`, the writable places' access for `rw`.
    for m in &req.mounts {
        let access = match m.mode {
            sandboxio_core::MountMode::Ro => Access::ReadExec,
            sandboxio_core::MountMode::Rw => writable,
        };
        rules.push(rule(&m.host, access));
    }
    let run_as = (euid == 0).then(|| ID_BASE + random % ID_SPAN);
    Ok(LandlockTierPlan {
        run_as,
        rules,
        seccomp: seccomp_rules(),
        staged_output: paths.workspace.join(STAGED_OUTPUT),
        output_size: req.limits.output_size.bytes(),
        nproc: run_as
            .map(|_| u64::from(req.limits.pids))
            .filter(|n| *n > 0),
    })
}

/// Supervisor side: deny unless the configuration allows the tier
/// (`[sandbox] allow_landlock_fallback`).
pub fn check_allowed(cfg: &SandboxConfig) -> Result<(), SandboxError> {
    if cfg.landlock_fallback {
        return Ok(());
    }
    Err(SandboxError::UnsupportedTier {
        tier: IsolationTier::Landlock,
        why: "the landlock fallback tier is not allowed by this configuration \
              (set `[sandbox] allow_landlock_fallback = true` to allow it)",
    })
}

/// The effective uid the tier is planned for: root of a nested user namespace cannot
/// switch to a fresh host uid, so it keeps its own (`plan` only asks whether the helper may
/// switch ids; any non-zero uid says no).
pub(crate) fn planning_uid() -> u32 {
    let euid = crate::sys::proc::geteuid();
    if euid == 0 && !crate::ids::is_host_root() {
        u32::MAX
    } else {
        euid
    }
}

/// The namespace tier's answer, or, when this host refused it (a [`Restriction`]: user
/// namespaces off, AppArmor, a container) and `[sandbox] allow_landlock_fallback` is true,
/// the same request run under the landlock tier. The refusal happens before the payload
/// starts, so nothing ran twice. The result says so: `enforcement.tier` is `landlock` and
/// the first gap names the refusal and the config key (both reach the record).
pub(crate) async fn after_refusal(
    first: Result<ExecResult, SandboxError>,
    req: &ExecRequest,
    tier: IsolationTier,
    cfg: &SandboxConfig,
    cancel: Option<crate::CancelToken>,
    mut io: crate::stream::StreamIo,
) -> Result<ExecResult, SandboxError> {
    let refused = match &first {
        Err(e) if tier == IsolationTier::Namespace && cfg.landlock_fallback => {
            Restriction::from_code(e.code()).filter(|r| r.landlock_may_help())
        }
        _ => None,
    };
    let (Some(restriction), Err(e)) = (refused, &first) else {
        return first;
    };
    tracing::warn!(
        code = e.code(),
        "namespace tier refused by this host; using the landlock tier as configured"
    );
    // The events sender is still here; a streamed stdin was taken by the refused attempt
    // (the second run reads end of input; see README "Streams").
    let mut r =
        crate::exec::run_prepared(req, IsolationTier::Landlock, cfg, cancel, None, &mut io).await?;
    r.enforcement.gaps.insert(
        0,
        format!(
            "tier: fell back from namespace to landlock because `{}` is true; the namespace \
             tier was refused here ({}: {}; fix: {})",
            restriction::FALLBACK_KEY,
            restriction.code(),
            restriction.why(),
            restriction.fix()
        ),
    );
    Ok(r)
}

// ---- helper side --------------------------------------------------------------------------

/// Gives the workspace (trusted: written by the supervisor) to the payload's ids, without
/// following symlinks.
fn chown_tree(root: &Path, id: u32) -> Result<(), SandboxError> {
    let mut work = vec![root.to_path_buf()];
    let err = |path: &Path, source| SandboxError::WorkspaceWrite {
        path: path.to_path_buf(),
        source,
    };
    while let Some(dir) = work.pop() {
        std::os::unix::fs::lchown(&dir, Some(id), Some(id)).map_err(|e| err(&dir, e))?;
        for e in std::fs::read_dir(&dir).map_err(|e| err(&dir, e))? {
            let e = e.map_err(|e| err(&dir, e))?;
            let p = e.path();
            let ft = e.file_type().map_err(|e| err(&p, e))?;
            if ft.is_dir() {
                work.push(p);
            } else {
                std::os::unix::fs::lchown(&p, Some(id), Some(id)).map_err(|e| err(&p, e))?;
            }
        }
    }
    Ok(())
}

/// Starts the payload of the landlock tier; returns its pid once `execve` succeeded.
/// `old_mask` is the signal mask to restore in the payload.
pub fn spawn(plan: &SandboxPlan, old_mask: &libc::sigset_t) -> Result<i32, SandboxError> {
    let Some(lp) = plan.tier.landlock() else {
        return Err(SandboxError::UnsupportedTier {
            tier: plan.tier.tier(),
            why: "the landlock launcher was given a plan of another tier",
        });
    };
    if landlock::abi_version().is_none() {
        return Err(NsError::LandlockRequired.into());
    }
    let mkdir_err = |source| SandboxError::WorkspaceWrite {
        path: lp.staged_output.clone(),
        source,
    };
    std::fs::create_dir(&lp.staged_output).map_err(mkdir_err)?;
    if let Some(id) = lp.run_as {
        chown_tree(&plan.paths.workspace, id)?;
    }
    let filter = seccomp::compile(&lp.seccomp)?;
    let prepared = landlock::prepare(&lp.rules, true).ok_or(NsError::NulByte)?;
    let prog = plan.argv.first().ok_or(SandboxError::EmptyArgv)?;
    let candidates: Vec<CString> = if prog.contains('/') {
        let p = Path::new(prog);
        let p = if p.is_absolute() {
            p.to_path_buf()
        } else {
            plan.cwd.join(p)
        };
        vec![cstring(p.as_os_str().as_bytes())?]
    } else {
        let path = plan.env.get("PATH").map(String::as_str).unwrap_or("");
        path.split(':')
            .filter(|d| d.starts_with('/'))
            .map(|d| cstring(Path::new(d).join(prog).as_os_str().as_bytes()))
            .collect::<Result<_, _>>()?
    };
    let mut rlimits = crate::ns::rlimits_from(&plan.rlimits);
    if let Some(n) = lp.nproc {
        rlimits.push((libc::RLIMIT_NPROC, n));
    }
    let steps = Steps {
        candidates: &candidates,
        rlimits: &rlimits,
        no_new_privs: true,
        confine: Some(Confine {
            run_as: lp.run_as,
            landlock: &prepared,
            filter: &filter,
        }),
    };
    spawn_payload(plan, old_mask, &steps)
}

/// After the whole tree is dead: copy the staged output out (caps, all or nothing) and
/// say what was enforced, with the copy's failure apart (the run's results stand).
pub fn finish(
    plan: &SandboxPlan,
) -> Result<(Enforcement, Option<sandboxio_core::CopyOutError>), SandboxError> {
    let Some(lp) = plan.tier.landlock() else {
        return Err(SandboxError::UnsupportedTier {
            tier: plan.tier.tier(),
            why: "the landlock tier's copy-out was given a plan of another tier",
        });
    };
    let copied = if crate::ns::has_entries(&lp.staged_output) {
        crate::ns::copy_output(&lp.staged_output, &plan.paths.output_dir, lp.output_size)
    } else {
        Ok((0, 0))
    };
    Ok(match copied {
        Ok((files, bytes)) => (enforcement(lp, files, bytes), None),
        Err(e) => (enforcement(lp, 0, 0), Some(e.as_copy_out_error())),
    })
}

/// The enforcement record of this tier (pure given the kernel's Landlock ABI).
fn enforcement(lp: &LandlockTierPlan, files: u64, bytes: u64) -> Enforcement {
    let abi = landlock::abi_version().map(|a| a.min(landlock::MAX_ABI));
    let mut limits = vec![
        format!(
            "landlock: read+exec {}; read {}; devices {}; read/write the workspace only",
            READ_EXEC.join(" "),
            READ_ONLY.join(" "),
            DEVICES.join(" ")
        ),
        "seccomp: namespace-tier deny table; socket() refused for every family; memfd_create \
         only with MFD_NOEXEC_SEAL"
            .to_string(),
        format!(
            "output_size={} (copy-out cap: sparse-aware, hard links once, all or nothing; \
             copied {files} files, {bytes} bytes)",
            ByteSize(lp.output_size)
        ),
        "capabilities: all dropped (bounding, ambient, permitted, effective)".to_string(),
    ];
    let mut gaps = vec![
        "no pid namespace: host processes run beside the payload (/proc is closed by \
         Landlock; signals are scoped only from Landlock ABI 6)"
            .to_string(),
        "no mount namespace: the host filesystem tree is visible to path walks and stat(); \
         only Landlock decides what may be opened, written or executed"
            .to_string(),
        "no network namespace: network is refused by seccomp alone (socket() fails for \
         every family)"
            .to_string(),
        "no ipc/uts namespace: host System V IPC objects with open permissions are reachable"
            .to_string(),
        "tmp_size: not enforced (no private tmpfs); files land in the host work root \
         (disk, or a shared tmpfs), each bounded by RLIMIT_FSIZE"
            .to_string(),
    ];
    match lp.run_as {
        Some(id) => {
            limits.push(format!(
                "uid/gid {id}: fresh per sandbox, no supplementary groups"
            ));
            if let Some(n) = lp.nproc {
                limits.push(format!("processes={n} (RLIMIT_NPROC of the fresh uid)"));
            }
        }
        None => gaps.push(
            "same uid as the supervisor (the helper is not root, so it cannot switch to a \
             fresh uid)"
                .to_string(),
        ),
    }
    if abi.is_some_and(|a| a < 6) {
        gaps.push(
            "landlock ABI below 6: signals and abstract Unix sockets are not scoped".to_string(),
        );
    }
    Enforcement {
        tier: Some(IsolationTier::Landlock),
        namespaces: Vec::new(),
        landlock_abi: abi,
        seccomp: true,
        no_new_privs: true,
        cgroup: None,
        limits,
        network: "none".to_string(),
        gaps,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use crate::plan::build;
    use crate::tier::TierRequest;

    fn paths() -> WorkspacePaths {
        WorkspacePaths {
            workspace: "/tmp/ws".into(),
            tmp: "/tmp/ws/tmp".into(),
            input_dir: "/tmp/ws/input".into(),
            output_dir: "/srv/out".into(),
        }
    }

    #[test]
    fn a_built_landlock_plan_carries_its_section_and_points_the_output_at_the_staging() {
        let req = ExecRequest::new(["true"]);
        let tier = TierRequest::Landlock { euid: 0, random: 7 };
        let sp = build("id", &req, tier, [], paths(), None).unwrap();
        let lp = sp.tier.landlock().expect("a landlock section");
        assert_eq!(lp, &plan(&req, &paths(), 0, 7).unwrap());
        assert_eq!(
            sp.env.get(crate::plan::ENV_OUTPUT).map(String::as_str),
            Some("/tmp/ws/sandbox-output"),
            "the payload writes into the staging, not the host's output directory"
        );
        assert!(sp.tier.namespace().is_none());
        // Network cannot be given by this tier: refused at planning, before any process.
        let mut net = req.clone();
        net.network = NetworkMode::Full;
        assert!(build("id", &net, tier, [], paths(), None).is_err());
    }

    #[test]
    fn plan_writes_only_the_workspace_and_never_exposes_etc_wholesale() {
        let mut req = ExecRequest::new(["true"]);
        req.limits = sandboxio_core::Limits::default();
        req.input_dir = Some("/data/in".into());
        let lp = plan(&req, &paths(), 0, 7).unwrap();
        let writable: Vec<_> = lp
            .rules
            .iter()
            .filter(|r| matches!(r.access, Access::ReadWrite | Access::ReadWriteExec))
            .map(|r| r.path.clone())
            .collect();
        assert_eq!(writable, vec![PathBuf::from("/tmp/ws")]);
        assert!(lp.rules.iter().all(|r| r.path != Path::new("/etc")
            && r.path != Path::new("/")
            && r.path != Path::new("/tmp")
            && r.path != Path::new("/proc")
            && !r.path.starts_with("/etc/shadow")));
        assert!(lp
            .rules
            .iter()
            .any(|r| r.path == Path::new("/data/in") && r.access == Access::Read));
        assert_eq!(lp.staged_output, PathBuf::from("/tmp/ws/sandbox-output"));
        assert_eq!(lp.run_as, Some(ID_BASE + 7));
        assert_eq!(lp.nproc, Some(u64::from(req.limits.pids)));
    }

    #[test]
    fn not_root_keeps_own_ids_and_says_so() {
        let req = ExecRequest::new(["true"]);
        let lp = plan(&req, &paths(), 1000, 7).unwrap();
        assert_eq!(lp.run_as, None);
        assert_eq!(lp.nproc, None);
        let e = enforcement(&lp, 0, 0);
        assert!(e.gaps.iter().any(|g| g.starts_with("same uid")));
        assert!(e.gaps.iter().any(|g| g.starts_with("no pid namespace")));
        assert!(e.gaps.iter().any(|g| g.starts_with("no mount namespace")));
        assert!(e.gaps.iter().any(|g| g.starts_with("no network namespace")));
        assert!(e.namespaces.is_empty());
        assert_eq!(e.tier, Some(IsolationTier::Landlock));
    }

    #[test]
    fn exec_in_writable_only_when_asked() {
        let mut req = ExecRequest::new(["true"]);
        let lp = plan(&req, &paths(), 0, 0).unwrap();
        assert!(lp.rules.iter().all(|r| r.access != Access::ReadWriteExec));
        req.allow_exec_in_writable = true;
        let lp = plan(&req, &paths(), 0, 0).unwrap();
        assert!(lp.rules.iter().any(|r| r.access == Access::ReadWriteExec));
    }

    #[test]
    fn only_network_none() {
        let mut req = ExecRequest::new(["true"]);
        req.network = NetworkMode::Full;
        assert!(matches!(
            plan(&req, &paths(), 0, 0),
            Err(SandboxError::FallbackNetwork { mode: "full" })
        ));
    }

    #[test]
    fn socket_is_refused_for_every_family_and_only_stream_pairs_are_not() {
        let rules = seccomp_rules();
        let sock = rules.iter().find(|r| r.syscall == "socket").unwrap();
        assert_eq!(sock.action, RuleAction::Errno(libc::EAFNOSUPPORT));
        let prog = seccomp::compile(&rules).unwrap();
        let call = |nr: i64, family: i32, ty: i32| {
            // The pair's descriptors would land at an invalid address: EFAULT once the
            // filter lets the call by.
            let a = [family as u64, ty as u64, 0, u64::MAX, 0, 0];
            crate::sys::seccomp::syscall_in_child(Some(&prog), nr, a)
        };
        for family in [libc::AF_UNIX, libc::AF_INET, libc::AF_NETLINK] {
            assert_eq!(
                call(libc::SYS_socket, family, libc::SOCK_STREAM),
                libc::EAFNOSUPPORT
            );
        }
        // A datagram pair can send to any host socket path (journald, /dev/log): refused.
        for ty in [libc::SOCK_DGRAM, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC] {
            assert_eq!(
                call(libc::SYS_socketpair, libc::AF_UNIX, ty),
                libc::EPERM,
                "type {ty}"
            );
        }
        for ty in [libc::SOCK_STREAM, libc::SOCK_SEQPACKET] {
            assert_eq!(
                call(libc::SYS_socketpair, libc::AF_UNIX, ty),
                libc::EFAULT,
                "type {ty}"
            );
        }
    }

    #[test]
    fn fresh_ids_stay_in_their_range() {
        let req = ExecRequest::new(["true"]);
        for r in [0, 1, u32::MAX, ID_SPAN, ID_SPAN - 1] {
            let id = plan(&req, &paths(), 0, r).unwrap().run_as.unwrap();
            assert!((ID_BASE..ID_BASE + ID_SPAN).contains(&id));
        }
    }
}
