//! Which requests the server works on at once, and who may hold those places.
//!
//! A request holds no place until its credential is known. Then it takes one of the
//! `max_concurrent` places as its tenant's: one tenant holds at most its share of them
//! (`tenant_concurrent`, half by default), so no tenant, whatever its scopes, locks the
//! others out. Operator actions (the kill switch engaged or released, an approval decided)
//! by the operator's admin key have a few places of their own besides
//! ([`OPERATOR_RESERVE`]), so they are never refused for lack of places. A request whose
//! credential is not known (none was sent, or the credential is in the body, as for the
//! dashboard's sign-in) may read its body only while holding one of a small pool's
//! places (`max_unauthenticated`), and must have sent it within
//! [`UNAUTHENTICATED_BODY_TIME`]: a client without a valid credential never holds the
//! places others need. Long-polls are bounded per tenant as well (`tenant_long_polls`).
//!
//! The place of a request is its [`Ticket`], made by the app's admission layer and carried
//! in the [`RequestCtx`]; every front end's authentication calls [`admit`] as soon as it
//! knows the credential, before it reads a body.

use std::collections::HashMap;
use std::future::Future as _;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::http::Method;
use sandboxio_gateway::credential::{Credential, CredentialKind, Scope};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::context::RequestCtx;
use crate::error::ServerError;
use crate::options::ServeOptions;

/// Places kept for operator actions, beside `max_concurrent`.
pub const OPERATOR_RESERVE: usize = 4;
/// How long a request without a known credential may take to send its body.
pub const UNAUTHENTICATED_BODY_TIME: Duration = Duration::from_secs(10);

/// The server's places and who holds them.
pub struct Admission {
    general: Arc<Semaphore>,
    unauthenticated: Arc<Semaphore>,
    operator: Arc<Semaphore>,
    max_concurrent: usize,
    tenant_share: usize,
    long_poll_share: usize,
    body_time: Duration,
    /// Places (and long-polls) each tenant holds.
    held: Mutex<HashMap<String, Held>>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Held {
    requests: usize,
    long_polls: usize,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission")
            .field("max_concurrent", &self.max_concurrent)
            .field("tenant_share", &self.tenant_share)
            .finish_non_exhaustive()
    }
}

impl Admission {
    pub fn new(opts: &ServeOptions) -> Admission {
        let max = opts.max_concurrent.max(1);
        Admission {
            general: Arc::new(Semaphore::new(max)),
            unauthenticated: Arc::new(Semaphore::new(opts.max_unauthenticated.max(1))),
            operator: Arc::new(Semaphore::new(OPERATOR_RESERVE)),
            max_concurrent: max,
            tenant_share: opts.tenant_share(),
            long_poll_share: opts.tenant_long_polls(),
            body_time: UNAUTHENTICATED_BODY_TIME,
            held: Mutex::new(HashMap::new()),
        }
    }

    /// With another deadline for unauthenticated bodies (tests).
    pub fn with_body_time(mut self, t: Duration) -> Admission {
        self.body_time = t;
        self
    }

    fn count(&self, tenant: &str, f: impl FnOnce(&mut Held)) {
        if let Ok(mut m) = self.held.lock() {
            let h = m.entry(tenant.to_string()).or_default();
            f(h);
            if h.requests == 0 && h.long_polls == 0 {
                m.remove(tenant);
            }
        }
    }

    fn held(&self, tenant: &str) -> Held {
        self.held
            .lock()
            .ok()
            .and_then(|m| m.get(tenant).copied())
            .unwrap_or_default()
    }

    /// A place for a request of `tenant` (an operator action may use the reserve).
    fn place(self: &Arc<Self>, tenant: &str, operator: bool) -> Result<Place, ServerError> {
        let over_share = {
            let Ok(mut m) = self.held.lock() else {
                return Err(ServerError::Internal {
                    action: "admitting a request",
                });
            };
            let held = m.get(tenant).map_or(0, |h| h.requests);
            let over_share = held >= self.tenant_share;
            if !over_share {
                if let Ok(permit) = self.general.clone().try_acquire_owned() {
                    m.entry(tenant.to_string()).or_default().requests += 1;
                    return Ok(Place {
                        _permit: permit,
                        tenant: Some((self.clone(), tenant.to_string())),
                    });
                }
            }
            over_share
        };
        if operator {
            if let Ok(permit) = self.operator.clone().try_acquire_owned() {
                return Ok(Place {
                    _permit: permit,
                    tenant: None,
                });
            }
        }
        // A tenant over its share while places are free is told so; with every place
        // taken, the server is busy (whoever holds them).
        Err(if over_share && self.general.available_permits() > 0 {
            ServerError::TenantBusy {
                tenant: tenant.to_string(),
                what: "requests in progress",
                limit: self.tenant_share,
                of: format!(" (its share of the server's {})", self.max_concurrent),
            }
        } else {
            ServerError::Busy {
                limit: self.max_concurrent,
            }
        })
    }

