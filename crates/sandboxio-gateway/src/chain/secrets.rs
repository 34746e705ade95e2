//! Stored secrets as operator actions: sealing and removing each leave a record naming the
//! actor, the secret's name and its bound hosts, never its value. The store is changed
//! first and put back when the record cannot be written, so no change exists unrecorded.

use sandboxio_core::AdminAction;
use sandboxio_egress::secrets::{SecretStore, SecretValue, Undo};

use super::admin::refused;
use super::{Gateway, Outcome};
use crate::error::GatewayError;

impl Gateway {
    /// Seals `value` as `name` in `store`, bound to `hosts`, as `actor` (recorded).
    pub async fn set_secret(
        &self,
        store: &SecretStore,
        actor: &str,
        name: &str,
        hosts: &[String],
        value: &SecretValue,
    ) -> Result<Outcome, GatewayError> {
        let undo = store.set(name, hosts, value)?;
        let action = AdminAction::SecretSet {
            name: name.to_string(),
            hosts: hosts.to_vec(),
        };
        self.record_or_undo(store, undo, actor, action).await
    }

    /// Removes `name` from `store` as `actor` (recorded).
    pub async fn remove_secret(
        &self,
        store: &SecretStore,
        actor: &str,
        name: &str,
    ) -> Result<Outcome, GatewayError> {
        let undo = store.remove(name)?;
        let action = AdminAction::SecretRemove {
            name: name.to_string(),
        };
        self.record_or_undo(store, undo, actor, action).await
    }

    async fn record_or_undo(
        &self,
        store: &SecretStore,
        undo: Undo,
        actor: &str,
        action: AdminAction,
    ) -> Result<Outcome, GatewayError> {
        let name = action.name();
        let out = self.admin("default", actor, action).await;
        match out {
            Ok(o) if o.allowed() => Ok(o),
            other => {
                // Best effort: the error below is what the caller sees either way.
                let _ = store.restore(undo);
                Err(match other {
                    Ok(o) => refused(name, &o),
                    Err(e) => e,
                })
            }
        }
    }
}
