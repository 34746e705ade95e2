//! Issue 5, "what it must show", first and fourth bullets, against the real binary: a canary
//! secret placed in env, argv, code, stdin, stdout, stderr, a written file, a policy reason
//! and an error path never appears in the audit file, the log output (SBX_DEBUG=1, with the
//! logging sink on), the spans and metrics exported to a real OTLP/HTTP receiver, or the
//! CLI's human and JSON output; and the exported spans carry the GenAI semconv names and
//! nest under the caller's `invoke_agent` span given with `--traceparent`.

use std::collections::BTreeMap;
use std::process::Output;

use super::common::{hex, log_lines, output, text, World};
use super::otlp::{attr, Receiver};

/// Everything the runs printed, by run name.
struct Runs {
    out: BTreeMap<&'static str, Output>,
}

impl Runs {
    fn all_output(&self) -> Vec<(String, String)> {
        let mut v = Vec::new();
        for (name, o) in &self.out {
            v.push((format!("{name} stdout"), text(&o.stdout)));
            v.push((format!("{name} stderr"), text(&o.stderr)));
        }
        v
    }
}

fn assert_absent(what: &str, haystack: &[u8], canary: &str) {
    let s = String::from_utf8_lossy(haystack);
    assert!(
        !haystack
            .windows(canary.len())
            .any(|w| w == canary.as_bytes()),
        "the canary reached {what}:\n{}",
        s.chars().take(4000).collect::<String>()
    );
}

