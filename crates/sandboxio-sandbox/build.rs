//! Computes this build's id: a hash of the sources that decide what a plan means and how
//! the helper applies it (this crate's and `sandboxio-core`'s, and the lock file). The
//! supervisor starts a separate `sandboxio-helper` binary only when that binary carries the
//! same id (`src/build_id.rs`); any other is ignored.

use std::path::{Path, PathBuf};

/// FNV-1a, 64 bits, from a given offset basis: written out here so that the id depends on
/// the sources alone, never on the toolchain (std's `DefaultHasher` may change between
/// releases).
struct Fnv(u64);

impl Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else {
            out.push(p);
        }
    }
}

fn main() {
    let here = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let roots = [
        here.join("src"),
        here.join("../sandboxio-core/src"),
        here.join("../../Cargo.lock"),
    ];
    let mut all = Vec::new();
    for r in &roots {
        println!("cargo:rerun-if-changed={}", r.display());
        if r.is_file() {
            all.push(r.clone());
        } else {
            files(r, &mut all);
        }
    }
    all.sort();
    // Two 64-bit FNV-1a lanes with different offset bases: 128 bits (the id only has to
    // tell builds apart, not resist an adversary). Each file's length is hashed before its
    // bytes, so contents cannot shift across file boundaries.
    let mut id = [0u8; 16];
    for (half, basis) in [
        (0usize, 0xcbf2_9ce4_8422_2325u64),
        (8, 0x6c62_272e_07bb_0142),
    ] {
        let mut h = Fnv(basis);
        for f in &all {
            let rel = f.strip_prefix(&here).unwrap_or(f);
            let name = rel.to_string_lossy();
            let body = std::fs::read(f).unwrap_or_default();
            h.write(&(name.len() as u64).to_le_bytes());
            h.write(name.as_bytes());
            h.write(&(body.len() as u64).to_le_bytes());
            h.write(&body);
        }
        id[half..half + 8].copy_from_slice(&h.0.to_le_bytes());
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default()).join("build_id");
    if let Err(e) = std::fs::write(&out, id) {
        eprintln!("writing {}: {e}", out.display());
        std::process::exit(1);
    }
}
