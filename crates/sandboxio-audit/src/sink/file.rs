//! The file sink: one hash-chained JSON line per event, signed checkpoints, rotation.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::chain;
use crate::checkpoint::{make_checkpoint, AuditKey, CheckpointReason, Merkle, DEFAULT_ORIGIN};
use crate::error::AuditError;
use crate::head::{trail_id, SignedHead};
use crate::reader::trail_files;
use crate::sink::file_mode::{open_append, tighten_file};
use crate::sink::file_paths::{rotated_name, rotation_index_of};
use crate::sink::file_repair::{self, MovedAside, Recovered};

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

/// How to open a [`FileSink`](super::FileSink).
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
    /// Bytes were written since the last `fsync`.
    unsynced: bool,
    next_rotation: u64,
    closed: bool,
    /// Set when a write failed part-way: the tail of the file is unknown until it is read
    /// again (the next write does, under the trail's lock).
    poisoned: bool,
}

/// The trail file itself: appends one hash-chained JSON line per event, synchronously.
/// [`FileSink`](super::FileSink) owns one and calls it from its writer thread only
/// (`file_writer.rs`). See the crate README for the format, the tamper evidence it gives,
/// and its limits. One writer per trail: two sinks (or processes) appending to the same
/// path fork the chain, which `verify` reports.
pub(crate) struct FileTrail {
    opts: FileSinkOptions,
    key: Arc<AuditKey>,
    state: Mutex<State>,
    name: String,
    /// [`trail_id`] of the active file: the name the signed head is kept under.
    trail: String,
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

impl std::fmt::Debug for FileTrail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<FileTrail {}>", self.opts.path.display())
    }
}

impl FileTrail {
    /// Opens (or creates) the trail at `opts.path` and writes an `open` checkpoint.
    ///
    /// An existing trail is continued: the state is recovered from the last checkpoint of
    /// the active file and the records after it (which must chain). A torn or garbage last
    /// line (a write cut by a crash, never acknowledged, or bytes appended by something
    /// else) is moved to a sibling file `<path>.torn-<time>` and a record saying so is
    /// written; anything wrong before the last line is an error. Every trail file is made
    /// private (0600).
    pub fn open(opts: FileSinkOptions, key: Arc<AuditKey>) -> Result<FileTrail, AuditError> {
        Self::open_with(opts, key, None)
    }

    /// Starts a new signing key: the active file is closed (with a `rotate` checkpoint when
    /// the old private key is given) and renamed like a rotated file, and a new active file
    /// starts with an `open` checkpoint signed by `new_key` that continues the chain. The
    /// old file's last checkpoint is checked against `old_public` (skipped when empty: the
    /// chain is still checked). Record the rotation through an `Auditor` on the returned sink.
    pub fn open_rotating_key(
        opts: FileSinkOptions,
        new_key: Arc<AuditKey>,
        old_private: Option<Arc<AuditKey>>,
        old_public: &[ed25519_dalek::VerifyingKey],
    ) -> Result<FileTrail, AuditError> {
        Self::open_with(opts, new_key, Some((old_private, old_public)))
    }

