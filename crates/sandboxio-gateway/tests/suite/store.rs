//! The store's conformance suite: every test body runs against SQLite and against
//! PostgreSQL (a throwaway cluster, `tests/support/pgcluster.rs`): admission is
//! all-or-nothing, finish settles within the ceiling, approvals bind to one request once,
//! keys replay, recovery leaks nothing. Tests of one backend's files come last.

use chrono::{Duration, Utc};
use sandboxio_budget::{BudgetConfig, RateLimit, ReserveRequest, ScopeKey};
use sandboxio_core::{CostCategory, Money};
use sandboxio_gateway::store::*;

fn m(s: &str) -> Money {
    s.parse().unwrap()
}

/// Where a test's state lives: a SQLite file or a PostgreSQL database.
#[derive(Debug, Clone, Copy)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Keeps a test's state alive and opens more stores on it (another process, a replica).
pub struct Place {
    _dir: tempfile::TempDir,
    db: std::path::PathBuf,
    url: Option<String>,
}

impl Place {
    /// Runs `sql` on the store's database directly, as anyone with write access to it
    /// could.
    pub fn execute(&self, sql: &str) {
        match &self.url {
            None => rusqlite::Connection::open(&self.db)
                .unwrap()
                .execute_batch(sql)
                .unwrap(),
            Some(u) => postgres::Client::connect(
                &u.replace("postgres:///", "postgresql:///"),
                postgres::NoTls,
            )
            .unwrap()
            .batch_execute(sql)
            .unwrap(),
        }
    }

    pub fn open(&self) -> Box<dyn Store> {
        match &self.url {
            None => Box::new(SqliteStore::open(&self.db, SyncMode::Full).unwrap()),
            Some(u) => Box::new(PgStore::open(&pg_options(u, 10)).unwrap()),
        }
    }
}

pub fn pg_options(url: &str, lease_s: u64) -> PgOptions {
    let mut o = PgOptions::new(sandboxio_config::StateUrl::parse(url).unwrap());
    o.pool = 4;
    o.lease = std::time::Duration::from_secs(lease_s);
    o
}

impl Backend {
    /// A fresh place, or `None` (after saying why) when this backend cannot run here.
    pub fn place(self, test: &str) -> Option<Place> {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("state.db");
        let url = match self {
            Backend::Sqlite => None,
            Backend::Postgres => Some(crate::pgcluster::fresh_url(test)?),
        };
        Some(Place { _dir: dir, db, url })
    }

    pub fn store(self, test: &str) -> Option<(Place, Box<dyn Store>)> {
        let p = self.place(test)?;
        let s = p.open();
        Some((p, s))
    }
}

/// Runs each named body against both backends: `<name>::sqlite` and `<name>::postgres`.
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn sqlite() {
                super::$name(super::Backend::Sqlite)
            }
            #[test]
            fn postgres() {
                super::$name(super::Backend::Postgres)
            }
        }
    )*};
}

conformance!(
    a_negative_amount_written_into_the_budget_state_is_refused_as_corrupt,
    reservation_past_ceiling_is_denied_with_numbers_and_changes_nothing,
    an_overrun_is_charged_and_closes_the_scope,
    settle_within_the_reservation_releases_the_rest,
    release_on_failure_returns_the_budget,
    warn_fraction_crossing_fires_once,
    kill_switch_refuses_admission_atomically_and_persists,
    rate_limit_counts_within_window_and_refusal_takes_no_token,
    idempotency_replay_conflict_in_progress_and_tenant_scope,
    approval_is_single_use_and_bound_to_fingerprint,
    expired_approval_cannot_be_used_or_decided,
    recovery_marks_dead_intents_interrupted_and_charges_their_reservations,
    recovery_releases_an_operation_that_was_still_waiting_for_its_approval,
    dead_intents_are_claimed_by_one_recovery_and_settled_once,
    concurrent_recoveries_claim_each_dead_intent_once,
    the_journal_says_which_operations_it_holds,
    prune_deletes_finished_journal_rows_past_retention_and_keeps_open_intents,
    prune_deletes_expired_idempotency_keys_only,
    a_trail_head_only_moves_forward,
    credentials_round_trip_and_revocation_reaches_minted_tokens,
    concurrent_admissions_from_many_stores_never_pass_the_ceiling,
    an_operator_actions_change_and_its_intent_commit_together,
    a_record_no_sink_took_is_kept_until_every_sink_has_it,
);

fn budget(tenant_ceiling: &str) -> BudgetConfig {
    BudgetConfig {
        global: Some(m("100")),
        per_tenant: Some(m(tenant_ceiling)),
        ..BudgetConfig::default()
    }
}

fn admission<'a>(id: &str, cfg: &'a BudgetConfig, estimate: &str) -> Admission<'a> {
    Admission {
        journal: JournalEntry {
            operation_id: id.into(),
            intent: "{}".into(),
            started_at: Utc::now(),
            owner: "me".into(),
            idempotent: false,
            idem: None,
        },
        rate: vec![],
        budget: cfg,
        reserve: ReserveRequest {
            id: id.into(),
            tenant: "acme".into(),
            session: None,
            category: CostCategory::Compute,
            estimate: Some(m(estimate)),
            agent: None,
            at: None,
        },
        idem: None,
        idem_lookup_only: false,
        now: Utc::now(),
    }
}

fn finish<'a>(id: &'a str, cfg: &'a BudgetConfig, charge: Option<&str>) -> Finish<'a> {
    Finish {
        operation_id: id,
        budget: cfg,
        charge: charge.map(m),
        ledger: None,
        idem: None,
        journal_status: "ok",
        heads: &[],
        unrecorded: None,
        now: Utc::now(),
    }
}

fn tenant_spent(s: &dyn Store, cfg: &BudgetConfig) -> (Money, Money) {
    let sum = s
        .budget_summary(cfg, &[ScopeKey::Tenant("acme".into())])
        .unwrap();
    (sum[0].total, sum[0].reserved)
}

fn reservation_past_ceiling_is_denied_with_numbers_and_changes_nothing(b: Backend) {
    let Some((_p, s)) = b.store(module_path!()) else {
        return;
    };
    let s = &*s;
    let cfg = budget("1.00");
    assert!(matches!(
        s.admit(&admission("op1", &cfg, "0.60")).unwrap(),
        Admitted::Proceed(_)
    ));
    match s.admit(&admission("op2", &cfg, "0.50")).unwrap() {
        Admitted::Budget(d) => {
            assert!(d.reason.contains("to 1.1 of its 1 ceiling"), "{}", d.reason)
        }
        other => panic!("expected a budget denial, got {other:?}"),
    }
    let live = s.live_counts().unwrap();
    assert_eq!(
        live.reservations, 1,
        "the refused admission reserved nothing"
    );
    assert_eq!(live.open_intents, 1, "and journaled nothing");
}

