//! Reading a trail back: the files of a rotated trail, `tail`, follow mode and `query`.
//!
//! Readers parse; they do not verify (use [`crate::verify`]). Lines that do not parse are
//! errors, never skipped silently.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use sandboxio_core::Verdict;

use crate::chain::{parse_line, TrailLine};
use crate::error::AuditError;
use crate::event::AuditEvent;
use crate::sink::file_paths::rotation_index_of;

/// One record of a trail, with where it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrailEntry {
    pub file: PathBuf,
    /// 1-based line number in `file`.
    pub line: u64,
    pub seq: u64,
    pub event: AuditEvent,
}

/// The files of the trail whose active file is `base`, oldest first: the rotated files
/// `<base>.NNNNNN` in numeric order, then `base` itself (when it exists).
pub fn trail_files(base: &Path) -> Result<Vec<PathBuf>, AuditError> {
    let dir = match base.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut rotated: Vec<(u64, PathBuf)> = Vec::new();
    match std::fs::read_dir(&dir) {
        Ok(rd) => {
            for entry in rd.flatten() {
                let p = dir.join(entry.file_name());
                if let Some(n) = rotation_index_of(base, &p) {
                    rotated.push((n, p));
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(AuditError::io(&dir, e)),
    }
    rotated.sort();
    let mut out: Vec<PathBuf> = rotated.into_iter().map(|(_, p)| p).collect();
    if base.exists() {
        out.push(base.to_path_buf());
    }
    Ok(out)
}

/// Whether the trail whose active file is `base` holds at least one record (a file with
/// only checkpoints, or no file, holds none). Reads the files; meant for the rare paths
/// that must tell a new trail from an existing one (a missing key or state database).
pub fn trail_has_records(base: &Path) -> Result<bool, AuditError> {
    for p in trail_files(base)? {
        let bytes =
            sandboxio_core::fileread::read_regular_whole(&p).map_err(|e| AuditError::io(&p, e))?;
        if bytes
            .split(|b| *b == b'\n')
            .any(|l| l.starts_with(b"{\"seq\":"))
        {
            return Ok(true);
        }
    }
    Ok(false)
}

fn read_file_entries(path: &Path, out: &mut Vec<TrailEntry>) -> Result<(), AuditError> {
    let text =
        sandboxio_core::fileread::read_regular_string(path).map_err(|e| AuditError::io(path, e))?;
    for (i, l) in text.lines().enumerate() {
        match parse_line(l) {
            Ok(TrailLine::Record(r)) => out.push(TrailEntry {
                file: path.to_path_buf(),
                line: i as u64 + 1,
                seq: r.seq,
                event: r.event,
            }),
            Ok(TrailLine::Checkpoint(_)) => {}
            Err(why) => {
                return Err(AuditError::Parse {
                    path: path.to_path_buf(),
                    line: i as u64 + 1,
                    why,
                })
            }
        }
    }
    Ok(())
}

/// Every record of the given files, in order.
pub fn read_events<P: AsRef<Path>>(paths: &[P]) -> Result<Vec<TrailEntry>, AuditError> {
    let mut out = Vec::new();
    for p in paths {
        read_file_entries(p.as_ref(), &mut out)?;
    }
    Ok(out)
}

/// The last `n` records of the given files, oldest first. Reads files newest first and stops
/// as soon as it has `n`.
pub fn tail<P: AsRef<Path>>(paths: &[P], n: usize) -> Result<Vec<TrailEntry>, AuditError> {
    let mut chunks: Vec<Vec<TrailEntry>> = Vec::new();
    let mut have = 0usize;
    for p in paths.iter().rev() {
        if have >= n {
            break;
        }
        let mut v = Vec::new();
        read_file_entries(p.as_ref(), &mut v)?;
        have += v.len();
        chunks.push(v);
    }
    let mut all: Vec<TrailEntry> = chunks.into_iter().rev().flatten().collect();
    let skip = all.len().saturating_sub(n);
    Ok(all.split_off(skip))
}

/// A filter for [`query`]. Empty fields match everything; `until` is exclusive.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Query {
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
    pub tenant: Option<String>,
    pub event: Option<String>,
    pub decision: Option<Verdict>,
}

impl Query {
    pub fn matches(&self, e: &AuditEvent) -> bool {
        self.since.is_none_or(|s| e.ts >= s)
            && self.until.is_none_or(|u| e.ts < u)
            && self
                .tenant
                .as_ref()
                .is_none_or(|t| e.tenant_id.as_deref() == Some(t.as_str()))
            && self.event.as_ref().is_none_or(|ev| &e.event == ev)
            && self.decision.is_none_or(|d| e.decision == d)
    }
}

/// The records of the given files that match `q`, in order.
pub fn query<P: AsRef<Path>>(paths: &[P], q: &Query) -> Result<Vec<TrailEntry>, AuditError> {
    let mut out = read_events(paths)?;
    out.retain(|e| q.matches(&e.event));
    Ok(out)
}

/// Follow mode: call [`Follower::poll`] periodically to get records appended since the last
/// call. Rotation is handled: when the active file is replaced, the rest of the rotated file
/// is read first. It never blocks and owns no task; the caller sleeps between polls.
#[derive(Debug)]
pub struct Follower {
    base: PathBuf,
    pos: u64,
    line: u64,
    ident: Option<(u64, u64)>,
    partial: String,
}

fn ident(p: &Path) -> Option<(u64, u64)> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()))
    }
    #[cfg(not(unix))]
    {
        std::fs::metadata(p).ok().map(|m| (0, m.len()))
    }
}

