//! `sandboxio keys create|list|revoke`: API keys for the HTTP API, kept hashed in the state
//! store. A key's secret is printed once, at creation.

use anyhow::Result;
use chrono::Utc;
use sandboxio_gateway::credential::Scopes;
use sandboxio_server::ServerError;

use crate::args::{Common, KeysCmd};
use crate::exit;
use crate::out::{errln, outln};
use crate::setup;

/// Creating and revoking are operator actions through the gateway (each leaves a record
/// naming the actor); listing reads the store.
pub async fn keys(common: &Common, cmd: KeysCmd) -> Result<i32> {
    let loaded = setup::load(common)?;
    match cmd {
        KeysCmd::Create {
            tenant,
            scopes,
            label,
        } => {
            let scopes: Scopes = scopes.parse().map_err(|why| ServerError::BadValue {
                field: "scopes",
                why,
            })?;
            if let Some(why) = sandboxio_core::tenant_problem(&tenant) {
                return Err(ServerError::BadValue {
                    field: "tenant",
                    why: why.into(),
                }
                .into());
            }
            let rt = loaded.runtime(common, None)?;
            // Like every operator action: not on a store that lost work (its new head
            // would hide the loss).
            rt.gateway().check_anchor().await?;
            rt.gateway().recover_interrupted().await?;
            let m = rt
                .gateway()
                .create_key(&setup::actor(), &tenant, scopes, &label)
                .await?;
            if common.json {
                let v = serde_json::json!({
                    "id": m.credential.id,
                    "token": m.token,
                    "tenant": m.credential.tenant,
                    "scopes": m.credential.scopes,
                });
                outln!("{}", crate::out::compact(&v)?)?;
            } else {
                outln!("{}", m.token)?;
                errln!(
                    "created key {} for tenant `{}` with scopes {} (the secret above is shown once)",
                    m.credential.id,
                    crate::output::escape::field(&m.credential.tenant),
                    m.credential.scopes
                );
            }
        }
        KeysCmd::List { tenant } => {
            let list = loaded.open_store()?.list_credentials(tenant.as_deref())?;
            let now = Utc::now();
            if common.json {
                outln!("{}", crate::out::pretty(&list)?)?;
            } else if list.is_empty() {
                outln!("no keys")?;
            } else {
                for c in list {
                    let state = if c.revoked_at.is_some() {
                        "revoked"
                    } else if c.is_live(now) {
                        "live"
                    } else {
                        "expired"
                    };
                    outln!(
                        "{}  {:10}  {:7}  tenant={}  scopes={}{}{}",
                        c.id,
                        c.kind.as_str(),
                        state,
                        crate::output::escape::field(&c.tenant),
                        c.scopes,
                        c.sandbox
                            .as_deref()
                            .map(|s| format!("  sandbox={s}"))
                            .unwrap_or_default(),
                        if c.label.is_empty() {
                            String::new()
                        } else {
                            format!("  label={}", crate::output::escape::field(&c.label))
                        },
                    )?;
                }
            }
        }
        KeysCmd::Revoke { id } => {
            let rt = loaded.runtime(common, None)?;
            rt.gateway().check_anchor().await?;
            rt.gateway().recover_interrupted().await?;
            rt.gateway().revoke_key(&setup::actor(), &id).await?;
            outln!("revoked {id}")?;
        }
    }
    Ok(exit::OK)
}
