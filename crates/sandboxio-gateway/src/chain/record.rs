//! The record of one operation: built from the request, filled from the result, redacted.

use std::time::Duration;

use sandboxio_core::fingerprint::sha256_hex;
use sandboxio_core::{
    ExecResult, ExitStatus, IsolationTier, Operation, OperationArgs, OperationRecord,
    OperationStatus,
};

/// `pid:start_time` of this process, so a reused pid is not mistaken for us.
pub fn process_owner() -> String {
    let pid = std::process::id();
    format!("{pid}:{}", start_time(pid).unwrap_or_default())
}

fn start_time(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    after.split_whitespace().nth(19).map(str::to_string)
}

/// Whether the process that wrote `owner` is still running.
pub fn owner_alive(owner: &str) -> bool {
    let Some((pid, st)) = owner.split_once(':') else {
        return false;
    };
    let Ok(pid) = pid.parse::<u32>() else {
        return false;
    };
    start_time(pid).is_some_and(|now| now == st)
}

pub(crate) fn new_id() -> String {
    let mut b = [0u8; 16];
    rand::Rng::fill(&mut rand::thread_rng(), &mut b);
    hex::encode(b)
}

pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The record's fields that come from the request itself.
pub(crate) fn base_record(id: &str, op: &Operation) -> OperationRecord {
    let mut rec = OperationRecord::new(id.to_string(), op.kind().as_str());
    rec.tool_name = op.args.tool_name().to_string();
    rec.tenant_id = Some(op.principal.tenant.clone());
    rec.session_id = op.principal.session.clone();
    rec.agent_id = op.principal.agent.clone();
    rec.isolation = op.tier;
    rec.backend = "local".into();
    rec.idempotency_key = op.idempotency_key.as_ref().map(|k| k.as_str().to_string());
    if let Some(req) = &op.exec {
        rec.mounts = req.mounts.iter().map(|m| m.spec()).collect();
        rec.workdir = req.workdir.as_ref().map(|w| w.display().to_string());
    }
    match &op.args {
        OperationArgs::Exec { argv } => {
            rec.argv = Some(recorded_argv(argv));
            rec.code_sha256 = Some(sha256_hex(argv.join("\0").as_bytes()));
        }
        OperationArgs::RunCode { code, .. } => {
            rec.code_sha256 = Some(sha256_hex(code.as_bytes()));
            rec.code = Some(code.clone());
        }
        OperationArgs::ToolCall { arguments, .. } => {
            rec.arguments = Some(recorded_arguments(arguments))
        }
        // The target a connection opened by a sandbox's egress proxy asked for.
        OperationArgs::NetConnect { host, port } => {
            rec.arguments = Some(serde_json::json!({ "host": host, "port": port }))
        }
        OperationArgs::Browse { url, screenshot } => {
            rec.arguments = Some(recorded_arguments(
                &serde_json::json!({ "url": url, "screenshot": screenshot }),
            ))
        }
        OperationArgs::Admin { action } => {
            rec.reason = format!("admin action `{}`", action.name());
            // The key a revocation names, for the start's check that the store still
            // knows it revoked (`store::lost_after`).
            if let sandboxio_core::AdminAction::KeyRevoke { key_id } = action {
                rec.arguments = Some(serde_json::json!({ "key_id": key_id }));
            }
        }
        other => rec.path = other.path().map(str::to_string),
    }
    rec
}

/// Largest `tool_call` arguments kept whole in a record (as JSON text); larger ones are
/// kept as their size and digest.
pub(crate) const ARGUMENTS_IN_RECORD: usize = 16 * 1024;

/// Largest argv kept whole in a record (bytes over all its arguments). A longer one keeps
/// its first arguments up to that size and a last element saying what was left out; the
/// record's `code_sha256` covers the whole argv. A refused 5 MB argv made a 5 MB line in
/// the trail.
pub(crate) const ARGV_IN_RECORD: usize = 16 * 1024;

fn recorded_argv(argv: &[String]) -> Vec<String> {
    let total: usize = argv.iter().map(String::len).sum();
    if total <= ARGV_IN_RECORD {
        return argv.to_vec();
    }
    let mut out = Vec::new();
    let mut used = 0usize;
    for a in argv {
        if used + a.len() > ARGV_IN_RECORD {
            let mut cut = ARGV_IN_RECORD - used;
            while cut > 0 && !a.is_char_boundary(cut) {
                cut -= 1;
            }
            if let Some(head) = a.get(..cut).filter(|h| !h.is_empty()) {
                out.push(head.to_string());
            }
            break;
        }
        used += a.len();
        out.push(a.clone());
    }
    out.push(format!(
        "[sandboxio: argv cut at {ARGV_IN_RECORD} of its {total} bytes; code_sha256 is of all of it]"
    ));
    out
}