    /// A long-poll of `tenant` (approvals, outcomes, processes waited for): refused past
    /// the tenant's bound, held until the guard is dropped.
    pub fn long_poll(self: &Arc<Self>, tenant: &str) -> Result<LongPoll, ServerError> {
        let mut ok = false;
        self.count(tenant, |h| {
            if h.long_polls < self.long_poll_share {
                h.long_polls += 1;
                ok = true;
            }
        });
        if !ok {
            return Err(ServerError::TenantBusy {
                tenant: tenant.to_string(),
                what: "long-polls waiting",
                limit: self.long_poll_share,
                of: String::new(),
            });
        }
        Ok(LongPoll {
            admission: self.clone(),
            tenant: tenant.to_string(),
        })
    }

    /// How many places `tenant` holds now (for tests and metrics).
    pub fn held_by(&self, tenant: &str) -> usize {
        self.held(tenant).requests
    }
}

/// One admitted request's place; given back when dropped.
struct Place {
    _permit: OwnedSemaphorePermit,
    tenant: Option<(Arc<Admission>, String)>,
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Some((a, t)) = self.tenant.take() {
            a.count(&t, |h| h.requests = h.requests.saturating_sub(1));
        }
    }
}

/// A long-poll in progress (see [`Admission::long_poll`]).
pub struct LongPoll {
    admission: Arc<Admission>,
    tenant: String,
}

impl Drop for LongPoll {
    fn drop(&mut self) {
        self.admission.count(&self.tenant, |h| {
            h.long_polls = h.long_polls.saturating_sub(1)
        });
    }
}

enum State {
    /// No credential known yet; the place among the unauthenticated, once its body is read.
    Unknown(Option<OwnedSemaphorePermit>),
    /// Admitted as a tenant's request (the place is held until the request ends).
    Admitted { _place: Place },
    /// The request ended: nothing is held any more.
    Ended,
}

/// One request's place, from the admission layer to its answer.
pub struct Ticket {
    admission: Arc<Admission>,
    /// The request is an operator action (the kill switch, an approval decided).
    operator_route: bool,
    /// `METHOD path` (at most 128 characters of the path), for records.
    target: String,
    state: Mutex<State>,
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticket")
            .field("operator_route", &self.operator_route)
            .finish_non_exhaustive()
    }
}

/// Whether `method path` is an operator action: engaging or releasing the kill switch, or
/// deciding an approval (over the API or the dashboard).
pub fn is_operator_route(method: &Method, path: &str) -> bool {
    if !(method == Method::POST || method == Method::DELETE) {
        return false;
    }
    let p = path.trim_end_matches('/');
    if p == "/v1/kill" || p == "/dashboard/api/kill" {
        return true;
    }
    method == Method::POST
        && (p.starts_with("/v1/approvals/") || p.starts_with("/dashboard/api/approvals/"))
        && (p.ends_with("/approve") || p.ends_with("/deny"))
}

impl Ticket {
    pub fn new(admission: Arc<Admission>, method: &Method, path: &str) -> Ticket {
        Ticket {
            admission,
            operator_route: is_operator_route(method, path),
            target: format!("{method} {}", path.chars().take(128).collect::<String>()),
            state: Mutex::new(State::Unknown(None)),
        }
    }

    /// `METHOD path` of the request.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// Admits the request as `credential`'s (once; later calls change nothing).
    pub fn admit(&self, credential: &Credential) -> Result<(), ServerError> {
        let Ok(mut s) = self.state.lock() else {
            return Err(ServerError::Internal {
                action: "admitting a request",
            });
        };
        if !matches!(*s, State::Unknown(_)) {
            return Ok(());
        }
        // Only the operator's own keys (admin) reach the reserve: an approve key belongs to
        // a tenant, and a tenant's keys must not be able to hold the places the kill
        // switch needs (an approval decided by one takes a general place, as any request).
        let operator = self.operator_route
            && credential.kind == CredentialKind::ApiKey
            && credential.scopes.contains(Scope::Admin);
        let place = self.admission.place(&credential.tenant, operator)?;
        // The unauthenticated place (if any) is given back.
        *s = State::Admitted { _place: place };
        Ok(())
    }

