//! `sandboxio run` and `sandboxio run-code`: one operation through the whole chain.

use anyhow::Result;
use sandboxio_core::{
    ByteSize, ExitStatus, HumanDuration, IdempotencyKey, IsolationTier, Language, Layer, Money,
    Operation, OperationArgs, OperationRecord, OperationStatus, OutputStream, Principal, Verdict,
};
use sandboxio_gateway::CancelToken;
use sandboxio_gateway::{Outcome, Submission};

use crate::args::{Common, RunOpts};
use crate::cmd::stdin;
use crate::error::CliError;
use crate::exit;
use crate::files;
use crate::out::{errln, outln};
use crate::output;
use crate::output::escape::field;
use crate::paths;
use crate::setup;

pub enum What {
    Argv(Vec<String>),
    Code { lang: String, file: String },
}

pub async fn run(common: Common, opts: RunOpts, what: What) -> Result<i32> {
    let opts_code_dash = matches!(&what, What::Code { file, .. } if file == "-");
    // Refused before anything is opened or created.
    sandboxio_core::check_tenant(&opts.tenant)?;
    if let Some(a) = &opts.agent {
        sandboxio_core::check_agent(a)?;
    }
    let limits = FlagLimits::parse(opts.timeout.as_deref(), opts.memory.as_deref(), opts.pids)?;
    let mut env = Vec::new();
    let mut secrets = Vec::new();
    for (flag, kv) in opts
        .env
        .iter()
        .map(|kv| ("--env", kv))
        .chain(opts.secret_env.iter().map(|kv| ("--secret-env", kv)))
    {
        let (k, v) = env_pair(flag, kv)?;
        if flag == "--secret-env" {
            secret_long_enough(k, v)?;
            secrets.push(sandboxio_gateway::layers::audit::Secret::new(v));
        }
        env.push((k.to_string(), v.to_string()));
    }
    // Files named on the command line, read (capped) before anything is opened.
    let mut stdin_file = None;
    if let Some(f) = &opts.stdin_file {
        let f = paths::absolute(f)?;
        stdin_file = Some(files::read_any("--stdin-file", &f, files::MAX_INPUT_BYTES)?);
    }
    let args = match what {
        What::Argv(argv) => OperationArgs::Exec { argv },
        What::Code { lang, file } => {
            let language: Language = lang.parse()?;
            let (flag, path, bytes) = if file == "-" {
                let bytes = files::read_stream(
                    "run-code -",
                    std::io::stdin().lock(),
                    files::MAX_INPUT_BYTES,
                )?;
                ("run-code -", "<standard input>".into(), bytes)
            } else {
                let path = paths::absolute(std::path::Path::new(&file))?;
                let bytes = files::read_regular("run-code FILE", &path, files::MAX_INPUT_BYTES)?;
                ("run-code FILE", path, bytes)
            };
            let code = String::from_utf8(bytes).map_err(|_| CliError::ReadInput {
                flag,
                path,
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "the code is not valid UTF-8",
                ),
            })?;
            OperationArgs::RunCode { language, code }
        }
    };
    let loaded = setup::load(&common)?;
    let cfg = &loaded.config;
    let approval_timeout = opts
        .approval_timeout
        .as_deref()
        .map(approval_timeout)
        .transpose()?;
    // Every other flag, checked before the state is opened: a usage error changes nothing
    // (no checkpoint in the trail, no write to the store).
    let (tier, idempotency_key) = tier_and_key(
        opts.tier.as_deref(),
        opts.idempotency_key.as_deref(),
        cfg.sandbox.tier,
    )?;
    let estimated_cost = opts
        .estimated_cost
        .as_deref()
        .map(str::parse::<Money>)
        .transpose()?;
    // Host paths resolve against the working directory (the sandbox needs absolute ones).
    let input_dir = opts.input.as_deref().map(paths::absolute).transpose()?;
    if let Some(d) = &input_dir {
        // Refused here, with the flag named, rather than deep in the sandbox's setup.
        std::fs::read_dir(d).map_err(|source| CliError::ReadInput {
            flag: "--input",
            path: d.clone(),
            source,
        })?;
    }
    let output_dir = opts.output.as_deref().map(paths::absolute).transpose()?;
    let mut mounts = Vec::new();
    if !opts.mounts.is_empty() {
        let cwd = std::env::current_dir().map_err(|source| CliError::Resolve {
            path: ".".into(),
            source,
        })?;
        for spec in &opts.mounts {
            mounts.push(sandboxio_core::Mount::parse(spec, &cwd)?);
        }
    }
    sandboxio_core::mount::check_request(&mounts, opts.workdir.as_deref())?;
    let runtime = loaded.runtime(&common, approval_timeout)?;
    // Limits the flags leave unset take `[limits]`; above `[limits.max]` the gateway
    // denies the run.
    let mut exec = runtime.exec_request();
    exec.keep_workspace = exec.keep_workspace || opts.keep;
    limits.apply(&mut exec.limits);
    exec.env.extend(env);
    exec.input_dir = input_dir;
    exec.output_dir = output_dir;
    exec.mounts.extend(mounts);
    exec.workdir = opts.workdir.clone();
    sandboxio_core::mount::check_request(&exec.mounts, exec.workdir.as_deref())?;
    exec.stdin = stdin_file;
    let code_from_stdin = matches!(&args, OperationArgs::RunCode { .. }) && opts_code_dash;
    exec.tty = opts.tty;
    let principal = Principal {
        tenant: opts.tenant.clone(),
        session: opts.session.clone(),
        agent: opts.agent.clone(),
    };
    let mut op = Operation::new(principal, args);
    op.tier = Some(tier);
    op.idempotency_key = idempotency_key;
    op.idempotent = opts.idempotent;
    op.rationale = opts.rationale.clone();
    op.estimated_cost = estimated_cost;

    // Leftovers of crashed processes: interrupted operations, stale cgroups and staging.
    runtime.recover(cfg.limits.timeout.0).await?;
    let gateway = runtime.gateway();

    // `--stdin-file` was read above; otherwise our own stdin, when it is a pipe or a file.
    // A pipe is read whole when the bytes must be part of the request: under an
    // idempotency key (a replay answers only the same input), and when the policy would
    // ask a person (the approval covers what the program is fed).
    let stdin_plan = if exec.stdin.is_some() {
        stdin::Stdin::None
    } else {
        let bind = || {
            opts.idempotency_key.is_some() || gateway.would_ask(&op.clone().with_exec(exec.clone()))
        };
        stdin::choose(code_from_stdin, bind)?
    };
    // `--tty` on a terminal: our keys are streamed to the program's terminal.
    let stdin_plan = match stdin_plan {
        stdin::Stdin::None if opts.tty && exec.stdin.is_none() && stdin::is_terminal() => {
            stdin::Stdin::Stream
        }
        other => other,
    };
    match &stdin_plan {
        stdin::Stdin::None => {}
        stdin::Stdin::Bytes(b) => exec.stdin = Some(b.clone()),
        stdin::Stdin::Stream => exec.stdin_stream = true,
    }

    let cancel = CancelToken::new();
    let exec_streams_stdin = exec.stdin_stream;
    let mut sub = Submission::new(op.with_exec(exec));
    sub.secrets = secrets;
    // `$TRACEPARENT` when no flag: read here, not by the parser, so a value that is not
    // UTF-8 is skipped like any other such variable instead of refusing the command line.
    sub.traceparent = opts
        .traceparent
        .clone()
        .or_else(|| std::env::var("TRACEPARENT").ok());
    sub.cancel = Some(cancel.clone());
    let (pending, waiting) = super::waiting::announce(super::waiting::Place {
        config: loaded.config_file.clone(),
        state_dir: loaded.state_dir.clone(),
    });
    sub.approval_pending = Some(pending);
    if exec_streams_stdin {
        sub.stream.stdin = Some(stdin::stream());
    }
    // Our own terminal while a `--tty` program runs: its size, and keys passed as typed
    // (restored when `_raw` drops, after the run).
    let _raw = if opts.tty {
        sub.stream.tty_size = crate::terminal::window_size();
        sub.stream.tty_resize = crate::terminal::resizes();
        crate::terminal::raw_input()
    } else {
        None
    };
    // Human output is printed live, as the program writes it; `--json` prints it at the end.
    let printer = if common.json {
        None
    } else {
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        sub.stream.events = Some(tx);
        Some(tokio::spawn(output::print_events(rx, opts.tty)))
    };
    // A program with a writable mount of the working directory could leave a
    // `sandboxio.toml` there for the next command to read (its tier, policy, state): one
    // that appears during the run is set aside, never read.
    let watch = loaded
        .default_config
        .clone()
        .filter(|p| std::fs::symlink_metadata(p).is_err());
    let signals = tokio::spawn(cancel_on_signals(cancel));
    let outcome = gateway.submit(sub).await;
    if let Some(p) = watch {
        setup::set_aside_planted_config(&p);
    }
    signals.abort();
    waiting.abort();
    // The gateway has dropped the event sender: the printer drains and ends.
    let printed_live = match printer {
        Some(p) => p.await.map(|p| p.saw_exit).unwrap_or(false),
        None => false,
    };
    let outcome = outcome?;
    print_outcome(&outcome, common.json, printed_live)?;
    if !common.json {
        warn_unenforced(&outcome, opts.memory.is_some())?;
    }
    Ok(exit_code(&outcome))
}

