//! Files named on the command line, read with a cap: never more than their limit, and a
//! regular file where only a file makes sense (see `sandboxio_core::fileread`).

use std::io::Read;
use std::path::Path;

use sandboxio_core::fileread::{self, ReadLimitError};

use crate::error::CliError;

/// Largest `--stdin-file` or standard input given whole (a regular file), and largest
/// code file of `run-code`: the bytes become part of the request, held in memory and
/// digested. The HTTP API's upload limit is the same. A larger input is streamed: pipe it
/// to `sandboxio run` (a pipe on standard input is never held in full).
pub const MAX_INPUT_BYTES: u64 = 16 << 20;

/// Largest `--op @FILE` (one operation as JSON).
pub const MAX_OP_BYTES: u64 = 1 << 20;

/// A regular file of at most `limit` bytes (a FIFO, a device or a directory is refused
/// without blocking).
pub fn read_regular(flag: &'static str, path: &Path, limit: u64) -> Result<Vec<u8>, CliError> {
    fileread::read_regular(path, limit).map_err(|e| error(flag, path, e))
}

/// Any file that can be read (a regular file, a FIFO, `/dev/stdin`, a device), read up to
/// `limit` bytes and refused past it. Opening a FIFO waits for its writer, as any reader
/// of a FIFO does; a directory is refused.
pub fn read_any(flag: &'static str, path: &Path, limit: u64) -> Result<Vec<u8>, CliError> {
    let f = std::fs::File::open(path).map_err(|e| error(flag, path, e.into()))?;
    let t = f
        .metadata()
        .map_err(|e| error(flag, path, e.into()))?
        .file_type();
    if t.is_dir() {
        return Err(error(flag, path, fileread::not_regular(t).into()));
    }
    fileread::read_limited(f, limit).map_err(|e| error(flag, path, e))
}

/// What `r` gives (our standard input), up to `limit` bytes and refused past it.
pub fn read_stream(flag: &'static str, r: impl Read, limit: u64) -> Result<Vec<u8>, CliError> {
    fileread::read_limited(r, limit).map_err(|e| error(flag, Path::new("<standard input>"), e))
}

fn error(flag: &'static str, path: &Path, e: ReadLimitError) -> CliError {
    match e {
        ReadLimitError::Io(source) => CliError::ReadInput {
            flag,
            path: path.to_path_buf(),
            source,
        },
        ReadLimitError::TooLarge { limit } => CliError::InputTooLarge {
            flag,
            path: path.to_path_buf(),
            limit,
        },
    }
}
