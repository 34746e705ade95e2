//! `sandboxio status`: the kill switch, pending approvals, budgets with their windows and
//! rate-limit headroom, as text and as JSON.

use crate::common::*;
use crate::util::*;

#[test]
fn status_shows_kill_switch_budgets_and_rate_limit_headroom() {
    let env = Env::new("status", "process");
    let cfg = env.write_config(
        "limits.toml",
        "[budget]\nglobal = \"100\"\n\n[[rate_limits.limit]]\naction = \"exec\"\nlimit = \"3/minute\"\n",
    );
    let json = |env: &Env| -> serde_json::Value {
        let o = run(env.cmd("status", Some(&cfg)).arg("--json"));
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let v = json(&env);
    assert!(v["kill_switch"].is_null(), "{v}");
    assert_eq!(v["pending_approvals"].as_array().unwrap().len(), 0);
    let rl = &v["rate_limits"][0];
    assert_eq!(rl["action"], "exec");
    assert_eq!(rl["limit"], "3/minute");
    assert_eq!(rl["used"].as_array().unwrap().len(), 0, "{v}");
    let global = v["budgets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["scope"] == "global" || b["scope"]["global"].is_null() && b["ceiling"] == "100")
        .unwrap_or_else(|| panic!("no global budget: {v}"));
    assert_eq!(global["ceiling"], "100", "{v}");
    assert!(global["window"].is_string(), "{v}");

    let ok = run(env.run_cmd(Some(&cfg), &[], &["true"]));
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok.stderr));
    let k = run(env
        .cmd("kill", Some(&cfg))
        .args(["--reason", "status test"]));
    assert_eq!(k.status.code(), Some(0));

    let v = json(&env);
    assert_eq!(v["kill_switch"]["reason"], "status test", "{v}");
    let used = &v["rate_limits"][0]["used"][0];
    assert_eq!(used["tenant"], "default", "{v}");
    assert_eq!(used["count"], 1, "{v}");
    assert_eq!(used["remaining"], 2, "{v}");

    let o = run(env.cmd("status", Some(&cfg)));
    let out = text(&o.stdout);
    assert!(out.contains("kill switch: ENGAGED"), "{out}");
    assert!(out.contains("status test"), "{out}");
    assert!(out.contains("1 used, 2 left"), "{out}");
    assert!(out.contains("(window lifetime)"), "{out}");
}

/// Each ceiling is shown with its window: a tenant's daily ceiling as the scope of today,
/// with what the runs of today spent and what remains of it.
#[test]
fn status_shows_each_ceiling_with_its_window_spent_reserved_and_remaining() {
    let env = Env::new("status-window", "process");
    let cfg = env.write_config(
        "windows.toml",
        "[budget]\nper_tenant = \"50\"\n\n[[budget.ceiling]]\nscope = \"tenant\"\namount = \"2.00\"\nwindow = \"day\"\n\n[[budget.ceiling]]\nscope = \"tenant\"\namount = \"3.00\"\nwindow = \"rolling:1h\"\n\n[budget.rate_card]\nper_call = \"0.25\"\n",
    );
    let ok = run(env.run_cmd(Some(&cfg), &["--tenant", "acme"], &["true"]));
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok.stderr));
    let o = run(env
        .cmd("status", Some(&cfg))
        .args(["--json", "--tenant", "acme"]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let today = format!("day:{}", chrono::Utc::now().format("%Y-%m-%d"));
    let budgets = v["budgets"].as_array().unwrap();
    let daily = budgets
        .iter()
        .find(|b| b["window"] == today.as_str())
        .unwrap_or_else(|| panic!("no daily ceiling for today in {v}"));
    assert_eq!(daily["scope"], format!("tenant:acme@{today}"), "{v}");
    let money = |v: &serde_json::Value| {
        v.as_str()
            .unwrap()
            .parse::<sandboxio_core::Money>()
            .unwrap()
    };
    assert_eq!(money(&daily["ceiling"]), money(&"2.00".into()), "{v}");
    let spent: sandboxio_core::Money = daily["total"].as_str().unwrap().parse().unwrap();
    let remaining: sandboxio_core::Money = daily["remaining"].as_str().unwrap().parse().unwrap();
    assert!(
        spent >= "0.25".parse().unwrap(),
        "the run's charge is missing: {v}"
    );
    assert_eq!(
        remaining,
        "2.00"
            .parse::<sandboxio_core::Money>()
            .unwrap()
            .checked_sub(spent)
            .unwrap(),
        "{v}"
    );
    assert_eq!(
        money(&daily["reserved"]),
        sandboxio_core::Money::ZERO,
        "{v}"
    );
    let lifetime = budgets
        .iter()
        .find(|b| b["scope"] == "tenant:acme")
        .unwrap_or_else(|| panic!("no lifetime tenant scope in {v}"));
    assert_eq!(lifetime["window"], "lifetime");
    assert_eq!(money(&lifetime["ceiling"]), money(&"50".into()));
    // The rolling hour: one scope, the same run's charge in it.
    let hour = budgets
        .iter()
        .find(|b| b["window"] == "rolling:3600s")
        .unwrap_or_else(|| panic!("no rolling window in {v}"));
    assert_eq!(hour["scope"], "tenant:acme@rolling:3600s", "{v}");
    assert_eq!(money(&hour["total"]), spent, "{v}");
    assert_eq!(
        money(&hour["remaining"]),
        money(&"3.00".into()).checked_sub(spent).unwrap(),
        "{v}"
    );
    let o = run(env.cmd("status", Some(&cfg)).args(["--tenant", "acme"]));
    let out = text(&o.stdout);
    assert!(
        out.contains(&format!("tenant:acme (window {today})")),
        "{out}"
    );
}

/// A tenant named like an e-mail address, or like another tenant's day window, runs, is
/// charged in its own scope, and leaves a store every other tenant (and `resume`) can use.
#[test]
fn tenants_with_at_signs_are_charged_in_their_own_scopes() {
    let env = Env::new("status-at", "process");
    let cfg = env.write_config(
        "at.toml",
        "[budget]\nper_tenant = \"50\"\n\n[[budget.ceiling]]\nscope = \"tenant\"\namount = \"2.00\"\nwindow = \"day\"\n\n[budget.rate_card]\nper_call = \"0.25\"\n",
    );
    let day = chrono::Utc::now().format("%Y-%m-%d").to_string();
    for tenant in ["alice@example.com", &format!("bob@day:{day}")] {
        let o = run(env.run_cmd(Some(&cfg), &["--tenant", tenant], &["true"]));
        assert_eq!(o.status.code(), Some(0), "{tenant}: {}", text(&o.stderr));
    }
    let o = run(env.run_cmd(Some(&cfg), &["--tenant", "bob"], &["true"]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    for (tenant, want) in [("alice@example.com", "0.25"), ("bob", "0.25")] {
        let o = run(env
            .cmd("status", Some(&cfg))
            .args(["--json", "--tenant", tenant]));
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let budgets = v["budgets"].as_array().unwrap();
        let today = budgets
            .iter()
            .find(|b| b["window"].as_str().is_some_and(|w| w.starts_with("day:")))
            .unwrap_or_else(|| panic!("no day scope for {tenant} in {v}"));
        assert_eq!(today["total"], want, "{tenant}: {v}");
    }
    let k = run(env.cmd("kill", Some(&cfg)).args(["--reason", "t"]));
    assert_eq!(k.status.code(), Some(0), "{}", text(&k.stderr));
    let r = run(env.cmd("resume", Some(&cfg)));
    assert_eq!(r.status.code(), Some(0), "{}", text(&r.stderr));
}
