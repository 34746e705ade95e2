use sandboxio_budget::{
    BudgetConfig, BudgetGuard, MeasuredUsage, RateCard, ReserveRequest, ScopeKey,
};
use sandboxio_core::{CostCategory, ErrorCode, Money, Verdict};

fn m(s: &str) -> Money {
    s.parse().unwrap()
}

fn req(id: &str, tenant: &str, est: &str) -> ReserveRequest {
    ReserveRequest {
        id: id.into(),
        tenant: tenant.into(),
        session: None,
        category: CostCategory::Compute,
        estimate: Some(m(est)),
        agent: None,
        at: None,
    }
}

fn guard() -> BudgetGuard {
    let mut cfg = BudgetConfig {
        global: Some(m("100")),
        per_tenant: Some(m("5")),
        per_session: Some(m("2")),
        ..Default::default()
    };
    cfg.tenants.insert("acme".into(), m("10.00"));
    BudgetGuard::new(cfg).unwrap()
}

#[test]
fn denial_states_the_numbers() {
    let mut g = guard();
    g.reserve(&req("a", "acme", "9.70")).unwrap();
    g.settle("a", m("9.70")).unwrap();
    let d = g.reserve(&req("b", "acme", "0.50")).unwrap_err();
    assert_eq!(
        d.reason,
        "reserving 0.5 would bring tenant `acme` to 10.2 of its 10 ceiling (spent 9.7, reserved 0)"
    );
    assert_eq!(d.scope, Some(ScopeKey::Tenant("acme".into())));
    let dec = d.to_decision();
    assert_eq!(dec.verdict, Verdict::Deny);
    assert!(g.state.is_valid());
}

#[test]
fn reservation_up_to_the_ceiling_exactly_is_allowed() {
    let mut g = guard();
    g.reserve(&req("a", "acme", "10.00")).unwrap();
    assert!(g.reserve(&req("b", "acme", "0.000001")).is_err());
    g.release("a").unwrap();
    g.reserve(&req("b", "acme", "0.000001")).unwrap();
}

#[test]
fn session_ceiling_applies_with_the_tenant_one() {
    let mut g = guard();
    let mut r = req("a", "acme", "2.5");
    r.session = Some("s1".into());
    let d = g.reserve(&r).unwrap_err();
    assert!(d.reason.contains("session `s1`"), "{}", d.reason);
    // Nothing changed: the global and tenant scopes hold no reservation.
    assert!(g.state.scope(&ScopeKey::Global).reserved.is_zero());
    assert!(g.state.reservations.is_empty());
}

#[test]
fn an_overrun_is_charged_recorded_and_closes_the_scope() {
    let mut g = guard();
    g.reserve(&req("a", "acme", "1")).unwrap();
    // Measured above the reservation: charged in full, the excess is an overrun.
    let s = g.settle("a", m("3")).unwrap();
    assert_eq!(s.charged, m("3"));
    assert_eq!(s.overrun, m("2"));
    let sum = g.summary(&ScopeKey::Tenant("acme".into())).unwrap();
    assert_eq!(sum.total, m("3"));
    assert_eq!(sum.overrun, m("2"));
    assert!(sum
        .closed
        .as_deref()
        .unwrap_or("")
        .contains("operation `a`"));
    // Closed: even a zero estimate is refused, and the reason says how to reopen it.
    let d = g.reserve(&req("b", "acme", "0")).unwrap_err();
    assert!(
        d.reason.contains("sandboxio budget --reopen"),
        "{}",
        d.reason
    );
    assert!(g.state.is_valid());
    // Another tenant is closed too only where it shares the scope (global).
    let d = g.reserve(&req("c", "other", "0")).unwrap_err();
    assert!(d.reason.contains("global"), "{}", d.reason);
    assert!(g.state.reopen(&ScopeKey::Global));
    assert!(g.state.reopen(&ScopeKey::Tenant("acme".into())));
    g.reserve(&req("d", "acme", "1")).unwrap();
}

#[test]
fn settle_within_reservation_has_no_overrun() {
    let mut g = guard();
    g.reserve(&req("a", "acme", "4")).unwrap();
    let s = g.settle("a", m("4")).unwrap();
    assert_eq!(s.charged, m("4"));
    assert!(s.overrun.is_zero());
    assert!(g
        .state
        .scope(&ScopeKey::Tenant("acme".into()))
        .closed
        .is_none());
}

