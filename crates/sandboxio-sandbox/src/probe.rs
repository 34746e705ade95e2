//! What isolation this host can give, and for anything missing, why and what to change.
//! Used by `sandboxio doctor`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use sandboxio_core::{ErrorCode, ExecRequest, ExitStatus, IsolationTier};

use crate::cgroup::{self, CgroupLayout};
use crate::config::SandboxConfig;
use crate::ns::restriction::{self, Restriction};
use crate::sys;

/// One mechanism: there or not, in words, and how to get it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Check {
    pub available: bool,
    pub detail: String,
    /// What to change on the host when it is missing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Check {
    fn yes(detail: impl Into<String>) -> Check {
        Check {
            available: true,
            detail: detail.into(),
            fix: None,
        }
    }
    fn no(detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            available: false,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
}

/// Cgroup facts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupReport {
    pub check: Check,
    /// `v1`, `v2`, `hybrid` or `none`.
    pub mode: String,
    pub v1_controllers: Vec<String>,
    pub v2_mount: Option<PathBuf>,
    pub v2_controllers: Vec<String>,
    /// Whether `cgroup.kill` (whole-tree kill, Linux 5.14+) can be used.
    pub cgroup_kill: bool,
    /// Where sandbox cgroups are created on this host.
    pub base_dirs: Vec<PathBuf>,
}

/// Everything `sandboxio doctor` reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostReport {
    pub kernel: String,
    pub uid: u32,
    pub user_namespaces: Check,
    pub landlock: Check,
    pub landlock_abi: Option<u32>,
    pub seccomp: Check,
    pub cgroups: CgroupReport,
    pub kvm: Check,
    pub bwrap: Check,
    /// Tier name -> whether this host can run it, and why not.
    pub tiers: Vec<(String, Check)>,
}

fn read_trim(p: &str) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Probe this host. Never fails: what cannot be determined is reported as missing.
pub fn probe() -> HostReport {
    let uid = sys::proc::getuid();
    let kernel = read_trim("/proc/sys/kernel/osrelease").unwrap_or_else(|| "unknown".into());
    let user_namespaces = probe_userns(uid);
    let (landlock, landlock_abi) = probe_landlock();
    let seccomp = probe_seccomp();
    let cgroups = probe_cgroups(cgroup::host_layout());
    let kvm = probe_kvm();
    let bwrap = probe_bwrap();
    let mut tiers = vec![(
        "process".to_string(),
        Check::yes("always available (not a security boundary)"),
    )];
    let ns_ok = user_namespaces.available && seccomp.available;
    tiers.push((
        "namespace".into(),
        if ns_ok {
            Check::yes("user namespaces and seccomp available")
        } else {
            Check::no(
                "needs user namespaces and seccomp",
                "see the user_namespaces and seccomp entries",
            )
        },
    ));
    tiers.push((
        "landlock".into(),
        if landlock.available && seccomp.available {
            Check::yes(format!(
                "Landlock ABI {} and seccomp available",
                landlock_abi.unwrap_or(0)
            ))
        } else {
            Check::no(
                "needs Landlock and seccomp",
                "see the landlock and seccomp entries",
            )
        },
    ));
    tiers.push((
        "microvm".into(),
        Check::no(
            if kvm.available {
                "/dev/kvm is usable but the microvm tier is not built yet"
            } else {
                "not built yet, and /dev/kvm is not usable"
            },
            "wait for the microvm tier",
        ),
    ));
    HostReport {
        kernel,
        uid,
        user_namespaces,
        landlock,
        landlock_abi,
        seccomp,
        cgroups,
        kvm,
        bwrap,
        tiers,
    }
}

/// [`probe`], with the namespace and landlock tiers judged by a real probe sandbox each
/// ([`try_tier`]) instead of by their parts, so the report cannot say ok where `run` fails.
pub async fn probe_with_runs(cfg: &SandboxConfig) -> HostReport {
    let mut report = probe();
    for (name, check) in report.tiers.iter_mut() {
        let tier = match name.as_str() {
            "namespace" => IsolationTier::Namespace,
            "landlock" => IsolationTier::Landlock,
            _ => continue,
        };
        *check = try_tier(cfg, tier).await;
    }
    report
}

