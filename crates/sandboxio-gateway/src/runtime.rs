//! The runtime: one composition root, built from a [`Config`], that every front end uses
//! (the CLI today; the server, MCP and Python front ends too). It opens the store, loads the
//! policy, builds the redaction and the audit sinks, configures the sandbox and wires them
//! into one [`Gateway`]. Front ends parse their own input and call the runtime; none of
//! them wires layers by hand.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sandboxio_audit::{
    AuditConfig, AuditError, AuditKey, AuditSink, Auditor, FileSink, FileSinkOptions, LoggingSink,
    MetricsTap, OnSinkFailure, Redactor,
};
use sandboxio_budget::{BudgetConfig, BudgetError, RateLimitsConfig};
use sandboxio_config::Config;
use sandboxio_core::{ErrorCode, ExecRequest};
use sandboxio_egress::secrets::{KeySource, SecretError, SecretStore};
use sandboxio_policy::{PolicyError, PolicySet, PolicySource};
use thiserror::Error;

use crate::approval::Approver;
use crate::chain::Gateway;
use crate::config::GatewayConfig;
use crate::error::GatewayError;
use crate::policy::PolicySetEngine;
use crate::redaction::Redaction;
use crate::store::{PgOptions, PgStore, StateFiles, Store, SyncMode};
use crate::tool::Tool;

/// Why the runtime could not be built. Each variant keeps the code of its cause.
#[derive(Debug, Error)]
pub enum RuntimeError {
    #[error(transparent)]
    Store(#[from] GatewayError),
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error(transparent)]
    Budget(#[from] BudgetError),
    #[error(transparent)]
    Audit(#[from] AuditError),
    #[error(transparent)]
    Egress(#[from] sandboxio_egress::EgressError),
}

impl ErrorCode for RuntimeError {
    fn code(&self) -> &'static str {
        match self {
            RuntimeError::Store(e) => e.code(),
            RuntimeError::Policy(e) => e.code(),
            RuntimeError::Budget(e) => e.code(),
            RuntimeError::Audit(e) => e.code(),
            RuntimeError::Egress(e) => e.code(),
        }
    }
    fn class(&self) -> sandboxio_core::ErrorClass {
        match self {
            RuntimeError::Store(e) => e.class(),
            RuntimeError::Policy(e) => e.class(),
            RuntimeError::Budget(e) => e.class(),
            RuntimeError::Audit(e) => e.class(),
            RuntimeError::Egress(e) => e.class(),
        }
    }
}

/// What a front end decides before the runtime is built.
#[derive(Clone)]
pub struct RuntimeOptions {
    pub config: Config,
    /// Where the state database, the audit trail and its key live.
    pub state_dir: PathBuf,
    /// Policy files; empty means the config's, and then the built-in default policy.
    pub policy_files: Vec<PathBuf>,
    /// Overrides the configured approval timeout.
    pub approval_timeout: Option<Duration>,
    /// How asks get answered (default: a person, through the store).
    pub approver: Approver,
    /// The host environment, for redacting credential-shaped values everywhere.
    pub env: Vec<(String, String)>,
    /// A second reader of the metric observations (the server's `/metrics` and dashboard).
    pub metrics_tap: Option<Arc<dyn MetricsTap>>,
    /// What an embedding front end sets for its own instance (never global state).
    pub embed: Embedding,
    /// The key that seals stored secrets (default: [`secrets_key`] from the environment).
    pub secrets_key: KeySource,
    /// The configuration file in use, and where the front end looks for one by default:
    /// no writable mount may hold them (see `GatewayConfig::write_protected`).
    pub config_files: Vec<PathBuf>,
}

/// Settings an embedding front end (the Python package) gives its runtime on top of the
/// configuration: its own audit sinks, overrides of `[audit]`, and named tools.
#[derive(Clone, Default)]
pub struct Embedding {
    /// Sinks offered every event after the configured ones (trail first).
    pub sinks: Vec<Arc<dyn AuditSink>>,
    /// Overrides `[audit] on_sink_failure`.
    pub on_sink_failure: Option<OnSinkFailure>,
    /// Overrides `[audit] capture_code`.
    pub capture_code: Option<bool>,
    /// Overrides `SBX_AUDIT_TIMEOUT` (the bound on each sink's `emit`).
    pub sink_timeout: Option<Duration>,
    /// Tools for `tool_call` operations, by name.
    pub tools: Vec<(String, Arc<dyn Tool>)>,
    /// The sandbox helper binary, when the embedding process cannot be it (a Python
    /// interpreter): `sandboxio-helper` or the `sandboxio` binary. `None`: `$SBX_HELPER`,
    /// else the running executable.
    pub helper: Option<PathBuf>,
}

impl RuntimeOptions {
    pub fn new(config: Config, state_dir: PathBuf) -> Self {
        RuntimeOptions {
            config,
            state_dir,
            policy_files: Vec::new(),
            approval_timeout: None,
            approver: Approver::Store {
                poll: Duration::from_millis(200),
            },
            env: Vec::new(),
            metrics_tap: None,
            embed: Embedding::default(),
            secrets_key: secrets_key(|k| std::env::var(k).ok()),
            config_files: Vec::new(),
        }
    }
}

/// A ready gateway and what it was built from.
pub struct Runtime {
    gateway: Arc<Gateway>,
    store: Arc<dyn Store>,
    config: Config,
    state_dir: PathBuf,
    secrets_key: KeySource,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "<Runtime state_dir={} {:?}>",
            self.state_dir.display(),
            self.gateway
        )
    }
}