impl Follower {
    /// Starts at the current end of the active file `base`.
    pub fn from_end(base: impl Into<PathBuf>) -> Result<Follower, AuditError> {
        let base = base.into();
        let (pos, line) = match sandboxio_core::fileread::read_regular_string(&base) {
            Ok(t) => (t.len() as u64, t.lines().count() as u64),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (0, 0),
            Err(e) => return Err(AuditError::io(&base, e)),
        };
        Ok(Follower {
            ident: ident(&base),
            base,
            pos,
            line,
            partial: String::new(),
        })
    }

    /// Records appended since the last poll.
    pub fn poll(&mut self) -> Result<Vec<TrailEntry>, AuditError> {
        let mut out = Vec::new();
        let now = ident(&self.base);
        if now != self.ident && self.ident.is_some() {
            // Rotated (maybe several times): finish the file we were reading, now under its
            // rotated name, then every later rotated file, then the new active file.
            let files = trail_files(&self.base)?;
            let rotated: Vec<(u64, PathBuf)> = files
                .iter()
                .filter_map(|p| rotation_index_of(&self.base, p).map(|n| (n, p.clone())))
                .collect();
            let old = rotated
                .iter()
                .find(|(_, p)| ident(p) == self.ident)
                .cloned();
            if let Some((k, old_path)) = old {
                self.read_from(&old_path, &mut out)?;
                for (_, p) in rotated.iter().filter(|(n, _)| *n > k) {
                    self.pos = 0;
                    self.line = 0;
                    self.partial.clear();
                    self.read_from(p, &mut out)?;
                }
            }
            self.pos = 0;
            self.line = 0;
            self.partial.clear();
        }
        self.ident = now;
        if self.ident.is_some() {
            let base = self.base.clone();
            self.read_from(&base, &mut out)?;
        }
        Ok(out)
    }

    fn read_from(&mut self, path: &Path, out: &mut Vec<TrailEntry>) -> Result<(), AuditError> {
        let mut f =
            sandboxio_core::fileread::open_regular(path).map_err(|e| AuditError::io(path, e))?;
        let mut buf = String::new();
        f.seek(SeekFrom::Start(self.pos))
            .and_then(|_| f.read_to_string(&mut buf))
            .map_err(|e| AuditError::io(path, e))?;
        self.pos += buf.len() as u64;
        self.partial.push_str(&buf);
        while let Some(i) = self.partial.find('\n') {
            let l: String = self.partial.drain(..=i).collect();
            self.line += 1;
            match parse_line(l.trim_end_matches('\n')) {
                Ok(TrailLine::Record(r)) => out.push(TrailEntry {
                    file: path.to_path_buf(),
                    line: self.line,
                    seq: r.seq,
                    event: r.event,
                }),
                Ok(TrailLine::Checkpoint(_)) => {}
                Err(why) => {
                    return Err(AuditError::Parse {
                        path: path.to_path_buf(),
                        line: self.line,
                        why,
                    })
                }
            }
        }
        Ok(())
    }
}
