//! Per-sandbox cgroups: detect the host layout, plan (pure), create, kill, meter, remove.
//!
//! Layouts handled:
//! - hybrid / cgroup v1 (this project's CI host): one hierarchy per controller under
//!   `/sys/fs/cgroup/<controller>`, plus a cgroup2 mount without controllers at
//!   `/sys/fs/cgroup/unified`. Limits go into the v1 controllers; a cgroup2 leaf is created
//!   only for `cgroup.kill`, which kills the whole tree atomically.
//! - pure cgroup v2: one hierarchy at `/sys/fs/cgroup` with `memory.max`, `pids.max`,
//!   `cpu.max`, `memory.peak`, `memory.events`, `cgroup.kill`.
//!
//! v1 sandboxes nest under the supervisor's own cgroup in each hierarchy
//! (`<mount>/<own path>/sandboxio/<id>`), so a sandbox never escapes a limit the host put on
//! the supervisor. v2 sandboxes live at `<mount>/sandboxio/<id>` (the root cgroup is the only
//! one that may enable controllers for children while holding processes).

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use sandboxio_core::Limits;
use serde::{Deserialize, Serialize};

use crate::error::SandboxError;

/// The directory name under which every sandbox cgroup lives.
pub const CGROUP_DIR: &str = "sandboxio";
/// A sandbox cgroup with no processes that is at least this old is stale.
pub const STALE_AGE: Duration = Duration::from_secs(30);
/// CFS period used for CPU quotas (100 ms, the kernel default).
pub const CPU_PERIOD_US: u64 = 100_000;

/// Where this host's cgroup hierarchies are, seen from the supervisor.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupLayout {
    /// v1 controller name -> the supervisor's own cgroup directory in that hierarchy.
    pub v1: BTreeMap<String, PathBuf>,
    /// The cgroup2 mount point, if any.
    pub unified: Option<PathBuf>,
    /// Controllers the cgroup2 root offers (`cgroup.controllers`); empty on hybrid hosts.
    /// With `delegated`: the controllers that directory offers.
    pub unified_controllers: Vec<String>,
    /// The supervisor's own cgroup2 directory (from `/proc/self/cgroup`, line `0::`).
    #[serde(default)]
    pub unified_own: Option<PathBuf>,
    /// A cgroup2 directory this (non-root) user may create cgroups under: the subtree
    /// systemd delegated (`Delegate=yes`), found above the supervisor's own cgroup, or the
    /// one named by `[sandbox] cgroup_root`. Sandbox cgroups then live at
    /// `<delegated>/sandboxio/<id>`, and every other hierarchy is left alone.
    #[serde(default)]
    pub delegated: Option<PathBuf>,
}

/// Which cgroup version carries the limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CgroupVersion {
    V1,
    V2,
}

impl CgroupVersion {
    pub fn as_str(&self) -> &'static str {
        match self {
            CgroupVersion::V1 => "v1",
            CgroupVersion::V2 => "v2",
        }
    }
}

/// One control-file write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupWrite {
    pub path: PathBuf,
    pub value: String,
    /// What this enforces, for `Enforcement.limits` (e.g. `memory=512MiB (cgroup v1)`).
    pub enforces: Option<String>,
    /// When the write fails: `None` = the run fails; `Some(gap)` = record the gap and go on.
    pub gap_if_failed: Option<String>,
}

/// How the whole tree is killed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "method", content = "path")]
pub enum KillMethod {
    /// Write `1` to this `cgroup.kill`.
    CgroupKill(PathBuf),
    /// Freeze this v1 freezer cgroup, SIGKILL every pid in it, thaw.
    Freezer(PathBuf),
    /// No cgroup: the helper walks /proc for its descendants.
    ProcWalk,
}

/// How to read CPU time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "format", content = "path")]
pub enum CpuMeter {
    /// v1 `cpuacct.usage`: nanoseconds.
    CpuacctUsage(PathBuf),
    /// v2 `cpu.stat`: line `usage_usec N`.
    CpuStat(PathBuf),
}

/// The cgroup side of a sandbox plan. Pure data, built by [`plan`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CgroupPlan {
    pub version: CgroupVersion,
    /// Parents created if missing (never removed: other runs share them).
    pub parents: Vec<PathBuf>,
    /// The sandbox's own cgroup directories: created, joined by the payload, removed.
    pub dirs: Vec<PathBuf>,
    /// Best-effort preparation (enabling controllers for children on v2).
    pub prepare: Vec<CgroupWrite>,
    /// Limits, in the order they must be written.
    pub limits: Vec<CgroupWrite>,
    pub kill: KillMethod,
    pub cpu: Option<CpuMeter>,
    /// v1 `memory.max_usage_in_bytes` or v2 `memory.peak`.
    pub memory_peak: Option<PathBuf>,
    /// v1 `memory.oom_control` or v2 `memory.events` (both have an `oom_kill N` line).
    pub oom_events: Option<PathBuf>,
    /// v1 `memory.failcnt` (fallback OOM evidence on old kernels).
    pub memory_failcnt: Option<PathBuf>,
    /// What the plan enforces apart from the limit writes (kill method, meters).
    pub enforced: Vec<String>,
    /// What the plan cannot enforce, in words.
    pub gaps: Vec<String>,
}

impl CgroupPlan {
    /// Whether a memory limit is part of this plan (then no RLIMIT_DATA is needed).
    /// Whether a pids limit is part of this plan.
    pub fn limits_pids(&self) -> bool {
        self.limits
            .iter()
            .any(|w| w.path.file_name().and_then(|n| n.to_str()) == Some("pids.max"))
    }