fn an_overrun_is_charged_and_closes_the_scope(b: Backend) {
    let Some((_p, s)) = b.store(module_path!()) else {
        return;
    };
    let s = &*s;
    let cfg = budget("1.00");
    s.admit(&admission("op1", &cfg, "0.50")).unwrap();
    // Measured more than reserved: charged in full, the excess recorded as an overrun.
    let st = s
        .finish(&finish("op1", &cfg, Some("5.00")))
        .unwrap()
        .unwrap();
    assert_eq!(st.charged, m("5.00"));
    assert_eq!(st.overrun, m("4.50"));
    let (spent, reserved) = tenant_spent(s, &cfg);
    assert_eq!(spent, m("5.00"));
    assert_eq!(reserved, Money::ZERO);
    assert_eq!(s.live_counts().unwrap(), LiveCounts::default());
    // The scope is closed: even a zero estimate is refused, with the way to reopen it.
    match s.admit(&admission("op2", &cfg, "0")).unwrap() {
        Admitted::Budget(d) => assert!(d.reason.contains("reopen"), "{}", d.reason),
        other => panic!("expected a budget denial, got {other:?}"),
    }
    // An operator reopens the scopes; reopening an open scope says so.
    let now = Utc::now();
    assert!(s.reopen_scope(&ScopeKey::Global, now).unwrap());
    assert!(s
        .reopen_scope(&ScopeKey::Tenant("acme".into()), now)
        .unwrap());
    assert!(!s.reopen_scope(&ScopeKey::Global, now).unwrap());
    // Still over the ceiling (5.00 of 1.00): a new reservation is refused by the ceiling.
    assert!(matches!(
        s.admit(&admission("op3", &cfg, "0.10")).unwrap(),
        Admitted::Budget(_)
    ));
}

fn a_negative_amount_written_into_the_budget_state_is_refused_as_corrupt(b: Backend) {
    let Some((p, s)) = b.store(module_path!()) else {
        return;
    };
    let s = &*s;
    let cfg = budget("1.00");
    s.admit(&admission("op1", &cfg, "0.50")).unwrap();
    s.finish(&finish("op1", &cfg, Some("0.20"))).unwrap();
    // A forged negative spend would double the tenant's headroom.
    p.execute(
        r#"UPDATE budget_scopes SET state = '{"spent":{"compute":"-1000"},"reserved":"0","overrun":"0","warned":false}' WHERE scope = 'tenant:acme'"#,
    );
    let e = s.admit(&admission("op2", &cfg, "0.50")).unwrap_err();
    assert_eq!(sandboxio_core::ErrorCode::code(&e), "SBX_E1504", "{e}");
    // A negative reservation likewise.
    p.execute(
        r#"UPDATE budget_scopes SET state = '{"spent":{"compute":"0.20"},"reserved":"-5","overrun":"0","warned":false}' WHERE scope = 'tenant:acme'"#,
    );
    let e = s.admit(&admission("op3", &cfg, "0.50")).unwrap_err();
    assert_eq!(sandboxio_core::ErrorCode::code(&e), "SBX_E1504", "{e}");
}

fn settle_within_the_reservation_releases_the_rest(b: Backend) {
    let Some((_p, s)) = b.store(module_path!()) else {
        return;
    };
    let s = &*s;
    let cfg = budget("1.00");
    s.admit(&admission("op1", &cfg, "0.50")).unwrap();
    let st = s
        .finish(&finish("op1", &cfg, Some("0.20")))
        .unwrap()
        .unwrap();
    assert_eq!(st.charged, m("0.20"));
    assert!(st.overrun.is_zero());
    let (spent, reserved) = tenant_spent(s, &cfg);
    assert_eq!(spent, m("0.20"));
    assert_eq!(reserved, Money::ZERO);
    s.admit(&admission("op2", &cfg, "0.80")).unwrap();
}

fn release_on_failure_returns_the_budget(b: Backend) {
    let Some((_p, s)) = b.store(module_path!()) else {
        return;
    };
    let s = &*s;
    let cfg = budget("1.00");
    s.admit(&admission("op1", &cfg, "1.00")).unwrap();
    assert!(matches!(
        s.admit(&admission("op2", &cfg, "0.01")).unwrap(),
        Admitted::Budget(_)
    ));
    s.finish(&finish("op1", &cfg, None)).unwrap();
    assert!(matches!(
        s.admit(&admission("op2", &cfg, "1.00")).unwrap(),
        Admitted::Proceed(_)
    ));
}

fn warn_fraction_crossing_fires_once(b: Backend) {
    let Some((_p, s)) = b.store(module_path!()) else {
        return;
    };
    let s = &*s;
    let cfg = budget("1.00");
    let mut crossings = 0;
    for i in 0..10 {
        let id = format!("op{i}");
        s.admit(&admission(&id, &cfg, "0.10")).unwrap();
        let st = s.finish(&finish(&id, &cfg, Some("0.10"))).unwrap().unwrap();
        crossings += st
            .warnings
            .iter()
            .filter(|w| w.scope == ScopeKey::Tenant("acme".into()))
            .count();
    }
    assert_eq!(crossings, 1);
}

fn kill_switch_refuses_admission_atomically_and_persists(b: Backend) {
    let Some(place) = b.place(module_path!()) else {
        return;
    };
    let cfg = budget("10");
    {
        let s = place.open();
        s.set_kill("runaway spend", "ops", Utc::now()).unwrap();
    }
    let s = place.open();
    assert!(
        matches!(s.admit(&admission("op1", &cfg, "1")).unwrap(), Admitted::KillSwitch(k) if k.reason == "runaway spend")
    );
    assert_eq!(s.live_counts().unwrap(), LiveCounts::default());
    s.clear_kill().unwrap();
    assert!(matches!(
        s.admit(&admission("op1", &cfg, "1")).unwrap(),
        Admitted::Proceed(_)
    ));
}

