//! Directories a killed supervisor or helper leaves behind: temporary workspaces
//! (`sandboxio-<owner>-XXXX`) and namespace staging directories
//! (`sandboxio-ns-<owner>-<hex>`), where `<owner>` is `<pid>.<start time>.<pid namespace>`
//! of the process that created them. A directory is stale once that process is gone (the
//! pid is dead, or reused by a process with another start time); a live owner's directory
//! is never touched, whatever its age. A pid means something only in its own pid namespace:
//! an owner in another one cannot be judged from here, so its directory is left alone (a
//! sweeper started in a private pid namespace would otherwise see every live owner outside
//! it as dead and remove their workspaces mid-run). Names without an owner (older versions)
//! fall back to age; names with `<pid>.<start time>` only are judged in any namespace.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Prefix of every directory this crate creates under a work root.
pub const PREFIX: &str = "sandboxio-";
/// Prefix of the helper's staging directories (a sub-kind of [`PREFIX`]).
pub const STAGING_PREFIX: &str = "sandboxio-ns-";

/// A file `<dir name>.kept` beside a directory: the caller asked to keep it (never swept).
/// Beside, not inside: a sandboxed program can write into its workspace but not its root.
pub const KEPT_SUFFIX: &str = ".kept";

/// Marks a workspace the caller asked to keep, so that no sweep removes it (best effort: a
/// failure is logged, and the directory is then treated like any other).
pub fn mark_kept(dir: &Path) {
    let Some(name) = dir.file_name() else { return };
    let mut marker = name.to_os_string();
    marker.push(KEPT_SUFFIX);
    let marker = dir.with_file_name(marker);
    if let Err(e) = std::fs::write(&marker, b"") {
        tracing::warn!(path = %marker.display(), error = %e, "could not mark a kept workspace");
    }
}

/// The process that creates a directory, written into its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pub pid: u32,
    /// Field 22 of `/proc/<pid>/stat` (clock ticks since boot): tells a reused pid apart.
    pub start: u64,
    /// The inode of the owner's pid namespace (`/proc/self/ns/pid`), when known.
    pub ns: Option<u64>,
}

impl Owner {
    /// This process.
    pub fn me() -> Option<Owner> {
        let pid = std::process::id();
        Some(Owner {
            pid,
            start: start_time(pid)?,
            ns: pid_namespace(),
        })
    }

    /// The name prefix for a directory of `kind` (`PREFIX` or `STAGING_PREFIX`) owned by
    /// this owner (pure).
    pub fn prefix(&self, kind: &str) -> String {
        match self.ns {
            Some(ns) => format!("{kind}{}.{}.{ns}-", self.pid, self.start),
            None => format!("{kind}{}.{}-", self.pid, self.start),
        }
    }

    /// Whether the owner may still run: same pid and start time, or in a pid namespace
    /// other than this process's (where its pid cannot be looked up from here).
    pub fn alive(&self) -> bool {
        if let Some(ns) = self.ns {
            if pid_namespace() != Some(ns) {
                return true;
            }
        }
        start_time(self.pid) == Some(self.start)
    }
}

/// The name prefix for a new directory of `kind` owned by this process; without `/proc`,
/// the plain kind (swept by age only).
pub fn owned_prefix(kind: &str) -> String {
    Owner::me()
        .map(|o| o.prefix(kind))
        .unwrap_or_else(|| kind.to_string())
}

/// The inode of this process's pid namespace (`pid:[4026531836]` names it).
pub fn pid_namespace() -> Option<u64> {
    let link = std::fs::read_link("/proc/self/ns/pid").ok()?;
    let s = link.to_str()?;
    s.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok()
}

