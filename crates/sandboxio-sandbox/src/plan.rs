//! The sandbox plan: everything the helper needs, computed without a single syscall.
//!
//! `build` is a pure function of the request, the tier (with the host facts it needs,
//! [`TierRequest`]), the host environment (passed in), the workspace paths (passed in) and
//! the cgroup layout (passed in). It plans the tier's own section too, so every plan it
//! returns is complete.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use sandboxio_core::exec::{defaults, duration_ms};
use sandboxio_core::{ExecRequest, IsolationTier};
use serde::{Deserialize, Serialize};

use crate::cgroup::{self, CgroupLayout, CgroupPlan};
use crate::error::SandboxError;
use crate::tier::{TierPlan, TierRequest};

/// Largest plan the helper accepts on its pipe.
pub const MAX_PLAN_BYTES: usize = 4 * 1024 * 1024;

/// Variables the sandbox always sets itself (they win over explicit `env`).
pub const ENV_OUTPUT: &str = "SANDBOX_OUTPUT";
pub const ENV_INPUT: &str = "SANDBOX_INPUT";

/// Resource limits applied with setrlimit(2) in the payload before exec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RlimitPlan {
    pub cpu_seconds: Option<u64>,
    /// RLIMIT_DATA: only when no memory cgroup limits memory. It bounds each process's
    /// private writable memory (heap, anonymous mappings) and not its address space, so
    /// runtimes that reserve large ranges up front (V8, Chromium, the JVM) still start;
    /// RLIMIT_AS would kill them at start whatever the limit.
    pub data: Option<u64>,
    pub file_size: Option<u64>,
    pub open_files: Option<u64>,
    /// RLIMIT_NPROC: only in the namespace tier without a pids cgroup (a non-root user
    /// without a delegated cgroup). The sandbox has its own user namespace, where the count
    /// is of its own processes only (per user namespace since Linux 5.14): the program's
    /// `pids` plus its init.
    #[serde(default)]
    pub nproc: Option<u64>,
    /// RLIMIT_CORE, always 0: no core dumps of sandboxed programs.
    pub core: u64,
}

/// Where the payload's files are on the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspacePaths {
    /// The fresh temporary workspace (also `HOME` and the working directory).
    pub workspace: PathBuf,
    /// `TMPDIR` inside the workspace.
    pub tmp: PathBuf,
    pub input_dir: PathBuf,
    pub output_dir: PathBuf,
}

/// Everything the helper needs to run one program. Sent over a pipe, never in argv.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxPlan {
    pub sandbox_id: String,
    /// The tier and its own section (the namespace tier's mounts and filters, the landlock
    /// tier's rules and uid).
    pub tier: TierPlan,
    pub argv: Vec<String>,
    /// The whole environment of the payload (nothing else is inherited).
    pub env: BTreeMap<String, String>,
    pub cwd: PathBuf,
    /// Stdin, stdout and stderr are a pseudo-terminal: the payload makes it its
    /// controlling terminal (own session), so Ctrl-C typed into it is SIGINT.
    #[serde(default)]
    pub tty: bool,
    pub paths: WorkspacePaths,
    pub rlimits: RlimitPlan,
    #[serde(with = "duration_ms")]
    pub timeout: Duration,
    /// Set PR_SET_NO_NEW_PRIVS before exec.
    pub no_new_privs: bool,
    pub cgroup: Option<CgroupPlan>,
    /// Cgroup directories the helper already sits in (a pooled helper joined them while
    /// waiting): the payload inherits them at fork and does not attach to them.
    #[serde(default)]
    pub cgroup_joined: Vec<PathBuf>,
}

/// Environment values may be secrets: `Debug` shows names only.
impl std::fmt::Debug for SandboxPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxPlan")
            .field("sandbox_id", &self.sandbox_id)
            .field("tier", &self.tier)
            .field("argv_len", &self.argv.len())
            .field("env_keys", &self.env.keys().collect::<Vec<_>>())
            .field("cwd", &self.cwd)
            .field("paths", &self.paths)
            .field("rlimits", &self.rlimits)
            .field("timeout", &self.timeout)
            .field("no_new_privs", &self.no_new_privs)
            .field("cgroup", &self.cgroup)
            .field("cgroup_joined", &self.cgroup_joined)
            .finish()
    }
}

/// A fresh random sandbox id: 16 lowercase hex characters.
pub fn new_sandbox_id() -> String {
    hex::encode(rand::random::<[u8; 8]>())
}