#[test]
fn windowed_ceiling_applies_per_calendar_day() {
    use chrono::TimeZone;
    let cfg = BudgetConfig::from_toml(
        "[[ceiling]]\nscope = \"tenant\"\namount = \"1.00\"\nwindow = \"day\"\n",
    )
    .unwrap();
    let mut st = sandboxio_budget::BudgetState::new();
    let day1 = chrono::Utc.with_ymd_and_hms(2026, 12, 1, 23, 0, 0).unwrap();
    let day2 = chrono::Utc.with_ymd_and_hms(2026, 12, 2, 0, 30, 0).unwrap();
    let mut r = req("a", "acme", "0.60");
    r.at = Some(day1);
    st.reserve(&cfg, &r).unwrap();
    st.settle(&cfg, "a", m("0.60")).unwrap();
    let mut r = req("b", "acme", "0.60");
    r.at = Some(day1);
    let d = st.reserve(&cfg, &r).unwrap_err();
    assert!(d.reason.contains("day:2026-12-01"), "{}", d.reason);
    // The next day starts from zero.
    let mut r = req("c", "acme", "0.60");
    r.at = Some(day2);
    st.reserve(&cfg, &r).unwrap();
    // Another tenant has its own day.
    let mut r = req("d", "beta", "0.90");
    r.at = Some(day1);
    st.reserve(&cfg, &r).unwrap();
}

#[test]
fn rolling_ceiling_counts_the_last_window_and_frees_as_charges_age_out() {
    use chrono::TimeZone;
    let cfg = BudgetConfig::from_toml(
        "[[ceiling]]\nscope = \"tenant\"\namount = \"1.00\"\nwindow = \"rolling:1h\"\n",
    )
    .unwrap();
    let key: ScopeKey = "tenant:acme@rolling:3600s".parse().unwrap();
    let mut st = sandboxio_budget::BudgetState::new();
    let t0 = chrono::Utc
        .with_ymd_and_hms(2026, 12, 1, 23, 30, 0)
        .unwrap();
    let at = |mins: i64| t0 + chrono::Duration::minutes(mins);
    let spend = |st: &mut sandboxio_budget::BudgetState, id: &str, when, amount: &str| {
        let mut r = req(id, "acme", amount);
        r.at = Some(when);
        st.reserve(&cfg, &r)?;
        st.settle(&cfg, id, m(amount)).unwrap();
        Ok::<_, sandboxio_budget::BudgetDenial>(())
    };
    spend(&mut st, "a", at(0), "0.60").unwrap();
    spend(&mut st, "b", at(40), "0.30").unwrap();
    // Across midnight nothing resets: 0.90 of the last hour is spent.
    let mut r = req("c", "acme", "0.20");
    r.at = Some(at(50));
    let d = st.reserve(&cfg, &r).unwrap_err();
    assert!(d.reason.contains("rolling:3600s"), "{}", d.reason);
    assert_eq!(st.summary_at(&cfg, &key, at(50)).unwrap().total, m("0.90"));
    // A minute after the first charge's bucket left the hour, only the second counts.
    assert_eq!(st.summary_at(&cfg, &key, at(62)).unwrap().total, m("0.30"));
    spend(&mut st, "c", at(62), "0.60").unwrap();
    assert_eq!(
        st.summary_at(&cfg, &key, at(62)).unwrap().remaining,
        Some(m("0.10"))
    );
    // Within the window the ceiling holds: 0.90 in the last hour again.
    let mut r = req("d", "acme", "0.20");
    r.at = Some(at(99));
    assert!(st.reserve(&cfg, &r).is_err());
    // Never counted less than the true spend: just before 60 minutes have passed since
    // `b`, it still counts.
    assert_eq!(st.summary_at(&cfg, &key, at(99)).unwrap().total, m("0.90"));
    assert!(st.check_consistency().is_ok());
    // Bad windows are refused with the budget config code.
    for bad in ["rolling:10s", "rolling:forever", "hourly"] {
        let e = BudgetConfig::from_toml(&format!(
            "[[ceiling]]\nscope = \"tenant\"\namount = \"1\"\nwindow = \"{bad}\"\n"
        ))
        .unwrap_err();
        assert_eq!(e.code(), "SBX_E1301", "{bad}: {e}");
    }
}