#[test]
fn a_canary_secret_reaches_no_sink_and_spans_nest_under_invoke_agent() {
    // Config: the logging sink on (every event also goes to the log output), code captured
    // (so the redacted code reaches the audit event and the span).
    let world = World::new(
        "canary",
        "[audit]\nlog_events = true\ncapture_code = true\nfsync = \"never\"\n",
    );
    let canary = format!("cnry{}", hex(24));
    let receiver = Receiver::start();
    let trace_id = hex(32);
    let parent_span_id = hex(16);
    let traceparent = format!("00-{trace_id}-{parent_span_id}-01");

    let stdin_file = world.path().join("stdin.txt");
    std::fs::write(&stdin_file, format!("stdin:{canary}\n")).unwrap();
    let out_dir = world.path().join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let code_file = world.path().join("main.sh");
    std::fs::write(
        &code_file,
        format!("echo \"code:{canary}\"\necho \"code-err:$SBX_CANARY\" >&2\n"),
    )
    .unwrap();

    let secret = format!("SBX_CANARY={canary}");
    let plain_env = format!("ALSO={canary}");
    // The program prints the secret from its env (stdout and stderr), echoes its stdin, and
    // writes a file named after the canary (from argv) into the output directory.
    let script = "echo \"out:$SBX_CANARY $ALSO\"; echo \"err:$SBX_CANARY\" >&2; cat; \
                  printf '%s' \"$1\" > \"$SANDBOX_OUTPUT/file-$1.txt\"";
    let run = |json: bool| {
        let mut c = world.cmd("run");
        c.env("SBX_DEBUG", "1")
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.addr)
            .args([
                "--tier",
                "process",
                "--secret-env",
                &secret,
                "--env",
                &plain_env,
            ])
            .arg("--stdin-file")
            .arg(&stdin_file)
            .arg("--output")
            .arg(&out_dir)
            .args(["--traceparent", &traceparent]);
        if json {
            c.arg("--json");
        }
        c.args(["--", "sh", "-c", script, "sh", &canary]);
        output(c)
    };
    let mut runs = Runs {
        out: BTreeMap::new(),
    };
    runs.out.insert("exec (human)", run(false));
    runs.out.insert("exec (json)", run(true));

    // run-code: the canary is in the code itself.
    let mut c = world.cmd("run-code");
    c.env("SBX_DEBUG", "1")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.addr)
        .args(["--tier", "process", "--secret-env", &secret])
        .args(["--traceparent", &traceparent, "--lang", "bash"])
        .arg(&code_file);
    runs.out.insert("run-code", output(c));

    // A policy denial whose reason quotes the command (the namespace tier is not allowed).
    let denied_cmd = format!("/opt/{canary}/tool");
    let mut c = world.cmd("run");
    c.env("SBX_DEBUG", "1")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.addr)
        .args(["--tier", "namespace", "--secret-env", &secret])
        .args(["--traceparent", &traceparent, "--", &denied_cmd, &canary]);
    runs.out.insert("denied", output(c));

    // An error path: the command does not exist, and its name is the canary.
    let missing = format!("/nonexistent/{canary}");
    let mut c = world.cmd("run");
    c.env("SBX_DEBUG", "1")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.addr)
        .args(["--tier", "process", "--secret-env", &secret, "--json"])
        .args(["--traceparent", &traceparent, "--", &missing]);
    runs.out.insert("error", output(c));

    // ---- the runs did what they should (so an absence below means redaction) ----
    for name in ["exec (human)", "exec (json)", "run-code"] {
        let o = &runs.out[name];
        assert_eq!(
            o.status.code(),
            Some(0),
            "{name}: {}\n{}",
            text(&o.stdout),
            text(&o.stderr)
        );
    }
    let human = &runs.out["exec (human)"];
    assert!(
        text(&human.stdout).contains("out:[REDACTED"),
        "stdout should carry the redacted secret: {}",
        text(&human.stdout)
    );
    assert!(text(&human.stdout).contains("stdin:[REDACTED"));
    assert!(text(&human.stderr).contains("err:[REDACTED"));
    assert!(
        out_dir.join(format!("file-{canary}.txt")).exists(),
        "the program wrote its file (the user's own output, named after the canary)"
    );
    let json: serde_json::Value =
        serde_json::from_str(text(&runs.out["exec (json)"].stdout).trim()).unwrap();
    assert!(json["stdout"].as_str().unwrap().contains("out:[REDACTED"));
    assert!(json["record"]["argv"][4]
        .as_str()
        .unwrap()
        .starts_with("[REDACTED"));
    assert!(text(&runs.out["run-code"].stdout).contains("code:[REDACTED"));
    let denied = &runs.out["denied"];
    assert_eq!(denied.status.code(), Some(120), "{}", text(&denied.stderr));
    assert!(
        text(&denied.stderr).contains("no policy rule allows `exec` of `/opt/[REDACTED"),
        "the denial reason quotes the (redacted) command: {}",
        text(&denied.stderr)
    );
    let error = &runs.out["error"];
    assert_eq!(error.status.code(), Some(125), "{}", text(&error.stderr));
    let err_json: serde_json::Value = serde_json::from_str(text(&error.stdout).trim()).unwrap();
    assert_eq!(err_json["record"]["status"], "error");
    assert!(err_json["record"]["reason"]
        .as_str()
        .unwrap()
        .contains("/nonexistent/[REDACTED"));

    // ---- CLI output ----
    for (what, s) in runs.all_output() {
        assert_absent(&what, s.as_bytes(), &canary);
    }

    // ---- log output: JSON lines, DEBUG raised by SBX_DEBUG, operation and trace ids ----
    let mut logs = Vec::new();
    for (name, o) in &runs.out {
        let lines = log_lines(&text(&o.stderr));
        assert!(!lines.is_empty(), "{name}: no JSON log lines on stderr");
        logs.extend(lines);
    }
    assert!(
        logs.iter().any(|l| l["level"] == "DEBUG"),
        "SBX_DEBUG=1 raises the level to DEBUG"
    );
    let events: Vec<&serde_json::Value> = logs
        .iter()
        .filter(|l| l["target"] == "sandboxio::audit" && l["level"] == "INFO")
        .collect();
    assert_eq!(events.len(), 5, "the logging sink logged one event per run");
    for l in &logs {
        if l["target"] == "sandboxio::audit" {
            assert!(
                l["span"]["operation_id"].is_string(),
                "an audit log line outside the operation span: {l}"
            );
            assert_eq!(l["span"]["trace_id"], trace_id.as_str(), "{l}");
        }
    }

    // ---- the audit file ----
    let mut audit = Vec::new();
    for f in sandboxio_audit::trail_files(&world.audit_file()).unwrap() {
        audit.extend(std::fs::read(f).unwrap());
    }
    assert_absent("the audit file", &audit, &canary);
    let audit_text = text(&audit);
    let records: Vec<serde_json::Value> = audit_text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v.get("operation_id").is_some())
        .collect();
    assert_eq!(records.len(), 5, "one record per run:\n{audit_text}");
    assert!(records.iter().any(|r| r["code"]
        .as_str()
        .is_some_and(|c| c.contains("code:[REDACTED"))));
    assert!(records.iter().any(|r| r["decision"] == "deny"
        && r["reason"]
            .as_str()
            .unwrap()
            .contains("no policy rule allows")));
    // The CLI's own readers print nothing secret either.
    let mut q = world.cmd_words(&["audit", "query"]);
    q.arg("--json");
    let q = output(q);
    assert!(q.status.success(), "{}", text(&q.stderr));
    assert_absent("`audit query --json`", &q.stdout, &canary);
    assert!(text(&q.stdout).contains("[REDACTED"));

    // ---- exported spans and metrics (the binary flushed them before exiting) ----
    let received = receiver.received();
    for r in &received {
        assert_absent(&format!("an OTLP request to {}", r.path), &r.body, &canary);
    }
    let spans = receiver.spans();
    let tools: Vec<&opentelemetry_proto::tonic::trace::v1::Span> = spans
        .iter()
        .filter(|s| s.name.starts_with("execute_tool "))
        .collect();
    assert_eq!(
        tools.len(),
        5,
        "one execute_tool span per run: {:?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    let want_trace = hex_bytes(&trace_id);
    let want_parent = hex_bytes(&parent_span_id);
    for s in &tools {
        assert_eq!(
            s.trace_id, want_trace,
            "span {} is in the caller's trace",
            s.name
        );
        assert_eq!(
            s.parent_span_id, want_parent,
            "span {} nests under the invoke_agent span",
            s.name
        );
        assert_eq!(
            s.kind,
            opentelemetry_proto::tonic::trace::v1::span::SpanKind::Internal as i32
        );
        assert_eq!(
            attr(s, "gen_ai.operation.name").as_deref(),
            Some("execute_tool")
        );
        let tool = attr(s, "gen_ai.tool.name").unwrap();
        assert_eq!(s.name, format!("execute_tool {tool}"));
        assert!(attr(s, "gen_ai.tool.call.id").is_some());
    }
    assert_eq!(
        tools
            .iter()
            .filter(|s| attr(s, "gen_ai.tool.name").as_deref() == Some("run_code"))
            .count(),
        1
    );
    let failed: Vec<_> = tools
        .iter()
        .filter(|s| attr(s, "error.type").is_some())
        .collect();
    assert_eq!(failed.len(), 2, "the denial and the error carry error.type");
    assert!(tools
        .iter()
        .any(|s| attr(s, "sandboxio.code").is_some_and(|c| c.contains("code:[REDACTED"))));
    assert!(receiver.service_names().iter().all(|n| n == "sandboxio"));
    let metrics = receiver.metric_names();
    for m in ["sandboxio.operations", "sandboxio.denials"] {
        assert!(
            metrics.iter().any(|n| n == m),
            "metric {m} was exported: {metrics:?}"
        );
    }
}

fn hex_bytes(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}
