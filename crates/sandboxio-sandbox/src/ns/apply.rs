//! Applying a `NamespacePlan`: the only syscall code of the namespace tier.
//!
//! Fixed order:
//! 0. helper not root: a user namespace of its own first (identity-mapped), so that every
//!    step below runs with the capabilities it needs, and the sandbox's root maps to the
//!    invoking user (the only id it may map); root skips this;
//! 1. helper (single-threaded): private mount namespace for itself, staging
//!    tmpfs for workspace and output, bind sources opened as O_PATH fds, pipes;
//! 2. `clone(NEWUSER|NEWNS|NEWPID|NEWNET|NEWIPC|NEWUTS)`; the helper writes uid_map/gid_map,
//!    runs the caller's attach hook (cgroups), then releases the child;
//! 3. init (pid 1 inside): PDEATHSIG, setresgid/setgroups/setresuid to 0, cgroup namespace,
//!    hostname, rprivate, new root on tmpfs, mounts, pivot_root, detach old root, read-only
//!    root, close stray fds, fork the payload, drop its own capabilities, reap everything and
//!    report the payload's wait status, then exit (which kills whatever is left);
//! 4. payload: signals reset, setsid, rlimits, chdir, no_new_privs, Landlock, securebits,
//!    bounding/ambient/effective/permitted/inheritable capabilities to zero, close fds,
//!    seccomp last, execve.

use std::ffi::{CStr, CString};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sandboxio_core::{Enforcement, ExitStatus, IsolationTier};

use super::error::NsError;
use super::landlock;
use super::plan::{FileSource, MountFlags, MountOp, NamespacePlan, Staged};
use super::report::Report;
use super::restriction::{self, HostFacts, Step as RestrictedStep};
use super::root_ops::{RootOps, Sys};
use super::seccomp::{self, SockFilter};
use crate::error::SandboxError;
use crate::stage::Stage;
use crate::sys;
use crate::sys::proc::CStrArray;

/// Limits applied with setrlimit in the payload: (resource, value). Only ever lowered.
pub type Rlimits = Vec<(libc::__rlimit_resource_t, u64)>;

/// The framework's rlimit plan as the list the payload applies (pure).
pub fn rlimits_from(r: &crate::plan::RlimitPlan) -> Rlimits {
    let mut out: Rlimits = vec![(libc::RLIMIT_CORE, r.core)];
    for (res, v) in [
        (libc::RLIMIT_CPU, r.cpu_seconds),
        (libc::RLIMIT_DATA, r.data),
        (libc::RLIMIT_FSIZE, r.file_size),
        (libc::RLIMIT_NOFILE, r.open_files),
        (libc::RLIMIT_NPROC, r.nproc),
    ] {
        if let Some(v) = v {
            out.push((res, v));
        }
    }
    out
}

/// The plan's namespace section, which `ns::plan` fills; a plan without one is refused.
pub(super) fn namespace_section(
    plan: &crate::plan::SandboxPlan,
) -> Result<&NamespacePlan, SandboxError> {
    plan.tier.namespace().ok_or(SandboxError::UnsupportedTier {
        tier: plan.tier.tier(),
        why: "the namespace launcher was given a plan of another tier",
    })
}

/// The helper's entry for the namespace tier: `plan.tier` must be `TierPlan::Namespace`.
/// See [`spawn`] for `attach`.
///
/// With `into_cgroup` (an open cgroup2 directory), the init is cloned straight into that
/// cgroup (`clone3` + `CLONE_INTO_CGROUP`, no migration); `attach` is told whether that
/// worked (`false`: the kernel refused clone3, the init must be attached like the rest).
pub fn spawn_plan<F>(
    plan: &crate::plan::SandboxPlan,
    into_cgroup: Option<RawFd>,
    self_join: &[(OwnedFd, CString)],
    egress: Option<RawFd>,
    attach: F,
) -> Result<NsChild, SandboxError>
where
    F: FnOnce(libc::pid_t, bool) -> Result<(), SandboxError>,
{
    let ns = namespace_section(plan)?;
    if ns.egress_port.is_some() && egress.is_none() {
        return Err(NsError::EgressListener {
            step: "the helper was given no socket to hand the listener over",
            source: io::Error::from_raw_os_error(libc::EBADF),
        }
        .into());
    }
    let cgroups = CgroupEntry {
        into: into_cgroup,
        self_join,
    };
    spawn_with(ns, rlimits_from(&plan.rlimits), cgroups, egress, attach)
}

/// The running sandbox, from the helper's side.
pub struct NsChild {
    pid: libc::pid_t,
    /// What `Enforcement.network` says.
    network: String,
    report: OwnedFd,
    staging: Staging,
    output_host: PathBuf,
    /// `limits.output_size`: the most data bytes copy-out writes to the host.
    output_cap: u64,
    namespaces: Vec<String>,
    limits: Vec<String>,
    /// The helper's uid when it is not root (the sandbox's root maps to it).
    unprivileged: Option<u32>,
}

/// How the payload ended and what was enforced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NsOutcome {
    /// `None` when the init was killed before the payload finished (timeout, cancel).
    pub exit: Option<ExitStatus>,
    /// Tier, namespaces, Landlock ABI, seccomp, no_new_privs, network, gaps.
    /// Cgroup fields are left for the caller.
    pub enforcement: Enforcement,
    /// Files and bytes copied to the host output directory.
    pub output_files: u64,
    pub output_bytes: u64,
    /// The program ran, but its output could not be copied out (a cap, a full disk):
    /// nothing of it is on the host. The run's own results stand.
    pub copy_error: Option<sandboxio_core::CopyOutError>,
}

fn io_err() -> io::Error {
    io::Error::last_os_error()
}

fn errno() -> i32 {
    io_err().raw_os_error().unwrap_or(libc::EIO)
}

fn cstr(p: &Path) -> Result<CString, NsError> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| NsError::NulByte)
}

/// Size-capped tmpfs directories in the helper's private mount namespace.
pub(super) struct Staging {
    base: PathBuf,
    root: PathBuf,
    pub(super) workspace: PathBuf,
    pub(super) output: PathBuf,
    mounted: Vec<PathBuf>,
}