#[test]
fn agent_and_category_ceilings() {
    let cfg = BudgetConfig::from_toml(
        "[[ceiling]]\nscope = \"agent\"\namount = \"1\"\n[[ceiling]]\nscope = \"category\"\nname = \"api\"\namount = \"2\"\n",
    )
    .unwrap();
    let mut st = sandboxio_budget::BudgetState::new();
    let mut r = req("a", "acme", "1");
    r.agent = Some("bot".into());
    st.reserve(&cfg, &r).unwrap();
    let mut r = req("b", "acme", "0.5");
    r.agent = Some("bot".into());
    assert!(st
        .reserve(&cfg, &r)
        .unwrap_err()
        .reason
        .contains("agent `bot`"));
    // Another agent of the same tenant has its own ceiling.
    r.agent = Some("other".into());
    st.reserve(&cfg, &r).unwrap();
    let mut r = req("c", "acme", "2.5");
    r.category = CostCategory::Api;
    assert!(st
        .reserve(&cfg, &r)
        .unwrap_err()
        .reason
        .contains("category `api`"));
    assert!(BudgetConfig::from_toml(
        "[[ceiling]]\nscope = \"category\"\nname = \"gpu\"\namount = \"2\"\n"
    )
    .is_err());
}

#[test]
fn settle_below_reservation_releases_the_rest() {
    let mut g = guard();
    g.reserve(&req("a", "acme", "4")).unwrap();
    let s = g.settle("a", m("1.25")).unwrap();
    assert_eq!(s.charged, m("1.25"));
    let sum = g.summary(&ScopeKey::Tenant("acme".into())).unwrap();
    assert!(sum.reserved.is_zero());
    assert_eq!(sum.remaining, Some(m("8.75")));
    assert_eq!(sum.by_category[&CostCategory::Compute], m("1.25"));
    assert_eq!(sum.by_category[&CostCategory::Api], Money::ZERO);
}

#[test]
fn warning_fires_once_per_crossing() {
    let mut g = guard();
    let mut fired = 0;
    for i in 0..9 {
        let id = format!("r{i}");
        g.reserve(&req(&id, "acme", "1")).unwrap();
        let s = g.settle(&id, m("1")).unwrap();
        fired += s
            .warnings
            .iter()
            .filter(|w| w.scope == ScopeKey::Tenant("acme".into()))
            .count();
        if i == 7 {
            // 8.00 of 10.00 crosses 0.8.
            assert_eq!(fired, 1);
            assert_eq!(
                s.warnings[0].to_string(),
                "tenant `acme` has spent 8 of its 10 ceiling (warning at 8)"
            );
        }
    }
    assert_eq!(fired, 1);
    assert!(g.summary(&ScopeKey::Tenant("acme".into())).unwrap().warned);
}

#[test]
fn unknown_and_double_settle_are_errors_and_change_nothing() {
    let mut g = guard();
    g.reserve(&req("a", "acme", "1")).unwrap();
    g.settle("a", m("1")).unwrap();
    let before = g.state.clone();
    assert_eq!(g.settle("a", m("1")).unwrap_err().code(), "SBX_E1303");
    assert_eq!(g.release("a").unwrap_err().code(), "SBX_E1303");
    g.reserve(&req("b", "acme", "1")).unwrap();
    assert_eq!(g.settle("b", m("-1")).unwrap_err().code(), "SBX_E1306");
    g.release("b").unwrap();
    assert_eq!(g.state, before);
}

#[test]
fn duplicate_and_negative_reservations_are_denied() {
    let mut g = guard();
    g.reserve(&req("a", "acme", "1")).unwrap();
    assert!(g
        .reserve(&req("a", "acme", "1"))
        .unwrap_err()
        .reason
        .contains("already exists"));
    assert!(g
        .reserve(&req("n", "acme", "-1"))
        .unwrap_err()
        .reason
        .contains("negative"));
}

#[test]
fn overflow_denies_instead_of_wrapping() {
    let mut g = BudgetGuard::new(BudgetConfig::default()).unwrap();
    let huge = Money::from_decimal(rust_decimal::Decimal::MAX);
    let mut r = req("a", "t", "1");
    r.estimate = Some(huge);
    g.reserve(&r).unwrap();
    let mut r2 = req("b", "t", "1");
    r2.estimate = Some(huge);
    let d = g.reserve(&r2).unwrap_err();
    assert!(d.reason.contains("overflowed"), "{}", d.reason);
    assert!(g.state.is_valid());
}

