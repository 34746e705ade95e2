//! PostgreSQL implementation of [`Store`], for several gateway replicas (processes, hosts)
//! sharing one set of budgets, rate limits, approvals, keys and kill switch.
//!
//! Each method is one transaction, as in the SQLite store, and decides with the same code
//! (the budget crate's `BudgetState`, the same SQL shapes). What SQLite gets from its one
//! writer, this store gets from named advisory locks taken in one global order (see
//! `pg/locks.rs` for why locks rather than SERIALIZABLE): an admission holds the
//! kill switch shared and its budget scopes, rate keys and idempotency key exclusively,
//! so the overspend, rate-limit, idempotency and kill-switch invariants hold across
//! replicas exactly as they hold across processes on one SQLite file. A transaction that
//! still meets a serialization failure or a deadlock is run again (at most 8 times).
//!
//! Durability: commits that precede a side effect (admit, claim, kill, approvals) are
//! synchronous; `finish`, trail heads and pruning commit with `synchronous_commit = off`,
//! like the SQLite store's relaxed `finish` (a crash of the database may lose one, which
//! recovery then reports as interrupted, never re-run).

mod anchors;
mod conn;
mod lease;
mod listen;
mod locks;
mod ops;
mod rows;
mod schema;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sandboxio_budget::{BudgetConfig, ScopeKey, Settlement, Summary};
use sandboxio_config::StateUrl;
use tokio::sync::broadcast;

use super::*;
use crate::credential::Credential;
use crate::error::GatewayError;
pub(crate) use anchors::read_anchors;
use conn::{off_thread, retryable, Manager, Tx};
use lease::{Heartbeat, Replica};
pub use lease::{DEFAULT_LEASE, MAX_LEASE, MIN_LEASE};
use listen::Listener;

/// How to reach and use the shared store.
#[derive(Debug, Clone)]
pub struct PgOptions {
    pub url: StateUrl,
    /// Connections this process keeps (`[state] pool`).
    pub pool: u32,
    /// The replica lease (`[state] lease`).
    pub lease: Duration,
    pub connect_timeout: Duration,
}

impl PgOptions {
    pub fn new(url: StateUrl) -> PgOptions {
        PgOptions {
            url,
            pool: sandboxio_config::DEFAULT_POOL_SIZE,
            lease: DEFAULT_LEASE,
            connect_timeout: Duration::from_secs(10),
        }
    }
}

pub struct PgStore {
    /// `None` only while dropping (the pool's clients must close off the runtime's threads).
    pool: Option<r2d2::Pool<Manager>>,
    url: String,
    replica: Replica,
    /// This replica's lease, in milliseconds: also how long the database must have been up
    /// before a lease that ran out is believed (see `ops::open_intents`).
    lease_ms: i64,
    lost: Arc<AtomicBool>,
    changes: broadcast::Sender<StoreChange>,
    heartbeat: Option<Heartbeat>,
    listener: Option<Listener>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<PgStore {} replica={}>", self.url, self.replica.id)
    }
}

/// Whether a PostgreSQL error is worth trying again: contention, a lost connection (closed,
/// an I/O error on it, SQLSTATE class 08), or a server shutting down, restarting or not
/// yet accepting connections (57P01-57P03).
pub(crate) fn pg_transient(e: &GatewayError) -> bool {
    match e {
        GatewayError::Postgres { source, .. } => {
            let io = {
                let mut cause = std::error::Error::source(source);
                let mut found = false;
                while let Some(c) = cause {
                    found |= c.is::<std::io::Error>();
                    cause = c.source();
                }
                found
            };
            let state = source.code().map(|c| c.code()).unwrap_or_default();
            retryable(e)
                || source.is_closed()
                || io
                || state.starts_with("08")
                || matches!(state, "57P01" | "57P02" | "57P03")
        }
        _ => false,
    }
}

/// Most times a transaction is run again after a serialization failure or deadlock.
const MAX_RETRIES: u32 = 8;

