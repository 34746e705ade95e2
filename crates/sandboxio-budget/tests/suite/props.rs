use proptest::prelude::*;
use sandboxio_budget::{
    BudgetConfig, BudgetGuard, RateLimit, ReserveRequest, ScopeKey, SlidingLog,
};
use sandboxio_core::{CostCategory, Money};

#[derive(Debug, Clone)]
enum Step {
    Reserve {
        tenant: u8,
        session: Option<u8>,
        cents: i64,
        cat: u8,
    },
    Settle {
        pick: usize,
        cents: i64,
    },
    Release {
        pick: usize,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0u8..3, proptest::option::of(0u8..3), 0i64..400, 0u8..4).prop_map(
            |(tenant, session, cents, cat)| Step::Reserve {
                tenant,
                session,
                cents,
                cat
            }
        ),
        (any::<usize>(), 0i64..800).prop_map(|(pick, cents)| Step::Settle { pick, cents }),
        any::<usize>().prop_map(|pick| Step::Release { pick }),
    ]
}

fn cents(c: i64) -> Money {
    Money::from_minor(c, 2).unwrap()
}

fn config() -> BudgetConfig {
    let mut cfg = BudgetConfig {
        global: Some(cents(3_000)),
        per_tenant: Some(cents(1_500)),
        per_session: Some(cents(600)),
        ..Default::default()
    };
    cfg.tenants.insert("t0".into(), cents(800));
    cfg
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Random reserve/settle/release sequences: settled spend never exceeds any ceiling,
    /// the ledger stays consistent, denials are justified, and closing every reservation
    /// leaves nothing reserved.
    #[test]
    fn ledger_never_overspends_or_leaks(steps in proptest::collection::vec(step(), 1..120)) {
        let mut g = BudgetGuard::new(config()).unwrap();
        let mut open: Vec<String> = Vec::new();
        let mut next = 0u32;
        let mut warned: std::collections::BTreeMap<ScopeKey, usize> = Default::default();
        for s in steps {
            match s {
                Step::Reserve { tenant, session, cents: c, cat } => {
                    next += 1;
                    let req = ReserveRequest {
                        id: format!("r{next}"),
                        tenant: format!("t{tenant}"),
                        session: session.map(|s| format!("t{tenant}-s{s}")),
                        category: CostCategory::ALL[cat as usize],
                        estimate: Some(cents(c)),
                        agent: None,
                        at: None,
                    };
                    let before = g.state.clone();
                    match g.reserve(&req) {
                        Ok(_) => open.push(req.id.clone()),
                        Err(d) => {
                            // Justified: some scope lacked unreserved budget for it.
                            prop_assert_eq!(&g.state, &before);
                            let justified = req.scopes().iter().any(|k| {
                                let st = before.scope(k);
                                if st.closed.is_some() {
                                    return true;
                                }
                                let committed = st.spent_total().unwrap().checked_add(st.reserved).unwrap().checked_add(cents(c)).unwrap();
                                g.config.ceiling(k).map(|cap| committed > cap).unwrap_or(false)
                            });
                            prop_assert!(justified, "unjustified denial: {}", d.reason);
                        }
                    }
                }
                Step::Settle { pick, cents: c } if !open.is_empty() => {
                    let id = open.remove(pick % open.len());
                    let s = g.settle(&id, cents(c)).unwrap();
                    prop_assert_eq!(s.charged, cents(c));
                    prop_assert_eq!(
                        s.overrun,
                        cents(c).checked_sub(s.reserved).unwrap().clamp_non_negative()
                    );
                    for w in s.warnings {
                        *warned.entry(w.scope).or_default() += 1;
                    }
                }
                Step::Release { pick } if !open.is_empty() => {
                    let id = open.remove(pick % open.len());
                    g.release(&id).unwrap();
                }
                _ => {}
            }
            prop_assert!(g.state.is_valid(), "{:?}", g.state.check_consistency());
            for (k, st) in &g.state.scopes {
                if let Some(cap) = g.config.ceiling(k) {
                    let committed = st.spent_total().unwrap().checked_add(st.reserved).unwrap();
                    // Past the ceiling only by what was charged past reservations.
                    let bound = cap.checked_add(st.overrun).unwrap();
                    prop_assert!(committed <= bound, "{k}: {committed} > {bound}");
                }
            }
        }
        // Spend only grows here, so each scope warns at most once.
        for (k, n) in warned {
            prop_assert!(n <= 1, "{k} warned {n} times");
        }
        for id in open {
            g.release(&id).unwrap();
        }
        for st in g.state.scopes.values() {
            prop_assert!(st.reserved.is_zero());
        }
        prop_assert!(g.state.reservations.is_empty());
    }

    /// No window of the limit's length ever holds more than `count` allowed events, and
    /// every denial happened with `count` allowed events in the window.
    #[test]
    fn rate_limiter_never_allows_more_than_n_per_window(
        count in 1u32..8,
        window in 1u64..5_000,
        mut times in proptest::collection::vec(0u64..20_000, 1..200),
    ) {
        times.sort_unstable();
        let limit = RateLimit::new(count, window).unwrap();
        let mut log = SlidingLog::new();
        let mut allowed: Vec<u64> = Vec::new();
        for t in times {
            let in_window = allowed.iter().filter(|a| **a + window > t).count();
            let d = log.check(&limit, t);
            if d.is_allow() {
                prop_assert!(in_window < count as usize);
                allowed.push(t);
            } else {
                prop_assert_eq!(in_window, count as usize);
            }
            prop_assert!(log.is_valid(&limit));
        }
        for (i, a) in allowed.iter().enumerate() {
            let n = allowed[i..].iter().filter(|b| **b < a + window).count();
            prop_assert!(n <= count as usize, "{n} events in [{a}, {})", a + window);
        }
    }

    #[test]
    fn rate_limit_parser_never_panics(s in ".{0,24}") {
        let _ = s.parse::<RateLimit>();
    }
}