/// Check a workspace file name: relative, no `..`, no NUL, not empty.
pub fn validate_file_name(name: &str) -> Result<PathBuf, SandboxError> {
    let bad = |why| SandboxError::InvalidFileName {
        name: name.to_string(),
        why,
    };
    if name.is_empty() {
        return Err(bad("empty name"));
    }
    if name.contains('\0') {
        return Err(bad("contains a NUL byte"));
    }
    let p = PathBuf::from(name);
    if p.is_absolute() {
        return Err(bad("must be relative to the workspace"));
    }
    for c in p.components() {
        match c {
            std::path::Component::Normal(_) => {}
            std::path::Component::CurDir => {}
            _ => return Err(bad("must not contain `..` or a root")),
        }
    }
    Ok(p)
}

fn validate_env_name(name: &str) -> Result<(), SandboxError> {
    let bad = |why| SandboxError::InvalidEnv {
        name: name.to_string(),
        why,
    };
    if name.is_empty() {
        return Err(bad("empty name"));
    }
    if name.contains('=') {
        return Err(bad("name contains `=`"));
    }
    if name.contains('\0') {
        return Err(bad("name contains a NUL byte"));
    }
    Ok(())
}

/// The payload's environment: host variables named in the allowlist (when the host has
/// them), then explicit `env`, then the sandbox's own variables. PATH defaults to
/// [`defaults::PATH`].
pub fn build_env<'a, I>(
    req: &ExecRequest,
    host_env: I,
    paths: &WorkspacePaths,
) -> Result<BTreeMap<String, String>, SandboxError>
where
    I: IntoIterator<Item = (&'a str, &'a str)>,
{
    let host: BTreeMap<&str, &str> = host_env.into_iter().collect();
    let mut env = BTreeMap::new();
    for name in &req.env_allowlist {
        if let Some(v) = host.get(name.as_str()) {
            env.insert(name.clone(), (*v).to_string());
        }
    }
    for (k, v) in &req.env {
        validate_env_name(k)?;
        if v.contains('\0') {
            return Err(SandboxError::InvalidEnv {
                name: k.clone(),
                why: "value contains a NUL byte",
            });
        }
        env.insert(k.clone(), v.clone());
    }
    env.entry("PATH".to_string())
        .or_insert_with(|| defaults::PATH.to_string());
    let s = |p: &PathBuf| p.to_string_lossy().into_owned();
    env.insert(ENV_OUTPUT.into(), s(&paths.output_dir));
    env.insert(ENV_INPUT.into(), s(&paths.input_dir));
    env.insert("HOME".into(), s(&paths.workspace));
    env.insert("TMPDIR".into(), s(&paths.tmp));
    Ok(env)
}

/// For the tiers without a mount namespace (landlock, process): the program sees the
/// host's paths, so a mount must keep its host path (`HOST:HOST`), and the working
/// directory is translated to the host (`/workspace/x` is `<workspace>/x`, `/tmp/x` is
/// `<workspace>/tmp/x`, a mount's path is itself). Pure.
pub fn host_view_cwd(
    req: &ExecRequest,
    tier: IsolationTier,
    paths: &WorkspacePaths,
) -> Result<PathBuf, SandboxError> {
    sandboxio_core::mount::check_request(&req.mounts, req.workdir.as_deref()).map_err(|e| {
        SandboxError::InvalidMount {
            sandbox: req.workdir.clone().unwrap_or_default(),
            why: e.to_string(),
        }
    })?;
    for m in &req.mounts {
        if m.host != m.sandbox {
            return Err(SandboxError::InvalidMount {
                sandbox: m.sandbox.clone(),
                why: format!(
                    "the {tier} tier has no mount namespace, so a mount keeps its host path \
                     (`{}:{}`)",
                    m.host.display(),
                    m.host.display()
                ),
            });
        }
    }
    let Some(w) = &req.workdir else {
        return Ok(paths.workspace.clone());
    };
    let places = [
        ("/workspace", &paths.workspace),
        ("/tmp", &paths.tmp),
        ("/output", &paths.output_dir),
        ("/input", &paths.input_dir),
    ];
    for (inside, host) in places {
        if let Ok(rest) = w.strip_prefix(inside) {
            return Ok(host.join(rest));
        }
    }
    if req.mounts.iter().any(|m| w.starts_with(&m.sandbox)) {
        return Ok(w.clone());
    }
    Err(SandboxError::InvalidWorkdir {
        path: w.clone(),
        why: "it must be inside `/workspace`, `/tmp`, `/output`, `/input` or a mount",
    })
}

