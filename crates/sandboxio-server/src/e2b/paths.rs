//! E2B paths and the workspace. E2B programs name files by absolute paths under the
//! sandbox user's home, `/home/user` (or relative to it); sandboxio's files live in the
//! sandbox's workspace. `/home/user/a/b` is the workspace's `a/b`; anything else outside
//! the home is refused (the gateway confines what is left beneath the workspace again).

use super::error::E2bError;

pub const HOME: &str = "/home/user";

/// The workspace-relative path of an E2B path (`.` for the home itself).
pub fn to_workspace(path: &str) -> Result<String, E2bError> {
    let outside = || E2bError::OutsideHome {
        path: path.chars().take(256).collect(),
    };
    let rel = if let Some(rest) = path.strip_prefix(HOME) {
        if !(rest.is_empty() || rest.starts_with('/')) {
            // `/home/username` is not the home.
            return Err(outside());
        }
        rest.trim_start_matches('/')
    } else if path.starts_with('/') {
        return Err(outside());
    } else {
        path
    };
    // One spelling per file: `.` and empty components (`a/./b`, `a//b`, `b/`) are dropped,
    // so two names of one file compare equal (a `Move` onto itself moves nothing).
    let parts: Vec<&str> = rel
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    if parts.contains(&"..") {
        return Err(outside());
    }
    if parts.is_empty() {
        return Ok(".".into());
    }
    Ok(parts.join("/"))
}

/// The E2B path of a workspace-relative one.
pub fn to_e2b(rel: &str) -> String {
    let rel = rel.trim_start_matches("./").trim_matches('/');
    if rel.is_empty() || rel == "." {
        HOME.to_string()
    } else {
        format!("{HOME}/{rel}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn home_paths_map_to_the_workspace_and_back() {
        assert_eq!(to_workspace("/home/user").ok().as_deref(), Some("."));
        assert_eq!(to_workspace("/home/user/").ok().as_deref(), Some("."));
        assert_eq!(
            to_workspace("/home/user/a/b.txt").ok().as_deref(),
            Some("a/b.txt")
        );
        assert_eq!(to_workspace("a/b.txt").ok().as_deref(), Some("a/b.txt"));
        for p in [
            "/home/user/./a/b.txt",
            "/home/user//a/b.txt",
            "/home/user/a/./b.txt/",
            "./a//b.txt",
        ] {
            assert_eq!(to_workspace(p).ok().as_deref(), Some("a/b.txt"), "{p}");
        }
        assert_eq!(to_workspace("/home/user/./").ok().as_deref(), Some("."));
        assert_eq!(to_e2b("a/b.txt"), "/home/user/a/b.txt");
        assert_eq!(to_e2b("."), "/home/user");
    }

    #[test]
    fn paths_outside_the_home_are_refused() {
        for p in [
            "/etc/passwd",
            "/home/username/x",
            "/home/user/../x",
            "../x",
            "a/../../b",
        ] {
            assert!(
                matches!(to_workspace(p), Err(E2bError::OutsideHome { .. })),
                "{p}"
            );
        }
    }
}
