//! The file executor: `file_read` (a file, or a directory listing), `file_write` and
//! `file_delete`, confined to a workspace by the sandbox crate's beneath-resolution.

use std::path::Path;

use base64::Engine as _;
use sandboxio_core::{ErrorCode, Layer, OperationArgs, OperationRecord, OperationStatus, Verdict};
use sandboxio_sandbox::files::{self, FileError};

use crate::chain::Stop;

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

pub(crate) fn execute(
    args: &OperationArgs,
    root: &Path,
    content: Option<&[u8]>,
    rec: &mut OperationRecord,
) -> Result<serde_json::Value, Stop> {
    rec.backend = "local-files".into();
    let out = match args {
        // The workspace's root (`.`, `./`): its listing.
        OperationArgs::FileRead { path }
            if !path.is_empty() && path.split('/').all(|c| c.is_empty() || c == ".") =>
        {
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