fn rate_limit_counts_within_window_and_refusal_takes_no_token(b: Backend) {
    let Some((_p, s)) = b.store(module_path!()) else {
        return;
    };
    let s = &*s;
    let cfg = BudgetConfig::default();
    let limit: RateLimit = "3/second".parse().unwrap();
    let t0 = Utc::now();
    for i in 0..3 {
        let mut a = admission(&format!("op{i}"), &cfg, "0");
        a.rate = vec![("k".into(), limit)];
        a.now = t0 + Duration::milliseconds(i);
        assert!(matches!(s.admit(&a).unwrap(), Admitted::Proceed(_)));
    }
    let mut a = admission("op9", &cfg, "0");
    a.rate = vec![("k".into(), limit)];
    if matches!(b, Backend::Postgres) {
        // A shared store judges the window on the database's clock: a host whose clock
        // runs ahead (here by a second) does not see its peers' events as expired.
        a.now = t0 + Duration::milliseconds(1001);
        let wait = match s.admit(&a).unwrap() {
            Admitted::RateLimited { retry_after_ms, .. } => {
                assert!((1..=1000).contains(&retry_after_ms), "{retry_after_ms}");
                retry_after_ms
            }
            other => panic!("a host's clock ahead emptied the window: {other:?}"),
        };
        std::thread::sleep(std::time::Duration::from_millis(wait + 20));
        a.now = Utc::now();
        assert!(matches!(s.admit(&a).unwrap(), Admitted::Proceed(_)));
        return;
    }
    a.now = t0 + Duration::milliseconds(500);
    match s.admit(&a).unwrap() {
        Admitted::RateLimited { retry_after_ms, .. } => assert_eq!(retry_after_ms, 500),
        other => panic!("{other:?}"),
    }
    a.now = t0 + Duration::milliseconds(1001);
    assert!(matches!(s.admit(&a).unwrap(), Admitted::Proceed(_)));
}

fn claim(tenant: &str, key: &str, fp: &str) -> IdemClaim {
    IdemClaim {
        tenant: tenant.into(),
        key: key.into(),
        fingerprint: fp.into(),
        retention_s: 3600,
    }
}

fn idempotency_replay_conflict_in_progress_and_tenant_scope(b: Backend) {
    let shared = matches!(b, Backend::Postgres);
    let Some((_p, s)) = b.store(module_path!()) else {
        return;
    };
    let s = &*s;
    let cfg = BudgetConfig::default();
    let mut a = admission("op1", &cfg, "0");
    a.idem = Some(claim("acme", "k", "fp1"));
    assert!(matches!(s.admit(&a).unwrap(), Admitted::Proceed(_)));
    let mut b = admission("op2", &cfg, "0");
    b.idem = Some(claim("acme", "k", "fp1"));
    assert_eq!(s.admit(&b).unwrap(), Admitted::Idem(IdemBegin::InProgress));
    b.idem = Some(claim("acme", "k", "fp2"));
    assert_eq!(s.admit(&b).unwrap(), Admitted::Idem(IdemBegin::Conflict));
    b.idem = Some(claim("other", "k", "fp2"));
    assert!(
        matches!(s.admit(&b).unwrap(), Admitted::Proceed(_)),
        "keys are scoped by tenant"
    );
    let mut f = finish("op1", &cfg, Some("0"));
    f.idem = Some((
        "acme".into(),
        "k".into(),
        IdemEnd::Done("{\"ok\":true}".into()),
    ));
    s.finish(&f).unwrap();
    let mut c = admission("op3", &cfg, "0");
    c.idem = Some(claim("acme", "k", "fp1"));
    assert_eq!(
        s.admit(&c).unwrap(),
        Admitted::Idem(IdemBegin::Replay {
            outcome: "{\"ok\":true}".into(),
            operation_id: "op1".into()
        })
    );
    // An admission that only looks the key up (its operation waits for a person first)
    // answers a known key the same way and claims a new one for nobody.
    c.idem_lookup_only = true;
    assert!(matches!(
        s.admit(&c).unwrap(),
        Admitted::Idem(IdemBegin::Replay { .. })
    ));
    c.idem = Some(claim("acme", "k", "fp9"));
    assert_eq!(s.admit(&c).unwrap(), Admitted::Idem(IdemBegin::Conflict));
    let mut d = admission("op4", &cfg, "0");
    d.idem = Some(claim("acme", "fresh", "fp1"));
    d.idem_lookup_only = true;
    assert!(matches!(s.admit(&d).unwrap(), Admitted::Proceed(_)));
    let mut e = admission("op5", &cfg, "0");
    e.idem = Some(claim("acme", "fresh", "fp2"));
    assert!(
        matches!(s.admit(&e).unwrap(), Admitted::Proceed(_)),
        "the lookup claimed nothing"
    );
    // After the retention the key is forgotten.
    c.idem = Some(claim("acme", "k", "fp1"));
    c.idem_lookup_only = false;
    c.now = Utc::now() + Duration::seconds(3601);
    if shared {
        // On a shared store the retention runs on the database's clock: a host whose
        // clock is an hour ahead does not forget the key (and so cannot run it again).
        assert!(
            matches!(s.admit(&c).unwrap(), Admitted::Idem(_)),
            "a host's clock ahead forgot a key"
        );
        return;
    }
    assert!(matches!(s.admit(&c).unwrap(), Admitted::Proceed(_)));
}

fn approval(id: &str, fp: &str, expires_in: i64) -> Approval {
    let now = Utc::now();
    Approval {
        id: id.into(),
        tenant: "acme".into(),
        fingerprint: fp.into(),
        operation: "{}".into(),
        rationale: "because".into(),
        reason: "ask rule".into(),
        state: ApprovalState::Pending,
        created_at: now,
        expires_at: now + Duration::seconds(expires_in),
        decided_by: None,
        decided_at: None,
        decision_reason: None,
    }
}

fn approval_is_single_use_and_bound_to_fingerprint(b: Backend) {
    let Some((_p, s)) = b.store(module_path!()) else {
        return;
    };
    let s = &*s;
    s.create_approval(&approval("a1", "fp-1", 60)).unwrap();
    let now = Utc::now();
    assert_eq!(
        s.claim(Some(("a1", "fp-1")), None, "op", now).unwrap(),
        Some(Claimed::ApprovalInvalid),
        "not yet approved"
    );
    s.decide_approval("a1", true, "alice", None, now).unwrap();
    assert_eq!(
        s.claim(Some(("a1", "fp-2")), None, "op", now).unwrap(),
        Some(Claimed::ApprovalInvalid),
        "another request"
    );
    assert_eq!(
        s.claim(Some(("a1", "fp-1")), None, "op", now).unwrap(),
        None
    );
    assert_eq!(
        s.claim(Some(("a1", "fp-1")), None, "op", now).unwrap(),
        Some(Claimed::ApprovalInvalid),
        "used once"
    );
    let e = s
        .decide_approval("a1", false, "bob", None, now)
        .unwrap_err();
    assert_eq!(sandboxio_core::ErrorCode::code(&e), "SBX_E1508");
}

fn expired_approval_cannot_be_used_or_decided(b: Backend) {
    let Some((_p, s)) = b.store(module_path!()) else {
        return;
    };
    let s = &*s;
    s.create_approval(&approval("a2", "fp", -1)).unwrap();
    let now = Utc::now();
    assert!(s.decide_approval("a2", true, "alice", None, now).is_err());
    assert_eq!(
        s.claim(Some(("a2", "fp")), None, "op", now).unwrap(),
        Some(Claimed::ApprovalInvalid)
    );
}