/// Runs `/usr/bin/true` under `tier` through the same code as every run (workspace, cgroup,
/// helper, namespaces or Landlock, seccomp), never falling back to another tier. The
/// landlock tier is tried even where the configuration does not allow it; the answer then
/// says that it needs `[sandbox] allow_landlock_fallback = true`.
pub async fn try_tier(cfg: &SandboxConfig, tier: IsolationTier) -> Check {
    let mut cfg = cfg.clone();
    let allowed = cfg.landlock_fallback;
    cfg.landlock_fallback = tier == IsolationTier::Landlock;
    let mut req = ExecRequest::new(["/usr/bin/true"]);
    req.limits.timeout = std::time::Duration::from_secs(20);
    match crate::exec::run_prepared(&req, tier, &cfg, None, None, &mut Default::default()).await {
        Ok(r) if r.exit == ExitStatus::Code(0) => {
            let e = &r.enforcement;
            let mut detail = format!("a probe sandbox ran (tier {})", tier.as_str());
            if !e.namespaces.is_empty() {
                detail.push_str(&format!("; namespaces {}", e.namespaces.join(",")));
            }
            if let Some(abi) = e.landlock_abi {
                detail.push_str(&format!("; landlock ABI {abi}"));
            }
            if e.seccomp {
                detail.push_str("; seccomp");
            }
            detail.push_str(&format!(
                "; cgroup {}",
                e.cgroup.as_deref().unwrap_or("none")
            ));
            if !e.gaps.is_empty() {
                detail.push_str(&format!("; {} gaps (see `run --json`)", e.gaps.len()));
            }
            if tier == IsolationTier::Landlock && !allowed {
                detail.push_str(&format!(
                    "; used only with `{}` = true",
                    restriction::FALLBACK_KEY
                ));
            }
            Check::yes(detail)
        }
        Ok(r) => Check::no(
            format!(
                "the probe sandbox ran but `/usr/bin/true` ended with {:?}: {}",
                r.exit,
                r.stderr_lossy().trim()
            ),
            "run `sandboxio run --json -- /usr/bin/true` and read its enforcement",
        ),
        Err(e) => {
            let code = e.code();
            let fix = match Restriction::from_code(code) {
                Some(r) => r.fix().to_string(),
                None if code == "SBX_E1469" => {
                    "use Linux 5.13+ with CONFIG_SECURITY_LANDLOCK=y and `landlock` in the \
                     `lsm=` boot parameter"
                        .to_string()
                }
                None => format!("see {code} in docs/ERRORS.md"),
            };
            Check::no(format!("the probe sandbox failed: [{code}] {e}"), fix)
        }
    }
}

fn probe_userns(uid: u32) -> Check {
    let max = read_trim("/proc/sys/user/max_user_namespaces");
    if max.as_deref() == Some("0") {
        return Check::no(
            "user.max_user_namespaces is 0",
            "sysctl -w user.max_user_namespaces=15000",
        );
    }
    if uid != 0 && read_trim("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        return Check::no(
            "kernel.unprivileged_userns_clone is 0",
            "sysctl -w kernel.unprivileged_userns_clone=1",
        );
    }
    let status = match sys::proc::unshare_in_child(libc::CLONE_NEWUSER) {
        Ok(status) => status,
        Err(e) => {
            return Check::no(
                format!(
                    "fork failed while probing: {}",
                    std::io::Error::from_raw_os_error(e)
                ),
                "retry",
            )
        }
    };
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    if code == 0 {
        return Check::yes(format!("unshare(CLONE_NEWUSER) works as uid {uid}"));
    }
    let why = std::io::Error::from_raw_os_error(code);
    let apparmor = read_trim("/proc/sys/kernel/apparmor_restrict_unprivileged_userns");
    let fix = if apparmor.as_deref() == Some("1") {
        "AppArmor restricts unprivileged user namespaces: sysctl -w kernel.apparmor_restrict_unprivileged_userns=0, or add an AppArmor profile for sandboxio"
    } else {
        "allow user namespaces (sysctl user.max_user_namespaces > 0; in a container, run with a seccomp profile that permits unshare/clone with CLONE_NEWUSER)"
    };
    Check::no(format!("unshare(CLONE_NEWUSER) failed: {why}"), fix)
}

fn probe_landlock() -> (Check, Option<u32>) {
    let r = sys::landlock::abi_version();
    if let Ok(r @ 1..) = r {
        let abi = u32::try_from(r).unwrap_or(0);
        let used = abi.min(crate::ns::landlock::MAX_ABI);
        // The kernel's ABI, and the one the sandbox uses (the newest it knows): the tiers
        // report the latter.
        let what = if used < abi {
            format!("Landlock ABI {abi} (sandboxes use ABI {used}, the newest sandboxio knows)")
        } else {
            format!("Landlock ABI {abi}")
        };
        return (Check::yes(what), Some(used));
    }
    let e = std::io::Error::from_raw_os_error(r.err().unwrap_or(libc::EINVAL));
    let fix = match e.raw_os_error() {
        Some(libc::ENOSYS) => {
            "kernel built without Landlock: use Linux 5.13+ with CONFIG_SECURITY_LANDLOCK=y"
        }
        Some(libc::EOPNOTSUPP) => {
            "Landlock is built but not enabled: add `landlock` to the lsm= kernel command line"
        }
        _ => "check the kernel's Landlock support",
    };
    (
        Check::no(format!("landlock_create_ruleset failed: {e}"), fix),
        None,
    )
}

