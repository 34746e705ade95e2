//! `sandboxio browse URL`: one `browse` operation through the whole chain; prints the
//! page's text (or, with `--json`, the answer and the record) and writes the screenshot.

use std::io::Write as _;

use anyhow::Result;
use sandboxio_core::{HumanDuration, Operation, OperationArgs, Principal};
use sandboxio_gateway::browse::BrowseAnswer;
use sandboxio_gateway::CancelToken;
use sandboxio_gateway::{Outcome, Submission};

use crate::args::{BrowseOpts, Common};
use crate::error::CliError;
use crate::out::{errln, outln};
use crate::paths;
use crate::setup;

pub async fn browse(common: Common, opts: BrowseOpts, url: String) -> Result<i32> {
    // Refused before anything is opened or created.
    sandboxio_core::check_tenant(&opts.tenant)?;
    if let Some(a) = &opts.agent {
        sandboxio_core::check_agent(a)?;
    }
    let limits =
        super::run::FlagLimits::parse(opts.timeout.as_deref(), opts.memory.as_deref(), opts.pids)?;
    let loaded = setup::load(&common)?;
    let cfg = &loaded.config;
    let approval_timeout = opts
        .approval_timeout
        .as_deref()
        .map(|s| s.parse::<HumanDuration>().map(|d| d.0))
        .transpose()?;
    if let Some(d) = approval_timeout {
        sandboxio_config::check_approval_timeout(d).map_err(|why| CliError::ApprovalTimeout {
            input: opts.approval_timeout.clone().unwrap_or_default(),
            why,
        })?;
    }
    let screenshot_path = opts
        .screenshot
        .as_deref()
        .map(paths::absolute)
        .transpose()?;
    // Checked before the state is opened: a usage error changes nothing.
    let (tier, idempotency_key) = super::run::tier_and_key(
        opts.tier.as_deref(),
        opts.idempotency_key.as_deref(),
        cfg.sandbox.tier,
    )?;
    let runtime = loaded.runtime(&common, approval_timeout)?;
    // Network and limits only: the configured network mode, the flags' limits.
    let base = runtime.exec_request();
    let mut exec = sandboxio_core::ExecRequest::new(Vec::<String>::new());
    exec.network = base.network;
    limits.apply(&mut exec.limits);
    let principal = Principal {
        tenant: opts.tenant.clone(),
        session: opts.session.clone(),
        agent: opts.agent.clone(),
    };
    let mut op = Operation::new(
        principal,
        OperationArgs::Browse {
            url,
            screenshot: screenshot_path.is_some(),
        },
    );
    op.tier = Some(tier);
    op.idempotency_key = idempotency_key;
    op.rationale = opts.rationale.clone();

    runtime.recover(cfg.limits.timeout.0).await?;
    let gateway = runtime.gateway();
    let cancel = CancelToken::new();
    let mut sub = Submission::new(op.with_exec(exec));
    sub.cancel = Some(cancel.clone());
    let (pending, waiting) = super::waiting::announce(super::waiting::Place {
        config: loaded.config_file.clone(),
        state_dir: loaded.state_dir.clone(),
    });
    sub.approval_pending = Some(pending);
    let signals = tokio::spawn(super::run::cancel_on_signals(cancel));
    let outcome = gateway.submit(sub).await;
    signals.abort();
    waiting.abort();
    let outcome = outcome?;
    let answer = outcome
        .tool_output
        .as_ref()
        .and_then(BrowseAnswer::from_tool_output);
    // The screenshot first: a failure to write it is an error even with --json.
    let mut written = None;
    if let (Some(path), Some(shot)) = (
        &screenshot_path,
        answer.as_ref().and_then(|a| a.screenshot.as_ref()),
    ) {
        let png = shot.png().unwrap_or_default();
        write_file(path, &png)?;
        written = Some(path.clone());
    }
    print(&outcome, answer.as_ref(), written.as_deref(), common.json)?;
    if screenshot_path.is_some() && written.is_none() && answer.is_some() {
        errln!("sandboxio: no screenshot: the browser wrote none");
    }
    Ok(super::run::exit_code(&outcome))
}

fn write_file(path: &std::path::Path, bytes: &[u8]) -> Result<(), CliError> {
    let err = |source| CliError::WriteScreenshot {
        path: path.to_path_buf(),
        source,
    };
    let mut f = std::fs::File::create(path).map_err(err)?;
    f.write_all(bytes).map_err(err)?;
    f.sync_all().map_err(err)
}

fn print(
    o: &Outcome,
    answer: Option<&BrowseAnswer>,
    screenshot: Option<&std::path::Path>,
    json: bool,
) -> Result<()> {
    if json {
        let mut v = match answer {
            Some(a) => {
                let mut v = serde_json::to_value(a)?;
                if let Some(obj) = v.as_object_mut() {
                    // The PNG went to the file; the answer says where and what.
                    if let Some(s) = obj.get_mut("screenshot").and_then(|s| s.as_object_mut()) {
                        s.remove("png_base64");
                        if let Some(p) = screenshot {
                            s.insert("file".into(), p.display().to_string().into());
                        }
                    }
                    if let Some(r) = &o.result {
                        obj.insert("exit".into(), serde_json::to_value(r.exit)?);
                        // The browser's own log, only when it failed (it is noisy).
                        if !r.exit.success() {
                            let log = String::from_utf8_lossy(&r.stderr);
                            obj.insert("browser_log".into(), log.into_owned().into());
                        }
                    }
                }
                v
            }
            None => serde_json::json!({}),
        };
        if let Some(obj) = v.as_object_mut() {
            obj.insert("record".into(), serde_json::to_value(&o.record)?);
        }
        outln!("{}", crate::out::compact(&v)?)?;
        return Ok(());
    }
    if let Some(a) = answer {
        if let Some(t) = &a.title {
            outln!("# {}", crate::output::escape::field(t))?;
            outln!()?;
        }
        outln!("{}", a.text)?;
        if a.truncated {
            errln!("sandboxio: the page was cut at the output cap; its text may be incomplete");
        }
        if a.network_denials > 0 {
            errln!(
                "sandboxio: {} connection(s) refused by the egress proxy: {}",
                a.network_denials,
                crate::output::escape::field(&a.denied_hosts.join(", "))
            );
        }
    }
    if let Some(line) = super::run::status_line(&o.record) {
        errln!("{line}");
    }
    Ok(())
}