    pub fn limits_memory(&self) -> bool {
        self.limits.iter().any(|w| {
            let name = w.path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name == "memory.limit_in_bytes" || name == "memory.max"
        })
    }
}

// ---------------------------------------------------------------- detection (parsing pure)

const V1_CONTROLLERS: &[&str] = &["memory", "pids", "cpu", "cpuacct", "freezer"];

/// Parse `/proc/self/mountinfo` and `/proc/self/cgroup` into a layout (pure).
pub fn parse_layout(mountinfo: &str, proc_cgroup: &str) -> CgroupLayout {
    // own paths: controller -> path; "" key for the unified hierarchy
    let mut own: BTreeMap<String, String> = BTreeMap::new();
    for line in proc_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, ctrls, path) = match (parts.next(), parts.next(), parts.next()) {
            (Some(a), Some(b), Some(c)) => (a, b, c),
            _ => continue,
        };
        if ctrls.is_empty() {
            own.insert(String::new(), path.to_string());
        } else {
            for c in ctrls.split(',') {
                own.insert(c.to_string(), path.to_string());
            }
        }
    }
    let mut layout = CgroupLayout::default();
    for line in mountinfo.lines() {
        let Some((pre, post)) = line.split_once(" - ") else {
            continue;
        };
        let pre: Vec<&str> = pre.split(' ').collect();
        let post: Vec<&str> = post.split(' ').collect();
        if pre.len() < 5 || post.len() < 3 {
            continue;
        }
        let root = unescape_mount(pre[3]);
        let mount = PathBuf::from(unescape_mount(pre[4]));
        match post[0] {
            "cgroup2" if layout.unified.is_none() => {
                if let Some(own_path) = own.get("") {
                    let rel = own_path
                        .strip_prefix(root.as_str())
                        .unwrap_or(own_path)
                        .trim_start_matches('/');
                    layout.unified_own = Some(if rel.is_empty() {
                        mount.clone()
                    } else {
                        mount.join(rel)
                    });
                }
                layout.unified = Some(mount)
            }
            "cgroup" => {
                for opt in post[2].split(',') {
                    if !V1_CONTROLLERS.contains(&opt) || layout.v1.contains_key(opt) {
                        continue;
                    }
                    let own_path = own.get(opt).map(String::as_str).unwrap_or("/");
                    let rel = own_path
                        .strip_prefix(root.as_str())
                        .unwrap_or(own_path)
                        .trim_start_matches('/');
                    let dir = if rel.is_empty() {
                        mount.clone()
                    } else {
                        mount.join(rel)
                    };
                    layout.v1.insert(opt.to_string(), dir);
                }
            }
            _ => {}
        }
    }
    layout
}

