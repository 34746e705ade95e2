//! `sandboxio run` and `sandboxio run-code`: one operation through the whole chain.

use std::io::Read as _;

use anyhow::{bail, Context as _, Result};
use sandboxio_core::{
    ByteSize, ExecRequest, ExitStatus, HumanDuration, IdempotencyKey, IsolationTier, Language,
    Money, Operation, OperationArgs, OperationStatus, Principal, Verdict,
};
use sandboxio_gateway::{Outcome, Submission};
use sandboxio_sandbox::CancelToken;

use crate::args::{Common, RunOpts};
use crate::exit;
use crate::setup;

pub enum What {
    Argv(Vec<String>),
    Code { lang: String, file: String },
}

pub async fn run(common: Common, opts: RunOpts, what: What) -> Result<i32> {
    let loaded = setup::load(&common)?;
    let cfg = &loaded.config;
    let mut exec = ExecRequest::new(Vec::<String>::new());
    exec.limits = cfg.limits.to_limits();
    exec.network = cfg.network.to_mode();
    exec.env_allowlist = cfg.sandbox.env_allowlist.clone();
    exec.keep_workspace = cfg.sandbox.keep_workspace || opts.keep;
    if let Some(t) = &opts.timeout {
        exec.limits.timeout = t.parse::<HumanDuration>()?.0;
    }
    if let Some(m) = &opts.memory {
        exec.limits.memory = m.parse::<ByteSize>()?;
    }
    if let Some(p) = opts.pids {
        exec.limits.pids = p;
    }
    let mut secrets = Vec::new();
    for kv in opts.env.iter().chain(&opts.secret_env) {
        let Some((k, v)) = kv.split_once('=') else {
            bail!("--env expects K=V, got `{kv}`")
        };
        if k.is_empty() || k.contains('\0') || v.contains('\0') {
            bail!("invalid environment variable `{k}`");
        }
        exec.env.insert(k.to_string(), v.to_string());
    }
    for kv in &opts.secret_env {
        if let Some((_, v)) = kv.split_once('=') {
            secrets.push(sandboxio_audit::Secret::new(v));
        }
    }
    exec.input_dir = opts.input.clone();
    exec.output_dir = opts.output.clone();
    if let Some(f) = &opts.stdin_file {
        exec.stdin =
            Some(std::fs::read(f).with_context(|| format!("cannot read `{}`", f.display()))?);
    }
    let args = match what {
        What::Argv(argv) => OperationArgs::Exec { argv },
        What::Code { lang, file } => {
            let language: Language = lang.parse()?;
            let code = if file == "-" {
                let mut s = String::new();
                std::io::stdin()
                    .read_to_string(&mut s)
                    .context("cannot read code from standard input")?;
                s
            } else {
                std::fs::read_to_string(&file).with_context(|| format!("cannot read `{file}`"))?
            };
            OperationArgs::RunCode { language, code }
        }
    };
    let principal = Principal {
        tenant: opts.tenant.clone(),
        session: opts.session.clone(),
        agent: opts.agent.clone(),
    };
    let mut op = Operation::new(principal, args);
    op.tier = Some(match &opts.tier {
        Some(t) => t.parse::<IsolationTier>()?,
        None => cfg.sandbox.tier,
    });
    op.idempotency_key = opts
        .idempotency_key
        .clone()
        .map(IdempotencyKey::new)
        .transpose()?;
    op.idempotent = opts.idempotent;
    op.rationale = opts.rationale.clone();
    op.estimated_cost = opts
        .estimated_cost
        .as_deref()
        .map(str::parse::<Money>)
        .transpose()?;

    let approval_timeout = opts
        .approval_timeout
        .as_deref()
        .map(str::parse::<HumanDuration>)
        .transpose()?;
    let gateway = setup::gateway(&loaded, &common, approval_timeout.map(|d| d.0))?;
    gateway.recover().await?;
    // Leftovers of crashed supervisors: empty sandbox cgroups and namespace staging dirs.
    sandboxio_sandbox::cgroup::cleanup_stale();
    sandboxio_sandbox::ns::cleanup_stale_staging(
        exec.limits.timeout + std::time::Duration::from_secs(600),
    );

    let cancel = CancelToken::new();
    let mut sub = Submission::new(op);
    sub.exec = Some(exec);
    sub.secrets = secrets;
    sub.traceparent = opts.traceparent.clone();
    sub.cancel = Some(cancel.clone());
    let signals = tokio::spawn(cancel_on_signals(cancel));
    let outcome = gateway.submit(sub).await;
    signals.abort();
    let outcome = outcome?;
    print_outcome(&outcome, common.json)?;
    Ok(exit_code(&outcome))
}