impl Runtime {
    /// Builds everything from `opts`. Nothing runs yet; call [`Runtime::recover`] next.
    pub fn open(opts: RuntimeOptions) -> Result<Runtime, RuntimeError> {
        let mut cfg = gateway_config(&opts.config, opts.approval_timeout)?;
        // No mount may reach the state (database, trail, signing key) or the policy.
        let key_file = match &opts.secrets_key {
            KeySource::File(p) => Some(p.as_path()),
            KeySource::Value { .. } => None,
        };
        cfg.protected_paths = std::iter::once(opts.state_dir.as_path())
            .chain(opts.policy_files.iter().map(|p| p.as_path()))
            .chain(key_file)
            .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf()))
            .collect();
        cfg.write_protected = opts
            .config_files
            .iter()
            .map(|p| crate::chain::resolve_path_to_be(p).unwrap_or_else(|_| p.to_path_buf()))
            .collect();
        // The policy first: a policy that cannot be loaded leaves the state untouched.
        let policy = load_policy(&opts.config, &opts.policy_files)?;
        let store = open_store(&opts.config, &opts.state_dir)?;
        // `[[secrets]]`: values read once (env: the host environment the front end gave,
        // else this process's), each redacted everywhere like any known secret.
        let host_env = opts.env.clone();
        let lookup = move |k: &str| {
            host_env
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
                .or_else(|| std::env::var(k).ok())
        };
        let edge_secrets = crate::edge::EdgeSecrets::load(
            &cfg.secrets,
            cfg.upstream_ca.as_deref(),
            &lookup,
            || secret_store(&opts.state_dir, opts.secrets_key.clone()),
        )?;
        let redaction =
            Redaction::from_env(opts.env.clone()).with_secrets(edge_secrets.redaction_secrets());
        let auditor = auditor_with(
            &opts.config,
            &opts.state_dir,
            redaction.base()?,
            opts.metrics_tap.clone(),
            &opts.embed,
        )?;
        let sandbox = sandboxio_sandbox::SandboxConfig {
            work_root: opts.config.sandbox.work_root.clone(),
            landlock_fallback: opts.config.sandbox.allow_landlock_fallback,
            cgroup_root: opts.config.sandbox.cgroup_root.clone(),
            helper_path: opts.embed.helper.clone(),
            ..Default::default()
        };
        let engine = Arc::new(PolicySetEngine::new(policy, cfg.default_tier));
        let mut gateway = Gateway::new(
            cfg,
            store.clone(),
            engine,
            auditor,
            redaction,
            sandbox,
            opts.approver,
        );
        gateway = gateway.with_edge_secrets(edge_secrets);
        // Leftovers of crashed runs: owned directories go as soon as their owner is gone,
        // unowned ones (older versions) after the default timeout plus a margin.
        gateway = gateway.with_start_sweep(crate::sweep::StartSweep::new(
            opts.config.sandbox.work_root.clone(),
            opts.config.limits.timeout.0 + Duration::from_secs(600),
        ));
        for (name, tool) in opts.embed.tools {
            gateway = gateway.with_tool(name, tool);
        }
        Ok(Runtime {
            gateway: Arc::new(gateway),
            store,
            config: opts.config,
            state_dir: opts.state_dir,
            secrets_key: opts.secrets_key,
        })
    }

    /// The stored secrets, sealed under this runtime's key.
    pub fn secret_store(&self) -> Result<SecretStore, SecretError> {
        secret_store(&self.state_dir, self.secrets_key.clone())
    }

    /// Where the key that seals values at rest comes from (checked like the secret
    /// store's: never a file inside the state directory). Front ends that keep other
    /// values at rest (the server's sandbox manifests) seal them under it.
    pub fn secrets_key(&self) -> Result<KeySource, SecretError> {
        secret_store(&self.state_dir, self.secrets_key.clone())?;
        Ok(self.secrets_key.clone())
    }

    pub fn gateway(&self) -> &Arc<Gateway> {
        &self.gateway
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// A sandbox request with the configured settings that are not limits (environment
    /// allowlist, network, workspace keeping). Limits stay unset: the gateway resolves
    /// them against `[limits]` and `[limits.max]`.
    pub fn exec_request(&self) -> ExecRequest {
        let mut req = ExecRequest::new(Vec::<String>::new());
        req.network = self.config.network.to_mode();
        req.env_allowlist = self.config.sandbox.env_allowlist.clone();
        req.keep_workspace = self.config.sandbox.keep_workspace;
        req
    }

    /// For a long-running front end (the server): while the returned task runs, work that
    /// dead replicas (or dead local processes) left is marked interrupted and recorded,
    /// its reservations released, every [`sweep_interval`]. Abort the task to stop it.
    pub fn start_sweeper(&self) -> tokio::task::JoinHandle<()> {
        let gw = self.gateway.clone();
        let every = sweep_interval(&self.config);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                match gw.recover_interrupted().await {
                    Ok(0) => {}
                    Ok(n) => tracing::warn!(count = n, "marked work of dead replicas interrupted"),
                    Err(e) => {
                        use sandboxio_core::ErrorCode as _;
                        tracing::warn!(code = e.code(), "looking for interrupted work failed: {e}")
                    }
                }
            }
        })
    }

    /// Finishes what crashed processes left: interrupted operations now; stale cgroups,
    /// and workspaces and staging directories whose owner is gone (also under `[sandbox]
    /// work_root`), before this process's first sandbox ([`crate::sweep`]). Call once at
    /// start.
    pub async fn recover(&self, _max_run: Duration) -> Result<usize, GatewayError> {
        self.gateway.recover().await
    }
}