/// The start time of `pid` (field 22 of its stat line), if it runs.
pub fn start_time(pid: u32) -> Option<u64> {
    parse_start_time(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Field 22 of a `/proc/<pid>/stat` line; the comm field may hold spaces and parens (pure).
pub fn parse_start_time(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // After the comm: field 3 (state) is the first; starttime is field 22.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The owner written in a directory name, if it has one (pure).
pub fn parse_owner(name: &str) -> Option<Owner> {
    let rest = name
        .strip_prefix(STAGING_PREFIX)
        .or_else(|| name.strip_prefix(PREFIX))?;
    let (owner, _) = rest.split_once('-')?;
    let mut parts = owner.split('.');
    let pid = parts.next()?.parse().ok()?;
    let start = parts.next()?.parse().ok()?;
    let ns = match parts.next() {
        Some(n) => Some(n.parse().ok()?),
        None => None,
    };
    if parts.next().is_some() {
        return None;
    }
    Some(Owner { pid, start, ns })
}

/// [`sweep`] of every root this configuration's runs use: the temp dir, the default work
/// root and the configured `work_root` (`[sandbox] work_root`).
pub fn sweep_for(cfg: &crate::SandboxConfig, legacy_age: Duration) -> Vec<PathBuf> {
    let mut roots = vec![std::env::temp_dir(), crate::config::default_work_root()];
    roots.extend(cfg.work_root.clone());
    sweep(&roots, legacy_age)
}

/// Removes, under each of `roots`, every directory of ours whose owner is gone, and those
/// without an owner in their name that are older than `legacy_age`. Returns what it
/// removed. Staging directories were mount points only in their helper's private mount
/// namespace, which died with it: on the host they are plain directories.
pub fn sweep(roots: &[PathBuf], legacy_age: Duration) -> Vec<PathBuf> {
    let mut roots = roots.to_vec();
    roots.sort();
    roots.dedup();
    let mut removed = Vec::new();
    for root in &roots {
        let Ok(rd) = std::fs::read_dir(root) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            if !name.starts_with(PREFIX) {
                continue;
            }
            if root.join(format!("{name}{KEPT_SUFFIX}")).exists() {
                continue;
            }
            let path = e.path();
            // Never follow a symlink someone planted under a shared root.
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if !meta.is_dir() {
                continue;
            }
            let stale = match parse_owner(name) {
                Some(owner) => !owner.alive(),
                None => older_than(&meta, legacy_age),
            };
            if stale && remove(&path) {
                removed.push(path);
            }
        }
    }
    removed
}

fn older_than(meta: &std::fs::Metadata, age: Duration) -> bool {
    meta.modified()
        .ok()
        .and_then(|m| m.elapsed().ok())
        .is_some_and(|a| a > age)
}

fn remove(path: &Path) -> bool {
    std::fs::remove_dir_all(path).is_ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn owner_round_trips_through_both_kinds_of_names() {
        for ns in [None, Some(4026531836)] {
            let o = Owner {
                pid: 4242,
                start: 987654,
                ns,
            };
            for kind in [PREFIX, STAGING_PREFIX] {
                let name = format!("{}Ab3xYz", o.prefix(kind));
                assert_eq!(parse_owner(&name), Some(o), "{name}");
            }
        }
        assert_eq!(parse_owner("sandboxio-1.2.3.4-x"), None);
        assert_eq!(parse_owner("sandboxio-AbCdEf"), None);
        assert_eq!(parse_owner("sandboxio-ns-0123456789abcdef"), None);
        assert_eq!(parse_owner("other-1.2-x"), None);
    }

    #[test]
    fn start_time_survives_odd_comm() {
        let stat = "77 (a) b) c) S 1 77 77 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 5555 100 10";
        assert_eq!(parse_start_time(stat), Some(5555));
        assert_eq!(parse_start_time("garbage"), None);
        let me = Owner::me().unwrap();
        assert!(me.alive());
        assert!(
            !Owner {
                start: me.start + 1,
                ..me
            }
            .alive(),
            "a reused pid is not the owner"
        );
    }

    #[test]
    fn sweeps_dead_owners_and_never_live_ones() {
        let root = tempfile::tempdir().unwrap();
        let me = Owner::me().unwrap();
        // A process that has exited: its pid is dead (or reused with another start time).
        let mut child = std::process::Command::new("/bin/true").spawn().unwrap();
        let dead = Owner {
            pid: child.id(),
            start: start_time(child.id()).unwrap_or(1),
            ns: me.ns,
        };
        // The same dead owner seen from another pid namespace, and written by an older
        // version without its namespace.
        let foreign = Owner {
            ns: Some(me.ns.unwrap() + 1),
            ..dead
        };
        let unnamespaced = Owner { ns: None, ..dead };
        child.wait().unwrap();
        let live_ws = root.path().join(format!("{}live", me.prefix(PREFIX)));
        let live_st = root
            .path()
            .join(format!("{}live", me.prefix(STAGING_PREFIX)));
        let dead_ws = root.path().join(format!("{}dead", dead.prefix(PREFIX)));
        let dead_st = root
            .path()
            .join(format!("{}dead", dead.prefix(STAGING_PREFIX)));
        let foreign_ws = root
            .path()
            .join(format!("{}foreign", foreign.prefix(PREFIX)));
        let old_ws = root
            .path()
            .join(format!("{}old", unnamespaced.prefix(PREFIX)));
        let legacy_new = root.path().join("sandboxio-legacy");
        let kept = root.path().join(format!("{}kept", dead.prefix(PREFIX)));
        std::fs::create_dir(&kept).unwrap();
        mark_kept(&kept);
        let unrelated = root.path().join("someone-else");
        for d in [
            &live_ws,
            &live_st,
            &dead_ws,
            &dead_st,
            &foreign_ws,
            &old_ws,
            &legacy_new,
            &unrelated,
        ] {
            std::fs::create_dir_all(d.join("output/deep")).unwrap();
        }
        let removed = sweep(&[root.path().to_path_buf()], Duration::from_secs(3600));
        assert_eq!(removed.len(), 3, "{removed:?}");
        for d in [&dead_ws, &dead_st, &old_ws] {
            assert!(!d.exists(), "{} left", d.display());
        }
        for d in [
            &live_ws,
            &live_st,
            &foreign_ws,
            &legacy_new,
            &unrelated,
            &kept,
        ] {
            assert!(d.exists(), "{} removed", d.display());
        }
        // Legacy names go by age.
        let removed = sweep(&[root.path().to_path_buf()], Duration::ZERO);
        assert_eq!(removed, vec![legacy_new]);
    }
}