/// Recovery's halves: claiming the dead intents settles nothing (the gateway records them
/// before it settles them); a live recovery's claim keeps any other from taking them (two
/// replicas sweeping at once record each once), while the holder's own retry, the
/// successor of a dead holder, or anyone once the claim lapsed takes them; settling takes
/// only intents still open, so a list settled twice settles each intent once, and a
/// settled intent is claimed by nobody.
fn dead_intents_are_claimed_by_one_recovery_and_settled_once(b: Backend) {
    let Some((_p, s)) = b.store(module_path!()) else {
        return;
    };
    let s = &*s;
    let cfg = budget("10");
    for (id, owner) in [("d1", "dead"), ("d2", "dead"), ("a1", "alive")] {
        let mut a = admission(id, &cfg, "1");
        a.journal.owner = owner.into();
        assert!(matches!(s.admit(&a).unwrap(), Admitted::Proceed(_)));
    }
    let hold = std::time::Duration::from_secs(60);
    let all_alive = |o: &str| o == "alive" || o.starts_with("rec-");
    let ids =
        |v: Vec<JournalEntry>| -> Vec<String> { v.into_iter().map(|e| e.operation_id).collect() };
    let first = s.claim_dead_intents("rec-1", hold, &all_alive).unwrap();
    assert_eq!(ids(first.clone()), ["d1", "d2"]);
    // Nothing settled, nothing released.
    assert_eq!(s.live_counts().unwrap().open_intents, 3);
    assert_eq!(s.live_counts().unwrap().reservations, 3);
    // Held: another live recovery takes nothing; the holder's retry takes them again.
    assert!(s
        .claim_dead_intents("rec-2", hold, &all_alive)
        .unwrap()
        .is_empty());
    assert_eq!(
        s.claim_dead_intents("rec-1", hold, &all_alive)
            .unwrap()
            .len(),
        2
    );
    // The holder died: its successor takes them (here with a claim that lapses at once).
    let rec1_dead = |o: &str| o == "alive" || o == "rec-2" || o == "rec-3";
    let zero = std::time::Duration::ZERO;
    assert_eq!(
        s.claim_dead_intents("rec-2", zero, &rec1_dead)
            .unwrap()
            .len(),
        2
    );
    // A lapsed claim is free, though its holder lives.
    std::thread::sleep(std::time::Duration::from_millis(5));
    assert_eq!(
        s.claim_dead_intents("rec-3", hold, &all_alive)
            .unwrap()
            .len(),
        2
    );
    let settled = s
        .settle_interrupted(Utc::now(), &first, &BudgetConfig::default(), &|_| {
            String::new()
        })
        .unwrap();
    assert_eq!(settled.len(), 2);
    let again = s
        .settle_interrupted(Utc::now(), &first, &BudgetConfig::default(), &|_| {
            String::new()
        })
        .unwrap();
    assert!(again.is_empty(), "settled twice: {again:?}");
    let live = s.live_counts().unwrap();
    assert_eq!((live.open_intents, live.reservations), (1, 1));
    // Settled: nobody claims them, not even with every claimant dead.
    let none_alive = |o: &str| o == "alive";
    assert!(s
        .claim_dead_intents("rec-4", hold, &none_alive)
        .unwrap()
        .is_empty());
}

