//! The side effect: the sandbox for exec and run_code, a registered tool, or a file
//! operation confined beneath the session's workspace.

use sandboxio_core::{
    ErrorCode, ExecResult, Layer, OperationArgs, OperationRecord, OperationStatus, Verdict,
};
use sandboxio_sandbox::CancelToken;

use super::record::{fill_from_result, ms, outcome_reason};
use super::stop::{RunCtx, Stop};
use super::{Gateway, Submission};

impl Gateway {
    /// The side effect. `launched`: the sandbox run the chain set up (and started, held at
    /// its release) during the admission; `None` sets it up here.
    pub(super) async fn run(
        &self,
        id: &str,
        sub: &Submission,
        rec: &mut OperationRecord,
        ctx: &mut RunCtx,
        launched: Option<super::launch::Launch>,
    ) -> Result<(Option<ExecResult>, Option<serde_json::Value>), Stop> {
        let op = &sub.op;
        ctx.ran = true;
        match &op.args {
            OperationArgs::Exec { .. }
            | OperationArgs::RunCode { .. }
            | OperationArgs::Browse { .. } => {
                let mut l = match launched {
                    Some(l) => l,
                    None => self.launch(sub, ctx, false)?,
                };
                let req = l.req.clone();
                let tier = l.tier;
                let token = l.token.clone();
                let scratch = l.scratch.take();
                // Removed when the run is over, as the scratch directory is.
                let _snapshot = l.snapshot.take();
                let forward = l.forward.take();
                rec.bytes_in = req.stdin.as_ref().map(|s| s.len() as u64).unwrap_or(0)
                    + req.files.values().map(|f| f.len() as u64).sum::<u64>();
                if let Ok(mut r) = self.running.lock() {
                    r.insert(id.to_string(), token.clone());
                }
                let watcher = self.watch_kill_switch(token.clone());
                let mut structured = None;
                let io = l.io.take().unwrap_or_default();
                let res = match (l.plain.take(), &sub.executor) {
                    (Some(plain), _) => super::launch::Launch::plain_result(plain)
                        .await
                        .map_err(|e| sandbox_failed(ctx, &e)),
                    (None, Some(x)) => match x.run(&req, io, token).await {
                        Ok((r, v)) => {
                            structured = v;
                            Ok(r)
                        }
                        Err(u) => Err((u.code, u.message)),
                    },
                    // Neither plain nor an executor: network, served by the sandbox's
                    // egress proxy while it runs.
                    (None, None) => {
                        match self.run_with_egress(id, sub, &req, tier, token, io).await {
                            Ok(r) => r.map_err(|e| sandbox_failed(ctx, &e)),
                            Err(stop) => Err((stop.code.unwrap_or("SBX_E1513"), stop.reason)),
                        }
                    }
                };
                if let Some(task) = forward {
                    let _ = task.await;
                }
                watcher.abort();
                if let Ok(mut r) = self.running.lock() {
                    r.remove(id);
                }
                match res {
                    Ok(mut r) => {
                        if let (Some(s), OperationArgs::Browse { url, .. }) = (&scratch, &op.args) {
                            let answer = crate::browse::answer::build(
                                url,
                                &r,
                                &s.output_dir(),
                                req.limits.output_size.bytes(),
                            );
                            structured = serde_json::to_value(answer).ok();
                            // The scratch directory is removed on return: point at nothing.
                            r.output_dir = None;
                        }
                        fill_from_result(rec, &r, tier);
                        outcome_reason(rec, &r, &req.limits);
                        if scratch.is_some() {
                            if let Some(why) = crate::browse::no_cgroup_failure(&r) {
                                rec.status = OperationStatus::Error;
                                rec.error_code = Some(crate::browse::BROWSE_NO_CGROUP.into());
                                rec.reason = why;
                            }
                        }
                        // The program ran; its files could not be copied out. The result
                        // (output, exit) is kept and the record carries the copy's code.
                        if let Some(e) = &r.copy_out_error {
                            rec.status = OperationStatus::Error;
                            rec.error_code = Some(e.code.clone());
                            rec.reason = e.message.clone();
                        }
                        Ok((Some(r), structured))
                    }
                    Err((code, why)) => {
                        let mut s = Stop::deny(Layer::Sandbox, why).code(code);
                        s.status = OperationStatus::Error;
                        s.verdict = Verdict::Deny;
                        Err(s)
                    }
                }
            }
            OperationArgs::ToolCall { tool, arguments } => {
                let Some(t) = sub.tool.as_ref().or_else(|| self.tools.get(tool)) else {
                    return Err(Stop::deny(
                        Layer::Sandbox,
                        format!("no tool named `{tool}` is registered"),
                    )
                    .code("SBX_E1513"));
                };
                let retryable = op.idempotent || op.idempotency_key.is_some();
                let mut attempt = 1u32;
                if let Ok(mut b) = self.retry_budget.lock() {
                    b.on_request();
                }
                loop {
                    match t.call(arguments).await {
                        Ok(v) => {
                            rec.attempts = attempt;
                            rec.status = OperationStatus::Ok;
                            return Ok((None, Some(v)));
                        }
                        Err(e) => {
                            let can_retry = e.transient
                                && retryable
                                && attempt < self.cfg.retry.max_attempts
                                && self
                                    .retry_budget
                                    .lock()
                                    .map(|mut b| b.try_take())
                                    .unwrap_or(false);
                            if !can_retry {
                                rec.attempts = attempt;
                                let mut s = Stop::deny(
                                    Layer::Sandbox,
                                    format!(
                                        "tool `{tool}` failed after {attempt} attempt(s): {}",
                                        e.message
                                    ),
                                )
                                .code(e.code.unwrap_or("SBX_E1514"));
                                s.status = OperationStatus::Failed;
                                s.verdict = Verdict::Allow;
                                return Err(s);
                            }
                            let delay = crate::retry::backoff(&self.cfg.retry, attempt);
                            tracing::info!(operation_id = %id, attempt, delay_ms = ms(delay), "retrying a transient failure");
                            tokio::time::sleep(delay).await;
                            attempt += 1;
                        }
                    }
                }
            }
            OperationArgs::NetConnect { .. } => {
                self.egress_connect(sub, rec).await.map(|v| (None, Some(v)))
            }
            OperationArgs::FileRead { .. }
            | OperationArgs::FileWrite { .. }
            | OperationArgs::FileDelete { .. } => {
                let Some(root) = sub.workspace.as_deref() else {
                    return Err(Stop::deny(
                        Layer::Sandbox,
                        "file operations need a workspace (open a Sandbox session)",
                    )
                    .code("SBX_E1513"));
                };
                crate::files::execute(
                    &op.args,
                    root,
                    sub.confine.as_deref(),
                    sub.content.as_deref(),
                    sub.file_handle.as_ref(),
                    rec,
                )
                .map(|v| (None, Some(v)))
            }
            other => Err(Stop::deny(
                Layer::Sandbox,
                format!(
                    "operation kind `{}` has no executor in this gateway yet",
                    other.kind()
                ),
            )
            .code("SBX_E1513")),
        }
    }

