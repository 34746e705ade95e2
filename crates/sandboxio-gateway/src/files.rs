//! The file executor: `file_read` (a file, or a directory listing), `file_write` and
//! `file_delete`, confined to a workspace by the sandbox crate's beneath-resolution.
//! A `file_write` whose path ends in `/` with no content creates that directory and its
//! parents (`mkdir -p`; its output's `created` is false when it was there already). A
//! `file_read` given a [`FileSlot`] opens the file and leaves the handle there (a front
//! end streams it) instead of reading it whole.

use std::path::Path;

use base64::Engine as _;
use sandboxio_core::{ErrorCode, Layer, OperationArgs, OperationRecord, OperationStatus, Verdict};
use sandboxio_sandbox::files::{self, FileError};

use crate::chain::{FileSlot, Stop};

/// Largest file `file_read` returns.
pub const READ_CAP: u64 = 16 << 20;

fn refused(e: FileError) -> Stop {
    let mut s = Stop::deny(Layer::Sandbox, e.to_string()).code(e.code());
    // An escape attempt is refused; anything else is a failed operation.
    if !matches!(e, FileError::Escapes { .. } | FileError::BadPath { .. }) {
        s.status = OperationStatus::Failed;
        s.verdict = Verdict::Allow;
    }
    s
}

/// The workspace's root (`.`, `./`).
fn is_root(path: &str) -> bool {
    !path.is_empty() && path.split('/').all(|c| c.is_empty() || c == ".")
}

/// The path of `path` beneath directory `within` (both relative to the workspace): its
/// components past `within`'s (`.` for `within` itself); `None` when it is not inside it.
/// A trailing `/` is kept (a `file_write` of `dir/` makes a directory).
fn beneath(path: &str, within: &str) -> Option<String> {
    let parts = |p: &str| -> Option<Vec<String>> {
        if p.starts_with('/') {
            return None;
        }
        let mut v = Vec::new();
        for c in p.split('/') {
            match c {
                "" | "." => {}
                ".." => return None,
                c => v.push(c.to_string()),
            }
        }
        Some(v)
    };
    let (dir, p) = (parts(within)?, parts(path)?);
    if p.len() < dir.len() || p[..dir.len()] != dir[..] {
        return None;
    }
    let rest = p[dir.len()..].join("/");
    let rest = if rest.is_empty() {
        ".".to_string()
    } else {
        rest
    };
    Some(if path.ends_with('/') && rest != "." {
        format!("{rest}/")
    } else {
        rest
    })
}

/// `e` naming `path` (as the caller wrote it) instead of the path beneath the confining
/// directory.
fn named(e: FileError, path: &str) -> FileError {
    let path = path.to_string();
    match e {
        FileError::BadPath { why, .. } => FileError::BadPath { path, why },
        FileError::Escapes { .. } => FileError::Escapes { path },
        FileError::NotFound { .. } => FileError::NotFound { path },
        FileError::TooLarge { limit, .. } => FileError::TooLarge { path, limit },
        FileError::Io { what, source, .. } => FileError::Io { path, what, source },
        FileError::IsDirectory { .. } => FileError::IsDirectory { path },
    }
}