fn unescape_mount(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

/// Read this host's layout (not cached).
pub fn detect() -> CgroupLayout {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let own = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mut layout = parse_layout(&mountinfo, &own);
    if let Some(u) = &layout.unified {
        layout.unified_controllers = read_controllers(u);
    }
    // Not root of the host (so the v1 hierarchies and the cgroup2 root are not ours): look
    // for a delegated cgroup2 subtree above our own cgroup.
    if !crate::ids::is_host_root() {
        if let (Some(m), Some(own)) = (&layout.unified, &layout.unified_own) {
            if let Some(d) = find_delegated(m, own, &may_write) {
                layout.unified_controllers = read_controllers(&d);
                layout.delegated = Some(d);
            }
        }
    }
    layout
}

/// Where a non-root user may create cgroups: the topmost directory, from the supervisor's
/// own cgroup (`own`) up to (not including) the cgroup2 mount, that it may write (as
/// `writable` says: the directory, its `cgroup.procs` and `cgroup.subtree_control`), all
/// directories in between writable too. That is what systemd's `Delegate=yes` hands to a
/// user (`user@<uid>.service`, a delegated scope). Pure: I/O only through `writable`.
pub fn find_delegated(
    mount: &Path,
    own: &Path,
    writable: &dyn Fn(&Path) -> bool,
) -> Option<PathBuf> {
    if own == mount || !own.starts_with(mount) || !writable(own) {
        return None;
    }
    let mut top = own.to_path_buf();
    while let Some(parent) = top.parent() {
        if parent == mount || !parent.starts_with(mount) || !writable(parent) {
            break;
        }
        top = parent.to_path_buf();
    }
    Some(top)
}

fn may_write(p: &Path) -> bool {
    ["", "cgroup.procs", "cgroup.subtree_control"]
        .iter()
        .all(|f| {
            crate::probe::is_writable(&if f.is_empty() {
                p.to_path_buf()
            } else {
                p.join(f)
            })
        })
}

fn read_controllers(dir: &Path) -> Vec<String> {
    fs::read_to_string(dir.join("cgroup.controllers"))
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// `layout` with sandbox cgroups under `root` (the `[sandbox] cgroup_root` key): a cgroup2
/// directory the user may write. Its controllers are read from it.
pub fn with_root(layout: &CgroupLayout, root: &Path) -> CgroupLayout {
    let mut l = layout.clone();
    l.unified_controllers = read_controllers(root);
    l.delegated = Some(root.to_path_buf());
    l
}

/// The gap recorded when a run goes on without a cgroup; for a user who is not root of the
/// host it says how to get one.
pub fn unavailable_gap(e: &SandboxError) -> String {
    if crate::ids::is_host_root() {
        format!("cgroup: {e}; running without a cgroup")
    } else {
        format!(
            "cgroup: {e}; running without a cgroup: this user has no delegated cgroup \
             (run under `systemd-run --user --scope -p Delegate=yes`, or set \
             `[sandbox] cgroup_root` to a cgroup2 directory this user may write); limits \
             fall back to rlimits"
        )
    }
}

/// The layout, detected once per process.
pub fn host_layout() -> &'static CgroupLayout {
    static LAYOUT: OnceLock<CgroupLayout> = OnceLock::new();
    LAYOUT.get_or_init(detect)
}

/// The `sandboxio` directories in which this layout creates sandbox cgroups.
pub fn base_dirs(layout: &CgroupLayout) -> Vec<PathBuf> {
    if let Some(d) = &layout.delegated {
        return vec![d.join(CGROUP_DIR)];
    }
    let mut out: Vec<PathBuf> = Vec::new();
    let v2_limits = !layout.v1.contains_key("memory")
        && layout.unified_controllers.iter().any(|c| c == "memory");
    if !v2_limits {
        for dir in layout.v1.values() {
            let b = dir.join(CGROUP_DIR);
            if !out.contains(&b) {
                out.push(b);
            }
        }
    }
    if let Some(u) = &layout.unified {
        out.push(u.join(CGROUP_DIR));
    }
    out
}

// ---------------------------------------------------------------------- planning (pure)

/// Plan the cgroup of sandbox `id` with `limits` on `layout`. `None`: no cgroup at all.
pub fn plan(layout: &CgroupLayout, id: &str, limits: &Limits) -> Option<CgroupPlan> {
    if let Some(d) = &layout.delegated {
        let mut p = plan_v2(d, &layout.unified_controllers, id, limits);
        p.enforced
            .push(format!("cgroup: delegated subtree {}", d.display()));
        return Some(p);
    }
    let has_v1_memory = layout.v1.contains_key("memory");
    let v2_controllers = &layout.unified_controllers;
    if !has_v1_memory && layout.unified.is_some() && v2_controllers.iter().any(|c| c == "memory") {
        return layout
            .unified
            .as_ref()
            .map(|m| plan_v2(m, v2_controllers, id, limits));
    }
    if !layout.v1.is_empty() {
        return Some(plan_v1(layout, id, limits));
    }
    // cgroup2 without controllers and no v1: a leaf for cgroup.kill only.
    let m = layout.unified.as_ref()?;
    let mut p = plan_v2(m, &[], id, limits);
    p.gaps.push("cgroup2 offers no controllers here: memory, pids and CPU quota are not limited by a cgroup".into());
    Some(p)
}

fn write(
    path: PathBuf,
    value: String,
    enforces: Option<String>,
    gap: Option<String>,
) -> CgroupWrite {
    CgroupWrite {
        path,
        value,
        enforces,
        gap_if_failed: gap,
    }
}

fn plan_v1(layout: &CgroupLayout, id: &str, limits: &Limits) -> CgroupPlan {
    let mut p = CgroupPlan {
        version: CgroupVersion::V1,
        parents: Vec::new(),
        dirs: Vec::new(),
        prepare: Vec::new(),
        limits: Vec::new(),
        kill: KillMethod::ProcWalk,
        cpu: None,
        memory_peak: None,
        oom_events: None,
        memory_failcnt: None,
        enforced: Vec::new(),
        gaps: Vec::new(),
    };
    let leaf = |ctrl: &str, p: &mut CgroupPlan| -> Option<PathBuf> {
        let base = layout.v1.get(ctrl)?.join(CGROUP_DIR);
        let dir = base.join(id);
        if !p.parents.contains(&base) {
            p.parents.push(base);
        }
        if !p.dirs.contains(&dir) {
            p.dirs.push(dir.clone());
        }
        Some(dir)
    };
    let mem = limits.memory.bytes();
    if let Some(d) = leaf("memory", &mut p) {
        if mem > 0 {
            p.limits.push(write(
                d.join("memory.limit_in_bytes"),
                mem.to_string(),
                Some(format!(
                    "memory={} (cgroup v1 memory.limit_in_bytes)",
                    limits.memory
                )),
                None,
            ));
            p.limits.push(write(
                d.join("memory.memsw.limit_in_bytes"),
                mem.to_string(),
                Some("swap: memory+swap capped at the memory limit (cgroup v1 memsw)".into()),
                Some("swap: no swap accounting (memory.memsw), swap use is not capped".into()),
            ));
        }
        p.memory_peak = Some(d.join("memory.max_usage_in_bytes"));
        p.oom_events = Some(d.join("memory.oom_control"));
        p.memory_failcnt = Some(d.join("memory.failcnt"));
        p.enforced
            .push("meter: peak memory from memory.max_usage_in_bytes".into());
    } else if mem > 0 {
        p.gaps
            .push("memory: no v1 memory controller; falls back to RLIMIT_DATA".into());
    }
    if let Some(d) = leaf("pids", &mut p) {
        if limits.pids > 0 {
            p.limits.push(write(
                d.join("pids.max"),
                limits.pids.to_string(),
                Some(format!("pids={} (cgroup v1 pids.max)", limits.pids)),
                None,
            ));
        }
    } else if limits.pids > 0 {
        p.gaps
            .push("pids: no pids controller, the number of processes is not limited".into());
    }
    if let Some(d) = leaf("cpu", &mut p) {
        if limits.cpu_quota_millis > 0 {
            let quota = u64::from(limits.cpu_quota_millis) * CPU_PERIOD_US / 1000;
            p.limits.push(write(
                d.join("cpu.cfs_period_us"),
                CPU_PERIOD_US.to_string(),
                None,
                Some("cpu quota: could not set cpu.cfs_period_us".into()),
            ));
            p.limits.push(write(
                d.join("cpu.cfs_quota_us"),
                quota.max(1000).to_string(),
                Some(format!(
                    "cpu_quota={}/1000 core (cgroup v1 cpu.cfs_quota_us)",
                    limits.cpu_quota_millis
                )),
                Some("cpu quota: could not set cpu.cfs_quota_us, CPU is not throttled".into()),
            ));
        }
    } else if limits.cpu_quota_millis > 0 {
        p.gaps
            .push("cpu quota: no cpu controller, CPU is not throttled".into());
    }
    if let Some(d) = leaf("cpuacct", &mut p) {
        p.cpu = Some(CpuMeter::CpuacctUsage(d.join("cpuacct.usage")));
        p.enforced.push("meter: cpu time from cpuacct.usage".into());
    }
    if let Some(u) = &layout.unified {
        let base = u.join(CGROUP_DIR);
        let dir = base.join(id);
        p.parents.push(base);
        p.dirs.push(dir.clone());
        p.kill = KillMethod::CgroupKill(dir.join("cgroup.kill"));
        p.enforced
            .push("kill: whole tree via cgroup.kill (cgroup2 leaf) and /proc walk".into());
    } else if let Some(d) = leaf("freezer", &mut p) {
        p.kill = KillMethod::Freezer(d);
        p.enforced
            .push("kill: whole tree via v1 freezer + SIGKILL and /proc walk".into());
    } else {
        p.enforced
            .push("kill: whole tree via subreaper /proc walk".into());
    }
    p
}

/// `mount`: the cgroup2 directory under which `sandboxio/<id>` is made (the mount point,
/// or a delegated subtree).
fn plan_v2(mount: &Path, controllers: &[String], id: &str, limits: &Limits) -> CgroupPlan {
    let base = mount.join(CGROUP_DIR);
    let dir = base.join(id);
    let has = |c: &str| controllers.iter().any(|x| x == c);
    let mut p = CgroupPlan {
        version: CgroupVersion::V2,
        parents: vec![base.clone()],
        dirs: vec![dir.clone()],
        prepare: Vec::new(),
        limits: Vec::new(),
        kill: KillMethod::CgroupKill(dir.join("cgroup.kill")),
        cpu: Some(CpuMeter::CpuStat(dir.join("cpu.stat"))),
        memory_peak: None,
        oom_events: None,
        memory_failcnt: None,
        enforced: vec!["kill: whole tree via cgroup.kill and /proc walk".into()],
        gaps: Vec::new(),
    };
    for c in ["memory", "pids", "cpu"] {
        if has(c) {
            for parent in [mount, base.as_path()] {
                p.prepare.push(write(
                    parent.join("cgroup.subtree_control"),
                    format!("+{c}"),
                    None,
                    Some(format!(
                        "{c}: could not enable the controller for sandbox cgroups"
                    )),
                ));
            }
        }
    }
    let mem = limits.memory.bytes();
    if has("memory") {
        if mem > 0 {
            p.limits.push(write(
                dir.join("memory.max"),
                mem.to_string(),
                Some(format!("memory={} (cgroup v2 memory.max)", limits.memory)),
                None,
            ));
            p.limits.push(write(
                dir.join("memory.swap.max"),
                "0".into(),
                Some("swap: disabled (cgroup v2 memory.swap.max=0)".into()),
                Some("swap: memory.swap.max not available, swap use is not capped".into()),
            ));
        }
        p.memory_peak = Some(dir.join("memory.peak"));
        p.oom_events = Some(dir.join("memory.events"));
    } else if mem > 0 {
        p.gaps
            .push("memory: no cgroup memory controller; falls back to RLIMIT_DATA".into());
    }
    if has("pids") {
        if limits.pids > 0 {
            p.limits.push(write(
                dir.join("pids.max"),
                limits.pids.to_string(),
                Some(format!("pids={} (cgroup v2 pids.max)", limits.pids)),
                None,
            ));
        }
    } else if limits.pids > 0 {
        p.gaps
            .push("pids: no pids controller, the number of processes is not limited".into());
    }
    if has("cpu") {
        if limits.cpu_quota_millis > 0 {
            let quota = (u64::from(limits.cpu_quota_millis) * CPU_PERIOD_US / 1000).max(1000);
            p.limits.push(write(
                dir.join("cpu.max"),
                format!("{quota} {CPU_PERIOD_US}"),
                Some(format!(
                    "cpu_quota={}/1000 core (cgroup v2 cpu.max)",
                    limits.cpu_quota_millis
                )),
                Some("cpu quota: could not set cpu.max, CPU is not throttled".into()),
            ));
        }
    } else if limits.cpu_quota_millis > 0 {
        p.gaps
            .push("cpu quota: no cpu controller, CPU is not throttled".into());
    }
    p
}

// ------------------------------------------------------------------------ applying (I/O)

/// What creating the cgroup actually achieved.
#[derive(Debug, Clone, Default)]
pub struct Applied {
    pub enforced: Vec<String>,
    pub gaps: Vec<String>,
}

fn write_file(path: &Path, value: &str) -> io::Result<()> {
    fs::write(path, value.as_bytes())
}

/// Create the sandbox cgroup and write its limits. On a required failure, every directory
/// created so far is removed again.
pub fn create(plan: &CgroupPlan) -> Result<Applied, SandboxError> {
    let mut applied = create_dirs(plan)?;
    write_limits(plan, &mut applied)?;
    Ok(applied)
}

/// First half of [`create`]: parents, preparation writes and the sandbox's own directories
/// (no limits yet). A warm pool calls this ahead of time and [`write_limits`] once the
/// request's limits are known. On failure, every directory created so far is removed.
pub fn create_dirs(plan: &CgroupPlan) -> Result<Applied, SandboxError> {
    let mut applied = Applied {
        enforced: plan.enforced.clone(),
        gaps: plan.gaps.clone(),
    };
    for parent in &plan.parents {
        match fs::create_dir(parent) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(source) => {
                return Err(SandboxError::CgroupCreate {
                    path: parent.clone(),
                    source,
                })
            }
        }
    }
    for w in &plan.prepare {
        // Enabling a controller that is already enabled succeeds; failures are gaps.
        if write_file(&w.path, &w.value).is_err() {
            if let Some(g) = &w.gap_if_failed {
                if !applied.gaps.contains(g) {
                    applied.gaps.push(g.clone());
                }
            }
        }
    }
    let mut created: Vec<PathBuf> = Vec::new();
    for dir in &plan.dirs {
        match fs::create_dir(dir) {
            Ok(()) => created.push(dir.clone()),
            Err(source) => {
                remove_dirs(&created);
                return Err(SandboxError::CgroupCreate {
                    path: dir.clone(),
                    source,
                });
            }
        }
    }
    Ok(applied)
}

