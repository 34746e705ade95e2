//! `[server]`: what `sandboxio serve` allows each tenant (quotas, with per-tenant
//! overrides) and where it announces pending approvals (`[server.approval_webhook]`).
//! Unset values keep the server's defaults (or its command-line flags).

use std::collections::BTreeMap;

use sandboxio_core::{ByteSize, HumanDuration};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSection {
    /// Quotas of every tenant without a `[server.tenants.<name>]` of its own (same keys as
    /// [`QuotaSection`]; not flattened, which would defeat `deny_unknown_fields`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_sandboxes: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_background: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_limit: Option<ByteSize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload_limit: Option<ByteSize>,
    /// Execs and `run_code` calls starting at once, server-wide; more wait their turn,
    /// first come first served (`0`: no bound; unset: two per CPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_starting: Option<u32>,
    /// The longest one of them holds its place (it gives it back when it ends, or after
    /// this, so a long-running command keeps no one waiting longer); unset: 100ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_hold: Option<HumanDuration>,
    /// Quotas of particular tenants; a value left out takes the server-wide one.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tenants: BTreeMap<String, QuotaSection>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_webhook: Option<WebhookSection>,
}

impl ServerSection {
    /// The server-wide quotas.
    pub fn quota(&self) -> QuotaSection {
        QuotaSection {
            max_sandboxes: self.max_sandboxes,
            max_background: self.max_background,
            json_limit: self.json_limit,
            upload_limit: self.upload_limit,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaSection {
    /// Sandboxes a tenant may hold at once (paused ones count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_sandboxes: Option<u32>,
    /// Background processes a tenant may have running at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_background: Option<u32>,
    /// Largest JSON request body, e.g. `1MiB`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_limit: Option<ByteSize>,
    /// Largest file upload, e.g. `16MiB`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload_limit: Option<ByteSize>,
}

/// A POST to `url` for every approval that starts waiting, its body signed with
/// HMAC-SHA256 under a secret read from the environment variable `secret_env` (never
/// from this file, never logged).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookSection {
    /// `https://host[:port]/path` (TLS, the receiver's certificate verified), or
    /// `http://` to a loopback address only.
    pub url: String,
    /// A PEM bundle of the CAs that may sign the receiver's certificate (then only these);
    /// unset: the system's roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<std::path::PathBuf>,
    /// The environment variable holding the signing secret.
    #[serde(default = "d_secret_env")]
    pub secret_env: String,
    /// How long one attempt may take.
    #[serde(default = "d_timeout")]
    pub timeout: HumanDuration,
    /// Attempts in all (the first and the retries, with exponential backoff).
    #[serde(default = "d_attempts")]
    pub attempts: u32,
}

fn d_secret_env() -> String {
    "SANDBOXIO_WEBHOOK_SECRET".into()
}

fn d_timeout() -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(5))
}

fn d_attempts() -> u32 {
    5
}
