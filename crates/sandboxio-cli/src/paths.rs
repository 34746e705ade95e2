//! Host paths given on the command line or in the configuration: relative ones resolve
//! against the working directory, before anything else sees them.

use std::path::{Path, PathBuf};

use crate::error::CliError;

/// `path` made absolute against the working directory (lexically: symlinks are left to
/// the code that opens it).
pub fn absolute(path: &Path) -> Result<PathBuf, CliError> {
    std::path::absolute(path).map_err(|source| CliError::Resolve {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn relative_paths_resolve_against_the_working_directory() {
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(absolute(Path::new("out/")).unwrap(), cwd.join("out"));
        assert_eq!(absolute(Path::new("/abs/x")).unwrap(), Path::new("/abs/x"));
    }

    #[test]
    fn an_empty_path_is_an_error_with_a_code() {
        let e = absolute(Path::new("")).unwrap_err();
        assert_eq!(sandboxio_core::ErrorCode::code(&e), "SBX_E1705");
    }
}
