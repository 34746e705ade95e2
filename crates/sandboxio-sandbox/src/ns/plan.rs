//! Pure planning of the namespace tier: from an `ExecRequest` and the host paths the
//! framework prepared, the exact list of mounts, files, id maps, seccomp rules and Landlock
//! rules. No syscalls, no I/O.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use sandboxio_core::{ExecRequest, MountMode, NetworkMode};
use serde::{Deserialize, Serialize};

use super::error::NsError;
use super::landlock::{Access, LandlockRule};
use super::seccomp::{self, SeccompRule, SocketPolicy};

/// Where things are inside the sandbox.
pub const INSIDE_WORKSPACE: &str = "/workspace";
pub const INSIDE_OUTPUT: &str = "/output";
pub const INSIDE_INPUT: &str = "/input";
pub const INSIDE_TMP: &str = "/tmp";
pub const HOSTNAME: &str = "sandbox";
/// Host uid and gid that uid/gid 0 inside maps to (`nobody`): owns nothing on the host.
pub const DEFAULT_HOST_ID: u32 = 65534;
/// Size of the tmpfs holding the new root (mount points and the generated /etc).
pub const ROOT_TMPFS_SIZE: u64 = 8 << 20;
/// Size of the tmpfs at /dev.
pub const DEV_TMPFS_SIZE: u64 = 64 << 10;
/// Inode cap of every size-capped tmpfs (small files cannot exhaust host memory either).
pub const TMPFS_INODES: u64 = 16384;
/// Namespaces entered, in the words `Enforcement.namespaces` uses.
pub const NAMESPACES: [&str; 7] = ["user", "mount", "pid", "net", "ipc", "uts", "cgroup"];

/// Host paths prepared by the framework before planning.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NsHostPaths {
    /// Host directory holding the workspace files; copied into a tmpfs at `/workspace`.
    pub workspace: PathBuf,
    /// Host directory that receives the output files after the run.
    pub output: PathBuf,
}

/// Mount flags, as booleans so plans read well.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MountFlags {
    pub readonly: bool,
    pub nosuid: bool,
    pub nodev: bool,
    pub noexec: bool,
}

impl MountFlags {
    pub const fn ro() -> Self {
        MountFlags {
            readonly: true,
            nosuid: true,
            nodev: true,
            noexec: false,
        }
    }
    pub const fn writable(exec: bool) -> Self {
        MountFlags {
            readonly: false,
            nosuid: true,
            nodev: true,
            noexec: !exec,
        }
    }
}

/// A directory the helper stages on a size-capped tmpfs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Staged {
    /// Filled from `NsHostPaths::workspace` before the run.
    Workspace,
    /// Copied to `NsHostPaths::output` after the run.
    Output,
}

/// Contents of a generated file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileSource {
    Inline(String),
    /// A host file read by the helper (as root) before the namespaces are created.
    CopyOf(PathBuf),
}

/// One step of building the new root. Paths are inside the sandbox (absolute); they are
/// created under the new root before `pivot_root`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "op", deny_unknown_fields)]
pub enum MountOp {
    Dir {
        path: PathBuf,
        mode: u32,
    },
    Symlink {
        path: PathBuf,
        target: PathBuf,
    },
    File {
        path: PathBuf,
        source: FileSource,
        mode: u32,
    },
    Tmpfs {
        path: PathBuf,
        size: u64,
        mode: u32,
        flags: MountFlags,
    },
    /// Bind a host path (opened by the helper, so no lookup happens as the sandbox user).
    /// A file source gets an empty file as its mount point.
    Bind {
        source: PathBuf,
        path: PathBuf,
        flags: MountFlags,
        /// Skip silently when the host path does not exist.
        optional: bool,
        /// A caller's mount (`ExecRequest.mounts`): the source is opened without
        /// following any symlink (the gateway resolved it; a link swapped in since is
        /// refused), the mount point is made when missing, and the flags apply to every
        /// mount below it as well (a host mount inside it cannot stay writable).
        #[serde(default, skip_serializing_if = "is_false")]
        confined: bool,
    },
    /// Bind a directory staged by the helper.
    StagedBind {
        which: Staged,
        path: PathBuf,
        flags: MountFlags,
    },
    Proc {
        path: PathBuf,
    },
    Devpts {
        path: PathBuf,
    },
    /// Bind the sandbox's own `/dev/null` over a file (hides it); skipped if absent.
    MaskWithNull {
        path: PathBuf,
    },
    /// Bind a path onto itself and make it read-only; skipped if absent.
    ReadOnly {
        path: PathBuf,
    },
}

