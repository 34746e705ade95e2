//! The `landlock` fallback tier: for hosts that forbid user namespaces. Landlock + seccomp +
//! rlimits + cgroups in a plain fork of the helper, no namespaces at all. Weaker than the
//! namespace tier and used only when `SandboxConfig.landlock_fallback` allows it.
//!
//! - [`plan`] (pure; `plan::build` calls it for `TierRequest::Landlock`, whose uid and
//!   random number `TierRequest::for_host` reads; [`check_allowed`] is the config's gate): host
//!   Landlock rules, the seccomp rules, the staged output directory, the id to run as.
//! - [`spawn`] (helper, syscalls): prepares the workspace, forks the payload; the payload
//!   joins its cgroups, lowers rlimits, changes to a fresh unprivileged uid/gid (when the
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
use crate::error::{last_os_error, SandboxError};
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

/// The seccomp rules of this tier: the namespace tier's table for "no network", except
/// that `socket()` fails for every family (without a network or mount namespace an AF_UNIX
/// socket reaches the host's Unix sockets: D-Bus, journald, container runtimes), and
/// `memfd_create` must seal its file non-executable (no pid namespace of its own, so
/// `vm.memfd_noexec` cannot be set for the payload alone).
pub fn seccomp_rules() -> Vec<SeccompRule> {
    seccomp::rules_for(SocketPolicy::UnixOnly)
        .into_iter()
        .chain([seccomp::memfd_rule()])
        .map(|mut r| {
            if r.syscall == "socket" {
                r.action = RuleAction::Errno(libc::EAFNOSUPPORT);
                r.why = "landlock tier: no network namespace, so no sockets of any family \
                         (socketpair(AF_UNIX) stays allowed)"
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
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
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

// Stages reported by the payload child over its error pipe.
const ST_CGROUP: u8 = 1;
const ST_RLIMIT: u8 = 2;
const ST_CHDIR: u8 = 3;
const ST_IDS: u8 = 4;
const ST_CAPS: u8 = 5;
const ST_NNP: u8 = 6;
const ST_LANDLOCK: u8 = 7;
const ST_NO_LANDLOCK: u8 = 8;
const ST_FDS: u8 = 9;
const ST_SECCOMP: u8 = 10;
const ST_EXEC: u8 = 11;

fn stage_name(s: u8) -> &'static str {
    match s {
        ST_CGROUP => "join cgroup",
        ST_RLIMIT => "setrlimit",
        ST_CHDIR => "chdir",
        ST_IDS => "setgroups/setresgid/setresuid",
        ST_CAPS => "drop capabilities",
        ST_NNP => "no_new_privs",
        ST_LANDLOCK => "landlock",
        ST_FDS => "close fds",
        ST_SECCOMP => "seccomp",
        _ => "exec",
    }
}

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
    let argv = plan.argv_cstrings()?;
    let envp = plan.env_cstrings()?;
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
    let cwd = cstring(plan.cwd.as_os_str().as_bytes())?;
    // Cgroups a pooled helper already sits in are inherited at fork, not joined again.
    let cgroup_procs: Vec<CString> = match &plan.cgroup {
        Some(cg) => cg
            .dirs
            .iter()
            .filter(|d| !plan.cgroup_joined.contains(d))
            .map(|d| cstring(crate::cgroup::self_join_file(d).as_os_str().as_bytes()))
            .collect::<Result<_, _>>()?,
        None => Vec::new(),
    };
    let mut rlimits = crate::ns::rlimits_from(&plan.rlimits);
    if let Some(n) = lp.nproc {
        rlimits.push((libc::RLIMIT_NPROC, n));
    }
    let mut argv_p: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_p.push(std::ptr::null());
    let mut envp_p: Vec<*const libc::c_char> = envp.iter().map(|a| a.as_ptr()).collect();
    envp_p.push(std::ptr::null());
    let ctx = Child {
        old_mask,
        cgroup_procs: &cgroup_procs,
        rlimits: &rlimits,
        cwd: &cwd,
        run_as: lp.run_as,
        landlock: &prepared,
        filter: &filter,
        candidates: &candidates,
        argv: &argv_p,
        envp: &envp_p,
        tty: plan.tty,
    };

    let mut fds = [0i32; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(SandboxError::Pipe {
            source: last_os_error(),
        });
    }
    let [err_r, err_w] = fds;
    // SAFETY: the helper is single-threaded, so the child may run any code; it only uses
    // memory prepared above and ends in execve or _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        let source = last_os_error();
        // SAFETY: closing the two fds created above.
        unsafe {
            libc::close(err_r);
            libc::close(err_w);
        }
        return Err(SandboxError::Fork { source });
    }
    if pid == 0 {
        payload(&ctx, err_w);
    }
    // SAFETY: closing our copy of the write end; the child holds its own.
    unsafe { libc::close(err_w) };
    let mut buf = [0u8; 5];
    let mut got = 0usize;
    while got < buf.len() {
        // SAFETY: reading into the unfilled tail of `buf`, within its bounds.
        let n = unsafe { libc::read(err_r, buf[got..].as_mut_ptr().cast(), buf.len() - got) };
        if n < 0 && last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        if n <= 0 {
            break;
        }
        got += usize::try_from(n).unwrap_or(0);
    }
    // SAFETY: closing the read end created above.
    unsafe { libc::close(err_r) };
    if got == 0 {
        return Ok(pid);
    }
    let mut status = 0;
    // SAFETY: reaping our own child, which failed before exec.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    let errno = i32::from_ne_bytes([buf[1], buf[2], buf[3], buf[4]]);
    let source = std::io::Error::from_raw_os_error(errno);
    Err(match buf[0] {
        ST_NO_LANDLOCK => NsError::LandlockRequired.into(),
        ST_SECCOMP => match restriction::diagnose(
            restriction::Step::InstallSeccomp,
            errno,
            &restriction::HostFacts::read(),
        ) {
            Some(restriction) => NsError::HostRestricted {
                restriction,
                step: restriction::Step::InstallSeccomp,
                errno,
            }
            .into(),
            None => SandboxError::FallbackSetup {
                stage: stage_name(ST_SECCOMP),
                source,
            },
        },
        ST_EXEC => SandboxError::Exec {
            program: prog.clone(),
            source,
        },
        s => SandboxError::FallbackSetup {
            stage: stage_name(s),
            source,
        },
    })
}

/// What the payload child needs, prepared before fork (no allocation after it).
struct Child<'a> {
    old_mask: &'a libc::sigset_t,
    cgroup_procs: &'a [CString],
    rlimits: &'a [(libc::__rlimit_resource_t, u64)],
    cwd: &'a CString,
    run_as: Option<u32>,
    landlock: &'a landlock::Prepared,
    filter: &'a [seccomp::SockFilter],
    candidates: &'a [CString],
    argv: &'a [*const libc::c_char],
    envp: &'a [*const libc::c_char],
    tty: bool,
}

