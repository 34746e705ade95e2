//! The file sink: one hash-chained JSON line per event, signed checkpoints, rotation.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::AuditSink;
use crate::chain::{self, TrailLine, GENESIS};
use crate::checkpoint::{make_checkpoint, AuditKey, CheckpointReason, Merkle, DEFAULT_ORIGIN};
use crate::error::AuditError;
use crate::event::AuditEvent;
use crate::reader::trail_files;
use crate::sink::file_paths::{rotated_name, rotation_index_of};

/// When the file sink calls `fsync`.
///
/// - `Always`: after every record. A record is durable when `emit` returns; costs one
///   `fsync` per operation (milliseconds on most disks, see BENCHMARKS.md).
/// - `Interval(d)`: when at least `d` passed since the last `fsync`, checked at each emit and
///   at each checkpoint (there is no background timer). A crash of the machine (not only the
///   process) can lose the records written since the last `fsync`; a process crash loses
///   nothing written, because each line is one `write` to the page cache.
/// - `Never`: only at checkpoints and on close. Cheapest; same process-crash guarantee.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncPolicy {
    Always,
    Interval(Duration),
    Never,
}

/// How to open a [`FileSink`].
#[derive(Debug, Clone)]
pub struct FileSinkOptions {
    /// The active file; rotated files are `<path>.000001`, `<path>.000002`, …
    pub path: PathBuf,
    pub fsync: FsyncPolicy,
    /// Write a signed checkpoint every this many records (0 = only on open, rotate, close).
    pub checkpoint_every: u64,
    /// Rotate when the active file reaches this many bytes (`None` = never).
    pub rotate_bytes: Option<u64>,
    /// The checkpoint origin line.
    pub origin: String,
}

impl FileSinkOptions {
    /// Defaults: fsync every second, a checkpoint every 1000 records, rotate at 64 MiB.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        FileSinkOptions {
            path: path.into(),
            fsync: FsyncPolicy::Interval(Duration::from_secs(1)),
            checkpoint_every: 1000,
            rotate_bytes: Some(64 * 1024 * 1024),
            origin: DEFAULT_ORIGIN.to_string(),
        }
    }
    pub fn fsync(mut self, p: FsyncPolicy) -> Self {
        self.fsync = p;
        self
    }
    pub fn checkpoint_every(mut self, n: u64) -> Self {
        self.checkpoint_every = n;
        self
    }
    pub fn rotate_bytes(mut self, n: Option<u64>) -> Self {
        self.rotate_bytes = n;
        self
    }
    pub fn origin(mut self, o: impl Into<String>) -> Self {
        self.origin = o.into();
        self
    }
}

struct State {
    file: File,
    bytes: u64,
    /// Number of records so far = the next record's seq.
    merkle: Merkle,
    prev: [u8; 32],
    since_checkpoint: u64,
    last_sync: Instant,
    next_rotation: u64,
    closed: bool,
    /// Set when a write failed part-way: the tail of the file is unknown until reopened.
    poisoned: bool,
}

/// Appends one hash-chained JSON line per event to a file. See the crate README for the
/// format, the tamper evidence it gives, and its limits. One writer per trail: two sinks (or
/// processes) appending to the same path fork the chain, which `verify` reports.
pub struct FileSink {
    opts: FileSinkOptions,
    key: Arc<AuditKey>,
    state: Mutex<State>,
    name: String,
    /// `<path>.lock`: held (flock) around every write, so several processes can share one
    /// trail. Before writing, a holder that finds the trail changed under it catches up.
    lockfile: File,
}

/// Holds the cross-process lock on the trail until dropped.
struct TrailLock<'a>(&'a File);

impl Drop for TrailLock<'_> {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

fn lock_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".lock");
    PathBuf::from(p)
}

impl std::fmt::Debug for FileSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<FileSink {}>", self.opts.path.display())
    }
}

fn open_append(path: &Path) -> Result<File, AuditError> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .read(true)
        .open(path)
        .map_err(|e| AuditError::io(path, e))
}

impl FileSink {
    /// Opens (or creates) the trail at `opts.path` and writes an `open` checkpoint.
    ///
    /// An existing trail is continued: the state is recovered from the last checkpoint of
    /// the active file and the records after it (which must chain). A partial last line (a
    /// write torn by a crash, never acknowledged) is cut off with a warning.
    pub fn open(opts: FileSinkOptions, key: Arc<AuditKey>) -> Result<FileSink, AuditError> {
        let path = opts.path.clone();
        let lockfile = open_append(&lock_path(&path))?;
        lockfile
            .lock()
            .map_err(|e| AuditError::io(lock_path(&path), e))?;
        let _held = TrailLock(&lockfile);
        let mut file = open_append(&path)?;
        let (merkle, prev, bytes) = recover(&path, &mut file, &key, &opts.origin)?;
        let next_rotation = trail_files(&path)?
            .iter()
            .filter_map(|p| rotation_index_of(&path, p))
            .max()
            .unwrap_or(0)
            + 1;
        let sink = FileSink {
            name: format!("file({})", path.display()),
            opts,
            key,
            lockfile: open_append(&lock_path(&path))?,
            state: Mutex::new(State {
                file,
                bytes,
                merkle,
                prev,
                since_checkpoint: 0,
                last_sync: Instant::now(),
                next_rotation,
                closed: false,
                poisoned: false,
            }),
        };
        {
            let mut st = sink.lock()?;
            sink.write_checkpoint(&mut st, CheckpointReason::Open)?;
        }
        drop(_held);
        Ok(sink)
    }

