//! The `credentials` table: API keys and capability tokens (hashes only).

use rusqlite::{params, Connection, OptionalExtension};

use super::{corrupt, from_ms, ms};
use crate::credential::{Credential, CredentialKind, Scopes};
use crate::error::db;
use crate::store::StoreResult;

pub(in crate::store) const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS credentials (
    id TEXT PRIMARY KEY, kind TEXT NOT NULL, tenant TEXT NOT NULL, scopes TEXT NOT NULL,
    secret_sha256 TEXT NOT NULL, label TEXT NOT NULL, sandbox TEXT, dir TEXT, parent TEXT,
    created_ms INTEGER NOT NULL, expires_ms INTEGER, revoked_ms INTEGER
);
CREATE INDEX IF NOT EXISTS credentials_tenant ON credentials (tenant);
CREATE INDEX IF NOT EXISTS credentials_parent ON credentials (parent);
"#;

pub(in crate::store) const COLS: &str = "id, kind, tenant, scopes, secret_sha256, label, sandbox, dir, parent, created_ms, expires_ms, revoked_ms";

pub(in crate::store) type Row = (
    String,
    String,
    String,
    String,
    String,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    i64,
    Option<i64>,
    Option<i64>,
);

fn read_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
        r.get(7)?,
        r.get(8)?,
        r.get(9)?,
        r.get(10)?,
        r.get(11)?,
    ))
}

pub(in crate::store) fn to_credential(row: Row) -> StoreResult<Credential> {
    let (id, kind, tenant, scopes, hash, label, sandbox, dir, parent, created, expires, revoked) =
        row;
    let kind = CredentialKind::parse(&kind).ok_or_else(|| corrupt("credentials", "kind", kind))?;
    let scopes: Scopes = scopes
        .parse()
        .map_err(|_| corrupt("credentials", "scopes", scopes.clone()))?;
    Ok(Credential {
        id,
        kind,
        tenant,
        scopes,
        secret_sha256: hash,
        label,
        sandbox,
        dir,
        parent,
        created_at: from_ms(created),
        expires_at: expires.map(from_ms),
        revoked_at: revoked.map(from_ms),
    })
}

pub(super) fn insert(tx: &rusqlite::Transaction<'_>, c: &Credential) -> StoreResult<()> {
    tx.execute(
        &format!("INSERT INTO credentials ({COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"),
        params![
            c.id,
            c.kind.as_str(),
            c.tenant,
            c.scopes.to_string(),
            c.secret_sha256,
            c.label,
            c.sandbox,
            c.dir,
            c.parent,
            ms(c.created_at),
            c.expires_at.map(ms),
            c.revoked_at.map(ms),
        ],
    )
    .map_err(db("storing a credential"))?;
    Ok(())
}

pub(super) fn get(conn: &Connection, id: &str) -> StoreResult<Option<Credential>> {
    // Every API request reads its credential: the statement is prepared once per connection.
    let row = conn
        .prepare_cached(&format!("SELECT {COLS} FROM credentials WHERE id = ?1"))
        .and_then(|mut stmt| stmt.query_row(params![id], read_row).optional())
        .map_err(db("reading a credential"))?;
    row.map(to_credential).transpose()
}

pub(super) fn list(conn: &Connection, tenant: Option<&str>) -> StoreResult<Vec<Credential>> {
    let mut stmt = conn
        .prepare(&format!(
            "SELECT {COLS} FROM credentials WHERE (?1 IS NULL OR tenant = ?1) ORDER BY created_ms, id"
        ))
        .map_err(db("listing credentials"))?;
    let rows = stmt
        .query_map(params![tenant], read_row)
        .map_err(db("listing credentials"))?;
    let mut out = Vec::new();
    for r in rows {
        out.push(to_credential(r.map_err(db("listing credentials"))?)?);
    }
    Ok(out)
}

pub(super) fn revoke(tx: &rusqlite::Transaction<'_>, id: &str, now_ms: i64) -> StoreResult<bool> {
    let n = tx
        .execute(
            "UPDATE credentials SET revoked_ms = COALESCE(revoked_ms, ?2) WHERE id = ?1",
            params![id, now_ms],
        )
        .map_err(db("revoking a credential"))?;
    tx.execute(
        "UPDATE credentials SET revoked_ms = COALESCE(revoked_ms, ?2) WHERE parent = ?1",
        params![id, now_ms],
    )
    .map_err(db("revoking a credential"))?;
    Ok(n > 0)
}
