//! SQLite implementation of [`Store`]: WAL, one IMMEDIATE transaction per call.
//!
//! Durability: with `SyncMode::Full` (default) SQLite fsyncs the WAL on every commit, so
//! a state change is on disk when the method returns. `SyncMode::Normal` fsyncs only at
//! checkpoints: a power loss may lose the last commits (a process crash loses nothing).
//! Several processes may share one file: SQLite's lock serialises writers and
//! `busy_timeout` makes a writer wait instead of failing.
//!
//! Money is stored as decimal TEXT and summed in Rust, never by SQL (which would use
//! floating point). SQL is kept portable (ON CONFLICT, no INSERT OR REPLACE) so a
//! PostgreSQL store can share it.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use sandboxio_budget::{BudgetConfig, BudgetState, ScopeKey, ScopeState, Settlement, Summary};

use super::values::{budget_err, category, corrupt, from_ms, money, ms};
use super::*;
use crate::error::{db, GatewayError};

pub(super) mod credentials;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncMode {
    /// fsync the WAL on every commit.
    #[default]
    Full,
    /// fsync at checkpoints only.
    Normal,
}

pub struct SqliteStore {
    conn: Mutex<Connection>,
    mode: SyncMode,
    /// Whether the connection is currently at `synchronous=NORMAL` (changed under `conn`).
    relaxed: std::sync::atomic::AtomicBool,
    /// Opened for reading only: closing it writes nothing.
    read_only: bool,
}

impl Drop for SqliteStore {
    /// Leaves the WAL short for the next opener. A WAL restarts (its frames overwritten
    /// from the start) only when a writer finds it wholly checkpointed, and an opening
    /// that finds no other connection rebuilds the WAL's index from every valid frame. A
    /// process that commits once and closes (the one-shot CLI) never restarts it: its
    /// checkpoint comes with its last commit, so the valid frames grew by a run's frames
    /// at every run, and every opening read all of them. So a closing connection whose
    /// WAL file holds more than [`WAL_CHECKPOINT_FRAMES`] frames truncates it: nothing to
    /// copy when the last commit's checkpoint did it (else one sync of the database), and
    /// it never waits: another connection's reader or writer makes it give up (that
    /// connection closes later and does it).
    fn drop(&mut self) {
        if self.read_only {
            return;
        }
        let conn = self.conn.get_mut().unwrap_or_else(|p| p.into_inner());
        let Some(wal) = conn.path().map(|p| format!("{p}-wal")) else {
            return;
        };
        let long = std::fs::metadata(&wal).is_ok_and(|m| m.len() > WAL_TRUNCATE_BYTES);
        if !long || conn.busy_timeout(Duration::ZERO).is_err() {
            return;
        }
        if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
            r.get::<_, i64>(0)
        }) {
            tracing::debug!(target: "sandboxio::store", "closing checkpoint not done: {e}");
        }
    }
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<SqliteStore sync={:?}>", self.mode)
    }
}