/// Second half of [`create`]: write the plan's limits into directories that exist (made by
/// [`create_dirs`] for a plan with the same sandbox id). On a required failure, the
/// sandbox's directories are removed again.
pub fn write_limits(plan: &CgroupPlan, applied: &mut Applied) -> Result<(), SandboxError> {
    for w in &plan.limits {
        match write_file(&w.path, &w.value) {
            Ok(()) => {
                if let Some(e) = &w.enforces {
                    applied.enforced.push(e.clone());
                }
            }
            Err(source) => match &w.gap_if_failed {
                Some(g) => applied.gaps.push(g.clone()),
                None => {
                    remove_dirs(&plan.dirs);
                    return Err(SandboxError::CgroupWrite {
                        path: w.path.clone(),
                        value: w.value.clone(),
                        source,
                    });
                }
            },
        }
    }
    Ok(())
}

/// The sandbox directory whose kill file kills the tree (`cgroup.kill`'s directory or the
/// freezer cgroup). The helper must never be in it: it would kill or freeze itself.
pub fn kill_dir(plan: &CgroupPlan) -> Option<&Path> {
    match &plan.kill {
        KillMethod::CgroupKill(p) => p.parent(),
        KillMethod::Freezer(d) => Some(d.as_path()),
        KillMethod::ProcWalk => None,
    }
}