/// The gateway's settings from the configuration.
pub fn gateway_config(
    c: &Config,
    approval_timeout: Option<Duration>,
) -> Result<GatewayConfig, RuntimeError> {
    let mut g = GatewayConfig {
        default_tier: c.sandbox.tier,
        limits_default: c.limits.to_limits(),
        limits_max: c.limits.max.to_limits(),
        ..GatewayConfig::default()
    };
    // The caller's override, else `[approvals] timeout` (default 300 s).
    g.approval_timeout = approval_timeout.unwrap_or(c.approvals.timeout.0);
    if let Some(r) = c.state.retention {
        g.journal_retention = r.0;
    }
    g.egress = sandboxio_egress::EgressConfig::from_section(&c.network)?;
    g.secrets = sandboxio_egress::edge::SecretSpec::from_sections(&c.secrets)?;
    g.upstream_ca = c.network.upstream_ca.clone();
    if let Some(b) = &c.budget {
        let text = toml::to_string(b).map_err(|e| BudgetError::InvalidConfig {
            key: "budget".into(),
            why: e.to_string(),
        })?;
        g.budget = BudgetConfig::from_toml(&text)?;
    }
    if let Some(r) = &c.rate_limits {
        let limits: RateLimitsConfig =
            toml::Value::Table(r.clone())
                .try_into()
                .map_err(|e: toml::de::Error| BudgetError::InvalidConfig {
                    key: "rate_limits".into(),
                    why: format!(
                        "{} (expected [[rate_limits.limit]] entries with action, limit and optional tenant, agent, per)",
                        e.message().trim_end_matches('.')
                    ),
                })?;
        limits.validate()?;
        g.rate_limits = limits;
    }
    Ok(g)
}

