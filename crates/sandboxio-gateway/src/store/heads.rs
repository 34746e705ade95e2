//! The audit trails' signed heads, kept in the store: the trail anchored outside itself
//! (see `sandboxio_audit::head`). One row per trail, only ever moved forward; a trail
//! found not to hold its head leaves a row in `trail_breaks` that stays as evidence.

use chrono::{DateTime, Utc};
use rusqlite::{params, Connection};
use sandboxio_audit::SignedHead;
use serde::{Deserialize, Serialize};

use super::StoreResult;
use crate::error::{db, GatewayError};

/// A trail that did not hold its stored head when a gateway started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnchorBreak {
    pub trail: String,
    pub at: DateTime<Utc>,
    /// The head the store held.
    pub head: SignedHead,
    /// What was found instead, in words.
    pub found: String,
}

fn encode(h: &SignedHead) -> StoreResult<String> {
    serde_json::to_string(h).map_err(|e| GatewayError::Corrupt {
        table: "trail_heads",
        column: "head",
        value: e.to_string(),
    })
}

fn decode(table: &'static str, s: &str) -> StoreResult<SignedHead> {
    serde_json::from_str(s).map_err(|_| GatewayError::Corrupt {
        table,
        column: "head",
        value: s.to_string(),
    })
}

/// Upserts heads that move their trail forward.
pub(super) fn put_in(
    tx: &rusqlite::Transaction<'_>,
    heads: &[SignedHead],
    now: DateTime<Utc>,
) -> StoreResult<()> {
    for h in heads {
        let head = encode(h)?;
        tx.prepare_cached(
            "INSERT INTO trail_heads (trail, size, head, updated_ms) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (trail) DO UPDATE SET size = excluded.size, head = excluded.head, updated_ms = excluded.updated_ms
             WHERE excluded.size > trail_heads.size",
        )
        .and_then(|mut stmt| {
            stmt.execute(params![h.trail, i64::try_from(h.size).unwrap_or(i64::MAX), head, now.timestamp_millis()])
        })
        .map_err(db("storing the trail head"))?;
    }
    Ok(())
}

pub(super) fn all(conn: &Connection) -> StoreResult<Vec<SignedHead>> {
    let mut stmt = conn
        .prepare("SELECT head FROM trail_heads ORDER BY trail")
        .map_err(db("reading trail heads"))?;
    let rows = stmt
        .query_map([], |r| r.get::<_, String>(0))
        .map_err(db("reading trail heads"))?;
    let mut out = Vec::new();
    for r in rows {
        out.push(decode(
            "trail_heads",
            &r.map_err(db("reading trail heads"))?,
        )?);
    }
    Ok(out)
}

pub(super) fn record_break_in(
    tx: &rusqlite::Transaction<'_>,
    b: &AnchorBreak,
    new_head: Option<&SignedHead>,
) -> StoreResult<()> {
    tx.execute(
        "INSERT INTO trail_breaks (trail, at_ms, head, found) VALUES (?1, ?2, ?3, ?4)",
        params![b.trail, b.at.timestamp_millis(), encode(&b.head)?, b.found],
    )
    .map_err(db("recording a broken trail anchor"))?;
    tx.execute("DELETE FROM trail_heads WHERE trail = ?1", params![b.trail])
        .map_err(db("recording a broken trail anchor"))?;
    if let Some(h) = new_head {
        put_in(tx, std::slice::from_ref(h), b.at)?;
    }
    Ok(())
}

pub(super) fn breaks(conn: &Connection) -> StoreResult<Vec<AnchorBreak>> {
    let mut stmt = conn
        .prepare("SELECT trail, at_ms, head, found FROM trail_breaks ORDER BY at_ms")
        .map_err(db("reading trail anchor breaks"))?;
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
            ))
        })
        .map_err(db("reading trail anchor breaks"))?;
    let mut out = Vec::new();
    for r in rows {
        let (trail, at, head, found) = r.map_err(db("reading trail anchor breaks"))?;
        out.push(AnchorBreak {
            trail,
            at: chrono::TimeZone::timestamp_millis_opt(&Utc, at)
                .single()
                .unwrap_or_default(),
            head: decode("trail_breaks", &head)?,
            found,
        });
    }
    Ok(out)
}