fn prctl(option: libc::c_int, arg: libc::c_ulong) -> libc::c_int {
    // SAFETY: the prctl options used here take integer arguments only.
    unsafe {
        libc::prctl(
            option,
            arg,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    }
}

/// The payload side of fork. Never returns.
fn payload(c: &Child<'_>, err_w: i32) -> ! {
    let fail_errno = |stage: u8, errno: i32| -> ! {
        let e = errno.to_ne_bytes();
        let msg = [stage, e[0], e[1], e[2], e[3]];
        // SAFETY: writing 5 bytes from a local array to our error pipe, then leaving the
        // child without running any destructor of the helper.
        unsafe {
            libc::write(err_w, msg.as_ptr().cast(), msg.len());
            libc::_exit(127)
        }
    };
    let fail = |stage: u8| -> ! {
        fail_errno(
            stage,
            last_os_error().raw_os_error().unwrap_or(libc::EINVAL),
        )
    };
    // SAFETY: restoring the signal state inherited from the helper with valid values.
    unsafe {
        libc::sigprocmask(libc::SIG_SETMASK, c.old_mask, std::ptr::null_mut());
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        if c.tty {
            // Its own session, with the pseudo-terminal on fd 0 as controlling terminal.
            libc::setsid();
            libc::ioctl(0, libc::TIOCSCTTY, 0);
        }
    }
    for path in c.cgroup_procs {
        // SAFETY: valid C string; writing "0" (this single-threaded process) to its v1
        // `tasks` or cgroup2 `cgroup.procs` file.
        let ok = unsafe {
            let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            let ok = fd >= 0 && libc::write(fd, b"0".as_ptr().cast(), 1) == 1;
            if fd >= 0 {
                libc::close(fd);
            }
            ok
        };
        if !ok {
            fail(ST_CGROUP);
        }
    }
    if crate::rlimit::lower_all(c.rlimits).is_err() {
        fail(ST_RLIMIT);
    }
    // SAFETY: valid C string.
    if unsafe { libc::chdir(c.cwd.as_ptr()) } < 0 {
        fail(ST_CHDIR);
    }
    if let Some(id) = c.run_as {
        // Root: empty the bounding set while we still may (CAP_SETPCAP), then become the
        // fresh id; leaving uid 0 clears permitted/effective capabilities (no KEEP_CAPS).
        for cap in 0..64 {
            if prctl(libc::PR_CAPBSET_READ, cap) < 0 {
                break;
            }
            if prctl(libc::PR_CAPBSET_DROP, cap) < 0 {
                fail(ST_CAPS);
            }
        }
        // SAFETY: id syscalls with integer arguments (setgroups with an empty list).
        let rc = unsafe {
            if libc::setgroups(0, std::ptr::null()) < 0
                || libc::setresgid(id, id, id) < 0
                || libc::setresuid(id, id, id) < 0
            {
                -1
            } else {
                0
            }
        };
        if rc < 0 {
            fail(ST_IDS);
        }
    }
    if drop_capabilities().is_err() {
        fail(ST_CAPS);
    }
    if prctl(libc::PR_SET_NO_NEW_PRIVS, 1) < 0 {
        fail(ST_NNP);
    }
    match landlock::apply(c.landlock) {
        Ok(Some(_)) => {}
        Ok(None) => fail_errno(ST_NO_LANDLOCK, libc::ENOSYS),
        Err(
            landlock::Failure::CreateRuleset(e)
            | landlock::Failure::OpenPath(_, e)
            | landlock::Failure::AddRule(_, e)
            | landlock::Failure::RestrictSelf(e),
        ) => fail_errno(ST_LANDLOCK, e),
    }
    // Everything but stdio and the (close-on-exec) error pipe closes at exec.
    // SAFETY: integer arguments only.
    if unsafe { libc::close_range(3, u32::MAX, libc::CLOSE_RANGE_CLOEXEC as libc::c_int) } < 0 {
        fail(ST_FDS);
    }
    if let Err(e) = seccomp::install(c.filter) {
        fail_errno(ST_SECCOMP, e);
    }
    let mut best = libc::ENOENT;
    for cand in c.candidates {
        // SAFETY: NUL-terminated argv/envp arrays of valid C strings.
        unsafe { libc::execve(cand.as_ptr(), c.argv.as_ptr(), c.envp.as_ptr()) };
        let e = last_os_error().raw_os_error().unwrap_or(libc::ENOENT);
        if e != libc::ENOENT && e != libc::ENOTDIR {
            best = e;
        }
    }
    fail_errno(ST_EXEC, best)
}

/// Ambient set cleared, then effective/permitted/inheritable set to zero (allowed for
/// any process: it only lowers).
fn drop_capabilities() -> Result<(), i32> {
    crate::caps::clear_ambient()?;
    crate::caps::zero_sets()
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
    let copied = if lp.staged_output.is_dir() && plan.paths.output_dir.is_dir() {
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
    fn socket_is_refused_for_every_family_but_socketpair_is_not() {
        let rules = seccomp_rules();
        let sock = rules.iter().find(|r| r.syscall == "socket").unwrap();
        assert_eq!(sock.action, RuleAction::Errno(libc::EAFNOSUPPORT));
        let pair = rules.iter().find(|r| r.syscall == "socketpair").unwrap();
        assert!(matches!(pair.action, RuleAction::Checks(_)));
        assert!(seccomp::compile(&rules).is_ok());
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