/// `K=V` from `--env` or `--secret-env`. A secret is never echoed in an error.
/// `--tier` (else the configured one) and `--idempotency-key` of a run or a browse,
/// parsed before the state is opened: a usage error changes nothing.
pub(super) fn tier_and_key(
    tier: Option<&str>,
    key: Option<&str>,
    configured: IsolationTier,
) -> Result<(IsolationTier, Option<IdempotencyKey>)> {
    let tier = match tier {
        Some(t) => t.parse::<IsolationTier>()?,
        None => configured,
    };
    let key = key
        .map(|k| IdempotencyKey::new(k.to_string()))
        .transpose()?;
    Ok((tier, key))
}

fn env_pair<'a>(flag: &'static str, kv: &'a str) -> Result<(&'a str, &'a str), CliError> {
    let secret = flag == "--secret-env";
    let Some((k, v)) = kv.split_once('=') else {
        let shown = if secret {
            "(value not shown)".to_string()
        } else {
            kv.to_string()
        };
        return Err(CliError::EnvNotKeyValue { flag, shown });
    };
    if k.is_empty() || k.contains('\0') {
        return Err(CliError::EnvName {
            flag,
            name: k.to_string(),
        });
    }
    if v.contains('\0') {
        return Err(CliError::EnvValue {
            flag,
            name: k.to_string(),
        });
    }
    Ok((k, v))
}

