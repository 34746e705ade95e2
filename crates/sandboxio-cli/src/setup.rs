//! From flags and config files to a ready gateway.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Result;
use sandboxio_config::Config;
use sandboxio_gateway::store::{StateFiles, Store};

use crate::args::Common;

/// A loaded configuration with where it came from.
pub struct Loaded {
    pub config: Config,
    pub state_dir: PathBuf,
    /// The configuration file read (`--config`, or `./sandboxio.toml`), absolute.
    pub config_file: Option<PathBuf>,
    /// Where a command without `--config` looks for one (`./sandboxio.toml`), absolute.
    pub default_config: Option<PathBuf>,
}

/// The file a command without `--config` reads when it exists.
pub const DEFAULT_CONFIG: &str = "sandboxio.toml";

/// Loads `--config`, else `./sandboxio.toml` when present, else the defaults.
pub fn load(common: &Common) -> Result<Loaded> {
    let (config, config_file) = match &common.config {
        Some(p) => (Config::load(p)?, Some(p.clone())),
        None if std::fs::symlink_metadata(DEFAULT_CONFIG).is_ok() => {
            // Found, not named: read only when these exact bytes were trusted.
            let (config, bytes) = Config::load_bytes(Path::new(DEFAULT_CONFIG))?;
            let abs = crate::paths::absolute(Path::new(DEFAULT_CONFIG))?;
            if !crate::trust::is_trusted(&abs, &bytes) {
                return Err(crate::error::CliError::UntrustedConfig { path: abs }.into());
            }
            (config, Some(PathBuf::from(DEFAULT_CONFIG)))
        }
        None => (Config::default(), None),
    };
    let state_dir = crate::paths::absolute(&state_dir(common, &config)?)?;
    let config_file = config_file
        .map(|p| crate::paths::absolute(&p))
        .transpose()?;
    let default_config = crate::paths::absolute(Path::new(DEFAULT_CONFIG)).ok();
    Ok(Loaded {
        config,
        state_dir,
        config_file,
        default_config,
    })
}

/// A `sandboxio.toml` that appeared at `path` while a sandbox ran (none was there before):
/// renamed to `sandboxio.toml.planted-<seconds>` with a warning, so no later command reads
/// it. Best effort: a failure to rename is warned about too.
pub fn set_aside_planted_config(path: &Path) {
    if std::fs::symlink_metadata(path).is_err() {
        return;
    }
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut aside = path.as_os_str().to_os_string();
    aside.push(format!(".planted-{secs}"));
    let aside = PathBuf::from(aside);
    let aside_text = aside.display().to_string();
    let path_text = path.display().to_string();
    let shown = crate::output::escape::field(&path_text);
    match std::fs::rename(path, &aside) {
        Ok(()) => crate::out::errln!(
            "warning: `{shown}` appeared while the sandbox ran (a program with a writable mount \
             of this directory can write it): moved to `{}`, not read",
            crate::output::escape::field(&aside_text)
        ),
        Err(e) => crate::out::errln!(
            "warning: `{shown}` appeared while the sandbox ran (a program with a writable mount \
             of this directory can write it) and could not be moved aside ({e}): remove it \
             before the next command reads it"
        ),
    }
}

/// `--state-dir`, `$SBX_STATE_DIR`, `[state] dir`, `/var/lib/sandboxio` for root, else
/// `$XDG_STATE_HOME/sandboxio` or `~/.local/state/sandboxio`. Without `$HOME` the home
/// directory `/etc/passwd` gives the user is taken when it exists; never a shared
/// directory such as `/tmp`, where another user could move the state away.
fn state_dir(common: &Common, config: &Config) -> Result<PathBuf, crate::error::CliError> {
    if let Some(d) = &common.state_dir {
        return Ok(d.clone());
    }
    if let Some(d) = std::env::var_os("SBX_STATE_DIR").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(d));
    }
    if let Some(d) = &config.state.dir {
        return Ok(d.clone());
    }
    if is_root() {
        return Ok(PathBuf::from("/var/lib/sandboxio"));
    }
    if let Some(d) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(d).join("sandboxio"));
    }
    if let Some(home) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(home).join(".local/state/sandboxio"));
    }
    let uid = sandboxio_gateway::runtime::effective_uid();
    match sandboxio_gateway::runtime::passwd_home(uid) {
        Some(home) if home.is_absolute() && home.is_dir() => {
            Ok(home.join(".local/state/sandboxio"))
        }
        Some(home) => Err(crate::error::CliError::NoStateDir {
            why: format!(
                "HOME is not set and the home directory of uid {uid} (`{}`) is not a directory",
                home.display()
            ),
        }),
        None => Err(crate::error::CliError::NoStateDir {
            why: format!("HOME is not set and uid {uid} has no home directory in /etc/passwd"),
        }),
    }
}