#[test]
fn state_round_trips_through_json() {
    let mut g = guard();
    let mut r = req("a", "acme", "1");
    r.session = Some("s".into());
    g.reserve(&r).unwrap();
    let json = serde_json::to_string(&g.state).unwrap();
    assert!(json.contains("\"tenant:acme\""), "{json}");
    let back: sandboxio_budget::BudgetState = serde_json::from_str(&json).unwrap();
    assert_eq!(back, g.state);
}

#[test]
fn rate_card_computes_compute_cost() {
    let card = RateCard {
        cpu_second: m("0.0001"),
        gib_second: m("0.00002"),
        per_call: m("0.001"),
    };
    let u = MeasuredUsage {
        cpu_time_ms: 2_500,
        peak_memory_bytes: 512 << 20,
        wall_time_ms: 4_000,
    };
    // 2.5 * 0.0001 + 0.5 GiB * 4 s * 0.00002 + 0.001 = 0.00025 + 0.00004 + 0.001
    assert_eq!(card.cost(&u).unwrap(), m("0.00129"));
    let max = MeasuredUsage {
        cpu_time_ms: u64::MAX,
        peak_memory_bytes: u64::MAX,
        wall_time_ms: u64::MAX,
    };
    let big = RateCard {
        cpu_second: Money::from_decimal(rust_decimal::Decimal::MAX),
        ..card
    };
    assert_eq!(big.cost(&max).unwrap_err().code(), "SBX_E1305");
}

#[test]
fn ids_with_separators_are_their_own_scopes_and_read_back() {
    use chrono::TimeZone;
    // A tenant named like an e-mail address, one named like another tenant's day window,
    // a session and an agent with `/`: each key reads back as the scope it was written from.
    for k in [
        ScopeKey::Tenant("alice@example.com".into()),
        ScopeKey::Tenant("bob@day:2026-12-06".into()),
        ScopeKey::Session("job@2026".into()),
        ScopeKey::Agent {
            tenant: "a/b".into(),
            agent: "c".into(),
        },
        ScopeKey::Window {
            scope: Box::new(ScopeKey::Tenant("x@y".into())),
            window: "day:2026-12-06".into(),
        },
    ] {
        let text = k.to_string();
        assert_eq!(text.parse::<ScopeKey>().unwrap(), k, "{text}");
    }
    assert_ne!(
        ScopeKey::Agent {
            tenant: "a/b".into(),
            agent: "c".into()
        }
        .to_string(),
        ScopeKey::Agent {
            tenant: "a".into(),
            agent: "b/c".into()
        }
        .to_string()
    );
    // Any text after a `%` (a key from before escaping, an operator's typing) reads back
    // or is refused, never a panic.
    for odd in ["tenant:%€x", "tenant:50%€", "session:%", "agent:a%é/b%"] {
        let k: ScopeKey = odd.parse().unwrap();
        assert_eq!(k.to_string().parse::<ScopeKey>().unwrap(), k, "{odd}");
    }
    // A key written before ids were escaped still reads as its tenant.
    assert_eq!(
        "tenant:alice@example.com".parse::<ScopeKey>().unwrap(),
        ScopeKey::Tenant("alice@example.com".into())
    );
    // Tenant `bob@day:2026-12-06` spends in its own scope, never in bob's day window.
    let cfg = BudgetConfig::from_toml(
        "[[ceiling]]\nscope = \"tenant\"\namount = \"1.00\"\nwindow = \"day\"\n",
    )
    .unwrap();
    let mut st = sandboxio_budget::BudgetState::new();
    let day = chrono::Utc.with_ymd_and_hms(2026, 12, 6, 12, 0, 0).unwrap();
    let mut r = req("a", "bob@day:2026-12-06", "0.90");
    r.at = Some(day);
    st.reserve(&cfg, &r).unwrap();
    st.settle(&cfg, "a", m("0.90")).unwrap();
    let mut r = req("b", "bob", "0.90");
    r.at = Some(day);
    st.reserve(&cfg, &r).unwrap();
}
