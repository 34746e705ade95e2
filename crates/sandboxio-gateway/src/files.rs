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

pub(crate) fn execute(
    args: &OperationArgs,
    root: &Path,
    content: Option<&[u8]>,
    slot: Option<&FileSlot>,
    rec: &mut OperationRecord,
) -> Result<serde_json::Value, Stop> {
    rec.backend = "local-files".into();
    let out = match args {
        OperationArgs::FileRead { path } if slot.is_some() && !is_root(path) => {
            match files::open_read(root, path) {
                Ok((f, size)) => {
                    rec.bytes_out = size;
                    if let Some(Ok(mut s)) = slot.map(|s| s.lock()) {
                        *s = Some(f);
                    }
                    serde_json::json!({ "path": path, "size": size, "streamed": true })
                }
                Err(FileError::IsDirectory { .. }) => {
                    let entries = files::list(root, path).map_err(refused)?;
                    serde_json::json!({ "path": path, "entries": entries })
                }
                Err(e) => return Err(refused(e)),
            }
        }
        // The workspace's root (`.`, `./`): its listing.
        OperationArgs::FileRead { path } if is_root(path) => {
            let entries = files::list(root, ".").map_err(refused)?;
            serde_json::json!({ "path": path, "entries": entries })
        }
        OperationArgs::FileRead { path } => match files::read(root, path, READ_CAP) {
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
                let entries = files::list(root, path).map_err(refused)?;
                serde_json::json!({ "path": path, "entries": entries })
            }
            Err(e) => return Err(refused(e)),
        },
        OperationArgs::FileWrite { path, size, .. }
            if path.ends_with('/') && *size == 0 && content.is_none_or(<[u8]>::is_empty) =>
        {
            let created = files::mkdir(root, path).map_err(refused)?;
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
            files::write(root, path, data).map_err(refused)?;
            rec.bytes_in = data.len() as u64;
            serde_json::json!({ "path": path, "size": data.len() })
        }
        OperationArgs::FileDelete { path } => {
            files::delete(root, path).map_err(refused)?;
            serde_json::json!({ "path": path, "deleted": true })
        }
        _ => return Err(Stop::deny(Layer::Sandbox, "not a file operation").code("SBX_E1513")),
    };
    rec.status = OperationStatus::Ok;
    Ok(out)
}