fn recorded_arguments(v: &serde_json::Value) -> serde_json::Value {
    let text = serde_json::to_string(v).unwrap_or_default();
    if text.len() <= ARGUMENTS_IN_RECORD {
        return v.clone();
    }
    serde_json::json!({
        "truncated": true,
        "bytes": text.len(),
        "sha256": sha256_hex(text.as_bytes()),
    })
}

/// The record's fields that come from what the sandbox reported.
pub(crate) fn fill_from_result(rec: &mut OperationRecord, r: &ExecResult, tier: IsolationTier) {
    rec.sandbox_id = Some(r.sandbox_id.clone());
    rec.isolation = r.enforcement.tier.or(Some(tier));
    rec.backend = r
        .meter
        .as_ref()
        .map(|m| m.backend.clone())
        .unwrap_or_else(|| format!("local-{tier}"));
    match r.exit {
        ExitStatus::Code(c) => rec.exit_code = Some(c),
        ExitStatus::Signal(s) => rec.signal = Some(s),
    }
    rec.bytes_out = r.stdout_bytes + r.stderr_bytes;
    rec.network_denials = r.network_denials;
    rec.denied_hosts = r.denied_hosts.clone();
    rec.output_incomplete = r.output_incomplete.clone();
    rec.enforcement = Some(r.enforcement.clone());
    rec.status = if let Some(why) = &r.cancelled {
        rec.reason = format!("cancelled: {why}");
        OperationStatus::Cancelled
    } else if r.timed_out {
        OperationStatus::TimedOut
    } else if r.oom_killed {
        OperationStatus::OomKilled
    } else if r.exit.success() {
        OperationStatus::Ok
    } else {
        OperationStatus::Failed
    };
}

/// The reason of a run that ended by a limit: the limit, not the rule that allowed it.
pub(crate) fn outcome_reason(
    rec: &mut OperationRecord,
    r: &ExecResult,
    limits: &sandboxio_core::Limits,
) {
    match rec.status {
        OperationStatus::TimedOut => {
            rec.reason = format!(
                "ran past its {} wall-clock limit; the whole process tree was killed",
                sandboxio_core::HumanDuration(limits.timeout)
            );
        }
        OperationStatus::OomKilled => {
            rec.reason = format!("killed for exceeding its memory limit of {}", limits.memory);
        }
        OperationStatus::Failed => {
            rec.reason = match r.exit {
                ExitStatus::Code(c) => format!("ran and exited with status {c}"),
                ExitStatus::Signal(s) => format!("ran and was killed by signal {s}"),
            };
        }
        _ => {}
    }
}

pub(crate) fn redact_result(redactor: &sandboxio_audit::Redactor, mut r: ExecResult) -> ExecResult {
    // Bytes, not text: output that is not UTF-8 is kept exactly outside the matches.
    r.stdout = redactor.redact_bytes(&r.stdout).into_owned();
    r.stderr = redactor.redact_bytes(&r.stderr).into_owned();
    if let Some(c) = &r.cancelled {
        r.cancelled = Some(redactor.redact_str(c).into_owned());
    }
    if let Some(e) = r.copy_out_error.as_mut() {
        e.message = redactor.redact_str(&e.message).into_owned();
    }
    r
}

pub(crate) fn redact_json(
    redactor: &sandboxio_audit::Redactor,
    v: serde_json::Value,
) -> serde_json::Value {
    let s = serde_json::to_string(&v).unwrap_or_default();
    serde_json::from_str(&redactor.redact_str(&s)).unwrap_or(serde_json::Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_argv_is_kept_to_its_first_bytes_and_says_so() {
        let short = vec!["echo".to_string(), "hi".to_string()];
        assert_eq!(recorded_argv(&short), short);
        let big = vec!["echo".to_string(), "é".repeat(5_000_000)];
        let kept = recorded_argv(&big);
        let bytes: usize = kept.iter().map(String::len).sum();
        assert!(bytes < ARGV_IN_RECORD + 200, "{bytes}");
        assert_eq!(kept.first().map(String::as_str), Some("echo"));
        assert!(kept.last().is_some_and(|l| l.contains("argv cut at")));
        let many: Vec<String> = (0..100_000).map(|i| i.to_string()).collect();
        assert!(recorded_argv(&many).len() < many.len());
    }
}
