//! `Sandbox`: a session handle with a workspace that outlives single operations. Every
//! call on it is one operation through the whole chain (one record each).
//!
//! The workspace is a host directory: programs see it read-only at `$SANDBOX_INPUT` and
//! write to `$SANDBOX_OUTPUT`, whose files are copied back into it; `read_file`,
//! `write_file`, `delete_file` and `list_files` operate on it, confined beneath it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use sandboxio_core::{
    Capability, ExecRequest, IsolationTier, Language, Operation, OperationArgs, Principal,
};

use crate::chain::{Gateway, Outcome, Submission};
use crate::error::GatewayError;

/// What a front end adds to one operation of a session.
#[derive(Default)]
pub struct CallOptions {
    pub secrets: Vec<sandboxio_audit::Secret>,
    pub traceparent: Option<String>,
    pub labels: std::collections::BTreeMap<String, String>,
    pub cancel: Option<sandboxio_sandbox::CancelToken>,
    pub stream: sandboxio_sandbox::StreamIo,
    pub rationale: Option<String>,
    /// Told about the pending approval as soon as an `ask` waits (see `Submission`).
    pub approval_pending: Option<tokio::sync::mpsc::UnboundedSender<crate::store::Approval>>,
}

pub struct Sandbox {
    gw: Arc<Gateway>,
    id: String,
    tier: IsolationTier,
    principal: Principal,
    dir: PathBuf,
    closed: AtomicBool,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = if self.closed.load(Ordering::SeqCst) {
            "closed"
        } else {
            "running"
        };
        write!(
            f,
            "<Sandbox {}:{}… {} caps={}>",
            self.tier,
            &self.id[..8.min(self.id.len())],
            state,
            self.capabilities()
        )
    }
}

