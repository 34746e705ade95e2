//! A sandbox run set up for an exec, run_code or browse, and started while its admission
//! is made durable.
//!
//! The admission transaction ends with a sync (about half a millisecond on a disk), and a
//! sandbox's own preparation (its workspace and cgroup directories, its helper process
//! started and waiting for its plan) has nothing of the request in it. So once the policy
//! allowed an operation without asking anyone, the chain starts the sandbox beside the
//! admission, held at its release (`StreamIo::release`): the plan (the request) is sent
//! only where the chain used to start the run, after the admission (and, in `fail` mode,
//! the intent's record). An admission that refuses (rate limit, budget, kill switch, a
//! replayed key) withdraws the run: the helper sees the end of its plan and exits, and its
//! directories are removed before the refusal is answered. The price of a refusal is a
//! helper started for nothing; what the overlap saves is the shorter of the two waits. So
//! that a flood of requests bound to be refused does not pay a helper each, a tenant whose
//! admission was refused (rate limit, budget, kill switch) starts its next sandboxes after
//! the admission again, for the rate limit's retry time or [`HOLD_AFTER_REFUSAL`]
//! ([`Refusals`]).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sandboxio_core::{
    ExecRequest, ExecResult, IsolationTier, Layer, OperationArgs, OperationStatus,
};
use sandboxio_sandbox::{CancelToken, SandboxError, StreamIo};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::stop::{RunCtx, Stop};
use super::{Gateway, Submission};

type SandboxRun = Pin<Box<dyn Future<Output = Result<ExecResult, SandboxError>> + Send>>;

/// What [`Gateway::launch`] set up for one sandbox run.
pub(super) struct Launch {
    /// The request as resolved: exactly what was decided, fingerprinted and approved.
    pub(super) req: Arc<ExecRequest>,
    pub(super) tier: IsolationTier,
    pub(super) token: CancelToken,
    /// A browse's screenshot directory (removed when this is dropped).
    pub(super) scratch: Option<crate::browse::answer::Scratch>,
    /// The copy of the input directory the program reads (removed when this is dropped).
    pub(super) snapshot: Option<tempfile::TempDir>,
    /// The live I/O, for a run that is not a plain sandbox (a code context's executor, or
    /// a sandbox with network and its egress proxy): those start only at [`Gateway::run`].
    pub(super) io: Option<StreamIo>,
    /// The task that redacts live output on its way to the caller.
    pub(super) forward: Option<JoinHandle<()>>,
    /// A plain sandbox run, already started (held at its release when started early).
    pub(super) plain: Option<Plain>,
}

/// A plain sandbox run: the future, its answer if it ended before the release (an error
/// while preparing), and the release.
pub(super) struct Plain {
    run: SandboxRun,
    done: Option<Result<ExecResult, SandboxError>>,
    release: Option<oneshot::Sender<bool>>,
}

impl Gateway {
    /// Sets up the sandbox run of an exec, run_code or browse. With `early`, a plain
    /// sandbox run is held at its release until [`Launch::plain_result`]; without it, it starts
    /// when first awaited.
    pub(super) fn launch(
        &self,
        sub: &Submission,
        ctx: &mut RunCtx,
        early: bool,
    ) -> Result<Launch, Stop> {
        let op = &sub.op;
        // Leftovers of crashed runs: swept beside this process's first sandbox.
        self.sweep.start_once();
        let mut req = op
            .exec
            .clone()
            .unwrap_or_else(|| ExecRequest::new(Vec::<String>::new()));
        // A browse's screenshot lands in a private scratch directory, removed when the run
        // is done (the browser's profile and cache die with the sandbox's /tmp).
        let scratch = match &op.args {
            OperationArgs::Browse { .. } => {
                let s = crate::browse::answer::Scratch::new().map_err(|e| {
                    let mut s = Stop::deny(
                        Layer::Sandbox,
                        format!("cannot create the browse's scratch directory: {e}"),
                    )
                    .code(crate::browse::BROWSE_SCRATCH);
                    s.status = OperationStatus::Error;
                    s
                })?;
                req.output_dir = Some(s.output_dir());
                Some(s)
            }
            _ => None,
        };
        // An approved run reads the copy of its input taken after the approval.
        let snapshot = ctx.input_snapshot.take();
        if let Some(s) = &snapshot {
            req.input_dir = Some(s.path().join(super::pins::SNAPSHOT_INPUT));
        }
        let req = Arc::new(req);
        let tier = op.tier.unwrap_or(self.cfg.default_tier);
        let token = sub.cancel.clone().unwrap_or_default();
        let mut io = ctx.stream.take().unwrap_or_default();
        // Output leaves redacted: the sandbox sends to the forwarder, which sends on.
        let forward = match (io.events.take(), ctx.redactor.clone()) {
            (Some(out), _) if sub.protocol_output => {
                io.events = Some(out);
                None
            }
            (Some(out), Some(r)) => {
                let (tx, task) = crate::stream::redacting_forwarder(r, out);
                io.events = Some(tx);
                Some(task)
            }
            _ => None,
        };
        let (io, plain) = if sub.executor.is_some() || Self::needs_egress(&req, tier) {
            (Some(io), None)
        } else {
            let release = early.then(|| {
                let (tx, rx) = oneshot::channel();
                io.release = Some(rx);
                tx
            });
            let (r, cfg, t) = (req.clone(), self.sandbox.clone(), token.clone());
            let run: SandboxRun = Box::pin(async move {
                sandboxio_sandbox::run_streaming(&r, tier, &cfg, Some(t), io).await
            });
            (
                None,
                Some(Plain {
                    run,
                    done: None,
                    release,
                }),
            )
        };
        Ok(Launch {
            req,
            tier,
            token,
            scratch,
            snapshot,
            io,
            forward,
            plain,
        })
    }
}