impl PgStore {
    /// Connects, applies missing migrations, registers this process as a replica with a
    /// lease, and starts the lease heartbeat and the change listener.
    pub fn open(opts: &PgOptions) -> StoreResult<PgStore> {
        let redacted = opts.url.redacted();
        if opts.lease < MIN_LEASE || opts.lease > MAX_LEASE {
            return Err(GatewayError::Config {
                why: format!(
                    "state lease {:?} is out of range ({:?} to {:?})",
                    opts.lease, MIN_LEASE, MAX_LEASE
                ),
            });
        }
        let mut config: postgres::Config =
            opts.url
                .expose()
                .parse()
                .map_err(|e: postgres::Error| GatewayError::StateUrl {
                    url: redacted.clone(),
                    why: e.to_string(),
                })?;
        config.connect_timeout(opts.connect_timeout);
        config.application_name("sandboxio");
        let unavailable = |why: String| GatewayError::PostgresUnavailable {
            url: redacted.clone(),
            why,
        };
        let pool = off_thread(|| {
            r2d2::Pool::builder()
                .max_size(opts.pool)
                .min_idle(Some(1))
                .test_on_check_out(false)
                .connection_timeout(opts.connect_timeout)
                .build(Manager {
                    config: config.clone(),
                })
                .map_err(|e| unavailable(e.to_string()))
        })?;
        let (changes, _) = broadcast::channel(64);
        // The store holds the only handle on the pool: an error below drops the store,
        // whose `Drop` closes the pool's clients off this thread (closing one blocks, which
        // panics on a thread that drives tokio); a handle kept here would be dropped last,
        // on this thread.
        let mut store = PgStore {
            pool: Some(pool),
            url: redacted.clone(),
            replica: Replica::this_process(),
            lease_ms: i64::try_from(opts.lease.as_millis()).unwrap_or(i64::MAX),
            lost: Arc::new(AtomicBool::new(false)),
            changes,
            heartbeat: None,
            listener: None,
        };
        let ran = store.tx("migrating the state schema", |tx| {
            Ok((schema::migrate(tx)?, true))
        })?;
        if ran > 0 {
            tracing::info!(
                migrations = ran,
                latest = schema::latest(),
                "migrated the shared state store"
            );
        }
        let lease_ms = i64::try_from(opts.lease.as_millis()).unwrap_or(i64::MAX);
        let r = store.replica.clone();
        store.tx("registering this replica", |tx| {
            tx.exec(
                "INSERT INTO replicas (id, node, host, owner, started_ms, lease_until_ms, lost_ms)
                 VALUES ($1, $2, $3, $4, (extract(epoch from clock_timestamp()) * 1000)::bigint,
                         (extract(epoch from clock_timestamp()) * 1000)::bigint + $5, NULL)",
                &[
                    &r.id,
                    &r.node,
                    &r.host,
                    &crate::chain::process_owner(),
                    &lease_ms,
                ],
            )?;
            Ok(((), true))
        })?;
        let beat = store
            .pool
            .clone()
            .ok_or_else(|| unavailable("the connection pool is gone".into()))?;
        store.heartbeat = Some(Heartbeat::start(
            beat,
            r.id.clone(),
            opts.lease,
            store.lost.clone(),
        )?);
        store.listener = Some(
            Listener::start(config, store.changes.clone())
                .map_err(|e| unavailable(format!("cannot start the listener thread: {e}")))?,
        );
        Ok(store)
    }

    /// This process's replica id.
    pub fn replica_id(&self) -> &str {
        &self.replica.id
    }