/// A `--secret-env` value long enough to redact: a shorter one would redact ordinary text
/// (the redactor refuses it, and nothing could be recorded). Its value is never shown.
fn secret_long_enough(name: &str, value: &str) -> Result<()> {
    let min = sandboxio_gateway::layers::audit::MIN_SECRET_LEN;
    if value.chars().count() < min {
        return Err(anyhow::Error::new(
            sandboxio_gateway::layers::audit::AuditError::SecretTooShort { min },
        )
        .context(format!(
            "the value of `{}` given with `--secret-env`",
            field(name)
        )));
    }
    Ok(())
}

/// `--timeout`, `--memory` and `--pids` of `run`, `run-code` and `browse`, parsed and
/// checked before anything is opened. Zero is refused: it would silently mean the
/// configured value (a request's unset limit); leaving the flag out says that.
pub struct FlagLimits {
    timeout: Option<std::time::Duration>,
    memory: Option<ByteSize>,
    pids: Option<u32>,
}

impl FlagLimits {
    pub fn parse(
        timeout: Option<&str>,
        memory: Option<&str>,
        pids: Option<u32>,
    ) -> Result<FlagLimits> {
        let timeout = timeout
            .map(|t| t.parse::<HumanDuration>().map(|d| d.0))
            .transpose()?;
        if timeout.is_some_and(|t| t.is_zero()) {
            return Err(CliError::ZeroLimit { flag: "--timeout" }.into());
        }
        let memory = memory.map(str::parse::<ByteSize>).transpose()?;
        if memory.is_some_and(|m| m.0 == 0) {
            return Err(CliError::ZeroLimit { flag: "--memory" }.into());
        }
        if pids == Some(0) {
            return Err(CliError::ZeroLimit { flag: "--pids" }.into());
        }
        Ok(FlagLimits {
            timeout,
            memory,
            pids,
        })
    }

    /// The flags given, over the defaults in `limits`.
    pub fn apply(&self, limits: &mut sandboxio_core::Limits) {
        if let Some(t) = self.timeout {
            limits.timeout = t;
        }
        if let Some(m) = self.memory {
            limits.memory = m;
        }
        if let Some(p) = self.pids {
            limits.pids = p;
        }
    }
}