    pub fn path(&self) -> &Path {
        &self.opts.path
    }

    /// Records written to the whole trail so far (the next record's `seq`).
    pub fn tree_size(&self) -> u64 {
        self.state.lock().map(|s| s.merkle.size()).unwrap_or(0)
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, State>, AuditError> {
        self.state.lock().map_err(|_| AuditError::SinkFailed {
            sink: self.name.clone(),
            why: "state lock poisoned".into(),
            timed_out: false,
        })
    }

    /// Takes the cross-process lock and, when another process wrote to (or rotated) the
    /// trail since we last did, reloads the chain state from the file.
    fn lock_trail<'a>(&'a self, st: &mut State) -> Result<TrailLock<'a>, AuditError> {
        let lp = lock_path(&self.opts.path);
        self.lockfile.lock().map_err(|e| AuditError::io(&lp, e))?;
        let held = TrailLock(&self.lockfile);
        let ours = st
            .file
            .metadata()
            .map_err(|e| AuditError::io(&self.opts.path, e))?;
        let current = std::fs::metadata(&self.opts.path).ok();
        use std::os::unix::fs::MetadataExt;
        let same_file = current
            .as_ref()
            .is_some_and(|m| m.ino() == ours.ino() && m.dev() == ours.dev());
        if !same_file || ours.len() != st.bytes {
            let mut file = open_append(&self.opts.path)?;
            let (merkle, prev, bytes) =
                recover(&self.opts.path, &mut file, &self.key, &self.opts.origin)?;
            st.file = file;
            st.merkle = merkle;
            st.prev = prev;
            st.bytes = bytes;
            st.next_rotation = trail_files(&self.opts.path)?
                .iter()
                .filter_map(|p| rotation_index_of(&self.opts.path, p))
                .max()
                .unwrap_or(0)
                + 1;
        }
        Ok(held)
    }

    fn write_line(&self, st: &mut State, line: &str) -> Result<(), AuditError> {
        let mut buf = Vec::with_capacity(line.len() + 1);
        buf.extend_from_slice(line.as_bytes());
        buf.push(b'\n');
        if let Err(e) = st.file.write_all(&buf) {
            st.poisoned = true;
            return Err(AuditError::io(&self.opts.path, e));
        }
        st.bytes += buf.len() as u64;
        Ok(())
    }

    fn sync(&self, st: &mut State) -> Result<(), AuditError> {
        st.file
            .sync_data()
            .map_err(|e| AuditError::io(&self.opts.path, e))?;
        st.last_sync = Instant::now();
        Ok(())
    }

    fn write_checkpoint(&self, st: &mut State, reason: CheckpointReason) -> Result<(), AuditError> {
        let cp = make_checkpoint(&self.key, &self.opts.origin, &st.merkle, &st.prev, reason);
        let line = cp.render()?;
        self.write_line(st, &line)?;
        st.since_checkpoint = 0;
        self.sync(st)
    }

    fn rotate(&self, st: &mut State) -> Result<(), AuditError> {
        self.write_checkpoint(st, CheckpointReason::Rotate)?;
        let to = rotated_name(&self.opts.path, st.next_rotation);
        std::fs::rename(&self.opts.path, &to).map_err(|e| AuditError::io(&to, e))?;
        st.next_rotation += 1;
        st.file = open_append(&self.opts.path)?;
        st.bytes = 0;
        // The new file starts with a checkpoint so it can be verified and continued alone.
        self.write_checkpoint(st, CheckpointReason::Open)?;
        if let Some(dir) = self.opts.path.parent() {
            if let Ok(d) = File::open(if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            }) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    }

    /// Writes the closing checkpoint and syncs. Later emits fail with `SinkClosed`.
    pub fn close_sync(&self) -> Result<(), AuditError> {
        let mut st = self.lock()?;
        if st.closed {
            return Ok(());
        }
        st.closed = true;
        if st.poisoned {
            return Err(AuditError::SinkFailed {
                sink: self.name.clone(),
                why: "a write failed earlier; reopen the trail to repair its tail".into(),
                timed_out: false,
            });
        }
        let _held = self.lock_trail(&mut st)?;
        self.write_checkpoint(&mut st, CheckpointReason::Close)
    }

    fn emit_sync(&self, event: &AuditEvent) -> Result<(), AuditError> {
        let json = event.as_json()?;
        let mut st = self.lock()?;
        if st.closed {
            return Err(AuditError::SinkClosed {
                sink: self.name.clone(),
            });
        }
        if st.poisoned {
            return Err(AuditError::SinkFailed {
                sink: self.name.clone(),
                why: "a write failed earlier; reopen the trail to repair its tail".into(),
                timed_out: false,
            });
        }
        let _held = self.lock_trail(&mut st)?;
        let (line, hash) = chain::render_record(st.merkle.size(), &st.prev, &json);
        self.write_line(&mut st, &line)?;
        st.merkle.push(&hash);
        st.prev = hash;
        st.since_checkpoint += 1;
        match self.opts.fsync {
            FsyncPolicy::Always => self.sync(&mut st)?,
            FsyncPolicy::Interval(d) if st.last_sync.elapsed() >= d => self.sync(&mut st)?,
            _ => {}
        }
        if self.opts.checkpoint_every > 0 && st.since_checkpoint >= self.opts.checkpoint_every {
            self.write_checkpoint(&mut st, CheckpointReason::Periodic)?;
        }
        if let Some(max) = self.opts.rotate_bytes {
            if st.bytes >= max {
                self.rotate(&mut st)?;
            }
        }
        Ok(())
    }
}

