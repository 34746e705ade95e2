//! Which helper binary a supervisor may start: a separate `sandboxio-helper` only when it
//! was built from the same sources as the supervisor, else the running executable.
//!
//! `build.rs` hashes the sources that decide what a plan means and how it is applied into
//! [`BUILD_ID`]. Every binary that links this crate carries the id in an ELF section of its
//! own (`.sandboxio_build`, a marker and the id); the supervisor reads that section from the
//! candidate's section table (a few small reads, once per process) instead of running it.
//! A helper from another build, a file that is not a 64-bit little-endian ELF, a missing or
//! truncated section: all mean "not this one", never an error.

use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// This build's id (16 bytes; see `build.rs`).
pub const BUILD_ID: [u8; 16] = *include_bytes!(concat!(env!("OUT_DIR"), "/build_id"));

const MARKER: [u8; 8] = *b"SBXBUILD";
const SECTION: &[u8] = b".sandboxio_build";

/// The section's contents: the marker, then the id (placed in the section by
/// `sys::link`, where the crate's `link_section` attribute lives).
pub(crate) const fn section_bytes() -> [u8; 24] {
    let mut b = [0u8; 24];
    let mut i = 0;
    while i < 8 {
        b[i] = MARKER[i];
        i += 1;
    }
    while i < 24 {
        b[i] = BUILD_ID[i - 8];
        i += 1;
    }
    b
}

/// Keeps the section in every binary that starts helpers or is one (a static nothing reads
/// could be dropped by the linker along with its object file).
pub(crate) fn keep_section() {
    crate::sys::link::keep_build_section();
}

/// The separate helper beside `exe` (`<dir of exe>/sandboxio-helper`) when it carries this
/// build's id and this user may execute it (a copy without execute bits would otherwise
/// fail every start instead of falling back).
pub(crate) fn sibling_helper(exe: &Path) -> Option<PathBuf> {
    let cand = exe.parent()?.join("sandboxio-helper");
    let c = std::ffi::CString::new(cand.as_os_str().as_bytes()).ok()?;
    if !crate::sys::fs::access(&c, libc::X_OK) {
        return None;
    }
    (read_id(&cand)? == BUILD_ID).then_some(cand)
}

/// The id in `path`'s `.sandboxio_build` section, if it has one.
pub(crate) fn read_id(path: &Path) -> Option<[u8; 16]> {
    let f = File::open(path).ok()?;
    section(&f, SECTION, 24).and_then(|d| {
        let (m, id) = d.split_at(8);
        (m == MARKER).then(|| id.try_into().ok()).flatten()
    })
}

fn read_at(f: &File, off: u64, len: usize) -> Option<Vec<u8>> {
    let mut b = vec![0u8; len];
    f.read_exact_at(&mut b, off).ok()?;
    Some(b)
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Bounds on what a sane binary has; anything beyond is "not this one".
const MAX_SECTIONS: usize = 4096;
const MAX_NAMES: u64 = 1 << 20;
const SHDR: usize = 64;

/// The first `len` bytes of the section named `name` of an ELF64 little-endian file.
fn section(f: &File, name: &[u8], len: usize) -> Option<Vec<u8>> {
    let (off, size) = find_section(f, name)?;
    if size < len as u64 {
        return None;
    }
    read_at(f, off, len)
}

/// File offset and size of the section named `name`.
fn find_section(f: &File, name: &[u8]) -> Option<(u64, u64)> {
    let eh = read_at(f, 0, 64)?;
    if eh.get(..4)? != b"\x7fELF" || eh[4] != 2 || eh[5] != 1 {
        return None;
    }
    let shoff = u64_at(&eh, 0x28)?;
    let shentsize = usize::from(u16_at(&eh, 0x3a)?);
    let shnum = usize::from(u16_at(&eh, 0x3c)?);
    let shstrndx = usize::from(u16_at(&eh, 0x3e)?);
    if shentsize != SHDR || shnum == 0 || shnum > MAX_SECTIONS || shstrndx >= shnum {
        return None;
    }
    let table = read_at(f, shoff, shnum * SHDR)?;
    let hdr = |i: usize| table.get(i * SHDR..(i + 1) * SHDR);
    let names_hdr = hdr(shstrndx)?;
    let (names_off, names_len) = (u64_at(names_hdr, 24)?, u64_at(names_hdr, 32)?);
    if names_len > MAX_NAMES {
        return None;
    }
    let names = read_at(f, names_off, usize::try_from(names_len).ok()?)?;
    for i in 0..shnum {
        let h = hdr(i)?;
        let at = usize::try_from(u32_at(h, 0)?).ok()?;
        let rest = names.get(at..)?;
        let end = rest.iter().position(|b| *b == 0)?;
        if &rest[..end] == name {
            return Some((u64_at(h, 24)?, u64_at(h, 32)?));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn this_test_binary_carries_this_builds_id() {
        keep_section();
        let exe = std::env::current_exe().unwrap();
        assert_eq!(read_id(&exe), Some(BUILD_ID));
        assert_ne!(BUILD_ID, [0u8; 16]);
    }

    #[test]
    fn other_files_and_damaged_binaries_carry_no_id() {
        let dir = tempfile::tempdir().unwrap();
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let write = |name: &str, bytes: &[u8]| {
            let p = dir.path().join(name);
            std::fs::write(&p, bytes).unwrap();
            p
        };
        assert_eq!(read_id(&write("empty", b"")), None);
        assert_eq!(read_id(&write("script", b"#!/bin/sh\necho hi\n")), None);
        assert_eq!(
            read_id(Path::new("/bin/sh")),
            None,
            "a binary of another build"
        );
        // Truncated anywhere: the header, the middle, just before the end.
        for cut in [16, 63, exe.len() / 2, exe.len() - 1] {
            let p = write("cut", &exe[..cut]);
            assert_eq!(read_id(&p), None, "cut at {cut}");
        }
        // Another build: the same layout with one byte of the id changed.
        let f = File::open(std::env::current_exe().unwrap()).unwrap();
        let (at, _) = find_section(&f, SECTION).expect("the section is in the file");
        let at = usize::try_from(at).unwrap();
        assert_eq!(exe[at..at + 8], MARKER);
        let mut other = exe.clone();
        other[at + 8] ^= 0xff;
        let other_id = read_id(&write("other", &other));
        assert!(other_id.is_some() && other_id != Some(BUILD_ID));
        // A damaged section table: a name index past the end, a huge section count.
        let mut bad = exe.clone();
        bad[0x3c..0x3e].copy_from_slice(&u16::MAX.to_le_bytes());
        assert_eq!(read_id(&write("bad", &bad)), None);
    }

    #[test]
    fn a_sibling_helper_is_taken_only_with_this_builds_id() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("sandboxio");
        std::fs::write(&exe, b"").unwrap();
        assert_eq!(sibling_helper(&exe), None, "no sibling");
        let helper = dir.path().join("sandboxio-helper");
        std::fs::copy("/bin/sh", &helper).unwrap();
        assert_eq!(sibling_helper(&exe), None, "a sibling of another build");
        std::fs::copy(std::env::current_exe().unwrap(), &helper).unwrap();
        assert_eq!(sibling_helper(&exe), Some(helper.clone()), "this build's");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(
            sibling_helper(&exe),
            None,
            "this build's, but not executable"
        );
    }
}
