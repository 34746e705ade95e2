//! `/metrics` against the real server: the `metrics` scope only, the Prometheus text
//! format, operations counted once (as many as the audit trail holds), and no id, argv or
//! secret in any label.

use serde_json::{json, Value};

use crate::harness::{problem, Server};

/// The value of the series with exactly these labels (in any order), if present.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (n, rest) = series.split_once('{').unwrap_or((series, "}"));
            (n == name).then_some((rest.trim_end_matches('}'), value))
        })
        .find(|(ls, _)| {
            let have: Vec<&str> = if ls.is_empty() {
                Vec::new()
            } else {
                ls.split(',').collect()
            };
            have.len() == labels.len()
                && labels
                    .iter()
                    .all(|(k, v)| have.contains(&format!("{k}=\"{v}\"").as_str()))
        })
        .and_then(|(_, v)| v.parse().ok())
}

#[test]
fn metrics_need_the_metrics_scope() {
    let s = Server::start(&[]);
    let reader = s.key("acme", "read,exec");
    let scraper = s.key("ops", "metrics");
    let (st, p) = problem(s.client.get(s.url("/metrics")).send().unwrap());
    assert_eq!((st, p["code"].as_str().unwrap()), (401, "SBX_E1801"));
    let (st, p) = problem(s.get(&reader, "/metrics"));
    assert_eq!((st, p["code"].as_str().unwrap()), (403, "SBX_E1803"));
    assert!(s
        .audit()
        .iter()
        .any(|e| e["event"] == "http.forbidden"
            && e.to_string().contains("lacks the `metrics` scope")));
    let r = s.get(&scraper, "/metrics");
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let text = r.text().unwrap();
    assert!(
        text.contains("# TYPE sandboxio_operations_total counter"),
        "{text}"
    );
    assert!(
        text.contains("# TYPE sandboxio_operation_duration_milliseconds histogram"),
        "{text}"
    );
    assert_eq!(
        sample(&text, "sandboxio_kill_switch_engaged", &[]),
        Some(0.0)
    );
    // The metrics scope opens nothing else.
    let (st, _) = problem(s.get(&scraper, "/v1/audit"));
    assert_eq!(st, 403);
}

#[test]
fn operations_are_counted_once_with_low_cardinality_labels_only() {
    let canary = "sekret-canary-4417";
    let s = Server::start(&[]);
    let admin = s.key("acme", "all");
    let scraper = s.key("ops", "metrics");
    let id = s.sandbox(&admin);
    for _ in 0..2 {
        let r = s.post(
            &admin,
            &format!("/v1/sandboxes/{id}/exec"),
            &json!({"argv": ["sh", "-c", format!("echo {canary}")], "env": {"TOKEN": canary}}),
        );
        assert_eq!(r.status(), 200, "{}", r.text().unwrap());
    }
    let r = s.post(
        &admin,
        &format!("/v1/sandboxes/{id}/exec"),
        &json!({"argv": ["false"]}),
    );
    assert_eq!(r.status(), 200);
    // One denial, at the kill switch.
    assert_eq!(
        s.post(&admin, "/v1/kill", &json!({"reason": "metrics test"}))
            .status(),
        200
    );
    let r = s.post(
        &admin,
        &format!("/v1/sandboxes/{id}/exec"),
        &json!({"argv": ["true"]}),
    );
    assert_eq!(r.status(), 503);
    let text = s.get(&scraper, "/metrics").text().unwrap();
    let exec = |status: &str| {
        sample(
            &text,
            "sandboxio_operations_total",
            &[("sandboxio_event", "exec"), ("sandboxio_status", status)],
        )
    };
    assert_eq!(exec("ok"), Some(2.0), "{text}");
    assert_eq!(exec("failed"), Some(1.0), "{text}");
    assert_eq!(exec("denied"), Some(1.0), "{text}");
    // As many as the audit trail holds: each record counted once.
    let trail: Vec<Value> = s
        .audit()
        .into_iter()
        .filter(|e| e["event"] == "exec")
        .collect();
    assert_eq!(trail.len(), 4);
    assert_eq!(
        sample(
            &text,
            "sandboxio_operation_duration_milliseconds_count",
            &[("sandboxio_event", "exec"), ("sandboxio_status", "ok")]
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(
            &text,
            "sandboxio_denials_total",
            &[("sandboxio_layer", "kill_switch"), ("sandboxio_rule", "")]
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "sandboxio_kill_switch_engaged", &[]),
        Some(1.0)
    );
    assert_eq!(sample(&text, "sandboxio_sandboxes_active", &[]), Some(1.0));
    assert!(
        text.contains("sandboxio_budget_spent{sandboxio_budget_scope=\"tenant:acme\""),
        "{text}"
    );
    // No secret, id or argv anywhere in the exposition.
    let op_ids: Vec<String> = trail
        .iter()
        .filter_map(|e| e["operation_id"].as_str().map(str::to_string))
        .collect();
    assert!(!op_ids.is_empty());
    for needle in [canary, id.as_str(), "echo", "sh -c"]
        .into_iter()
        .chain(op_ids.iter().map(String::as_str))
    {
        assert!(!text.contains(needle), "`{needle}` leaked into /metrics");
    }
    assert_eq!(s.delete(&admin, "/v1/kill").status(), 200);
}
