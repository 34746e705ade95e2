//! What raises verbosity (only `SBX_DEBUG` and `[telemetry] debug`), and when spans are
//! exported (only with an OTLP endpoint variable, never with `OTEL_SDK_DISABLED=true`).

use super::common::{log_lines, output, text, World};
use super::otlp::Receiver;

const CONFIG: &str = "[audit]\nlog_events = true\nfsync = \"never\"\n";

fn run_true(world: &World, env: &[(&str, &str)]) -> (i32, String) {
    let mut c = world.cmd("run");
    for (k, v) in env {
        c.env(k, v);
    }
    c.args(["--tier", "process", "--", "true"]);
    let o = output(c);
    (o.status.code().unwrap_or(-1), text(&o.stderr))
}

fn below_warn(stderr: &str) -> usize {
    log_lines(stderr)
        .iter()
        .filter(|l| l["level"] == "DEBUG" || l["level"] == "INFO" || l["level"] == "TRACE")
        .count()
}

#[test]
fn only_sbx_debug_or_the_config_raises_verbosity() {
    let world = World::new("levels", CONFIG);
    let (code, err) = run_true(&world, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(below_warn(&err), 0, "WARN by default:\n{err}");

    let (code, err) = run_true(&world, &[("RUST_LOG", "trace"), ("SBX_DEBUG", "0")]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(below_warn(&err), 0, "RUST_LOG is not consulted:\n{err}");

    let (code, err) = run_true(&world, &[("SBX_DEBUG", "1")]);
    assert_eq!(code, 0, "{err}");
    let lines = log_lines(&err);
    assert!(
        lines.iter().any(|l| l["level"] == "DEBUG"),
        "SBX_DEBUG=1:\n{err}"
    );
    // Every line is one JSON object with a timestamp, a level and a target.
    for l in &lines {
        assert!(l["timestamp"].is_string() && l["level"].is_string() && l["target"].is_string());
    }
    assert!(lines.iter().any(|l| l["span"]["operation_id"]
        .as_str()
        .is_some_and(|s| s.len() == 32)));

    let debug_world = World::new(
        "levels-config",
        &format!("{CONFIG}\n[telemetry]\ndebug = true\n"),
    );
    let (code, err) = run_true(&debug_world, &[]);
    assert_eq!(code, 0, "{err}");
    assert!(below_warn(&err) > 0, "[telemetry] debug = true:\n{err}");
}

#[test]
fn spans_are_exported_only_when_an_endpoint_is_set_and_the_sdk_is_enabled() {
    let world = World::new("export", CONFIG);
    let receiver = Receiver::start();

    // Disabled: an endpoint is set, but OTEL_SDK_DISABLED wins.
    let (code, err) = run_true(
        &world,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.addr.as_str()),
            ("OTEL_SDK_DISABLED", "true"),
        ],
    );
    assert_eq!(code, 0, "{err}");
    // No endpoint at all: zero-config, no provider, nothing sent.
    let (code, err) = run_true(&world, &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        receiver.received().is_empty(),
        "nothing may be exported without an endpoint or with the SDK disabled"
    );

    // The traces endpoint only (a full URL): spans arrive, metrics do not; the service
    // name comes from OTEL_SERVICE_NAME.
    let traces = format!("{}/v1/traces", receiver.addr);
    let (code, err) = run_true(
        &world,
        &[
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", traces.as_str()),
            ("OTEL_SERVICE_NAME", "sbx-under-test"),
        ],
    );
    assert_eq!(code, 0, "{err}");
    let spans = receiver.spans();
    assert_eq!(spans.len(), 1, "{spans:?}");
    assert_eq!(spans[0].name, "execute_tool exec");
    assert!(
        spans[0].parent_span_id.is_empty(),
        "no traceparent: a root span"
    );
    assert_eq!(receiver.service_names(), vec!["sbx-under-test".to_string()]);
    assert!(receiver.metric_names().is_empty());
}