/// The directories a waiting (pooled) helper may join ahead of its payload, so that the
/// payload inherits them at fork instead of migrating into them at exec: every sandbox
/// directory except the kill directory (see [`kill_dir`]).
pub fn prejoin_dirs(plan: &CgroupPlan) -> Vec<PathBuf> {
    let kill = kill_dir(plan);
    plan.dirs
        .iter()
        .filter(|d| Some(d.as_path()) != kill)
        .cloned()
        .collect()
}

/// The cgroup2 directory a payload can be cloned straight into (`clone3` with
/// `CLONE_INTO_CGROUP`, no migration): the `cgroup.kill` directory, a cgroup2 leaf.
pub fn clone_into_dir(plan: &CgroupPlan) -> Option<&Path> {
    match &plan.kill {
        KillMethod::CgroupKill(p) => p.parent(),
        _ => None,
    }
}

/// Move process `pid` into `dirs` (writes to `cgroup.procs`).
pub fn join(dirs: &[PathBuf], pid: i32) -> Result<(), SandboxError> {
    for dir in dirs {
        let path = dir.join("cgroup.procs");
        write_file(&path, &pid.to_string()).map_err(|source| SandboxError::CgroupWrite {
            path,
            value: pid.to_string(),
            source,
        })?;
    }
    Ok(())
}

/// The file through which a single-threaded process moves *itself* into `dir` by writing
/// "0": `tasks` on a v1 hierarchy, `cgroup.procs` on cgroup2 (which has no `tasks`).
///
/// Why not `cgroup.procs` everywhere: a write to `cgroup.procs`, or any write that names a
/// pid, takes the kernel's threadgroup lock for writing, and the first such writer after a
/// quiet spell waits out an RCU grace period (5-12 ms on the benchmark machine: the largest
/// item of a cold run with limits). A thread that moves itself through a v1 `tasks` file
/// skips that lock (the kernel needs no thread-group stability for the calling thread and
/// excludes the other writers by its cgroup mutex): 31-35 us there. It moves the calling
/// thread only, so it moves the whole process only when the process is single-threaded:
/// the callers are children forked from the single-threaded helper, before they could start
/// a thread.
pub fn self_join_file(dir: &Path) -> PathBuf {
    let name = if is_v1_dir(dir) {
        "tasks"
    } else {
        "cgroup.procs"
    };
    dir.join(name)
}

/// Whether `dir` is a v1 cgroup directory (it has a `tasks` file; cgroup2 has none).
pub fn is_v1_dir(dir: &Path) -> bool {
    dir.join("tasks").exists()
}

