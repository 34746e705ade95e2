//! Link options of the `sandboxio` binary.
//!
//! The binary is a position-independent executable (ASLR) with full RELRO (`-z now`,
//! read-only relocations after start), both kept. Tens of thousands of its relocations are
//! relative ones, which the dynamic loader applies at every start; packed as `DT_RELR`
//! (`-z pack-relative-relocs`, binutils 2.38+, glibc 2.36+; the linker leaves them unpacked
//! when the C library cannot read them) they take a fraction of the space and of the
//! loader's time. See BENCHMARKS.md, "The one-shot CLI, start to exit".

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let linux_gnu = std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux")
        && std::env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("gnu");
    if linux_gnu && linker_packs_relative_relocs() {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// Whether the system linker knows the option (an older one would fail the link).
fn linker_packs_relative_relocs() -> bool {
    std::process::Command::new("ld")
        .args(["-z", "pack-relative-relocs", "--version"])
        .output()
        .map(|o| o.status.success() && o.stderr.is_empty())
        .unwrap_or(false)
}
