//! What `serve` is told: where to listen and the limits it keeps. Safe defaults as constants.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Largest JSON request body.
pub const JSON_LIMIT: usize = 1 << 20;
/// Largest file upload (the gateway reads files back up to the same size).
pub const UPLOAD_LIMIT: usize = 16 << 20;
/// Requests handled at once; more get 503 with `Retry-After`.
pub const MAX_CONCURRENT: usize = 64;
/// Requests without a known credential (the dashboard's sign-in, which carries its key
/// in the body) reading their bodies at once, beside `MAX_CONCURRENT`.
pub const MAX_UNAUTHENTICATED: usize = 8;
/// Open connections at once; more are closed at accept.
pub const MAX_CONNECTIONS: usize = 1024;
/// Longest a request may take (an exec's own timeout is capped below it).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);
/// Longest a connection may take to send a request's headers, including idle keep-alive.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// On SIGTERM: how long running requests may finish before they are cancelled.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
pub const MAX_SANDBOXES_PER_TENANT: usize = 32;
/// Background processes one tenant may have running at once (over all its sandboxes).
pub const MAX_BACKGROUND_PER_TENANT: usize = 16;
/// Code contexts (kernels) one sandbox may hold.
pub const MAX_CONTEXTS: usize = 4;
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
pub const LIFETIME: Duration = Duration::from_secs(3600);
pub const MAX_LIFETIME: Duration = Duration::from_secs(24 * 3600);
/// Longest a capability token may live.
pub const MAX_TOKEN_TTL: Duration = Duration::from_secs(24 * 3600);
/// Longest a long-poll waits before answering "not yet".
pub const MAX_WAIT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    /// A Unix socket, created with mode 0600.
    Unix(PathBuf),
    Tcp(SocketAddr),
}

impl std::fmt::Display for Listen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Listen::Unix(p) => write!(f, "unix:{}", p.display()),
            Listen::Tcp(a) => write!(f, "{a}"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub listen: Listen,
    pub tls: Option<TlsFiles>,
    /// Where sandbox workspaces live.
    pub workspace_root: PathBuf,
    /// Where sandboxes are written down so that a restart restores them (none: they live
    /// in memory and close at shutdown). `sandboxio serve` uses `<state dir>/sessions`.
    pub sessions_dir: Option<PathBuf>,
    /// The key that seals the environment values in those manifests (the stored
    /// secrets' key, kept outside the state directory); none: a sandbox with `env` is
    /// refused when manifests are kept (`SBX_E1855`).
    pub secrets_key: Option<sandboxio_gateway::egress::secrets::KeySource>,
    pub json_limit: usize,
    pub upload_limit: usize,
    pub max_concurrent: usize,
    /// The most of those one tenant may hold at once (`None`: half of them); more are
    /// refused (429 `SBX_E1818`).
    pub tenant_concurrent: Option<usize>,
    /// Long-polls one tenant may hold at once (`None`: a quarter of its share).
    pub tenant_long_polls: Option<usize>,
    /// Requests whose credential is not known yet that may read their bodies at once.
    pub max_unauthenticated: usize,
    /// Execs and `run_code` calls starting at once; more wait their turn, first come first
    /// served (`crate::starts`). `0`: no bound. Default: two per CPU.
    pub max_starting: usize,
    /// The longest an exec holds its place among those starting (`crate::starts::HOLD`).
    pub start_hold: Duration,
    pub max_connections: usize,
    pub request_timeout: Duration,
    pub header_timeout: Duration,
    pub shutdown_grace: Duration,
    pub max_sandboxes_per_tenant: usize,
    pub max_background_per_tenant: usize,
    /// Tenants with quotas of their own (`[server.tenants.<name>]`); the others have the
    /// server's (`json_limit`, `upload_limit`, `max_sandboxes_per_tenant`,
    /// `max_background_per_tenant`).
    pub tenant_quotas: std::collections::BTreeMap<String, Quota>,
    pub max_contexts: usize,
    pub idle_timeout: Duration,
    pub lifetime: Duration,
    pub max_lifetime: Duration,
    /// How often the idle and lifetime reaper looks.
    pub reap_every: Duration,
    /// The audit trail file, for `GET /v1/audit` (none: the answer is empty).
    pub audit_file: Option<PathBuf>,
}

/// One tenant's quotas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    /// Sandboxes it may hold at once (paused ones count).
    pub max_sandboxes: usize,
    /// Largest JSON request body.
    pub json_limit: usize,
    /// Largest file upload.
    pub upload_limit: usize,
    /// Background processes it may have running at once.
    pub max_background: usize,
}

impl ServeOptions {
    /// The quotas of `tenant`: its own, else the server's.
    pub fn quota(&self, tenant: &str) -> Quota {
        self.tenant_quotas.get(tenant).copied().unwrap_or(Quota {
            max_sandboxes: self.max_sandboxes_per_tenant,
            json_limit: self.json_limit,
            upload_limit: self.upload_limit,
            max_background: self.max_background_per_tenant,
        })
    }

    /// The most requests one tenant may have in progress at once: `tenant_concurrent`, else
    /// half of `max_concurrent` (at least one, at most all).
    pub fn tenant_share(&self) -> usize {
        let max = self.max_concurrent.max(1);
        self.tenant_concurrent.unwrap_or(max / 2).clamp(1, max)
    }

    /// The most long-polls one tenant may hold at once: `tenant_long_polls`, else a quarter
    /// of its share (at least one).
    pub fn tenant_long_polls(&self) -> usize {
        self.tenant_long_polls
            .unwrap_or(self.tenant_share() / 4)
            .max(1)
    }

    pub fn new(listen: Listen, workspace_root: PathBuf) -> ServeOptions {
        ServeOptions {
            listen,
            tls: None,
            workspace_root,
            sessions_dir: None,
            secrets_key: None,
            json_limit: JSON_LIMIT,
            upload_limit: UPLOAD_LIMIT,
            max_concurrent: MAX_CONCURRENT,
            tenant_concurrent: None,
            tenant_long_polls: None,
            max_unauthenticated: MAX_UNAUTHENTICATED,
            max_starting: crate::starts::default_max_starting(),
            start_hold: crate::starts::HOLD,
            max_connections: MAX_CONNECTIONS,
            request_timeout: REQUEST_TIMEOUT,
            header_timeout: HEADER_TIMEOUT,
            shutdown_grace: SHUTDOWN_GRACE,
            max_sandboxes_per_tenant: MAX_SANDBOXES_PER_TENANT,
            max_background_per_tenant: MAX_BACKGROUND_PER_TENANT,
            tenant_quotas: std::collections::BTreeMap::new(),
            max_contexts: MAX_CONTEXTS,
            idle_timeout: IDLE_TIMEOUT,
            lifetime: LIFETIME,
            max_lifetime: MAX_LIFETIME,
            reap_every: Duration::from_secs(1),
            audit_file: None,
        }
    }
}

/// The workspace root of a server keeping its state in `state_dir`: under `base` (the
/// configured work root or the temporary directory), named after the state directory so
/// that a restart finds the same one. Not under the sweep's `sandboxio-` prefix: the sweep
/// of dead runs' leftovers must not take workspaces a restart restores.
pub fn workspace_root_for(base: &std::path::Path, state_dir: &std::path::Path) -> PathBuf {
    use sha2::Digest;
    let abs = std::fs::canonicalize(state_dir).unwrap_or_else(|_| state_dir.to_path_buf());
    let digest = sha2::Sha256::digest(abs.as_os_str().as_encoded_bytes());
    base.join(format!("sbx-serve-{}", &hex::encode(digest)[..16]))
}