impl Launch {
    /// Awaits `f` (the admission) while the sandbox prepares itself. `f` is polled first,
    /// so its store work is under way on the blocking pool while this task prepares.
    pub(super) async fn alongside<T>(&mut self, f: impl Future<Output = T>) -> T {
        let Some(p) = self.plain.as_mut() else {
            return f.await;
        };
        tokio::pin!(f);
        loop {
            tokio::select! {
                biased;
                out = &mut f => return out,
                r = &mut p.run, if p.done.is_none() => p.done = Some(r),
            }
        }
    }

    /// Withdraws a run that must not happen, and waits until the sandbox has cleaned up.
    pub(super) async fn withdraw(self) {
        drop(self.forward);
        // A run that was never started early was never polled: dropping it is enough.
        if let Some(mut p) = self.plain {
            if let Some(tx) = p.release.take() {
                let _ = tx.send(false);
                if p.done.is_none() {
                    let _ = p.run.await;
                }
            }
        }
    }

    /// Releases a plain run and awaits its end.
    pub(super) async fn plain_result(plain: Plain) -> Result<ExecResult, SandboxError> {
        let Plain { run, done, release } = plain;
        if let Some(tx) = release {
            let _ = tx.send(true);
        }
        match done {
            Some(r) => r,
            None => run.await,
        }
    }
}

/// How long a tenant's sandboxes wait for their admission after a budget or kill-switch
/// refusal (a rate limit's own retry time is used for a rate limit, up to [`HOLD_MAX`]).
pub(super) const HOLD_AFTER_REFUSAL: Duration = Duration::from_secs(5);

/// The longest hold after a rate limit's refusal.
pub(super) const HOLD_MAX: Duration = Duration::from_secs(60);

/// Tenants whose last admission was refused, and until when their sandboxes start after
/// their admission instead of beside it.
#[derive(Default)]
pub(super) struct Refusals(Mutex<HashMap<String, Instant>>);

impl Refusals {
    /// Whether `tenant`'s next sandbox should wait for its admission.
    pub(super) fn holds(&self, tenant: &str) -> bool {
        let now = Instant::now();
        self.0
            .lock()
            .map(|m| m.get(tenant).is_some_and(|until| *until > now))
            .unwrap_or(true)
    }

    /// `tenant` was refused: hold its early starts for `hold` (capped at [`HOLD_MAX`]).
    pub(super) fn note(&self, tenant: &str, hold: Duration) {
        let now = Instant::now();
        if let Ok(mut m) = self.0.lock() {
            m.retain(|_, until| *until > now);
            m.insert(tenant.to_string(), now + hold.min(HOLD_MAX));
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_holds_back_its_own_tenant_for_its_time_only() {
        let r = Refusals::default();
        assert!(!r.holds("a"));
        r.note("a", Duration::from_secs(30));
        assert!(r.holds("a"));
        assert!(!r.holds("b"), "another tenant is not held back");
        r.note("b", Duration::ZERO);
        assert!(!r.holds("b"), "a hold that has run out holds nothing");
        // Holds that ran out are dropped at the next refusal: the map stays small.
        r.note("c", Duration::from_secs(30));
        let mut kept: Vec<String> = r.0.lock().unwrap().keys().cloned().collect();
        kept.sort();
        assert_eq!(kept, ["a", "c"]);
        // A rate limit's retry time is capped.
        r.note("d", Duration::from_secs(3600));
        let until = r.0.lock().unwrap()["d"];
        assert!(until <= Instant::now() + HOLD_MAX);
    }
}