/// Recoveries in several processes (stores) at once, all alive: each dead intent is
/// claimed by exactly one of them.
fn concurrent_recoveries_claim_each_dead_intent_once(b: Backend) {
    let Some(place) = b.place(module_path!()) else {
        return;
    };
    let cfg = budget("100");
    let stores: Vec<Box<dyn Store>> = (0..6).map(|_| place.open()).collect();
    for i in 0..40 {
        let mut a = admission(&format!("d{i:02}"), &cfg, "1");
        a.journal.owner = "dead".into();
        assert!(matches!(stores[0].admit(&a).unwrap(), Admitted::Proceed(_)));
    }
    let alive = |o: &str| o.starts_with("rec-");
    let hold = std::time::Duration::from_secs(60);
    let claimed: Vec<Vec<String>> = std::thread::scope(|sc| {
        let handles: Vec<_> = stores
            .iter()
            .enumerate()
            .map(|(t, s)| {
                sc.spawn(move || {
                    let mut mine = Vec::new();
                    // Several rounds each, so the reads and the claims interleave.
                    for _ in 0..5 {
                        let got = s.claim_dead_intents(&format!("rec-{t}"), hold, &alive);
                        mine.extend(got.unwrap().into_iter().map(|e| e.operation_id));
                    }
                    mine.sort();
                    mine.dedup();
                    mine
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut all: Vec<String> = claimed.concat();
    let total = all.len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 40, "every dead intent claimed: {claimed:?}");
    assert_eq!(
        total, 40,
        "an intent claimed by two recoveries: {claimed:?}"
    );
}

/// An operator action's change is committed with its intent (recovery records an action
/// whose process died before its record); one that changes nothing, or is refused, leaves
/// neither.
fn an_operator_actions_change_and_its_intent_commit_together(b: Backend) {
    let Some((_p, s)) = b.store(module_path!()) else {
        return;
    };
    let s = &*s;
    let now = Utc::now();
    let intent = |id: &str| JournalEntry {
        operation_id: id.into(),
        intent: "{}".into(),
        started_at: now,
        owner: "1:1".into(),
        idempotent: false,
        idem: None,
    };
    let has = |ids: &[&str]| {
        let ids: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
        let mut h = s.journal_has(&ids).unwrap();
        h.sort();
        h
    };
    let kill = AdminChange::Kill {
        reason: "stop".into(),
        by: "alice".into(),
        now,
    };
    // The intent carries the commit's time, not the one it was asked with (an action that
    // waited for the write lock is later than the one holding it).
    let asked_late = Utc::now();
    let k1 = s.admin_change(&intent("k1"), &kill).unwrap();
    assert!(k1.change.changed());
    assert!(k1.at >= asked_late, "{:?} < {asked_late:?}", k1.at);
    let open = s
        .open_intents_since(asked_late - Duration::seconds(1))
        .unwrap();
    assert_eq!(open.len(), 1, "{open:?}");
    assert_eq!(open[0].operation_id, "k1");
    assert_eq!(
        open[0].started_at.timestamp_millis(),
        k1.at.timestamp_millis()
    );
    assert!(s
        .open_intents_since(k1.at + Duration::seconds(1))
        .unwrap()
        .is_empty());
    assert_eq!(s.kill_state().unwrap().unwrap().by, "alice");
    assert!(s
        .admin_change(&intent("r1"), &AdminChange::Resume)
        .unwrap()
        .change
        .changed());
    assert!(s.kill_state().unwrap().is_none());
    // An approval decided; one no longer pending is refused and writes nothing.
    s.create_approval(&approval("a9", "fp", 60)).unwrap();
    let decide = |approve| AdminChange::Decide {
        approval_id: "a9".into(),
        approve,
        by: "bob".into(),
        reason: None,
        now,
    };
    match s.admin_change(&intent("d1"), &decide(true)).unwrap().change {
        AdminChanged::Decided(a) => assert_eq!(a.state, ApprovalState::Approved),
        other => panic!("{other:?}"),
    }
    let e = s.admin_change(&intent("d2"), &decide(false)).unwrap_err();
    assert_eq!(sandboxio_core::ErrorCode::code(&e), "SBX_E1508");
    // A scope that was not closed, a key that does not exist: nothing changed.
    let scope: sandboxio_budget::ScopeKey = "tenant:acme".parse().unwrap();
    let reopen = AdminChange::Reopen { scope, now };
    assert!(!s
        .admin_change(&intent("o1"), &reopen)
        .unwrap()
        .change
        .changed());
    let revoke = AdminChange::Revoke {
        key_id: "no-such-key".into(),
        now,
    };
    assert!(!s
        .admin_change(&intent("v1"), &revoke)
        .unwrap()
        .change
        .changed());
    // A key created: stored with its intent.
    let minted = sandboxio_gateway::credential::mint_api_key(
        "acme",
        sandboxio_gateway::credential::Scopes::all(),
        "c",
    );
    let created = s
        .admin_change(
            &intent("c1"),
            &AdminChange::CreateKey {
                credential: minted.credential.clone(),
            },
        )
        .unwrap();
    assert!(matches!(created.change, AdminChanged::Created));
    let stored = s.credential(&minted.credential.id).unwrap().unwrap();
    assert_eq!(stored.tenant, "acme");
    // An action whose change is outside the store (a secret sealed in its file): the
    // intent alone, committed before the change is made.
    let only = s
        .admin_change(&intent("i1"), &AdminChange::IntentOnly)
        .unwrap();
    assert!(only.change.changed());
    assert!(only.at >= k1.at);
    assert_eq!(
        has(&["k1", "r1", "d1", "d2", "o1", "v1", "c1", "i1"]),
        ["c1", "d1", "i1", "k1", "r1"]
    );
    // Open until their records close them, like any operation's.
    assert_eq!(s.live_counts().unwrap().open_intents, 5);
}

/// A record its sinks could not take is kept (with an admitted operation's `finish`, or on
/// its own), listed oldest first, narrowed to the sinks still missing it, and forgotten
/// once every sink has it.
fn a_record_no_sink_took_is_kept_until_every_sink_has_it(b: Backend) {
    let Some((_p, s)) = b.store(module_path!()) else {
        return;
    };
    let s = &*s;
    let cfg = budget("10");
    let kept = |id: &str, secs: i64| Unrecorded {
        operation_id: id.into(),
        event: format!("{{\"operation_id\":\"{id}\"}}"),
        sinks: vec!["file(a)".into(), "otlp".into()],
        at: Utc::now() - Duration::seconds(secs),
    };
    assert!(matches!(
        s.admit(&admission("u-1", &cfg, "1")).unwrap(),
        Admitted::Proceed(_)
    ));
    let first = kept("u-1", 10);
    let mut f = finish("u-1", &cfg, Some("1"));
    f.unrecorded = Some(&first);
    s.finish(&f).unwrap();
    s.keep_unrecorded(&kept("u-2", 5)).unwrap();
    let list = s.unrecorded(100).unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[0].operation_id, "u-1", "oldest first");
    assert_eq!(list[0].event, first.event);
    assert_eq!(list[0].sinks, first.sinks);
    s.settle_unrecorded("u-1", &["otlp".to_string()]).unwrap();
    s.settle_unrecorded("u-2", &[]).unwrap();
    let list = s.unrecorded(100).unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].sinks, ["otlp"]);
    s.settle_unrecorded("u-1", &[]).unwrap();
    assert!(s.unrecorded(100).unwrap().is_empty());
}

/// `journal_has` answers the operations the journal holds, open or settled, and no
/// other (the lost-work check asks it about the trail's admitted operations).
fn the_journal_says_which_operations_it_holds(b: Backend) {
    let Some((_p, s)) = b.store(module_path!()) else {
        return;
    };
    let s = &*s;
    let cfg = budget("10");
    for id in ["open-1", "done-1"] {
        assert!(matches!(
            s.admit(&admission(id, &cfg, "1")).unwrap(),
            Admitted::Proceed(_)
        ));
    }
    s.finish(&finish("done-1", &cfg, Some("1"))).unwrap();
    let ids: Vec<String> = ["open-1", "done-1", "never"].map(String::from).to_vec();
    let mut has = s.journal_has(&ids).unwrap();
    has.sort();
    assert_eq!(has, ["done-1", "open-1"]);
    assert!(s.journal_has(&[]).unwrap().is_empty());
}

fn recovery_marks_dead_intents_interrupted_and_charges_their_reservations(b: Backend) {
    let Some((_p, s)) = b.store(module_path!()) else {
        return;
    };
    let s = &*s;
    let cfg = budget("10");
    for (id, owner, idempotent) in [
        ("op1", "dead", false),
        ("op2", "alive", false),
        ("op3", "dead", true),
    ] {
        let mut a = admission(id, &cfg, "1");
        a.journal.owner = owner.into();
        a.journal.idempotent = idempotent;
        a.journal.idem = Some(("acme".into(), id.into()));
        a.idem = Some(claim("acme", id, "fp"));
        assert!(matches!(s.admit(&a).unwrap(), Admitted::Proceed(_)));
    }
    let rec = s
        .recover(Utc::now(), &cfg, &|o| o == "alive", &|e| {
            format!("interrupted:{}", e.operation_id)
        })
        .unwrap();
    let ids: Vec<_> = rec.iter().map(|e| e.operation_id.as_str()).collect();
    assert_eq!(ids, ["op1", "op3"]);
    let live = s.live_counts().unwrap();
    assert_eq!(
        live.reservations, 1,
        "only the live op keeps its reservation"
    );
    assert_eq!(live.open_intents, 1);
    // Each interrupted op may have run: charged its reservation (1), never free.
    assert_eq!(tenant_spent(s, &cfg), (m("2"), m("1")));
    let ledger = s
        .ledger(
            Utc::now() - Duration::hours(1),
            Utc::now() + Duration::hours(1),
        )
        .unwrap();
    let mut charged: Vec<(&str, &str, String)> = ledger
        .iter()
        .map(|l| {
            (
                l.operation_id.as_str(),
                l.tenant.as_str(),
                l.amount.to_string(),
            )
        })
        .collect();
    charged.sort();
    assert_eq!(
        charged,
        [
            ("op1", "acme", "1".to_string()),
            ("op3", "acme", "1".to_string())
        ]
    );
    assert!(ledger[0].description.contains("charged its reservation"));
    // Non-idempotent interrupted op: its key answers with the interrupted outcome, never re-runs.
    let mut again = admission("x", &cfg, "0");
    again.idem = Some(claim("acme", "op1", "fp"));
    assert_eq!(
        s.admit(&again).unwrap(),
        Admitted::Idem(IdemBegin::Replay {
            outcome: "interrupted:op1".into(),
            operation_id: "op1".into()
        })
    );
    // Idempotent interrupted op: the key is forgotten, so a retry runs it.
    let mut retry = admission("y", &cfg, "0");
    retry.idem = Some(claim("acme", "op3", "fp"));
    assert!(matches!(s.admit(&retry).unwrap(), Admitted::Proceed(_)));
    // Recovery expires the approvals the dead operations were waiting for.
    s.create_approval(&approval(&approval_id_for("op1"), "fp", 600))
        .unwrap();
    s.create_approval(&approval(&approval_id_for("op2"), "fp", 600))
        .unwrap();
    let mut dead = admission("op4", &cfg, "0");
    dead.journal.owner = "dead".into();
    s.admit(&dead).unwrap();
    s.create_approval(&approval(&approval_id_for("op4"), "fp", 600))
        .unwrap();
    s.recover(Utc::now(), &cfg, &|o| o == "alive", &|_| String::new())
        .unwrap();
    assert_eq!(
        s.get_approval(&approval_id_for("op4"))
            .unwrap()
            .unwrap()
            .state,
        ApprovalState::Expired
    );
    assert_eq!(
        s.get_approval(&approval_id_for("op2"))
            .unwrap()
            .unwrap()
            .state,
        ApprovalState::Pending,
        "a live operation keeps its approval"
    );
    // Recovery is idempotent.
    assert!(s
        .recover(Utc::now(), &cfg, &|o| o == "alive" || o == "me", &|_| {
            String::new()
        })
        .unwrap()
        .is_empty());
}

fn prune_deletes_finished_journal_rows_past_retention_and_keeps_open_intents(b: Backend) {
    let shared = matches!(b, Backend::Postgres);
    let Some((place, s)) = b.store(module_path!()) else {
        return;
    };
    let s = &*s;
    let cfg = budget("50");
    for id in ["done-1", "done-2", "open-1"] {
        assert!(matches!(
            s.admit(&admission(id, &cfg, "1")).unwrap(),
            Admitted::Proceed(_)
        ));
    }
    s.finish(&finish("done-1", &cfg, Some("1"))).unwrap();
    s.finish(&finish("done-2", &cfg, None)).unwrap();
    let ret = std::time::Duration::from_secs(3600);
    // Within the retention nothing goes.
    assert_eq!(s.prune(Utc::now(), ret).unwrap(), Pruned::default());
    let mut later = Utc::now() + Duration::hours(2);
    if shared {
        // A shared store prunes on the database's clock: a host two hours ahead deletes
        // nothing. The rows are aged instead.
        assert_eq!(s.prune(later, ret).unwrap(), Pruned::default());
        place.execute("UPDATE journal SET ended_ms = ended_ms - 7200000 WHERE status IS NOT NULL");
        later = Utc::now();
    }
    let p = s.prune(later, ret).unwrap();
    assert_eq!(p.journal, 2, "{p:?}");
    assert_eq!(s.prune(later, ret).unwrap().journal, 0);
    // The open intent stays, so recovery still finds it.
    assert_eq!(s.live_counts().unwrap().open_intents, 1);
}

fn prune_deletes_expired_idempotency_keys_only(b: Backend) {
    let shared = matches!(b, Backend::Postgres);
    let Some((place, s)) = b.store(module_path!()) else {
        return;
    };
    let s = &*s;
    let cfg = budget("50");
    for (id, key) in [("a", "k-a"), ("b", "k-b")] {
        let mut a = admission(id, &cfg, "1");
        a.idem = Some(IdemClaim {
            retention_s: if key == "k-a" { 60 } else { 86_400 },
            ..claim("acme", key, id)
        });
        assert!(matches!(s.admit(&a).unwrap(), Admitted::Proceed(_)));
        let mut f = finish(id, &cfg, Some("1"));
        f.idem = Some(("acme".into(), key.into(), IdemEnd::Done("{}".into())));
        s.finish(&f).unwrap();
    }
    let week = std::time::Duration::from_secs(86_400 * 7);
    let mut later = Utc::now() + Duration::hours(1);
    if shared {
        // On the database's clock: a host an hour ahead forgets no key (a keyed run could
        // otherwise run twice). The keys are aged instead.
        assert_eq!(s.prune(later, week).unwrap().idempotency, 0);
        place.execute("UPDATE idempotency SET expires_ms = expires_ms - 3600000");
        later = Utc::now();
    }
    let p = s.prune(later, week).unwrap();
    assert_eq!(p.idempotency, 1, "{p:?}");
    // The unexpired key still replays.
    let again = s
        .claim(None, Some(&claim("acme", "k-b", "b")), "c", Utc::now())
        .unwrap();
    assert!(
        matches!(again, Some(Claimed::Idem(IdemBegin::Replay { .. }))),
        "{again:?}"
    );
}

fn a_trail_head_only_moves_forward(b: Backend) {
    let Some((_p, s)) = b.store(module_path!()) else {
        return;
    };
    let s = &*s;
    let head = |size: u64| SignedHead {
        trail: "/t/audit.jsonl".into(),
        size,
        last_hash: format!("{size:064x}"),
        origin: "o".into(),
        key_id: "k".into(),
        signature: String::new(),
    };
    s.put_heads(&[head(5)], Utc::now()).unwrap();
    s.put_heads(&[head(3)], Utc::now()).unwrap();
    assert_eq!(s.heads().unwrap(), vec![head(5)]);
    s.put_heads(&[head(9)], Utc::now()).unwrap();
    assert_eq!(s.heads().unwrap(), vec![head(9)]);
    // A break keeps the old head as evidence and restarts from the trail as it is.
    let b = AnchorBreak {
        trail: "/t/audit.jsonl".into(),
        at: Utc::now(),
        head: head(9),
        found: "cut".into(),
    };
    s.record_anchor_break(&b, Some(&head(2))).unwrap();
    assert_eq!(s.heads().unwrap(), vec![head(2)]);
    assert_eq!(s.anchor_breaks().unwrap()[0].head, head(9));
}

fn credentials_round_trip_and_revocation_reaches_minted_tokens(b: Backend) {
    use sandboxio_gateway::credential::*;
    let Some((_p, s)) = b.store(module_path!()) else {
        return;
    };
    let key = mint_api_key("acme", Scopes::all(), "ci");
    s.create_credential(&key.credential).unwrap();
    let cap = mint_capability(
        &key.credential,
        CapabilitySpec {
            sandbox: "sbx1".into(),
            dir: Some("out".into()),
            scopes: Scopes::all(),
            expires_at: Utc::now() + Duration::hours(1),
            label: "cap".into(),
        },
    );
    s.create_credential(&cap.credential).unwrap();
    s.create_credential(&mint_api_key("other", Scopes::all(), "x").credential)
        .unwrap();
    let back = s.credential(&key.credential.id).unwrap().unwrap();
    assert_eq!(back.secret_sha256, key.credential.secret_sha256);
    assert_eq!(back.scopes, key.credential.scopes);
    let listed: Vec<String> = s
        .list_credentials(Some("acme"))
        .unwrap()
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert!(s.revoke_credential(&key.credential.id, Utc::now()).unwrap());
    let cap_back = s.credential(&cap.credential.id).unwrap().unwrap();
    assert!(
        !cap_back.is_live(Utc::now()),
        "revoking a key revokes its tokens"
    );
    assert_eq!(cap_back.dir.as_deref(), Some("out"));
    assert!(!s.revoke_credential("nope", Utc::now()).unwrap());
}

/// Eight stores on one state (eight connections, or eight replicas), 60 admissions each of
/// 0.01 against a 2.00 ceiling, from eight threads: exactly 200 are admitted and settled,
/// the ledger holds exactly the ceiling, and nothing is left reserved or open.
fn concurrent_admissions_from_many_stores_never_pass_the_ceiling(b: Backend) {
    let Some(place) = b.place(module_path!()) else {
        return;
    };
    let cfg = BudgetConfig {
        global: Some(m("2.00")),
        ..BudgetConfig::default()
    };
    let stores: Vec<Box<dyn Store>> = (0..8).map(|_| place.open()).collect();
    let admitted = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|sc| {
        for (t, s) in stores.iter().enumerate() {
            let (cfg, admitted) = (&cfg, &admitted);
            sc.spawn(move || {
                for i in 0..60 {
                    let id = format!("op-{t}-{i}");
                    let mut a = admission(&id, cfg, "0.01");
                    a.rate = vec![("global|x".into(), "100000/hour".parse().unwrap())];
                    match s.admit(&a).unwrap() {
                        Admitted::Proceed(_) => {
                            admitted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            let mut f = finish(&id, cfg, Some("0.01"));
                            f.ledger = Some(LedgerLine {
                                operation_id: id.clone(),
                                tenant: "acme".into(),
                                category: CostCategory::Compute,
                                amount: m("0.01"),
                                at: Utc::now(),
                                description: "t".into(),
                                labels: Default::default(),
                            });
                            s.finish(&f).unwrap();
                        }
                        Admitted::Budget(_) => {}
                        other => panic!("unexpected {other:?}"),
                    }
                }
            });
        }
    });
    assert_eq!(admitted.into_inner(), 200);
    let s = &stores[0];
    let lines = s
        .ledger(
            Utc::now() - Duration::hours(1),
            Utc::now() + Duration::hours(1),
        )
        .unwrap();
    let total = lines
        .iter()
        .fold(Money::ZERO, |acc, l| acc.checked_add(l.amount).unwrap());
    assert_eq!(total, m("2.00"));
    assert_eq!(lines.len(), 200, "every success recorded once");
    assert_eq!(s.live_counts().unwrap(), LiveCounts::default());
    let usage = s
        .rate_usage("global|", Utc::now() - Duration::hours(1))
        .unwrap();
    assert_eq!(usage.len(), 1);
    assert_eq!(
        usage[0].count, 200,
        "admitted operations took a rate token; refused ones none"
    );
}

#[test]
fn a_lost_or_garbage_state_db_next_to_a_trail_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let files = StateFiles::new(dir.path().join("state"), None);
    // No trail yet: a new state.
    drop(files.open_store(SyncMode::Full).unwrap());
    std::fs::write(&files.trail, "{\"seq\":0,\"prev_hash\":\"00\"}\n").unwrap();
    std::fs::remove_file(&files.db).unwrap();
    let e = files.open_store(SyncMode::Full).unwrap_err();
    assert_eq!(sandboxio_core::ErrorCode::code(&e), "SBX_E1532");
    assert!(e.to_string().contains(RECOVER_COMMAND), "{e}");
    assert!(!files.db.exists(), "nothing was created");
    // A new, valid but empty database in its place is the same loss.
    drop(SqliteStore::open(&files.db, SyncMode::Full).unwrap());
    let e = files.open_store(SyncMode::Full).unwrap_err();
    assert_eq!(sandboxio_core::ErrorCode::code(&e), "SBX_E1532");
    // Garbage in place of the database, its WAL still beside it (closing leaves the WAL):
    // SQLite reads the pages the WAL holds, which here make a blank database: refused.
    std::fs::write(&files.db, vec![7u8; 4096]).unwrap();
    let e = files.open_store(SyncMode::Full).unwrap_err();
    assert!(
        ["SBX_E1532", "SBX_E1533"].contains(&sandboxio_core::ErrorCode::code(&e)),
        "{e}"
    );
    assert!(e.to_string().contains(RECOVER_COMMAND), "{e}");
    // Garbage alone (the WAL and its index gone too) is a damaged database.
    for ext in ["-wal", "-shm"] {
        let mut p = files.db.as_os_str().to_owned();
        p.push(ext);
        let _ = std::fs::remove_file(std::path::PathBuf::from(p));
    }
    std::fs::write(&files.db, vec![7u8; 4096]).unwrap();
    let e = files.open_store(SyncMode::Full).unwrap_err();
    assert_eq!(sandboxio_core::ErrorCode::code(&e), "SBX_E1533");
    assert!(e.to_string().contains(RECOVER_COMMAND), "{e}");
}

