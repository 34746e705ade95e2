use sandboxio_budget::{Clock, ManualClock, RateDecision, RateLimit, RateLimitsConfig, SlidingLog};
use sandboxio_core::ErrorCode;

#[test]
fn parses_human_rates() {
    for (s, n, w) in [
        ("50/hour", 50, 3_600_000),
        ("20/minute", 20, 60_000),
        ("5/second", 5, 1_000),
        ("1000/day", 1000, 86_400_000),
        (" 7 / h ", 7, 3_600_000),
        ("3/30s", 3, 30_000),
        ("2/1500ms", 2, 1_500),
        ("4/2m", 4, 120_000),
    ] {
        let r: RateLimit = s.parse().unwrap();
        assert_eq!((r.count(), r.window_ms()), (n, w), "{s}");
        assert!(r.is_valid());
    }
    for bad in [
        "",
        "50",
        "0/hour",
        "-1/hour",
        "5/fortnight",
        "1.5/s",
        "999999999999/s",
        "200000/s",
        "3/0s",
        "3/30x",
        "3/s30",
        "3/400d",
    ] {
        let e = bad.parse::<RateLimit>().unwrap_err();
        assert_eq!(e.code(), "SBX_E1302", "{bad}");
    }
    assert_eq!(
        "20/minute".parse::<RateLimit>().unwrap().to_string(),
        "20/minute"
    );
    // A window that is not one whole unit reads back as written.
    let odd: RateLimit = "3/1500ms".parse().unwrap();
    assert_eq!(odd.to_string().parse::<RateLimit>().unwrap(), odd);
}

#[test]
fn denies_over_the_limit_with_retry_after() {
    let clock = ManualClock::new(1_000_000);
    let limit: RateLimit = "3/minute".parse().unwrap();
    let mut log = SlidingLog::new();
    for _ in 0..3 {
        assert!(log.check(&limit, clock.now_ms()).is_allow());
        clock.advance(10_000);
    }
    // Events at +0, +10 s, +20 s; now +30 s: the first leaves at +60 s.
    assert_eq!(
        log.check(&limit, clock.now_ms()),
        RateDecision::Deny {
            retry_after_ms: 30_000
        }
    );
    clock.advance(29_999);
    assert!(!log.check(&limit, clock.now_ms()).is_allow());
    clock.advance(1);
    assert!(log.check(&limit, clock.now_ms()).is_allow());
    assert!(log.is_valid(&limit));
}

/// The gateway's admission in miniature: every matching limit must allow, and only then is
/// the event recorded in all of them.
struct Limiter {
    cfg: RateLimitsConfig,
    logs: std::collections::BTreeMap<String, SlidingLog>,
}

impl Limiter {
    fn new(cfg: RateLimitsConfig) -> Limiter {
        cfg.validate().unwrap();
        Limiter {
            cfg,
            logs: Default::default(),
        }
    }
    fn check(&mut self, tenant: &str, agent: Option<&str>, action: &str, now: u64) -> RateDecision {
        let m = self.cfg.matching(tenant, agent, action);
        for (k, l) in &m {
            let d = self
                .logs
                .get(k)
                .map(|g| g.decide(l, now))
                .unwrap_or(RateDecision::Allow);
            if !d.is_allow() {
                return d;
            }
        }
        for (k, l) in m {
            self.logs.entry(k).or_default().record(&l, now);
        }
        RateDecision::Allow
    }
}

#[test]
fn limiter_keys_by_tenant_agent_and_action() {
    let cfg: RateLimitsConfig =
        toml::from_str("[[limit]]\naction = \"exec\"\nlimit = \"2/second\"\n").unwrap();
    let mut rl = Limiter::new(cfg);
    assert!(rl.check("a", Some("x"), "exec", 0).is_allow());
    assert!(rl.check("a", Some("x"), "exec", 1).is_allow());
    let d = rl.check("a", Some("x"), "exec", 2);
    assert_eq!(
        d,
        RateDecision::Deny {
            retry_after_ms: 998
        }
    );
    let dec = d.to_decision("`exec`");
    assert_eq!(dec.retry_after_ms, Some(998));
    assert!(rl.check("a", Some("y"), "exec", 2).is_allow());
    assert!(rl.check("b", Some("x"), "exec", 2).is_allow());
    assert!(rl.check("a", Some("x"), "run_code", 2).is_allow());
}

#[test]
fn per_tenant_limit_is_shared_by_agents_and_kinds() {
    let cfg: RateLimitsConfig =
        toml::from_str("[[limit]]\naction = \"*\"\nlimit = \"2/minute\"\nper = \"tenant\"\n")
            .unwrap();
    let mut rl = Limiter::new(cfg);
    assert!(rl.check("t", Some("a1"), "exec", 0).is_allow());
    assert!(rl.check("t", Some("a2"), "run_code", 1).is_allow());
    // A third agent and a third kind do not get a fresh counter.
    assert!(!rl.check("t", Some("a3"), "tool_call", 2).is_allow());
    assert!(!rl.check("t", None, "exec", 3).is_allow());
    // Another tenant has its own.
    assert!(rl.check("u", Some("a1"), "exec", 4).is_allow());
}

#[test]
fn denied_events_do_not_consume_any_limit() {
    let cfg: RateLimitsConfig = toml::from_str(
        "[[limit]]\naction = \"exec\"\nlimit = \"1/second\"\n[[limit]]\naction = \"*\"\nlimit = \"10/minute\"\n",
    )
    .unwrap();
    let mut rl = Limiter::new(cfg);
    assert!(rl.check("t", None, "exec", 0).is_allow());
    for i in 1..100 {
        assert!(!rl.check("t", None, "exec", i).is_allow());
    }
    // The per-minute limit was only charged once.
    assert_eq!(rl.logs.get("1|t||exec").unwrap().len(), 1);
}

#[test]
fn clock_going_backwards_does_not_reopen_the_window() {
    let limit: RateLimit = "2/second".parse().unwrap();
    let mut log = SlidingLog::new();
    assert!(log.check(&limit, 5_000).is_allow());
    assert!(log.check(&limit, 5_500).is_allow());
    assert!(!log.check(&limit, 1_000).is_allow());
}

#[test]
fn names_with_separators_never_share_a_limit() {
    let cfg: RateLimitsConfig = toml::from_str(
        "[[limit]]\naction = \"*\"\nlimit = \"1/minute\"\n[[limit]]\naction = \"*\"\nlimit = \"1/minute\"\nper = \"tenant\"\n",
    )
    .unwrap();
    let mut rl = Limiter::new(cfg);
    // Tenant `a|b` with agent `c` and tenant `a` with agent `b|c` once made one key.
    assert!(rl.check("a|b", Some("c"), "exec", 0).is_allow());
    assert!(rl.check("a", Some("b|c"), "exec", 0).is_allow());
    // A tenant named `*` is not every tenant.
    assert!(rl.check("*", Some("x"), "exec", 0).is_allow());
    assert!(rl.check("t", Some("x"), "exec", 0).is_allow());
    assert!(!rl.check("t", Some("x"), "exec", 1).is_allow());
}
