//! Who the sandbox runs as: root of the host, or anybody else.

/// Whether this process is root of the host: uid 0 in the initial user namespace, where
/// every host id can be mapped and chowned to. Root of a nested user namespace (e.g. under
/// `unshare -r`, in a rootless container) is not: it can map only the ids mapped to it, so
/// it takes the unprivileged paths (own user namespace first; landlock tier keeps its uid).
pub fn is_host_root() -> bool {
    let euid = crate::sys::proc::geteuid();
    euid == 0
        && std::fs::read_to_string("/proc/self/uid_map")
            .map(|m| full_identity_map(&m))
            .unwrap_or(false)
}

/// The effective uid of this process.
pub fn effective_uid() -> u32 {
    crate::sys::proc::geteuid()
}

/// Whether a `uid_map` is the initial namespace's (`0 0 4294967295`) (pure).
pub fn full_identity_map(map: &str) -> bool {
    let fields: Vec<&str> = map.split_whitespace().collect();
    fields == ["0", "0", "4294967295"]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_initial_map_is_host_root() {
        assert!(full_identity_map("         0          0 4294967295\n"));
        assert!(!full_identity_map("         0          0          1\n"));
        assert!(!full_identity_map("         0       1000          1\n"));
        assert!(!full_identity_map(""));
    }
}