impl Staging {
    fn create(plan: &NamespacePlan) -> Result<Staging, NsError> {
        // A tmpfs when the host has one (`/dev/shm`): no journal work for the base mkdir/rmdir.
        let tmp = crate::config::default_work_root();
        // The owner (this helper) is in the name: see crate::sweep.
        let base = tmp.join(format!(
            "{}{}",
            crate::sweep::owned_prefix(STAGING_PREFIX),
            hex::encode(rand::random::<[u8; 8]>())
        ));
        let st = |path: &Path, source| NsError::Staging {
            path: path.to_path_buf(),
            source,
        };
        // 0711: the sandbox user may traverse (to reach its root) but not list.
        std::fs::DirBuilder::new()
            .mode(0o711)
            .create(&base)
            .map_err(|e| st(&base, e))?;
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o711))
            .map_err(|e| st(&base, e))?;
        let mut s = Staging {
            root: base.join("root"),
            workspace: base.join("workspace"),
            output: base.join("output"),
            base,
            mounted: Vec::new(),
        };
        // A small tmpfs on the base: the three mount points below live in memory, so the
        // host filesystem sees one mkdir and one rmdir per run (on a busy ext4 each costs
        // milliseconds), and teardown is one lazy unmount of the whole tree.
        let base = s.base.clone();
        s.mount(&base, "size=64k,nr_inodes=16,mode=0711")?;
        for d in [&s.root, &s.workspace, &s.output] {
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(d)
                .map_err(|e| st(d, e))?;
        }
        let ws = s.workspace.clone();
        s.mount_tmpfs(&ws, plan.workspace_size, plan.host_uid, plan.host_gid)?;
        let out = s.output.clone();
        s.mount_tmpfs(&out, plan.output_size, plan.host_uid, plan.host_gid)?;
        Ok(s)
    }

    fn mount_tmpfs(&mut self, dir: &Path, size: u64, uid: u32, gid: u32) -> Result<(), NsError> {
        self.mount(
            dir,
            &format!(
                "size={size},nr_inodes={},mode=0755,uid={uid},gid={gid}",
                super::plan::TMPFS_INODES
            ),
        )
    }

    /// A new size for the staged tmpfs at `dir` (one of ours); the inode cap stays.
    pub(super) fn resize(&self, dir: &Path, size: u64) -> Result<(), NsError> {
        let target = cstr(dir)?;
        let data = CString::new(format!(
            "size={size},nr_inodes={}",
            super::plan::TMPFS_INODES
        ))
        .map_err(|_| NsError::NulByte)?;
        sys::fs::mount(
            Some(c"tmpfs"),
            &target,
            Some(c"tmpfs"),
            libc::MS_REMOUNT | libc::MS_NOSUID | libc::MS_NODEV,
            Some(&data),
        )
        .map_err(|e| NsError::StagingMount {
            path: dir.to_path_buf(),
            source: io::Error::from_raw_os_error(e),
        })
    }

    fn mount(&mut self, dir: &Path, data: &str) -> Result<(), NsError> {
        let target = cstr(dir)?;
        let data = CString::new(data).map_err(|_| NsError::NulByte)?;
        sys::fs::mount(
            Some(c"tmpfs"),
            &target,
            Some(c"tmpfs"),
            libc::MS_NOSUID | libc::MS_NODEV,
            Some(&data),
        )
        .map_err(|e| NsError::StagingMount {
            path: dir.to_path_buf(),
            source: io::Error::from_raw_os_error(e),
        })?;
        self.mounted.push(dir.to_path_buf());
        Ok(())
    }

    fn teardown(&mut self) {
        // The first mount is the base tmpfs: a lazy unmount of it detaches the whole
        // staging tree at once (MNT_DETACH is recursive).
        if let Some(first) = self.mounted.first().cloned() {
            self.mounted.clear();
            if let Ok(c) = cstr(&first) {
                // A path we mounted; MNT_DETACH never blocks.
                let _ = sys::fs::umount2(&c, libc::MNT_DETACH);
            }
        }
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// Prefix of the helper's staging directories under the work root (see
/// `config::default_work_root`: the temp dir, or `/dev/shm` when only that is a tmpfs).
pub const STAGING_PREFIX: &str = crate::sweep::STAGING_PREFIX;

/// Removes what killed supervisors and helpers left under the temp dir and the default
/// work root: workspaces and staging directories whose owner process is gone (see
/// [`crate::sweep`]); a directory of a live process is never touched. Names without an
/// owner (older versions) are removed once older than `older_than`. Returns how many
/// were removed.
pub fn cleanup_stale_staging(older_than: std::time::Duration) -> usize {
    let roots = vec![std::env::temp_dir(), crate::config::default_work_root()];
    crate::sweep::sweep(&roots, older_than).len()
}

/// `err` unless the host's settings explain `errno` at `step`: then the restriction, with
/// its own code and fix.
pub(crate) fn restricted(step: RestrictedStep, errno: i32, err: NsError) -> NsError {
    match restriction::diagnose(step, errno, &HostFacts::read()) {
        Some(restriction) => NsError::HostRestricted {
            restriction,
            step,
            errno,
        },
        None => err,
    }
}

/// Non-root only: the helper first creates a user namespace of its own, identity-mapped to
/// its uid and gid (host files keep their owners), which gives it the capabilities the
/// next steps need: its private mount namespace, the staging tmpfs, and the id maps of the
/// sandbox's own user namespace (nested in this one). Root skips this step.
fn enter_own_user_namespace(uid: u32, gid: u32) -> Result<(), NsError> {
    // The helper is single-threaded, as CLONE_NEWUSER requires.
    if let Err(e) = sys::proc::unshare(libc::CLONE_NEWUSER) {
        let source = io::Error::from_raw_os_error(e);
        return Err(restricted(
            RestrictedStep::CreateUserNamespace,
            e,
            NsError::HelperUserNamespace {
                file: "unshare",
                source,
            },
        ));
    }
    // setgroups must be denied before an unprivileged process may write its gid_map.
    for (file, text) in [
        ("setgroups", "deny".to_string()),
        ("uid_map", format!("{uid} {uid} 1\n")),
        ("gid_map", format!("{gid} {gid} 1\n")),
    ] {
        if let Err(source) = std::fs::write(format!("/proc/self/{file}"), text.as_bytes()) {
            let e = source.raw_os_error().unwrap_or(0);
            return Err(restricted(
                RestrictedStep::UseUserNamespace,
                e,
                NsError::HelperUserNamespace { file, source },
            ));
        }
    }
    Ok(())
}

/// Enters a private mount namespace for the helper itself, so staging mounts never reach
/// the host and vanish with the helper even if it is killed.
fn private_mount_namespace() -> Result<(), NsError> {
    // Affects only this (single-threaded) process.
    if let Err(e) = sys::proc::unshare(libc::CLONE_NEWNS) {
        let source = io::Error::from_raw_os_error(e);
        return Err(restricted(
            RestrictedStep::UseUserNamespace,
            e,
            NsError::HelperMountNamespace { source },
        ));
    }
    // Remounts propagation of our own namespace.
    sys::fs::mount(None, c"/", None, libc::MS_REC | libc::MS_PRIVATE, None).map_err(|e| {
        NsError::HelperMountNamespace {
            source: io::Error::from_raw_os_error(e),
        }
    })
}

/// Limits and bookkeeping of one tree copy (workspace in, output out).
///
/// The output tmpfs caps *allocated blocks* and inodes, not what a naive copy writes on the
/// host: a sparse file costs no blocks inside but its whole apparent size when copied
/// densely, and a file hard-linked N times costs one inode inside but N copies outside. So:
/// - sparse files stay sparse (only `SEEK_DATA` extents are written; the size is set with
///   `ftruncate`), and every data byte written counts against `max_bytes`;
/// - an inode with several links is copied once; its other names become hard links to the
///   first copy (same tree on the host), costing an entry, not bytes;
/// - every name created counts against `max_entries` (links cost no inode inside, so this
///   bounds a directory stuffed with millions of links);
/// - everything created is remembered, so a failed copy can be rolled back
///   ([`CopyBudget::rollback`]): the caller never leaves a partial output that looks whole.
struct CopyBudget {
    max_bytes: Option<u64>,
    max_entries: Option<u64>,
    bytes: u64,
    files: u64,
    entries: u64,
    /// The first copy of each multiply-linked inode, relative to the destination's root.
    links: std::collections::HashMap<(u64, u64), PathBuf>,
    /// What this copy created, relative to the destination's root (`true`: a directory).
    created: Vec<(PathBuf, bool)>,
    /// The destination, for a rollback after the copy returned.
    dst: Option<super::dst::Dst>,
}

impl CopyBudget {
    fn new(max_bytes: Option<u64>, max_entries: Option<u64>) -> Self {
        CopyBudget {
            max_bytes,
            max_entries,
            bytes: 0,
            files: 0,
            entries: 0,
            links: std::collections::HashMap::new(),
            created: Vec::new(),
            dst: None,
        }
    }

    fn take_entry(&mut self, path: &Path) -> Result<(), NsError> {
        if let Some(max) = self.max_entries {
            if self.entries >= max {
                return Err(NsError::OutputTooLarge {
                    path: path.to_path_buf(),
                    what: "entries",
                    limit: max,
                });
            }
        }
        self.entries += 1;
        Ok(())
    }

    fn take_bytes(&mut self, n: u64, path: &Path) -> Result<(), NsError> {
        let total = self.bytes.saturating_add(n);
        if let Some(max) = self.max_bytes {
            if total > max {
                return Err(NsError::OutputTooLarge {
                    path: path.to_path_buf(),
                    what: "bytes",
                    limit: max,
                });
            }
        }
        self.bytes = total;
        Ok(())
    }

    /// Removes everything this copy created, newest first (files and links before the
    /// directories holding them), found from the destination's root without following any
    /// link. Best effort: the error that caused it is what is reported.
    fn rollback(&mut self) {
        let Some(dst) = self.dst.take() else {
            return;
        };
        self.rollback_in(&dst);
    }

    fn rollback_in(&mut self, dst: &super::dst::Dst) {
        for (rel, is_dir) in self.created.drain(..).rev() {
            let _ = dst.remove(&rel, is_dir);
        }
    }
}

/// Copies a tree without following symlinks (symlinks and special files are skipped),
/// giving every entry to `owner` when set. See [`CopyBudget`] for sparse files, hard links
/// and the caps. Iterative (a work list, not recursion): a sandbox can make its output
/// thousands of directories deep, which must not overflow the helper's stack. Both sides
/// are walked by descriptor from their roots ([`super::src::Src`], [`super::dst::Dst`]):
/// no name is read, created or opened through a symlink, the source's root included (the
/// landlock tier's output directory is in the program's own workspace, where the program
/// can put a symlink in its place).
fn copy_tree(
    src: &Path,
    dst: &super::dst::Dst,
    owner: Option<(u32, u32)>,
    wrap: &dyn Fn(PathBuf, io::Error) -> NsError,
    budget: &mut CopyBudget,
) -> Result<(), NsError> {
    use super::dst::Dst;
    use super::src::{Hint, Src};
    use std::os::unix::fs::MetadataExt;
    let source = Src::open(src).map_err(|e| wrap(src.to_path_buf(), e))?;
    let mut work = vec![PathBuf::new()];
    while let Some(rel) = work.pop() {
        let listed = |e| wrap(source.path_of(&rel), e);
        let from_dir = source.dir(&rel).map_err(listed)?;
        let dir = dst.dir(&rel).map_err(|e| wrap(dst.path_of(&rel), e))?;
        for (name, hint) in Src::entries(from_dir.as_fd()).map_err(listed)? {
            let to = rel.join(&name);
            let from = source.path_of(&to);
            let host = |e| wrap(dst.path_of(&to), e);
            let hint = match hint {
                Hint::Unknown => {
                    Src::look(from_dir.as_fd(), &name).map_err(|e| wrap(from.clone(), e))?
                }
                h => h,
            };
            match hint {
                Hint::Dir => {
                    // Still a directory (not a symlink put in its place since the listing)?
                    // It is reopened from the root, through no symlink, when its turn comes.
                    if Src::open_dir(from_dir.as_fd(), &name)
                        .map_err(|e| wrap(from.clone(), e))?
                        .is_none()
                    {
                        continue;
                    }
                    budget.take_entry(&from)?;
                    let made = Dst::mkdir(dir.as_fd(), &name, 0o755).map_err(host)?;
                    budget.created.push((to.clone(), true));
                    if let Some((u, g)) = owner {
                        std::os::unix::fs::fchown(&made, Some(u), Some(g))
                            .map_err(|e| wrap(dst.path_of(&to), e))?;
                    }
                    work.push(to);
                }
                Hint::File => {
                    let Some((r, meta)) = Src::open_file(from_dir.as_fd(), &name)
                        .map_err(|e| wrap(from.clone(), e))?
                    else {
                        continue;
                    };
                    budget.take_entry(&from)?;
                    let key = (meta.dev(), meta.ino());
                    if meta.nlink() > 1 {
                        if let Some(first) = budget.links.get(&key) {
                            dst.link(first, dir.as_fd(), &name).map_err(host)?;
                            budget.created.push((to, false));
                            continue;
                        }
                    }
                    let w = Dst::create(dir.as_fd(), &name, meta.permissions().mode() & 0o755)
                        .map_err(|e| wrap(dst.path_of(&to), e))?;
                    budget.created.push((to.clone(), false));
                    copy_sparse(&r, &w, meta.len(), &from, wrap, budget)?;
                    if let Some((u, g)) = owner {
                        std::os::unix::fs::fchown(&w, Some(u), Some(g))
                            .map_err(|e| wrap(dst.path_of(&to), e))?;
                    }
                    if meta.nlink() > 1 {
                        budget.links.insert(key, to);
                    }
                    budget.files += 1;
                }
                Hint::Other | Hint::Unknown => {}
            }
        }
    }
    Ok(())
}

/// Copies the sandbox's output tree to the host, all or nothing: at most `cap` data bytes
/// (0: no byte cap) and [`super::plan::TMPFS_INODES`] names; on any error (a cap included,
/// `SBX_E1470`) every entry this copy created is removed again before the error returns.
/// `dst` must be a path with no symlink in it (a canonical path taken before the run): a
/// component replaced by a symlink since is refused (`ELOOP`), nothing copied.
fn copy_out(src: &Path, dst: &Path, cap: u64) -> Result<CopyBudget, NsError> {
    let mut budget = CopyBudget::new((cap > 0).then_some(cap), Some(super::plan::TMPFS_INODES));
    let wrap = |path, source| NsError::CopyOutput { path, source };
    let root = super::dst::Dst::open(dst)
        .map_err(|e| as_seen_inside(wrap(dst.to_path_buf(), e), src, dst))?;
    match copy_tree(src, &root, None, &wrap, &mut budget) {
        Ok(()) => {
            budget.dst = Some(root);
            Ok(budget)
        }
        Err(e) => {
            budget.rollback_in(&root);
            Err(as_seen_inside(e, src, dst))
        }
    }
}

/// The copy error with its path as the program saw it (`/output/...`): never a host
/// staging or output path.
fn as_seen_inside(e: NsError, src: &Path, dst: &Path) -> NsError {
    let inside = |p: &Path| {
        let rel = p.strip_prefix(src).or_else(|_| p.strip_prefix(dst)).ok();
        match rel {
            Some(r) => Path::new("/output").join(r),
            None => PathBuf::from("/output"),
        }
    };
    match e {
        NsError::CopyOutput { path, source } if source.kind() == io::ErrorKind::AlreadyExists => {
            NsError::OutputExists {
                path: inside(&path),
            }
        }
        NsError::CopyOutput { path, source } => NsError::CopyOutput {
            path: inside(&path),
            source,
        },
        NsError::OutputTooLarge { path, what, limit } => NsError::OutputTooLarge {
            path: inside(&path),
            what,
            limit,
        },
        other => other,
    }
}

/// A copy of `src`'s tree into the existing directory `dst`: directories and regular
/// files (modes without set-id bits; links, hard or symbolic, and special files are left
/// out), at most `max_bytes` data bytes and `max_entries` names, nothing created through a
/// symlink. What a program reads instead of a live directory where what it reads must stay
/// what was approved. Errors name host paths.
pub fn copy_snapshot(
    src: &Path,
    dst: &Path,
    max_bytes: u64,
    max_entries: u64,
) -> Result<(), NsError> {
    let mut budget = CopyBudget::new(Some(max_bytes), Some(max_entries));
    let wrap = |path, source| NsError::CopyOutput { path, source };
    let root = super::dst::Dst::open(dst).map_err(|e| wrap(dst.to_path_buf(), e))?;
    copy_tree(src, &root, None, &wrap, &mut budget)
}

/// Whether the directory holds any entry (a missing or unreadable one holds none).
pub(crate) fn has_entries(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some())
}

