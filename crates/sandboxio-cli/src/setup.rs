//! From flags and config files to a ready gateway.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Result;
use sandboxio_config::Config;
use sandboxio_gateway::store::{SqliteStore, StateFiles, SyncMode};

use crate::args::Common;

/// A loaded configuration with where it came from.
pub struct Loaded {
    pub config: Config,
    pub state_dir: PathBuf,
}

/// Loads `--config`, else `./sandboxio.toml` when present, else the defaults.
pub fn load(common: &Common) -> Result<Loaded> {
    let config = match &common.config {
        Some(p) => Config::load(p)?,
        None if Path::new("sandboxio.toml").exists() => Config::load(Path::new("sandboxio.toml"))?,
        None => Config::default(),
    };
    let state_dir = crate::paths::absolute(&state_dir(common, &config))?;
    Ok(Loaded { config, state_dir })
}

fn state_dir(common: &Common, config: &Config) -> PathBuf {
    if let Some(d) = &common.state_dir {
        return d.clone();
    }
    if let Some(d) = std::env::var_os("SBX_STATE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = &config.state.dir {
        return d.clone();
    }
    if is_root() {
        return PathBuf::from("/var/lib/sandboxio");
    }
    if let Some(d) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("sandboxio");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    home.join(".local/state/sandboxio")
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

impl Loaded {
    /// The state directory, its database and the audit trail.
    pub fn state_files(&self) -> StateFiles {
        StateFiles::new(&self.state_dir, Some(self.audit_file()))
    }

    /// Opens the state (0700 directory, 0600 files); a lost or damaged database where a
    /// trail exists is refused with the recovery command.
    pub fn open_store(&self) -> Result<Arc<SqliteStore>> {
        Ok(Arc::new(self.state_files().open_store(SyncMode::Full)?))
    }

    pub fn audit_file(&self) -> PathBuf {
        self.config
            .audit
            .file
            .clone()
            .unwrap_or_else(|| self.state_dir.join("audit.jsonl"))
    }
}

use std::time::Duration;

use sandboxio_audit::{
    AuditConfig, AuditKey, Auditor, FileSink, FileSinkOptions, LoggingSink, Redactor,
};
use sandboxio_budget::{BudgetConfig, BudgetError, RateLimitsConfig, ScopeKey};
use sandboxio_gateway::{Approver, Gateway, GatewayConfig};

pub fn gateway_config(
    loaded: &Loaded,
    approval_timeout: Option<Duration>,
) -> Result<GatewayConfig> {
    let c = &loaded.config;
    let mut g = GatewayConfig {
        default_tier: c.sandbox.tier,
        ..GatewayConfig::default()
    };
    // `--approval-timeout`, else `[approvals] timeout` (default 300 s).
    g.approval_timeout = approval_timeout.unwrap_or(c.approvals.timeout.0);
    if let Some(r) = c.state.retention {
        g.journal_retention = r.0;
    }
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
                        "{} (expected [[rate_limits.limit]] entries with action and limit)",
                        e.message().trim()
                    ),
                })?;
        limits.validate()?;
        g.rate_limits = limits;
    }
    Ok(g)
}

/// The budget scopes a tenant's operations are charged to.
pub fn scopes_for(tenant: &str) -> Vec<ScopeKey> {
    vec![ScopeKey::Global, ScopeKey::Tenant(tenant.to_string())]
}

/// Loads the policy files named by flags, else config, else the built-in default.
pub fn policy(loaded: &Loaded, common: &Common) -> Result<sandboxio_policy::PolicySet> {
    let files = if !common.policies.is_empty() {
        common.policies.clone()
    } else {
        loaded.config.policy.files.clone()
    };
    if files.is_empty() {
        let src = sandboxio_policy::PolicySource::new(
            sandboxio_policy::DEFAULT_POLICY_NAME,
            sandboxio_policy::DEFAULT_POLICY.as_bytes(),
        );
        return Ok(sandboxio_policy::PolicySet::from_sources(&[src])?);
    }
    Ok(sandboxio_policy::PolicySet::load_files(&files)?)
}

pub fn auditor(loaded: &Loaded, redactor: Arc<Redactor>) -> Result<Auditor> {
    let a = &loaded.config.audit;
    loaded.state_files().prepare_dir()?;
    // A missing key where the trail has records is an error naming `audit rotate-key`.
    let key = Arc::new(AuditKey::load_for_trail(
        &loaded.state_dir.join("audit.key"),
        &loaded.audit_file(),
    )?);
    // The public half, for `sandboxio audit verify --key` (offline, on another machine).
    let public = loaded.state_dir.join("audit.pub");
    if !public.exists() {
        let text = format!("{}\n", key.export_public(sandboxio_audit::DEFAULT_ORIGIN));
        std::fs::write(&public, text).map_err(|source| sandboxio_audit::AuditError::Io {
            path: public.clone(),
            source,
        })?;
    }
    let fsync = match a.fsync {
        sandboxio_config::FsyncPolicy::Always => sandboxio_audit::FsyncPolicy::Always,
        sandboxio_config::FsyncPolicy::Never => sandboxio_audit::FsyncPolicy::Never,
    };
    let file = FileSink::open(FileSinkOptions::new(loaded.audit_file()).fsync(fsync), key)?;
    let mut sinks: Vec<Arc<dyn sandboxio_audit::AuditSink>> = vec![Arc::new(file)];
    if a.log_events {
        sinks.push(Arc::new(LoggingSink::new()));
    }
    let mode = match a.on_sink_failure {
        sandboxio_config::OnSinkFailure::Warn => sandboxio_audit::OnSinkFailure::Warn,
        sandboxio_config::OnSinkFailure::Fail => sandboxio_audit::OnSinkFailure::Fail,
    };
    let cfg = AuditConfig::from_env()?
        .with_sinks(sinks)
        .on_sink_failure(mode)
        .capture_code(a.capture_code);
    Ok(Auditor::new(cfg, redactor))
}

/// The whole chain, ready to submit operations.
pub fn gateway(
    loaded: &Loaded,
    common: &Common,
    approval_timeout: Option<Duration>,
) -> Result<Gateway> {
    let cfg = gateway_config(loaded, approval_timeout)?;
    let store = loaded.open_store()?;
    let policy = policy(loaded, common)?;
    let (env, skipped) = crate::hostenv::utf8_vars();
    if skipped > 0 {
        tracing::warn!(
            skipped,
            "environment variables that are not UTF-8 were skipped (not scanned for credentials)"
        );
    }
    let redaction = sandboxio_gateway::Redaction::from_env(env);
    let auditor = auditor(loaded, redaction.base()?)?;
    let sandbox = sandboxio_sandbox::SandboxConfig {
        work_root: loaded.config.sandbox.work_root.clone(),
        landlock_fallback: loaded.config.sandbox.allow_landlock_fallback,
        cgroup_root: loaded.config.sandbox.cgroup_root.clone(),
        ..Default::default()
    };
    let engine = Arc::new(sandboxio_gateway::policy::PolicySetEngine::new(
        policy,
        cfg.default_tier,
    ));
    Ok(Gateway::new(
        cfg,
        store,
        engine,
        auditor,
        redaction,
        sandbox,
        Approver::Store {
            poll: Duration::from_millis(200),
        },
    ))
}
