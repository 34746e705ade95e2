//! Replica leases. Each process that opens the shared store is a replica: a row in
//! `replicas` with a lease that a heartbeat thread renews every third of its length, on
//! the database's clock (so hosts' clocks do not matter). Work a replica admitted names it
//! (`journal.replica`). When a lease has expired, any other replica's recovery marks that
//! work interrupted, releases its reservations and marks the replica lost; a lost replica
//! (one that was only stalled) admits nothing more. Nothing of a replica whose lease is
//! current is touched, except work whose process is gone on the caller's own host (the
//! SQLite store's rule, exact because pids compare within one pid namespace).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::conn::Manager;
use crate::store::StoreResult;

/// Lease length when `[state] lease` is not set.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(10);
/// Shortest and longest lease accepted.
pub const MIN_LEASE: Duration = Duration::from_secs(2);
pub const MAX_LEASE: Duration = Duration::from_secs(600);

/// Who this process is in the shared store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Replica {
    /// Unique per process start: `<node>-<pid>-<random>`.
    pub id: String,
    /// The host name, naming this host's audit trails.
    pub node: String,
    /// Boot id and pid namespace: two processes with the same `host` can compare pids.
    pub host: String,
}

fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

impl Replica {
    pub(crate) fn this_process() -> Replica {
        let node = match read_trim("/proc/sys/kernel/hostname") {
            n if n.is_empty() => "localhost".to_string(),
            n => n,
        };
        let pidns = std::fs::read_link("/proc/self/ns/pid")
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let host = format!("{}/{}", read_trim("/proc/sys/kernel/random/boot_id"), pidns);
        let mut b = [0u8; 4];
        rand::Rng::fill(&mut rand::thread_rng(), &mut b);
        Replica {
            id: format!("{node}-{}-{}", std::process::id(), hex::encode(b)),
            node,
            host,
        }
    }
}

/// The heartbeat thread; stopped (and joined) on drop.
pub(crate) struct Heartbeat {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Heartbeat {
    pub(crate) fn start(
        pool: r2d2::Pool<Manager>,
        replica: String,
        lease: Duration,
        lost: Arc<AtomicBool>,
    ) -> StoreResult<Heartbeat> {
        let (stop, rx) = mpsc::channel::<()>();
        let every = lease / 3;
        let lease_ms = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX);
        let thread = std::thread::Builder::new()
            .name("sbx-pg-lease".into())
            .spawn(move || loop {
                match rx.recv_timeout(every) {
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
                match renew(&pool, &replica, lease_ms) {
                    Ok(true) => {}
                    Ok(false) => {
                        if !lost.swap(true, Ordering::SeqCst) {
                            tracing::error!(
                                code = "SBX_E1542",
                                replica = %replica,
                                "this replica's lease was taken over by another replica; it admits nothing more"
                            );
                        }
                    }
                    Err(e) => tracing::warn!(replica = %replica, "renewing the replica lease failed: {e}"),
                }
            })
            .map_err(|e| crate::error::GatewayError::PostgresUnavailable {
                url: String::new(),
                why: format!("cannot start the lease thread: {e}"),
            })?;
        Ok(Heartbeat {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Extends the lease; `false` when the replica was declared lost. A live replica that
/// finds its own lease already run out (the database was out of its reach: a network
/// outage, a stalled or restarted database) notes when, in `lease_lapses`: while others
/// may have lapsed for the same reason, no lease that ran out is believed (see
/// `ops::open_intents`).
fn renew(pool: &r2d2::Pool<Manager>, replica: &str, lease_ms: i64) -> Result<bool, String> {
    let mut conn = pool.get().map_err(|e| e.to_string())?;
    let mut tx = super::conn::Tx::begin(&mut conn, "renewing the replica lease")
        .map_err(|e| e.to_string())?;
    // The row first (waiting for it, if anything holds it), then the clock: a lapse is
    // judged when the renewal can actually happen, not before a wait.
    let held = tx
        .opt(
            "SELECT 1 FROM replicas WHERE id = $1 AND lost_ms IS NULL FOR UPDATE",
            &[&replica],
        )
        .map_err(|e| e.to_string())?;
    if held.is_none() {
        return Ok(false);
    }
    let row = tx
        .opt(
            "SELECT lease_until_ms < (extract(epoch from clock_timestamp()) * 1000)::bigint
             FROM replicas WHERE id = $1",
            &[&replica],
        )
        .map_err(|e| e.to_string())?;
    let Some(row) = row else {
        return Ok(false);
    };
    let lapsed: bool =
        super::conn::col(&row, 0, "replicas", "lease_until_ms").map_err(|e| e.to_string())?;
    tx.exec(
        "UPDATE replicas SET lease_until_ms = (extract(epoch from clock_timestamp()) * 1000)::bigint + $2
         WHERE id = $1",
        &[&replica, &lease_ms],
    )
    .map_err(|e| e.to_string())?;
    if lapsed {
        tx.exec(
            "INSERT INTO lease_lapses (id, at_ms) VALUES (1, (extract(epoch from clock_timestamp()) * 1000)::bigint)
             ON CONFLICT (id) DO UPDATE SET at_ms = GREATEST(lease_lapses.at_ms, excluded.at_ms)",
            &[],
        )
        .map_err(|e| e.to_string())?;
        tracing::warn!(replica = %replica, "this replica's lease ran out before it could renew it (the shared store was out of reach); leases that ran out are not believed for a lease from now");
    }
    tx.commit().map_err(|e| e.to_string())?;
    Ok(true)
}