/// Ctrl-C and SIGTERM cancel the operation; the sandbox's process tree is killed.
async fn cancel_on_signals(cancel: CancelToken) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return;
    };
    tokio::select! {
        _ = term.recv() => cancel.cancel("received SIGTERM"),
        _ = int.recv() => cancel.cancel("received SIGINT"),
    }
}

fn print_outcome(o: &Outcome, json: bool) -> Result<()> {
    use std::io::Write as _;
    if json {
        // The whole ExecResult when something ran; the record otherwise.
        let v = match &o.result {
            Some(r) => {
                let mut v = serde_json::to_value(r)?;
                if let Some(obj) = v.as_object_mut() {
                    obj.insert("record".into(), serde_json::to_value(&o.record)?);
                }
                v
            }
            None => serde_json::json!({ "record": o.record }),
        };
        println!("{}", serde_json::to_string(&v)?);
        return Ok(());
    }
    if let Some(r) = &o.result {
        std::io::stdout().write_all(r.stdout.as_bytes())?;
        std::io::stderr().write_all(r.stderr.as_bytes())?;
        if r.stdout_truncated {
            eprintln!(
                "sandboxio: stdout truncated ({} bytes written, cap reached)",
                r.stdout_bytes
            );
        }
        if r.stderr_truncated {
            eprintln!(
                "sandboxio: stderr truncated ({} bytes written, cap reached)",
                r.stderr_bytes
            );
        }
    }
    let rec = &o.record;
    match rec.status {
        OperationStatus::Ok | OperationStatus::Failed => {}
        OperationStatus::Replayed => eprintln!("sandboxio: {}", rec.reason),
        _ => {
            let code = rec
                .error_code
                .as_deref()
                .map(|c| format!("[{c}]"))
                .unwrap_or_default();
            let rules = rec
                .rules
                .iter()
                .map(|r| r.to_string())
                .collect::<Vec<_>>()
                .join(", ");
            let rules = if rules.is_empty() {
                String::new()
            } else {
                format!(" (rules: {rules})")
            };
            eprintln!(
                "sandboxio{code}: {} at {}: {}{rules}",
                rec.status.as_str(),
                rec.layer,
                rec.reason
            );
        }
    }
    Ok(())
}

/// The command's own status, or a documented code.
pub fn exit_code(o: &Outcome) -> i32 {
    let rec = &o.record;
    match rec.status {
        OperationStatus::Denied if rec.verdict == Verdict::Deny => exit::DENIED,
        OperationStatus::Error => exit::INTERNAL,
        OperationStatus::TimedOut => exit::TIMEOUT,
        OperationStatus::OomKilled => exit::OOM,
        OperationStatus::Cancelled => exit::CANCELLED,
        OperationStatus::Interrupted => exit::INTERRUPTED,
        _ => match o.result.as_ref().map(|r| r.exit) {
            Some(ExitStatus::Code(c)) => c,
            Some(ExitStatus::Signal(s)) => 128 + s,
            None if rec.verdict == Verdict::Deny => exit::DENIED,
            None => exit::OK,
        },
    }
}