#[test]
fn a_lost_database_and_trail_beside_the_audit_key_are_refused_not_started_afresh() {
    // The trail and the database deleted together: no record is left to say the state
    // existed, but the audit key (written after the database, by the first open) is.
    for evidence in ["audit.key", "audit.pub", "audit.key.pending"] {
        for damage in ["missing", "empty", "fifo"] {
            let dir = tempfile::tempdir().unwrap();
            let files = StateFiles::new(dir.path().join("state"), None);
            drop(files.open_store(SyncMode::Full).unwrap());
            std::fs::write(files.dir.join(evidence), "k\n").unwrap();
            for ext in ["", "-wal", "-shm"] {
                let mut p = files.db.as_os_str().to_owned();
                p.push(ext);
                let _ = std::fs::remove_file(std::path::PathBuf::from(p));
            }
            match damage {
                "empty" => std::fs::write(&files.db, b"").unwrap(),
                "fifo" => assert!(std::process::Command::new("mkfifo")
                    .arg(&files.db)
                    .status()
                    .unwrap()
                    .success()),
                _ => {}
            }
            let e = files.open_store(SyncMode::Full).unwrap_err();
            assert_eq!(
                sandboxio_core::ErrorCode::code(&e),
                "SBX_E1532",
                "{evidence}, {damage}: {e}"
            );
            let text = e.to_string();
            // Nothing to recover from (the trail is gone): the way out is said instead.
            assert!(!text.contains(RECOVER_COMMAND), "{text}");
            assert!(
                text.contains("removing the whole state directory"),
                "{text}"
            );
            assert!(text.contains(evidence), "names what it found: {text}");
            let kind = std::fs::symlink_metadata(&files.db).ok().map(|m| m.len());
            assert!(
                damage != "missing" || kind.is_none(),
                "{evidence}: nothing was created"
            );
        }
    }
    // A new directory (no key, no trail) opens; so does a blank database beside a key (a
    // command that opened the state and recorded nothing leaves that).
    let dir = tempfile::tempdir().unwrap();
    let files = StateFiles::new(dir.path().join("state"), None);
    drop(files.open_store(SyncMode::Full).unwrap());
    std::fs::write(files.dir.join("audit.key"), "k\n").unwrap();
    drop(files.open_store(SyncMode::Full).unwrap());
}

