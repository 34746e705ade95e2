//! The transactions that decide: admission, the claim after an approval, finish, the kill
//! switch, and recovery of interrupted work. Same decisions as the SQLite store, under the
//! named locks of `locks.rs`.

use chrono::{DateTime, Utc};
use sandboxio_budget::{BudgetState, Reservation, ScopeKey, ScopeState, Settlement};

use super::conn::{col, Tx};
use super::listen::CHANNEL;
use super::locks::{self, Names};
use crate::error::GatewayError;
use crate::store::values::{budget_err, corrupt, from_ms, ms};
use crate::store::*;

fn notify(tx: &mut Tx<'_>, change: &StoreChange) -> StoreResult<()> {
    // Delivered to every listener when (and only if) the transaction commits.
    tx.exec("SELECT pg_notify($1, $2)", &[&CHANNEL, &change.payload()])?;
    Ok(())
}

pub(super) fn read_kill(tx: &mut Tx<'_>) -> StoreResult<Option<KillState>> {
    let row = tx.opt(
        "SELECT reason, by_whom, at_ms FROM kill_switch WHERE id = 1",
        &[],
    )?;
    row.map(|r| {
        Ok(KillState {
            reason: col(&r, 0, "kill_switch", "reason")?,
            by: col(&r, 1, "kill_switch", "by_whom")?,
            at: from_ms(col(&r, 2, "kill_switch", "at_ms")?),
        })
    })
    .transpose()
}

pub(super) fn set_kill(
    tx: &mut Tx<'_>,
    reason: &str,
    by: &str,
    now: DateTime<Utc>,
) -> StoreResult<()> {
    // Waits for admissions in flight; every later admission sees the switch.
    locks::kill_exclusive(tx)?;
    tx.exec(
        "INSERT INTO kill_switch (id, reason, by_whom, at_ms) VALUES (1, $1, $2, $3)
         ON CONFLICT (id) DO UPDATE SET reason = excluded.reason, by_whom = excluded.by_whom, at_ms = excluded.at_ms",
        &[&reason, &by, &ms(now)],
    )?;
    tx.exec(
        "UPDATE approvals SET state = 'denied', decided_by = $1, decided_ms = $2, decision_reason = $3 WHERE state IN ('pending', 'approved')",
        &[&KILL_SWITCH_APPROVER, &ms(now), &reason],
    )?;
    notify(tx, &StoreChange::Kill)
}

pub(super) fn clear_kill(tx: &mut Tx<'_>) -> StoreResult<()> {
    locks::kill_exclusive(tx)?;
    tx.exec("DELETE FROM kill_switch", &[])?;
    notify(tx, &StoreChange::Resume)
}

fn idem_name(tenant: &str, key: &str) -> String {
    format!("{tenant}\0{key}")
}

/// Whether this replica may admit: its lease is current and it was not declared lost.
fn lease_ok(tx: &mut Tx<'_>, replica: &str) -> StoreResult<bool> {
    let row = tx.opt(
        "SELECT lost_ms IS NULL AND lease_until_ms > (extract(epoch from clock_timestamp()) * 1000)::bigint
         FROM replicas WHERE id = $1",
        &[&replica],
    )?;
    match row {
        Some(r) => col(&r, 0, "replicas", "lease_until_ms"),
        None => Ok(false),
    }
}

/// Writes an operation's intent (its journal row, open), owned by `replica`.
pub(super) fn journal(tx: &mut Tx<'_>, j: &JournalEntry, replica: &str) -> StoreResult<()> {
    let (it, ik) = match &j.idem {
        Some((t, k)) => (Some(t.as_str()), Some(k.as_str())),
        None => (None, None),
    };
    tx.exec(
        "INSERT INTO journal (operation_id, intent, started_ms, owner, idempotent, status, ended_ms, idem_tenant, idem_key, replica)
         VALUES ($1, $2, $3, $4, $5, NULL, NULL, $6, $7, $8)",
        &[&j.operation_id, &j.intent, &ms(j.started_at), &j.owner, &j.idempotent, &it, &ik, &replica],
    )?;
    Ok(())
}