const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS kill_switch (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    reason TEXT NOT NULL, by_whom TEXT NOT NULL, at_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS rate_events (
    key TEXT NOT NULL, at_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS rate_events_key ON rate_events (key, at_ms);
CREATE TABLE IF NOT EXISTS budget_scopes (
    scope TEXT PRIMARY KEY, state TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS reservations (
    operation_id TEXT PRIMARY KEY, reservation TEXT NOT NULL, created_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS ledger (
    operation_id TEXT NOT NULL, tenant TEXT NOT NULL, category TEXT NOT NULL,
    amount TEXT NOT NULL, at_ms INTEGER NOT NULL, description TEXT NOT NULL, labels TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS ledger_at ON ledger (at_ms);
CREATE TABLE IF NOT EXISTS approvals (
    id TEXT PRIMARY KEY, tenant TEXT NOT NULL, fingerprint TEXT NOT NULL, operation TEXT NOT NULL,
    rationale TEXT NOT NULL, reason TEXT NOT NULL, state TEXT NOT NULL,
    created_ms INTEGER NOT NULL, expires_ms INTEGER NOT NULL,
    decided_by TEXT, decided_ms INTEGER, decision_reason TEXT
);
CREATE TABLE IF NOT EXISTS idempotency (
    tenant TEXT NOT NULL, key TEXT NOT NULL, fingerprint TEXT NOT NULL, operation_id TEXT NOT NULL,
    state TEXT NOT NULL, outcome TEXT, created_ms INTEGER NOT NULL, expires_ms INTEGER NOT NULL,
    PRIMARY KEY (tenant, key)
);
CREATE TABLE IF NOT EXISTS journal (
    operation_id TEXT PRIMARY KEY, intent TEXT NOT NULL, started_ms INTEGER NOT NULL,
    owner TEXT NOT NULL, idempotent INTEGER NOT NULL, status TEXT, ended_ms INTEGER,
    idem_tenant TEXT, idem_key TEXT
);
CREATE INDEX IF NOT EXISTS journal_open ON journal (status);
CREATE TABLE IF NOT EXISTS recovery_claims (
    operation_id TEXT PRIMARY KEY, claimant TEXT NOT NULL, until_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS unrecorded (
    operation_id TEXT PRIMARY KEY, event TEXT NOT NULL, sinks TEXT NOT NULL, at_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS trail_heads (
    trail TEXT PRIMARY KEY, size INTEGER NOT NULL, head TEXT NOT NULL, updated_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS trail_breaks (
    trail TEXT NOT NULL, at_ms INTEGER NOT NULL, head TEXT NOT NULL, found TEXT NOT NULL
);
"#;

/// Runs `f` in one transaction of `behavior` and commits it (a failure of `f` rolls back).
fn run_tx<T>(
    conn: &mut Connection,
    behavior: TransactionBehavior,
    action: &'static str,
    f: impl FnOnce(&rusqlite::Transaction<'_>) -> StoreResult<T>,
) -> StoreResult<T> {
    let tx = conn
        .transaction_with_behavior(behavior)
        .map_err(db(action))?;
    let out = f(&tx)?;
    tx.commit().map_err(db(action))?;
    Ok(out)
}

/// WAL frames (pages) after which a commit checkpoints the WAL into the database.
pub(super) const WAL_CHECKPOINT_FRAMES: i64 = 64;

/// The WAL file's size past which a closing connection truncates it: its header and
/// [`WAL_CHECKPOINT_FRAMES`] frames of SQLite's default 4 KiB page (a database with
/// larger pages truncates a little earlier, which costs nothing but the truncation).
const WAL_TRUNCATE_BYTES: u64 = 32 + WAL_CHECKPOINT_FRAMES as u64 * (24 + 4096);

/// The schema's version: a hash of its text (both parts), kept in `PRAGMA user_version`.
/// Any change to the schema text changes it, so a database is never taken as current by a
/// build whose schema differs; never 0 (the value of a new database).
pub(super) fn schema_version() -> i32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in SCHEMA.bytes().chain(credentials::SCHEMA.bytes()) {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    // 1..=i32::MAX: positive and never 0.
    ((h & 0x7fff_ffff) | 1) as i32
}

/// The longest [`enable_wal`] keeps retrying a busy answer (the busy timeout's length).
const WAL_SWITCH_PATIENCE: Duration = Duration::from_secs(30);

/// Puts the database in WAL mode, which it already is but on its first opening. A new
/// connection does not know the file's mode until it reads it, so setting WAL first
/// starts a write transaction to switch; with other processes committing, that write can
/// find its read snapshot stale (`SQLITE_BUSY_SNAPSHOT`), which SQLite answers at once,
/// without the busy handler: seen as "state store is busy while enabling WAL" with eight
/// CLI processes on one state. So the header is read first (then setting WAL changes
/// nothing), and a busy answer is retried with a fresh snapshot, up to
/// [`WAL_SWITCH_PATIENCE`]. The header read is `user_version`, returned for
/// [`ensure_schema`] (one read at each opening, not two).
fn enable_wal(conn: &Connection) -> StoreResult<i32> {
    let started = std::time::Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        let attempt = conn
            .query_row("PRAGMA user_version", [], |r| r.get::<_, i32>(0))
            .and_then(|v| conn.pragma_update(None, "journal_mode", "WAL").map(|()| v));
        match attempt {
            Ok(v) => return Ok(v),
            Err(e)
                if matches!(
                    e.sqlite_error_code(),
                    Some(rusqlite::ErrorCode::DatabaseBusy)
                        | Some(rusqlite::ErrorCode::DatabaseLocked)
                ) && started.elapsed() < WAL_SWITCH_PATIENCE =>
            {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(e) => return Err(db("enabling WAL")(e)),
        }
    }
}

/// Creates the tables a database lacks, once: a database whose `user_version` is this
/// schema's version is taken as is (one read of the header instead of parsing and running
/// every `CREATE ... IF NOT EXISTS` at each open).
fn ensure_schema(conn: &Connection, have: i32) -> StoreResult<()> {
    let want = schema_version();
    if have == want {
        return Ok(());
    }
    let ddl = format!(
        "BEGIN IMMEDIATE;\n{SCHEMA}\n{}\nPRAGMA user_version = {want};\nCOMMIT;",
        credentials::SCHEMA
    );
    if let Err(e) = conn.execute_batch(&ddl) {
        let _ = conn.execute_batch("ROLLBACK");
        return Err(db("creating schema")(e));
    }
    Ok(())
}

impl SqliteStore {
    /// Opens (or creates) the database at `path`: created 0600, and the database and its
    /// `-wal`/`-shm` files tightened to 0600 when looser. Front ends open the state through
    /// [`super::StateFiles::open_store`], which also refuses a lost or damaged database.
    pub fn open(path: &Path, sync: SyncMode) -> StoreResult<SqliteStore> {
        super::perms::create_private(path)?;
        for f in super::perms::db_files(path) {
            super::perms::tighten_file(&f)?;
        }
        let conn = Connection::open(path).map_err(|e| GatewayError::StoreOpen {
            path: path.display().to_string(),
            source: e,
        })?;
        let store = Self::init(conn, sync).map_err(|e| match e {
            GatewayError::Store { source, .. } => GatewayError::StoreOpen {
                path: path.display().to_string(),
                source,
            },
            other => other,
        })?;
        for f in super::perms::db_files(path) {
            super::perms::tighten_file(&f)?;
        }
        Ok(store)
    }

    /// Whether the database holds no state at all: no kill switch, journal, budget, key,
    /// approval, ledger line, credential or trail head (a new database).
    pub fn is_blank(&self) -> StoreResult<bool> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        conn.query_row(
            "SELECT NOT (EXISTS (SELECT 1 FROM trail_heads) OR EXISTS (SELECT 1 FROM journal)
                OR EXISTS (SELECT 1 FROM kill_switch) OR EXISTS (SELECT 1 FROM budget_scopes)
                OR EXISTS (SELECT 1 FROM idempotency) OR EXISTS (SELECT 1 FROM approvals)
                OR EXISTS (SELECT 1 FROM ledger) OR EXISTS (SELECT 1 FROM credentials))",
            [],
            |r| r.get::<_, bool>(0),
        )
        .map_err(db("checking for a new database"))
    }

    /// Opens an existing database for reading only (e.g. to read a trail's signed head when
    /// verifying); never creates or changes anything.
    pub fn open_read_only(path: &Path) -> StoreResult<SqliteStore> {
        let conn = Connection::open_with_flags(
            path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| GatewayError::StoreOpen {
            path: path.display().to_string(),
            source: e,
        })?;
        conn.busy_timeout(Duration::from_secs(30))
            .map_err(db("setting busy timeout"))?;
        Ok(SqliteStore {
            mode: SyncMode::Full,
            relaxed: std::sync::atomic::AtomicBool::new(false),
            read_only: true,
            conn: Mutex::new(conn),
        })
    }

    pub fn open_in_memory() -> StoreResult<SqliteStore> {
        let conn = Connection::open_in_memory().map_err(db("opening in-memory store"))?;
        Self::init(conn, SyncMode::Full)
    }

    fn init(conn: Connection, sync: SyncMode) -> StoreResult<SqliteStore> {
        conn.busy_timeout(Duration::from_secs(30))
            .map_err(db("setting busy timeout"))?;
        let version = enable_wal(&conn)?;
        let s = match sync {
            SyncMode::Full => "FULL",
            SyncMode::Normal => "NORMAL",
        };
        conn.pragma_update(None, "synchronous", s)
            .map_err(db("setting synchronous"))?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(db("enabling foreign keys"))?;
        // Every statement of the chain's transactions is prepared once and kept: parsing
        // SQL was a tenth of an operation's CPU. Room for all of them (the default 16 is
        // fewer than one admission and one finish use, and a cycle longer than an LRU
        // cache never hits).
        conn.set_prepared_statement_cache_capacity(128);
        // A commit past the autocheckpoint size checkpoints the WAL: closing does no
        // checkpoint, fsync or unlink of its own. Commits stay durable (their WAL frames
        // are fsynced); nothing is lost by leaving the WAL in place.
        conn.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
            true,
        )
        .map_err(db("configuring the close"))?;
        // The price of a WAL left in place: the next process to open the database alone
        // rebuilds the WAL's index by reading and checksumming every frame since the last
        // checkpoint (about 4 us a frame measured here: up to 4 ms per open with SQLite's
        // default of 1000, for a one-shot CLI every time). A checkpoint every
        // `WAL_CHECKPOINT_FRAMES` frames bounds that; it costs one fsync of the database
        // file per that many frames (a run writes a few), on the commit that crosses it.
        conn.pragma_update(None, "wal_autocheckpoint", WAL_CHECKPOINT_FRAMES)
            .map_err(db("setting the checkpoint size"))?;
        ensure_schema(&conn, version)?;
        Ok(SqliteStore {
            mode: sync,
            relaxed: std::sync::atomic::AtomicBool::new(sync == SyncMode::Normal),
            read_only: false,
            conn: Mutex::new(conn),
        })
    }

    /// With `SyncMode::Full`, commits that must be durable before a side effect fsync the
    /// WAL; `finish` commits relaxed (no fsync of its own) and becomes durable with the
    /// next durable commit or checkpoint. A process crash loses neither; a power loss may
    /// lose a relaxed `finish`: recovery then settles the operation from its record, which
    /// the trail synced before it (`chain/settle_recorded.rs`), or reports it interrupted
    /// when the trail lacks it (never re-run).
    fn set_durable(&self, conn: &Connection, durable: bool) -> StoreResult<()> {
        use std::sync::atomic::Ordering;
        if self.mode == SyncMode::Normal || self.relaxed.load(Ordering::Relaxed) != durable {
            return Ok(());
        }
        let sql = if durable {
            "PRAGMA synchronous = FULL"
        } else {
            "PRAGMA synchronous = NORMAL"
        };
        conn.prepare_cached(sql)
            .and_then(|mut stmt| stmt.execute([]))
            .map_err(db("setting synchronous"))?;
        self.relaxed.store(!durable, Ordering::Relaxed);
        Ok(())
    }

    pub(super) fn with_tx<T>(
        &self,
        action: &'static str,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> StoreResult<T>,
    ) -> StoreResult<T> {
        self.with_tx_durability(action, true, f)
    }

    fn with_tx_durability<T>(
        &self,
        action: &'static str,
        durable: bool,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> StoreResult<T>,
    ) -> StoreResult<T> {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        self.set_durable(&conn, durable)?;
        run_tx(&mut conn, TransactionBehavior::Immediate, action, f)
    }

    /// A read-only transaction: one snapshot of the database, without the write lock
    /// (other writers go on) and without changing the connection's durability (it commits
    /// nothing, so there is nothing to sync).
    fn with_read<T>(
        &self,
        action: &'static str,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> StoreResult<T>,
    ) -> StoreResult<T> {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        run_tx(&mut conn, TransactionBehavior::Deferred, action, f)
    }

    /// Loads the scopes a budget operation touches (and a reservation) into a `BudgetState`.
    fn load_budget(
        tx: &rusqlite::Transaction<'_>,
        scopes: &[ScopeKey],
        reservation: Option<&str>,
    ) -> StoreResult<BudgetState> {
        let mut st = BudgetState::new();
        let mut keys: Vec<ScopeKey> = scopes.to_vec();
        if let Some(id) = reservation {
            let row: Option<String> = tx
                .prepare_cached("SELECT reservation FROM reservations WHERE operation_id = ?1")
                .and_then(|mut stmt| stmt.query_row(params![id], |r| r.get(0)))
                .optional()
                .map_err(db("reading a reservation"))?;
            if let Some(json) = row {
                let r = serde_json::from_str::<sandboxio_budget::Reservation>(&json)
                    .ok()
                    .filter(|r| !r.amount.is_negative())
                    .ok_or_else(|| corrupt("reservations", "reservation", json.clone()))?;
                keys.extend(r.scopes.iter().cloned());
                st.reservations.insert(r.id.clone(), r);
            }
        }
        for key in keys {
            let name = key.to_string();
            let row: Option<String> = tx
                .prepare_cached("SELECT state FROM budget_scopes WHERE scope = ?1")
                .and_then(|mut stmt| stmt.query_row(params![name], |r| r.get(0)))
                .optional()
                .map_err(db("reading budget scope"))?;
            let scope: ScopeState = match row {
                Some(json) => serde_json::from_str(&json)
                    .ok()
                    .filter(ScopeState::is_sane)
                    .ok_or_else(|| corrupt("budget_scopes", "state", json.clone()))?,
                None => ScopeState::default(),
            };
            st.scopes.insert(key, scope);
        }
        Ok(st)
    }

    /// Writes back the scopes of `st` and its reservations (deleting `closed`).
    fn store_budget(
        tx: &rusqlite::Transaction<'_>,
        st: &BudgetState,
        closed: Option<&str>,
        now: DateTime<Utc>,
    ) -> StoreResult<()> {
        for (key, scope) in &st.scopes {
            let json = serde_json::to_string(scope)
                .map_err(|e| corrupt("budget_scopes", "state", e.to_string()))?;
            tx.prepare_cached("INSERT INTO budget_scopes (scope, state) VALUES (?1, ?2) ON CONFLICT (scope) DO UPDATE SET state = excluded.state").and_then(|mut stmt| stmt.execute(params![key.to_string(), json]))
            .map_err(db("writing budget scope"))?;
        }
        for (id, r) in &st.reservations {
            let json = serde_json::to_string(r)
                .map_err(|e| corrupt("reservations", "reservation", e.to_string()))?;
            tx.prepare_cached("INSERT INTO reservations (operation_id, reservation, created_ms) VALUES (?1, ?2, ?3) ON CONFLICT (operation_id) DO NOTHING").and_then(|mut stmt| stmt.execute(params![id, json, ms(now)]))
            .map_err(db("writing a reservation"))?;
        }
        if let Some(id) = closed {
            tx.prepare_cached("DELETE FROM reservations WHERE operation_id = ?1")
                .and_then(|mut stmt| stmt.execute(params![id]))
                .map_err(db("closing a reservation"))?;
        }
        Ok(())
    }

    /// Releases the reservation of `operation_id`, if it has one.
    /// Whether operation `id` asked a person and its approval was never used (pending,
    /// decided or expired): then it never got past the approval, so never ran.
    fn waited_for_approval_in(tx: &rusqlite::Transaction<'_>, id: &str) -> StoreResult<bool> {
        let state: Option<String> = tx
            .prepare_cached("SELECT state FROM approvals WHERE id = ?1")
            .and_then(|mut stmt| stmt.query_row(params![approval_id_for(id)], |r| r.get(0)))
            .optional()
            .map_err(db("reading an approval"))?;
        Ok(state.is_some_and(|s| s != "used"))
    }

    /// Charges an interrupted operation its reservation, with its ledger line; one that
    /// was still waiting for its approval is released instead.
    fn charge_reservation_in(
        tx: &rusqlite::Transaction<'_>,
        budget: &BudgetConfig,
        e: &JournalEntry,
        now: DateTime<Utc>,
    ) -> StoreResult<()> {
        let id = &e.operation_id;
        let mut st = Self::load_budget(tx, &[], Some(id))?;
        let Some(r) = st.reservations.get(id).cloned() else {
            return Ok(());
        };
        if Self::waited_for_approval_in(tx, id)? {
            // Stopped while a person had not let it go: it never ran.
            st.release(id).map_err(budget_err)?;
            return Self::store_budget(tx, &st, Some(id), now);
        }
        let s = st.settle(budget, id, r.amount).map_err(budget_err)?;
        Self::store_budget(tx, &st, Some(id), now)?;
        if !s.charged.is_zero() {
            let l = super::interrupted_ledger_line(e, &r, s.charged, now);
            tx.prepare_cached("INSERT INTO ledger (operation_id, tenant, category, amount, at_ms, description, labels) VALUES (?1, ?2, ?3, ?4, ?5, ?6, '{}')")
                .and_then(|mut stmt| stmt.execute(params![l.operation_id, l.tenant, l.category.as_str(), l.amount.to_string(), ms(l.at), l.description]))
                .map_err(db("writing ledger"))?;
        }
        Ok(())
    }

    /// Takes one event from a rate limit, or says when to retry. The decision is the
    /// budget crate's sliding log, over the events this store keeps for the key.
    fn rate_take_in(
        tx: &rusqlite::Transaction<'_>,
        key: &str,
        limit: &sandboxio_budget::RateLimit,
        now_ms: i64,
    ) -> StoreResult<Option<u64>> {
        let window = i64::try_from(limit.window_ms()).unwrap_or(i64::MAX);
        let cutoff = now_ms.saturating_sub(window);
        tx.prepare_cached("DELETE FROM rate_events WHERE key = ?1 AND at_ms <= ?2")
            .and_then(|mut stmt| stmt.execute(params![key, cutoff]))
            .map_err(db("pruning rate events"))?;
        let mut stmt = tx
            .prepare_cached("SELECT at_ms FROM rate_events WHERE key = ?1")
            .map_err(db("counting rate events"))?;
        let events = stmt
            .query_map(params![key], |r| r.get::<_, i64>(0))
            .map_err(db("counting rate events"))?
            .collect::<Result<Vec<i64>, _>>()
            .map_err(db("counting rate events"))?;
        let log = sandboxio_budget::SlidingLog::from_events(
            events.into_iter().map(|t| u64::try_from(t).unwrap_or(0)),
        );
        let now = u64::try_from(now_ms).unwrap_or(0);
        if let sandboxio_budget::RateDecision::Deny { retry_after_ms } = log.decide(limit, now) {
            return Ok(Some(retry_after_ms));
        }
        tx.prepare_cached("INSERT INTO rate_events (key, at_ms) VALUES (?1, ?2)")
            .and_then(|mut stmt| stmt.execute(params![key, now_ms]))
            .map_err(db("recording a rate event"))?;
        Ok(None)
    }

    /// Looks the key up and, when it is new and `insert` is set, claims it for
    /// `operation_id`.
    fn idem_claim_in(
        tx: &rusqlite::Transaction<'_>,
        c: &IdemClaim,
        operation_id: &str,
        now: DateTime<Utc>,
        insert: bool,
    ) -> StoreResult<IdemBegin> {
        tx.prepare_cached("DELETE FROM idempotency WHERE tenant = ?1 AND key = ?2 AND expires_ms <= ?3 AND state = 'done'").and_then(|mut stmt| stmt.execute(params![c.tenant, c.key, ms(now)]))
        .map_err(db("expiring idempotency keys"))?;
        let row: Option<(String, String, Option<String>, String)> = tx
            .prepare_cached(
                "SELECT fingerprint, state, outcome, operation_id FROM idempotency WHERE tenant = ?1 AND key = ?2",
            )
            .and_then(|mut stmt| {
                stmt.query_row(params![c.tenant, c.key], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                })
            })
            .optional()
            .map_err(db("reading an idempotency key"))?;
        match row {
            Some((fp, _, _, _)) if fp != c.fingerprint && fp != ANY_REQUEST => {
                Ok(IdemBegin::Conflict)
            }
            Some((_, state, Some(outcome), op)) if state == "done" => Ok(IdemBegin::Replay {
                outcome,
                operation_id: op,
            }),
            Some(_) => Ok(IdemBegin::InProgress),
            None if !insert => Ok(IdemBegin::New),
            None => {
                let exp = ms(now).saturating_add(
                    i64::try_from(c.retention_s.saturating_mul(1000)).unwrap_or(i64::MAX),
                );
                tx.prepare_cached("INSERT INTO idempotency (tenant, key, fingerprint, operation_id, state, outcome, created_ms, expires_ms) VALUES (?1, ?2, ?3, ?4, 'running', NULL, ?5, ?6)").and_then(|mut stmt| stmt.execute(params![c.tenant, c.key, c.fingerprint, operation_id, ms(now), exp]))
                .map_err(db("recording an idempotency key"))?;
                Ok(IdemBegin::New)
            }
        }
    }

    fn row_to_approval(r: &rusqlite::Row<'_>) -> rusqlite::Result<(Approval, String)> {
        let state: String = r.get(6)?;
        Ok((
            Approval {
                id: r.get(0)?,
                tenant: r.get(1)?,
                fingerprint: r.get(2)?,
                operation: r.get(3)?,
                rationale: r.get(4)?,
                reason: r.get(5)?,
                state: ApprovalState::Pending,
                created_at: from_ms(r.get(7)?),
                expires_at: from_ms(r.get(8)?),
                decided_by: r.get(9)?,
                decided_at: r.get::<_, Option<i64>>(10)?.map(from_ms),
                decision_reason: r.get(11)?,
            },
            state,
        ))
    }

    fn fix_state((mut a, state): (Approval, String)) -> StoreResult<Approval> {
        a.state = ApprovalState::parse(&state).ok_or(GatewayError::Corrupt {
            table: "approvals",
            column: "state",
            value: state,
        })?;
        Ok(a)
    }
}

fn read_kill(conn: &Connection) -> StoreResult<Option<KillState>> {
    conn.prepare_cached("SELECT reason, by_whom, at_ms FROM kill_switch WHERE id = 1")
        .and_then(|mut stmt| {
            stmt.query_row([], |r| {
                Ok(KillState {
                    reason: r.get(0)?,
                    by: r.get(1)?,
                    at: from_ms(r.get(2)?),
                })
            })
        })
        .optional()
        .map_err(db("reading the kill switch"))
}

const APPROVAL_COLS: &str = "id, tenant, fingerprint, operation, rationale, reason, state, created_ms, expires_ms, decided_by, decided_ms, decision_reason";

impl Store for SqliteStore {
    fn kill_state(&self) -> StoreResult<Option<KillState>> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        read_kill(&conn)
    }

    fn set_kill(&self, reason: &str, by: &str, now: DateTime<Utc>) -> StoreResult<()> {
        self.with_tx("setting the kill switch", |tx| kill_in(tx, reason, by, now))
    }

    fn clear_kill(&self) -> StoreResult<()> {
        self.with_tx("clearing the kill switch", clear_kill_in)
    }

    fn admin_change(
        &self,
        journal: &JournalEntry,
        change: &AdminChange,
    ) -> StoreResult<AdminCommit> {
        self.with_tx("recording an operator action's change", |tx| {
            // The write lock is held (an immediate transaction): this time orders it.
            let at = Utc::now();
            let done = match change {
                AdminChange::Kill { reason, by, now } => {
                    kill_in(tx, reason, by, *now).map(|()| AdminChanged::Done)?
                }
                AdminChange::Resume => clear_kill_in(tx).map(|()| AdminChanged::Done)?,
                AdminChange::Decide {
                    approval_id,
                    approve,
                    by,
                    reason,
                    now,
                } => AdminChanged::Decided(decide_in(
                    tx,
                    approval_id,
                    *approve,
                    by,
                    reason.as_deref(),
                    *now,
                )?),
                AdminChange::Reopen { scope, now } => {
                    AdminChanged::Reopened(reopen_in(tx, scope, *now)?)
                }
                AdminChange::Revoke { key_id, now } => {
                    let before = credentials::get(tx, key_id)?;
                    let revoked = credentials::revoke(tx, key_id, ms(*now))?;
                    AdminChanged::Revoked(before.filter(|_| revoked))
                }
                AdminChange::CreateKey { credential } => {
                    credentials::insert(tx, credential)?;
                    AdminChanged::Created
                }
                AdminChange::IntentOnly => AdminChanged::Done,
            };
            if done.changed() {
                let mut j = journal.clone();
                j.started_at = at;
                journal_in(tx, &j)?;
            }
            Ok(AdminCommit { change: done, at })
        })
    }

    fn admit(&self, a: &Admission<'_>) -> StoreResult<Admitted> {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        self.set_durable(&conn, true)?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(db("admitting an operation"))?;
        let kill = read_kill(&tx)?;
        // Every early return below drops `tx` uncommitted: a refused operation changes nothing.
        if let Some(k) = kill {
            return Ok(Admitted::KillSwitch(k));
        }
        let now_ms = ms(a.now);
        for (key, limit) in &a.rate {
            if let Some(retry_after_ms) = Self::rate_take_in(&tx, key, limit, now_ms)? {
                return Ok(Admitted::RateLimited {
                    key: key.clone(),
                    limit: *limit,
                    retry_after_ms,
                });
            }
        }
        let j = &a.journal;
        journal_in(&tx, j)?;
        let mut st = Self::load_budget(&tx, &a.reserve.scopes_in(a.budget), None)?;
        let reservation = match st.reserve(a.budget, &a.reserve) {
            Ok(r) => r,
            Err(denial) => return Ok(Admitted::Budget(denial)),
        };
        Self::store_budget(&tx, &st, None, a.now)?;
        if let Some(c) = &a.idem {
            match Self::idem_claim_in(&tx, c, &j.operation_id, a.now, !a.idem_lookup_only)? {
                IdemBegin::New => {}
                other => return Ok(Admitted::Idem(other)),
            }
        }
        tx.commit().map_err(db("admitting an operation"))?;
        Ok(Admitted::Proceed(reservation))
    }

    fn claim(
        &self,
        approval: Option<(&str, &str)>,
        idem: Option<&IdemClaim>,
        operation_id: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<Claimed>> {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        self.set_durable(&conn, true)?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(db("claiming an approval"))?;
        // The last moment before the side effect: the kill switch wins over an approval.
        if let Some(k) = read_kill(&tx)? {
            return Ok(Some(Claimed::KillSwitch(k)));
        }
        if let Some((id, fingerprint)) = approval {
            let n = tx
                .prepare_cached(
                    "UPDATE approvals SET state = 'used' WHERE id = ?1 AND fingerprint = ?2 AND state = 'approved' AND expires_ms > ?3",
                )
                .and_then(|mut stmt| stmt.execute(params![id, fingerprint, ms(now)]))
                .map_err(db("using an approval"))?;
            if n != 1 {
                return Ok(Some(Claimed::ApprovalInvalid));
            }
        }
        if let Some(c) = idem {
            match Self::idem_claim_in(&tx, c, operation_id, now, true)? {
                IdemBegin::New => {}
                other => return Ok(Some(Claimed::Idem(other))),
            }
        }
        tx.commit().map_err(db("claiming an approval"))?;
        Ok(None)
    }

    fn finish(&self, f: &Finish<'_>) -> StoreResult<Option<Settlement>> {
        self.with_tx_durability("finishing an operation", false, |tx| {
            let mut st = Self::load_budget(tx, &[], Some(f.operation_id))?;
            let mut settlement = None;
            if st.reservations.contains_key(f.operation_id) {
                match f.charge {
                    Some(charge) => {
                        let s = st.settle(f.budget, f.operation_id, charge).map_err(budget_err)?;
                        if let Some(l) = &f.ledger {
                            if !s.charged.is_zero() {
                                tx.prepare_cached("INSERT INTO ledger (operation_id, tenant, category, amount, at_ms, description, labels) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)").and_then(|mut stmt| stmt.execute(params![l.operation_id, l.tenant, l.category.as_str(), s.charged.to_string(), ms(l.at), l.description, serde_json::to_string(&l.labels).unwrap_or_else(|_| "{}".into())]))
                                .map_err(db("writing ledger"))?;
                            }
                        }
                        settlement = Some(s);
                    }
                    None => {
                        st.release(f.operation_id).map_err(budget_err)?;
                    }
                }
                Self::store_budget(tx, &st, Some(f.operation_id), f.now)?;
            }
            if let Some((tenant, key, end)) = &f.idem {
                match end {
                    IdemEnd::Done(outcome) => tx.prepare_cached("UPDATE idempotency SET state = 'done', outcome = ?3 WHERE tenant = ?1 AND key = ?2 AND operation_id = ?4").and_then(|mut stmt| stmt.execute(params![tenant, key, outcome, f.operation_id])),
                    IdemEnd::Abandon => tx.prepare_cached("DELETE FROM idempotency WHERE tenant = ?1 AND key = ?2 AND state = 'running' AND operation_id = ?3").and_then(|mut stmt| stmt.execute(params![tenant, key, f.operation_id])),
                }
                .map_err(db("finishing an idempotency key"))?;
            }
            tx.prepare_cached("UPDATE journal SET status = ?2, ended_ms = ?3 WHERE operation_id = ?1").and_then(|mut stmt| stmt.execute(params![f.operation_id, f.journal_status, ms(f.now)]))
            .map_err(db("journaling an outcome"))?;
            if let Some(u) = f.unrecorded {
                keep_unrecorded_in(tx, u)?;
            }
            super::heads::put_in(tx, f.heads, f.now)?;
            Ok(settlement)
        })
    }

    fn reopen_scope(&self, scope: &ScopeKey, now: DateTime<Utc>) -> StoreResult<bool> {
        self.with_tx("reopening a budget scope", |tx| reopen_in(tx, scope, now))
    }

    fn budget_summary(&self, cfg: &BudgetConfig, scopes: &[ScopeKey]) -> StoreResult<Vec<Summary>> {
        self.with_read("summarising budget", |tx| {
            let st = Self::load_budget(tx, scopes, None)?;
            let now = Utc::now();
            scopes
                .iter()
                .map(|k| st.summary_at(cfg, k, now).map_err(budget_err))
                .collect()
        })
    }

    fn ledger(&self, since: DateTime<Utc>, until: DateTime<Utc>) -> StoreResult<Vec<LedgerLine>> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let mut stmt = conn
            .prepare("SELECT operation_id, tenant, category, amount, at_ms, description, labels FROM ledger WHERE at_ms >= ?1 AND at_ms < ?2 ORDER BY at_ms")
            .map_err(db("reading ledger"))?;
        let rows = stmt
            .query_map(params![ms(since), ms(until)], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, i64>(4)?,
                    r.get::<_, String>(5)?,
                    r.get::<_, String>(6)?,
                ))
            })
            .map_err(db("reading ledger"))?;
        let mut out = Vec::new();
        for row in rows {
            let (operation_id, tenant, cat, amount, at, description, labels) =
                row.map_err(db("reading ledger"))?;
            out.push(LedgerLine {
                operation_id,
                tenant,
                category: category(&cat)?,
                amount: money("ledger", "amount", &amount)?,
                at: from_ms(at),
                description,
                labels: serde_json::from_str(&labels).unwrap_or_default(),
            });
        }
        Ok(out)
    }

    fn create_approval(&self, a: &Approval) -> StoreResult<()> {
        self.with_tx("creating an approval", |tx| {
            tx.prepare_cached(&format!("INSERT INTO approvals ({APPROVAL_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)")).and_then(|mut stmt| stmt.execute(params![a.id, a.tenant, a.fingerprint, a.operation, a.rationale, a.reason, a.state.as_str(), ms(a.created_at), ms(a.expires_at), a.decided_by, a.decided_at.map(ms), a.decision_reason]))
            .map_err(db("creating an approval"))?;
            Ok(())
        })
    }

    fn get_approval(&self, id: &str) -> StoreResult<Option<Approval>> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let row = conn
            .query_row(
                &format!("SELECT {APPROVAL_COLS} FROM approvals WHERE id = ?1"),
                params![id],
                Self::row_to_approval,
            )
            .optional()
            .map_err(db("reading an approval"))?;
        row.map(Self::fix_state).transpose()
    }

    fn list_approvals(&self, state: Option<ApprovalState>) -> StoreResult<Vec<Approval>> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let mut stmt = conn
            .prepare(&format!("SELECT {APPROVAL_COLS} FROM approvals WHERE (?1 IS NULL OR state = ?1) ORDER BY created_ms"))
            .map_err(db("listing approvals"))?;
        let rows = stmt
            .query_map(params![state.map(|s| s.as_str())], Self::row_to_approval)
            .map_err(db("listing approvals"))?;
        let mut out = Vec::new();
        for r in rows {
            out.push(Self::fix_state(r.map_err(db("listing approvals"))?)?);
        }
        Ok(out)
    }

    fn decide_approval(
        &self,
        id: &str,
        approve: bool,
        by: &str,
        reason: Option<&str>,
        now: DateTime<Utc>,
    ) -> StoreResult<Approval> {
        self.with_tx("deciding an approval", |tx| {
            decide_in(tx, id, approve, by, reason, now)
        })
    }

    fn expire_approvals(&self, now: DateTime<Utc>) -> StoreResult<u64> {
        self.with_tx("expiring approvals", |tx| {
            let n = tx
                .execute("UPDATE approvals SET state = 'expired' WHERE state IN ('pending', 'approved') AND expires_ms <= ?1", params![ms(now)])
                .map_err(db("expiring approvals"))?;
            Ok(n as u64)
        })
    }

    fn expire_approval(&self, id: &str) -> StoreResult<()> {
        self.with_tx("expiring an approval", |tx| {
            tx.prepare_cached("UPDATE approvals SET state = 'expired' WHERE id = ?1 AND state IN ('pending', 'approved')").and_then(|mut stmt| stmt.execute(params![id]))
                .map_err(db("expiring an approval"))?;
            Ok(())
        })
    }

    fn claim_dead_intents(
        &self,
        claimant: &str,
        hold: std::time::Duration,
        is_alive: &dyn Fn(&str) -> bool,
    ) -> StoreResult<Vec<JournalEntry>> {
        // Read without a write lock (the common answer is "none"), then claimed in one
        // transaction that takes each only if it is still open and its claim is still
        // what was read (compare and set): two recoveries at once each take some or none.
        let candidates = {
            let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
            let mut stmt = conn
                .prepare_cached(
                    "SELECT j.operation_id, j.intent, j.started_ms, j.owner, j.idempotent,
                            j.idem_tenant, j.idem_key, c.claimant, c.until_ms
                     FROM journal j LEFT JOIN recovery_claims c ON c.operation_id = j.operation_id
                     WHERE j.status IS NULL ORDER BY j.started_ms, j.operation_id",
                )
                .map_err(db("reading open intents"))?;
            let rows = stmt
                .query_map([], |r| {
                    let entry = JournalEntry {
                        operation_id: r.get(0)?,
                        intent: r.get(1)?,
                        started_at: from_ms(r.get(2)?),
                        owner: r.get(3)?,
                        idempotent: r.get::<_, i64>(4)? != 0,
                        idem: match (
                            r.get::<_, Option<String>>(5)?,
                            r.get::<_, Option<String>>(6)?,
                        ) {
                            (Some(t), Some(k)) => Some((t, k)),
                            _ => None,
                        },
                    };
                    let claim = r
                        .get::<_, Option<String>>(7)?
                        .zip(r.get::<_, Option<i64>>(8)?);
                    Ok((entry, claim))
                })
                .map_err(db("reading open intents"))?;
            let now = ms(Utc::now());
            let mut out = Vec::new();
            for r in rows {
                let (e, claim) = r.map_err(db("reading open intents"))?;
                let free = match &claim {
                    None => true,
                    Some((by, until)) => *until <= now || by == claimant || !is_alive(by),
                };
                if free && !is_alive(&e.owner) {
                    out.push((e, claim));
                }
            }
            out
        };
        if candidates.is_empty() {
            return Ok(Vec::new());
        }
        let until =
            ms(Utc::now()).saturating_add(i64::try_from(hold.as_millis()).unwrap_or(i64::MAX));
        self.with_tx("claiming interrupted operations", |tx| {
            let mut stmt = tx
                .prepare_cached(
                    "INSERT INTO recovery_claims (operation_id, claimant, until_ms)
                     SELECT ?1, ?2, ?3
                     WHERE EXISTS (SELECT 1 FROM journal WHERE operation_id = ?1 AND status IS NULL)
                     ON CONFLICT (operation_id) DO UPDATE
                       SET claimant = excluded.claimant, until_ms = excluded.until_ms
                       WHERE recovery_claims.claimant = ?4 AND recovery_claims.until_ms = ?5",
                )
                .map_err(db("claiming an interrupted operation"))?;
            let mut claimed = Vec::new();
            for (e, seen) in candidates {
                let (by, was) = seen.unzip();
                let n = stmt
                    .execute(params![e.operation_id, claimant, until, by, was])
                    .map_err(db("claiming an interrupted operation"))?;
                if n == 1 {
                    claimed.push(e);
                }
            }
            Ok(claimed)
        })
    }

    fn reserved_amounts(&self, ids: &[String]) -> StoreResult<BTreeMap<String, Money>> {
        self.with_tx_durability("reading reservations", false, |tx| {
            let mut out = BTreeMap::new();
            for id in ids {
                let st = Self::load_budget(tx, &[], Some(id))?;
                if let Some(r) = st.reservations.get(id) {
                    if !Self::waited_for_approval_in(tx, id)? {
                        out.insert(id.clone(), r.amount);
                    }
                }
            }
            Ok(out)
        })
    }

    fn settle_interrupted(
        &self,
        now: DateTime<Utc>,
        dead: &[JournalEntry],
        budget: &BudgetConfig,
        interrupted_outcome: &dyn Fn(&JournalEntry) -> String,
    ) -> StoreResult<Vec<JournalEntry>> {
        if dead.is_empty() {
            return Ok(Vec::new());
        }
        self.with_tx("recovering interrupted work", |tx| {
            let mut done = Vec::new();
            for e in dead {
                // Only an intent still open: another process may have settled it since.
                let n = tx.prepare_cached("UPDATE journal SET status = 'interrupted', ended_ms = ?2 WHERE operation_id = ?1 AND status IS NULL").and_then(|mut stmt| stmt.execute(params![e.operation_id, ms(now)]))
                .map_err(db("marking an intent interrupted"))?;
                if n != 1 {
                    continue;
                }
                Self::charge_reservation_in(tx, budget, e, now)?;
                tx.prepare_cached("UPDATE approvals SET state = 'expired' WHERE id = ?1 AND state IN ('pending', 'approved')").and_then(|mut stmt| stmt.execute(params![approval_id_for(&e.operation_id)]))
                .map_err(db("expiring an interrupted approval"))?;
                if let Some((tenant, key)) = &e.idem {
                    // Only the key this operation claimed (its row names it).
                    if e.idempotent {
                        tx.prepare_cached("DELETE FROM idempotency WHERE tenant = ?1 AND key = ?2 AND state = 'running' AND operation_id = ?3").and_then(|mut stmt| stmt.execute(params![tenant, key, e.operation_id]))
                        .map_err(db("forgetting an interrupted key"))?;
                    } else {
                        tx.prepare_cached("UPDATE idempotency SET state = 'done', outcome = ?3 WHERE tenant = ?1 AND key = ?2 AND state = 'running' AND operation_id = ?4").and_then(|mut stmt| stmt.execute(params![tenant, key, interrupted_outcome(e), e.operation_id]))
                        .map_err(db("settling an interrupted key"))?;
                    }
                }
                done.push(e.clone());
            }
            Ok(done)
        })
    }

    fn put_heads(&self, heads: &[SignedHead], now: DateTime<Utc>) -> StoreResult<()> {
        if heads.is_empty() {
            return Ok(());
        }
        self.with_tx_durability("storing the trail head", false, |tx| {
            super::heads::put_in(tx, heads, now)
        })
    }

    fn keep_unrecorded(&self, u: &Unrecorded) -> StoreResult<()> {
        self.with_tx("keeping an unwritten record", |tx| {
            keep_unrecorded_in(tx, u)
        })
    }

    fn unrecorded(&self, limit: usize) -> StoreResult<Vec<Unrecorded>> {
        self.with_read("reading unwritten records", |tx| {
            let mut stmt = tx
                .prepare_cached("SELECT operation_id, event, sinks, at_ms FROM unrecorded ORDER BY at_ms, operation_id LIMIT ?1")
                .map_err(db("reading unwritten records"))?;
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            let rows = stmt
                .query_map(params![limit], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, i64>(3)?,
                    ))
                })
                .map_err(db("reading unwritten records"))?;
            let mut out = Vec::new();
            for row in rows {
                let (operation_id, event, sinks, at) = row.map_err(db("reading unwritten records"))?;
                out.push(Unrecorded {
                    operation_id,
                    event,
                    sinks: serde_json::from_str(&sinks)
                        .map_err(|e| corrupt("unrecorded", "sinks", e.to_string()))?,
                    at: from_ms(at),
                });
            }
            Ok(out)
        })
    }

    fn settle_unrecorded(&self, operation_id: &str, left: &[String]) -> StoreResult<()> {
        self.with_tx("settling an unwritten record", |tx| {
            if left.is_empty() {
                tx.prepare_cached("DELETE FROM unrecorded WHERE operation_id = ?1")
                    .and_then(|mut stmt| stmt.execute(params![operation_id]))
            } else {
                let sinks = serde_json::to_string(left).unwrap_or_else(|_| "[]".into());
                tx.prepare_cached("UPDATE unrecorded SET sinks = ?2 WHERE operation_id = ?1")
                    .and_then(|mut stmt| stmt.execute(params![operation_id, sinks]))
            }
            .map_err(db("settling an unwritten record"))?;
            Ok(())
        })
    }

    fn heads(&self) -> StoreResult<Vec<SignedHead>> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        super::heads::all(&conn)
    }

    fn record_anchor_break(
        &self,
        b: &AnchorBreak,
        new_head: Option<&SignedHead>,
    ) -> StoreResult<()> {
        self.with_tx("recording a broken trail anchor", |tx| {
            super::heads::record_break_in(tx, b, new_head)
        })
    }

    fn anchor_breaks(&self) -> StoreResult<Vec<AnchorBreak>> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        super::heads::breaks(&conn)
    }

    fn prune(&self, now: DateTime<Utc>, retention: std::time::Duration) -> StoreResult<Pruned> {
        let cutoff =
            ms(now).saturating_sub(i64::try_from(retention.as_millis()).unwrap_or(i64::MAX));
        self.with_tx_durability("pruning old state", false, |tx| {
            let journal = tx
                .execute(
                    "DELETE FROM journal WHERE status IS NOT NULL AND ended_ms < ?1",
                    params![cutoff],
                )
                .map_err(db("pruning the journal"))?;
            // A claim outlives its settled intent (a recovery that read the intent open
            // just before it was settled must still find it claimed); it goes with the
            // intent's journal row.
            tx.execute(
                "DELETE FROM recovery_claims WHERE NOT EXISTS
                   (SELECT 1 FROM journal j WHERE j.operation_id = recovery_claims.operation_id)",
                [],
            )
            .map_err(db("pruning recovery claims"))?;
            let keys = tx
                .execute(
                    "DELETE FROM idempotency WHERE state = 'done' AND expires_ms <= ?1",
                    params![ms(now)],
                )
                .map_err(db("pruning idempotency keys"))?;
            let approvals = tx
                .execute(
                    "DELETE FROM approvals WHERE state NOT IN ('pending', 'approved') AND COALESCE(decided_ms, expires_ms) < ?1",
                    params![cutoff],
                )
                .map_err(db("pruning approvals"))?;
            Ok(Pruned {
                journal: journal as u64,
                idempotency: keys as u64,
                approvals: approvals as u64,
            })
        })
    }

    fn journal_has(&self, ids: &[String]) -> StoreResult<Vec<String>> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let mut stmt = conn
            .prepare_cached("SELECT 1 FROM journal WHERE operation_id = ?1")
            .map_err(db("reading the journal"))?;
        let mut found = Vec::new();
        for id in ids {
            if stmt
                .exists(params![id])
                .map_err(db("reading the journal"))?
            {
                found.push(id.clone());
            }
        }
        Ok(found)
    }

    fn open_intents_since(&self, since: DateTime<Utc>) -> StoreResult<Vec<JournalEntry>> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let mut stmt = conn
            .prepare_cached("SELECT operation_id, intent, started_ms, owner, idempotent, idem_tenant, idem_key FROM journal WHERE status IS NULL AND started_ms >= ?1 ORDER BY started_ms, operation_id")
            .map_err(db("reading open intents"))?;
        let rows = stmt
            .query_map(params![ms(since)], |r| {
                let idem = match (
                    r.get::<_, Option<String>>(5)?,
                    r.get::<_, Option<String>>(6)?,
                ) {
                    (Some(t), Some(k)) => Some((t, k)),
                    _ => None,
                };
                Ok(JournalEntry {
                    operation_id: r.get(0)?,
                    intent: r.get(1)?,
                    started_at: from_ms(r.get(2)?),
                    owner: r.get(3)?,
                    idempotent: r.get::<_, i64>(4)? != 0,
                    idem,
                })
            })
            .map_err(db("reading open intents"))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(db("reading open intents"))
    }

    fn live_counts(&self) -> StoreResult<LiveCounts> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let count = |sql: &str| -> StoreResult<u64> {
            conn.query_row(sql, [], |r| r.get::<_, i64>(0))
                .map(|n| n as u64)
                .map_err(db("counting live state"))
        };
        Ok(LiveCounts {
            reservations: count("SELECT COUNT(*) FROM reservations")?,
            pending_approvals: count("SELECT COUNT(*) FROM approvals WHERE state = 'pending'")?,
            running_keys: count("SELECT COUNT(*) FROM idempotency WHERE state = 'running'")?,
            open_intents: count("SELECT COUNT(*) FROM journal WHERE status IS NULL")?,
        })
    }

    fn rate_usage(&self, prefix: &str, since: DateTime<Utc>) -> StoreResult<Vec<RateUsage>> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let mut st = conn
            .prepare(
                "SELECT key, COUNT(*), MIN(at_ms) FROM rate_events
                 WHERE substr(key, 1, length(?1)) = ?1 AND at_ms > ?2
                 GROUP BY key ORDER BY key",
            )
            .map_err(db("reading rate usage"))?;
        let rows = st
            .query_map(params![prefix, ms(since)], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                ))
            })
            .map_err(db("reading rate usage"))?;
        let mut out = Vec::new();
        for row in rows {
            let (key, count, oldest) = row.map_err(db("reading rate usage"))?;
            let oldest = DateTime::<Utc>::from_timestamp_millis(oldest).ok_or_else(|| {
                GatewayError::Corrupt {
                    table: "rate_events",
                    column: "at_ms",
                    value: oldest.to_string(),
                }
            })?;
            out.push(RateUsage {
                key,
                count: u64::try_from(count).unwrap_or(0),
                oldest,
            });
        }
        Ok(out)
    }

    fn create_credential(&self, c: &Credential) -> StoreResult<()> {
        self.with_tx("storing a credential", |tx| credentials::insert(tx, c))
    }

    fn credential(&self, id: &str) -> StoreResult<Option<Credential>> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        credentials::get(&conn, id)
    }

    fn list_credentials(&self, tenant: Option<&str>) -> StoreResult<Vec<Credential>> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        credentials::list(&conn, tenant)
    }

    fn revoke_credential(&self, id: &str, now: DateTime<Utc>) -> StoreResult<bool> {
        self.with_tx("revoking a credential", |tx| {
            credentials::revoke(tx, id, ms(now))
        })
    }

    fn describe(&self) -> StoreInfo {
        StoreInfo {
            backend: "sqlite".into(),
            replica: None,
        }
    }
}