    /// Whether the database holds no state at all (see `SqliteStore::is_blank`; the
    /// replicas table does not count).
    pub fn is_blank(&self) -> StoreResult<bool> {
        self.tx("checking for a new database", |tx| {
            let row = tx.opt(
                "SELECT NOT (EXISTS (SELECT 1 FROM trail_heads) OR EXISTS (SELECT 1 FROM journal)
                    OR EXISTS (SELECT 1 FROM kill_switch) OR EXISTS (SELECT 1 FROM budget_scopes)
                    OR EXISTS (SELECT 1 FROM idempotency) OR EXISTS (SELECT 1 FROM approvals)
                    OR EXISTS (SELECT 1 FROM ledger) OR EXISTS (SELECT 1 FROM credentials))",
                &[],
            )?;
            let blank = match row {
                Some(r) => conn::col(&r, 0, "state", "blank")?,
                None => true,
            };
            Ok((blank, false))
        })
    }

    /// Runs `f` in one transaction (again, after a serialization failure or deadlock);
    /// commits when `f` says so, rolls back otherwise.
    fn tx<T: Send>(
        &self,
        action: &'static str,
        mut f: impl FnMut(&mut Tx<'_>) -> StoreResult<(T, bool)> + Send,
    ) -> StoreResult<T> {
        off_thread(|| {
            let pool = self
                .pool
                .as_ref()
                .ok_or_else(|| GatewayError::PostgresUnavailable {
                    url: self.url.clone(),
                    why: "the store is closing".into(),
                })?;
            let mut conn = pool.get().map_err(|e| GatewayError::PostgresUnavailable {
                url: self.url.clone(),
                why: e.to_string(),
            })?;
            let mut attempt = 0;
            loop {
                let result = {
                    let mut tx = Tx::begin(&mut conn, action)?;
                    match f(&mut tx) {
                        Ok((v, true)) => tx.commit().map(|_| v),
                        Ok((v, false)) => Ok(v),
                        Err(e) => Err(e),
                    }
                };
                match result {
                    Err(e) if retryable(&e) && attempt < MAX_RETRIES => attempt += 1,
                    other => return other,
                }
            }
        })
    }

    fn check_lease(&self) -> StoreResult<()> {
        if self.lost.load(Ordering::SeqCst) {
            return Err(GatewayError::LeaseLost {
                replica: self.replica.id.clone(),
            });
        }
        Ok(())
    }
}

impl Drop for PgStore {
    fn drop(&mut self) {
        drop(self.listener.take());
        drop(self.heartbeat.take());
        // A replica that leaves with nothing running gives its lease back; one with open
        // intents keeps it until it expires, and the others recover that work.
        let id = self.replica.id.clone();
        let _ = self.tx("leaving the replica set", |tx| {
            tx.exec(
                "DELETE FROM replicas WHERE id = $1
                 AND NOT EXISTS (SELECT 1 FROM journal WHERE replica = $1 AND status IS NULL)",
                &[&id],
            )?;
            Ok(((), true))
        });
        // Closing a client blocks: never on a thread that drives tokio.
        let pool = self.pool.take();
        let _ = off_thread(move || {
            drop(pool);
            Ok(())
        });
    }
}

impl Store for PgStore {
    fn lease_lost(&self) -> Option<String> {
        self.lost
            .load(Ordering::SeqCst)
            .then(|| self.replica.id.clone())
    }

    fn kill_state(&self) -> StoreResult<Option<KillState>> {
        self.tx("reading the kill switch", |tx| {
            Ok((ops::read_kill(tx)?, false))
        })
    }

    fn set_kill(&self, reason: &str, by: &str, now: DateTime<Utc>) -> StoreResult<()> {
        self.tx("setting the kill switch", |tx| {
            ops::set_kill(tx, reason, by, now).map(|()| ((), true))
        })
    }

    fn clear_kill(&self) -> StoreResult<()> {
        self.tx("clearing the kill switch", |tx| {
            ops::clear_kill(tx).map(|()| ((), true))
        })
    }

    fn admin_change(
        &self,
        journal: &JournalEntry,
        change: &AdminChange,
    ) -> StoreResult<AdminCommit> {
        let replica = &self.replica.id;
        self.tx("recording an operator action's change", |tx| {
            ops::admin_change(tx, journal, change, replica)
        })
    }

    fn admit(&self, a: &Admission<'_>) -> StoreResult<Admitted> {
        self.check_lease()?;
        let replica = &self.replica.id;
        self.tx("admitting an operation", |tx| ops::admit(tx, a, replica))
    }