/// An operator action's change and, when it changed something and this replica's lease
/// holds, its intent (see `Store::admin_change`). Without a lease the change is still made
/// (the kill switch must always engage) but no intent is written: another replica would
/// take it for a dead one's and record the action a second time.
pub(super) fn admin_change(
    tx: &mut Tx<'_>,
    j: &JournalEntry,
    change: &AdminChange,
    replica: &str,
) -> StoreResult<(AdminCommit, bool)> {
    let done = match change {
        AdminChange::Kill { reason, by, now } => {
            set_kill(tx, reason, by, *now)?;
            AdminChanged::Done
        }
        AdminChange::Resume => {
            clear_kill(tx)?;
            AdminChanged::Done
        }
        AdminChange::Decide {
            approval_id,
            approve,
            by,
            reason,
            now,
        } => AdminChanged::Decided(super::rows::decide_approval(
            tx,
            approval_id,
            *approve,
            by,
            reason.as_deref(),
            *now,
        )?),
        AdminChange::Reopen { scope, now } => {
            AdminChanged::Reopened(reopen_scope(tx, scope, *now)?.0)
        }
        AdminChange::Revoke { key_id, now } => {
            let before = super::rows::credential(tx, key_id)?;
            let revoked = super::rows::revoke_credential(tx, key_id, *now)?;
            AdminChanged::Revoked(before.filter(|_| revoked))
        }
        AdminChange::CreateKey { credential } => {
            super::rows::insert_credential(tx, credential)?;
            AdminChanged::Created
        }
        AdminChange::IntentOnly => AdminChanged::Done,
    };
    // After the change's locks (the kill switch's, the scope's, the rows'): this time
    // orders it among the actions that touch the same state.
    let at = Utc::now();
    let changed = done.changed();
    if changed && lease_ok(tx, replica)? {
        let mut j = j.clone();
        j.started_at = at;
        journal(tx, &j, replica)?;
    }
    Ok((AdminCommit { change: done, at }, changed))
}

/// Everything before the side effect (see `Store::admit`); `(answer, commit)`.
pub(super) fn admit(
    tx: &mut Tx<'_>,
    a: &Admission<'_>,
    replica: &str,
) -> StoreResult<(Admitted, bool)> {
    // Rate limits, budget windows and key retention are judged on the database's clock, as
    // leases are: with each host's own, a host whose clock ran ahead pruned its peers' rate
    // events as expired and counted their spend in a rolling window as past.
    let now = from_ms(locks::kill_shared_at(tx)?);
    let reserve = sandboxio_budget::ReserveRequest {
        at: Some(now),
        ..a.reserve.clone()
    };
    let scopes = reserve.scopes_in(a.budget);
    let mut names = Names::default();
    for (key, _) in &a.rate {
        names.add("rate", key);
    }
    for s in &scopes {
        names.add("scope", &s.to_string());
    }
    if let Some(c) = &a.idem {
        names.add("idem", &idem_name(&c.tenant, &c.key));
    }
    names.lock(tx)?;
    // Every early return below rolls back: a refused operation changes nothing.
    if let Some(k) = read_kill(tx)? {
        return Ok((Admitted::KillSwitch(k), false));
    }
    if !lease_ok(tx, replica)? {
        return Err(GatewayError::LeaseLost {
            replica: replica.to_string(),
        });
    }
    let now_ms = ms(now);
    for (key, limit) in &a.rate {
        if let Some(retry_after_ms) = rate_take(tx, key, limit, now_ms)? {
            return Ok((
                Admitted::RateLimited {
                    key: key.clone(),
                    limit: *limit,
                    retry_after_ms,
                },
                false,
            ));
        }
    }
    let j = &a.journal;
    journal(tx, j, replica)?;
    let mut st = load_budget(tx, &scopes, None)?;
    let reservation = match st.reserve(a.budget, &reserve) {
        Ok(r) => r,
        Err(denial) => return Ok((Admitted::Budget(denial), false)),
    };
    store_budget(tx, &st, None, now)?;
    if let Some(c) = &a.idem {
        match idem_claim(tx, c, &j.operation_id, now, !a.idem_lookup_only)? {
            IdemBegin::New => {}
            other => return Ok((Admitted::Idem(other), false)),
        }
    }
    Ok((Admitted::Proceed(reservation), true))
}