/// `--approval-timeout`, bounded like the `[approvals] timeout` key.
fn approval_timeout(s: &str) -> Result<std::time::Duration, CliError> {
    let err = |why: String| CliError::ApprovalTimeout {
        input: s.to_string(),
        why,
    };
    let d = s
        .parse::<HumanDuration>()
        .map_err(|e| err(e.to_string()))?
        .0;
    sandboxio_config::check_approval_timeout(d).map_err(err)?;
    Ok(d)
}

/// Ctrl-C, SIGTERM and SIGHUP cancel the operation; the sandbox's process tree is killed.
pub(crate) fn cancel_on_signals(
    cancel: CancelToken,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{signal, SignalKind};
    // The handlers are installed now, not when the returned future is first polled: a
    // signal from here on is caught. SIGHUP too: the caller's terminal went away. The run
    // ends cancelled and recorded, and a `--tty` run puts the terminal back (the default
    // action would kill us in raw mode).
    let handlers = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    );
    async move {
        let (Ok(mut term), Ok(mut int), Ok(mut hup)) = handlers else {
            return;
        };
        tokio::select! {
            _ = term.recv() => cancel.cancel("received SIGTERM"),
            _ = int.recv() => cancel.cancel("received SIGINT"),
            _ = hup.recv() => cancel.cancel("received SIGHUP"),
        }
    }
}

/// `printed_live`: the output was already printed as it came (only the notices remain).
fn print_outcome(o: &Outcome, json: bool, printed_live: bool) -> Result<()> {
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
        outln!("{}", crate::out::compact(&v)?)?;
        return Ok(());
    }
    if let Some(r) = &o.result {
        if !printed_live {
            // A replayed outcome (idempotency key): the recorded output, printed now.
            let mut p = output::Printer::new();
            p.write(OutputStream::Stdout, &r.stdout);
            p.write(OutputStream::Stderr, &r.stderr);
            p.finish();
        }
        if r.stdout_truncated {
            errln!(
                "sandboxio: stdout truncated ({} bytes written, cap reached)",
                r.stdout_bytes
            );
        }
        if r.stderr_truncated {
            errln!(
                "sandboxio: stderr truncated ({} bytes written, cap reached)",
                r.stderr_bytes
            );
        }
        if let Some(why) = &r.output_incomplete {
            errln!("sandboxio: output incomplete: {}", field(why));
        }
    }
    if let Some(line) = status_line(&o.record) {
        errln!("{line}");
    }
    Ok(())
}

/// A limit the caller asked for that this host could only approximate (a non-root user
/// without a delegated cgroup): said on stderr, not only in `--json`'s gaps. The default
/// limits' gaps are listed in `--json` and by `sandboxio doctor`.
fn warn_unenforced(o: &Outcome, memory_asked: bool) -> Result<()> {
    let Some(r) = &o.result else {
        return Ok(());
    };
    for gap in &r.enforcement.gaps {
        if memory_asked && gap.starts_with("memory:") {
            errln!(
                "sandboxio: warning: --memory is not enforced as a total here: {}",
                field(gap)
            );
        }
    }
    Ok(())
}

/// The line that says why the CLI, not the program, chose the exit status: the layer that
/// stopped the operation, its own reason and code; the policy rules only when the policy
/// decided. `None` when the program ran and its own status is the answer.
pub fn status_line(rec: &OperationRecord) -> Option<String> {
    let code = rec
        .error_code
        .as_deref()
        .map(|c| format!("[{c}]"))
        .unwrap_or_default();
    match rec.status {
        OperationStatus::Ok | OperationStatus::Failed => None,
        OperationStatus::Replayed => Some(format!("sandboxio{code}: {}", field(&rec.reason))),
        _ => {
            let rules = rec
                .rules
                .iter()
                .map(|r| field(&r.to_string()).into_owned())
                .collect::<Vec<_>>()
                .join(", ");
            let rules = if rules.is_empty() || rec.layer != Layer::Policy {
                String::new()
            } else {
                format!(" (rules: {rules})")
            };
            Some(format!(
                "sandboxio{code}: {} at {}: {}{rules}",
                rec.status.as_str(),
                rec.layer,
                field(&rec.reason)
            ))
        }
    }
}

/// The command's own status, or a documented code. A replay answers like the original.
pub fn exit_code(o: &Outcome) -> i32 {
    let rec = &o.record;
    let status = match (rec.status, rec.replayed_status) {
        (OperationStatus::Replayed, Some(original)) => original,
        (s, _) => s,
    };
    match status {
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