/// The state directory, its database and the audit trail.
pub fn state_files(c: &Config, state_dir: &Path) -> StateFiles {
    StateFiles::new(state_dir, Some(audit_file(c, state_dir)))
}

/// Opens the state store: the shared PostgreSQL store when `[state] url` is set, else the
/// SQLite database in `state_dir` (0700 directory, 0600 files). Either way, a store that
/// holds nothing while this state directory's trail holds records is refused with the
/// recovery command (the state was lost).
pub fn open_store(c: &Config, state_dir: &Path) -> Result<Arc<dyn Store>, RuntimeError> {
    let files = state_files(c, state_dir);
    let Some(url) = &c.state.url else {
        return Ok(Arc::new(files.open_store(SyncMode::Full)?));
    };
    files.prepare_dir()?;
    let mut o = PgOptions::new(url.clone());
    if let Some(p) = c.state.pool {
        o.pool = p.get();
    }
    if let Some(l) = c.state.lease {
        o.lease = l.0;
    }
    let store = PgStore::open(&o)?;
    if store.is_blank()? && files.trail_has_records()? {
        return Err(GatewayError::StateLost {
            db: url.redacted(),
            trail: files.trail.display().to_string(),
            why: "a new, empty shared database".into(),
        }
        .into());
    }
    Ok(Arc::new(store))
}

/// How often a replica of a shared store looks for work that dead replicas left: half
/// the lease, so work is recovered within one and a half leases of its replica's death.
pub fn sweep_interval(c: &Config) -> Duration {
    c.state
        .lease
        .map(|l| l.0)
        .unwrap_or(crate::store::DEFAULT_LEASE)
        / 2
}

/// The policy files named (else the config's), else the built-in default policy.
pub fn load_policy(c: &Config, files: &[PathBuf]) -> Result<PolicySet, RuntimeError> {
    let files = if files.is_empty() {
        c.policy.files.clone()
    } else {
        files.to_vec()
    };
    if files.is_empty() {
        let src = PolicySource::new(
            sandboxio_policy::DEFAULT_POLICY_NAME,
            sandboxio_policy::DEFAULT_POLICY.as_bytes(),
        );
        return Ok(PolicySet::from_sources(&[src])?);
    }
    Ok(PolicySet::load_files(&files)?)
}

/// Where the secrets key comes from: `SBX_SECRETS_KEY` (64 hex digits), else the file
/// `SBX_SECRETS_KEY_FILE`, else `/etc/sandboxio/secrets.key` for root and
/// `$XDG_CONFIG_HOME/sandboxio/secrets.key` (or `~/.config/...`) for others: never the
/// state directory, so a copy of the state alone opens nothing.
pub fn secrets_key(env: impl Fn(&str) -> Option<String>) -> KeySource {
    let set = |k: &str| env(k).filter(|v| !v.is_empty());
    if let Some(hex) = set("SBX_SECRETS_KEY") {
        return KeySource::value("SBX_SECRETS_KEY", hex);
    }
    if let Some(p) = set("SBX_SECRETS_KEY_FILE") {
        return KeySource::File(PathBuf::from(p));
    }
    if is_root() {
        return KeySource::File(PathBuf::from("/etc/sandboxio/secrets.key"));
    }
    // Without HOME, the home `/etc/passwd` gives; never a shared directory such as
    // `/tmp`, where another user could plant the key (or a list of trusted files beside it).
    let base = set("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| set("HOME").map(|h| PathBuf::from(h).join(".config")))
        .or_else(|| {
            passwd_home(effective_uid())
                .filter(|h| h.is_absolute() && h.is_dir())
                .map(|h| h.join(".config"))
        })
        .unwrap_or_else(|| PathBuf::from(NO_HOME));
    KeySource::File(base.join("sandboxio/secrets.key"))
}

/// Where a user without a home keeps nothing: a path that does not exist, so a key or a
/// trust list is never found there (and never created by anyone but root).
pub const NO_HOME: &str = "/nonexistent";

/// The effective uid of this process (the sandbox crate's, for front ends).
pub use sandboxio_sandbox::ids::effective_uid;

/// The home directory `/etc/passwd` gives `uid`, if it names one.
pub fn passwd_home(uid: u32) -> Option<PathBuf> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        match f.as_slice() {
            [_, _, id, _, _, home, ..] if id.parse::<u32>().ok() == Some(uid) => {
                (!home.is_empty()).then(|| PathBuf::from(home))
            }
            _ => None,
        }
    })
}