/// [`copy_out`] for other tiers: returns (files, bytes) copied.
pub(crate) fn copy_output(src: &Path, dst: &Path, cap: u64) -> Result<(u64, u64), NsError> {
    copy_out(src, dst, cap).map(|b| (b.files, b.bytes))
}

/// `lseek(fd, off, whence)`: `Ok(None)` for ENXIO (no data at or after `off`).
fn seek(fd: BorrowedFd<'_>, off: u64, whence: libc::c_int) -> io::Result<Option<u64>> {
    let off = libc::off_t::try_from(off).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    match sys::fd::lseek(fd, off, whence) {
        Ok(r) => Ok(u64::try_from(r).ok()),
        Err(libc::ENXIO) => Ok(None),
        Err(e) => Err(io::Error::from_raw_os_error(e)),
    }
}

/// Copies the data extents of `r` into `w` (holes stay holes), counting every byte written
/// against the budget, then sets the apparent size. Falls back to a dense copy when the
/// source filesystem does not support `SEEK_DATA` (the bytes still count).
fn copy_sparse(
    r: &std::fs::File,
    w: &std::fs::File,
    size: u64,
    from: &Path,
    wrap: &dyn Fn(PathBuf, io::Error) -> NsError,
    budget: &mut CopyBudget,
) -> Result<(), NsError> {
    use std::os::unix::fs::FileExt;
    let err = |e| wrap(from.to_path_buf(), e);
    let mut buf = vec![0u8; 64 * 1024];
    let mut pos = 0u64;
    while pos < size {
        let (start, end) = match seek(r.as_fd(), pos, libc::SEEK_DATA) {
            Ok(None) => break, // only a hole is left
            Ok(Some(start)) => {
                let end = seek(r.as_fd(), start, libc::SEEK_HOLE)
                    .map_err(err)?
                    .unwrap_or(size);
                (start, end.min(size))
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EOPNOTSUPP)) => {
                (pos, size)
            }
            Err(e) => return Err(err(e)),
        };
        if end <= start {
            break;
        }
        let mut off = start;
        while off < end {
            let want = usize::try_from((end - off).min(buf.len() as u64)).unwrap_or(buf.len());
            let n = r.read_at(&mut buf[..want], off).map_err(err)?;
            if n == 0 {
                break; // the file shrank under us: copy what was there
            }
            budget.take_bytes(n as u64, from)?;
            w.write_all_at(&buf[..n], off)
                .map_err(|e| wrap(from.to_path_buf(), e))?;
            off += n as u64;
        }
        pos = end;
    }
    w.set_len(size).map_err(err)
}

/// What the init needs to build the sandbox, prepared in the helper before clone.
pub(super) struct BaseCtx {
    root: CString,
    /// (op, target under the new root, source fd path for binds, contents for files)
    steps: Vec<Step>,
    hostname: CString,
    root_size: u64,
    /// The helper is not root (its own user namespace denies setgroups to the sandbox's).
    unprivileged: bool,
    /// Set `vm.memfd_noexec = 2` for the sandbox's pid namespace (see `start`).
    memfd_noexec: bool,
    /// Pre-built (warm pool): the plan the base was built from (mapped); the init waits for
    /// its request after pivot_root and builds the payload's part from it.
    base_plan: Option<NamespacePlan>,
}

/// What the payload needs: built in the helper (cold) or in the waiting init once the
/// request is known (pre-built).
pub(super) struct PayloadCtx {
    cwd: CString,
    rlimits: Rlimits,
    landlock: Option<landlock::Prepared>,
    filter: Vec<SockFilter>,
    candidates: Vec<CString>,
    argv: Vec<CString>,
    envp: Vec<CString>,
    program: String,
    /// Stdio is a pseudo-terminal, to become the payload's controlling terminal.
    tty: bool,
}

/// The payload's part of `plan` (pure but for allocation): seccomp filter (with the memfd
/// rule where the sysctl cannot be used), Landlock rules, argv, env, exec candidates.
pub(super) fn payload_ctx(
    plan: &NamespacePlan,
    rlimits: Rlimits,
    memfd_sysctl: bool,
) -> Result<PayloadCtx, NsError> {
    let filter = if memfd_sysctl {
        seccomp::compile(&plan.seccomp)?
    } else {
        let mut rules = plan.seccomp.clone();
        rules.push(seccomp::memfd_rule());
        seccomp::compile(&rules)?
    };
    Ok(PayloadCtx {
        cwd: cstr(&plan.cwd)?,
        rlimits,
        landlock: landlock::prepare(&plan.landlock, plan.landlock_deny_tcp),
        filter,
        candidates: candidates(plan)?,
        argv: plan
            .argv
            .iter()
            .map(|a| CString::new(a.as_bytes()).map_err(|_| NsError::NulByte))
            .collect::<Result<_, _>>()?,
        envp: plan
            .env
            .iter()
            .map(|(k, v)| CString::new(format!("{k}={v}")).map_err(|_| NsError::NulByte))
            .collect::<Result<_, _>>()?,
        program: plan.argv.first().cloned().unwrap_or_default(),
        tty: plan.tty,
    })
}

pub(super) enum Step {
    Dir {
        path: CString,
        mode: u32,
    },
    Symlink {
        path: CString,
        target: CString,
    },
    File {
        path: CString,
        contents: Vec<u8>,
        mode: u32,
    },
    Tmpfs {
        path: CString,
        data: CString,
        flags: libc::c_ulong,
    },
    /// `host` is opened by the init before it changes its ids (so host directory
    /// permissions are checked as the helper's), then bound through `/proc/self/fd`.
    Bind {
        host: CString,
        path: CString,
        flags: libc::c_ulong,
        optional: bool,
        /// See `MountOp::Bind::confined`.
        confined: bool,
    },
    Proc {
        path: CString,
    },
    Devpts {
        path: CString,
    },
    MaskWithNull {
        null: CString,
        path: CString,
    },
    ReadOnly {
        path: CString,
    },
}

fn ms_flags(f: MountFlags) -> libc::c_ulong {
    let mut m = 0;
    if f.readonly {
        m |= libc::MS_RDONLY;
    }
    if f.nosuid {
        m |= libc::MS_NOSUID;
    }
    if f.nodev {
        m |= libc::MS_NODEV;
    }
    if f.noexec {
        m |= libc::MS_NOEXEC;
    }
    m
}

fn under_root(root: &Path, inside: &Path) -> PathBuf {
    root.join(inside.strip_prefix("/").unwrap_or(inside))
}

fn prepare_steps(plan: &NamespacePlan, staging: &Staging) -> Result<Vec<Step>, NsError> {
    steps_under(plan, &staging.root, &staging.workspace, &staging.output)
}