/// Opens the `tasks` file of each v1 directory in `dirs` for writing, for a single-threaded
/// child to move itself in by writing "0" to each (see [`self_join_file`]). Skips cgroup2
/// directories.
pub fn open_self_join(dirs: &[PathBuf]) -> Result<Vec<(OwnedFd, PathBuf)>, SandboxError> {
    use std::os::unix::fs::OpenOptionsExt;
    dirs.iter()
        .filter(|d| is_v1_dir(d))
        .map(|d| {
            let path = d.join("tasks");
            let f = fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_CLOEXEC)
                .open(&path)
                .map_err(|source| SandboxError::CgroupWrite {
                    path: path.clone(),
                    value: "0".into(),
                    source,
                })?;
            Ok((OwnedFd::from(f), path))
        })
        .collect()
}

/// A pooled helper that already sits in the v1 pids cgroup counts against `pids.max`:
/// raise the limit by one so the payload keeps the number of processes it asked for.
pub fn allow_for_helper(plan: &mut CgroupPlan, joined: &[PathBuf]) {
    raise_pids(plan, |dir| joined.iter().any(|j| j == dir));
}

/// The sandbox's own process (the namespace tier's init) sits in every cgroup of the plan:
/// raise each `pids.max` by one so the payload keeps the number of processes it asked for.
/// The enforcement line keeps the caller's figure.
pub fn allow_one_more(plan: &mut CgroupPlan) {
    raise_pids(plan, |_| true);
}

fn raise_pids(plan: &mut CgroupPlan, occupied: impl Fn(&Path) -> bool) {
    for w in &mut plan.limits {
        let is_pids = w.path.file_name().and_then(|n| n.to_str()) == Some("pids.max");
        if is_pids && w.path.parent().is_some_and(&occupied) {
            if let Ok(n) = w.value.parse::<u64>() {
                w.value = n.saturating_add(1).to_string();
            }
        }
    }
}

/// Open a cgroup2 directory to fork straight into (`clone3(CLONE_INTO_CGROUP)`, see
/// [`crate::sys::proc::fork_child`]).
pub fn open_dir(dir: &Path) -> io::Result<OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(dir)?;
    Ok(f.into())
}

/// Pids currently in a cgroup directory.
pub fn procs(dir: &Path) -> Vec<i32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|s| s.parse().ok())
        .collect()
}

/// Kill every process in the sandbox cgroup (best effort; the caller also walks /proc).
pub fn kill(plan: &CgroupPlan) {
    match &plan.kill {
        KillMethod::CgroupKill(path) => {
            let _ = write_file(path, "1");
        }
        KillMethod::Freezer(dir) => {
            let state = dir.join("freezer.state");
            let _ = write_file(&state, "FROZEN");
            for _ in 0..100 {
                let s = fs::read_to_string(&state).unwrap_or_default();
                if s.trim() != "FREEZING" {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            for pid in procs(dir) {
                if pid > 0 {
                    // The pid was read from the sandbox's own cgroup, so it names a
                    // process of this sandbox.
                    let _ = crate::sys::proc::kill(pid, libc::SIGKILL);
                }
            }
            let _ = write_file(&state, "THAWED");
        }
        KillMethod::ProcWalk => {}
    }
}

/// Whether any process is left in the sandbox's cgroup directories.
pub fn is_empty(plan: &CgroupPlan) -> bool {
    plan.dirs.iter().all(|d| procs(d).is_empty())
}

/// What the cgroup measured.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupUsage {
    pub cpu_time_ms: Option<u64>,
    pub peak_memory_bytes: Option<u64>,
    pub oom_kills: Option<u64>,
    pub memory_failcnt: Option<u64>,
}

fn read_u64(path: &Path) -> Option<u64> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Value of `key N` in a flat-keyed file such as `memory.events` or `cpu.stat` (pure).
pub fn keyed_value(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        if it.next()? == key {
            it.next()?.parse().ok()
        } else {
            None
        }
    })
}

/// Read CPU time, peak memory and OOM kills.
pub fn read_usage(plan: &CgroupPlan) -> CgroupUsage {
    let cpu_time_ms = match &plan.cpu {
        Some(CpuMeter::CpuacctUsage(p)) => read_u64(p).map(|ns| ns / 1_000_000),
        Some(CpuMeter::CpuStat(p)) => fs::read_to_string(p)
            .ok()
            .and_then(|t| keyed_value(&t, "usage_usec"))
            .map(|us| us / 1000),
        None => None,
    };
    CgroupUsage {
        cpu_time_ms,
        peak_memory_bytes: plan.memory_peak.as_deref().and_then(read_u64),
        oom_kills: plan
            .oom_events
            .as_deref()
            .and_then(|p| fs::read_to_string(p).ok())
            .and_then(|t| keyed_value(&t, "oom_kill")),
        memory_failcnt: plan.memory_failcnt.as_deref().and_then(read_u64),
    }
}

fn remove_dirs(dirs: &[PathBuf]) -> Vec<(PathBuf, io::Error)> {
    let mut failed = Vec::new();
    for d in dirs.iter().rev() {
        if let Err(e) = rmdir_retry(d, 1) {
            failed.push((d.clone(), e));
        }
    }
    failed
}

fn rmdir_retry(dir: &Path, attempts: u32) -> io::Result<()> {
    let mut last = None;
    for i in 0..attempts.max(1) {
        match fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => last = Some(e),
        }
        if i + 1 < attempts {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("rmdir failed")))
}

