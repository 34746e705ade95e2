//! Computes this build's id: a hash of the sources that decide what a plan means and how
//! the helper applies it (this crate's and `sandboxio-core`'s, and the lock file). The
//! supervisor starts a separate `sandboxio-helper` binary only when that binary carries the
//! same id (`src/build_id.rs`); any other is ignored.

use std::collections::hash_map::DefaultHasher;
use std::hash::Hasher;
use std::path::{Path, PathBuf};

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
    // Two 64-bit SipHash values with different prefixes: 128 bits, deterministic for one
    // toolchain (the id only has to tell builds apart, not resist an adversary).
    let mut id = [0u8; 16];
    for (half, prefix) in [(0usize, b"sandboxio-a"), (8, b"sandboxio-b")] {
        let mut h = DefaultHasher::new();
        h.write(prefix);
        for f in &all {
            let rel = f.strip_prefix(&here).unwrap_or(f);
            h.write(rel.to_string_lossy().as_bytes());
            h.write(&std::fs::read(f).unwrap_or_default());
        }
        id[half..half + 8].copy_from_slice(&h.finish().to_le_bytes());
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default()).join("build_id");
    if let Err(e) = std::fs::write(&out, id) {
        eprintln!("writing {}: {e}", out.display());
        std::process::exit(1);
    }
}
