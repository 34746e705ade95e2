//! After the helper exits: reading the output pipes to their end.
//!
//! The output pump reads until every writer of the pipes has closed them. When the helper
//! exits, whether that has happened depends on the tier:
//!
//! - **namespace**: the helper was reaped after the sandbox's pid-namespace init, and the
//!   kernel reaps every other process of the namespace before the init's exit completes,
//!   so no process of the run holds a pipe any more. What is left in the pipes is finite:
//!   the drain waits for end of file, bounded only by the run's own deadline (timeout plus
//!   [`crate::exec::BACKSTOP_GRACE`]), however slowly the pump is scheduled or its events
//!   are taken.
//! - **process** and **landlock**: the helper waited for every descendant (subreaper), but a
//!   process outside the tree may hold a pipe (in the process tier any process of the same
//!   uid can reopen `/proc/<pid>/fd/1`). Output that is waiting in a pipe is still always
//!   read; only a pipe that stays open with nothing in it and the pump idle for
//!   [`DRAIN_GRACE`] is given up, and so is one still open at the deadline.
//!
//! Giving up is never silent: the result's `output_incomplete` says which streams were
//! still open and why, and the gateway copies it into the record.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandboxio_core::IsolationTier;
use tokio::task::JoinHandle;

/// How long a pipe may stay open, empty, with the pump idle, after the run ended, where the
/// tier cannot guarantee that every writer is dead.
pub const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// How often the drain looks at the pump while it has not finished.
const POLL: Duration = Duration::from_millis(50);

/// Whether the tier guarantees that no process holds the output pipes once the helper has
/// been reaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Writers {
    /// Every writer is dead: wait for end of file (up to the deadline).
    Dead,
    /// A process outside the tree may hold a pipe: give up on an idle, empty pipe.
    Unknown,
}

impl Writers {
    pub(crate) fn after_exit(tier: IsolationTier) -> Writers {
        match tier {
            IsolationTier::Namespace => Writers::Dead,
            _ => Writers::Unknown,
        }
    }
}

/// What the pump shares with the drain: which streams reached end of file, and whether it
/// is waiting for a pipe to become readable (rather than reading or delivering).
#[derive(Debug, Default)]
pub(crate) struct PumpState {
    stdout_eof: AtomicBool,
    stderr_eof: AtomicBool,
    waiting: AtomicBool,
}

impl PumpState {
    pub(crate) fn new(has_stderr: bool) -> Arc<PumpState> {
        let s = PumpState::default();
        // Under a terminal both streams are the terminal: no stderr pipe to wait for.
        s.stderr_eof.store(!has_stderr, Ordering::Relaxed);
        Arc::new(s)
    }
    pub(crate) fn set_waiting(&self, w: bool) {
        self.waiting.store(w, Ordering::Relaxed);
    }
    pub(crate) fn stdout_done(&self) {
        self.stdout_eof.store(true, Ordering::Relaxed);
    }
    pub(crate) fn stderr_done(&self) {
        self.stderr_eof.store(true, Ordering::Relaxed);
    }
    fn open_streams(&self) -> &'static str {
        match (
            self.stdout_eof.load(Ordering::Relaxed),
            self.stderr_eof.load(Ordering::Relaxed),
        ) {
            (false, false) => "stdout and stderr were",
            (false, true) => "stdout was",
            (true, false) => "stderr was",
            (true, true) => "the output was",
        }
    }
}

/// Duplicates of the pump's read ends, to ask the kernel how much is waiting in them.
pub(crate) struct Pending(Vec<OwnedFd>);

impl Pending {
    pub(crate) fn watch(fds: &[&OwnedFd]) -> Pending {
        Pending(fds.iter().filter_map(|f| f.try_clone().ok()).collect())
    }

    /// Bytes waiting to be read in any of the pipes (or the terminal).
    fn bytes(&self) -> u64 {
        self.0
            .iter()
            .map(|fd| {
                crate::sys::fd::unread_bytes(fd.as_fd())
                    .map_or(0, |n| u64::try_from(n).unwrap_or(0))
            })
            .sum()
    }
}

/// Waits for the pump `task` to read both streams to their end. Returns `None` when it did,
/// or why it was given up (then the task is aborted). `deadline` is the run's own
/// deadline; the drain never ends before `DRAIN_GRACE` after it started.
pub(crate) async fn drain(
    mut task: JoinHandle<()>,
    state: &PumpState,
    pending: &Pending,
    writers: Writers,
    deadline: Instant,
) -> Option<String> {
    let started = Instant::now();
    let deadline = deadline.max(started + DRAIN_GRACE);
    let mut idle_since: Option<Instant> = None;
    loop {
        if tokio::time::timeout(POLL, &mut task).await.is_ok() {
            return None;
        }
        let now = Instant::now();
        if now >= deadline {
            task.abort();
            return Some(format!(
                "{} still open at the run's deadline, {} s after it ended; the rest was \
                 not read",
                state.open_streams(),
                now.duration_since(started).as_secs()
            ));
        }
        if writers == Writers::Dead {
            continue;
        }
        let idle = state.waiting.load(Ordering::Relaxed) && pending.bytes() == 0;
        if !idle {
            idle_since = None;
            continue;
        }
        let since = *idle_since.get_or_insert(now);
        if now.duration_since(since) >= DRAIN_GRACE {
            task.abort();
            return Some(format!(
                "{} still held open {} s after the run ended, with nothing to read, by a \
                 process outside the sandbox's process tree; later output was not read",
                state.open_streams(),
                DRAIN_GRACE.as_secs()
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn only_the_namespace_tier_guarantees_dead_writers() {
        assert_eq!(Writers::after_exit(IsolationTier::Namespace), Writers::Dead);
        assert_eq!(
            Writers::after_exit(IsolationTier::Process),
            Writers::Unknown
        );
        assert_eq!(
            Writers::after_exit(IsolationTier::Landlock),
            Writers::Unknown
        );
    }

    #[test]
    fn the_reason_names_the_streams_still_open() {
        let s = PumpState::new(true);
        assert_eq!(s.open_streams(), "stdout and stderr were");
        s.stdout_done();
        assert_eq!(s.open_streams(), "stderr was");
        let t = PumpState::new(false);
        assert_eq!(t.open_streams(), "stdout was");
    }

    #[test]
    fn pending_counts_unread_bytes_in_a_pipe() {
        let (r, w) = crate::sys::fd::pipe().unwrap();
        let p = Pending::watch(&[&r]);
        assert_eq!(p.bytes(), 0);
        assert_eq!(crate::sys::fd::write(w.as_fd(), b"hello"), Ok(5));
        assert_eq!(p.bytes(), 5);
    }
}