const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;

fn probe_seccomp() -> Check {
    let Err(e) = sys::seccomp::action_available(SECCOMP_RET_KILL_PROCESS) else {
        return Check::yes("seccomp filters available (SECCOMP_RET_KILL_PROCESS supported)");
    };
    let e = std::io::Error::from_raw_os_error(e);
    Check::no(
        format!("seccomp(SECCOMP_GET_ACTION_AVAIL) failed: {e}"),
        "use a kernel with CONFIG_SECCOMP_FILTER=y",
    )
}

fn probe_cgroups(layout: &CgroupLayout) -> CgroupReport {
    let v1: Vec<String> = layout.v1.keys().cloned().collect();
    let cgroup_kill = layout
        .unified
        .as_ref()
        .is_some_and(|u| kernel_has_cgroup_kill(u));
    let mode = match (v1.is_empty(), layout.unified.is_some()) {
        (false, true) => "hybrid",
        (false, false) => "v1",
        (true, true) => "v2",
        (true, false) => "none",
    };
    let has_mem = layout.v1.contains_key("memory")
        || layout.unified_controllers.iter().any(|c| c == "memory");
    let has_pids =
        layout.v1.contains_key("pids") || layout.unified_controllers.iter().any(|c| c == "pids");
    let bases = cgroup::base_dirs(layout);
    let writable = bases
        .iter()
        .any(|b| b.parent().is_some_and(|p| p.exists() && is_writable(p)));
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let check = cgroup_check(CgroupFacts {
        mode,
        has_mem,
        has_pids,
        writable,
        read_only: cgroup_mounts_read_only(&mountinfo),
        host_root: crate::ids::is_host_root(),
        first_base: bases.first().cloned(),
    });
    CgroupReport {
        check,
        mode: mode.into(),
        v1_controllers: v1,
        v2_mount: layout.unified.clone(),
        v2_controllers: layout.unified_controllers.clone(),
        cgroup_kill,
        base_dirs: bases,
    }
}

/// What the cgroup entry of `doctor` is decided from.
struct CgroupFacts {
    mode: &'static str,
    has_mem: bool,
    has_pids: bool,
    writable: bool,
    read_only: bool,
    host_root: bool,
    first_base: Option<PathBuf>,
}

/// Whether every cgroup filesystem is mounted read-only (a container's default) (pure).
fn cgroup_mounts_read_only(mountinfo: &str) -> bool {
    let mut any = false;
    for line in mountinfo.lines() {
        let Some((pre, post)) = line.split_once(" - ") else {
            continue;
        };
        if !(post.starts_with("cgroup ") || post.starts_with("cgroup2 ")) {
            continue;
        }
        any = true;
        let opts = pre.split(' ').nth(5).unwrap_or("");
        if !opts.split(',').any(|o| o == "ro") {
            return false;
        }
    }
    any
}

/// The cgroup entry of `doctor`, with the fix for each way it can be missing (pure).
fn cgroup_check(f: CgroupFacts) -> Check {
    const FALLBACK: &str = "until then limits fall back to rlimits and every missing limit \
                            is named in enforcement.gaps";
    if f.mode == "none" {
        return Check::no(
            "no cgroup hierarchy is mounted",
            format!("mount cgroup2 at /sys/fs/cgroup (mount -t cgroup2 none /sys/fs/cgroup); {FALLBACK}"),
        );
    }
    if f.read_only {
        return Check::no(
            format!(
                "{}: cgroups are mounted read-only here (a container's default)",
                f.mode
            ),
            format!(
                "give the container a writable cgroup (docker run --cgroupns=private on a \
                 cgroup v2 host, with a delegated subtree), or set `[sandbox] cgroup_root` to \
                 a writable cgroup2 directory; {FALLBACK}"
            ),
        );
    }
    if !f.writable {
        let fix = if f.host_root {
            format!("check the permissions of the cgroup mounts; {FALLBACK}")
        } else {
            format!(
                "run under a delegated cgroup (systemd-run --user --scope -p Delegate=yes, or \
                 a systemd unit with Delegate=yes), or set `[sandbox] cgroup_root` to a cgroup2 \
                 directory this user may write; {FALLBACK}"
            )
        };
        return Check::no(
            format!(
                "{}: cannot create cgroups here (not writable by this user)",
                f.mode
            ),
            fix,
        );
    }
    if !(f.has_mem && f.has_pids) {
        return Check::no(
            format!("{}: memory or pids controller missing", f.mode),
            format!(
                "enable the memory and pids controllers (v2: echo +memory +pids > \
                 cgroup.subtree_control of the parent; v1: mount them); {FALLBACK}"
            ),
        );
    }
    Check::yes(format!(
        "{}: memory and pids controllers available, sandbox cgroups under {}",
        f.mode,
        f.first_base
            .map(|b| b.display().to_string())
            .unwrap_or_default()
    ))
}