/// The plan's mounts as steps under `root`, staged binds from `workspace` and `output`.
pub(super) fn steps_under(
    plan: &NamespacePlan,
    root: &Path,
    workspace: &Path,
    output: &Path,
) -> Result<Vec<Step>, NsError> {
    let mut steps = Vec::new();
    for op in &plan.mounts {
        let step = match op {
            MountOp::Dir { path, mode } => Step::Dir {
                path: cstr(&under_root(root, path))?,
                mode: *mode,
            },
            MountOp::Symlink { path, target } => Step::Symlink {
                path: cstr(&under_root(root, path))?,
                target: cstr(target)?,
            },
            MountOp::File { path, source, mode } => Step::File {
                path: cstr(&under_root(root, path))?,
                contents: match source {
                    FileSource::Inline(s) => s.as_bytes().to_vec(),
                    // Missing host files (e.g. no ld.so.cache) become empty files.
                    FileSource::CopyOf(p) => std::fs::read(p).unwrap_or_default(),
                },
                mode: *mode,
            },
            MountOp::Tmpfs {
                path,
                size,
                mode,
                flags,
            } => Step::Tmpfs {
                path: cstr(&under_root(root, path))?,
                data: CString::new(format!(
                    "size={size},nr_inodes={},mode={mode:o}",
                    super::plan::TMPFS_INODES
                ))
                .map_err(|_| NsError::NulByte)?,
                flags: ms_flags(*flags),
            },
            MountOp::Bind {
                source,
                path,
                flags,
                optional,
                confined,
            } => Step::Bind {
                host: cstr(source)?,
                path: cstr(&under_root(root, path))?,
                flags: ms_flags(*flags),
                optional: *optional,
                confined: *confined,
            },
            MountOp::StagedBind { which, path, flags } => Step::Bind {
                host: cstr(match which {
                    Staged::Workspace => workspace,
                    Staged::Output => output,
                })?,
                path: cstr(&under_root(root, path))?,
                flags: ms_flags(*flags),
                optional: false,
                confined: false,
            },
            MountOp::Proc { path } => Step::Proc {
                path: cstr(&under_root(root, path))?,
            },
            MountOp::Devpts { path } => Step::Devpts {
                path: cstr(&under_root(root, path))?,
            },
            MountOp::MaskWithNull { path } => Step::MaskWithNull {
                null: cstr(&under_root(root, Path::new("/dev/null")))?,
                path: cstr(&under_root(root, path))?,
            },
            MountOp::ReadOnly { path } => Step::ReadOnly {
                path: cstr(&under_root(root, path))?,
            },
        };
        steps.push(step);
    }
    Ok(steps)
}

/// Resolves `argv[0]` into candidate paths inside the sandbox (execvp order).
fn candidates(plan: &NamespacePlan) -> Result<Vec<CString>, NsError> {
    let prog = plan.argv.first().ok_or(NsError::EmptyArgv)?;
    if prog.contains('/') {
        let p = if prog.starts_with('/') {
            PathBuf::from(prog)
        } else {
            plan.cwd.join(prog)
        };
        return Ok(vec![cstr(&p)?]);
    }
    let path = plan.env.get("PATH").map(String::as_str).unwrap_or("");
    path.split(':')
        .filter(|d| d.starts_with('/'))
        .map(|d| cstr(&Path::new(d).join(prog)))
        .collect()
}

/// Starts the sandbox. Must be called from the single-threaded helper (root, or any user
/// on a host that allows unprivileged user namespaces).
///
/// `attach` runs after the id maps are written and before the sandbox starts its setup,
/// with the host pid of the namespace init: put that pid in the sandbox's cgroups there
/// (the init then enters a cgroup namespace rooted at that cgroup, and everything it starts
/// stays inside). If `attach` fails, the init is killed and reaped.
pub fn spawn<E, F>(plan: &NamespacePlan, rlimits: Rlimits, attach: F) -> Result<NsChild, E>
where
    E: From<NsError>,
    F: FnOnce(libc::pid_t) -> Result<(), E>,
{
    spawn_with(plan, rlimits, CgroupEntry::default(), None, |pid, _| {
        attach(pid)
    })
}

/// How a new init enters the sandbox's cgroups besides the caller's `attach` hook.
#[derive(Default, Clone, Copy)]
pub(super) struct CgroupEntry<'a> {
    /// A cgroup2 directory to clone the init straight into (`clone3` + `CLONE_INTO_CGROUP`).
    pub(super) into: Option<RawFd>,
    /// v1 `tasks` files (open for writing) the init moves itself into by writing "0" as
    /// soon as it is released, before any setup: a thread moving itself skips the kernel
    /// lock whose first taker waits out an RCU grace period (see
    /// `crate::cgroup::self_join_file`). The paths are for the error report.
    pub(super) self_join: &'a [(OwnedFd, CString)],
}

/// [`spawn`], entering cgroups as `cgroups` says; `attach` gets the init's pid and whether
/// the clone into `cgroups.into` worked.
fn spawn_with<E, F>(
    plan: &NamespacePlan,
    rlimits: Rlimits,
    cgroups: CgroupEntry<'_>,
    egress: Option<RawFd>,
    attach: F,
) -> Result<NsChild, E>
where
    E: From<NsError>,
    F: FnOnce(libc::pid_t, bool) -> Result<(), E>,
{
    let started = start(plan, Some(rlimits), cgroups, egress, attach)?;
    Ok(started.into_child(None))
}

/// A started namespace init, from the helper's side (cold: already released into its
/// payload; pre-built: waiting for its request).
pub(super) struct Started {
    pub(super) pid: libc::pid_t,
    pub(super) report: OwnedFd,
    pub(super) staging: Staging,
    /// The plan as applied (mapped to the invoking user when not root).
    pub(super) plan: NamespacePlan,
    pub(super) unprivileged: Option<u32>,
    pub(super) memfd_sysctl: bool,
    /// Pre-built only: where the request goes (write end), and the init's "base built"
    /// byte (read end; EOF without it: the setup failed, see the report).
    pub(super) request: Option<OwnedFd>,
    pub(super) ready: Option<OwnedFd>,
}

impl Started {
    /// The helper's handle of the running sandbox; `real` is the request's plan when it
    /// differs from the one the init was started with (pre-built).
    pub(super) fn into_child(self, real: Option<&NamespacePlan>) -> NsChild {
        let plan = real.unwrap_or(&self.plan);
        NsChild {
            pid: self.pid,
            network: match plan.egress_port {
                Some(port) => format!(
                    "own network namespace, loopback only; egress through the proxy listening at 127.0.0.1:{port}"
                ),
                None => "none".to_string(),
            },
            report: self.report,
            staging: self.staging,
            output_host: plan.output_host.clone(),
            output_cap: plan.output_size,
            namespaces: plan.namespaces.clone(),
            limits: {
                let mut l = plan.enforcement_limits();
                l.push(if self.memfd_sysctl {
                    "memfd: never executable (vm.memfd_noexec=2 in the sandbox's pid namespace)"
                        .to_string()
                } else {
                    "memfd: memfd_create refused by seccomp (kernel without vm.memfd_noexec)"
                        .to_string()
                });
                l
            },
            unprivileged: self.unprivileged,
        }
    }
}

/// Both ways to start the init: with `rlimits` (cold) the payload's part is prepared here
/// and the init runs it as soon as its setup is done; without (pre-built, warm pool) the
/// init builds the base, says so on the `ready` pipe and waits for its request.
pub(super) fn start<E, F>(
    plan: &NamespacePlan,
    rlimits: Option<Rlimits>,
    cgroups: CgroupEntry<'_>,
    egress: Option<RawFd>,
    attach: F,
) -> Result<Started, E>
where
    E: From<NsError>,
    F: FnOnce(libc::pid_t, bool) -> Result<(), E>,
{
    // Fail on a bad plan before any namespace exists.
    seccomp::compile(&plan.seccomp)?;
    candidates(plan)?;

    let (euid, egid) = (sys::proc::geteuid(), sys::proc::getegid());
    let unprivileged = !crate::ids::is_host_root();
    let adapted;
    let plan = if unprivileged {
        enter_own_user_namespace(euid, egid)?;
        adapted = plan.clone().mapped_to_invoking_user(euid, egid);
        &adapted
    } else {
        plan
    };
    // Executable memfds: refused by `vm.memfd_noexec = 2` in the sandbox's pid namespace
    // where the kernel has it and the helper is root of the host (procfs lets only global
    // root write it; the init does, before it changes its ids), else by seccomp.
    let memfd_sysctl = !unprivileged && seccomp::kernel_has_memfd_noexec();
    let payload = match rlimits {
        Some(r) => Some(payload_ctx(plan, r, memfd_sysctl)?),
        None => None,
    };
    private_mount_namespace()?;
    let staging = Staging::create(plan)?;
    if payload.is_some() {
        copy_workspace(plan, &staging)?;
    }
    let base = BaseCtx {
        root: cstr(&staging.root)?,
        steps: prepare_steps(plan, &staging)?,
        hostname: CString::new(plan.hostname.as_bytes()).map_err(|_| NsError::NulByte)?,
        root_size: plan.root_size,
        unprivileged,
        memfd_noexec: memfd_sysctl,
        base_plan: payload.is_none().then(|| plan.clone()),
    };

    let (release_r, release_w) = pipe()?;
    let (report_r, report_w) = pipe()?;
    // Pre-built only: the request pipe (the init reads) and the ready pipe (it writes).
    let (mut req_r, req_w, ready_r, mut ready_w) = if payload.is_none() {
        let ((req_r, req_w), (ready_r, ready_w)) = (pipe()?, pipe()?);
        (Some(req_r), Some(req_w), Some(ready_r), Some(ready_w))
    } else {
        (None, None, None, None)
    };
    let flags = libc::CLONE_NEWUSER
        | libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWNET
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS;
    // Each side takes its ends out of these options: the init in its copy of this frame
    // (which it never returns to), the helper below.
    let (mut release_r, mut release_w) = (Some(release_r), Some(release_w));
    let (mut report_r, mut report_w) = (Some(report_r), Some(report_w));
    // The helper is single-threaded (`fork_child` checks it), so the init may keep running
    // Rust code on its copy of the address space; `init_main` never returns.
    let forked = sys::proc::fork_child(flags, cgroups.into, |_| {
        drop(release_w.take());
        drop(report_r.take());
        let (Some(release), Some(report)) = (release_r.take(), report_w.take()) else {
            sys::proc::exit_now(1)
        };
        let fds = InitFds {
            release,
            report,
            request: req_r.take(),
            ready: ready_w.take(),
        };
        init_main(&base, payload.as_ref(), fds, cgroups.self_join)
    });
    let (pid, cloned_into) = match forked {
        Ok(p) => p,
        Err(e) => {
            return Err(restricted(
                RestrictedStep::CreateUserNamespace,
                e,
                NsError::Clone {
                    source: io::Error::from_raw_os_error(e),
                },
            )
            .into());
        }
    };
    drop(release_r);
    drop(report_w);
    drop((req_r, ready_w));
    let (request, ready) = (req_w, ready_r);
    let (Some(release_w), Some(report_r)) = (release_w, report_r) else {
        // Taken in the init only.
        kill_and_reap(pid);
        return Err(NsError::Pipe {
            source: io::Error::from_raw_os_error(libc::EBADF),
        }
        .into());
    };
    for (file, text) in [("uid_map", &plan.uid_map), ("gid_map", &plan.gid_map)] {
        if let Err(source) = std::fs::write(format!("/proc/{pid}/{file}"), text.as_bytes()) {
            kill_and_reap(pid);
            return Err(NsError::IdMap { pid, file, source }.into());
        }
    }
    // The egress listener exists before the program starts: nothing inside can take its
    // port first, and connections wait in its backlog until the proxy accepts.
    if let (Some(port), Some(to)) = (plan.egress_port, egress) {
        if let Err(e) = super::egress::open_listener(pid, port, to) {
            kill_and_reap(pid);
            return Err(e.into());
        }
    }
    if let Err(e) = attach(pid, cloned_into) {
        kill_and_reap(pid);
        return Err(e);
    }
    let mut w = std::fs::File::from(release_w);
    if let Err(source) = w.write_all(b"g") {
        kill_and_reap(pid);
        return Err(NsError::Release { source }.into());
    }
    drop(w);
    Ok(Started {
        pid,
        report: report_r,
        staging,
        plan: plan.clone(),
        unprivileged: unprivileged.then_some(euid),
        memfd_sysctl,
        request,
        ready,
    })
}

