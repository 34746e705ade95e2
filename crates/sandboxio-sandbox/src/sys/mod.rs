//! The `sys` layer: small safe wrappers over the raw calls (libc and raw syscalls). Every
//! `unsafe` block of the crate lives here, each with its `// SAFETY:` comment; the rest of
//! the crate is `#![deny(unsafe_code)]`.
//!
//! The wrappers are thin: they take prepared values (`&CStr`, descriptors, plain integers),
//! allocate nothing and return the errno as `Err(i32)`, so the ones used between fork and
//! exec (`caps`, `rlimit`, `seccomp`, `landlock`, `fs`, `fd`) stay async-signal-safe.
//! A function that forks runs a fixed sequence of raw calls in the child and nothing else,
//! except `proc::fork_child`, whose child runs the caller's closure (which cannot return):
//! it refuses unless the caller is the process's only thread.

pub(crate) mod caps;
pub(crate) mod fd;
pub(crate) mod fs;
pub(crate) mod ids;
pub(crate) mod landlock;
pub(crate) mod link;
pub(crate) mod net;
pub(crate) mod proc;
pub(crate) mod pty;
pub(crate) mod rlimit;
pub(crate) mod seccomp;
pub(crate) mod signal;
pub(crate) mod spawn;

/// The calling thread's `errno` (no allocation).
#[inline]
pub(crate) fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// `Ok(r)` for a non-negative return, else `Err(errno)`.
#[inline]
pub(crate) fn cvt(r: libc::c_int) -> Result<libc::c_int, i32> {
    if r < 0 {
        Err(errno())
    } else {
        Ok(r)
    }
}

/// `Ok(())` for a zero-or-positive return, else `Err(errno)`.
#[inline]
pub(crate) fn cvt0(r: libc::c_int) -> Result<(), i32> {
    cvt(r).map(|_| ())
}

/// `Ok(r)` for a non-negative `syscall(2)` return, else `Err(errno)`.
#[inline]
pub(crate) fn cvt_long(r: libc::c_long) -> Result<libc::c_long, i32> {
    if r < 0 {
        Err(errno())
    } else {
        Ok(r)
    }
}

/// Takes ownership of a descriptor the kernel just returned (`Err(errno)` when negative).
#[inline]
fn owned(fd: libc::c_int) -> Result<std::os::fd::OwnedFd, i32> {
    let fd = cvt(fd)?;
    // SAFETY: `fd` is non-negative, so it is a descriptor the kernel has just created for
    // this process; nothing else knows its number, so the new OwnedFd is its only owner.
    Ok(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

/// Like [`owned`], for a `syscall(2)` return.
#[inline]
fn owned_long(fd: libc::c_long) -> Result<std::os::fd::OwnedFd, i32> {
    let fd = cvt_long(fd)?;
    owned(libc::c_int::try_from(fd).map_err(|_| libc::EBADF)?)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::path::{Path, PathBuf};

    /// The modules still allowed `unsafe` besides `sys` (not migrated yet), as paths under
    /// `src/`: none any more. Keep in step with the `#[allow(unsafe_code)]` marks in lib.rs
    /// and with README.md.
    const NOT_MIGRATED: [&str; 0] = [];

    fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                sources(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }

    /// Lines of `text` that use `unsafe` in code, or an attribute the `unsafe_code` lint
    /// counts (comments left out).
    fn unsafe_lines(text: &str) -> Vec<usize> {
        text.lines()
            .enumerate()
            .filter(|(_, l)| {
                let code = l.split("//").next().unwrap_or("");
                code.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .any(|w| ["unsafe", "link_section", "no_mangle", "export_name"].contains(&w))
            })
            .map(|(i, _)| i + 1)
            .collect()
    }

    fn allowed(rel: &str) -> bool {
        rel.starts_with("sys/") || NOT_MIGRATED.contains(&rel)
    }

    #[test]
    fn unsafe_only_in_sys_and_the_modules_not_migrated() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        sources(&src, &mut files);
        assert!(
            files.len() > 10,
            "sources not found under {}",
            src.display()
        );
        let mut bad = Vec::new();
        let mut allow_marks = Vec::new();
        for f in &files {
            let rel = f
                .strip_prefix(&src)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            let text = std::fs::read_to_string(f).unwrap();
            let lines = unsafe_lines(&text);
            if !allowed(&rel) && !lines.is_empty() {
                bad.push(format!("{rel}: lines {lines:?}"));
            }
            if NOT_MIGRATED.contains(&rel.as_str()) && lines.is_empty() {
                bad.push(format!("{rel} has no `unsafe` left: take it off the list"));
            }
            let ls: Vec<&str> = text.lines().collect();
            for (i, l) in ls.iter().enumerate() {
                let t = l.trim_start();
                if t.starts_with("#[allow(unsafe_code") || t.starts_with("#![allow(unsafe_code") {
                    let next = ls.get(i + 1).copied().unwrap_or("").trim();
                    allow_marks.push(format!("{rel}: {next}"));
                }
            }
        }
        assert!(bad.is_empty(), "`unsafe` outside the sys layer: {bad:#?}");
        allow_marks.sort();
        let mut expected = ["lib.rs: pub(crate) mod sys;"];
        expected.sort();
        assert_eq!(
            allow_marks, expected,
            "`#[allow(unsafe_code)]` only on `sys` and the modules not migrated"
        );
    }

    #[test]
    fn the_scan_sees_unsafe_code_but_not_comments() {
        assert_eq!(unsafe_lines("let x = unsafe { f() };"), vec![1]);
        assert_eq!(unsafe_lines("a\npub unsafe fn f() {}"), vec![2]);
        assert_eq!(unsafe_lines("#[link_section = \".x\"]"), vec![1]);
        assert_eq!(
            unsafe_lines("// SAFETY: unsafe here\n#![deny(unsafe_code)]"),
            Vec::<usize>::new()
        );
    }
}