/// Valid frames at the start of a WAL file: what the next process to open the database
/// alone reads and checksums to rebuild the WAL's index (frames whose salts match the
/// header's; a restarted WAL's older frames no longer do).
fn valid_wal_frames(db: &std::path::Path) -> usize {
    let mut p = db.as_os_str().to_owned();
    p.push("-wal");
    let Ok(wal) = std::fs::read(std::path::PathBuf::from(p)) else {
        return 0;
    };
    let be = |b: &[u8], i: usize| u32::from_be_bytes(b[i..i + 4].try_into().unwrap());
    if wal.len() < 32 {
        return 0;
    }
    let (page, salts) = (be(&wal, 8) as usize, (be(&wal, 16), be(&wal, 20)));
    wal[32..]
        .chunks_exact(24 + page)
        .take_while(|f| (be(f, 8), be(f, 12)) == salts)
        .count()
}

#[test]
fn one_commit_per_opening_leaves_a_short_wal_for_the_next_opener() {
    // A one-shot CLI opens the database, commits a few times and closes. Each opening
    // rebuilds the WAL's index from every valid frame, and a WAL restarts only when a
    // writer of the same process finds it checkpointed: with one commit per opening the
    // valid frames grew by one a run, forever (each run slower than the last).
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    let mut most = 0;
    for i in 0..300 {
        let store = SqliteStore::open(&db, SyncMode::Full).unwrap();
        store
            .set_kill(&format!("drill {i}"), "test", Utc::now())
            .unwrap();
        drop(store);
        most = most.max(valid_wal_frames(&db));
    }
    assert!(
        most <= 80,
        "{most} valid WAL frames after 300 one-commit openings (a checkpoint every 64 frames \
         keeps it under 80)"
    );
    // The state is all there.
    let store = SqliteStore::open(&db, SyncMode::Full).unwrap();
    assert_eq!(store.kill_state().unwrap().unwrap().reason, "drill 299");
}