/// Copies the host workspace into the staged workspace tmpfs (which caps it), owned by the
/// sandbox's root as the host sees it.
pub(super) fn copy_workspace(plan: &NamespacePlan, staging: &Staging) -> Result<(), NsError> {
    let mut budget = CopyBudget::new(None, None);
    let wrap = |path, source| NsError::CopyWorkspace { path, source };
    if plan.workspace_host.is_dir() {
        let dst = super::dst::Dst::open_private(&staging.workspace)
            .map_err(|e| wrap(staging.workspace.clone(), e))?;
        copy_tree(
            &plan.workspace_host,
            &dst,
            Some((plan.host_uid, plan.host_gid)),
            &wrap,
            &mut budget,
        )?;
    }
    Ok(())
}

/// SIGKILL and reap our own child (the init): its pid namespace dies with it.
pub(super) fn kill_and_reap(pid: libc::pid_t) {
    let _ = sys::proc::kill(pid, libc::SIGKILL);
    let _ = sys::proc::waitpid(pid);
}

pub(super) fn pipe() -> Result<(OwnedFd, OwnedFd), NsError> {
    sys::fd::pipe().map_err(|e| NsError::Pipe {
        source: io::Error::from_raw_os_error(e),
    })
}

impl NsChild {
    /// Host pid of the namespace init. SIGKILL to it ends the whole sandbox: the kernel
    /// kills every process of a pid namespace when its init dies.
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// The report pipe (readable; EOF once the init and the payload's pre-exec code are
    /// gone). For poll loops; `finish` reads it.
    pub fn report_fd(&self) -> RawFd {
        self.report.as_raw_fd()
    }

    /// Call after the init has been reaped (waitpid by the caller). Reads the report,
    /// copies the output directory to the host (regular files and directories only, never
    /// following symlinks) and removes the staging mounts.
    pub fn finish(mut self) -> Result<NsOutcome, NsError> {
        let mut buf = Vec::new();
        let f = std::fs::File::from(self.report);
        f.take(1 << 20)
            .read_to_end(&mut buf)
            .map_err(|source| NsError::ReadReport { source })?;
        let mut exit = None;
        let mut applied = None;
        let mut failure = None;
        for line in buf.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let r: Report = serde_json::from_slice(line).map_err(|_| NsError::MalformedReport)?;
            match r {
                Report::Exited { code } => exit = Some(ExitStatus::Code(code)),
                Report::Signaled { signal } => exit = Some(ExitStatus::Signal(signal)),
                Report::Applied { .. } => applied = Some(r),
                Report::Setup {
                    stage,
                    target,
                    errno,
                } => {
                    let err = NsError::ChildSetup {
                        stage,
                        target,
                        errno,
                    };
                    failure.get_or_insert(match stage {
                        Stage::MountProc => restricted(RestrictedStep::MountProc, errno, err),
                        Stage::Seccomp => restricted(RestrictedStep::InstallSeccomp, errno, err),
                        _ => err,
                    });
                }
                Report::ExecFailed { program, errno } => {
                    failure.get_or_insert(NsError::Exec { program, errno });
                }
            }
        }
        // Something to copy: the host output directory must still be there as it was (a
        // missing or swapped one is a copy error, never a silent "nothing copied").
        let copied = if has_entries(&self.staging.output) {
            copy_out(&self.staging.output, &self.output_host, self.output_cap)
        } else {
            Ok(CopyBudget::new(None, None))
        };
        self.staging.teardown();
        if let Some(f) = failure {
            if let Ok(mut b) = copied {
                b.rollback();
            }
            return Err(f);
        }
        let (budget, copy_error) = match copied {
            Ok(b) => (b, None),
            Err(e) => (CopyBudget::new(None, None), Some(e.as_copy_out_error())),
        };
        let mut enforcement = Enforcement {
            tier: Some(IsolationTier::Namespace),
            namespaces: self.namespaces.clone(),
            network: self.network.clone(),
            limits: self.limits.clone(),
            ..Enforcement::default()
        };
        match applied {
            Some(Report::Applied {
                landlock_abi,
                seccomp,
                no_new_privs,
                caps_dropped,
            }) => {
                enforcement.landlock_abi = landlock_abi;
                enforcement.seccomp = seccomp;
                enforcement.no_new_privs = no_new_privs;
                if landlock_abi.is_none() {
                    enforcement
                        .gaps
                        .push("landlock unavailable on this kernel".to_string());
                }
                if !caps_dropped {
                    enforcement
                        .gaps
                        .push("capabilities not dropped".to_string());
                }
            }
            _ => enforcement
                .gaps
                .push("the payload never reached exec".to_string()),
        }
        if let Some(uid) = self.unprivileged {
            enforcement.gaps.extend(unprivileged_gaps(uid));
        }
        Ok(NsOutcome {
            exit,
            enforcement,
            output_files: budget.files,
            output_bytes: budget.bytes,
            copy_error,
        })
    }
}

/// What a non-root helper cannot give that a root helper does, in `Enforcement.gaps` words.
fn unprivileged_gaps(uid: u32) -> Vec<String> {
    vec![
        format!(
            "uid: the sandbox's root is the invoking user (host uid {uid}) outside, not an \
             unused uid (an unprivileged user can map only its own ids)"
        ),
        "groups: the invoking user's supplementary groups stay attached (setgroups is \
         denied in an unprivileged user namespace); inside they show as nogroup"
            .to_string(),
    ]
}

// ---- inside the namespaces ----------------------------------------------------------------

fn send(fd: BorrowedFd<'_>, r: &Report) {
    if let Ok(mut line) = serde_json::to_vec(r) {
        line.push(b'\n');
        // One write below PIPE_BUF.
        let _ = sys::fd::write(fd, &line);
    }
}

fn fail(fd: BorrowedFd<'_>, stage: Stage, target: &CStr, err: i32) -> ! {
    send(
        fd,
        &Report::Setup {
            stage,
            target: target.to_string_lossy().into_owned(),
            errno: err,
        },
    );
    // Leaving the child without running the helper's destructors.
    sys::proc::exit_now(1)
}

type StepResult = Result<(), (Stage, i32)>;

/// A sys call's errno as the failure of `stage`.
fn check<T>(r: Result<T, i32>, stage: Stage) -> StepResult {
    r.map(|_| ()).map_err(|e| (stage, e))
}

fn mount(
    src: Option<&CStr>,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
    data: Option<&CStr>,
) -> StepResult {
    check(
        sys::fs::mount(src, target, fstype, flags, data),
        Stage::Mount,
    )
}

/// Flags of the mount at `path` that a remount inside a user namespace must keep
/// (they are locked when inherited from a more privileged namespace).
fn locked_flags(ops: &mut impl RootOps, path: &CStr) -> Result<libc::c_ulong, (Stage, i32)> {
    let f = ops
        .statvfs_flags(path)
        .map_err(|e| (Stage::StatMountSource, e))?;
    let mut m = 0;
    for (st, ms) in [
        (libc::ST_RDONLY, libc::MS_RDONLY),
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ] {
        if f & st != 0 {
            m |= ms;
        }
    }
    Ok(m)
}

/// `mount` through `ops`, failures as `Stage::Mount`.
fn mount_with(
    ops: &mut impl RootOps,
    src: Option<&CStr>,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
    data: Option<&CStr>,
) -> StepResult {
    ops.mount(src, target, fstype, flags, data)
        .map_err(|e| (Stage::Mount, e))
}

/// Binds `source` (recursively) onto `path`, then remounts the bind with `flags` and the
/// flags the kernel locked on it (a remount that dropped a locked flag would fail).
fn bind_with_flags(
    ops: &mut impl RootOps,
    source: &CStr,
    path: &CStr,
    flags: libc::c_ulong,
) -> StepResult {
    mount_with(
        ops,
        Some(source),
        path,
        None,
        libc::MS_BIND | libc::MS_REC,
        None,
    )?;
    let keep = locked_flags(ops, path)?;
    mount_with(
        ops,
        None,
        path,
        None,
        libc::MS_BIND | libc::MS_REMOUNT | flags | keep,
        None,
    )
}

