//! The calls that build the sandbox's new root, behind a trait: [`Sys`] makes them for
//! real in the namespace init, and the tests' recorder writes them down, so the order and
//! flags of every mount the plan produces are unit-tested without root.

use std::ffi::CStr;
use std::os::fd::AsFd;

use crate::sys;

/// What building the root needs from the kernel. Errors are errno values.
pub(super) trait RootOps {
    fn mkdir(&mut self, path: &CStr, mode: u32) -> Result<(), i32>;
    fn chmod(&mut self, path: &CStr, mode: u32) -> Result<(), i32>;
    fn symlink(&mut self, target: &CStr, path: &CStr) -> Result<(), i32>;
    /// Creates `path` (`exclusive`: it must not exist yet) and writes `contents`.
    fn write_file(
        &mut self,
        path: &CStr,
        contents: &[u8],
        mode: u32,
        exclusive: bool,
    ) -> Result<(), i32>;
    fn mount(
        &mut self,
        src: Option<&CStr>,
        target: &CStr,
        fstype: Option<&CStr>,
        flags: libc::c_ulong,
        data: Option<&CStr>,
    ) -> Result<(), i32>;
    /// `statvfs(path).f_flag` (`ST_*` bits).
    fn statvfs_flags(&mut self, path: &CStr) -> Result<libc::c_ulong, i32>;
    fn exists(&mut self, path: &CStr) -> bool;
    /// `mount_setattr(path, AT_RECURSIVE)` setting the `MOUNT_ATTR_*` bits in `attr_set`.
    fn mount_setattr_recursive(&mut self, path: &CStr, attr_set: u64) -> Result<(), i32>;
}

/// The real calls (the init, single-threaded, in its own mount namespace).
pub(super) struct Sys;

impl RootOps for Sys {
    fn mkdir(&mut self, path: &CStr, mode: u32) -> Result<(), i32> {
        sys::fs::mkdir(path, mode)
    }

    fn chmod(&mut self, path: &CStr, mode: u32) -> Result<(), i32> {
        sys::fs::chmod(path, mode)
    }

    fn symlink(&mut self, target: &CStr, path: &CStr) -> Result<(), i32> {
        sys::fs::symlink(target, path)
    }

