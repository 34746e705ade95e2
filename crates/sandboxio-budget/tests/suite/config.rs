use std::time::Duration;

use sandboxio_budget::{BudgetConfig, LatencyClass, RateLimitsConfig};
use sandboxio_core::ErrorCode;

#[test]
fn budget_section_parses_with_human_units() {
    let cfg = BudgetConfig::from_toml(
        r#"
currency = "EUR"
global = "1000"
per_tenant = "50.00"
per_session = "5"
warn_fraction = 0.9
default_estimate = "0.01"
[tenants]
acme = "200"
[rate_card]
cpu_second = "0.00005"
gib_second = "0.00001"
[latency.interactive]
p50 = "50ms"
p95 = "200ms"
p99 = "400ms"
"#,
    )
    .unwrap();
    assert_eq!(
        cfg.latency.targets(LatencyClass::Interactive).p99.0,
        Duration::from_millis(400)
    );
    assert_eq!(
        cfg.latency.targets(LatencyClass::Planning).p99.0,
        Duration::from_secs(10)
    );
    assert_eq!(cfg.warn_fraction_decimal().to_string(), "0.9");
}

#[test]
fn bad_budget_values_are_rejected() {
    for (text, code) in [
        ("global = \"ten\"", "SBX_E1301"),
        ("warn_fraction = 1.5", "SBX_E1301"),
        ("warn_fraction = 0", "SBX_E1301"),
        ("per_tenant = \"-1\"", "SBX_E1301"),
        ("currency = \"dollars\"", "SBX_E1301"),
        ("ceiling = \"1\"", "SBX_E1301"),
        ("[rate_card]\ncpu_second = \"-0.1\"", "SBX_E1301"),
        (
            "[latency.execution]\np50 = \"10m\"\np95 = \"5m\"\np99 = \"30m\"",
            "SBX_E1308",
        ),
        (
            "[latency.planning]\np50 = \"0s\"\np95 = \"5s\"\np99 = \"10s\"",
            "SBX_E1308",
        ),
    ] {
        let e = BudgetConfig::from_toml(text).unwrap_err();
        assert_eq!(e.code(), code, "{text}: {e}");
    }
}

#[test]
fn rate_limits_section_parses() {
    let cfg: RateLimitsConfig = toml::from_str(
        r#"
[[limit]]
action = "exec"
limit = "50/hour"
[[limit]]
action = "*"
limit = "1000/day"
tenant = "acme"
"#,
    )
    .unwrap();
    cfg.validate().unwrap();
    assert_eq!(cfg.matching("acme", None, "exec").len(), 2);
    assert_eq!(cfg.matching("other", Some("a"), "exec").len(), 1);
    assert_eq!(cfg.matching("other", None, "file_read").len(), 0);
    assert!(toml::from_str::<RateLimitsConfig>(
        "[[limit]]\naction = \"x\"\nlimit = \"5/fortnight\""
    )
    .is_err());
    assert!(toml::from_str::<RateLimitsConfig>(
        "[[limit]]\naction = \"x\"\nlimit = \"5/s\"\nburst = 3"
    )
    .is_err());
}
