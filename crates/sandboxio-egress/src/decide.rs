//! Who decides a connection. The gateway decides each one as a `net_connect` operation
//! (policy, rate limit, approval, record) and runs the guard as that operation's side
//! effect; [`GuardOnly`] is the guard alone, for embedders without a gateway.

use std::net::SocketAddr;
use std::sync::Arc;

use async_trait::async_trait;
use sandboxio_core::ErrorCode;
use tokio::sync::{mpsc, oneshot};

use crate::error::Refusal;
use crate::guard::Guard;
use crate::target::Target;

/// The answer for one connection or request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Connect to these checked addresses, in order.
    Allow(Vec<SocketAddr>),
    /// Refused: the program gets an HTTP 403 naming the layer, the code and the reason.
    Deny {
        code: String,
        layer: String,
        reason: String,
    },
}

impl Verdict {
    /// The line a denied program reads (the same shape as the CLI's denials).
    pub fn denial_line(&self) -> Option<String> {
        match self {
            Verdict::Deny {
                code,
                layer,
                reason,
            } => Some(format!("sandboxio[{code}]: denied at {layer}: {reason}")),
            Verdict::Allow(_) => None,
        }
    }
}

#[async_trait]
pub trait Decide: Send + Sync + 'static {
    async fn decide(&self, target: Target) -> Verdict;
    /// The proxy itself refused something inside an allowed connection (a CONNECT inside
    /// a tunnel): told so that it can be recorded. Default: nothing.
    async fn refused(&self, _target: Target, _refusal: Refusal) {}
}

/// The guard alone: rules, lookup, SSRF guard; nothing recorded.
pub struct GuardOnly(pub Arc<Guard>);

#[async_trait]
impl Decide for GuardOnly {
    async fn decide(&self, target: Target) -> Verdict {
        match self.0.check(&target).await {
            Ok(addrs) => Verdict::Allow(addrs),
            Err(r) => Verdict::Deny {
                code: r.code().to_string(),
                layer: "egress".into(),
                reason: r.to_string(),
            },
        }
    }
}

/// One question to a decider that lives elsewhere (a task that borrows the gateway).
pub struct Ask {
    pub target: Target,
    /// Set when the proxy already refused (the answer is then a denial whatever it says;
    /// the question is asked so that the refusal is recorded).
    pub refused: Option<Refusal>,
    pub reply: oneshot::Sender<Verdict>,
}

/// Sends each question over a channel; a closed channel or a dropped reply is a denial.
pub struct ChannelDecider(mpsc::Sender<Ask>);

/// A decider and the receiving end its questions arrive on.
pub fn channel(capacity: usize) -> (ChannelDecider, mpsc::Receiver<Ask>) {
    let (tx, rx) = mpsc::channel(capacity.max(1));
    (ChannelDecider(tx), rx)
}

#[async_trait]
impl Decide for ChannelDecider {
    async fn decide(&self, target: Target) -> Verdict {
        let gone = || Verdict::Deny {
            code: "SBX_E2415".into(),
            layer: "egress".into(),
            reason: "the sandbox's run is over; no connection is decided any more".into(),
        };
        let (reply, answer) = oneshot::channel();
        let ask = Ask {
            target,
            refused: None,
            reply,
        };
        if self.0.send(ask).await.is_err() {
            return gone();
        }
        answer.await.unwrap_or_else(|_| gone())
    }

    async fn refused(&self, target: Target, refusal: Refusal) {
        let (reply, answer) = oneshot::channel();
        let ask = Ask {
            target,
            refused: Some(refusal),
            reply,
        };
        if self.0.send(ask).await.is_ok() {
            let _ = answer.await;
        }
    }
}
