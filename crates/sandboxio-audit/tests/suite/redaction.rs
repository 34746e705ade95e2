//! Redaction: the canary never reaches any sink; encoded forms and credential shapes.

use std::sync::Arc;

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use opentelemetry::Value;
use proptest::prelude::*;
use sandboxio_audit::sink::FileSinkOptions;
use sandboxio_audit::{
    AuditConfig, AuditKey, AuditSink, Auditor, FileSink, FsyncPolicy, LoggingSink, QueueSink,
    Redactor, Secret,
};
use sandboxio_core::{Enforcement, RuleRef};

use super::common::{capture_logs, exec_record, span_exporter, CollectSink};

const CANARY: &str = "CANARY-7f9a2b-s3cr3t";
/// A secret with characters that JSON- and percent-encoding change.
const CANARY2: &str = "pa\"ss\\wo rd/ü&=canary2";
const ENV_OPENAI: &str = "sk-proj-Zk3xQ9mW2vLp8RtY6nB4cJ1hG5fD7sA0";
const ENV_TOKEN: &str = "q8Z!r2@Lx9#Vt4$Wm7%Kp1";
const MARKED: &str = "internal-codename-orchid";

fn redactor() -> Redactor {
    Redactor::builder()
        .secret(&Secret::new(CANARY))
        .secret(&Secret::new(CANARY2))
        .sensitive(MARKED)
        .env([
            ("OPENAI_API_KEY", ENV_OPENAI),
            ("DEPLOY_TOKEN", ENV_TOKEN),
            ("PATH", "/usr/bin:/bin"),
            ("LANG", "C.UTF-8"),
        ])
        .build()
        .unwrap()
}