    fn claim(
        &self,
        approval: Option<(&str, &str)>,
        idem: Option<&IdemClaim>,
        operation_id: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<Claimed>> {
        self.tx("claiming an approval", |tx| {
            ops::claim(tx, approval, idem, operation_id, now)
        })
    }

    fn finish(&self, f: &Finish<'_>) -> StoreResult<Option<Settlement>> {
        let node = &self.replica.node;
        self.tx("finishing an operation", |tx| {
            ops::finish(tx, f, node).map(|s| (s, true))
        })
    }

    fn budget_summary(&self, cfg: &BudgetConfig, scopes: &[ScopeKey]) -> StoreResult<Vec<Summary>> {
        self.tx("summarising budget", |tx| {
            let st = ops::load_budget(tx, scopes, None)?;
            let out = scopes
                .iter()
                .map(|k| st.summary(cfg, k).map_err(super::values::budget_err))
                .collect::<StoreResult<Vec<_>>>()?;
            Ok((out, false))
        })
    }

    fn reopen_scope(&self, scope: &ScopeKey, now: DateTime<Utc>) -> StoreResult<bool> {
        self.tx("reopening a budget scope", |tx| {
            ops::reopen_scope(tx, scope, now)
        })
    }

    fn ledger(&self, since: DateTime<Utc>, until: DateTime<Utc>) -> StoreResult<Vec<LedgerLine>> {
        self.tx("reading ledger", |tx| {
            Ok((rows::ledger(tx, since, until)?, false))
        })
    }

    fn create_approval(&self, a: &Approval) -> StoreResult<()> {
        self.tx("creating an approval", |tx| {
            rows::create_approval(tx, a).map(|()| ((), true))
        })
    }

    fn get_approval(&self, id: &str) -> StoreResult<Option<Approval>> {
        self.tx("reading an approval", |tx| {
            Ok((rows::get_approval(tx, id, false)?, false))
        })
    }

    fn list_approvals(&self, state: Option<ApprovalState>) -> StoreResult<Vec<Approval>> {
        self.tx("listing approvals", |tx| {
            Ok((rows::list_approvals(tx, state.clone())?, false))
        })
    }

    fn decide_approval(
        &self,
        id: &str,
        approve: bool,
        by: &str,
        reason: Option<&str>,
        now: DateTime<Utc>,
    ) -> StoreResult<Approval> {
        self.tx("deciding an approval", |tx| {
            rows::decide_approval(tx, id, approve, by, reason, now).map(|a| (a, true))
        })
    }

    fn expire_approvals(&self, _host_now: DateTime<Utc>) -> StoreResult<u64> {
        // On the database's clock: a host whose clock runs ahead expired other replicas'
        // approvals early.
        self.tx("expiring approvals", |tx| {
            let n = tx.exec(
                "UPDATE approvals SET state = 'expired' WHERE state IN ('pending', 'approved')
                 AND expires_ms <= (extract(epoch from clock_timestamp()) * 1000)::bigint",
                &[],
            )?;
            Ok((n, true))
        })
    }

    fn expire_approval(&self, id: &str) -> StoreResult<()> {
        self.tx("expiring an approval", |tx| {
            tx.exec(
                "UPDATE approvals SET state = 'expired' WHERE id = $1 AND state IN ('pending', 'approved')",
                &[&id],
            )?;
            Ok(((), true))
        })
    }

    fn claim_dead_intents(
        &self,
        claimant: &str,
        hold: std::time::Duration,
        is_alive: &dyn Fn(&str) -> bool,
    ) -> StoreResult<Vec<JournalEntry>> {
        // Which open intents belong to no live replica and are held by no live recovery
        // (read without locks), decided here where the callback lives; then each is
        // claimed in one transaction by compare and set, so of two replicas sweeping at
        // once, one records it. `settle_interrupted` re-checks each in its own.
        let (host, me, grace) = (&self.replica.host, &self.replica.id, self.lease_ms);
        let open = self.tx("reading open intents", |tx| {
            Ok((ops::open_intents(tx, host, me, claimant, grace)?, false))
        })?;
        let candidates: Vec<_> = open
            .into_iter()
            .filter(|o| o.lease_expired || (o.same_host && !is_alive(&o.entry.owner)))
            .filter(|o| {
                o.claim_free
                    || (o.claim_same_host && o.claim.as_ref().is_some_and(|c| !is_alive(&c.0)))
            })
            .collect();
        if candidates.is_empty() {
            return Ok(Vec::new());
        }
        let hold_ms = i64::try_from(hold.as_millis()).unwrap_or(i64::MAX / 2);
        self.tx("claiming interrupted operations", |tx| {
            let mut claimed = Vec::new();
            for o in &candidates {
                if ops::claim_intent(tx, &o.entry, claimant, me, hold_ms, o.claim.as_ref())? {
                    claimed.push(o.entry.clone());
                }
            }
            Ok((claimed, true))
        })
    }

    fn reserved_amounts(
        &self,
        ids: &[String],
    ) -> StoreResult<std::collections::BTreeMap<String, sandboxio_core::Money>> {
        self.tx("reading reservations", |tx| {
            let mut out = std::collections::BTreeMap::new();
            for id in ids {
                let st = ops::load_budget(tx, &[], Some(id))?;
                if let Some(r) = st.reservations.get(id) {
                    if !ops::waited_for_approval(tx, id)? {
                        out.insert(id.clone(), r.amount);
                    }
                }
            }
            Ok((out, false))
        })
    }

    fn settle_interrupted(
        &self,
        now: DateTime<Utc>,
        dead: &[JournalEntry],
        budget: &BudgetConfig,
        interrupted_outcome: &dyn Fn(&JournalEntry) -> String,
    ) -> StoreResult<Vec<JournalEntry>> {
        let chosen: Vec<(JournalEntry, String)> = dead
            .iter()
            .map(|e| (e.clone(), interrupted_outcome(e)))
            .collect();
        let (me, grace) = (&self.replica.id, self.lease_ms);
        self.tx("recovering interrupted work", |tx| {
            ops::interrupt(tx, &chosen, budget, me, now, grace).map(|v| (v, true))
        })
    }

    fn open_intents_since(&self, since: DateTime<Utc>) -> StoreResult<Vec<JournalEntry>> {
        self.tx("reading open intents", |tx| {
            let rows = tx.rows(
                "SELECT operation_id, intent, started_ms, owner, idempotent, idem_tenant, idem_key
                 FROM journal WHERE status IS NULL AND started_ms >= $1 ORDER BY started_ms, operation_id",
                &[&super::values::ms(since)],
            )?;
            let mut out = Vec::with_capacity(rows.len());
            for r in &rows {
                let t: Option<String> = conn::col(r, 5, "journal", "idem_tenant")?;
                let k: Option<String> = conn::col(r, 6, "journal", "idem_key")?;
                out.push(JournalEntry {
                    operation_id: conn::col(r, 0, "journal", "operation_id")?,
                    intent: conn::col(r, 1, "journal", "intent")?,
                    started_at: super::values::from_ms(conn::col(r, 2, "journal", "started_ms")?),
                    owner: conn::col(r, 3, "journal", "owner")?,
                    idempotent: conn::col(r, 4, "journal", "idempotent")?,
                    idem: t.zip(k),
                });
            }
            Ok((out, false))
        })
    }

    fn journal_has(&self, ids: &[String]) -> StoreResult<Vec<String>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids = ids.to_vec();
        self.tx("reading the journal", |tx| {
            let rows = tx.rows(
                "SELECT operation_id FROM journal WHERE operation_id = ANY($1)",
                &[&ids],
            )?;
            let mut found = Vec::with_capacity(rows.len());
            for r in &rows {
                found.push(conn::col(r, 0, "journal", "operation_id")?);
            }
            Ok((found, false))
        })
    }

