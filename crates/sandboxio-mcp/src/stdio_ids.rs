//! The ids of the stdio client's requests in flight. Each request is handed to the
//! server under an id of its own (a number never used before), mapped back in its
//! answer, so a request's answer or cancellation can never be taken for another's, even
//! when the client reuses an id.
//!
//! A client id stays reserved from its request until it is answered, or, when the
//! client cancelled it, until its handler has actually ended (`Ended` wraps the
//! service to say so): a request reusing it before then is answered `-32600` and not
//! run. A cancelled request's answer is not sent (the client gave up on it).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::model::{NumberOrString, RequestId};
use rmcp::service::{NotificationContext, RequestContext, Service, ServiceRole};
use rmcp::RoleServer;

struct Entry {
    client: RequestId,
    cancelled: bool,
    ended: bool,
}

#[derive(Default)]
struct State {
    next: i64,
    /// Client id -> own id, while reserved.
    by_client: HashMap<RequestId, i64>,
    /// Own id -> its request.
    by_own: HashMap<i64, Entry>,
}

impl State {
    fn release(&mut self, own: i64) -> Option<Entry> {
        let e = self.by_own.remove(&own)?;
        self.by_client.remove(&e.client);
        Some(e)
    }
}

/// The ids in flight, shared by the transport and the service wrapper.
#[derive(Clone, Default)]
pub struct Ids(Arc<Mutex<State>>);

fn own_number(id: &RequestId) -> Option<i64> {
    match id {
        NumberOrString::Number(n) => Some(*n),
        NumberOrString::String(_) => None,
    }
}

impl Ids {
    /// Reserves a client's request id: the own id to hand the server, or `None` when
    /// the client id is still reserved (answer `-32600`, do not run).
    pub fn admit(&self, client: &RequestId) -> Option<RequestId> {
        let mut s = self.0.lock().ok()?;
        if s.by_client.contains_key(client) {
            return None;
        }
        s.next += 1;
        let own = s.next;
        s.by_client.insert(client.clone(), own);
        s.by_own.insert(
            own,
            Entry {
                client: client.clone(),
                cancelled: false,
                ended: false,
            },
        );
        Some(NumberOrString::Number(own))
    }

    /// The client cancelled its request `client`: the own id to tell the server (or
    /// `None`: no such request in flight). The id stays reserved until the handler ends.
    pub fn cancel(&self, client: &RequestId) -> Option<RequestId> {
        let mut s = self.0.lock().ok()?;
        let own = *s.by_client.get(client)?;
        let ended = match s.by_own.get_mut(&own) {
            Some(e) => {
                e.cancelled = true;
                e.ended
            }
            None => false,
        };
        if ended {
            s.release(own);
        }
        Some(NumberOrString::Number(own))
    }

    /// An answer to the server's own id `own`: the client id to answer under, or `None`
    /// when it is not to be sent (cancelled by the client, or unknown).
    pub fn answered(&self, own: &RequestId) -> Option<RequestId> {
        let mut s = self.0.lock().ok()?;
        let e = s.release(own_number(own)?)?;
        (!e.cancelled).then_some(e.client)
    }

    /// The handler of own id `own` has ended: a cancelled request's client id is free.
    fn ended(&self, own: &RequestId) {
        let Some(n) = own_number(own) else {
            return;
        };
        if let Ok(mut s) = self.0.lock() {
            let cancelled = match s.by_own.get_mut(&n) {
                Some(e) => {
                    e.ended = true;
                    e.cancelled
                }
                None => false,
            };
            if cancelled {
                s.release(n);
            }
        }
    }
}

/// Tells `Ids` when a request's handler has ended (however it ended).
struct EndGuard {
    ids: Ids,
    own: RequestId,
}

impl Drop for EndGuard {
    fn drop(&mut self) {
        self.ids.ended(&self.own);
    }
}

/// The service, telling `Ids` when each request's handler has ended.
pub struct Ended<S> {
    pub inner: S,
    pub ids: Ids,
}

impl<S: Service<RoleServer>> Service<RoleServer> for Ended<S> {
    async fn handle_request(
        &self,
        request: <RoleServer as ServiceRole>::PeerReq,
        context: RequestContext<RoleServer>,
    ) -> Result<<RoleServer as ServiceRole>::Resp, rmcp::ErrorData> {
        let _guard = EndGuard {
            ids: self.ids.clone(),
            own: context.id.clone(),
        };
        self.inner.handle_request(request, context).await
    }

    async fn handle_notification(
        &self,
        notification: <RoleServer as ServiceRole>::PeerNot,
        context: NotificationContext<RoleServer>,
    ) -> Result<(), rmcp::ErrorData> {
        self.inner.handle_notification(notification, context).await
    }

    fn get_info(&self) -> <RoleServer as ServiceRole>::Info {
        self.inner.get_info()
    }

    fn supported_protocol_versions(
        &self,
    ) -> std::borrow::Cow<'static, [rmcp::model::ProtocolVersion]> {
        self.inner.supported_protocol_versions()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_cancelled_id_is_reserved_until_its_handler_ends_and_never_answered() {
        let ids = Ids::default();
        let seven = NumberOrString::Number(7);
        let own = ids.admit(&seven).unwrap();
        assert!(ids.admit(&seven).is_none());
        assert_eq!(ids.cancel(&seven), Some(own.clone()));
        assert!(
            ids.admit(&seven).is_none(),
            "reused before the handler ended"
        );
        ids.ended(&own);
        let again = ids.admit(&seven).unwrap();
        assert_ne!(again, own);
        // The old answer, if it still comes, is not sent.
        assert_eq!(ids.answered(&own), None);
        assert_eq!(ids.answered(&again), Some(seven));
    }
}