/// Build the plan (pure). `cgroup` is the cgroup plan the caller chose (`None`: no cgroup).
pub fn build<'a, I>(
    sandbox_id: &str,
    req: &ExecRequest,
    tier: TierRequest,
    host_env: I,
    paths: WorkspacePaths,
    cgroup: Option<CgroupPlan>,
) -> Result<SandboxPlan, SandboxError>
where
    I: IntoIterator<Item = (&'a str, &'a str)>,
{
    if req.argv.is_empty() || req.argv[0].is_empty() {
        return Err(SandboxError::EmptyArgv);
    }
    if let Some(index) = req.argv.iter().position(|a| a.contains('\0')) {
        return Err(SandboxError::InvalidArgument { index });
    }
    let mut env = build_env(req, host_env, &paths)?;
    let own_user_ns = matches!(tier, TierRequest::Namespace);
    let cwd = match tier {
        // The namespace tier plans its own view (`ns::plan`), with the mounts in it.
        TierRequest::Namespace => paths.workspace.clone(),
        _ => host_view_cwd(req, tier.tier(), &paths)?,
    };
    let tier = match tier {
        TierRequest::Process => TierPlan::Process,
        TierRequest::Namespace => {
            let host = crate::ns::NsHostPaths {
                workspace: paths.workspace.clone(),
                output: paths.output_dir.clone(),
            };
            TierPlan::Namespace(Box::new(crate::ns::plan(req, &host, &env)?))
        }
        TierRequest::Landlock { euid, random } => {
            let lp = crate::fallback::plan(req, &paths, euid, random)?;
            // The payload writes into the staged output, copied out once the tree is dead.
            env.insert(
                ENV_OUTPUT.to_string(),
                lp.staged_output.to_string_lossy().into_owned(),
            );
            TierPlan::Landlock(Box::new(lp))
        }
    };
    let l = &req.limits;
    let nz = |v: u64| (v > 0).then_some(v);
    let memory_in_cgroup = cgroup.as_ref().is_some_and(CgroupPlan::limits_memory);
    let pids_in_cgroup = cgroup.as_ref().is_some_and(CgroupPlan::limits_pids);
    let rlimits = RlimitPlan {
        cpu_seconds: nz(l.cpu_seconds),
        data: if memory_in_cgroup {
            None
        } else {
            nz(l.memory.bytes())
        },
        file_size: nz(l.file_size.bytes()),
        open_files: nz(l.open_files),
        nproc: if own_user_ns && !pids_in_cgroup {
            nz(u64::from(l.pids)).map(|p| p.saturating_add(1))
        } else {
            None
        },
        core: 0,
    };
    Ok(SandboxPlan {
        sandbox_id: sandbox_id.to_string(),
        tier,
        argv: req.argv.clone(),
        env,
        cwd,
        tty: req.tty,
        paths,
        rlimits,
        timeout: l.timeout,
        no_new_privs: true,
        cgroup,
        cgroup_joined: Vec::new(),
    })
}

/// Choose the cgroup plan for a run of `tier` on `layout` (pure wrapper around
/// [`cgroup::plan`]). In the namespace tier the sandbox's own init (pid 1 inside) sits in
/// the cgroups beside the payload, so `pids.max` is raised by one for it: `pids = N` is
/// always N processes of the caller's program.
pub fn cgroup_plan(
    layout: &CgroupLayout,
    sandbox_id: &str,
    req: &ExecRequest,
    tier: IsolationTier,
    use_cgroups: bool,
) -> Option<CgroupPlan> {
    if !use_cgroups {
        return None;
    }
    let mut p = cgroup::plan(layout, sandbox_id, &req.limits)?;
    if tier == IsolationTier::Namespace {
        cgroup::allow_one_more(&mut p);
    }
    Some(p)
}

/// Limits as the enforcement record lists them, for the rlimit part of a plan (pure).
pub fn rlimit_enforcement(plan: &SandboxPlan) -> Vec<String> {
    let r = &plan.rlimits;
    let mut out = Vec::new();
    if let Some(v) = r.cpu_seconds {
        out.push(format!("cpu_seconds={v} (rlimit)"));
    }
    if let Some(v) = r.data {
        out.push(format!(
            "memory={} (rlimit data, per process)",
            sandboxio_core::ByteSize(v)
        ));
    }
    if let Some(v) = r.file_size {
        out.push(format!(
            "file_size={} (rlimit)",
            sandboxio_core::ByteSize(v)
        ));
    }
    if let Some(v) = r.open_files {
        out.push(format!("open_files={v} (rlimit)"));
    }
    if let Some(v) = r.nproc {
        out.push(format!(
            "pids={} (RLIMIT_NPROC in the sandbox's own user namespace: its processes only, \
             no cgroup)",
            v.saturating_sub(1)
        ));
    }
    out.push("core=0 (rlimit)".into());
    out.push(format!(
        "timeout={} (helper kills the whole tree)",
        sandboxio_core::HumanDuration(plan.timeout)
    ));
    out
}

