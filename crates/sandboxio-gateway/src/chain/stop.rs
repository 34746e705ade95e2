//! Why the chain stopped early, and what it did before that.

use sandboxio_core::{Decision, ErrorCode, Layer, Money, OperationStatus, Verdict};

use crate::error::GatewayError;
use crate::store::KillState;

/// What the chain did so far, for the closing transaction.
#[derive(Default)]
pub(crate) struct RunCtx {
    /// The admission transaction committed (journal intent, reservation, maybe the key).
    pub(crate) admitted: bool,
    /// (tenant, key) claimed by this operation.
    pub(crate) idem: Option<(String, String)>,
    /// The side effect started (the sandbox or the tool was called).
    pub(crate) ran: bool,
    /// The measured cost to settle.
    pub(crate) charge: Option<Money>,
    /// The program may have run, but nothing measured it (its supervisor died after
    /// starting it): it is charged its reservation, the most it could cost.
    pub(crate) unmeasured: bool,
    /// The caller's live I/O, taken by the run.
    pub(crate) stream: Option<sandboxio_sandbox::StreamIo>,
    /// This request's redactor (for live output).
    pub(crate) redactor: Option<std::sync::Arc<sandboxio_audit::Redactor>>,
    /// An operator action's commit time: its record's time (it orders kills and resumes).
    pub(crate) committed_at: Option<chrono::DateTime<chrono::Utc>>,
    /// The copy of the input directory an approved run reads (`pins::snapshot`).
    pub(crate) input_snapshot: Option<tempfile::TempDir>,
}

/// Why the chain stopped early.
pub(crate) struct Stop {
    pub(crate) verdict: Verdict,
    pub(crate) layer: Layer,
    pub(crate) reason: String,
    pub(crate) code: Option<&'static str>,
    pub(crate) status: OperationStatus,
    pub(crate) retry_after_ms: Option<u64>,
}

impl Stop {
    pub(crate) fn deny(layer: Layer, reason: impl Into<String>) -> Stop {
        Stop {
            verdict: Verdict::Deny,
            layer,
            reason: reason.into(),
            code: None,
            status: OperationStatus::Denied,
            retry_after_ms: None,
        }
    }
    pub(crate) fn code(mut self, code: &'static str) -> Stop {
        self.code = Some(code);
        self
    }
    /// The runtime could not do its job: deny, fail closed.
    pub(crate) fn error(layer: Layer, e: &GatewayError) -> Stop {
        let mut s = Stop::deny(
            layer,
            format!("denied because the {layer} layer failed: {e}"),
        )
        .code(e.code());
        s.status = OperationStatus::Error;
        s
    }
    pub(crate) fn killed(k: &KillState) -> Stop {
        Stop::deny(
            Layer::KillSwitch,
            format!("the kill switch is engaged: {}", k.reason),
        )
        .code(crate::denial::KILL_SWITCH)
    }
    /// A policy deny (the only decision turned into a stop here).
    pub(crate) fn from_decision(d: Decision) -> Stop {
        let mut s = Stop::deny(d.layer, d.reason).code(crate::denial::POLICY);
        s.retry_after_ms = d.retry_after_ms;
        s
    }
}