/// Writes an operation's intent (its journal row, open).
fn journal_in(tx: &rusqlite::Transaction<'_>, j: &JournalEntry) -> StoreResult<()> {
    tx.prepare_cached("INSERT INTO journal (operation_id, intent, started_ms, owner, idempotent, status, ended_ms, idem_tenant, idem_key) VALUES (?1, ?2, ?3, ?4, ?5, NULL, NULL, ?6, ?7)").and_then(|mut stmt| stmt.execute(params![j.operation_id, j.intent, ms(j.started_at), j.owner, j.idempotent as i64, j.idem.as_ref().map(|i| &i.0), j.idem.as_ref().map(|i| &i.1)]))
    .map_err(db("journaling an intent"))?;
    Ok(())
}

fn kill_in(
    tx: &rusqlite::Transaction<'_>,
    reason: &str,
    by: &str,
    now: DateTime<Utc>,
) -> StoreResult<()> {
    tx.prepare_cached("INSERT INTO kill_switch (id, reason, by_whom, at_ms) VALUES (1, ?1, ?2, ?3)
         ON CONFLICT (id) DO UPDATE SET reason = excluded.reason, by_whom = excluded.by_whom, at_ms = excluded.at_ms").and_then(|mut stmt| stmt.execute(params![reason, by, ms(now)]))
    .map_err(db("setting the kill switch"))?;
    // Pending asks end now, as denials by the kill switch: nothing waits to run.
    tx.prepare_cached("UPDATE approvals SET state = 'denied', decided_by = ?1, decided_ms = ?2, decision_reason = ?3 WHERE state IN ('pending', 'approved')").and_then(|mut stmt| stmt.execute(params![KILL_SWITCH_APPROVER, ms(now), reason]))
    .map_err(db("ending pending approvals"))?;
    Ok(())
}

fn clear_kill_in(tx: &rusqlite::Transaction<'_>) -> StoreResult<()> {
    tx.prepare_cached("DELETE FROM kill_switch")
        .and_then(|mut stmt| stmt.execute([]))
        .map_err(db("clearing the kill switch"))?;
    Ok(())
}

fn reopen_in(
    tx: &rusqlite::Transaction<'_>,
    scope: &ScopeKey,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let mut st = SqliteStore::load_budget(tx, std::slice::from_ref(scope), None)?;
    let reopened = st.reopen(scope);
    if reopened {
        SqliteStore::store_budget(tx, &st, None, now)?;
    }
    Ok(reopened)
}

fn decide_in(
    tx: &rusqlite::Transaction<'_>,
    id: &str,
    approve: bool,
    by: &str,
    reason: Option<&str>,
    now: DateTime<Utc>,
) -> StoreResult<Approval> {
    let row = tx
        .query_row(
            &format!("SELECT {APPROVAL_COLS} FROM approvals WHERE id = ?1"),
            params![id],
            SqliteStore::row_to_approval,
        )
        .optional()
        .map_err(db("reading an approval"))?;
    let mut a = match row {
        Some(r) => SqliteStore::fix_state(r)?,
        None => return Err(GatewayError::ApprovalNotFound { id: id.to_string() }),
    };
    if a.state == ApprovalState::Pending && a.expires_at <= now {
        tx.prepare_cached("UPDATE approvals SET state = 'expired' WHERE id = ?1")
            .and_then(|mut stmt| stmt.execute(params![id]))
            .map_err(db("expiring an approval"))?;
        a.state = ApprovalState::Expired;
    }
    if a.state != ApprovalState::Pending {
        return Err(GatewayError::ApprovalNotPending {
            id: id.to_string(),
            state: a.state.as_str().to_string(),
        });
    }
    let state = if approve {
        ApprovalState::Approved
    } else {
        ApprovalState::Denied
    };
    tx.prepare_cached("UPDATE approvals SET state = ?2, decided_by = ?3, decided_ms = ?4, decision_reason = ?5 WHERE id = ?1 AND state = 'pending'").and_then(|mut stmt| stmt.execute(params![id, state.as_str(), by, ms(now), reason]))
            .map_err(db("deciding an approval"))?;
    a.state = state;
    a.decided_by = Some(by.to_string());
    a.decided_at = Some(now);
    a.decision_reason = reason.map(str::to_string);
    Ok(a)
}

/// Keeps a record its sinks could not take (replacing an older copy of the same one).
fn keep_unrecorded_in(tx: &rusqlite::Transaction<'_>, u: &Unrecorded) -> StoreResult<()> {
    let sinks = serde_json::to_string(&u.sinks).unwrap_or_else(|_| "[]".into());
    tx.prepare_cached("INSERT OR REPLACE INTO unrecorded (operation_id, event, sinks, at_ms) VALUES (?1, ?2, ?3, ?4)")
        .and_then(|mut stmt| stmt.execute(params![u.operation_id, u.event, sinks, ms(u.at)]))
        .map_err(db("keeping an unwritten record"))?;
    Ok(())
}