/// Carries out a file operation beneath `root` (the workspace) or, with `within` (a
/// directory of it a caller is confined to, such as a capability token's), beneath that
/// directory: resolved beneath the workspace with no symlink on the way, then every path
/// beneath it, so a link inside it that leads elsewhere is refused like `..` is.
pub(crate) fn execute(
    args: &OperationArgs,
    root: &Path,
    within: Option<&str>,
    content: Option<&[u8]>,
    slot: Option<&FileSlot>,
    rec: &mut OperationRecord,
) -> Result<serde_json::Value, Stop> {
    rec.backend = "local-files".into();
    let (given, is_write) = match args {
        OperationArgs::FileRead { path } | OperationArgs::FileDelete { path } => (path, false),
        OperationArgs::FileWrite { path, .. } => (path, true),
        _ => return Err(Stop::deny(Layer::Sandbox, "not a file operation").code("SBX_E1513")),
    };
    let (dir, rel) = match within {
        None => (files::Root::open(root).map_err(refused)?, given.clone()),
        Some(w) => {
            let Some(rel) = beneath(given, w) else {
                return Err(refused(FileError::Escapes {
                    path: given.clone(),
                }));
            };
            let dir =
                files::Root::within(root, w, is_write).map_err(|e| refused(named(e, given)))?;
            (dir, rel)
        }
    };
    let fail = |e: FileError| match within {
        Some(_) => refused(named(e, given)),
        None => refused(e),
    };
    let out = match args {
        OperationArgs::FileRead { path } if slot.is_some() && !is_root(&rel) => {
            match files::open_read_in(&dir, &rel) {
                Ok((f, size)) => {
                    rec.bytes_out = size;
                    if let Some(Ok(mut s)) = slot.map(|s| s.lock()) {
                        *s = Some(f);
                    }
                    serde_json::json!({ "path": path, "size": size, "streamed": true })
                }
                Err(FileError::IsDirectory { .. }) => {
                    let entries = files::list_in(&dir, &rel).map_err(fail)?;
                    serde_json::json!({ "path": path, "entries": entries })
                }
                Err(e) => return Err(fail(e)),
            }
        }
        // The root (`.`, `./`): its listing.
        OperationArgs::FileRead { path } if is_root(&rel) => {
            let entries = files::list_in(&dir, ".").map_err(fail)?;
            serde_json::json!({ "path": path, "entries": entries })
        }
        OperationArgs::FileRead { path } => match files::read_in(&dir, &rel, READ_CAP) {
            Ok(bytes) => {
                rec.bytes_out = bytes.len() as u64;
                match String::from_utf8(bytes) {
                    Ok(text) => {
                        serde_json::json!({ "path": path, "size": rec.bytes_out, "content": text })
                    }
                    Err(e) => serde_json::json!({
                        "path": path,
                        "size": rec.bytes_out,
                        "content_base64": base64::engine::general_purpose::STANDARD.encode(e.into_bytes()),
                    }),
                }
            }
            Err(FileError::IsDirectory { .. }) => {
                let entries = files::list_in(&dir, &rel).map_err(fail)?;
                serde_json::json!({ "path": path, "entries": entries })
            }
            Err(e) => return Err(fail(e)),
        },
        OperationArgs::FileWrite { path, size, .. }
            if path.ends_with('/') && *size == 0 && content.is_none_or(<[u8]>::is_empty) =>
        {
            // The confining directory itself was made (if missing) when it was opened.
            let created = if is_root(&rel) {
                false
            } else {
                files::mkdir_in(&dir, &rel).map_err(fail)?
            };
            serde_json::json!({ "path": path, "created": created, "is_dir": true })
        }
        OperationArgs::FileWrite { path, size, .. } => {
            let data = content.unwrap_or_default();
            if *size != 0 && *size != data.len() as u64 {
                return Err(Stop::deny(
                    Layer::Admit,
                    format!("file_write says {size} bytes but carries {}", data.len()),
                )
                .code("SBX_E1005"));
            }
            files::write_in(&dir, &rel, data).map_err(fail)?;
            rec.bytes_in = data.len() as u64;
            serde_json::json!({ "path": path, "size": data.len() })
        }
        OperationArgs::FileDelete { .. } => {
            files::delete_in(&dir, &rel).map_err(fail)?;
            serde_json::json!({ "path": given, "deleted": true })
        }
        _ => return Err(Stop::deny(Layer::Sandbox, "not a file operation").code("SBX_E1513")),
    };
    rec.status = OperationStatus::Ok;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::beneath;

    #[test]
    fn a_path_beneath_a_directory_is_taken_relative_to_it() {
        assert_eq!(beneath("sub/a/b", "sub").as_deref(), Some("a/b"));
        assert_eq!(beneath("./sub//a", "sub/").as_deref(), Some("a"));
        assert_eq!(beneath("sub", "sub").as_deref(), Some("."));
        assert_eq!(beneath("sub/", "sub").as_deref(), Some("."));
        assert_eq!(beneath("sub/new/", "sub").as_deref(), Some("new/"));
        assert_eq!(beneath("subx/a", "sub"), None);
        assert_eq!(beneath("priv/a", "sub"), None);
        assert_eq!(beneath("sub/../priv", "sub"), None);
        assert_eq!(beneath("/sub/a", "sub"), None);
    }
}