fn is_root() -> bool {
    sandboxio_gateway::runtime::is_root()
}

impl Loaded {
    /// The runtime every command that submits operations uses (one composition root).
    pub fn runtime(&self, common: &Common, approval_timeout: Option<Duration>) -> Result<Runtime> {
        self.runtime_with(
            common,
            approval_timeout,
            sandboxio_gateway::Approver::Store {
                poll: Duration::from_millis(200),
            },
            None,
        )
    }

    /// The runtime with a front end's own approver and metrics tap (the server's
    /// `/metrics` and dashboard).
    pub fn runtime_with(
        &self,
        common: &Common,
        approval_timeout: Option<Duration>,
        approver: sandboxio_gateway::Approver,
        metrics_tap: Option<std::sync::Arc<dyn sandboxio_gateway::MetricsTap>>,
    ) -> Result<Runtime> {
        let mut opts = RuntimeOptions::new(self.config.clone(), self.state_dir.clone());
        opts.approver = approver;
        opts.metrics_tap = metrics_tap;
        opts.policy_files = common.policies.clone();
        opts.approval_timeout = approval_timeout;
        // No writable mount may hold the configuration in use, nor the one a later
        // command without `--config` would read.
        opts.config_files = self
            .config_file
            .iter()
            .chain(self.default_config.iter())
            .cloned()
            .chain(std::iter::once(crate::trust::store_path()))
            .collect();
        let (env, skipped) = crate::hostenv::utf8_vars();
        if skipped > 0 {
            tracing::warn!(
                skipped,
                "environment variables that are not UTF-8 were skipped (not scanned for credentials)"
            );
        }
        opts.env = env;
        Ok(Runtime::open(opts)?)
    }

    /// The state directory, its database and the audit trail.
    pub fn state_files(&self) -> StateFiles {
        runtime::state_files(&self.config, &self.state_dir)
    }

    /// Opens the state (0700 directory, 0600 files); a lost or damaged database where a
    /// trail exists is refused with the recovery command.
    pub fn open_store(&self) -> Result<Arc<dyn Store>> {
        Ok(runtime::open_store(&self.config, &self.state_dir)?)
    }

    pub fn audit_file(&self) -> PathBuf {
        runtime::audit_file(&self.config, &self.state_dir)
    }
}

use std::time::Duration;

use sandboxio_gateway::layers::budget::ScopeKey;
use sandboxio_gateway::runtime;
use sandboxio_gateway::{GatewayConfig, Runtime, RuntimeOptions};

pub fn gateway_config(
    loaded: &Loaded,
    approval_timeout: Option<Duration>,
) -> Result<GatewayConfig> {
    Ok(runtime::gateway_config(&loaded.config, approval_timeout)?)
}

/// The budget scopes a tenant's operations are charged to.
pub fn scopes_for(tenant: &str) -> Vec<ScopeKey> {
    vec![ScopeKey::Global, ScopeKey::Tenant(tenant.to_string())]
}

/// Who is acting, for the records of operator actions.
pub fn actor() -> String {
    let user = std::env::var("SUDO_USER")
        .or_else(|_| std::env::var("USER"))
        .unwrap_or_else(|_| "operator".into());
    format!("cli:{user}")
}

/// What the state store lacks that its audit trail records (`store::lost_work`): checked
/// from the head kept for the trail, or from the trail's first record when none is kept
/// (heads are kept by the trail's canonical path: a state directory moved elsewhere has
/// none), as every start checks.
pub fn lost_work(
    loaded: &Loaded,
    store: &dyn Store,
) -> Result<Option<sandboxio_gateway::store::LostWork>> {
    use sandboxio_gateway::layers::audit::{trail_id, SignedHead};
    let id = trail_id(&loaded.state_files().trail);
    let head = store
        .heads()?
        .into_iter()
        .find(|h| h.trail == id)
        .unwrap_or_else(|| SignedHead::genesis(id));
    let retention = gateway_config(loaded, None)?.journal_retention;
    let since = sandboxio_gateway::store::not_before(chrono::Utc::now(), retention);
    Ok(sandboxio_gateway::store::lost_work(store, &head, since)?)
}
