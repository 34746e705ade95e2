//! Plain reads and writes: ledger, approvals, trail heads, credentials, counts, pruning.

use chrono::{DateTime, Utc};
use postgres::Row;

use super::conn::{col, Tx};
use super::listen::CHANNEL;
use crate::credential::Credential;
use crate::error::GatewayError;
use crate::store::sqlite::credentials as cred;
use crate::store::values::{category, corrupt, from_ms, money, ms};
use crate::store::*;

pub(super) fn ledger(
    tx: &mut Tx<'_>,
    since: DateTime<Utc>,
    until: DateTime<Utc>,
) -> StoreResult<Vec<LedgerLine>> {
    let rows = tx.rows(
        "SELECT operation_id, tenant, category, amount, at_ms, description, labels FROM ledger
         WHERE at_ms >= $1 AND at_ms < $2 ORDER BY at_ms",
        &[&ms(since), &ms(until)],
    )?;
    let mut out = Vec::with_capacity(rows.len());
    for r in &rows {
        let cat: String = col(r, 2, "ledger", "category")?;
        let amount: String = col(r, 3, "ledger", "amount")?;
        let labels: String = col(r, 6, "ledger", "labels")?;
        out.push(LedgerLine {
            operation_id: col(r, 0, "ledger", "operation_id")?,
            tenant: col(r, 1, "ledger", "tenant")?,
            category: category(&cat)?,
            amount: money("ledger", "amount", &amount)?,
            at: from_ms(col(r, 4, "ledger", "at_ms")?),
            description: col(r, 5, "ledger", "description")?,
            labels: serde_json::from_str(&labels).unwrap_or_default(),
        });
    }
    Ok(out)
}

fn approval(r: &Row) -> StoreResult<Approval> {
    let state: String = col(r, 6, "approvals", "state")?;
    Ok(Approval {
        id: col(r, 0, "approvals", "id")?,
        tenant: col(r, 1, "approvals", "tenant")?,
        fingerprint: col(r, 2, "approvals", "fingerprint")?,
        operation: col(r, 3, "approvals", "operation")?,
        rationale: col(r, 4, "approvals", "rationale")?,
        reason: col(r, 5, "approvals", "reason")?,
        state: ApprovalState::parse(&state).ok_or_else(|| corrupt("approvals", "state", state))?,
        created_at: from_ms(col(r, 7, "approvals", "created_ms")?),
        expires_at: from_ms(col(r, 8, "approvals", "expires_ms")?),
        decided_by: col(r, 9, "approvals", "decided_by")?,
        decided_at: col::<Option<i64>>(r, 10, "approvals", "decided_ms")?.map(from_ms),
        decision_reason: col(r, 11, "approvals", "decision_reason")?,
    })
}

pub(super) fn create_approval(tx: &mut Tx<'_>, a: &Approval) -> StoreResult<()> {
    tx.exec(
        "INSERT INTO approvals (id, tenant, fingerprint, operation, rationale, reason, state, created_ms, expires_ms, decided_by, decided_ms, decision_reason)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        &[&a.id, &a.tenant, &a.fingerprint, &a.operation, &a.rationale, &a.reason, &a.state.as_str(),
          &ms(a.created_at), &ms(a.expires_at), &a.decided_by, &a.decided_at.map(ms), &a.decision_reason],
    )?;
    Ok(())
}

pub(super) fn get_approval(
    tx: &mut Tx<'_>,
    id: &str,
    for_update: bool,
) -> StoreResult<Option<Approval>> {
    let row = if for_update {
        tx.opt(
            "SELECT id, tenant, fingerprint, operation, rationale, reason, state, created_ms, expires_ms, decided_by, decided_ms, decision_reason
             FROM approvals WHERE id = $1 FOR UPDATE",
            &[&id],
        )?
    } else {
        tx.opt(
            "SELECT id, tenant, fingerprint, operation, rationale, reason, state, created_ms, expires_ms, decided_by, decided_ms, decision_reason
             FROM approvals WHERE id = $1",
            &[&id],
        )?
    };
    row.as_ref().map(approval).transpose()
}

pub(super) fn list_approvals(
    tx: &mut Tx<'_>,
    state: Option<ApprovalState>,
) -> StoreResult<Vec<Approval>> {
    let s = state.map(|s| s.as_str());
    let rows = tx.rows(
        "SELECT id, tenant, fingerprint, operation, rationale, reason, state, created_ms, expires_ms, decided_by, decided_ms, decision_reason
         FROM approvals WHERE ($1::text IS NULL OR state = $1) ORDER BY created_ms, id",
        &[&s],
    )?;
    rows.iter().map(approval).collect()
}

