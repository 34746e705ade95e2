//! Lexical path normalisation, done before any path glob is matched.
//!
//! `.` components and repeated slashes vanish; `..` removes the previous component. A
//! relative path whose `..` climbs above its start keeps the leading `..` components, so it
//! is recognisably outside the workspace. An absolute path cannot climb above `/`.

/// A path after lexical normalisation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NormalPath {
    text: String,
    absolute: bool,
    escapes: bool,
}

impl NormalPath {
    /// The normalised text: `/a/b`, `a/b`, `../x`, `/` or `.`.
    pub fn as_str(&self) -> &str {
        &self.text
    }
    pub fn is_absolute(&self) -> bool {
        self.absolute
    }
    /// A relative path that climbs above its starting directory (`../x`).
    pub fn escapes(&self) -> bool {
        self.escapes
    }
    /// Relative and not escaping: inside the workspace the path is relative to.
    pub fn is_inside_workspace(&self) -> bool {
        !self.absolute && !self.escapes
    }
}

/// Normalises `path` lexically (no file system access).
pub fn normalize(path: &str) -> NormalPath {
    let absolute = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for comp in path.split('/') {
        match comp {
            "" | "." => {}
            ".." => match parts.last() {
                Some(&"..") | None => {
                    if !absolute {
                        parts.push("..");
                    }
                }
                Some(_) => {
                    parts.pop();
                }
            },
            c => parts.push(c),
        }
    }
    let escapes = parts.first() == Some(&"..");
    let joined = parts.join("/");
    let text = if absolute {
        format!("/{joined}")
    } else if joined.is_empty() {
        ".".to_string()
    } else {
        joined
    };
    NormalPath {
        text,
        absolute,
        escapes,
    }
}

/// Expresses an absolute, symlink-resolved path relative to the workspace root when it lies
/// inside it (`/ws/a/b` with root `/ws` gives `a/b`); otherwise returns it normalised as is.
pub fn relative_to_root(resolved: &str, root: Option<&str>) -> NormalPath {
    let r = normalize(resolved);
    let Some(root) = root else { return r };
    let root = normalize(root);
    if !r.absolute || !root.absolute {
        return r;
    }
    if root.text == "/" {
        let rest = r.text.trim_start_matches('/');
        return normalize(if rest.is_empty() { "." } else { rest });
    }
    if r.text == root.text {
        return normalize(".");
    }
    match r.text.strip_prefix(&root.text) {
        Some(rest) if rest.starts_with('/') => normalize(&rest[1..]),
        _ => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_dots_and_slashes() {
        assert_eq!(normalize("a/../b").as_str(), "b");
        assert_eq!(normalize("./a//b/./c").as_str(), "a/b/c");
        assert_eq!(normalize("//etc//passwd").as_str(), "/etc/passwd");
        assert_eq!(normalize("/../../etc").as_str(), "/etc");
        assert_eq!(normalize("../x").as_str(), "../x");
        assert!(normalize("a/../../x").escapes());
        assert_eq!(normalize("a/..").as_str(), ".");
        assert_eq!(normalize("").as_str(), ".");
        assert_eq!(normalize("/").as_str(), "/");
        assert!(normalize("a/b/../c").is_inside_workspace());
        assert!(!normalize("/a").is_inside_workspace());
        assert_eq!(normalize("../../a/..").as_str(), "../..");
    }

    #[test]
    fn resolved_paths_are_made_relative_to_the_workspace() {
        assert_eq!(relative_to_root("/ws/a/b", Some("/ws")).as_str(), "a/b");
        assert_eq!(relative_to_root("/ws", Some("/ws/")).as_str(), ".");
        assert_eq!(relative_to_root("/wsx/a", Some("/ws")).as_str(), "/wsx/a");
        assert_eq!(
            relative_to_root("/etc/passwd", Some("/ws")).as_str(),
            "/etc/passwd"
        );
        assert_eq!(
            relative_to_root("/etc/passwd", None).as_str(),
            "/etc/passwd"
        );
    }
}
