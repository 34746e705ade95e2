//! Stored secrets as operator actions: sealing and removing each leave a record naming the
//! actor, the secret's name and its bound hosts, never its value.
//!
//! The secrets live in a file, not in the state store, so the change cannot share a
//! transaction with its intent. The action commits its intent first, then changes the
//! file (`Submission::effect`), then writes its record; a change whose record cannot be
//! written is put back. A process killed after the intent leaves it open, and the next
//! start records the action as `interrupted`, saying the secret may or may not have been
//! changed: every change has a record, though one made just before a crash is not known
//! for certain to have been made.

use std::sync::{Arc, Mutex};

use sandboxio_core::AdminAction;
use sandboxio_egress::secrets::{SecretError, SecretStore, SecretValue, Undo};

use super::admin::refused;
use super::{Gateway, Outcome, Submission};
use crate::error::GatewayError;

/// A change outside the store that an operator action makes after committing its intent.
pub(crate) type AdminEffect = Box<dyn FnOnce() -> Result<(), GatewayError> + Send>;

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
        // Refused before anything is journalled: a bad name, bad hosts, a store the key
        // does not open or that is damaged.
        sandboxio_egress::secrets::validate_name(name)?;
        sandboxio_egress::secrets::validate_hosts(hosts)?;
        store.check_change(None)?;
        let value = SecretValue::new(value.expose().to_vec())?;
        let (s, n, h) = (store.clone(), name.to_string(), hosts.to_vec());
        let action = AdminAction::SecretSet {
            name: name.to_string(),
            hosts: hosts.to_vec(),
        };
        self.change_secrets(store, actor, action, move || s.set(&n, &h, &value))
            .await
    }

    /// Removes `name` from `store` as `actor` (recorded).
    pub async fn remove_secret(
        &self,
        store: &SecretStore,
        actor: &str,
        name: &str,
    ) -> Result<Outcome, GatewayError> {
        // Refused before anything is journalled: an unknown name, a store the key does not
        // open or that is damaged.
        store.check_change(Some(name))?;
        let (s, n) = (store.clone(), name.to_string());
        let action = AdminAction::SecretRemove {
            name: name.to_string(),
        };
        self.change_secrets(store, actor, action, move || s.remove(&n))
            .await
    }

    async fn change_secrets(
        &self,
        store: &SecretStore,
        actor: &str,
        action: AdminAction,
        change: impl FnOnce() -> Result<Undo, SecretError> + Send + 'static,
    ) -> Result<Outcome, GatewayError> {
        let name = action.name();
        let undo: Arc<Mutex<Option<Undo>>> = Arc::default();
        let slot = undo.clone();
        let effect: AdminEffect = Box::new(move || {
            let u = change()?;
            if let Ok(mut s) = slot.lock() {
                *s = Some(u);
            }
            Ok(())
        });
        let mut p = sandboxio_core::Principal::tenant("default");
        p.agent = Some(actor.to_string());
        let sub = Submission::new(sandboxio_core::Operation::new(
            p,
            sandboxio_core::OperationArgs::Admin { action },
        ));
        if let Ok(mut e) = sub.effect.lock() {
            *e = Some(effect);
        }
        match self.submit(sub).await {
            Ok(o) if o.allowed() => Ok(o),
            other => {
                // A change made but not recorded is put back (best effort: the error below
                // is what the caller sees either way).
                if let Some(u) = undo.lock().ok().and_then(|mut u| u.take()) {
                    let _ = store.restore(u);
                }
                Err(match other {
                    Ok(o) => refused(name, &o),
                    Err(e) => e,
                })
            }
        }
    }
}