/// Everything the namespace tier needs to run one request. Serializable so it travels to
/// the helper inside `SandboxPlan`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamespacePlan {
    pub argv: Vec<String>,
    /// Final environment of the payload.
    pub env: BTreeMap<String, String>,
    /// Working directory inside.
    pub cwd: PathBuf,
    pub hostname: String,
    pub host_uid: u32,
    pub host_gid: u32,
    /// Text written to `/proc/<pid>/uid_map` and `gid_map`.
    pub uid_map: String,
    pub gid_map: String,
    pub root_size: u64,
    /// Applied in order.
    pub mounts: Vec<MountOp>,
    pub workspace_host: PathBuf,
    pub workspace_size: u64,
    pub output_host: PathBuf,
    pub output_size: u64,
    pub sockets: SocketPolicy,
    pub seccomp: Vec<SeccompRule>,
    pub landlock: Vec<LandlockRule>,
    /// Landlock denies TCP bind/connect (ABI 4+) when the network mode is `none`.
    pub landlock_deny_tcp: bool,
    /// Network `allowlist` or `full`: the loopback port the egress listener takes inside
    /// the sandbox's own network namespace (the proxy outside serves it).
    #[serde(default)]
    pub egress_port: Option<u16>,
    pub namespaces: Vec<String>,
    /// Stdio is a pseudo-terminal: the payload takes it as controlling terminal.
    #[serde(default)]
    pub tty: bool,
}

impl NamespacePlan {
    /// The limits this tier enforces itself, in `Enforcement.limits` words (pure).
    pub fn enforcement_limits(&self) -> Vec<String> {
        use sandboxio_core::ByteSize;
        let mut l = vec![
            format!(
                "tmp_size={} (tmpfs /tmp and /dev/shm)",
                ByteSize(self.workspace_size)
            ),
            format!("workspace_size={} (tmpfs)", ByteSize(self.workspace_size)),
            format!("output_size={} (tmpfs)", ByteSize(self.output_size)),
            format!("tmpfs_inodes={TMPFS_INODES}"),
        ];
        match self.sockets {
            SocketPolicy::PairsOnly => l.push(
                "sockets: socket() refused for every family, AF_UNIX included (host \
                 directories are bound in and may hold host daemons' sockets); stream and \
                 seqpacket socketpair only"
                    .into(),
            ),
            SocketPolicy::InetNoUnix => l.push(
                "sockets: AF_INET and AF_INET6 only, no AF_UNIX socket() (host directories \
                 are bound in and may hold host daemons' sockets); stream and seqpacket \
                 socketpair only"
                    .into(),
            ),
            _ => {}
        }
        l
    }
}

impl NamespacePlan {
    /// The plan as a non-root helper runs it: the sandbox's root maps to the invoking
    /// user's `uid`/`gid` (the only ids an unprivileged user may map), which also own the
    /// staging tmpfs and the copied workspace (pure).
    pub fn mapped_to_invoking_user(mut self, uid: u32, gid: u32) -> NamespacePlan {
        self.host_uid = uid;
        self.host_gid = gid;
        self.uid_map = format!("0 {uid} 1\n");
        self.gid_map = format!("0 {gid} 1\n");
        self
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn p(s: &str) -> PathBuf {
    PathBuf::from(s)
}

fn check_host_path(path: &Path) -> Result<(), NsError> {
    if !path.is_absolute() {
        return Err(NsError::InvalidPath {
            path: path.to_path_buf(),
            why: "must be absolute",
        });
    }
    if path.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(NsError::InvalidPath {
            path: path.to_path_buf(),
            why: "must not contain `..`",
        });
    }
    if path.as_os_str().as_encoded_bytes().contains(&0) {
        return Err(NsError::NulByte);
    }
    Ok(())
}

const PASSWD: &str =
    "root:x:0:0:sandbox:/tmp:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
const GROUP: &str = "root:x:0:\nnogroup:x:65534:\n";
const HOSTS: &str = "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n";
const NSSWITCH: &str = "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n";
const RESOLV_NONE: &str = "# no network in this sandbox\n";
/// No name server: names are resolved by the egress proxy, so DNS carries nothing out
/// (a lookup goes to 127.0.0.1:53, where nothing listens).
const RESOLV_EGRESS: &str =
    "# no DNS in this sandbox: the egress proxy resolves names (HTTP_PROXY, HTTPS_PROXY)\n";

/// Where the namespace tier writes the preload that sends Node's `fetch` through the proxy.
pub const NODE_EGRESS_PATH: &str = "/etc/sandboxio/node-egress.js";
const NODE_EGRESS: &str = include_str!("node_egress.js");

/// The loopback port of the egress listener inside a sandbox with network.
pub const EGRESS_PORT: u16 = 3128;

/// What programs need to find the egress proxy: the usual proxy variables (both cases:
/// curl reads only lowercase `http_proxy`), npm's and Node's (`fetch` honours the
/// variables only with `NODE_USE_ENV_PROXY`, from Node 24; the namespace tier adds a
/// preload for older Node, see [`NODE_EGRESS_PATH`]), and loopback kept direct.
pub fn egress_env(port: u16) -> Vec<(String, String)> {
    let url = format!("http://127.0.0.1:{port}");
    let mut v = Vec::new();
    for name in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
        v.push((name.to_string(), url.clone()));
        v.push((name.to_ascii_lowercase(), url.clone()));
    }
    let direct = "localhost,127.0.0.1,::1".to_string();
    v.push(("NO_PROXY".into(), direct.clone()));
    v.push(("no_proxy".into(), direct));
    v.push(("npm_config_proxy".into(), url.clone()));
    v.push(("npm_config_https_proxy".into(), url.clone()));
    v.push(("NODE_USE_ENV_PROXY".into(), "1".into()));
    v.push(("GIT_PROXY_COMMAND".into(), String::new()));
    v
}