pub(super) fn run_step(
    ops: &mut impl RootOps,
    step: &Step,
    source: Option<&(CString, bool)>,
) -> Result<(), (Stage, i32)> {
    match step {
        Step::Dir { path, mode } => {
            match ops.mkdir(path, *mode) {
                Ok(()) | Err(libc::EEXIST) => {}
                Err(e) => return Err((Stage::Mkdir, e)),
            }
            // mkdir applies the umask; set the exact mode (e.g. 1777 for /tmp).
            ops.chmod(path, *mode).map_err(|e| (Stage::Mkdir, e))
        }
        Step::Symlink { path, target } => {
            ops.symlink(target, path).map_err(|e| (Stage::Symlink, e))
        }
        Step::File {
            path,
            contents,
            mode,
        } => ops
            .write_file(path, contents, *mode, true)
            .map_err(|e| (Stage::WriteFile, e)),
        Step::Tmpfs { path, data, flags } => mount_with(
            ops,
            Some(c"tmpfs"),
            path,
            Some(c"tmpfs"),
            *flags,
            Some(data),
        ),
        Step::Bind {
            path,
            flags,
            confined,
            ..
        } => {
            // No source: an optional host path that does not exist.
            let Some((source, is_dir)) = source else {
                return Ok(());
            };
            if *is_dir && *confined && !ops.exists(path) {
                // A caller's directory mount at a new place: its mount point.
                ops.mkdir(path, 0o755).map_err(|e| (Stage::Mkdir, e))?;
            }
            if !is_dir && !ops.exists(path) {
                // A file needs a file as its mount point.
                ops.write_file(path, &[], 0o644, false)
                    .map_err(|e| (Stage::WriteFile, e))?;
            }
            bind_with_flags(ops, source, path, *flags)?;
            if *confined {
                // The remount above changed the top mount only; a host mount below it
                // (a bind of `/` brings `/proc`, `/sys`, ...) gets the same flags.
                set_attr_recursive(ops, path, *flags)?;
            }
            Ok(())
        }
        Step::Proc { path } => mount_with(
            ops,
            Some(c"proc"),
            path,
            Some(c"proc"),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            None,
        )
        .map_err(|(_, e)| (Stage::MountProc, e)),
        Step::Devpts { path } => mount_with(
            ops,
            Some(c"devpts"),
            path,
            Some(c"devpts"),
            libc::MS_NOSUID | libc::MS_NOEXEC,
            Some(c"newinstance,ptmxmode=0666,mode=0620"),
        ),
        Step::MaskWithNull { null, path } => {
            if !ops.exists(path) {
                return Ok(());
            }
            mount_with(ops, Some(null), path, None, libc::MS_BIND, None)
        }
        Step::ReadOnly { path } => {
            if !ops.exists(path) {
                return Ok(());
            }
            bind_with_flags(ops, path, path, libc::MS_RDONLY)
        }
    }
}

/// Writes `value` to an existing file (a sysctl) in one write.
fn write_small(path: &CStr, value: &[u8]) -> Result<(), i32> {
    let fd = sys::fd::open(path, libc::O_WRONLY | libc::O_CLOEXEC, 0)?;
    let n = sys::fd::write(fd.as_fd(), value);
    let e = errno();
    drop(fd);
    match n {
        Ok(n) if n == value.len() => Ok(()),
        Ok(_) => Err(e),
        Err(e) => Err(e),
    }
}

/// `mount_setattr(2)` attribute bits (linux/mount.h).
const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const MOUNT_ATTR_NOEXEC: u64 = 0x8;

/// Sets the read-only/nosuid/nodev/noexec bits of `flags` on the mount at `path` and every
/// mount below it (`AT_RECURSIVE`), so no submount keeps less than was asked.
fn set_attr_recursive(ops: &mut impl RootOps, path: &CStr, flags: libc::c_ulong) -> StepResult {
    let mut set = 0;
    for (ms, attr) in [
        (libc::MS_RDONLY, MOUNT_ATTR_RDONLY),
        (libc::MS_NOSUID, MOUNT_ATTR_NOSUID),
        (libc::MS_NODEV, MOUNT_ATTR_NODEV),
        (libc::MS_NOEXEC, MOUNT_ATTR_NOEXEC),
    ] {
        if flags & ms != 0 {
            set |= attr;
        }
    }
    ops.mount_setattr_recursive(path, set)
        .map_err(|e| (Stage::Mount, e))
}

/// Opens a bind source as O_PATH (kept open until the init closes its stray fds) and
/// returns its `/proc/self/fd` path and whether it is a directory. A `confined` source
/// (a caller's mount, resolved by the gateway) is opened without following any symlink on
/// the way, so a link swapped into the path since then fails with `ELOOP`.
fn open_source(host: &CStr, confined: bool) -> Result<(CString, bool), i32> {
    let fd = if confined {
        sys::fs::openat2_cwd(
            host,
            (libc::O_PATH | libc::O_CLOEXEC) as u64,
            0,
            libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
        )?
    } else {
        // O_PATH opens without reading.
        sys::fd::open(host, libc::O_PATH | libc::O_CLOEXEC, 0)?
    };
    let st = sys::fd::fstat(fd.as_fd());
    // Left open (until the init closes its stray fds), whatever fstat said.
    let fd = fd.into_raw_fd();
    let is_dir = (st?.st_mode & libc::S_IFMT) == libc::S_IFDIR;
    let path = CString::new(format!("/proc/self/fd/{fd}")).map_err(|_| libc::EINVAL)?;
    Ok((path, is_dir))
}

fn step_target(step: &Step) -> &CStr {
    match step {
        Step::Dir { path, .. }
        | Step::Symlink { path, .. }
        | Step::File { path, .. }
        | Step::Tmpfs { path, .. }
        | Step::Bind { path, .. }
        | Step::Proc { path }
        | Step::Devpts { path }
        | Step::MaskWithNull { path, .. }
        | Step::ReadOnly { path } => path,
    }
}

/// Drops every capability: bounding set, ambient, then effective/permitted/inheritable.
fn drop_capabilities() -> StepResult {
    drop_bounding_set()?;
    crate::caps::clear_ambient().map_err(|e| (Stage::ClearAmbient, e))?;
    crate::caps::zero_sets().map_err(|e| (Stage::CapSet, e))
}

/// Empties the capability bounding set: what any later exec can gain. A capability no
/// longer in it is not dropped again (each drop replaces the credentials), so a process
/// whose parent emptied it (a pre-built init does before it waits) pays one read each.
fn drop_bounding_set() -> StepResult {
    for cap in 0..64 {
        match sys::caps::capbset_read(cap) {
            // Past the last capability this kernel knows.
            Err(_) => break,
            Ok(false) => {}
            Ok(true) => check(sys::caps::capbset_drop(cap), Stage::DropBoundingSet)?,
        }
    }
    Ok(())
}

/// The init's pipes (its own copies; the helper holds the other ends).
struct InitFds {
    release: OwnedFd,
    report: OwnedFd,
    /// Pre-built only: the request arrives here (JSON [`super::prebuilt::Go`], then EOF).
    request: Option<OwnedFd>,
    /// Pre-built only: one byte once the base is built.
    ready: Option<OwnedFd>,
}

/// The init: pid 1 of the new pid namespace. Never returns. Cold (`payload` given): builds
/// the sandbox and forks the payload. Pre-built (`payload` is `None`): builds the base,
/// says so on `fds.ready`, waits for the request on `fds.request`, applies its request-time
/// part and forks the payload built from it.
fn init_main(
    ctx: &BaseCtx,
    payload: Option<&PayloadCtx>,
    fds: InitFds,
    self_join: &[(OwnedFd, CString)],
) -> ! {
    let InitFds {
        release,
        report,
        request,
        ready,
    } = fds;
    let report_fd = report.as_fd();
    let fail_at =
        |(stage, e): (Stage, i32), target: &CStr| -> ! { fail(report_fd, stage, target, e) };
    if let Err(e) = sys::proc::set_parent_death_signal(libc::SIGKILL) {
        fail_at((Stage::SetParentDeathSignal, e), c"");
    }
    let mut b = [0u8; 1];
    if sys::fd::read(release.as_fd(), &mut b) != Ok(1) {
        // The helper died or gave up before releasing us.
        sys::proc::exit_now(1);
    }
    // The release pipe is no longer needed.
    drop(release);
    // Into the sandbox's v1 cgroups first, before anything is allocated or started: this
    // process is single-threaded, so moving its thread moves it.
    for (fd, path) in self_join {
        match sys::fd::write(fd.as_fd(), b"0") {
            Ok(1) => {}
            Err(e) => fail_at((Stage::JoinCgroup, e), path),
            Ok(_) => fail_at((Stage::JoinCgroup, errno()), path),
        }
        // The init never returns, so its copy of the OwnedFd is never dropped: closing the
        // number here is its only close in this process.
        let _ = sys::fd::close_raw(fd.as_raw_fd());
    }
    // The init holds the helper's memory and environment: not dumpable, so the payload
    // (same uid, no capabilities) cannot read /proc/1/environ or /proc/1/mem.
    if let Err(e) = sys::proc::set_dumpable(false) {
        fail_at((Stage::SetDumpable, e), c"");
    }
    // Open bind sources while still holding the helper's host ids.
    let mut sources: Vec<Option<(CString, bool)>> = Vec::with_capacity(ctx.steps.len());
    for step in &ctx.steps {
        let Step::Bind {
            host,
            optional,
            confined,
            ..
        } = step
        else {
            sources.push(None);
            continue;
        };
        match open_source(host, *confined) {
            Ok(s) => sources.push(Some(s)),
            Err(e) if e == libc::ENOENT && *optional => sources.push(None),
            Err(e) => fail_at((Stage::OpenBindSource, e), host),
        }
    }
    // Still global root here (ids not yet changed), as procfs requires for this sysctl; it
    // applies to the pid namespace of the writer, which is the sandbox's.
    if ctx.memfd_noexec {
        let sysctl = c"/proc/sys/vm/memfd_noexec";
        if let Err(e) = write_small(sysctl, b"2") {
            fail_at((Stage::MemfdNoexec, e), sysctl);
        }
    }
    if let Err(e) = init_setup(ctx) {
        fail_at(e, c"setup");
    }
    // Becoming root of the namespace (setresuid/setresgid above) cleared the parent-death
    // signal: the kernel clears it at every change of effective ids. Armed again, then the
    // helper checked for having died in between (its end of the report pipe then closed):
    // a killed helper must take the sandbox with it, not leave it running unsupervised.
    if let Err(e) = sys::proc::set_parent_death_signal(libc::SIGKILL) {
        fail_at((Stage::SetParentDeathSignal, e), c"");
    }
    if sys::fd::peer_closed(report_fd) {
        sys::proc::exit_now(1);
    }
    for (step, source) in ctx.steps.iter().zip(&sources) {
        if let Err(e) = run_step(&mut Sys, step, source.as_ref()) {
            fail_at(e, step_target(step));
        }
    }
    if let Err(e) = enter_root(ctx) {
        fail_at(e, &ctx.root);
    }
    // Only stdio and the report pipe survive in the init (the bind-source fds go too),
    // plus, pre-built, the request and ready pipes.
    close_all_but(&[
        Some(report.as_raw_fd()),
        request.as_ref().map(|fd| fd.as_raw_fd()),
        ready.as_ref().map(|fd| fd.as_raw_fd()),
    ]);
    let built;
    let payload = match (payload, &ctx.base_plan, request, ready) {
        (Some(p), _, _, _) => p,
        (None, Some(base), Some(request), Some(ready)) => {
            // Nothing this init runs may gain a capability by exec: empty the bounding set
            // now, off the request's path (its effective set still does the remounts; the
            // payload clears that and finds the bounding set already empty).
            if let Err(e) = drop_bounding_set() {
                fail_at(e, c"bounding set");
            }
            // One byte to our ready pipe, which we then close.
            let _ = sys::fd::write(ready.as_fd(), b"r");
            drop(ready);
            built = match wait_for_request(base, request, ctx.memfd_noexec) {
                Ok(p) => p,
                Err((stage, e, target)) => fail(report_fd, stage, &target, e),
            };
            &built
        }
        _ => fail_at((Stage::ReadRequest, libc::EINVAL), c"request"),
    };
    // The init is single-threaded (`fork_child` checks it); the child runs `payload_main`,
    // which ends in execve or _exit.
    let child = match sys::proc::fork_child(0, None, |_| payload_main(payload, report_fd)) {
        Ok((pid, _)) => pid,
        Err(e) => fail_at((Stage::Fork, e), c"payload"),
    };
    // The init does not need stdio or capabilities any more (the payload keeps its copies
    // of stdio).
    let _ = sys::fd::close_raw(0);
    let _ = sys::fd::close_raw(1);
    let _ = sys::fd::close_raw(2);
    let _ = sys::proc::set_no_new_privs();
    let _ = drop_capabilities();
    loop {
        let r = sys::proc::wait_any();
        if let Ok((pid, status)) = r {
            if pid != child {
                continue;
            }
            let msg = if libc::WIFSIGNALED(status) {
                Report::Signaled {
                    signal: libc::WTERMSIG(status),
                }
            } else {
                Report::Exited {
                    code: libc::WEXITSTATUS(status),
                }
            };
            send(report_fd, &msg);
            // Exiting kills every process left in the namespace.
            sys::proc::exit_now(0);
        }
        if r == Err(libc::ECHILD) {
            sys::proc::exit_now(1);
        }
    }
}