/// After an approval: kill switch, the approval used once, the key claimed.
pub(super) fn claim(
    tx: &mut Tx<'_>,
    approval: Option<(&str, &str)>,
    idem: Option<&IdemClaim>,
    operation_id: &str,
    _host_now: DateTime<Utc>,
) -> StoreResult<(Option<Claimed>, bool)> {
    // The approval's expiry and the key's retention on the database's clock.
    let now = from_ms(locks::kill_shared_at(tx)?);
    if let Some(c) = idem {
        let mut n = Names::default();
        n.add("idem", &idem_name(&c.tenant, &c.key));
        n.lock(tx)?;
    }
    if let Some(k) = read_kill(tx)? {
        return Ok((Some(Claimed::KillSwitch(k)), false));
    }
    if let Some((id, fingerprint)) = approval {
        let n = tx.exec(
            "UPDATE approvals SET state = 'used' WHERE id = $1 AND fingerprint = $2 AND state = 'approved' AND expires_ms > $3",
            &[&id, &fingerprint, &ms(now)],
        )?;
        if n != 1 {
            return Ok((Some(Claimed::ApprovalInvalid), false));
        }
    }
    if let Some(c) = idem {
        match idem_claim(tx, c, operation_id, now, true)? {
            IdemBegin::New => {}
            other => return Ok((Some(Claimed::Idem(other)), false)),
        }
    }
    Ok((None, true))
}

/// Settles or releases, stores the key's outcome, closes the journal entry, keeps heads.
pub(super) fn finish(
    tx: &mut Tx<'_>,
    f: &Finish<'_>,
    node: &str,
) -> StoreResult<Option<Settlement>> {
    tx.batch("SET LOCAL synchronous_commit = off")?;
    let mut st = load_budget(tx, &[], Some(f.operation_id))?;
    lock_scopes_of(tx, &st)?;
    // Re-read under the locks: the scopes may have moved since the first read.
    st = load_budget(tx, &[], Some(f.operation_id))?;
    let mut settlement = None;
    if st.reservations.contains_key(f.operation_id) {
        match f.charge {
            Some(charge) => {
                let s = st
                    .settle(f.budget, f.operation_id, charge)
                    .map_err(budget_err)?;
                if let Some(l) = &f.ledger {
                    if !s.charged.is_zero() {
                        let labels =
                            serde_json::to_string(&l.labels).unwrap_or_else(|_| "{}".into());
                        tx.exec(
                            "INSERT INTO ledger (operation_id, tenant, category, amount, at_ms, description, labels) VALUES ($1, $2, $3, $4, $5, $6, $7)",
                            &[&l.operation_id, &l.tenant, &l.category.as_str(), &s.charged.to_string(), &ms(l.at), &l.description, &labels],
                        )?;
                    }
                }
                settlement = Some(s);
            }
            None => {
                st.release(f.operation_id).map_err(budget_err)?;
            }
        }
        store_budget(tx, &st, Some(f.operation_id), f.now)?;
    }
    if let Some((tenant, key, end)) = &f.idem {
        match end {
            IdemEnd::Done(outcome) => tx.exec(
                // Only a key still running: one another replica settled when it recovered
                // the operation (as interrupted) keeps that outcome, as its journal row does.
                "UPDATE idempotency SET state = 'done', outcome = $3 WHERE tenant = $1 AND key = $2 AND state = 'running' AND operation_id = $4",
                &[tenant, key, outcome, &f.operation_id],
            ),
            IdemEnd::Abandon => tx.exec(
                "DELETE FROM idempotency WHERE tenant = $1 AND key = $2 AND state = 'running' AND operation_id = $3",
                &[tenant, key, &f.operation_id],
            ),
        }?;
    }
    // An intent another replica already marked interrupted keeps that status.
    tx.exec(
        "UPDATE journal SET status = $2, ended_ms = $3 WHERE operation_id = $1 AND status IS NULL",
        &[&f.operation_id, &f.journal_status, &ms(f.now)],
    )?;
    if let Some(u) = f.unrecorded {
        super::rows::keep_unrecorded(tx, u)?;
    }
    super::rows::put_heads(tx, node, f.heads, f.now)?;
    Ok(settlement)
}

