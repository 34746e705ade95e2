//! Why PostgreSQL admissions are exact across replicas: named locks.
//!
//! Every transaction that decides on shared counters first takes transaction-scoped
//! advisory locks on the names it touches (each budget scope, rate-limit key and
//! idempotency key), all at once and in one global order (sorted 64-bit keys), so two
//! transactions never wait on each other in a cycle. The kill switch is a lock of its own,
//! taken shared by every admission and claim and exclusive by `set_kill`: engaging the
//! switch waits for admissions in flight, and every admission after it sees it. Under READ
//! COMMITTED each statement after the locks reads what the previous holder committed, so a
//! transaction holding its names sees and changes exactly what the SQLite store's single
//! writer would. Unlike SERIALIZABLE there is no abort-and-retry storm on a hot ceiling:
//! admissions on one ceiling queue (as they must), and admissions on disjoint tenants run
//! in parallel.

use sandboxio_core::fingerprint::sha256_hex;

use super::conn::Tx;
use crate::store::StoreResult;

/// The kill switch's lock (two-int key space, apart from the hashed names).
pub(super) const KILL: (i32, i32) = (0x5342_5849, 1);
/// The migration lock (bigint key space; no hashed name is this value in practice, and a
/// collision would only make the two wait for each other).
pub(super) const MIGRATE: i64 = 0x5342_5849_4f00_0001;

/// The lock key of a name: the first 8 bytes of its SHA-256.
pub(super) fn key(kind: &str, name: &str) -> i64 {
    let hex = sha256_hex(format!("{kind}\0{name}").as_bytes());
    let top = hex.get(..16).unwrap_or("0");
    u64::from_str_radix(top, 16).map(|v| v as i64).unwrap_or(0)
}

/// A set of names to lock together.
#[derive(Debug, Default)]
pub(super) struct Names(Vec<i64>);

impl Names {
    pub(super) fn add(&mut self, kind: &str, name: &str) -> &mut Self {
        self.0.push(key(kind, name));
        self
    }

    /// Takes every lock, in sorted order, in one statement; held until the transaction ends.
    pub(super) fn lock(mut self, tx: &mut Tx<'_>) -> StoreResult<()> {
        self.0.sort_unstable();
        self.0.dedup();
        if self.0.is_empty() {
            return Ok(());
        }
        tx.exec(
            "SELECT pg_advisory_xact_lock(k) FROM unnest($1::bigint[]) WITH ORDINALITY AS t(k, i) ORDER BY i",
            &[&self.0],
        )?;
        Ok(())
    }
}

/// A shared hold on the kill switch (admissions and claims: any number at once, none while
/// it is engaged or released), and the database's clock once it is held, in Unix
/// milliseconds (one round trip: both are needed).
pub(super) fn kill_shared_at(tx: &mut Tx<'_>) -> StoreResult<i64> {
    let row = tx.opt(
        "SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint
         FROM (SELECT pg_advisory_xact_lock_shared($1, $2)) AS held",
        &[&KILL.0, &KILL.1],
    )?;
    match row {
        Some(r) => super::conn::col(&r, 0, "clock", "now"),
        None => Err(crate::store::values::corrupt("clock", "now", "no row")),
    }
}

/// Exclusive hold on the kill switch: engaging or releasing it.
pub(super) fn kill_exclusive(tx: &mut Tx<'_>) -> StoreResult<()> {
    tx.exec("SELECT pg_advisory_xact_lock($1, $2)", &[&KILL.0, &KILL.1])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_stable_and_kinds_apart() {
        assert_eq!(key("scope", "global"), key("scope", "global"));
        assert_ne!(key("scope", "global"), key("rate", "global"));
        assert_ne!(key("scope", "tenant:a"), key("scope", "tenant:b"));
    }
}