    fn admitted(&self) -> bool {
        self.state
            .lock()
            .map(|s| !matches!(*s, State::Unknown(_)))
            .unwrap_or(true)
    }

    /// Whether the request holds a place to read its body while its credential is not
    /// known (takes one if it has none and one is free).
    fn hold_unauthenticated(&self) -> bool {
        let Ok(mut s) = self.state.lock() else {
            return false;
        };
        match &mut *s {
            State::Unknown(Some(_)) => true,
            State::Unknown(slot) => {
                match self.admission.unauthenticated.clone().try_acquire_owned() {
                    Ok(p) => {
                        *slot = Some(p);
                        true
                    }
                    Err(_) => false,
                }
            }
            _ => true,
        }
    }

    /// The request ended: whatever it held is given back.
    pub fn end(&self) {
        if let Ok(mut s) = self.state.lock() {
            *s = State::Ended;
        }
    }
}

/// Admits the request of `ctx` as `credential`'s (see [`Ticket::admit`]); a request built
/// without the admission layer (in-process) has nothing to admit.
pub fn admit(ctx: &RequestCtx, credential: &Credential) -> Result<(), ServerError> {
    match &ctx.ticket {
        Some(t) => t.admit(credential),
        None => Ok(()),
    }
}

/// Whether the request of `ctx` has been admitted as a known credential's (or was built
/// without the admission layer).
pub fn is_admitted(ctx: &RequestCtx) -> bool {
    ctx.ticket.as_ref().is_none_or(|t| t.admitted())
}

/// Why a body was not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyRefused {
    /// Every place for requests without a known credential is taken.
    Busy,
    /// The body did not arrive within the time allowed.
    TooSlow,
}

impl std::fmt::Display for BodyRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyRefused::Busy => write!(f, "no place to read a body without a credential"),
            BodyRefused::TooSlow => write!(f, "the body was not sent in time"),
        }
    }
}

impl std::error::Error for BodyRefused {}