    fn write_file(
        &mut self,
        path: &CStr,
        contents: &[u8],
        mode: u32,
        exclusive: bool,
    ) -> Result<(), i32> {
        let excl = if exclusive { libc::O_EXCL } else { 0 };
        // Creating a file on the sandbox's own tmpfs; closed when `fd` drops.
        let fd = sys::fd::open(
            path,
            libc::O_WRONLY | libc::O_CREAT | excl | libc::O_CLOEXEC,
            mode,
        )?;
        let mut off = 0;
        while off < contents.len() {
            match sys::fd::write(fd.as_fd(), &contents[off..]) {
                Ok(0) => return Err(libc::EIO),
                Ok(n) => off += n,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn mount(
        &mut self,
        src: Option<&CStr>,
        target: &CStr,
        fstype: Option<&CStr>,
        flags: libc::c_ulong,
        data: Option<&CStr>,
    ) -> Result<(), i32> {
        sys::fs::mount(src, target, fstype, flags, data)
    }

    fn statvfs_flags(&mut self, path: &CStr) -> Result<libc::c_ulong, i32> {
        sys::fs::statvfs_flags(path)
    }

    fn exists(&mut self, path: &CStr) -> bool {
        sys::fs::access(path, libc::F_OK)
    }

    fn mount_setattr_recursive(&mut self, path: &CStr, attr_set: u64) -> Result<(), i32> {
        sys::fs::mount_setattr_recursive(path, attr_set)
    }
}

/// A recorder for tests: every call in order, nothing done to the host.
#[cfg(test)]
pub(super) mod fake {
    use std::collections::{BTreeMap, BTreeSet};
    use std::ffi::CStr;

    /// One recorded call (paths as text).
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum Call {
        Mkdir(String, u32),
        Chmod(String, u32),
        Symlink {
            target: String,
            path: String,
        },
        WriteFile {
            path: String,
            len: usize,
            mode: u32,
        },
        Mount {
            src: Option<String>,
            target: String,
            fstype: Option<String>,
            flags: libc::c_ulong,
            data: Option<String>,
        },
        SetAttrRecursive(String, u64),
    }

    /// Records calls; paths it created (or was told exist) exist; `statvfs` answers from
    /// `st_flags` (0 when not set: nothing locked).
    #[derive(Debug, Default)]
    pub struct Recorder {
        pub calls: Vec<Call>,
        pub existing: BTreeSet<String>,
        pub st_flags: BTreeMap<String, libc::c_ulong>,
    }

    fn s(p: &CStr) -> String {
        p.to_string_lossy().into_owned()
    }

    impl super::RootOps for Recorder {
        fn mkdir(&mut self, path: &CStr, mode: u32) -> Result<(), i32> {
            self.calls.push(Call::Mkdir(s(path), mode));
            if !self.existing.insert(s(path)) {
                return Err(libc::EEXIST);
            }
            Ok(())
        }
        fn chmod(&mut self, path: &CStr, mode: u32) -> Result<(), i32> {
            self.calls.push(Call::Chmod(s(path), mode));
            Ok(())
        }
        fn symlink(&mut self, target: &CStr, path: &CStr) -> Result<(), i32> {
            self.calls.push(Call::Symlink {
                target: s(target),
                path: s(path),
            });
            self.existing.insert(s(path));
            Ok(())
        }
        fn write_file(
            &mut self,
            path: &CStr,
            contents: &[u8],
            mode: u32,
            _exclusive: bool,
        ) -> Result<(), i32> {
            self.calls.push(Call::WriteFile {
                path: s(path),
                len: contents.len(),
                mode,
            });
            self.existing.insert(s(path));
            Ok(())
        }
        fn mount(
            &mut self,
            src: Option<&CStr>,
            target: &CStr,
            fstype: Option<&CStr>,
            flags: libc::c_ulong,
            data: Option<&CStr>,
        ) -> Result<(), i32> {
            self.calls.push(Call::Mount {
                src: src.map(s),
                target: s(target),
                fstype: fstype.map(s),
                flags,
                data: data.map(s),
            });
            Ok(())
        }
        fn statvfs_flags(&mut self, path: &CStr) -> Result<libc::c_ulong, i32> {
            Ok(self.st_flags.get(&s(path)).copied().unwrap_or(0))
        }
        fn exists(&mut self, path: &CStr) -> bool {
            self.existing.contains(&s(path))
        }
        fn mount_setattr_recursive(&mut self, path: &CStr, attr_set: u64) -> Result<(), i32> {
            self.calls.push(Call::SetAttrRecursive(s(path), attr_set));
            Ok(())
        }
    }
}

/// Mount order and flags of real plans, through the recorder (no root needed).
#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use std::collections::BTreeMap;
    use std::ffi::CString;
    use std::path::{Path, PathBuf};

    use sandboxio_core::{ByteSize, ExecRequest, Mount, MountMode};

    use super::super::apply::{remount, run_step, steps_under, Step};
    use super::super::plan::{plan, MountFlags, NsHostPaths};
    use super::super::prebuilt::Remount;
    use super::fake::{Call, Recorder};

    const BIND: libc::c_ulong = libc::MS_BIND;
    const REMOUNT: libc::c_ulong = libc::MS_BIND | libc::MS_REMOUNT;

    /// Runs every step of `req`'s plan under `/r` through a recorder.
    fn record(req: &ExecRequest, rec: &mut Recorder) {
        let host = NsHostPaths {
            workspace: PathBuf::from("/host/ws"),
            output: PathBuf::from("/host/out"),
        };
        let mut req = req.clone();
        req.limits = req.limits.or_builtin_defaults();
        let pl = plan(&req, &host, &BTreeMap::new()).unwrap();
        let steps = steps_under(
            &pl,
            Path::new("/r"),
            Path::new("/stage/ws"),
            Path::new("/stage/out"),
        )
        .unwrap();
        for (i, step) in steps.iter().enumerate() {
            // Bind sources as the init opens them: an fd path, a directory unless a device.
            let source = match step {
                Step::Bind { host, .. } => Some((
                    CString::new(format!("/proc/self/fd/{}", 100 + i)).unwrap(),
                    !host.to_bytes().starts_with(b"/dev/"),
                )),
                _ => None,
            };
            run_step(rec, step, source.as_ref()).unwrap();
        }
    }

    fn mounts(rec: &Recorder) -> Vec<(usize, &str, libc::c_ulong)> {
        rec.calls
            .iter()
            .enumerate()
            .filter_map(|(i, c)| match c {
                Call::Mount { target, flags, .. } => Some((i, target.as_str(), *flags)),
                _ => None,
            })
            .collect()
    }

    /// Position and flags of the first mount at `target` whose flags contain `has`.
    fn find(rec: &Recorder, target: &str, has: libc::c_ulong) -> (usize, libc::c_ulong) {
        mounts(rec)
            .into_iter()
            .find(|(_, t, f)| *t == target && f & has == has)
            .map(|(i, _, f)| (i, f))
            .unwrap_or_else(|| panic!("no mount at {target} with {has:#x}: {:#?}", rec.calls))
    }

    fn request() -> ExecRequest {
        let mut req = ExecRequest::new(["true"]);
        req.input_dir = Some(PathBuf::from("/srv/in"));
        req.limits.tmp_size = ByteSize::mib(5);
        req.mounts = vec![
            Mount {
                host: PathBuf::from("/srv/data"),
                sandbox: PathBuf::from("/data"),
                mode: MountMode::Ro,
            },
            Mount {
                host: PathBuf::from("/srv/rw"),
                sandbox: PathBuf::from("/workspace/rw"),
                mode: MountMode::Rw,
            },
        ];
        req
    }

    #[test]
    fn mounts_come_in_plan_order_and_the_callers_last() {
        let mut rec = Recorder::default();
        record(&request(), &mut rec);
        let order: Vec<usize> = [
            ("/r/usr", BIND),
            ("/r/dev", 0),
            ("/r/proc", 0),
            ("/r/tmp", 0),
            ("/r/workspace", BIND),
            ("/r/output", BIND),
            ("/r/input", BIND),
            ("/r/data", BIND),
            ("/r/workspace/rw", BIND),
        ]
        .iter()
        .map(|(t, f)| find(&rec, t, *f).0)
        .collect();
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(order, sorted, "{:#?}", rec.calls);
        // The mount point of a caller's mount below the workspace is made before its bind.
        let mkdir = rec
            .calls
            .iter()
            .position(|c| *c == Call::Mkdir("/r/workspace/rw".into(), 0o755))
            .unwrap();
        assert!(mkdir < find(&rec, "/r/workspace/rw", BIND).0);
    }

    #[test]
    fn system_paths_are_read_only_and_writable_places_noexec() {
        let mut rec = Recorder::default();
        record(&request(), &mut rec);
        let ro = libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV;
        for t in ["/r/usr", "/r/input", "/r/data"] {
            let (_, f) = find(&rec, t, libc::MS_REMOUNT);
            assert_eq!(f, REMOUNT | ro, "{t}");
        }
        let wx = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
        for t in ["/r/workspace", "/r/output", "/r/workspace/rw"] {
            let (_, f) = find(&rec, t, libc::MS_REMOUNT);
            assert_eq!(f, REMOUNT | wx, "{t}");
        }
        for t in ["/r/tmp", "/r/dev/shm"] {
            let (i, f) = find(&rec, t, 0);
            assert_eq!(f, wx, "{t}");
            let Call::Mount { data, fstype, .. } = &rec.calls[i] else {
                unreachable!()
            };
            assert_eq!(fstype.as_deref(), Some("tmpfs"));
            let size = format!("size={}", ByteSize::mib(5).bytes());
            assert!(data.as_deref().unwrap().contains(&size), "{t}: {data:?}");
        }
        // Device nodes: usable (no nodev) but nosuid and noexec, not read-only.
        let (_, f) = find(&rec, "/r/dev/null", libc::MS_REMOUNT);
        assert_eq!(f, REMOUNT | libc::MS_NOSUID | libc::MS_NOEXEC);
        // A fresh proc, never a bind of the host's.
        let (i, f) = find(&rec, "/r/proc", 0);
        assert_eq!(f, libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC);
        assert!(matches!(&rec.calls[i], Call::Mount { fstype: Some(t), .. } if t == "proc"));
    }

    #[test]
    fn callers_mounts_get_their_flags_recursively() {
        let mut rec = Recorder::default();
        record(&request(), &mut rec);
        let set_attr = |path: &str| {
            rec.calls.iter().find_map(|c| match c {
                Call::SetAttrRecursive(p, a) if p == path => Some(*a),
                _ => None,
            })
        };
        // MOUNT_ATTR_RDONLY | NOSUID | NODEV, and NOSUID | NODEV | NOEXEC.
        assert_eq!(set_attr("/r/data"), Some(0x1 | 0x2 | 0x4));
        assert_eq!(set_attr("/r/workspace/rw"), Some(0x2 | 0x4 | 0x8));
        // The framework's own binds are not the caller's: no recursive pass. The input
        // directory is the caller's host path: read-only all the way down, like a mount.
        assert_eq!(set_attr("/r/usr"), None);
        assert_eq!(set_attr("/r/input"), Some(0x1 | 0x2 | 0x4));
    }

    #[test]
    fn masks_apply_only_where_the_file_exists_and_locked_flags_are_kept() {
        let mut rec = Recorder::default();
        rec.existing.insert("/r/proc/kcore".into());
        rec.existing.insert("/r/proc/sys".into());
        rec.st_flags.insert(
            "/r/usr".into(),
            libc::ST_NOSUID | libc::ST_NODEV | libc::ST_RELATIME,
        );
        record(&ExecRequest::new(["true"]), &mut rec);
        let (_, f) = find(&rec, "/r/proc/kcore", BIND);
        assert_eq!(f, BIND);
        assert!(matches!(
            rec.calls.iter().find(|c| matches!(c, Call::Mount { target, .. } if target == "/r/proc/kcore")),
            Some(Call::Mount { src: Some(s), .. }) if s == "/r/dev/null"
        ));
        assert!(!mounts(&rec).iter().any(|(_, t, _)| *t == "/r/proc/keys"));
        let (_, f) = find(&rec, "/r/proc/sys", libc::MS_REMOUNT);
        assert_eq!(f, REMOUNT | libc::MS_RDONLY);
        let (_, f) = find(&rec, "/r/usr", libc::MS_REMOUNT);
        assert!(
            f & libc::MS_RELATIME != 0,
            "locked atime flag dropped: {f:#x}"
        );
    }

    #[test]
    fn request_time_remounts_clear_noexec_but_keep_locked_flags() {
        let mut rec = Recorder::default();
        rec.st_flags.insert(
            "/workspace".into(),
            libc::ST_NOSUID | libc::ST_NODEV | libc::ST_NOEXEC | libc::ST_RELATIME,
        );
        remount(
            &mut rec,
            &Remount::Bind {
                path: PathBuf::from("/workspace"),
                flags: MountFlags::writable(true),
            },
        )
        .unwrap();
        remount(
            &mut rec,
            &Remount::Tmpfs {
                path: PathBuf::from("/tmp"),
                size: 7 << 20,
                mode: 0o1777,
                flags: MountFlags::writable(false),
            },
        )
        .unwrap();
        let (_, f) = find(&rec, "/workspace", libc::MS_REMOUNT);
        assert_eq!(
            f,
            REMOUNT | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_RELATIME
        );
        let (i, f) = find(&rec, "/tmp", libc::MS_REMOUNT);
        assert_eq!(
            f,
            libc::MS_REMOUNT | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC
        );
        let Call::Mount { data, .. } = &rec.calls[i] else {
            unreachable!()
        };
        assert!(data.as_deref().unwrap().starts_with("size=7340032,"));
    }
}