fn kernel_has_cgroup_kill(mount: &Path) -> bool {
    // The root cgroup has no cgroup.kill; any child shows it when the kernel supports it.
    if let Ok(rd) = std::fs::read_dir(mount) {
        for e in rd.flatten() {
            if e.path().join("cgroup.kill").exists() {
                return true;
            }
        }
    }
    read_trim("/proc/sys/kernel/osrelease")
        .and_then(|r| {
            let mut it = r.split(|c: char| !c.is_ascii_digit());
            let major: u32 = it.next()?.parse().ok()?;
            let minor: u32 = it.next()?.parse().ok()?;
            Some((major, minor) >= (5, 14))
        })
        .unwrap_or(false)
}

/// Whether this process may write `p` (access(2) with W_OK).
pub(crate) fn is_writable(p: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    sys::fs::access(&c, libc::W_OK)
}

fn probe_kvm() -> Check {
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
    {
        Ok(_) => Check::yes("/dev/kvm is usable"),
        Err(e) => Check::no(
            format!("/dev/kvm: {e}"),
            "enable virtualization (KVM) and give this user access to /dev/kvm (group kvm)",
        ),
    }
}

fn probe_bwrap() -> Check {
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
    for dir in path.split(':').filter(|d| !d.is_empty()) {
        let cand = Path::new(dir).join("bwrap");
        if cand.is_file() {
            return Check::yes(format!("bwrap at {}", cand.display()));
        }
    }
    Check::no(
        "bwrap not found in PATH (optional: sandboxio does not need it)",
        "apt-get install bubblewrap (only for comparison; not required)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_never_panics_and_process_tier_is_always_there() {
        let r = probe();
        assert!(r.tiers.iter().any(|(t, c)| t == "process" && c.available));
        for (_, c) in &r.tiers {
            assert!(c.available || c.fix.is_some());
        }
        let json = serde_json::to_string(&r).unwrap();
        assert!(json.contains("user_namespaces"));
    }

    fn facts() -> CgroupFacts {
        CgroupFacts {
            mode: "v2",
            has_mem: true,
            has_pids: true,
            writable: true,
            read_only: false,
            host_root: false,
            first_base: Some(PathBuf::from("/sys/fs/cgroup/x/sandboxio")),
        }
    }

    #[test]
    fn each_missing_cgroup_case_has_its_own_fix() {
        assert!(cgroup_check(facts()).available);
        let ro = cgroup_check(CgroupFacts {
            read_only: true,
            writable: false,
            ..facts()
        });
        assert!(!ro.available);
        assert!(ro.detail.contains("read-only"), "{}", ro.detail);
        let user = cgroup_check(CgroupFacts {
            writable: false,
            ..facts()
        });
        let fix = user.fix.unwrap_or_default();
        assert!(
            fix.contains("Delegate=yes") && fix.contains("[sandbox] cgroup_root"),
            "{fix}"
        );
        let none = cgroup_check(CgroupFacts {
            mode: "none",
            ..facts()
        });
        assert!(none.fix.unwrap_or_default().contains("mount -t cgroup2"));
        let ctl = cgroup_check(CgroupFacts {
            has_pids: false,
            ..facts()
        });
        assert!(ctl.detail.contains("controller missing"));
    }

    #[test]
    fn read_only_cgroup_mounts_are_seen() {
        let ro = "31 23 0:28 / /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 ro\n";
        assert!(cgroup_mounts_read_only(ro));
        let rw = "31 23 0:28 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n";
        assert!(!cgroup_mounts_read_only(rw));
        assert!(!cgroup_mounts_read_only(&format!("{ro}{rw}")));
        assert!(!cgroup_mounts_read_only(""));
    }

    #[test]
    fn cgroup_mode_words() {
        let r = probe_cgroups(&CgroupLayout::default());
        assert_eq!(r.mode, "none");
        assert!(!r.check.available);
        assert!(r.check.fix.is_some());
    }
}
