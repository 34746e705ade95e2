//! Data in a named ELF section. `#[link_section]` counts as unsafe code (the compiler cannot
//! check what a section name means to the linker), so it lives here.

/// This build's id in the `.sandboxio_build` section (see `build_id`).
///
/// Sound: `.sandboxio_build` is a name of our own that neither the linker nor the loader
/// gives a meaning to (unlike `.init_array` and the like), and the static is plain bytes,
/// immutable, never written, aligned like any `[u8; 24]`.
#[used]
#[link_section = ".sandboxio_build"]
static BUILD_SECTION: [u8; 24] = crate::build_id::section_bytes();

/// Keeps the section in the binary (a static nothing reads could be dropped by the linker
/// along with its object file).
#[inline]
pub(crate) fn keep_build_section() {
    std::hint::black_box(&BUILD_SECTION);
}