    fn live_counts(&self) -> StoreResult<LiveCounts> {
        self.tx("counting live state", |tx| {
            Ok((rows::live_counts(tx)?, false))
        })
    }

    fn put_heads(&self, heads: &[SignedHead], now: DateTime<Utc>) -> StoreResult<()> {
        if heads.is_empty() {
            return Ok(());
        }
        let node = &self.replica.node;
        self.tx("storing the trail head", |tx| {
            tx.batch("SET LOCAL synchronous_commit = off")?;
            rows::put_heads(tx, node, heads, now).map(|()| ((), true))
        })
    }

    fn keep_unrecorded(&self, u: &Unrecorded) -> StoreResult<()> {
        self.tx("keeping an unwritten record", |tx| {
            rows::keep_unrecorded(tx, u).map(|()| ((), true))
        })
    }

    fn unrecorded(&self, limit: usize) -> StoreResult<Vec<Unrecorded>> {
        self.tx("reading unwritten records", |tx| {
            Ok((rows::unrecorded(tx, limit)?, false))
        })
    }

    fn settle_unrecorded(&self, operation_id: &str, left: &[String]) -> StoreResult<()> {
        self.tx("settling an unwritten record", |tx| {
            rows::settle_unrecorded(tx, operation_id, left).map(|()| ((), true))
        })
    }