    fn open_with(
        opts: FileSinkOptions,
        key: Arc<AuditKey>,
        rotate_from: Option<(Option<Arc<AuditKey>>, &[ed25519_dalek::VerifyingKey])>,
    ) -> Result<FileTrail, AuditError> {
        let path = opts.path.clone();
        let lockfile = open_append(&lock_path(&path))?;
        lockfile
            .lock()
            .map_err(|e| AuditError::io(lock_path(&path), e))?;
        let _held = TrailLock(&lockfile);
        for p in trail_files(&path)? {
            tighten_file(&p)?;
        }
        let mut file = open_append(&path)?;
        let trusted: Vec<ed25519_dalek::VerifyingKey> = match &rotate_from {
            None => vec![key.verifying_key()],
            Some((Some(old), _)) => vec![old.verifying_key()],
            Some((None, pubs)) => pubs.to_vec(),
        };
        let Recovered {
            mut merkle,
            mut prev,
            bytes,
            mut moved,
            ends_with_checkpoint,
            unrepaired,
        } = file_repair::recover(&path, &mut file, &trusted, &opts.origin)?;
        let last_rotated = trail_files(&path)?
            .into_iter()
            .filter_map(|p| rotation_index_of(&path, &p).map(|i| (i, p)))
            .max_by_key(|(i, _)| *i);
        let next_rotation = last_rotated.as_ref().map_or(0, |(i, _)| *i) + 1;
        // An empty active file beside rotated ones: a rotation was cut short after the
        // full file was renamed and before the new one had its opening checkpoint. The
        // chain goes on from the renamed file's end (its `rotate` checkpoint), not from
        // genesis; the `open` checkpoint below anchors the new file on it.
        // (Best effort: a file this key cannot take up, say one a key rotation cut short
        // left under the old key, starts a new chain as before, which `verify` reports.)
        if let (0, Some((_, last))) = (bytes, &last_rotated) {
            let taken = open_append(last)
                .and_then(|mut f| file_repair::recover(last, &mut f, &trusted, &opts.origin));
            match taken {
                Ok(r) => {
                    merkle = r.merkle;
                    prev = r.prev;
                    moved = moved.or(r.moved);
                }
                Err(e) => {
                    tracing::warn!(target: "sandboxio::audit", "the trail's active file is empty and its last rotated file cannot be taken up ({e}); a new chain starts")
                }
            }
        }
        let sink = FileTrail {
            name: format!("file({})", path.display()),
            trail: trail_id(&path),
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
                unsynced: false,
                next_rotation,
                closed: false,
                // A last line that could not be moved aside: the next write tries again.
                poisoned: unrepaired.is_some(),
            }),
        };
        {
            let mut st = sink.lock()?;
            let rotating = rotate_from.is_some();
            if let Some((old_private, _)) = rotate_from {
                sink.rotate_key_locked(&mut st, old_private.as_deref())?;
            }
            // A file whose last line is a checkpoint of this very state, signed with this
            // key (a clean close), is continued as is: an `open` checkpoint would sign
            // the same tree again (and cost an fsync at every start).
            // What an opening writes is not a record: when the disk is full it is left
            // out (the trail is taken up as it is, and the failed write is repaired by the
            // next one), so that a full disk under the trail does not stop every start,
            // the kill switch's included; the records themselves then fail as sinks do.
            let opening = if unrepaired.is_some() {
                Ok(())
            } else if rotating || !ends_with_checkpoint || moved.is_some() {
                sink.write_checkpoint(&mut st, CheckpointReason::Open)
                    .and_then(|()| match &moved {
                        Some(m) => sink.write_repair_note(&mut st, m),
                        None => Ok(()),
                    })
            } else {
                Ok(())
            };
            if let Err(e) = opening {
                if rotating {
                    return Err(e);
                }
                tracing::warn!(target: "sandboxio::audit", path = %sink.opts.path.display(), "opening the trail could not write its checkpoint ({e}); its records are written once there is room");
                st.poisoned = true;
            }
        }
        drop(_held);
        Ok(sink)
    }

    /// Closes the active file under the old key and starts a new one (see
    /// [`FileTrail::open_rotating_key`]); the caller writes the new file's `open` checkpoint.
    fn rotate_key_locked(&self, st: &mut State, old: Option<&AuditKey>) -> Result<(), AuditError> {
        if st.bytes == 0 {
            return Ok(());
        }
        if let Some(old) = old {
            let cp = make_checkpoint(
                old,
                &self.opts.origin,
                &st.merkle,
                &st.prev,
                CheckpointReason::Rotate,
            );
            let line = cp.render()?;
            self.write_line(st, &line)?;
            self.sync(st)?;
        }
        let to = rotated_name(&self.opts.path, st.next_rotation);
        std::fs::rename(&self.opts.path, &to).map_err(|e| AuditError::io(&to, e))?;
        st.next_rotation += 1;
        st.file = open_append(&self.opts.path)?;
        st.bytes = 0;
        sync_dir(&self.opts.path);
        Ok(())
    }

    /// Records that a torn or garbage last line was moved aside.
    fn write_repair_note(&self, st: &mut State, m: &MovedAside) -> Result<(), AuditError> {
        let event = file_repair::repair_event(m);
        self.append_event(st, &event.as_json()?)
    }

    /// The signed head of the trail as this sink last saw it: records so far and the last
    /// record's hash. Keep it outside the trail (the gateway keeps it in its store).
    pub fn head(&self) -> Option<SignedHead> {
        let st = self.state.lock().ok()?;
        Some(SignedHead::sign(
            &self.key,
            &self.opts.origin,
            self.trail.clone(),
            st.merkle.size(),
            &st.prev,
        ))
    }

    pub fn name(&self) -> &str {
        &self.name
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
        self.caught_up(st, TrailLock(&self.lockfile))
    }

    /// [`Self::lock_trail`], giving up (`Ok(None)`) when another process holds the lock
    /// past `deadline`. Polls: the lock is held for one record's write by other writers.
    fn lock_trail_by<'a>(
        &'a self,
        st: &mut State,
        deadline: Instant,
    ) -> Result<Option<TrailLock<'a>>, AuditError> {
        let lp = lock_path(&self.opts.path);
        let mut pause = Duration::from_micros(50);
        loop {
            match self.lockfile.try_lock() {
                Ok(()) => return self.caught_up(st, TrailLock(&self.lockfile)).map(Some),
                Err(std::fs::TryLockError::WouldBlock) => {
                    if Instant::now() >= deadline {
                        return Ok(None);
                    }
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(5));
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(AuditError::io(&lp, e)),
            }
        }
    }

    /// With the cross-process lock `held`: when another process wrote to (or rotated) the
    /// trail since we last did, reloads the chain state from the file.
    fn caught_up<'a>(
        &'a self,
        st: &mut State,
        held: TrailLock<'a>,
    ) -> Result<TrailLock<'a>, AuditError> {
        let ours = st
            .file
            .metadata()
            .map_err(|e| AuditError::io(&self.opts.path, e))?;
        let current = std::fs::metadata(&self.opts.path).ok();
        use std::os::unix::fs::MetadataExt;
        let same_file = current
            .as_ref()
            .is_some_and(|m| m.ino() == ours.ino() && m.dev() == ours.dev());
        // A write that failed part-way (`poisoned`) left the tail unknown: read it again
        // (a torn line is moved aside) and go on, so a trail whose disk filled takes
        // records again once there is room, without a restart.
        if st.poisoned || !same_file || ours.len() != st.bytes {
            let mut file = open_append(&self.opts.path)?;
            let r = file_repair::recover(
                &self.opts.path,
                &mut file,
                &[self.key.verifying_key()],
                &self.opts.origin,
            )?;
            if let Some(why) = r.unrepaired {
                st.poisoned = true;
                return Err(AuditError::SinkFailed {
                    sink: self.name.clone(),
                    why: format!(
                        "the trail's last line is torn and cannot be moved aside yet: {why}"
                    ),
                    timed_out: false,
                });
            }
            st.file = file;
            st.merkle = r.merkle;
            st.prev = r.prev;
            st.bytes = r.bytes;
            st.next_rotation = trail_files(&self.opts.path)?
                .iter()
                .filter_map(|p| rotation_index_of(&self.opts.path, p))
                .max()
                .unwrap_or(0)
                + 1;
            if let Some(m) = r.moved {
                self.write_repair_note(st, &m)?;
            }
            st.poisoned = false;
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
        st.unsynced = true;
        Ok(())
    }

    fn sync(&self, st: &mut State) -> Result<(), AuditError> {
        st.file
            .sync_data()
            .map_err(|e| AuditError::io(&self.opts.path, e))?;
        st.last_sync = Instant::now();
        st.unsynced = false;
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
        sync_dir(&self.opts.path);
        Ok(())
    }

    /// Writes the closing checkpoint and syncs. Later emits fail with `SinkClosed`.
    pub fn close_sync(&self) -> Result<(), AuditError> {
        let mut st = self.lock()?;
        if st.closed {
            return Ok(());
        }
        st.closed = true;
        // (A write that failed earlier is repaired under the lock first.)
        let _held = self.lock_trail(&mut st)?;
        // Every record before it is already on disk: the closing checkpoint only signs
        // them, so it is written without an fsync of its own. A power loss may lose it (the
        // next open writes an `open` checkpoint and continues; the records are intact);
        // when records are not yet synced (`Interval`, `Never`), it is synced with them.
        let durable_before = !st.unsynced;
        let cp = make_checkpoint(
            &self.key,
            &self.opts.origin,
            &st.merkle,
            &st.prev,
            CheckpointReason::Close,
        );
        let line = cp.render()?;
        self.write_line(&mut st, &line)?;
        st.since_checkpoint = 0;
        if durable_before {
            return Ok(());
        }
        self.sync(&mut st)
    }

    /// Appends one record (the event's JSON), synced per the policy before it returns.
    pub fn append(&self, json: &str) -> Result<(), AuditError> {
        let mut st = self.lock()?;
        self.writable(&st)?;
        let _held = self.lock_trail(&mut st)?;
        self.append_event(&mut st, json)
    }

    /// [`Self::append`], unless another process holds the trail's lock for longer than
    /// `timeout`: then nothing is written and the answer is `Ok(false)`.
    pub fn append_within(&self, json: &str, timeout: Duration) -> Result<bool, AuditError> {
        let deadline = Instant::now() + timeout;
        let mut st = self.lock()?;
        self.writable(&st)?;
        let Some(_held) = self.lock_trail_by(&mut st, deadline)? else {
            return Ok(false);
        };
        self.append_event(&mut st, json).map(|()| true)
    }

    fn writable(&self, st: &State) -> Result<(), AuditError> {
        if st.closed {
            return Err(AuditError::SinkClosed {
                sink: self.name.clone(),
            });
        }
        Ok(())
    }

    /// Appends one record (the trail lock is held), then syncs, checkpoints and rotates as
    /// configured.
    fn append_event(&self, st: &mut State, json: &str) -> Result<(), AuditError> {
        let (line, hash) = chain::render_record(st.merkle.size(), &st.prev, json);
        self.write_line(st, &line)?;
        st.merkle.push(&hash);
        st.prev = hash;
        st.since_checkpoint += 1;
        match self.opts.fsync {
            FsyncPolicy::Always => self.sync(st)?,
            FsyncPolicy::Interval(d) if st.last_sync.elapsed() >= d => self.sync(st)?,
            _ => {}
        }
        // The record is written (and synced as configured): what follows it is the trail's
        // own upkeep, whose failure (a full disk) is not the record's. Failing the record
        // here had it kept and written a second time later. A checkpoint or rotation that
        // failed is tried again after the next record (a torn line is repaired first).
        if self.opts.checkpoint_every > 0 && st.since_checkpoint >= self.opts.checkpoint_every {
            if let Err(e) = self.write_checkpoint(st, CheckpointReason::Periodic) {
                tracing::warn!(target: "sandboxio::audit", path = %self.opts.path.display(), "a periodic checkpoint could not be written ({e}); the record before it is");
            }
        }
        if let Some(max) = self.opts.rotate_bytes {
            if st.bytes >= max {
                if let Err(e) = self.rotate(st) {
                    tracing::warn!(target: "sandboxio::audit", path = %self.opts.path.display(), "the trail could not be rotated ({e}); the record before it is written");
                }
            }
        }
        Ok(())
    }
}

/// Makes a rename in the trail's directory durable (best effort).
fn sync_dir(path: &Path) {
    if let Some(dir) = path.parent() {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
}