fn init_setup(ctx: &BaseCtx) -> StepResult {
    // The maps are written, so 0 is mapped.
    check(sys::ids::setresgid(0), Stage::SetResGid)?;
    let rc = sys::ids::setgroups_empty();
    // Denied in a user namespace nested in an unprivileged one (see unprivileged_gaps).
    if !(ctx.unprivileged && rc == Err(libc::EPERM)) {
        check(rc, Stage::SetGroups)?;
    }
    check(sys::ids::setresuid(0), Stage::SetResUid)?;
    check(
        sys::proc::unshare(libc::CLONE_NEWCGROUP),
        Stage::UnshareCgroup,
    )?;
    check(sys::proc::sethostname(&ctx.hostname), Stage::SetHostname)?;
    let rc = mount(None, c"/", None, libc::MS_REC | libc::MS_PRIVATE, None);
    rc.map_err(|(_, e)| (Stage::MakeRootPrivate, e))?;
    let data = CString::new(format!("size={},mode=0755", ctx.root_size))
        .map_err(|_| (Stage::Mount, libc::EINVAL))?;
    mount(
        Some(c"tmpfs"),
        &ctx.root,
        Some(c"tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&data),
    )
}

/// Closes every fd above 2 except those in `keep`.
fn close_all_but(keep: &[Option<RawFd>]) {
    let mut keep: Vec<u32> = keep
        .iter()
        .flatten()
        .filter_map(|fd| u32::try_from(*fd).ok())
        .filter(|fd| *fd > 2)
        .collect();
    keep.sort_unstable();
    let mut from = 3u32;
    for k in keep {
        if k > from {
            // Below a kept fd.
            let _ = sys::fd::close_range(from, k - 1);
        }
        from = k.saturating_add(1);
    }
    // Above every kept fd.
    let _ = sys::fd::close_range(from, u32::MAX);
}

/// Pre-built: blocks until the helper sends the request, then applies its request-time
/// part (remounts of `/tmp`, `/dev/shm`, `/workspace`, `/output`) and prepares the payload.
fn wait_for_request(
    base: &NamespacePlan,
    request: OwnedFd,
    memfd_sysctl: bool,
) -> Result<PayloadCtx, (Stage, i32, CString)> {
    let target = |t: &str| CString::new(t).unwrap_or_default();
    let f = std::fs::File::from(request);
    let mut buf = Vec::new();
    f.take(crate::plan::MAX_PLAN_BYTES as u64)
        .read_to_end(&mut buf)
        .map_err(|e| {
            (
                Stage::ReadRequest,
                e.raw_os_error().unwrap_or(libc::EIO),
                target("request"),
            )
        })?;
    let go: super::prebuilt::Go = serde_json::from_slice(&buf)
        .map_err(|_| (Stage::ReadRequest, libc::EINVAL, target("request")))?;
    if super::prebuilt::mismatch(base, &go.plan).is_some() {
        return Err((Stage::ReadRequest, libc::EINVAL, target("request shape")));
    }
    for r in super::prebuilt::request_time(base, &go.plan).remounts {
        remount(&mut Sys, &r).map_err(|(stage, e)| (stage, e, remount_target(&r)))?;
    }
    payload_ctx(&go.plan, go.rlimits, memfd_sysctl)
        .map_err(|_| (Stage::ReadRequest, libc::EINVAL, target("request payload")))
}

fn remount_target(r: &super::prebuilt::Remount) -> CString {
    let (super::prebuilt::Remount::Tmpfs { path, .. }
    | super::prebuilt::Remount::Bind { path, .. }) = r;
    cstr(path).unwrap_or_default()
}

/// One request-time remount, inside the new root (the init still holds its capabilities).
pub(super) fn remount(ops: &mut impl RootOps, r: &super::prebuilt::Remount) -> StepResult {
    match r {
        super::prebuilt::Remount::Tmpfs {
            path, size, flags, ..
        } => {
            let path = cstr(path).map_err(|_| (Stage::Mount, libc::EINVAL))?;
            let data = CString::new(format!(
                "size={size},nr_inodes={}",
                super::plan::TMPFS_INODES
            ))
            .map_err(|_| (Stage::Mount, libc::EINVAL))?;
            mount_with(
                ops,
                Some(c"tmpfs"),
                &path,
                Some(c"tmpfs"),
                libc::MS_REMOUNT | ms_flags(*flags),
                Some(&data),
            )
        }
        super::prebuilt::Remount::Bind { path, flags } => {
            let path = cstr(path).map_err(|_| (Stage::Mount, libc::EINVAL))?;
            // Keep what is locked (nosuid, nodev, atime from the staging mount); noexec and
            // read-only are ours to set or clear on this bind.
            let keep = locked_flags(ops, &path)? & !(libc::MS_NOEXEC | libc::MS_RDONLY);
            mount_with(
                ops,
                None,
                &path,
                None,
                libc::MS_BIND | libc::MS_REMOUNT | ms_flags(*flags) | keep,
                None,
            )
        }
    }
}

fn enter_root(ctx: &BaseCtx) -> StepResult {
    // The pivot_root(".", ".") idiom stacks the old root on top of the new one, and the
    // detach below removes it.
    check(sys::fs::chdir(&ctx.root), Stage::Chdir)?;
    check(sys::fs::pivot_root(c".", c"."), Stage::PivotRoot)?;
    check(
        sys::fs::umount2(c".", libc::MNT_DETACH),
        Stage::UnmountOldRoot,
    )?;
    check(sys::fs::chdir(c"/"), Stage::Chdir)?;
    mount(
        None,
        c"/",
        None,
        libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
        None,
    )
    .map_err(|(_, e)| (Stage::RemountRootReadOnly, e))
}

/// The payload, forked by the init. Never returns.
fn payload_main(ctx: &PayloadCtx, report: BorrowedFd<'_>) -> ! {
    let fail_at = |(stage, e): (Stage, i32)| -> ! { fail(report, stage, c"payload", e) };
    // Reset the signal state inherited from the helper (blocked mask, Rust's ignored
    // SIGPIPE).
    let _ = sys::signal::set_mask(&sys::signal::empty_set());
    let _ = sys::signal::set_default(libc::SIGPIPE);
    // Detaches from any host controlling terminal.
    if let Err(e) = sys::proc::setsid() {
        fail_at((Stage::SetSid, e));
    }
    if ctx.tty {
        // The pseudo-terminal on fd 0 (the terminal's slave) becomes the controlling
        // terminal of this new session, so Ctrl-C typed into it is SIGINT for the program.
        let _ = sys::pty::set_controlling_tty(0);
    }
    if crate::rlimit::lower_all(&ctx.rlimits).is_err() {
        fail_at((Stage::SetRlimit, errno()));
    }
    if let Err(e) = sys::fs::chdir(&ctx.cwd) {
        fail_at((Stage::Chdir, e));
    }
    if let Err(e) = sys::proc::set_no_new_privs() {
        fail_at((Stage::NoNewPrivs, e));
    }
    let abi = match &ctx.landlock {
        Some(p) => match landlock::apply(p) {
            Ok(abi) => abi,
            Err(f) => {
                let e = match f {
                    landlock::Failure::CreateRuleset(e)
                    | landlock::Failure::OpenPath(_, e)
                    | landlock::Failure::AddRule(_, e)
                    | landlock::Failure::RestrictSelf(e) => e,
                };
                fail_at((Stage::Landlock, e))
            }
        },
        None => None,
    };
    let bits = libc::SECBIT_NOROOT
        | libc::SECBIT_NOROOT_LOCKED
        | libc::SECBIT_NO_SETUID_FIXUP
        | libc::SECBIT_NO_SETUID_FIXUP_LOCKED
        | libc::SECBIT_KEEP_CAPS_LOCKED
        | libc::SECBIT_NO_CAP_AMBIENT_RAISE
        | libc::SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
    if let Err(e) = sys::caps::set_securebits(bits as libc::c_ulong) {
        fail_at((Stage::SecureBits, e));
    }
    if let Err(e) = drop_capabilities() {
        fail_at(e);
    }
    // Everything but stdio and the (close-on-exec) report pipe closes at exec.
    if let Err(e) = sys::fd::set_cloexec_from(3) {
        fail_at((Stage::CloseFds, e));
    }
    let argv = CStrArray::new(&ctx.argv);
    let envp = CStrArray::new(&ctx.envp);
    let applied = serde_json::to_vec(&Report::Applied {
        landlock_abi: abi,
        seccomp: true,
        no_new_privs: true,
        caps_dropped: true,
    })
    .unwrap_or_default();
    if let Err(e) = seccomp::install(&ctx.filter) {
        fail_at((Stage::Seccomp, e));
    }
    // From here on only syscalls the filter allows.
    // A prepared buffer and a newline to the report pipe.
    let _ = sys::fd::write(report, &applied);
    let _ = sys::fd::write(report, b"\n");
    let mut best = libc::ENOENT;
    for cand in &ctx.candidates {
        let e = sys::proc::execve(cand, &argv, &envp);
        if e != libc::ENOENT && e != libc::ENOTDIR {
            best = e;
        }
    }
    send(
        report,
        &Report::ExecFailed {
            program: ctx.program.clone(),
            errno: best,
        },
    );
    sys::proc::exit_now(127)
}

#[cfg(test)]
mod copy_tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn allocated(dir: &Path) -> u64 {
        let mut seen = std::collections::BTreeSet::new();
        let mut total = 0;
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let md = e.metadata().unwrap();
            if seen.insert(md.ino()) {
                total += md.blocks() * 512;
            }
        }
        total
    }

    #[test]
    fn sparse_files_stay_sparse_and_keep_size_and_data() {
        let src = tempfile::tempdir().unwrap();
        let dst = tempfile::tempdir().unwrap();
        let f = std::fs::File::create(src.path().join("s")).unwrap();
        f.set_len(512 << 20).unwrap();
        use std::os::unix::fs::FileExt;
        f.write_all_at(b"head", 0).unwrap();
        f.write_all_at(b"tail", (512 << 20) - 4).unwrap();
        drop(f);
        let b = copy_out(src.path(), dst.path(), 1 << 20).unwrap();
        let out = dst.path().join("s");
        assert_eq!(std::fs::metadata(&out).unwrap().len(), 512 << 20);
        assert!(allocated(dst.path()) < 1 << 20, "{}", allocated(dst.path()));
        assert!(b.bytes <= 1 << 20, "counted {}", b.bytes);
        let data = std::fs::File::open(&out).unwrap();
        let mut buf = [0u8; 4];
        data.read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"head");
        data.read_exact_at(&mut buf, (512 << 20) - 4).unwrap();
        assert_eq!(&buf, b"tail");
        data.read_exact_at(&mut buf, 100 << 20).unwrap();
        assert_eq!(buf, [0; 4]);
    }

    #[test]
    fn hard_links_are_copied_once_and_linked() {
        let src = tempfile::tempdir().unwrap();
        let dst = tempfile::tempdir().unwrap();
        std::fs::write(src.path().join("big"), vec![1u8; 1 << 20]).unwrap();
        for i in 0..20 {
            std::fs::hard_link(src.path().join("big"), src.path().join(format!("l{i}"))).unwrap();
        }
        // 20 dense copies would need 21 MiB; the cap is 2 MiB.
        let b = copy_out(src.path(), dst.path(), 2 << 20).unwrap();
        assert_eq!(b.bytes, 1 << 20);
        assert_eq!(b.files, 1);
        let md = std::fs::metadata(dst.path().join("l7")).unwrap();
        assert_eq!(md.nlink(), 21);
        assert_eq!(
            std::fs::read(dst.path().join("l7")).unwrap(),
            vec![1u8; 1 << 20]
        );
    }

    #[test]
    fn over_the_cap_nothing_is_left_on_the_host() {
        let src = tempfile::tempdir().unwrap();
        let dst = tempfile::tempdir().unwrap();
        std::fs::write(dst.path().join("preexisting"), b"keep").unwrap();
        for d in ["a", "a/b", "c"] {
            std::fs::create_dir(src.path().join(d)).unwrap();
        }
        for f in ["a/1", "a/b/2", "c/3", "4"] {
            std::fs::write(src.path().join(f), vec![7u8; 1 << 20]).unwrap();
        }
        let e = match copy_out(src.path(), dst.path(), (3 << 20) - 1) {
            Err(e) => e,
            Ok(_) => panic!("4 MiB passed a 3 MiB cap"),
        };
        assert_eq!(sandboxio_core::ErrorCode::code(&e), "SBX_E1470");
        let left: Vec<_> = std::fs::read_dir(dst.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from("preexisting")]);
    }

    /// An output file whose name the host directory already has (a session's workspace
    /// keeps files between runs): a conflict with its own code and the path as seen
    /// inside, the host's file untouched, nothing else left behind (it was a bare I/O
    /// error, which the server answered 500).
    #[test]
    fn an_output_name_the_host_already_has_is_a_conflict_and_changes_nothing() {
        let src = tempfile::tempdir().unwrap();
        let dst = tempfile::tempdir().unwrap();
        std::fs::write(dst.path().join("report.txt"), b"the workspace's own").unwrap();
        std::fs::write(src.path().join("new.txt"), b"new").unwrap();
        std::fs::write(src.path().join("report.txt"), b"the program's").unwrap();
        let e = match copy_out(src.path(), dst.path(), 0) {
            Err(e) => e,
            Ok(_) => panic!("an existing name was overwritten"),
        };
        assert_eq!(sandboxio_core::ErrorCode::code(&e), "SBX_E1474", "{e}");
        assert!(e.to_string().contains("/output/report.txt"), "{e}");
        assert_eq!(
            std::fs::read(dst.path().join("report.txt")).unwrap(),
            b"the workspace's own"
        );
        assert!(!dst.path().join("new.txt").exists(), "all or nothing");
    }

    #[test]
    fn entry_cap_bounds_links_that_cost_no_inode() {
        let src = tempfile::tempdir().unwrap();
        let dst = tempfile::tempdir().unwrap();
        std::fs::write(src.path().join("f"), b"x").unwrap();
        for i in 0..10 {
            std::fs::hard_link(src.path().join("f"), src.path().join(format!("l{i}"))).unwrap();
        }
        let mut b = CopyBudget::new(None, Some(5));
        let wrap = |path, source| NsError::CopyOutput { path, source };
        let root = super::super::dst::Dst::open(dst.path()).unwrap();
        let r = copy_tree(src.path(), &root, None, &wrap, &mut b);
        assert!(matches!(
            r,
            Err(NsError::OutputTooLarge {
                what: "entries",
                ..
            })
        ));
    }

    /// The output directory, or a directory above it, swapped for a symlink after the run
    /// started: the copy is refused and writes nothing through the link. It used to follow
    /// the link (a file planted in any directory the supervisor could write).
    #[test]
    fn copy_out_never_writes_through_a_symlink_in_the_destination_path() {
        let src = tempfile::tempdir().unwrap();
        std::fs::write(src.path().join("evil"), b"x").unwrap();
        std::fs::create_dir(src.path().join("d")).unwrap();
        std::fs::write(src.path().join("d/f"), b"y").unwrap();
        let host = tempfile::tempdir().unwrap();
        let host = std::fs::canonicalize(host.path()).unwrap();
        let victim = host.join("victim");
        std::fs::create_dir(&victim).unwrap();
        // The output itself is a link now.
        std::os::unix::fs::symlink(&victim, host.join("out")).unwrap();
        assert!(copy_out(src.path(), &host.join("out"), 0).is_err());
        // A directory above the output is a link now.
        std::fs::create_dir(victim.join("out")).unwrap();
        std::os::unix::fs::symlink(&victim, host.join("proj")).unwrap();
        assert!(copy_out(src.path(), &host.join("proj/out"), 0).is_err());
        let left: Vec<_> = std::fs::read_dir(&victim)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, [std::ffi::OsString::from("out")], "nothing written");
        assert_eq!(std::fs::read_dir(victim.join("out")).unwrap().count(), 0);
        // A real directory at the same path takes the copy, subdirectory included.
        let real = host.join("real");
        std::fs::create_dir(&real).unwrap();
        let b = copy_out(src.path(), &real, 0).unwrap();
        assert_eq!(b.files, 2);
        assert_eq!(std::fs::read(real.join("d/f")).unwrap(), b"y");
    }

    #[test]
    fn deep_trees_do_not_overflow_the_stack() {
        let src = tempfile::tempdir().unwrap();
        let dst = tempfile::tempdir().unwrap();
        // Build 1500 levels with relative paths (beyond PATH_MAX as a whole is not needed).
        let mut p = src.path().to_path_buf();
        for _ in 0..1500 {
            p.push("d");
            if std::fs::create_dir(&p).is_err() {
                break;
            }
        }
        let r = std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn({
                let (s, d) = (src.path().to_path_buf(), dst.path().to_path_buf());
                move || copy_out(&s, &d, 0).map(|b| b.entries)
            })
            .unwrap()
            .join()
            .unwrap();
        // Either copied or refused (ENAMETOOLONG), never a crash; a refusal leaves nothing.
        if r.is_err() {
            assert_eq!(std::fs::read_dir(dst.path()).unwrap().count(), 0);
        }
    }
}