    fn heads(&self) -> StoreResult<Vec<SignedHead>> {
        let node = &self.replica.node;
        self.tx("reading trail heads", |tx| {
            Ok((rows::heads(tx, Some(node))?, false))
        })
    }

    fn record_anchor_break(
        &self,
        b: &AnchorBreak,
        new_head: Option<&SignedHead>,
    ) -> StoreResult<()> {
        let node = &self.replica.node;
        self.tx("recording a broken trail anchor", |tx| {
            rows::record_break(tx, node, b, new_head).map(|()| ((), true))
        })
    }

    fn anchor_breaks(&self) -> StoreResult<Vec<AnchorBreak>> {
        let node = &self.replica.node;
        self.tx("reading trail anchor breaks", |tx| {
            Ok((rows::breaks(tx, Some(node))?, false))
        })
    }

    fn prune(&self, now: DateTime<Utc>, retention: std::time::Duration) -> StoreResult<Pruned> {
        let me = &self.replica.id;
        self.tx("pruning old state", |tx| {
            tx.batch("SET LOCAL synchronous_commit = off")?;
            rows::prune(tx, now, retention, me).map(|p| (p, true))
        })
    }

    fn rate_usage(&self, prefix: &str, since: DateTime<Utc>) -> StoreResult<Vec<RateUsage>> {
        self.tx("reading rate usage", |tx| {
            Ok((rows::rate_usage(tx, prefix, since)?, false))
        })
    }

    fn create_credential(&self, c: &Credential) -> StoreResult<()> {
        self.tx("storing a credential", |tx| {
            rows::insert_credential(tx, c).map(|()| ((), true))
        })
    }

    fn credential(&self, id: &str) -> StoreResult<Option<Credential>> {
        self.tx("reading a credential", |tx| {
            Ok((rows::credential(tx, id)?, false))
        })
    }

    fn list_credentials(&self, tenant: Option<&str>) -> StoreResult<Vec<Credential>> {
        self.tx("listing credentials", |tx| {
            Ok((rows::list_credentials(tx, tenant)?, false))
        })
    }

    fn revoke_credential(&self, id: &str, now: DateTime<Utc>) -> StoreResult<bool> {
        self.tx("revoking a credential", |tx| {
            rows::revoke_credential(tx, id, now).map(|v| (v, true))
        })
    }

    fn changes(&self) -> Option<broadcast::Receiver<StoreChange>> {
        Some(self.changes.subscribe())
    }

    fn describe(&self) -> StoreInfo {
        StoreInfo {
            backend: "postgres".into(),
            replica: Some(self.replica.id.clone()),
        }
    }
}