pub(super) fn decide_approval(
    tx: &mut Tx<'_>,
    id: &str,
    approve: bool,
    by: &str,
    reason: Option<&str>,
    now: DateTime<Utc>,
) -> StoreResult<Approval> {
    let Some(mut a) = get_approval(tx, id, true)? else {
        return Err(GatewayError::ApprovalNotFound { id: id.to_string() });
    };
    if a.state == ApprovalState::Pending && a.expires_at <= now {
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
    tx.exec(
        "UPDATE approvals SET state = $2, decided_by = $3, decided_ms = $4, decision_reason = $5 WHERE id = $1 AND state = 'pending'",
        &[&id, &state.as_str(), &by, &ms(now), &reason],
    )?;
    // The waiter may be on another replica: wake it.
    tx.exec(
        "SELECT pg_notify($1, $2)",
        &[&CHANNEL, &StoreChange::Approval(id.to_string()).payload()],
    )?;
    a.state = state;
    a.decided_by = Some(by.to_string());
    a.decided_at = Some(now);
    a.decision_reason = reason.map(str::to_string);
    Ok(a)
}

pub(super) fn live_counts(tx: &mut Tx<'_>) -> StoreResult<LiveCounts> {
    let row = tx.opt(
        "SELECT (SELECT COUNT(*) FROM reservations),
                (SELECT COUNT(*) FROM approvals WHERE state = 'pending'),
                (SELECT COUNT(*) FROM idempotency WHERE state = 'running'),
                (SELECT COUNT(*) FROM journal WHERE status IS NULL)",
        &[],
    )?;
    let Some(r) = row else {
        return Ok(LiveCounts::default());
    };
    let n = |i: usize| -> StoreResult<u64> {
        col::<i64>(&r, i, "state", "count").map(|v| u64::try_from(v).unwrap_or(0))
    };
    Ok(LiveCounts {
        reservations: n(0)?,
        pending_approvals: n(1)?,
        running_keys: n(2)?,
        open_intents: n(3)?,
    })
}

fn encode_head(h: &SignedHead) -> StoreResult<String> {
    serde_json::to_string(h).map_err(|e| corrupt("trail_heads", "head", e.to_string()))
}

pub(super) fn decode_head(table: &'static str, s: &str) -> StoreResult<SignedHead> {
    serde_json::from_str(s).map_err(|_| corrupt(table, "head", s.to_string()))
}

/// Keeps a record its sinks could not take (replacing an older copy of the same one).
pub(super) fn keep_unrecorded(tx: &mut Tx<'_>, u: &Unrecorded) -> StoreResult<()> {
    let sinks = serde_json::to_string(&u.sinks).unwrap_or_else(|_| "[]".into());
    tx.exec(
        "INSERT INTO unrecorded (operation_id, event, sinks, at_ms) VALUES ($1, $2, $3, $4)
         ON CONFLICT (operation_id) DO UPDATE SET event = excluded.event, sinks = excluded.sinks, at_ms = excluded.at_ms",
        &[&u.operation_id, &u.event, &sinks, &ms(u.at)],
    )?;
    Ok(())
}

/// The records waiting to be written, oldest first.
pub(super) fn unrecorded(tx: &mut Tx<'_>, limit: usize) -> StoreResult<Vec<Unrecorded>> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = tx.rows(
        "SELECT operation_id, event, sinks, at_ms FROM unrecorded ORDER BY at_ms, operation_id LIMIT $1",
        &[&limit],
    )?;
    rows.iter()
        .map(|r| {
            let sinks: String = col(r, 2, "unrecorded", "sinks")?;
            Ok(Unrecorded {
                operation_id: col(r, 0, "unrecorded", "operation_id")?,
                event: col(r, 1, "unrecorded", "event")?,
                sinks: serde_json::from_str(&sinks)
                    .map_err(|e| corrupt("unrecorded", "sinks", e.to_string()))?,
                at: from_ms(col(r, 3, "unrecorded", "at_ms")?),
            })
        })
        .collect()
}

/// Forgets a record written late, or keeps the sinks that still failed.
pub(super) fn settle_unrecorded(
    tx: &mut Tx<'_>,
    operation_id: &str,
    left: &[String],
) -> StoreResult<()> {
    if left.is_empty() {
        tx.exec(
            "DELETE FROM unrecorded WHERE operation_id = $1",
            &[&operation_id],
        )?;
    } else {
        let sinks = serde_json::to_string(left).unwrap_or_else(|_| "[]".into());
        tx.exec(
            "UPDATE unrecorded SET sinks = $2 WHERE operation_id = $1",
            &[&operation_id, &sinks],
        )?;
    }
    Ok(())
}

