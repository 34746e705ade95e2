//! `sandboxio policy check|explain|replay`.

use std::path::PathBuf;

use anyhow::Result;
use chrono::Utc;
use sandboxio_core::{ErrorCode, Operation};
use sandboxio_gateway::layers::policy::{check_files, Context, PolicySet};

use crate::args::PolicyCmd;
use crate::error::CliError;
use crate::exit;
use crate::out::outln;

pub fn policy(cmd: PolicyCmd) -> Result<i32> {
    match cmd {
        PolicyCmd::Check { json, files } => check(json, &files),
        PolicyCmd::Explain { json, op, files } => explain(json, &op, &files),
        PolicyCmd::Replay { json, audit, files } => replay(json, &audit, &files),
    }
}

fn check(json: bool, files: &[PathBuf]) -> Result<i32> {
    let report = check_files(files);
    let errors: Vec<serde_json::Value> = report
        .errors
        .iter()
        .map(|e| serde_json::json!({ "code": e.code(), "message": with_causes(e) }))
        .collect();
    let warnings: Vec<String> = report.warnings.iter().map(|w| w.to_string()).collect();
    if json {
        let v = serde_json::json!({ "ok": report.is_ok(), "files": report.files, "rules": report.rules, "errors": errors, "warnings": warnings });
        outln!("{}", crate::out::pretty(&v)?)?;
    } else {
        for e in &report.errors {
            outln!("error[{}]: {}", e.code(), with_causes(e))?;
        }
        for w in &warnings {
            outln!("warning: {w}")?;
        }
        if report.is_ok() {
            outln!(
                "ok: {} rule(s) in {} file(s); every example and counterexample holds",
                report.rules,
                report.files.len()
            )?;
        }
    }
    Ok(if report.is_ok() {
        exit::OK
    } else {
        exit::USAGE
    })
}

/// An error's message followed by its causes (why a file could not be read).
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

fn read_op(arg: &str) -> Result<Operation, CliError> {
    let text = match arg.strip_prefix('@') {
        Some(path) => {
            let path = crate::paths::absolute(std::path::Path::new(path))?;
            let bytes =
                crate::files::read_regular("--op @FILE", &path, crate::files::MAX_OP_BYTES)?;
            String::from_utf8(bytes).map_err(|_| CliError::ReadInput {
                flag: "--op @FILE",
                path,
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "the operation is not valid UTF-8",
                ),
            })?
        }
        None => arg.to_string(),
    };
    serde_json::from_str(&text).map_err(|e| CliError::Operation { why: e.to_string() })
}

fn explain(json: bool, op: &str, files: &[PathBuf]) -> Result<i32> {
    let set = PolicySet::load_files(files)?;
    let op = read_op(op)?;
    let ex = set.explain(&op, &Context::new(Utc::now()));
    if json {
        outln!("{}", crate::out::pretty(&ex)?)?;
    } else {
        outln!("decision: {} ({})", ex.decision.verdict, ex.decision.reason)?;
        outln!("rules considered: {}", ex.considered)?;
        for m in &ex.matched {
            let mark = if m.decided { "*" } else { " " };
            outln!(" {mark} {:5} {}  {}", m.effect.as_str(), m.rule, m.reason)?;
        }
        if ex.matched.is_empty() {
            outln!("   no rule matched: denied by default")?;
        }
    }
    Ok(exit::OK)
}

fn replay(json: bool, audit: &[PathBuf], files: &[PathBuf]) -> Result<i32> {
    let set = PolicySet::load_files(files)?;
    let mut paths = Vec::new();
    for a in audit {
        paths.extend(sandboxio_gateway::layers::audit::trail_files(a)?);
    }
    let entries = sandboxio_gateway::layers::audit::read_events(&paths)?;
    let mut changes = Vec::new();
    let mut considered = 0usize;
    for e in &entries {
        let ev = &e.event;
        // Only operations the policy layer decided (or that passed it) can be re-decided.
        let Some(op) = operation_of(ev) else { continue };
        considered += 1;
        let now = ev.ts;
        let d = set.evaluate(&op, &Context::new(now));
        let was_stopped_by_policy = ev.layer == sandboxio_core::Layer::Policy;
        let before = if was_stopped_by_policy {
            ev.decision
        } else if ev.layer > sandboxio_core::Layer::Policy
            || ev.decision == sandboxio_core::Verdict::Allow
        {
            sandboxio_core::Verdict::Allow
        } else {
            continue;
        };
        if d.verdict != before {
            changes.push(serde_json::json!({
                "operation_id": ev.operation_id, "ts": ev.ts, "event": ev.event, "tenant": ev.tenant_id,
                "before": before, "after": d.verdict, "reason": d.reason, "rules": d.rules,
            }));
        }
    }
    if json {
        outln!(
            "{}",
            crate::out::pretty(
                &serde_json::json!({ "considered": considered, "changes": changes })
            )?
        )?;
    } else {
        for c in &changes {
            outln!(
                "{}  {}  {} -> {}  {}",
                c["ts"],
                c["operation_id"],
                c["before"],
                c["after"],
                c["reason"]
            )?;
        }
        outln!(
            "{} recorded operation(s) re-decided, {} would change",
            considered,
            changes.len()
        )?;
    }
    Ok(exit::OK)
}

/// Rebuilds the operation an audit event describes, as far as the event records it.
/// Code is only hashed in the trail, so run_code rules that look at code cannot be replayed.
fn operation_of(ev: &sandboxio_gateway::layers::audit::AuditEvent) -> Option<Operation> {
    use sandboxio_core::{Language, OperationArgs, Principal};
    let args = match ev.event.as_str() {
        "exec" => OperationArgs::Exec {
            argv: ev.argv.clone()?,
        },
        "run_code" => OperationArgs::RunCode {
            language: Language::Python,
            code: ev.code.clone().unwrap_or_default(),
        },
        "file_read" => OperationArgs::FileRead {
            path: ev.path.clone()?,
        },
        "file_write" => OperationArgs::FileWrite {
            path: ev.path.clone()?,
            size: ev.bytes_in,
            content_sha256: None,
        },
        "file_delete" => OperationArgs::FileDelete {
            path: ev.path.clone()?,
        },
        "tool_call" => OperationArgs::ToolCall {
            tool: ev.tool_name.clone(),
            arguments: serde_json::Value::Null,
        },
        _ => return None,
    };
    let principal = Principal {
        tenant: ev.tenant_id.clone()?,
        session: ev.session_id.clone(),
        agent: ev.agent_id.clone(),
    };
    let mut op = Operation::new(principal, args);
    op.tier = ev.isolation;
    Some(op)
}