/// The refusal, if `e` (or what caused it) is one of [`BodyRefused`].
pub fn body_refused(e: &(dyn std::error::Error + 'static)) -> Option<BodyRefused> {
    let mut cur = Some(e);
    while let Some(x) = cur {
        if let Some(r) = x.downcast_ref::<BodyRefused>() {
            return Some(*r);
        }
        cur = x.source();
    }
    None
}

/// A request's body, read only as the ticket allows: freely once the credential is known;
/// before that, only with a place among the unauthenticated and within the time allowed.
pub struct Gated {
    inner: Body,
    ticket: Arc<Ticket>,
    body_time: Duration,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Gated {
    pub fn new(inner: Body, ticket: Arc<Ticket>) -> Gated {
        let body_time = ticket.admission.body_time;
        Gated {
            inner,
            ticket,
            body_time,
            deadline: None,
        }
    }
}

impl HttpBody for Gated {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if !this.ticket.admitted() {
            if !this.ticket.hold_unauthenticated() {
                return Poll::Ready(Some(Err(Box::new(BodyRefused::Busy))));
            }
            let t = this.body_time;
            let deadline = this
                .deadline
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(t)));
            if deadline.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Some(Err(Box::new(BodyRefused::TooSlow))));
            }
        }
        Pin::new(&mut this.inner)
            .poll_frame(cx)
            .map_err(axum::BoxError::from)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::path::PathBuf;

    fn admission(max: usize) -> Arc<Admission> {
        let mut o = ServeOptions::new(
            crate::options::Listen::Unix(PathBuf::from("/x")),
            "/w".into(),
        );
        o.max_concurrent = max;
        Arc::new(Admission::new(&o))
    }

    fn key(tenant: &str, scopes: &[Scope]) -> Credential {
        Credential {
            id: format!("k_{tenant}"),
            kind: CredentialKind::ApiKey,
            tenant: tenant.to_string(),
            scopes: sandboxio_gateway::credential::Scopes::new(scopes.iter().copied()),
            secret_sha256: String::new(),
            label: String::new(),
            sandbox: None,
            dir: None,
            parent: None,
            created_at: chrono::Utc::now(),
            expires_at: None,
            revoked_at: None,
        }
    }

    #[test]
    fn a_tenant_holds_at_most_its_share_and_operator_actions_keep_a_place() {
        let a = admission(8);
        let busy = key("a", &[Scope::Read]);
        let tickets: Vec<Ticket> = (0..4)
            .map(|_| Ticket::new(a.clone(), &Method::GET, "/v1/sandboxes"))
            .collect();
        for t in &tickets {
            t.admit(&busy).unwrap();
        }
        let fifth = Ticket::new(a.clone(), &Method::GET, "/v1/sandboxes");
        let e = fifth.admit(&busy).unwrap_err();
        assert_eq!(sandboxio_core::ErrorCode::code(&e), "SBX_E1818");
        // Another tenant still gets in.
        let other = key("b", &[Scope::Read]);
        let b: Vec<Ticket> = (0..4)
            .map(|_| Ticket::new(a.clone(), &Method::GET, "/v1/sandboxes"))
            .collect();
        for t in &b {
            t.admit(&other).unwrap();
        }
        // Every place is taken: a request is busy, an operator action is not.
        let c = Ticket::new(a.clone(), &Method::GET, "/v1/sandboxes");
        let e = c.admit(&key("c", &[Scope::Admin])).unwrap_err();
        assert_eq!(sandboxio_core::ErrorCode::code(&e), "SBX_E1808");
        let kill = Ticket::new(a.clone(), &Method::POST, "/v1/kill");
        kill.admit(&key("a", &[Scope::Admin])).unwrap();
        // Ended requests give their places back.
        for t in tickets.iter().chain(b.iter()) {
            t.end();
        }
        assert_eq!(a.held_by("a"), 0);
        Ticket::new(a.clone(), &Method::GET, "/v1/sandboxes")
            .admit(&busy)
            .unwrap();
    }

    #[test]
    fn a_tenants_approve_key_cannot_hold_the_operators_places() {
        let a = admission(2);
        let t: Vec<Ticket> = ["a", "b"]
            .iter()
            .map(|tenant| {
                let t = Ticket::new(a.clone(), &Method::GET, "/v1/sandboxes");
                t.admit(&key(tenant, &[Scope::Read])).unwrap();
                t
            })
            .collect();
        // Every general place is taken: approvals by tenants' approve keys are busy, as
        // any request, however many are tried...
        let approver = key("a", &[Scope::Approve]);
        for _ in 0..OPERATOR_RESERVE + 1 {
            let p = Ticket::new(a.clone(), &Method::POST, "/v1/approvals/apr_1/approve");
            let e = p.admit(&approver).unwrap_err();
            assert_eq!(sandboxio_core::ErrorCode::code(&e), "SBX_E1808");
        }
        // ... and every one of the operator's places is still there for the admin key.
        let admin = key("ops", &[Scope::Admin]);
        let held: Vec<Ticket> = (0..OPERATOR_RESERVE)
            .map(|_| {
                let k = Ticket::new(a.clone(), &Method::POST, "/v1/kill");
                k.admit(&admin).unwrap();
                k
            })
            .collect();
        assert_eq!(held.len(), OPERATOR_RESERVE);
        drop(t);
    }

    #[test]
    fn long_polls_are_bounded_per_tenant() {
        let a = admission(64);
        let n = a.long_poll_share;
        let held: Vec<LongPoll> = (0..n).map(|_| a.long_poll("a").unwrap()).collect();
        assert!(a.long_poll("a").is_err());
        assert!(a.long_poll("b").is_ok());
        drop(held);
        assert!(a.long_poll("a").is_ok());
    }

    #[test]
    fn operator_routes_are_the_kill_switch_and_decisions() {
        for (m, p) in [
            (Method::POST, "/v1/kill"),
            (Method::DELETE, "/v1/kill"),
            (Method::POST, "/dashboard/api/kill"),
            (Method::POST, "/v1/approvals/ap_1/approve"),
            (Method::POST, "/dashboard/api/approvals/ap_1/deny"),
        ] {
            assert!(is_operator_route(&m, p), "{m} {p}");
        }
        for (m, p) in [
            (Method::GET, "/v1/kill"),
            (Method::GET, "/v1/approvals/ap_1/wait"),
            (Method::POST, "/v1/sandboxes"),
        ] {
            assert!(!is_operator_route(&m, p), "{m} {p}");
        }
    }
}