impl Drop for FileSink {
    fn drop(&mut self) {
        if let Err(e) = self.close_sync() {
            tracing::warn!(target: "sandboxio::audit", "closing audit file failed: {e}");
        }
    }
}

#[async_trait]
impl AuditSink for FileSink {
    /// One `write(2)` of the line to a file opened with `O_APPEND` (plus `fsync` per the
    /// policy), done inline: it is not cancelled by the Auditor's timeout once started.
    async fn emit(&self, event: &AuditEvent) -> Result<(), AuditError> {
        self.emit_sync(event)
    }
    fn name(&self) -> &str {
        &self.name
    }
    async fn close(&self) -> Result<(), AuditError> {
        self.close_sync()
    }
}

/// Recovers (merkle, prev, bytes) from an existing active file; cuts a torn last line.
fn recover(
    path: &Path,
    file: &mut File,
    key: &AuditKey,
    origin: &str,
) -> Result<(Merkle, [u8; 32], u64), AuditError> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0))
        .and_then(|_| file.read_to_string(&mut text))
        .map_err(|e| AuditError::io(path, e))?;
    if text.is_empty() {
        return Ok((Merkle::new(), GENESIS, 0));
    }
    if !text.ends_with('\n') {
        let keep = text.rfind('\n').map_or(0, |i| i + 1);
        tracing::warn!(
            target: "sandboxio::audit",
            path = %path.display(),
            bytes = text.len() - keep,
            "audit trail ends with a partial line (torn write); cutting it off"
        );
        file.set_len(keep as u64)
            .map_err(|e| AuditError::io(path, e))?;
        text.truncate(keep);
    }
    let lines: Vec<&str> = text.lines().collect();
    let broken = |line: usize, why: String| AuditError::ChainBroken {
        path: path.to_path_buf(),
        line: line as u64 + 1,
        why,
    };
    // Start from the last checkpoint, or from genesis when there is none.
    let mut start = 0usize;
    let mut merkle = Merkle::new();
    let mut prev = GENESIS;
    for (i, l) in lines.iter().enumerate().rev() {
        if let Ok(TrailLine::Checkpoint(cp)) = chain::parse_line(l) {
            if !cp.verify_signature(&key.verifying_key()) || cp.origin != origin {
                return Err(AuditError::BadCheckpointSignature {
                    path: path.to_path_buf(),
                    line: i as u64 + 1,
                });
            }
            match (cp.merkle(), cp.last_hash_bytes()) {
                (Some(m), Some(h)) => {
                    merkle = m;
                    prev = h;
                }
                _ => {
                    return Err(broken(
                        i,
                        "checkpoint frontier does not match its root".into(),
                    ))
                }
            }
            start = i + 1;
            break;
        }
    }
    for (i, l) in lines.iter().enumerate().skip(start) {
        match chain::parse_line(l) {
            Ok(TrailLine::Record(r)) => {
                if r.hash != r.computed_hash || r.seq != merkle.size() || r.prev_hash != prev {
                    return Err(broken(i, format!("record seq {} does not chain", r.seq)));
                }
                merkle.push(&r.hash);
                prev = r.hash;
            }
            Ok(TrailLine::Checkpoint(_)) => {}
            Err(why) => return Err(broken(i, why)),
        }
    }
    Ok((merkle, prev, text.len() as u64))
}