fn lock_scopes_of(tx: &mut Tx<'_>, st: &BudgetState) -> StoreResult<()> {
    let mut n = Names::default();
    for r in st.reservations.values() {
        for s in &r.scopes {
            n.add("scope", &s.to_string());
        }
    }
    n.lock(tx)
}

pub(super) fn reopen_scope(
    tx: &mut Tx<'_>,
    scope: &ScopeKey,
    now: DateTime<Utc>,
) -> StoreResult<(bool, bool)> {
    let mut n = Names::default();
    n.add("scope", &scope.to_string());
    n.lock(tx)?;
    let mut st = load_budget(tx, std::slice::from_ref(scope), None)?;
    let reopened = st.reopen(scope);
    if reopened {
        store_budget(tx, &st, None, now)?;
    }
    Ok((reopened, reopened))
}

/// Loads the scopes a budget operation touches (and a reservation) into a `BudgetState`.
pub(super) fn load_budget(
    tx: &mut Tx<'_>,
    scopes: &[ScopeKey],
    reservation: Option<&str>,
) -> StoreResult<BudgetState> {
    let mut st = BudgetState::new();
    let mut keys: Vec<ScopeKey> = scopes.to_vec();
    if let Some(id) = reservation {
        let row = tx.opt(
            "SELECT reservation FROM reservations WHERE operation_id = $1",
            &[&id],
        )?;
        if let Some(r) = row {
            let json: String = col(&r, 0, "reservations", "reservation")?;
            let r: Reservation = serde_json::from_str::<Reservation>(&json)
                .ok()
                .filter(|r| !r.amount.is_negative())
                .ok_or_else(|| corrupt("reservations", "reservation", json.clone()))?;
            keys.extend(r.scopes.iter().cloned());
            st.reservations.insert(r.id.clone(), r);
        }
    }
    let names: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
    let rows = tx.rows(
        "SELECT scope, state FROM budget_scopes WHERE scope = ANY($1)",
        &[&names],
    )?;
    let mut found = std::collections::HashMap::new();
    for r in rows {
        let name: String = col(&r, 0, "budget_scopes", "scope")?;
        let json: String = col(&r, 1, "budget_scopes", "state")?;
        found.insert(name, json);
    }
    for (key, name) in keys.into_iter().zip(names) {
        let scope: ScopeState = match found.get(&name) {
            Some(json) => serde_json::from_str(json)
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
    tx: &mut Tx<'_>,
    st: &BudgetState,
    closed: Option<&str>,
    now: DateTime<Utc>,
) -> StoreResult<()> {
    for (key, scope) in &st.scopes {
        let json = serde_json::to_string(scope)
            .map_err(|e| corrupt("budget_scopes", "state", e.to_string()))?;
        tx.exec(
            "INSERT INTO budget_scopes (scope, state) VALUES ($1, $2) ON CONFLICT (scope) DO UPDATE SET state = excluded.state",
            &[&key.to_string(), &json],
        )?;
    }
    for (id, r) in &st.reservations {
        let json = serde_json::to_string(r)
            .map_err(|e| corrupt("reservations", "reservation", e.to_string()))?;
        tx.exec(
            "INSERT INTO reservations (operation_id, reservation, created_ms) VALUES ($1, $2, $3) ON CONFLICT (operation_id) DO NOTHING",
            &[id, &json, &ms(now)],
        )?;
    }
    if let Some(id) = closed {
        tx.exec("DELETE FROM reservations WHERE operation_id = $1", &[&id])?;
    }
    Ok(())
}

/// Takes one event from a rate limit, or says when to retry (the budget crate's sliding
/// log over the events kept for the key). The caller holds the key's lock.
fn rate_take(
    tx: &mut Tx<'_>,
    key: &str,
    limit: &sandboxio_budget::RateLimit,
    now_ms: i64,
) -> StoreResult<Option<u64>> {
    let window = i64::try_from(limit.window_ms()).unwrap_or(i64::MAX);
    let cutoff = now_ms.saturating_sub(window);
    tx.exec(
        "DELETE FROM rate_events WHERE key = $1 AND at_ms <= $2",
        &[&key, &cutoff],
    )?;
    let rows = tx.rows("SELECT at_ms FROM rate_events WHERE key = $1", &[&key])?;
    let mut events = Vec::with_capacity(rows.len());
    for r in &rows {
        let t: i64 = col(r, 0, "rate_events", "at_ms")?;
        events.push(u64::try_from(t).unwrap_or(0));
    }
    let log = sandboxio_budget::SlidingLog::from_events(events);
    let now = u64::try_from(now_ms).unwrap_or(0);
    if let sandboxio_budget::RateDecision::Deny { retry_after_ms } = log.decide(limit, now) {
        return Ok(Some(retry_after_ms));
    }
    tx.exec(
        "INSERT INTO rate_events (key, at_ms) VALUES ($1, $2)",
        &[&key, &now_ms],
    )?;
    Ok(None)
}

/// Claims an idempotency key or says why not. The caller holds the key's lock.
/// Looks the key up and, when it is new and `insert` is set, claims it for `operation_id`.
fn idem_claim(
    tx: &mut Tx<'_>,
    c: &IdemClaim,
    operation_id: &str,
    now: DateTime<Utc>,
    insert: bool,
) -> StoreResult<IdemBegin> {
    tx.exec(
        "DELETE FROM idempotency WHERE tenant = $1 AND key = $2 AND expires_ms <= $3 AND state = 'done'",
        &[&c.tenant, &c.key, &ms(now)],
    )?;
    let row = tx.opt(
        "SELECT fingerprint, state, outcome, operation_id FROM idempotency WHERE tenant = $1 AND key = $2",
        &[&c.tenant, &c.key],
    )?;
    if let Some(r) = row {
        let fp: String = col(&r, 0, "idempotency", "fingerprint")?;
        let state: String = col(&r, 1, "idempotency", "state")?;
        let outcome: Option<String> = col(&r, 2, "idempotency", "outcome")?;
        let op: String = col(&r, 3, "idempotency", "operation_id")?;
        return Ok(match outcome {
            _ if fp != c.fingerprint && fp != ANY_REQUEST => IdemBegin::Conflict,
            Some(outcome) if state == "done" => IdemBegin::Replay {
                outcome,
                operation_id: op,
            },
            _ => IdemBegin::InProgress,
        });
    }
    if !insert {
        return Ok(IdemBegin::New);
    }
    let exp = ms(now)
        .saturating_add(i64::try_from(c.retention_s.saturating_mul(1000)).unwrap_or(i64::MAX));
    tx.exec(
        "INSERT INTO idempotency (tenant, key, fingerprint, operation_id, state, outcome, created_ms, expires_ms) VALUES ($1, $2, $3, $4, 'running', NULL, $5, $6)",
        &[&c.tenant, &c.key, &c.fingerprint, &operation_id, &ms(now), &exp],
    )?;
    Ok(IdemBegin::New)
}

/// An open intent and what recovery needs to judge it.
pub(super) struct OpenIntent {
    pub entry: JournalEntry,
    /// Its replica's lease has expired (or the replica is gone or lost).
    pub lease_expired: bool,
    /// Its replica runs on this host (same boot and pid namespace): its owner can be
    /// checked like a local process.
    pub same_host: bool,
    /// The recovery claim on it, if any: (claimant, until), as read.
    pub claim: Option<(String, i64)>,
    /// No claim, or one that expired, is the asker's own, or whose replica is lost.
    pub claim_free: bool,
    /// The claim's replica runs on this host: its claimant can be checked like a local
    /// process.
    pub claim_same_host: bool,
}

/// The database's clock, in milliseconds, and whether leases that ran out can be believed.
/// While the database was out of everyone's reach (restarted, failed over, stalled, or the
/// network to it down) no replica could renew, so every lease ran out; counting those as
/// dead fenced off live replicas and recorded their running work as interrupted. So an
/// expired lease counts only when the database has been up for `$grace` (a lease), no live
/// replica found its own lease run out within `$grace` (`lease_lapses`, noted at renewal),
/// and the judge's own lease is current (a judge whose own lease ran out was cut off too).
macro_rules! now_and_trust {
    ($grace:literal, $me:literal) => {
        concat!(
            "WITH c AS (SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint AS ms,
             (extract(epoch from clock_timestamp()) - extract(epoch from pg_postmaster_start_time())) * 1000 AS up),
             now AS (SELECT c.ms, c.up >= ",
            $grace,
            "::bigint
               AND NOT EXISTS (SELECT 1 FROM lease_lapses l WHERE l.at_ms > c.ms - ",
            $grace,
            "::bigint)
               AND COALESCE((SELECT me.lease_until_ms >= c.ms AND me.lost_ms IS NULL FROM replicas me WHERE me.id = ",
            $me,
            "), FALSE) AS trust FROM c)"
        )
    };
}

pub(super) fn open_intents(
    tx: &mut Tx<'_>,
    host: &str,
    me: &str,
    claimant: &str,
    grace_ms: i64,
) -> StoreResult<Vec<OpenIntent>> {
    let rows = tx.rows(
        concat!(
            now_and_trust!("$4", "$2"),
            "
         SELECT j.operation_id, j.intent, j.started_ms, j.owner, j.idempotent, j.idem_tenant, j.idem_key,
                j.replica <> $2 AND (r.id IS NULL OR r.lost_ms IS NOT NULL OR (now.trust AND r.lease_until_ms < now.ms)),
                COALESCE(r.host = $1, FALSE),
                c.claimant, c.until_ms,
                c.operation_id IS NULL OR c.until_ms <= now.ms OR c.claimant = $3
                  OR cr.id IS NULL OR cr.lost_ms IS NOT NULL OR (now.trust AND cr.lease_until_ms < now.ms),
                COALESCE(cr.host = $1, FALSE)
         FROM now, journal j LEFT JOIN replicas r ON r.id = j.replica
              LEFT JOIN recovery_claims c ON c.operation_id = j.operation_id
              LEFT JOIN replicas cr ON cr.id = c.replica
         WHERE j.status IS NULL ORDER BY j.started_ms, j.operation_id"
        ),
        &[&host, &me, &claimant, &grace_ms],
    )?;
    let mut out = Vec::with_capacity(rows.len());
    for r in &rows {
        let t: Option<String> = col(r, 5, "journal", "idem_tenant")?;
        let k: Option<String> = col(r, 6, "journal", "idem_key")?;
        let by: Option<String> = col(r, 9, "recovery_claims", "claimant")?;
        let until: Option<i64> = col(r, 10, "recovery_claims", "until_ms")?;
        out.push(OpenIntent {
            entry: JournalEntry {
                operation_id: col(r, 0, "journal", "operation_id")?,
                intent: col(r, 1, "journal", "intent")?,
                started_at: from_ms(col(r, 2, "journal", "started_ms")?),
                owner: col(r, 3, "journal", "owner")?,
                idempotent: col(r, 4, "journal", "idempotent")?,
                idem: t.zip(k),
            },
            lease_expired: col(r, 7, "replicas", "lease_until_ms")?,
            same_host: col(r, 8, "replicas", "host")?,
            claim: by.zip(until),
            claim_free: col(r, 11, "recovery_claims", "until_ms")?,
            claim_same_host: col(r, 12, "replicas", "host")?,
        });
    }
    Ok(out)
}

/// Claims `e` for `claimant` of `replica` until `hold_ms` from the database's clock, if it
/// is still open and its claim is still `seen` (compare and set). True when claimed.
pub(super) fn claim_intent(
    tx: &mut Tx<'_>,
    e: &JournalEntry,
    claimant: &str,
    replica: &str,
    hold_ms: i64,
    seen: Option<&(String, i64)>,
) -> StoreResult<bool> {
    let (by, was) = (seen.map(|s| s.0.as_str()), seen.map(|s| s.1));
    let n = tx.exec(
        "INSERT INTO recovery_claims (operation_id, claimant, replica, until_ms)
         SELECT $1, $2, $3, (extract(epoch from clock_timestamp()) * 1000)::bigint + $4
         WHERE EXISTS (SELECT 1 FROM journal WHERE operation_id = $1 AND status IS NULL)
         ON CONFLICT (operation_id) DO UPDATE
           SET claimant = excluded.claimant, replica = excluded.replica, until_ms = excluded.until_ms
           WHERE recovery_claims.claimant = $5 AND recovery_claims.until_ms = $6",
        &[&e.operation_id, &claimant, &replica, &hold_ms, &by, &was],
    )?;
    Ok(n == 1)
}

/// Whether operation `id` asked a person and its approval was never used (pending,
/// decided or expired): then it never got past the approval, so never ran.
pub(super) fn waited_for_approval(tx: &mut Tx<'_>, id: &str) -> StoreResult<bool> {
    let row = tx.opt(
        "SELECT state FROM approvals WHERE id = $1",
        &[&approval_id_for(id)],
    )?;
    Ok(match row {
        Some(r) => col::<String>(&r, 0, "approvals", "state")? != "used",
        None => false,
    })
}

/// Marks the chosen intents interrupted (those still open), charges each its reservation
/// (with its ledger line), expires their approvals, settles their keys; marks expired
/// replicas lost.
pub(super) fn interrupt(
    tx: &mut Tx<'_>,
    chosen: &[(JournalEntry, String)],
    budget: &BudgetConfig,
    me: &str,
    now: DateTime<Utc>,
    grace_ms: i64,
) -> StoreResult<Vec<JournalEntry>> {
    // A replica whose lease expired (while the database was up long enough for it to
    // renew) is lost from now on: it admits nothing more.
    tx.exec(
        concat!(
            now_and_trust!("$3", "$1"),
            " UPDATE replicas SET lost_ms = $2 FROM now WHERE id <> $1 AND lost_ms IS NULL
             AND now.trust AND lease_until_ms < now.ms"
        ),
        &[&me, &ms(now), &grace_ms],
    )?;
    let mut done = Vec::new();
    for (e, outcome) in chosen {
        // Another survivor may have got here first.
        let n = tx.exec(
            "UPDATE journal SET status = 'interrupted', ended_ms = $2 WHERE operation_id = $1 AND status IS NULL",
            &[&e.operation_id, &ms(now)],
        )?;
        if n != 1 {
            continue;
        }
        let mut st = load_budget(tx, &[], Some(&e.operation_id))?;
        if st.reservations.contains_key(&e.operation_id) {
            lock_scopes_of(tx, &st)?;
            st = load_budget(tx, &[], Some(&e.operation_id))?;
            if waited_for_approval(tx, &e.operation_id)? {
                // Stopped while a person had not let it go: it never ran.
                st.release(&e.operation_id).map_err(budget_err)?;
                store_budget(tx, &st, Some(&e.operation_id), now)?;
            } else if let Some(r) = st.reservations.get(&e.operation_id).cloned() {
                let s = st
                    .settle(budget, &e.operation_id, r.amount)
                    .map_err(budget_err)?;
                store_budget(tx, &st, Some(&e.operation_id), now)?;
                if !s.charged.is_zero() {
                    let l = crate::store::interrupted_ledger_line(e, &r, s.charged, now);
                    tx.exec(
                        "INSERT INTO ledger (operation_id, tenant, category, amount, at_ms, description, labels) VALUES ($1, $2, $3, $4, $5, $6, '{}')",
                        &[&l.operation_id, &l.tenant, &l.category.as_str(), &l.amount.to_string(), &ms(l.at), &l.description],
                    )?;
                }
            }
        }
        tx.exec(
            "UPDATE approvals SET state = 'expired' WHERE id = $1 AND state IN ('pending', 'approved')",
            &[&approval_id_for(&e.operation_id)],
        )?;
        if let Some((tenant, key)) = &e.idem {
            if e.idempotent {
                tx.exec(
                    "DELETE FROM idempotency WHERE tenant = $1 AND key = $2 AND state = 'running' AND operation_id = $3",
                    &[tenant, key, &e.operation_id],
                )?;
            } else {
                tx.exec(
                    "UPDATE idempotency SET state = 'done', outcome = $3 WHERE tenant = $1 AND key = $2 AND state = 'running' AND operation_id = $4",
                    &[tenant, key, outcome, &e.operation_id],
                )?;
            }
        }
        done.push(e.clone());
    }
    Ok(done)
}