/// Remove the sandbox's cgroups once its processes are gone, retrying for up to ~2 s while
/// exiting processes still hold them (`EBUSY`). Kills stragglers first.
pub fn remove(plan: &CgroupPlan) -> Result<(), SandboxError> {
    // Most runs end with every process gone (the helper reaped, a namespace's init dead
    // with its whole pid namespace), and the kernel refuses to remove a cgroup that still
    // holds a process (`EBUSY`): removing at once is the check. Every sandbox process sits
    // in every one of the directories, so one of them removed means none is left in the
    // others. Only a refusal pays for the listing, the kill and the retries below (the
    // listing of each directory's `cgroup.procs` was half of this function's time).
    let gone = |d: &PathBuf| match fs::remove_dir(d) {
        Ok(()) => true,
        Err(e) => e.kind() == io::ErrorKind::NotFound,
    };
    if plan.dirs.iter().rev().all(gone) {
        return Ok(());
    }
    for _ in 0..400 {
        if is_empty(plan) {
            break;
        }
        kill(plan);
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut first_err = None;
    for d in plan.dirs.iter().rev() {
        if let Err(source) = rmdir_retry(d, 100) {
            if first_err.is_none() {
                first_err = Some(SandboxError::CgroupRemove {
                    path: d.clone(),
                    source,
                });
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Remove sandbox cgroups left behind by a crashed supervisor: those with no processes
/// that are at least [`STALE_AGE`] old. Returns the directories removed.
pub fn cleanup_stale() -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let now = SystemTime::now();
    for base in base_dirs(host_layout()) {
        let Ok(entries) = fs::read_dir(&base) else {
            continue;
        };
        for entry in entries.flatten() {
            // The entry's type from the directory listing: a controller's directory holds
            // a few dozen files for each cgroup, and a `stat` of each was most of the
            // sweep's time (every run that starts a sandbox sweeps once, beside its set-up).
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let dir = entry.path();
            if !procs(&dir).is_empty() {
                continue;
            }
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| now.duration_since(t).ok())
                .is_some_and(|age| age >= STALE_AGE);
            if old && fs::remove_dir(&dir).is_ok() {
                removed.push(dir);
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandboxio_core::ByteSize;

    #[test]
    fn a_process_moves_itself_through_tasks_on_v1_and_cgroup_procs_on_cgroup2() {
        let root = tempfile::tempdir().unwrap();
        let v1 = root.path().join("v1");
        let v2 = root.path().join("v2");
        for d in [&v1, &v2] {
            fs::create_dir(d).unwrap();
            fs::write(d.join("cgroup.procs"), "").unwrap();
        }
        fs::write(v1.join("tasks"), "").unwrap();
        assert!(is_v1_dir(&v1) && !is_v1_dir(&v2));
        assert_eq!(self_join_file(&v1), v1.join("tasks"));
        assert_eq!(self_join_file(&v2), v2.join("cgroup.procs"));
        // Only the v1 directory's `tasks` is opened for the init to write "0" into.
        let opened = open_self_join(&[v1.clone(), v2.clone()]).unwrap();
        assert_eq!(opened.len(), 1);
        assert_eq!(opened[0].1, v1.join("tasks"));
        // A v1 directory whose `tasks` cannot be opened for writing is an error, not a skip.
        fs::remove_file(v1.join("tasks")).unwrap();
        fs::create_dir(v1.join("tasks")).unwrap();
        assert!(open_self_join(&[v1]).is_err());
    }

    const HYBRID_MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    const HYBRID_CGROUP: &str = "\
9:name=systemd:/
8:pids:/
6:freezer:/
4:memory:/process_api/abc
2:cpuacct:/
1:cpu:/
0::/
";

    fn limits() -> Limits {
        Limits {
            memory: ByteSize::mib(64),
            pids: 32,
            cpu_quota_millis: 500,
            ..Limits::default()
        }
    }

    #[test]
    fn hybrid_layout_nests_under_own_cgroup() {
        let l = parse_layout(HYBRID_MOUNTINFO, HYBRID_CGROUP);
        assert_eq!(
            l.v1.get("memory"),
            Some(&PathBuf::from("/sys/fs/cgroup/memory/process_api/abc"))
        );
        assert_eq!(
            l.v1.get("pids"),
            Some(&PathBuf::from("/sys/fs/cgroup/pids"))
        );
        assert!(!l.v1.contains_key("name=systemd"));
        assert_eq!(l.unified, Some(PathBuf::from("/sys/fs/cgroup/unified")));
    }

    #[test]
    fn hybrid_plan_limits_in_v1_and_kills_via_unified_leaf() {
        let l = parse_layout(HYBRID_MOUNTINFO, HYBRID_CGROUP);
        let p = plan(&l, "deadbeef", &limits()).unwrap();
        assert_eq!(p.version, CgroupVersion::V1);
        assert!(p.limits_memory());
        let values: Vec<(String, String)> = p
            .limits
            .iter()
            .map(|w| (w.path.display().to_string(), w.value.clone()))
            .collect();
        let mem_dir = "/sys/fs/cgroup/memory/process_api/abc/sandboxio/deadbeef";
        assert_eq!(
            values[0],
            (
                format!("{mem_dir}/memory.limit_in_bytes"),
                "67108864".into()
            )
        );
        assert_eq!(
            values[1],
            (
                format!("{mem_dir}/memory.memsw.limit_in_bytes"),
                "67108864".into()
            )
        );
        assert!(values.contains(&(
            "/sys/fs/cgroup/pids/sandboxio/deadbeef/pids.max".into(),
            "32".into()
        )));
        assert!(values.contains(&(
            "/sys/fs/cgroup/cpu/sandboxio/deadbeef/cpu.cfs_quota_us".into(),
            "50000".into()
        )));
        assert_eq!(
            p.kill,
            KillMethod::CgroupKill(PathBuf::from(
                "/sys/fs/cgroup/unified/sandboxio/deadbeef/cgroup.kill"
            ))
        );
        // memory, pids, cpu, cpuacct, unified (no freezer: cgroup.kill is there)
        assert_eq!(p.dirs.len(), 5);
    }

    #[test]
    fn pure_v2_plan() {
        let mi = "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
        let mut l = parse_layout(mi, "0::/user.slice\n");
        l.unified_controllers = vec!["cpu".into(), "memory".into(), "pids".into()];
        let p = plan(&l, "id1", &limits()).unwrap();
        assert_eq!(p.version, CgroupVersion::V2);
        assert_eq!(p.dirs, vec![PathBuf::from("/sys/fs/cgroup/sandboxio/id1")]);
        let find = |name: &str| {
            p.limits
                .iter()
                .find(|w| w.path.ends_with(name))
                .map(|w| w.value.clone())
        };
        assert_eq!(find("memory.max").as_deref(), Some("67108864"));
        assert_eq!(find("memory.swap.max").as_deref(), Some("0"));
        assert_eq!(find("pids.max").as_deref(), Some("32"));
        assert_eq!(find("cpu.max").as_deref(), Some("50000 100000"));
        assert_eq!(
            p.memory_peak,
            Some(PathBuf::from("/sys/fs/cgroup/sandboxio/id1/memory.peak"))
        );
        assert!(p.prepare.iter().any(|w| w.value == "+memory"));
    }

    #[test]
    fn no_cgroups_no_plan() {
        assert!(plan(&CgroupLayout::default(), "x", &limits()).is_none());
    }

    #[test]
    fn unified_without_controllers_is_kill_only() {
        let mi = "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";
        let l = parse_layout(mi, "0::/\n");
        let p = plan(&l, "x", &limits()).unwrap();
        assert!(p.limits.is_empty());
        assert!(!p.limits_memory());
        assert!(p.gaps.iter().any(|g| g.contains("no controllers")));
    }

    #[test]
    fn systemd_delegation_is_the_topmost_writable_ancestor() {
        let mount = Path::new("/sys/fs/cgroup");
        let own = mount.join("user.slice/user-1000.slice/user@1000.service/app.slice/run-1.scope");
        let delegated = mount.join("user.slice/user-1000.slice/user@1000.service");
        // The user owns user@1000.service and below; root owns the slices above.
        let writable = |p: &Path| p.starts_with(&delegated);
        assert_eq!(
            find_delegated(mount, &own, &writable),
            Some(delegated.clone())
        );
        // A login-session scope owned by root: nothing is delegated.
        let session = mount.join("user.slice/user-1000.slice/session-3.scope");
        assert_eq!(find_delegated(mount, &session, &writable), None);
        // Never the mount itself, never outside it.
        assert_eq!(find_delegated(mount, mount, &|_| true), None);
        assert_eq!(
            find_delegated(mount, Path::new("/elsewhere/x"), &|_| true),
            None
        );
        assert_eq!(
            find_delegated(mount, &own, &|_| true),
            Some(mount.join("user.slice"))
        );
    }

    #[test]
    fn own_cgroup2_path_is_parsed() {
        let mi = "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let l = parse_layout(mi, "0::/user.slice/user-1000.slice/session-3.scope\n");
        assert_eq!(
            l.unified_own,
            Some(PathBuf::from(
                "/sys/fs/cgroup/user.slice/user-1000.slice/session-3.scope"
            ))
        );
    }

    #[test]
    fn a_delegated_subtree_carries_the_limits() {
        let mi = "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let mut l = parse_layout(
            mi,
            "0::/user.slice/user-1000.slice/user@1000.service/a.scope\n",
        );
        let d = PathBuf::from("/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service");
        l.delegated = Some(d.clone());
        l.unified_controllers = vec!["cpu".into(), "memory".into(), "pids".into()];
        let p = plan(&l, "abc", &limits()).unwrap();
        assert_eq!(p.version, CgroupVersion::V2);
        assert_eq!(p.dirs, vec![d.join("sandboxio/abc")]);
        assert!(p.limits_memory());
        assert!(p.limits.iter().any(|w| w.path.ends_with("pids.max")));
        assert!(
            p.prepare.iter().all(|w| w.path.starts_with(&d)),
            "{:?}",
            p.prepare
        );
        assert_eq!(base_dirs(&l), vec![d.join("sandboxio")]);
        // Controllers the delegation lacks are named as gaps.
        l.unified_controllers = vec!["pids".into()];
        let p = plan(&l, "abc", &limits()).unwrap();
        assert!(!p.limits_memory());
        assert!(
            p.gaps.iter().any(|g| g.starts_with("memory:")),
            "{:?}",
            p.gaps
        );
    }

    #[test]
    fn keyed_values() {
        let t = "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n";
        assert_eq!(keyed_value(t, "oom_kill"), Some(2));
        assert_eq!(
            keyed_value("usage_usec 1500\nuser_usec 1000\n", "usage_usec"),
            Some(1500)
        );
        assert_eq!(keyed_value("", "oom_kill"), None);
    }
}