impl Sandbox {
    /// Opens a session: a fresh workspace under `work_root` (the system temp dir by default).
    pub fn create(
        gw: Arc<Gateway>,
        mut principal: Principal,
        tier: Option<IsolationTier>,
        work_root: Option<&Path>,
    ) -> Result<Sandbox, GatewayError> {
        let mut raw = [0u8; 16];
        rand::Rng::fill(&mut rand::thread_rng(), &mut raw);
        let id = hex::encode(raw);
        let root = work_root
            .map(Path::to_path_buf)
            .unwrap_or_else(std::env::temp_dir);
        let dir = root.join(format!("sandboxio-session-{id}"));
        std::fs::create_dir_all(&dir).map_err(|e| GatewayError::StateDir {
            path: dir.display().to_string(),
            source: e,
        })?;
        // Sandboxed programs run as an unprivileged id: they must be able to read it.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).map_err(|e| {
            GatewayError::StateDir {
                path: dir.display().to_string(),
                source: e,
            }
        })?;
        if principal.session.is_none() {
            principal.session = Some(id.clone());
        }
        let tier = tier.unwrap_or(gw.config().default_tier);
        Ok(Sandbox {
            gw,
            id,
            tier,
            principal,
            dir,
            closed: AtomicBool::new(false),
        })
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// Who the session's operations are made as.
    pub fn principal(&self) -> &Principal {
        &self.principal
    }

    pub fn tier(&self) -> IsolationTier {
        self.tier
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    pub fn workspace(&self) -> &Path {
        &self.dir
    }

    pub fn capabilities(&self) -> Capability {
        Capability::EXEC
            | Capability::RUN_CODE
            | Capability::FILESYSTEM
            | Capability::RESOURCE_LIMITS
    }

    fn submission(&self, args: OperationArgs) -> Result<Submission, GatewayError> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(GatewayError::Config {
                why: format!("sandbox {} is closed", self.id),
            });
        }
        let mut op = Operation::new(self.principal.clone(), args);
        op.tier = Some(self.tier);
        let mut sub = Submission::new(op);
        sub.workspace = Some(self.dir.clone());
        sub.labels.insert("sandbox_session".into(), self.id.clone());
        Ok(sub)
    }

    fn with_dirs(&self, exec: Option<ExecRequest>) -> ExecRequest {
        let mut req = exec.unwrap_or_else(|| ExecRequest::new(Vec::<String>::new()));
        req.input_dir = Some(self.dir.clone());
        req.output_dir = Some(self.dir.clone());
        req
    }

    pub async fn exec(
        &self,
        argv: Vec<String>,
        exec: Option<ExecRequest>,
    ) -> Result<Outcome, GatewayError> {
        let mut sub = self.submission(OperationArgs::Exec { argv })?;
        sub.op.exec = Some(self.with_dirs(exec));
        self.gw.submit(sub).await
    }

    pub async fn run_code(
        &self,
        language: Language,
        code: String,
        exec: Option<ExecRequest>,
    ) -> Result<Outcome, GatewayError> {
        let mut sub = self.submission(OperationArgs::RunCode { language, code })?;
        sub.op.exec = Some(self.with_dirs(exec));
        self.gw.submit(sub).await
    }

    /// Loads `url` in a disposable headless browser (namespace tier only, the web only
    /// through the egress proxy, one `net_connect` record per connection). `exec` carries
    /// the network and limits (`Runtime::exec_request` gives the configured ones); without
    /// it the network is `none` and the browse is refused. The answer is
    /// `crate::browse::BrowseAnswer` in the outcome's `tool_output`.
    pub async fn browse(
        &self,
        url: &str,
        screenshot: bool,
        exec: Option<ExecRequest>,
    ) -> Result<Outcome, GatewayError> {
        let mut sub = self.submission(OperationArgs::Browse {
            url: url.into(),
            screenshot,
        })?;
        sub.op.exec = exec;
        self.gw.submit(sub).await
    }

    pub async fn read_file(&self, path: &str) -> Result<Outcome, GatewayError> {
        self.gw
            .submit(self.submission(OperationArgs::FileRead { path: path.into() })?)
            .await
    }

    /// Lists a directory of the workspace (`"."` for its root).
    pub async fn list_files(&self, path: &str) -> Result<Outcome, GatewayError> {
        self.read_file(path).await
    }

    pub async fn write_file(&self, path: &str, content: Vec<u8>) -> Result<Outcome, GatewayError> {
        let mut sub = self.submission(OperationArgs::FileWrite {
            path: path.into(),
            size: content.len() as u64,
            content_sha256: None,
        })?;
        sub.content = Some(content);
        self.gw.submit(sub).await
    }

    pub async fn delete_file(&self, path: &str) -> Result<Outcome, GatewayError> {
        self.gw
            .submit(self.submission(OperationArgs::FileDelete { path: path.into() })?)
            .await
    }

    /// One operation with what a front end adds to it: secrets to redact, the caller's
    /// trace, labels, live I/O and cancellation. `exec` is used by exec and run_code (an
    /// input or output directory it names replaces the workspace for that side),
    /// `content` by file_write.
    pub async fn call(
        &self,
        args: OperationArgs,
        exec: Option<ExecRequest>,
        content: Option<Vec<u8>>,
        extra: CallOptions,
    ) -> Result<Outcome, GatewayError> {
        let runs = matches!(
            args,
            OperationArgs::Exec { .. } | OperationArgs::RunCode { .. }
        );
        let browse = matches!(args, OperationArgs::Browse { .. });
        let mut sub = self.submission(args)?;
        if browse {
            // Network and limits only; the session's directories are not the browser's.
            sub.op.exec = exec;
        } else if runs {
            let (input, output) = exec
                .as_ref()
                .map(|e| (e.input_dir.clone(), e.output_dir.clone()))
                .unwrap_or_default();
            let mut req = self.with_dirs(exec);
            req.input_dir = input.or(req.input_dir);
            req.output_dir = output.or(req.output_dir);
            sub.op.exec = Some(req);
        }
        if let Some(c) = content {
            if let OperationArgs::FileWrite { size, .. } = &mut sub.op.args {
                *size = c.len() as u64;
            }
            sub.content = Some(c);
        }
        sub.secrets = extra.secrets;
        sub.traceparent = extra.traceparent;
        sub.cancel = extra.cancel;
        sub.stream = extra.stream;
        sub.op.rationale = extra.rationale;
        sub.approval_pending = extra.approval_pending;
        sub.labels.extend(extra.labels);
        self.gw.submit(sub).await
    }

    /// Ends the session and removes its workspace.
    pub fn close(&self) {
        if !self.closed.swap(true, Ordering::SeqCst) {
            if let Err(e) = std::fs::remove_dir_all(&self.dir) {
                tracing::warn!(sandbox = %self.id, "removing the session workspace failed: {e}");
            }
        }
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.close();
    }
}
