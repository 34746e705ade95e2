//! Trail files are private: created 0600, and an existing file with a looser mode is
//! tightened when the sink opens it (the trail holds redacted records, but still who ran
//! what, when, and for whom).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use crate::error::AuditError;

/// The mode of every file the sink creates.
pub const PRIVATE_FILE_MODE: u32 = 0o600;

/// Sets `path` to 0600 when it exists and group or others have any access.
pub fn tighten_file(path: &Path) -> Result<(), AuditError> {
    match std::fs::metadata(path) {
        Ok(m) if m.permissions().mode() & 0o077 != 0 => {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(PRIVATE_FILE_MODE))
                .map_err(|e| AuditError::io(path, e))
        }
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(AuditError::io(path, e)),
    }
}

/// Opens `path` for appending (and reading), creating it 0600; tightens an existing file.
/// Anything but a regular file (a FIFO, a device) is refused, without blocking on it.
pub(crate) fn open_append(path: &Path) -> Result<File, AuditError> {
    let f = OpenOptions::new()
        .create(true)
        .append(true)
        .read(true)
        .mode(PRIVATE_FILE_MODE)
        .custom_flags(sandboxio_core::fileread::O_NONBLOCK)
        .open(path)
        .map_err(|e| AuditError::io(path, e))?;
    sandboxio_core::fileread::check_regular(&f).map_err(|e| AuditError::io(path, e))?;
    tighten_file(path)?;
    Ok(f)
}

/// Creates a new private file holding `bytes`, synced.
pub(crate) fn write_new_private(path: &Path, bytes: &[u8]) -> Result<(), AuditError> {
    use std::io::Write as _;
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(PRIVATE_FILE_MODE)
        .open(path)
        .map_err(|e| AuditError::io(path, e))?;
    f.write_all(bytes).and_then(|_| f.sync_all()).map_err(|e| {
        // All or nothing: a file this call created and could not fill (a full disk)
        // goes, so that retries do not leave one empty file each.
        drop(f);
        let _ = std::fs::remove_file(path);
        AuditError::io(path, e)
    })
}