/// Plans the namespace tier for a request (pure).
///
/// `env` is the environment the framework computed (allowlisted host variables plus the
/// request's own); the sandbox's path variables are set on top of it.
pub fn plan(
    req: &ExecRequest,
    host: &NsHostPaths,
    env: &BTreeMap<String, String>,
) -> Result<NamespacePlan, NsError> {
    if req.argv.is_empty() || req.argv[0].is_empty() {
        return Err(NsError::EmptyArgv);
    }
    // With network, the sandbox still has loopback only: its egress listener there is
    // served by the proxy outside, the only way out.
    let (sockets, egress_port) = match req.network {
        // Host directories bound in may hold host daemons' Unix sockets: no socket() then.
        NetworkMode::None if !req.mounts.is_empty() || req.input_dir.is_some() => {
            (SocketPolicy::PairsOnly, None)
        }
        NetworkMode::None => (SocketPolicy::UnixOnly, None),
        NetworkMode::Allowlist { .. } | NetworkMode::Full
            if !req.mounts.is_empty() || req.input_dir.is_some() =>
        {
            (SocketPolicy::InetNoUnix, Some(EGRESS_PORT))
        }
        NetworkMode::Allowlist { .. } | NetworkMode::Full => {
            (SocketPolicy::Inet, Some(EGRESS_PORT))
        }
    };
    if req
        .argv
        .iter()
        .chain(env.keys())
        .chain(env.values())
        .any(|s| s.contains('\0'))
    {
        return Err(NsError::NulByte);
    }
    check_host_path(&host.workspace)?;
    check_host_path(&host.output)?;
    if let Some(input) = &req.input_dir {
        check_host_path(input)?;
    }
    sandboxio_core::mount::check_request(&req.mounts, req.workdir.as_deref())
        .map_err(|e| NsError::InvalidMounts { why: e.to_string() })?;
    for m in &req.mounts {
        check_host_path(&m.host)?;
    }
    let exec = req.allow_exec_in_writable;
    let lim = &req.limits;

    let mut m: Vec<MountOp> = Vec::new();
    let dir = |path: &str, mode: u32| MountOp::Dir {
        path: p(path),
        mode,
    };
    // 1. mount points and directories on the root tmpfs
    for d in [
        "/usr",
        "/etc",
        "/etc/ssl",
        "/etc/ssl/certs",
        "/etc/alternatives",
        "/proc",
    ] {
        m.push(dir(d, 0o755));
    }
    m.push(dir("/dev", 0o755));
    m.push(dir(INSIDE_TMP, 0o1777));
    m.push(dir(INSIDE_WORKSPACE, 0o755));
    m.push(dir(INSIDE_OUTPUT, 0o755));
    if req.input_dir.is_some() {
        m.push(dir(INSIDE_INPUT, 0o755));
    }
    // 2. merged-/usr symlinks
    for (link, target) in [
        ("/bin", "usr/bin"),
        ("/sbin", "usr/sbin"),
        ("/lib", "usr/lib"),
        ("/lib64", "usr/lib64"),
    ] {
        m.push(MountOp::Symlink {
            path: p(link),
            target: p(target),
        });
    }
    // 3. /usr read-only
    m.push(MountOp::Bind {
        source: p("/usr"),
        path: p("/usr"),
        flags: MountFlags::ro(),
        optional: false,
        confined: false,
    });
    // 4. generated /etc
    let file = |path: &str, text: &str| MountOp::File {
        path: p(path),
        source: FileSource::Inline(text.to_string()),
        mode: 0o644,
    };
    m.push(file("/etc/passwd", PASSWD));
    m.push(file("/etc/group", GROUP));
    m.push(file("/etc/hosts", HOSTS));
    m.push(file("/etc/hostname", "sandbox\n"));
    m.push(file(
        "/etc/resolv.conf",
        if egress_port.is_some() {
            RESOLV_EGRESS
        } else {
            RESOLV_NONE
        },
    ));
    m.push(file("/etc/nsswitch.conf", NSSWITCH));
    if egress_port.is_some() {
        m.push(dir("/etc/sandboxio", 0o755));
        m.push(file(NODE_EGRESS_PATH, NODE_EGRESS));
    }
    m.push(MountOp::File {
        path: p("/etc/ld.so.cache"),
        source: FileSource::CopyOf(p("/etc/ld.so.cache")),
        mode: 0o644,
    });
    m.push(MountOp::Bind {
        source: p("/etc/ssl/certs"),
        path: p("/etc/ssl/certs"),
        flags: MountFlags::ro(),
        optional: true,
        confined: false,
    });
    m.push(MountOp::Bind {
        source: p("/etc/alternatives"),
        path: p("/etc/alternatives"),
        flags: MountFlags::ro(),
        optional: true,
        confined: false,
    });
    // 5. minimal /dev
    m.push(MountOp::Tmpfs {
        path: p("/dev"),
        size: DEV_TMPFS_SIZE,
        mode: 0o755,
        flags: MountFlags {
            readonly: false,
            nosuid: true,
            nodev: false,
            noexec: true,
        },
    });
    for dev in ["null", "zero", "full", "random", "urandom", "tty"] {
        let path = format!("/dev/{dev}");
        m.push(MountOp::Bind {
            source: p(&path),
            path: p(&path),
            flags: MountFlags {
                readonly: false,
                nosuid: true,
                nodev: false,
                noexec: true,
            },
            optional: false,
            confined: false,
        });
    }
    m.push(dir("/dev/pts", 0o755));
    m.push(MountOp::Devpts {
        path: p("/dev/pts"),
    });
    m.push(MountOp::Symlink {
        path: p("/dev/ptmx"),
        target: p("pts/ptmx"),
    });
    m.push(dir("/dev/shm", 0o1777));
    m.push(MountOp::Tmpfs {
        path: p("/dev/shm"),
        size: lim.tmp_size.bytes(),
        mode: 0o1777,
        flags: MountFlags::writable(exec),
    });
    for (link, target) in [
        ("/dev/fd", "/proc/self/fd"),
        ("/dev/stdin", "/proc/self/fd/0"),
        ("/dev/stdout", "/proc/self/fd/1"),
        ("/dev/stderr", "/proc/self/fd/2"),
    ] {
        m.push(MountOp::Symlink {
            path: p(link),
            target: p(target),
        });
    }
    // 6. fresh /proc for the new pid namespace, with the usual masks
    m.push(MountOp::Proc { path: p("/proc") });
    for masked in [
        "/proc/kcore",
        "/proc/keys",
        "/proc/timer_list",
        "/proc/sched_debug",
        "/proc/kallsyms",
        "/proc/sysrq-trigger",
    ] {
        m.push(MountOp::MaskWithNull { path: p(masked) });
    }
    for ro in [
        "/proc/sys",
        "/proc/irq",
        "/proc/bus",
        "/proc/fs",
        "/proc/acpi",
    ] {
        m.push(MountOp::ReadOnly { path: p(ro) });
    }
    // 7. writable places
    m.push(MountOp::Tmpfs {
        path: p(INSIDE_TMP),
        size: lim.tmp_size.bytes(),
        mode: 0o1777,
        flags: MountFlags::writable(exec),
    });
    m.push(MountOp::StagedBind {
        which: Staged::Workspace,
        path: p(INSIDE_WORKSPACE),
        flags: MountFlags::writable(exec),
    });
    m.push(MountOp::StagedBind {
        which: Staged::Output,
        path: p(INSIDE_OUTPUT),
        flags: MountFlags::writable(exec),
    });
    // 8. read-only input, opened like a mount (no symlink followed: the gateway checked
    // the resolved path; one swapped in since is refused)
    if let Some(input) = &req.input_dir {
        m.push(MountOp::Bind {
            source: input.clone(),
            path: p(INSIDE_INPUT),
            flags: MountFlags::ro(),
            optional: false,
            confined: true,
        });
    }
    // 9. the caller's mounts, after everything they may sit in (the workspace and /tmp
    // tmpfs mounts), shallowest first; their parents are made on the root, workspace or
    // /tmp tmpfs, never in a host directory (a mount inside another is refused).
    let mut mounts: Vec<&sandboxio_core::Mount> = req.mounts.iter().collect();
    mounts.sort_by_key(|m| m.sandbox.components().count());
    for mnt in &mounts {
        let mut parent = PathBuf::from("/");
        let parents: Vec<_> = mnt.sandbox.components().skip(1).collect();
        for c in parents.iter().take(parents.len().saturating_sub(1)) {
            parent.push(c);
            if !matches!(parent.to_str(), Some(INSIDE_WORKSPACE | INSIDE_TMP)) {
                m.push(MountOp::Dir {
                    path: parent.clone(),
                    mode: 0o755,
                });
            }
        }
        m.push(MountOp::Bind {
            source: mnt.host.clone(),
            path: mnt.sandbox.clone(),
            flags: match mnt.mode {
                MountMode::Ro => MountFlags::ro(),
                MountMode::Rw => MountFlags::writable(exec),
            },
            optional: false,
            confined: true,
        });
    }

    let writable = if exec {
        Access::ReadWriteExec
    } else {
        Access::ReadWrite
    };
    let rule = |path: &str, access| LandlockRule {
        path: p(path),
        access,
    };
    let mut landlock = vec![
        rule("/", Access::ListDir),
        rule("/usr", Access::ReadExec),
        rule("/etc", Access::Read),
        rule("/proc", Access::Read),
        rule("/dev/null", Access::Device),
        rule("/dev/zero", Access::Device),
        rule("/dev/full", Access::Device),
        rule("/dev/random", Access::Device),
        rule("/dev/urandom", Access::Device),
        rule("/dev/tty", Access::Device),
        rule("/dev/pts", Access::Device),
        rule("/dev/shm", writable),
        rule(INSIDE_TMP, writable),
        rule(INSIDE_WORKSPACE, writable),
        rule(INSIDE_OUTPUT, writable),
    ];
    if req.input_dir.is_some() {
        landlock.push(rule(INSIDE_INPUT, Access::Read));
    }
    for mnt in &req.mounts {
        landlock.push(LandlockRule {
            path: mnt.sandbox.clone(),
            access: match mnt.mode {
                MountMode::Ro => Access::ReadExec,
                MountMode::Rw => writable,
            },
        });
    }

    let mut env = env.clone();
    env.entry("PATH".to_string())
        .or_insert_with(|| sandboxio_core::exec::defaults::PATH.to_string());
    env.insert("HOME".to_string(), INSIDE_TMP.to_string());
    env.insert("TMPDIR".to_string(), INSIDE_TMP.to_string());
    env.insert("SANDBOX_OUTPUT".to_string(), INSIDE_OUTPUT.to_string());
    env.insert(
        "SANDBOX_WORKSPACE".to_string(),
        INSIDE_WORKSPACE.to_string(),
    );
    if req.input_dir.is_some() {
        env.insert("SANDBOX_INPUT".to_string(), INSIDE_INPUT.to_string());
    } else {
        env.remove("SANDBOX_INPUT");
    }
    // The proxy variables are the sandbox's own: a caller cannot point them elsewhere.
    for (k, v) in egress_port.map(egress_env).unwrap_or_default() {
        if v.is_empty() {
            env.remove(&k);
        } else {
            env.insert(k, v);
        }
    }
    // Node's `fetch` reads no proxy variable before Node 24: a preload puts it through
    // the proxy (the caller's own NODE_OPTIONS are kept after it).
    if egress_port.is_some() {
        let preload = format!("--require {NODE_EGRESS_PATH}");
        let options = match env.get("NODE_OPTIONS") {
            Some(theirs) if !theirs.is_empty() => format!("{preload} {theirs}"),
            _ => preload,
        };
        env.insert("NODE_OPTIONS".to_string(), options);
    }

    let id_map = format!("0 {DEFAULT_HOST_ID} 1\n");
    Ok(NamespacePlan {
        argv: req.argv.clone(),
        env,
        cwd: req.workdir.clone().unwrap_or_else(|| p(INSIDE_WORKSPACE)),
        hostname: HOSTNAME.to_string(),
        host_uid: DEFAULT_HOST_ID,
        host_gid: DEFAULT_HOST_ID,
        uid_map: id_map.clone(),
        gid_map: id_map,
        root_size: ROOT_TMPFS_SIZE,
        mounts: m,
        workspace_host: host.workspace.clone(),
        workspace_size: lim.tmp_size.bytes(),
        output_host: host.output.clone(),
        output_size: lim.output_size.bytes(),
        sockets,
        seccomp: seccomp::rules_for(sockets),
        landlock,
        landlock_deny_tcp: matches!(sockets, SocketPolicy::UnixOnly | SocketPolicy::PairsOnly),
        egress_port,
        namespaces: NAMESPACES.iter().map(|s| s.to_string()).collect(),
        tty: req.tty,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn host() -> NsHostPaths {
        NsHostPaths {
            workspace: p("/tmp/ws"),
            output: p("/tmp/out"),
        }
    }

    fn plan_for(req: &ExecRequest) -> NamespacePlan {
        plan(req, &host(), &BTreeMap::new()).unwrap()
    }

    fn index(plan: &NamespacePlan, pred: impl Fn(&MountOp) -> bool) -> usize {
        plan.mounts.iter().position(pred).unwrap()
    }

    #[test]
    fn unprivileged_plan_maps_root_to_the_invoking_user_only() {
        let req = ExecRequest::new(["true"]);
        let root = plan_for(&req);
        let user = root.clone().mapped_to_invoking_user(1000, 1001);
        assert_eq!(user.uid_map, "0 1000 1\n");
        assert_eq!(user.gid_map, "0 1001 1\n");
        assert_eq!((user.host_uid, user.host_gid), (1000, 1001));
        // Nothing else changes: same mounts, rules and limits.
        assert_eq!(user.mounts, root.mounts);
        assert_eq!(user.seccomp, root.seccomp);
        assert_eq!(user.landlock, root.landlock);
    }

    #[test]
    fn uid_and_gid_zero_map_to_nobody() {
        let pl = plan_for(&ExecRequest::new(["true"]));
        assert_eq!(pl.uid_map, "0 65534 1\n");
        assert_eq!(pl.gid_map, "0 65534 1\n");
        assert_eq!(pl.namespaces, NAMESPACES.to_vec());
    }

    #[test]
    fn usr_is_read_only_and_etc_is_generated() {
        let pl = plan_for(&ExecRequest::new(["true"]));
        let usr = pl
            .mounts
            .iter()
            .find(|m| matches!(m, MountOp::Bind { path, .. } if path == Path::new("/usr")))
            .unwrap();
        assert!(
            matches!(usr, MountOp::Bind { flags, optional: false, .. } if flags.readonly && flags.nosuid)
        );
        // no bind of the host /etc, only generated files and the certificate directory
        for m in &pl.mounts {
            if let MountOp::Bind { source, .. } = m {
                assert!(
                    !source.starts_with("/etc")
                        || source.starts_with("/etc/ssl/certs")
                        || source == Path::new("/etc/alternatives"),
                    "{source:?}"
                );
                assert!(!source.starts_with("/root") && !source.starts_with("/home"));
            }
        }
        let files: Vec<&Path> = pl
            .mounts
            .iter()
            .filter_map(|m| match m {
                MountOp::File { path, .. } => Some(path.as_path()),
                _ => None,
            })
            .collect();
        for f in [
            "/etc/passwd",
            "/etc/group",
            "/etc/hosts",
            "/etc/resolv.conf",
            "/etc/nsswitch.conf",
            "/etc/ld.so.cache",
        ] {
            assert!(files.contains(&Path::new(f)), "{f}");
        }
    }

    #[test]
    fn mount_points_exist_before_their_mounts_and_proc_masks_follow_proc() {
        let pl = plan_for(&ExecRequest::new(["true"]));
        let dir = |d: &'static str| move |m: &MountOp| matches!(m, MountOp::Dir { path, .. } if path == Path::new(d));
        assert!(
            index(&pl, dir("/usr"))
                < index(
                    &pl,
                    |m| matches!(m, MountOp::Bind { path, .. } if path == Path::new("/usr"))
                )
        );
        let dev = index(
            &pl,
            |m| matches!(m, MountOp::Tmpfs { path, .. } if path == Path::new("/dev")),
        );
        let null = index(
            &pl,
            |m| matches!(m, MountOp::Bind { path, .. } if path == Path::new("/dev/null")),
        );
        let proc = index(&pl, |m| matches!(m, MountOp::Proc { .. }));
        let kcore = index(
            &pl,
            |m| matches!(m, MountOp::MaskWithNull { path } if path == Path::new("/proc/kcore")),
        );
        let sys = index(
            &pl,
            |m| matches!(m, MountOp::ReadOnly { path } if path == Path::new("/proc/sys")),
        );
        assert!(dev < null && null < proc && proc < kcore && proc < sys);
    }

    #[test]
    fn writable_places_are_noexec_unless_allowed() {
        let pl = plan_for(&ExecRequest::new(["true"]));
        let writable: Vec<MountFlags> = pl
            .mounts
            .iter()
            .filter_map(|m| match m {
                MountOp::Tmpfs { path, flags, .. } if path != Path::new("/dev") => Some(*flags),
                MountOp::StagedBind { flags, .. } => Some(*flags),
                _ => None,
            })
            .collect();
        assert_eq!(writable.len(), 4); // /dev/shm, /tmp, workspace, output
        assert!(writable
            .iter()
            .all(|f| f.noexec && f.nosuid && f.nodev && !f.readonly));
        let mut req = ExecRequest::new(["true"]);
        req.allow_exec_in_writable = true;
        let pl = plan_for(&req);
        assert!(pl
            .mounts
            .iter()
            .all(|m| !matches!(m, MountOp::StagedBind { flags, .. } if flags.noexec)));
    }

    #[test]
    fn input_is_read_only_and_sandbox_paths_are_in_env() {
        let mut req = ExecRequest::new(["true"]);
        req.input_dir = Some(p("/data/in"));
        let pl = plan_for(&req);
        assert!(pl.mounts.iter().any(|m| matches!(m, MountOp::Bind { source, path, flags, .. }
            if source == Path::new("/data/in") && path == Path::new(INSIDE_INPUT) && flags.readonly)));
        assert_eq!(pl.env["SANDBOX_INPUT"], INSIDE_INPUT);
        assert_eq!(pl.env["SANDBOX_OUTPUT"], INSIDE_OUTPUT);
        assert_eq!(pl.cwd, p(INSIDE_WORKSPACE));
        assert!(pl
            .landlock
            .iter()
            .any(|r| r.path == p(INSIDE_INPUT) && r.access == Access::Read));
    }

    #[test]
    fn mounts_come_last_ro_by_default_with_parents_on_tmpfs_and_rules() {
        let mut req = ExecRequest::new(["true"]);
        let cwd = Path::new("/");
        req.mounts = vec![
            sandboxio_core::Mount::parse("/h/deep:/a/b/c:rw", cwd).unwrap(),
            sandboxio_core::Mount::parse("/h/src:/project", cwd).unwrap(),
            sandboxio_core::Mount::parse("/h/data:/workspace/data", cwd).unwrap(),
        ];
        req.workdir = Some(p("/project"));
        let pl = plan_for(&req);
        assert_eq!(pl.cwd, p("/project"));
        let binds: Vec<(usize, &MountOp)> = pl
            .mounts
            .iter()
            .enumerate()
            .filter(|(_, m)| matches!(m, MountOp::Bind { confined: true, .. }))
            .collect();
        assert_eq!(binds.len(), 3);
        // After every mount the sandbox makes itself (the workspace and /tmp above all).
        let last_own = pl
            .mounts
            .iter()
            .rposition(|m| {
                !matches!(
                    m,
                    MountOp::Bind { confined: true, .. } | MountOp::Dir { .. }
                )
            })
            .unwrap();
        assert!(binds.iter().all(|(i, _)| *i > last_own));
        // Shallowest first; ro unless asked; rw is nosuid, nodev and noexec.
        let by_path = |t: &str| {
            binds
                .iter()
                .find_map(|(_, m)| match m {
                    MountOp::Bind {
                        path,
                        flags,
                        source,
                        ..
                    } if path == Path::new(t) => Some((source.clone(), *flags)),
                    _ => None,
                })
                .unwrap()
        };
        assert_eq!(by_path("/project"), (p("/h/src"), MountFlags::ro()));
        let (_, rw) = by_path("/a/b/c");
        assert!(!rw.readonly && rw.nosuid && rw.nodev && rw.noexec);
        // Parents are made on the root tmpfs, never for the workspace or /tmp themselves.
        let dirs: Vec<&Path> = pl.mounts[last_own..]
            .iter()
            .filter_map(|m| match m {
                MountOp::Dir { path, .. } => Some(path.as_path()),
                _ => None,
            })
            .collect();
        assert_eq!(dirs, vec![Path::new("/a"), Path::new("/a/b")]);
        assert!(pl
            .landlock
            .iter()
            .any(|r| r.path == p("/project") && r.access == Access::ReadExec));
        assert!(pl
            .landlock
            .iter()
            .any(|r| r.path == p("/a/b/c") && r.access == Access::ReadWrite));
    }

    #[test]
    fn reserved_nested_and_relative_mounts_are_refused() {
        let cwd = Path::new("/");
        for (spec, workdir) in [
            ("/h:/proc/x", None),
            ("/h:/output", None),
            ("/h:/dev", None),
            ("/h:/p", Some("/etc")),
        ] {
            let mut req = ExecRequest::new(["true"]);
            req.mounts = vec![sandboxio_core::Mount::parse(spec, cwd).unwrap()];
            req.workdir = workdir.map(p);
            let e = plan(&req, &host(), &BTreeMap::new()).unwrap_err();
            assert!(matches!(e, NsError::InvalidMounts { .. }), "{spec}: {e}");
        }
        let mut req = ExecRequest::new(["true"]);
        req.mounts = vec![sandboxio_core::Mount {
            host: p("/h/../etc"),
            sandbox: p("/p"),
            mode: MountMode::Rw,
        }];
        assert!(plan(&req, &host(), &BTreeMap::new()).is_err());
    }

    #[test]
    fn with_network_node_gets_the_fetch_preload_and_keeps_its_own_options() {
        let mut req = ExecRequest::new(["node"]);
        req.env
            .insert("NODE_OPTIONS".into(), "--max-old-space-size=64".into());
        let none = plan(&req, &host(), &req.env).unwrap();
        assert_eq!(
            none.env.get("NODE_OPTIONS").map(String::as_str),
            Some("--max-old-space-size=64")
        );
        assert!(!none.mounts.iter().any(|m| matches!(m,
            MountOp::File { path, .. } if path == Path::new(NODE_EGRESS_PATH))));
        req.network = NetworkMode::Full;
        let full = plan(&req, &host(), &req.env).unwrap();
        assert_eq!(
            full.env.get("NODE_OPTIONS").map(String::as_str),
            Some("--require /etc/sandboxio/node-egress.js --max-old-space-size=64")
        );
        assert!(full.mounts.iter().any(|m| matches!(m,
            MountOp::File { path, source: FileSource::Inline(text), .. }
                if path == Path::new(NODE_EGRESS_PATH) && text.contains("undici.globalDispatcher"))));
        req.env.remove("NODE_OPTIONS");
        let bare = plan(&req, &host(), &req.env).unwrap();
        assert_eq!(
            bare.env.get("NODE_OPTIONS").map(String::as_str),
            Some("--require /etc/sandboxio/node-egress.js")
        );
    }

    #[test]
    fn network_keeps_loopback_only_and_points_at_the_egress_listener() {
        let mut req = ExecRequest::new(["true"]);
        req.env
            .insert("HTTPS_PROXY".into(), "http://attacker.example:1".into());
        req.network = NetworkMode::Full;
        let full = plan(&req, &host(), &req.env).unwrap();
        assert_eq!(full.egress_port, Some(EGRESS_PORT));
        assert_eq!(full.sockets, SocketPolicy::Inet);
        assert_eq!(
            full.env.get("HTTPS_PROXY").map(String::as_str),
            Some("http://127.0.0.1:3128")
        );
        assert_eq!(
            full.env.get("http_proxy").map(String::as_str),
            Some("http://127.0.0.1:3128")
        );
        req.network = NetworkMode::Allowlist {
            allow: vec!["pypi.org:443".into()],
        };
        let allow = plan_for(&req);
        assert_eq!(allow.egress_port, Some(EGRESS_PORT));
        assert!(allow.mounts.iter().any(|m| matches!(m,
            MountOp::File { path, source: FileSource::Inline(t), .. }
                if path == &p("/etc/resolv.conf") && !t.contains("nameserver"))));
        req.network = NetworkMode::None;
        let none = plan_for(&req);
        assert_eq!(none.egress_port, None);
        assert!(!none.env.contains_key("HTTPS_PROXY"));
        assert_eq!(none.sockets, SocketPolicy::UnixOnly);
        // Host directories bound in: no socket() at all (a host daemon's socket in one).
        let mut mounted = req.clone();
        mounted.mounts =
            vec![sandboxio_core::Mount::parse("/srv/p:/p", std::path::Path::new("/")).unwrap()];
        assert_eq!(plan_for(&mounted).sockets, SocketPolicy::PairsOnly);
        let mut input = req.clone();
        input.input_dir = Some(p("/srv/in"));
        assert_eq!(plan_for(&input).sockets, SocketPolicy::PairsOnly);
        // With network too: the network families, still no AF_UNIX socket().
        mounted.network = NetworkMode::Full;
        let with_net = plan_for(&mounted);
        assert_eq!(with_net.sockets, SocketPolicy::InetNoUnix);
        assert!(
            !with_net.landlock_deny_tcp,
            "the egress proxy is reached over TCP"
        );
    }

    #[test]
    fn bad_inputs_are_rejected() {
        assert!(matches!(
            plan(
                &ExecRequest::new(Vec::<String>::new()),
                &host(),
                &BTreeMap::new()
            ),
            Err(NsError::EmptyArgv)
        ));
        let mut req = ExecRequest::new(["true"]);
        req.input_dir = Some(p("relative"));
        assert!(matches!(
            plan(&req, &host(), &BTreeMap::new()),
            Err(NsError::InvalidPath { .. })
        ));
        req.input_dir = Some(p("/a/../etc"));
        assert!(matches!(
            plan(&req, &host(), &BTreeMap::new()),
            Err(NsError::InvalidPath { .. })
        ));
    }

    #[test]
    fn plan_round_trips_through_json() {
        let pl = plan_for(&ExecRequest::new(["true"]));
        let back: NamespacePlan =
            serde_json::from_slice(&serde_json::to_vec(&pl).unwrap()).unwrap();
        assert_eq!(pl, back);
    }
}