#[test]
fn a_closed_sqlite_store_leaves_a_short_wal_for_the_next_opener() {
    // The next process to open the database alone re-reads every WAL frame since the last
    // checkpoint; the store keeps that number bounded however many commits came before.
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    let store = SqliteStore::open(&db, SyncMode::Full).unwrap();
    for i in 0..300 {
        store
            .set_kill(&format!("drill {i}"), "test", Utc::now())
            .unwrap();
        store.clear_kill().unwrap();
    }
    drop(store);
    let c = rusqlite::Connection::open(&db).unwrap();
    let frames: i64 = c
        .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get(1))
        .unwrap();
    assert!(
        (0..=80).contains(&frames),
        "{frames} WAL frames left after 600 commits (a checkpoint every 64 frames keeps it under 80)"
    );
}

/// A store whose schema this role may not create (PostgreSQL 15 gives no `CREATE` on
/// `public` to a role that does not own the database): an error with its code, never a
/// panic, also when opened from a thread that drives tokio (as the CLI and the server do).
#[tokio::test(flavor = "current_thread")]
async fn a_role_that_cannot_migrate_gets_an_error_not_a_panic() {
    // The test cluster's synchronous client may not block a thread that drives tokio:
    // the set-up runs on its own thread.
    let weak = std::thread::spawn(|| {
        let url = crate::pgcluster::fresh_url(module_path!())?;
        let role = format!("weak_{}", std::process::id());
        let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        admin
            .batch_execute(&format!("CREATE ROLE {role} LOGIN"))
            .unwrap();
        let (base, _) = url.rsplit_once("&user=").unwrap();
        Some(format!("{base}&user={role}"))
    })
    .join()
    .unwrap();
    let Some(weak) = weak else {
        return;
    };
    for _ in 0..3 {
        let e = PgStore::open(&pg_options(&weak, 10)).err().unwrap();
        assert_eq!(sandboxio_core::ErrorCode::code(&e), "SBX_E1540", "{e}");
        assert!(e.to_string().contains("migrating"), "{e}");
    }
}

/// An operation stopped while it waited for a person never ran: recovery releases its
/// reservation. One whose approval was used (it went on to run) is charged.
fn recovery_releases_an_operation_that_was_still_waiting_for_its_approval(b: Backend) {
    let Some((_p, s)) = b.store(module_path!()) else {
        return;
    };
    let s = &*s;
    let cfg = budget("10");
    for id in ["waiting", "went-on"] {
        let mut a = admission(id, &cfg, "1");
        a.journal.owner = "dead".into();
        assert!(matches!(s.admit(&a).unwrap(), Admitted::Proceed(_)));
        s.create_approval(&approval(&approval_id_for(id), "fp", 600))
            .unwrap();
    }
    let went = approval_id_for("went-on");
    s.decide_approval(&went, true, "alice", None, Utc::now())
        .unwrap();
    assert_eq!(
        s.claim(Some((&went, "fp")), None, "went-on", Utc::now())
            .unwrap(),
        None
    );
    let ids = ["waiting".to_string(), "went-on".to_string()];
    let amounts = s.reserved_amounts(&ids).unwrap();
    assert_eq!(
        amounts.keys().collect::<Vec<_>>(),
        ["went-on"],
        "{amounts:?}"
    );
    s.recover(Utc::now(), &cfg, &|_| false, &|_| String::new())
        .unwrap();
    assert_eq!(tenant_spent(s, &cfg), (m("1"), Money::ZERO));
    let charged: Vec<String> = s
        .ledger(
            Utc::now() - Duration::hours(1),
            Utc::now() + Duration::hours(1),
        )
        .unwrap()
        .into_iter()
        .map(|l| l.operation_id)
        .collect();
    assert_eq!(charged, ["went-on"]);
}