fn percent(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn json_inner(s: &str) -> String {
    let j = serde_json::to_string(s).unwrap();
    j[1..j.len() - 1].to_string()
}

/// Every string that must never appear in any output.
fn forbidden() -> Vec<String> {
    let mut v = vec![
        CANARY.to_string(),
        CANARY2.to_string(),
        ENV_OPENAI.to_string(),
        ENV_TOKEN.to_string(),
        MARKED.to_string(),
        STANDARD.encode(CANARY),
        URL_SAFE_NO_PAD.encode(CANARY),
        STANDARD.encode(CANARY2),
        percent(CANARY2),
        json_inner(CANARY2),
        json_inner(&json_inner(CANARY2)),
    ];
    // Without the last (partial) base64 character, as it appears inside a longer blob.
    let b = STANDARD.encode(CANARY);
    v.push(b[..b.len() - 4].to_string());
    v
}

fn poisoned_record(id: &str) -> sandboxio_core::OperationRecord {
    let mut r = exec_record(id);
    r.argv = Some(vec![
        "curl".into(),
        format!("--header=Authorization: Bearer {CANARY}"),
        format!("https://x.test/?k={}", percent(CANARY2)),
        ENV_OPENAI.into(),
    ]);
    r.code = Some(format!(
        "import os\nkey = '{CANARY}'\nblob = '{}'\ncfg = \"{{\\\"p\\\": \\\"{}\\\"}}\"\nTOKEN={ENV_TOKEN}\n",
        STANDARD.encode(format!("xx{CANARY}yy")),
        json_inner(CANARY2)
    ));
    r.reason = format!("policy denied: argument `{CANARY}` matched; {MARKED}");
    r.path = Some(format!("/tmp/{CANARY}/{}", URL_SAFE_NO_PAD.encode(CANARY)));
    r.labels.insert("note".into(), format!("v={CANARY2}"));
    r.labels.insert(format!("k-{CANARY}"), "x".into());
    r.rules.push(RuleRef {
        id: format!("deny-{CANARY}"),
        file: Some(format!("/etc/{MARKED}.toml")),
        line: Some(3),
    });
    r.error_code = Some(format!("E {ENV_TOKEN}"));
    r.enforcement = Some(Enforcement {
        gaps: vec![format!("no landlock for {CANARY}")],
        ..Enforcement::default()
    });
    r.approver = Some(format!("alice {ENV_OPENAI}"));
    r
}

fn assert_clean(what: &str, text: &str) {
    for f in forbidden() {
        assert!(
            !text.contains(&f),
            "{what} contains forbidden `{f}`:\n{text}"
        );
    }
}

fn value_text(v: &Value) -> String {
    v.to_string()
}

#[tokio::test]
async fn canary_never_reaches_any_sink() {
    let exporter = span_exporter();
    let dir = tempfile::tempdir().unwrap();
    let key = Arc::new(AuditKey::generate());
    let file = Arc::new(
        FileSink::open(
            FileSinkOptions::new(dir.path().join("audit.jsonl")).fsync(FsyncPolicy::Never),
            key,
        )
        .unwrap(),
    );
    let collected = Arc::new(CollectSink::default());
    let queue = Arc::new(QueueSink::new(collected.clone(), 16));
    let cfg = AuditConfig::default()
        .with_sinks(vec![file.clone(), Arc::new(LoggingSink), queue.clone()])
        .capture_code(true);
    let auditor = Auditor::new(cfg, Arc::new(redactor()));
    let (logs, _guard) = capture_logs();

    let out = auditor.record(poisoned_record("op-canary")).await.unwrap();
    assert!(out.failures.is_empty());
    assert!(out.redactions >= 10, "redactions: {}", out.redactions);
    assert!(
        out.event.code.is_some(),
        "capture_code keeps the (redacted) code"
    );
    queue.drain_available().await;
    file.close().await.unwrap();

    let file_text = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap();
    assert!(file_text.contains("[REDACTED:"));
    assert_clean("file sink", &file_text);
    let log_text = logs.text();
    assert!(
        log_text.contains("op-canary"),
        "logging sink wrote the event"
    );
    assert_clean("logging sink", &log_text);
    let q = collected.all().join("\n");
    assert_eq!(collected.all().len(), 1);
    assert_clean("queue sink", &q);
    assert_clean("Debug of event", &format!("{:?}", out.event));
    assert_clean("Debug of redactor", &format!("{:?}", auditor.redactor()));

    let spans = exporter.get_finished_spans().unwrap();
    let span = spans
        .iter()
        .find(|s| {
            s.attributes.iter().any(|kv| {
                kv.key.as_str() == "gen_ai.tool.call.id" && value_text(&kv.value) == "op-canary"
            })
        })
        .expect("span exported");
    let mut span_text = format!("{} {:?}", span.name, span.status);
    for kv in &span.attributes {
        span_text.push_str(&format!("\n{}={}", kv.key, value_text(&kv.value)));
    }
    assert!(
        span_text.contains("sandboxio.code"),
        "code captured on the span"
    );
    assert_clean("exported span", &span_text);
}

#[test]
fn equal_values_get_equal_placeholders_and_encoded_forms_share_them() {
    let r = redactor();
    let a = r.redact_str(&format!("x {CANARY} y {CANARY}")).into_owned();
    let ph = r.placeholder_for(CANARY);
    assert_eq!(a, format!("x {ph} y {ph}"));
    let b = r
        .redact_str(&format!("b64={}", STANDARD.encode(CANARY)))
        .into_owned();
    assert_eq!(b, format!("b64={ph}"));
    // A different instance has a different key: placeholders do not correlate across.
    let other = redactor();
    assert_ne!(other.placeholder_for(CANARY), ph);
}

#[test]
fn nothing_to_redact_borrows() {
    let r = redactor();
    assert!(matches!(
        r.redact_str("plain text, nothing secret"),
        std::borrow::Cow::Borrowed(_)
    ));
    assert_eq!(r.redactions_total(), 0);
}

#[test]
fn credential_shapes_are_redacted_anywhere() {
    let r = Redactor::builder().build().unwrap();
    let samples = [
        "AKIAIOSFODNN7EXAMPLE",
        "ghp_0123456789abcdefghijABCDEFGHIJ012345",
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
        "xoxb-123456789012-abcdefghijkl",
        "sk_live_0123456789abcdefABCDEF",
        "AIzaSyA1234567890abcdefghijklmnopqrstuv",
        "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
        "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBg\\n-----END PRIVATE KEY-----",
    ];
    for s in samples {
        let text = format!("before {s} after");
        let out = r.redact_str(&text);
        assert!(!out.contains(s), "{s} survived: {out}");
        assert!(
            out.starts_with("before ") && out.ends_with(" after"),
            "{out}"
        );
    }
}

#[test]
fn key_like_assignments_with_high_entropy_values_are_redacted() {
    let r = Redactor::builder().build().unwrap();
    let out = r.redact_str("export API_KEY=Zq8x!Lr2@Vt9#Wm4 && echo ok; PASSWORD_HINT=short");
    assert!(!out.contains("Zq8x!Lr2@Vt9#Wm4"), "{out}");
    assert!(
        out.contains("PASSWORD_HINT=short"),
        "low-entropy values stay: {out}"
    );
}

#[test]
fn low_entropy_and_ordinary_env_values_are_not_secrets() {
    let r = Redactor::builder()
        .env([
            ("HOME", "/home/agent"),
            ("AUTH_MODE", "password"),
            ("TZ", "UTC"),
        ])
        .build()
        .unwrap();
    assert_eq!(
        r.redact_str("mode password in /home/agent"),
        "mode password in /home/agent"
    );
}

#[test]
fn too_short_secret_is_refused() {
    let e = Redactor::builder()
        .secret(&Secret::new("ab"))
        .build()
        .unwrap_err();
    assert_eq!(sandboxio_core::ErrorCode::code(&e), "SBX_E1607");
}

#[test]
fn secret_is_not_serialize() {
    // The compile-time assertion lives in `redact::not_serialize`; this shows the probe
    // distinguishes the two cases at run time too.
    use sandboxio_audit::redact::not_serialize::{Fallback as _, Probe};
    const { assert!(!Probe::<Secret>::IS_SERIALIZE) };
    const { assert!(Probe::<String>::IS_SERIALIZE) };
    assert_eq!(format!("{:?}", Secret::new(CANARY)), "[REDACTED]");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_secrets_in_random_text_never_survive(
        secret in "[A-Za-z0-9!@#$%^&*()_+=/-]{8,32}",
        prefix in "[ -~]{0,40}",
        suffix in "[ -~]{0,40}",
    ) {
        let r = Redactor::builder().secret(&Secret::new(secret.clone())).build().unwrap();
        let plain = format!("{prefix}{secret}{suffix}");
        let out = r.redact_str(&plain);
        prop_assert!(!out.contains(&secret), "plain: {out}");
        // JSON-escaped and percent-encoded forms.
        let j = json_inner(&plain);
        let out = r.redact_str(&j);
        prop_assert!(!out.contains(&json_inner(&secret)), "json: {out}");
        let p = percent(&plain);
        let out = r.redact_str(&p);
        prop_assert!(!out.contains(&percent(&secret)), "percent: {out}");
        // Inside a larger base64 blob, at whatever alignment the prefix gives: the
        // redacted blob no longer decodes to anything containing the secret.
        for blob in [STANDARD.encode(&plain), URL_SAFE_NO_PAD.encode(&plain)] {
            let out = r.redact_str(&blob);
            prop_assert!(out.contains("[REDACTED:"), "base64 blob not redacted: {blob}");
            for piece in out.split(['[', ']']) {
                for engine in [&STANDARD, &URL_SAFE_NO_PAD] {
                    if let Ok(bytes) = engine.decode(piece) {
                        prop_assert!(!String::from_utf8_lossy(&bytes).contains(&secret));
                    }
                }
            }
        }
    }
}