/// A C string from plan bytes (paths, argv, env); a NUL byte is a decode error.
pub(crate) fn cstring(b: &[u8]) -> Result<std::ffi::CString, SandboxError> {
    std::ffi::CString::new(b).map_err(|_| SandboxError::PlanDecode {
        why: "a string in the plan contains a NUL byte".into(),
    })
}

impl SandboxPlan {
    /// The payload's argv as C strings (prepared before fork).
    pub(crate) fn argv_cstrings(&self) -> Result<Vec<std::ffi::CString>, SandboxError> {
        self.argv.iter().map(|a| cstring(a.as_bytes())).collect()
    }

    /// The payload's environment as `K=V` C strings (prepared before fork).
    pub(crate) fn env_cstrings(&self) -> Result<Vec<std::ffi::CString>, SandboxError> {
        self.env
            .iter()
            .map(|(k, v)| cstring(format!("{k}={v}").as_bytes()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::parse_layout;
    use sandboxio_core::ByteSize;

    fn paths() -> WorkspacePaths {
        WorkspacePaths {
            workspace: "/tmp/ws".into(),
            tmp: "/tmp/ws/tmp".into(),
            input_dir: "/tmp/ws/input".into(),
            output_dir: "/tmp/ws/output".into(),
        }
    }

    const HOST: &[(&str, &str)] = &[
        ("PATH", "/host/bin"),
        ("LANG", "C.UTF-8"),
        ("AWS_SECRET_ACCESS_KEY", "hunter2"),
        ("HOME", "/root"),
    ];

    fn build_process(req: &ExecRequest) -> SandboxPlan {
        build(
            "id",
            req,
            TierRequest::Process,
            HOST.iter().copied(),
            paths(),
            None,
        )
        .unwrap()
    }

    #[test]
    fn env_is_cleared_except_allowlist_explicit_and_sandbox_vars() {
        let mut req = ExecRequest::new(["env"]);
        req.env.insert("FOO".into(), "bar".into());
        let p = build_process(&req);
        assert_eq!(p.env.get("PATH").map(String::as_str), Some("/host/bin"));
        assert_eq!(p.env.get("LANG").map(String::as_str), Some("C.UTF-8"));
        assert_eq!(p.env.get("FOO").map(String::as_str), Some("bar"));
        assert!(!p.env.contains_key("AWS_SECRET_ACCESS_KEY"));
        assert_eq!(p.env.get("HOME").map(String::as_str), Some("/tmp/ws"));
        assert_eq!(p.env.get("TMPDIR").map(String::as_str), Some("/tmp/ws/tmp"));
        assert_eq!(
            p.env.get(ENV_OUTPUT).map(String::as_str),
            Some("/tmp/ws/output")
        );
        assert_eq!(
            p.env.get(ENV_INPUT).map(String::as_str),
            Some("/tmp/ws/input")
        );
        assert!(!p.env.contains_key("TZ"), "allowlisted but absent on host");
        assert_eq!(p.cwd, PathBuf::from("/tmp/ws"));
    }

    #[test]
    fn path_defaults_when_not_passed() {
        let mut req = ExecRequest::new(["true"]);
        req.env_allowlist.clear();
        let p = build_process(&req);
        assert_eq!(p.env.get("PATH").map(String::as_str), Some(defaults::PATH));
        assert_eq!(p.env.len(), 5);
    }

    #[test]
    fn debug_never_shows_env_values() {
        let mut req = ExecRequest::new(["true"]);
        req.env.insert("TOKEN".into(), "s3cr3t-value".into());
        let p = build_process(&req);
        let dbg = format!("{p:?}");
        assert!(dbg.contains("TOKEN"));
        assert!(!dbg.contains("s3cr3t-value"));
    }

    #[test]
    fn rejects_bad_requests() {
        let req = ExecRequest::new(Vec::<String>::new());
        assert!(matches!(
            build("id", &req, TierRequest::Process, [], paths(), None),
            Err(SandboxError::EmptyArgv)
        ));
        let req = ExecRequest::new(["a\0b"]);
        assert!(matches!(
            build("id", &req, TierRequest::Process, [], paths(), None),
            Err(SandboxError::InvalidArgument { index: 0 })
        ));
        let mut req = ExecRequest::new(["true"]);
        req.env.insert("A=B".into(), "x".into());
        assert!(matches!(
            build("id", &req, TierRequest::Process, [], paths(), None),
            Err(SandboxError::InvalidEnv { .. })
        ));
    }

    #[test]
    fn file_names_stay_inside_the_workspace() {
        assert!(validate_file_name("a/b.py").is_ok());
        assert!(validate_file_name("./x").is_ok());
        for bad in ["", "/etc/passwd", "../x", "a/../../x", "a\0b"] {
            assert!(validate_file_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn data_limit_only_without_memory_cgroup() {
        let mut req = ExecRequest::new(["true"]);
        req.limits = sandboxio_core::Limits::default();
        req.limits.memory = ByteSize::mib(64);
        let p = build("id", &req, TierRequest::Process, [], paths(), None).unwrap();
        assert_eq!(p.rlimits.data, Some(64 << 20));
        assert_eq!(p.rlimits.core, 0);
        assert_eq!(p.rlimits.open_files, Some(req.limits.open_files));

        let mi = "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
        let layout = parse_layout(mi, "4:memory:/\n");
        let cg = cgroup_plan(&layout, "id", &req, IsolationTier::Process, true);
        assert!(cg.is_some());
        let p = build("id", &req, TierRequest::Process, [], paths(), cg).unwrap();
        assert_eq!(p.rlimits.data, None);
        assert!(cgroup_plan(&layout, "id", &req, IsolationTier::Process, false).is_none());
    }

    #[test]
    fn the_namespace_init_is_not_counted_against_the_callers_pids() {
        let mut req = ExecRequest::new(["true"]);
        req.limits = sandboxio_core::Limits::default();
        req.limits.pids = 1;
        let mi = "39 31 0:36 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n";
        let layout = parse_layout(mi, "8:pids:/\n");
        let pids_max = |tier| {
            let cg = cgroup_plan(&layout, "id", &req, tier, true).unwrap();
            let w = cg
                .limits
                .iter()
                .find(|w| w.path.ends_with("pids.max"))
                .unwrap();
            (w.value.clone(), w.enforces.clone())
        };
        let (ns, enforced) = pids_max(IsolationTier::Namespace);
        assert_eq!(ns, "2", "the init plus the caller's one process");
        assert!(enforced.unwrap().starts_with("pids=1 "));
        assert_eq!(pids_max(IsolationTier::Process).0, "1");
    }

    #[test]
    fn tiers_without_a_mount_namespace_need_identity_mounts_and_map_the_workdir() {
        let paths = WorkspacePaths {
            workspace: "/tmp/ws".into(),
            tmp: "/tmp/ws/tmp".into(),
            input_dir: "/tmp/ws/input".into(),
            output_dir: "/tmp/ws/output".into(),
        };
        let m = |s: &str| sandboxio_core::Mount::parse(s, std::path::Path::new("/")).unwrap();
        let mut req = ExecRequest::new(["true"]);
        req.mounts = vec![m("/srv/proj:/srv/proj:rw")];
        for (w, want) in [
            (None, "/tmp/ws"),
            (Some("/workspace/sub"), "/tmp/ws/sub"),
            (Some("/tmp/x"), "/tmp/ws/tmp/x"),
            (Some("/srv/proj/src"), "/srv/proj/src"),
        ] {
            req.workdir = w.map(PathBuf::from);
            let got = host_view_cwd(&req, IsolationTier::Landlock, &paths).unwrap();
            assert_eq!(got, PathBuf::from(want), "{w:?}");
        }
        req.workdir = None;
        req.mounts = vec![m("/srv/proj:/project")];
        let e = host_view_cwd(&req, IsolationTier::Process, &paths).unwrap_err();
        assert!(matches!(e, SandboxError::InvalidMount { .. }), "{e}");
    }

    #[test]
    fn plan_round_trips_through_json() {
        let req = ExecRequest::new(["echo", "hi"]);
        let p = build(
            "abc",
            &req,
            TierRequest::Process,
            HOST.iter().copied(),
            paths(),
            None,
        )
        .unwrap();
        let json = serde_json::to_vec(&p).unwrap();
        let back: SandboxPlan = serde_json::from_slice(&json).unwrap();
        assert_eq!(p, back);
        assert!(json.len() < MAX_PLAN_BYTES);
    }

    #[test]
    fn sandbox_ids_are_random_hex() {
        let a = new_sandbox_id();
        let b = new_sandbox_id();
        assert_eq!(a.len(), 16);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