/// Whether the real uid of this process is root (`/proc/self/status`).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// The stored secrets of `state_dir` (`secrets.json`), sealed under `key`; a key file
/// inside the state directory is refused (the key is kept apart from what it seals).
pub fn secret_store(state_dir: &Path, key: KeySource) -> Result<SecretStore, SecretError> {
    if let KeySource::File(p) = &key {
        let abs = std::path::absolute(p).unwrap_or_else(|_| p.clone());
        let dir = std::path::absolute(state_dir).unwrap_or_else(|_| state_dir.to_path_buf());
        if abs.starts_with(&dir) {
            return Err(SecretError::KeyUnusable {
                source_name: p.display().to_string(),
                why: "the key file is inside the state directory; keep it apart from the state it seals".into(),
            });
        }
    }
    Ok(SecretStore::new(state_dir.join("secrets.json"), key))
}

/// The audit trail file: `[audit] file`, else `audit.jsonl` in the state directory.
pub fn audit_file(c: &Config, state_dir: &Path) -> PathBuf {
    c.audit
        .file
        .clone()
        .unwrap_or_else(|| state_dir.join("audit.jsonl"))
}

/// The auditor: the trail file (hash-chained, signed checkpoints) and the configured sinks.
pub fn auditor(
    c: &Config,
    state_dir: &Path,
    redactor: Arc<Redactor>,
    metrics_tap: Option<Arc<dyn MetricsTap>>,
) -> Result<Auditor, RuntimeError> {
    auditor_with(c, state_dir, redactor, metrics_tap, &Embedding::default())
}

/// The auditor with an embedding front end's own sinks and overrides.
pub fn auditor_with(
    c: &Config,
    state_dir: &Path,
    redactor: Arc<Redactor>,
    metrics_tap: Option<Arc<dyn MetricsTap>>,
    embed: &Embedding,
) -> Result<Auditor, RuntimeError> {
    let a = &c.audit;
    state_files(c, state_dir).prepare_dir()?;
    // A missing key where the trail has records is an error naming `audit rotate-key`.
    let key = Arc::new(AuditKey::load_for_trail(
        &state_dir.join("audit.key"),
        &audit_file(c, state_dir),
    )?);
    // The public half, for `sandboxio audit verify --key` (offline, on another machine).
    let public = state_dir.join("audit.pub");
    if !public.exists() {
        let text = format!("{}\n", key.export_public(sandboxio_audit::DEFAULT_ORIGIN));
        std::fs::write(&public, text).map_err(|e| GatewayError::StateDir {
            path: public.display().to_string(),
            source: e,
        })?;
    }
    let fsync = match a.fsync {
        sandboxio_config::FsyncPolicy::Always => sandboxio_audit::FsyncPolicy::Always,
        sandboxio_config::FsyncPolicy::Never => sandboxio_audit::FsyncPolicy::Never,
    };
    let file = FileSink::open(
        FileSinkOptions::new(audit_file(c, state_dir)).fsync(fsync),
        key,
    )?;
    let mut sinks: Vec<Arc<dyn sandboxio_audit::AuditSink>> = vec![Arc::new(file)];
    if a.log_events {
        sinks.push(Arc::new(LoggingSink::new()));
    }
    sinks.extend(embed.sinks.iter().cloned());
    let mode = match a.on_sink_failure {
        sandboxio_config::OnSinkFailure::Warn => sandboxio_audit::OnSinkFailure::Warn,
        sandboxio_config::OnSinkFailure::Fail => sandboxio_audit::OnSinkFailure::Fail,
    };
    let mut cfg = AuditConfig::from_env()?
        .with_sinks(sinks)
        .on_sink_failure(embed.on_sink_failure.unwrap_or(mode))
        .capture_code(embed.capture_code.unwrap_or(a.capture_code))
        .metrics_tap(metrics_tap);
    if let Some(t) = embed.sink_timeout {
        cfg = cfg.timeout(t);
    }
    Ok(Auditor::new(cfg, redactor))
}