/// Upserts heads that move their trail (on this node) forward.
pub(super) fn put_heads(
    tx: &mut Tx<'_>,
    node: &str,
    heads: &[SignedHead],
    now: DateTime<Utc>,
) -> StoreResult<()> {
    for h in heads {
        tx.exec(
            "INSERT INTO trail_heads (node, trail, size, head, updated_ms) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (node, trail) DO UPDATE SET size = excluded.size, head = excluded.head, updated_ms = excluded.updated_ms
             WHERE excluded.size > trail_heads.size",
            &[&node, &h.trail, &i64::try_from(h.size).unwrap_or(i64::MAX), &encode_head(h)?, &ms(now)],
        )?;
    }
    Ok(())
}

/// The heads of one node's trails, or (`None`) of every node's, with the node.
pub(super) fn heads(tx: &mut Tx<'_>, node: Option<&str>) -> StoreResult<Vec<SignedHead>> {
    Ok(node_heads(tx, node)?.into_iter().map(|(_, h)| h).collect())
}

pub(super) fn node_heads(
    tx: &mut Tx<'_>,
    node: Option<&str>,
) -> StoreResult<Vec<(String, SignedHead)>> {
    let rows = tx.rows(
        "SELECT node, head FROM trail_heads WHERE ($1::text IS NULL OR node = $1) ORDER BY node, trail",
        &[&node],
    )?;
    let mut out = Vec::with_capacity(rows.len());
    for r in &rows {
        let n: String = col(r, 0, "trail_heads", "node")?;
        let h: String = col(r, 1, "trail_heads", "head")?;
        out.push((n, decode_head("trail_heads", &h)?));
    }
    Ok(out)
}

pub(super) fn record_break(
    tx: &mut Tx<'_>,
    node: &str,
    b: &AnchorBreak,
    new_head: Option<&SignedHead>,
) -> StoreResult<()> {
    tx.exec(
        "INSERT INTO trail_breaks (node, trail, at_ms, head, found) VALUES ($1, $2, $3, $4, $5)",
        &[&node, &b.trail, &ms(b.at), &encode_head(&b.head)?, &b.found],
    )?;
    tx.exec(
        "DELETE FROM trail_heads WHERE node = $1 AND trail = $2",
        &[&node, &b.trail],
    )?;
    if let Some(h) = new_head {
        put_heads(tx, node, std::slice::from_ref(h), b.at)?;
    }
    Ok(())
}

pub(super) fn breaks(tx: &mut Tx<'_>, node: Option<&str>) -> StoreResult<Vec<AnchorBreak>> {
    let rows = tx.rows(
        "SELECT trail, at_ms, head, found FROM trail_breaks WHERE ($1::text IS NULL OR node = $1) ORDER BY at_ms",
        &[&node],
    )?;
    let mut out = Vec::with_capacity(rows.len());
    for r in &rows {
        let head: String = col(r, 2, "trail_breaks", "head")?;
        out.push(AnchorBreak {
            trail: col(r, 0, "trail_breaks", "trail")?,
            at: from_ms(col(r, 1, "trail_breaks", "at_ms")?),
            head: decode_head("trail_breaks", &head)?,
            found: col(r, 3, "trail_breaks", "found")?,
        });
    }
    Ok(out)
}

pub(super) fn prune(
    tx: &mut Tx<'_>,
    _host_now: DateTime<Utc>,
    retention: std::time::Duration,
    me: &str,
) -> StoreResult<Pruned> {
    // What has expired is judged on the database's clock: a host whose clock ran a day
    // ahead deleted every settled key (and a keyed run then ran twice) and the rows of
    // healthy replicas.
    let now = from_ms(super::conn::db_now_ms(tx)?);
    let cutoff = ms(now).saturating_sub(i64::try_from(retention.as_millis()).unwrap_or(i64::MAX));
    let journal = tx.exec(
        "DELETE FROM journal WHERE status IS NOT NULL AND ended_ms < $1",
        &[&cutoff],
    )?;
    // A claim outlives its settled intent (a recovery that read the intent open just
    // before it was settled must still find it claimed); it goes with the journal row.
    tx.exec(
        "DELETE FROM recovery_claims c WHERE NOT EXISTS
           (SELECT 1 FROM journal j WHERE j.operation_id = c.operation_id)",
        &[],
    )?;
    let idempotency = tx.exec(
        "DELETE FROM idempotency WHERE state = 'done' AND expires_ms <= $1",
        &[&ms(now)],
    )?;
    let approvals = tx.exec(
        "DELETE FROM approvals WHERE state NOT IN ('pending', 'approved') AND COALESCE(decided_ms, expires_ms) < $1",
        &[&cutoff],
    )?;
    // Replicas long gone, with nothing of theirs left open.
    tx.exec(
        "DELETE FROM replicas WHERE id <> $1 AND lease_until_ms < $2
         AND NOT EXISTS (SELECT 1 FROM journal j WHERE j.replica = replicas.id AND j.status IS NULL)",
        &[&me, &cutoff],
    )?;
    Ok(Pruned {
        journal,
        idempotency,
        approvals,
    })
}

