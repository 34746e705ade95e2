//! Reading a file a person or a configuration named: a regular file, never more than a
//! limit.
//!
//! A size taken from `metadata().len()` cannot bound a read: `/dev/zero` and `/proc` files
//! say 0 bytes, and a FIFO blocks the open until a writer comes (forever, if none does).
//! So the file is opened with `O_NONBLOCK` (the open of a FIFO returns at once), its type
//! is taken from the open descriptor (`fstat`, no race with a rename), anything but a
//! regular file is refused, and at most `limit + 1` bytes are read: one more than the
//! limit means the file is over it.

use std::fs::{File, FileType};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
use std::path::Path;

/// Why a file could not be read.
#[derive(Debug)]
pub enum ReadLimitError {
    /// It could not be opened or read, or it is not a regular file (`InvalidInput`, with
    /// the file's kind in the message).
    Io(io::Error),
    /// It holds more than the limit (nothing past `limit + 1` bytes was read).
    TooLarge { limit: u64 },
}

impl From<io::Error> for ReadLimitError {
    fn from(e: io::Error) -> Self {
        ReadLimitError::Io(e)
    }
}

/// What kind of file `t` is, for a message ("a FIFO", "a directory").
pub fn kind_of(t: FileType) -> &'static str {
    if t.is_file() {
        "a regular file"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    }
}

/// The error for a file of the wrong kind (`InvalidInput`).
pub fn not_regular(t: FileType) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("it is {}, not a regular file", kind_of(t)),
    )
}

/// `O_NONBLOCK`, for a caller that opens a file with other options (for appending):
/// the open of a FIFO then returns at once, and [`check_regular`] refuses it.
pub const O_NONBLOCK: i32 = libc::O_NONBLOCK;

/// Refuses an open file that is not a regular file (its type from `fstat`).
pub fn check_regular(f: &File) -> io::Result<()> {
    let t = f.metadata()?.file_type();
    if t.is_file() {
        Ok(())
    } else {
        Err(not_regular(t))
    }
}

/// The whole of `path`, a regular file (a FIFO, a device or a directory is refused
/// without blocking), with no limit: for files the caller's own state holds.
pub fn read_regular_whole(path: &Path) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    open_regular(path)?.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// [`read_regular_whole`] as UTF-8 text (`InvalidData` when it is not).
pub fn read_regular_string(path: &Path) -> io::Result<String> {
    String::from_utf8(read_regular_whole(path)?)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Opens `path` for reading without blocking on a FIFO, and refuses anything but a
/// regular file (symbolic links are followed to what they name).
pub fn open_regular(path: &Path) -> io::Result<File> {
    open_regular_with(path, 0)
}

/// [`open_regular`] with more `open` flags (`libc::O_NOFOLLOW`).
pub fn open_regular_with(path: &Path, flags: i32) -> io::Result<File> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | flags)
        .open(path)?;
    check_regular(&f)?;
    Ok(f)
}

/// The whole of `path`, a regular file of at most `limit` bytes.
pub fn read_regular(path: &Path, limit: u64) -> Result<Vec<u8>, ReadLimitError> {
    read_limited(open_regular(path)?, limit)
}

/// Everything `r` gives, refused past `limit` bytes (at most `limit + 1` are read).
pub fn read_limited(r: impl Read, limit: u64) -> Result<Vec<u8>, ReadLimitError> {
    let mut bytes = Vec::new();
    r.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > limit {
        return Err(ReadLimitError::TooLarge { limit });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endless_and_blocking_files_are_refused_without_reading_them_all() {
        // A device of endless zeros: refused by kind, not read.
        match read_regular(Path::new("/dev/zero"), 1024) {
            Err(ReadLimitError::Io(e)) => {
                assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
                assert!(e.to_string().contains("character device"), "{e}");
            }
            other => panic!("/dev/zero: {other:?}"),
        }
        // Read through a reader, it is cut one byte past the limit.
        let zero = File::open("/dev/zero").unwrap();
        assert!(matches!(
            read_limited(zero, 4096),
            Err(ReadLimitError::TooLarge { limit: 4096 })
        ));
        // A directory is not a file.
        match read_regular(Path::new("/"), 1024) {
            Err(ReadLimitError::Io(e)) => assert!(e.to_string().contains("directory"), "{e}"),
            other => panic!("/: {other:?}"),
        }
    }

    #[test]
    fn a_regular_file_is_read_up_to_its_limit_and_refused_past_it() {
        let dir = std::env::temp_dir().join(format!("sbx-fileread-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("f");
        std::fs::write(&p, b"12345").unwrap();
        assert_eq!(read_regular(&p, 5).unwrap(), b"12345");
        assert!(matches!(
            read_regular(&p, 4),
            Err(ReadLimitError::TooLarge { limit: 4 })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
