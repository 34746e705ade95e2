//! Who is subscribed to which upstream resource: per (upstream, the upstream's own URI),
//! the downstream MCP sessions that subscribed through the proxy. An upstream's
//! `notifications/resources/updated` goes to exactly those sessions, with the URI they
//! know (namespaced); the upstream is told to unsubscribe only when the last of them left.

use std::collections::BTreeMap;
use std::sync::Mutex;

use rmcp::model::ResourceUpdatedNotificationParam;
use rmcp::service::Peer;
use rmcp::RoleServer;

use super::uri;

/// One downstream session's subscription.
struct Subscriber {
    session: u64,
    peer: Peer<RoleServer>,
}

#[derive(Default)]
pub(crate) struct Subscriptions {
    map: Mutex<BTreeMap<(String, String), Vec<Subscriber>>>,
}

impl Subscriptions {
    /// Adds `session` as a subscriber of `own` at `upstream` (idempotent).
    pub(crate) fn add(&self, upstream: &str, own: &str, session: u64, peer: Peer<RoleServer>) {
        let Ok(mut map) = self.map.lock() else { return };
        let subs = map
            .entry((upstream.to_string(), own.to_string()))
            .or_default();
        subs.retain(|s| !s.peer.is_transport_closed());
        if !subs.iter().any(|s| s.session == session) {
            subs.push(Subscriber { session, peer });
        }
    }

    /// Removes `session`; true when nobody (still connected) is subscribed to the URI any
    /// more, so the upstream may be told.
    pub(crate) fn remove(&self, upstream: &str, own: &str, session: u64) -> bool {
        let Ok(mut map) = self.map.lock() else {
            return false;
        };
        let key = (upstream.to_string(), own.to_string());
        let Some(subs) = map.get_mut(&key) else {
            return true;
        };
        subs.retain(|s| s.session != session && !s.peer.is_transport_closed());
        if subs.is_empty() {
            map.remove(&key);
            return true;
        }
        false
    }

    /// Whether `session` is subscribed to `own` at `upstream`.
    pub(crate) fn has(&self, upstream: &str, own: &str, session: u64) -> bool {
        self.map.lock().is_ok_and(|m| {
            m.get(&(upstream.to_string(), own.to_string()))
                .is_some_and(|v| v.iter().any(|s| s.session == session))
        })
    }

    /// The URIs of `upstream` someone is subscribed to (to subscribe again after a restart).
    pub(crate) fn uris(&self, upstream: &str) -> Vec<String> {
        self.map
            .lock()
            .map(|m| {
                m.keys()
                    .filter(|(u, _)| u == upstream)
                    .map(|(_, own)| own.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The upstream said `own` changed: tells each subscribed session, under its
    /// namespaced URI. Sessions that went away are forgotten.
    pub(crate) fn updated(&self, upstream: &str, own: &str) {
        let peers: Vec<Peer<RoleServer>> = {
            let Ok(mut map) = self.map.lock() else { return };
            let Some(subs) = map.get_mut(&(upstream.to_string(), own.to_string())) else {
                return;
            };
            subs.retain(|s| !s.peer.is_transport_closed());
            subs.iter().map(|s| s.peer.clone()).collect()
        };
        let wrapped = uri::wrap(upstream, own);
        for p in peers {
            let wrapped = wrapped.clone();
            tokio::spawn(async move {
                let _ = p
                    .notify_resource_updated(ResourceUpdatedNotificationParam::new(wrapped))
                    .await;
            });
        }
    }
}