    /// Re-reads the persisted kill switch while an operation runs, so `sandboxio kill`
    /// from another process (or, with a shared store, another replica) stops it: at every
    /// poll, and at once when the store announces a change.
    pub(super) fn watch_kill_switch(&self, token: CancelToken) -> tokio::task::JoinHandle<()> {
        let (store, cfg) = (self.store.clone(), self.cfg.clone());
        let poll = self.cfg.kill_poll;
        let mut changes = store.changes();
        tokio::spawn(async move {
            loop {
                crate::store::wait_for_change(&mut changes, poll).await;
                let read = super::offload::off_worker(
                    "reading the kill switch",
                    store.clone(),
                    cfg.clone(),
                    |s, _| s.kill_state(),
                )
                .await;
                match read {
                    Ok(Some(k)) => {
                        token.cancel(format!("kill switch: {}", k.reason));
                        return;
                    }
                    Ok(None) => {}
                    Err(_) => {
                        token.cancel("kill switch state unreadable (failing closed)");
                        return;
                    }
                }
            }
        })
    }
}

/// A sandbox error as the record says it: its code and why; one after which the program
/// may have run (`SandboxError::program_may_have_run`: its helper died) marks the run
/// unmeasured, so that it is charged, and is not called a failure to run.
fn sandbox_failed(
    ctx: &mut super::stop::RunCtx,
    e: &sandboxio_sandbox::SandboxError,
) -> (&'static str, String) {
    if e.program_may_have_run() {
        ctx.unmeasured = true;
        return (e.code(), format!("the sandbox failed during the run: {e}"));
    }
    (e.code(), format!("the sandbox could not run this: {e}"))
}