pub(super) fn rate_usage(
    tx: &mut Tx<'_>,
    prefix: &str,
    since: DateTime<Utc>,
) -> StoreResult<Vec<RateUsage>> {
    let rows = tx.rows(
        "SELECT key, COUNT(*), MIN(at_ms) FROM rate_events
         WHERE left(key, length($1)) = $1 AND at_ms > $2
         GROUP BY key ORDER BY key",
        &[&prefix, &ms(since)],
    )?;
    let mut out = Vec::with_capacity(rows.len());
    for r in &rows {
        let count: i64 = col(r, 1, "rate_events", "count")?;
        let oldest: i64 = col(r, 2, "rate_events", "at_ms")?;
        out.push(RateUsage {
            key: col(r, 0, "rate_events", "key")?,
            count: u64::try_from(count).unwrap_or(0),
            oldest: DateTime::<Utc>::from_timestamp_millis(oldest)
                .ok_or_else(|| corrupt("rate_events", "at_ms", oldest.to_string()))?,
        });
    }
    Ok(out)
}

fn credential_row(r: &Row) -> StoreResult<Credential> {
    let c = |i: usize| col::<String>(r, i, "credentials", "text");
    let o = |i: usize| col::<Option<String>>(r, i, "credentials", "text");
    cred::to_credential((
        c(0)?,
        c(1)?,
        c(2)?,
        c(3)?,
        c(4)?,
        c(5)?,
        o(6)?,
        o(7)?,
        o(8)?,
        col(r, 9, "credentials", "created_ms")?,
        col(r, 10, "credentials", "expires_ms")?,
        col(r, 11, "credentials", "revoked_ms")?,
    ))
}

pub(super) fn insert_credential(tx: &mut Tx<'_>, c: &Credential) -> StoreResult<()> {
    tx.exec(
        "INSERT INTO credentials (id, kind, tenant, scopes, secret_sha256, label, sandbox, dir, parent, created_ms, expires_ms, revoked_ms)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        &[&c.id, &c.kind.as_str(), &c.tenant, &c.scopes.to_string(), &c.secret_sha256, &c.label,
          &c.sandbox, &c.dir, &c.parent, &ms(c.created_at), &c.expires_at.map(ms), &c.revoked_at.map(ms)],
    )?;
    Ok(())
}

pub(super) fn credential(tx: &mut Tx<'_>, id: &str) -> StoreResult<Option<Credential>> {
    let row = tx.opt(
        "SELECT id, kind, tenant, scopes, secret_sha256, label, sandbox, dir, parent, created_ms, expires_ms, revoked_ms
         FROM credentials WHERE id = $1",
        &[&id],
    )?;
    row.as_ref().map(credential_row).transpose()
}

pub(super) fn list_credentials(
    tx: &mut Tx<'_>,
    tenant: Option<&str>,
) -> StoreResult<Vec<Credential>> {
    let rows = tx.rows(
        "SELECT id, kind, tenant, scopes, secret_sha256, label, sandbox, dir, parent, created_ms, expires_ms, revoked_ms
         FROM credentials WHERE ($1::text IS NULL OR tenant = $1) ORDER BY created_ms, id",
        &[&tenant],
    )?;
    rows.iter().map(credential_row).collect()
}

pub(super) fn revoke_credential(
    tx: &mut Tx<'_>,
    id: &str,
    now: DateTime<Utc>,
) -> StoreResult<bool> {
    let n = tx.exec(
        "UPDATE credentials SET revoked_ms = COALESCE(revoked_ms, $2) WHERE id = $1",
        &[&id, &ms(now)],
    )?;
    tx.exec(
        "UPDATE credentials SET revoked_ms = COALESCE(revoked_ms, $2) WHERE parent = $1",
        &[&id, &ms(now)],
    )?;
    Ok(n > 0)
}
