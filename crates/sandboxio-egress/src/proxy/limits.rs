//! What one proxy (one sandbox) may hold in the supervisor: client connections, tunnels
//! among them, and how long a tunnel may sit idle. Each connection holds at most two of
//! the supervisor's file descriptors (the client's, and one upstream at a time), so the
//! connection cap is kept to a share of the process's descriptor limit: one sandbox cannot
//! drive the supervisor (which in `serve` mode is every sandbox's) to its limit.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{IDLE_TIMEOUT, MAX_CONNECTIONS, MAX_TUNNELS};

/// The fewest connections a proxy is given, whatever the descriptor limit.
const MIN_CONNECTIONS: usize = 16;
/// One proxy's connections may hold this share of the descriptor limit at most (two
/// descriptors each, so a quarter of the limit).
const FD_SHARE: u64 = 8;

/// The process's connections may hold this share of the descriptor limit at most, across
/// all its proxies (two descriptors each, so half of the limit).
const PROCESS_FD_SHARE: u64 = 4;
/// The process's cap when its descriptor limit is unknown or unlimited.
const PROCESS_MAX: usize = 1 << 16;

/// Connections all proxies of the process hold together (in `serve` mode, every
/// sandbox's): past it a new connection gets 503 (`SBX_E2432`), so sandboxes together
/// cannot drive the supervisor to its descriptor limit.
#[derive(Clone, Debug)]
pub struct Budget {
    slots: Arc<Semaphore>,
    limit: usize,
}

impl Budget {
    /// A budget of `connections` (at least one).
    pub fn new(connections: usize) -> Budget {
        let limit = connections.clamp(1, Semaphore::MAX_PERMITS);
        Budget {
            slots: Arc::new(Semaphore::new(limit)),
            limit,
        }
    }

    /// The process's own: half its descriptor limit, two descriptors a connection.
    pub fn process() -> Budget {
        static PROCESS: OnceLock<Budget> = OnceLock::new();
        PROCESS
            .get_or_init(|| {
                let n = fd_soft_limit()
                    .map(|s| usize::try_from(s / PROCESS_FD_SHARE).unwrap_or(PROCESS_MAX))
                    .unwrap_or(PROCESS_MAX);
                Budget::new(n.clamp(MIN_CONNECTIONS, PROCESS_MAX))
            })
            .clone()
    }

    /// How many connections it allows at once.
    pub fn limit(&self) -> usize {
        self.limit
    }

    pub(super) fn try_take(&self) -> Option<OwnedSemaphorePermit> {
        self.slots.clone().try_acquire_owned().ok()
    }
}

/// One proxy's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Client connections at once, tunnels included; more wait in the listener's backlog.
    pub connections: usize,
    /// Tunnels at once (kept below `connections`, so a refusal can still be answered); a
    /// CONNECT past it gets 503 (`SBX_E2430`).
    pub tunnels: usize,
    /// A tunnel with no byte either way for this long is closed; a request body that sends
    /// nothing for this long is given up.
    pub idle: Duration,
}

impl Default for Limits {
    /// The caps for this process's descriptor limit.
    fn default() -> Limits {
        Limits::for_fd_limit(fd_soft_limit())
    }
}

impl Limits {
    /// The caps when the process may hold `soft` descriptors (`None`: unlimited).
    pub fn for_fd_limit(soft: Option<u64>) -> Limits {
        let by_fds = soft
            .map(|s| usize::try_from(s / FD_SHARE).unwrap_or(usize::MAX))
            .unwrap_or(usize::MAX);
        let connections = by_fds.clamp(MIN_CONNECTIONS, MAX_CONNECTIONS);
        Limits {
            connections,
            tunnels: (connections / 2).clamp(1, MAX_TUNNELS),
            idle: IDLE_TIMEOUT,
        }
    }

    /// Made consistent: at least one connection, tunnels fewer than connections (at
    /// least one), an idle time of at least a second.
    pub(super) fn checked(self) -> Limits {
        let connections = self.connections.max(2);
        Limits {
            connections,
            tunnels: self.tunnels.clamp(1, connections - 1),
            idle: self.idle.max(Duration::from_secs(1)),
        }
    }
}

/// The soft limit on open files of this process (`/proc/self/limits`); `None` when
/// unlimited or unknown.
fn fd_soft_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    soft_limit_in(&text)
}

fn soft_limit_in(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_caps_follow_the_descriptor_limit() {
        let text = "Limit                     Soft Limit           Hard Limit           Units\n\
                    Max open files            20000                524288               files\n";
        assert_eq!(soft_limit_in(text), Some(20000));
        assert_eq!(
            soft_limit_in("Max open files  unlimited unlimited files"),
            None
        );
        let big = Limits::for_fd_limit(Some(20000));
        assert_eq!(
            (big.connections, big.tunnels),
            (MAX_CONNECTIONS, MAX_TUNNELS)
        );
        // The usual 1024: a quarter of it at most (two descriptors a connection).
        let small = Limits::for_fd_limit(Some(1024));
        assert_eq!((small.connections, small.tunnels), (128, 64));
        assert!(small.connections * 2 <= 1024 / 4);
        assert_eq!(Limits::for_fd_limit(Some(10)).connections, MIN_CONNECTIONS);
        assert_eq!(Limits::for_fd_limit(None).connections, MAX_CONNECTIONS);
        let odd = Limits {
            connections: 0,
            tunnels: 9,
            idle: Duration::ZERO,
        }
        .checked();
        assert_eq!((odd.connections, odd.tunnels), (2, 1));
        assert!(odd.idle >= Duration::from_secs(1));
    }
}
