//! A program that is already running, for an exec or run_code operation to be carried out
//! by instead of a fresh sandbox: a code context's kernel, which keeps its variables between
//! calls. The operation still passes the whole chain (policy sees the code, the fingerprint
//! covers it, the budget reserves at its limits) and leaves its one record; only the last
//! step, the run, is handed over.

use sandboxio_core::{ExecRequest, ExecResult};
use sandboxio_sandbox::CancelToken;
/// The live I/O an executor is handed (re-exported for front ends, which do not depend on
/// the sandbox crate).
pub use sandboxio_sandbox::StreamIo;

/// Carries out one resolved request. `io.events` receives output as it happens (redacted by
/// the gateway before the caller sees it); `cancel` ends the run early.
/// Nothing here runs in a fresh sandbox: the executor answers for its own isolation.
#[async_trait::async_trait]
pub trait Executor: Send + Sync {
    /// The result (exit status, output, usage) and, optionally, structured output for the
    /// caller (a context's value, rich results, the error), or why it could not run.
    async fn run(
        &self,
        req: &ExecRequest,
        io: StreamIo,
        cancel: CancelToken,
    ) -> Result<(ExecResult, Option<serde_json::Value>), Unrunnable>;
}

/// Why an executor could not carry a request out: a stable code (the front end's own) and
/// a message for the record.
#[derive(Debug, Clone)]
pub struct Unrunnable {
    pub code: &'static str,
    pub message: String,
}
