//! The schema, as numbered migrations applied in order under an advisory lock, so that
//! several replicas starting at once apply each migration exactly once. The tables mirror
//! the SQLite store's (same names and columns), plus `replicas` (leases) and the replica
//! that wrote each journal intent; times are epoch milliseconds, money decimal text.

use super::conn::Tx;
use super::locks::MIGRATE;
use crate::store::StoreResult;

/// (version, what it does, SQL). Append only: a released migration never changes.
pub(super) const MIGRATIONS: &[(i32, &str, &str)] = &[
    (
        1,
        "the state store: kill switch, rate events, budget, approvals, keys, journal, heads, credentials, replicas",
        r#"
CREATE TABLE kill_switch (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    reason TEXT NOT NULL, by_whom TEXT NOT NULL, at_ms BIGINT NOT NULL
);
CREATE TABLE rate_events (key TEXT NOT NULL, at_ms BIGINT NOT NULL);
CREATE INDEX rate_events_key ON rate_events (key, at_ms);
CREATE TABLE budget_scopes (scope TEXT PRIMARY KEY, state TEXT NOT NULL);
CREATE TABLE reservations (
    operation_id TEXT PRIMARY KEY, reservation TEXT NOT NULL, created_ms BIGINT NOT NULL
);
CREATE TABLE ledger (
    operation_id TEXT NOT NULL, tenant TEXT NOT NULL, category TEXT NOT NULL,
    amount TEXT NOT NULL, at_ms BIGINT NOT NULL, description TEXT NOT NULL, labels TEXT NOT NULL
);
CREATE INDEX ledger_at ON ledger (at_ms);
CREATE TABLE approvals (
    id TEXT PRIMARY KEY, tenant TEXT NOT NULL, fingerprint TEXT NOT NULL, operation TEXT NOT NULL,
    rationale TEXT NOT NULL, reason TEXT NOT NULL, state TEXT NOT NULL,
    created_ms BIGINT NOT NULL, expires_ms BIGINT NOT NULL,
    decided_by TEXT, decided_ms BIGINT, decision_reason TEXT
);
CREATE INDEX approvals_state ON approvals (state);
CREATE TABLE idempotency (
    tenant TEXT NOT NULL, key TEXT NOT NULL, fingerprint TEXT NOT NULL, operation_id TEXT NOT NULL,
    state TEXT NOT NULL, outcome TEXT, created_ms BIGINT NOT NULL, expires_ms BIGINT NOT NULL,
    PRIMARY KEY (tenant, key)
);
CREATE TABLE journal (
    operation_id TEXT PRIMARY KEY, intent TEXT NOT NULL, started_ms BIGINT NOT NULL,
    owner TEXT NOT NULL, idempotent BOOLEAN NOT NULL, status TEXT, ended_ms BIGINT,
    idem_tenant TEXT, idem_key TEXT, replica TEXT NOT NULL
);
CREATE INDEX journal_open ON journal (replica) WHERE status IS NULL;
CREATE INDEX journal_ended ON journal (ended_ms) WHERE status IS NOT NULL;
CREATE TABLE trail_heads (
    node TEXT NOT NULL, trail TEXT NOT NULL, size BIGINT NOT NULL, head TEXT NOT NULL,
    updated_ms BIGINT NOT NULL, PRIMARY KEY (node, trail)
);
CREATE TABLE trail_breaks (
    node TEXT NOT NULL, trail TEXT NOT NULL, at_ms BIGINT NOT NULL, head TEXT NOT NULL,
    found TEXT NOT NULL
);
CREATE TABLE credentials (
    id TEXT PRIMARY KEY, kind TEXT NOT NULL, tenant TEXT NOT NULL, scopes TEXT NOT NULL,
    secret_sha256 TEXT NOT NULL, label TEXT NOT NULL, sandbox TEXT, dir TEXT, parent TEXT,
    created_ms BIGINT NOT NULL, expires_ms BIGINT, revoked_ms BIGINT
);
CREATE INDEX credentials_tenant ON credentials (tenant);
CREATE INDEX credentials_parent ON credentials (parent);
CREATE TABLE replicas (
    id TEXT PRIMARY KEY, node TEXT NOT NULL, host TEXT NOT NULL, owner TEXT NOT NULL,
    started_ms BIGINT NOT NULL, lease_until_ms BIGINT NOT NULL, lost_ms BIGINT
);
"#,
    ),
    (
        2,
        "recovery claims: one replica records each interrupted operation",
        r#"
CREATE TABLE recovery_claims (
    operation_id TEXT PRIMARY KEY, claimant TEXT NOT NULL, replica TEXT NOT NULL,
    until_ms BIGINT NOT NULL
);
"#,
    ),
    (
        3,
        "unwritten records: kept until the sinks that failed take them",
        r#"
CREATE TABLE unrecorded (
    operation_id TEXT PRIMARY KEY, event TEXT NOT NULL, sinks TEXT NOT NULL,
    at_ms BIGINT NOT NULL
);
"#,
    ),
    (
        4,
        "lease lapses: when a live replica last found its own lease run out",
        r#"
CREATE TABLE lease_lapses (id SMALLINT PRIMARY KEY, at_ms BIGINT NOT NULL);
"#,
    ),
];

/// Applies the migrations this database lacks; returns how many ran.
pub(super) fn migrate(tx: &mut Tx<'_>) -> StoreResult<usize> {
    tx.exec("SELECT pg_advisory_xact_lock($1)", &[&MIGRATE])?;
    tx.batch(
        "CREATE TABLE IF NOT EXISTS sandboxio_migrations (
            version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_ms BIGINT NOT NULL
        )",
    )?;
    let row = tx.opt(
        "SELECT COALESCE(MAX(version), 0) FROM sandboxio_migrations",
        &[],
    )?;
    let have: i32 = match row {
        Some(r) => super::conn::col(&r, 0, "sandboxio_migrations", "version")?,
        None => 0,
    };
    let mut ran = 0;
    for (version, what, sql) in MIGRATIONS {
        if *version <= have {
            continue;
        }
        tx.batch(sql)?;
        tx.exec(
            "INSERT INTO sandboxio_migrations (version, description, applied_ms)
             VALUES ($1, $2, (extract(epoch from clock_timestamp()) * 1000)::bigint)",
            &[version, what],
        )?;
        ran += 1;
    }
    Ok(ran)
}

/// The newest migration this build knows.
pub(super) fn latest() -> i32 {
    MIGRATIONS.last().map(|m| m.0).unwrap_or(0)
}
