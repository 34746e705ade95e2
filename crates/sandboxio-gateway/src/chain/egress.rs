//! Egress: a sandbox with network `allowlist` or `full` (namespace tier) runs with the
//! egress proxy serving its loopback listener, and every connection or plain HTTP request
//! the program opens is a `net_connect` operation through this same chain: policy, rate
//! limit, approval, then (as its side effect) the egress guard: the rules, the proxy's own
//! lookup and the SSRF guard; one record each. The proxy connects only to the addresses
//! that operation checked; a refusal reaches the program as an HTTP 403 with the reason.

use std::net::SocketAddr;
use std::sync::Arc;

use futures_util::stream::{FuturesUnordered, StreamExt};
use sandboxio_core::{
    ErrorCode, ExecRequest, ExecResult, IsolationTier, Layer, Operation, OperationArgs,
    OperationRecord, OperationStatus, Verdict,
};
use sandboxio_egress::{Ask, Guard, Proxy, Refusal, Resolver, Target};
use sandboxio_sandbox::{CancelToken, SandboxError, StreamIo};

use super::stop::Stop;
use super::{Gateway, Submission};

/// What a `net_connect` opened by a sandbox's proxy checks when policy allows it.
#[derive(Clone)]
pub struct EgressCheck {
    pub(crate) guard: Arc<Guard>,
    pub(crate) target: Target,
    /// The proxy already refused it (a CONNECT inside a tunnel): recorded as a denial.
    pub(crate) refused: Option<Refusal>,
}

/// Labels a connection's record carries besides the caller's.
pub const LABEL_PARENT: &str = "egress.parent_operation";
pub const LABEL_SCHEME: &str = "egress.scheme";
pub const LABEL_METHOD: &str = "egress.method";
/// The path of a plain HTTP request or of a request inside a terminated tunnel, as the
/// proxy decided it (at most [`PATH_LABEL_MAX`] bytes; the record's redaction covers it).
pub const LABEL_PATH: &str = "egress.path";
pub const PATH_LABEL_MAX: usize = 1024;
/// The secrets a request inside a terminated tunnel carries (names only, comma-separated).
pub const LABEL_SECRETS: &str = "egress.secrets";

fn refusal_stop(r: &Refusal) -> Stop {
    Stop::deny(Layer::Sandbox, r.to_string()).code(r.code())
}

impl Gateway {
    /// Whether this request runs behind the egress proxy.
    /// (Namespace tier: the only way out; process tier: advisory, the proxy variables point
    /// at it but the program has the host's network.)
    pub(super) fn needs_egress(req: &ExecRequest, tier: IsolationTier) -> bool {
        matches!(tier, IsolationTier::Namespace | IsolationTier::Process)
            && req.network != sandboxio_core::NetworkMode::None
    }

    /// Runs the sandbox while its proxy serves the listener it hands over; decides each
    /// connection as it comes, concurrently (an `ask` waiting for a person holds up no
    /// other connection).
    pub(super) async fn run_with_egress(
        &self,
        id: &str,
        sub: &Submission,
        req: &ExecRequest,
        tier: IsolationTier,
        token: CancelToken,
        mut io: StreamIo,
    ) -> Result<Result<ExecResult, SandboxError>, Stop> {
        let rules = match self.cfg.egress.rules_for(&req.network) {
            Ok(Some(r)) => r,
            Ok(None) => {
                return Ok(sandboxio_sandbox::run_streaming(
                    req,
                    tier,
                    &self.sandbox,
                    Some(token),
                    io,
                )
                .await)
            }
            Err(e) => {
                return Err(Stop::deny(Layer::Sandbox, e.to_string()).code(e.code()));
            }
        };
        let guard = Arc::new(Guard::new(
            rules,
            Resolver::new(&self.cfg.egress.resolver),
            sub.op.principal.tenant.clone(),
        ));
        // Secrets at the edge (namespace tier only: in the process tier the program shares
        // the supervisor's uid and could read the sources, so it gets no placeholder).
        let mut edge_req = None;
        let edge = if tier == IsolationTier::Namespace && !self.edge_secrets.is_empty() {
            let edge = self
                .edge_secrets
                .edge()
                .map_err(|e| Stop::deny(Layer::Sandbox, e.to_string()).code(e.code()))?;
            let mut r = req.clone();
            self.edge_secrets.prepare(&edge, &mut r);
            edge_req = Some(r);
            Some(Arc::new(edge))
        } else {
            None
        };
        let req = edge_req.as_ref().unwrap_or(req);
        let (decider, mut asks) = sandboxio_egress::channel(256);
        let proxy = Proxy::with_edge(Arc::new(decider), edge);
        let (listener_tx, listener_rx) = tokio::sync::oneshot::channel();
        io.egress = Some(listener_tx);
        let server = {
            let proxy = proxy.clone();
            tokio::spawn(async move {
                let Ok(l) = listener_rx.await else { return };
                if l.set_nonblocking(true).is_err() {
                    return;
                }
                if let Ok(l) = tokio::net::TcpListener::from_std(l) {
                    proxy.serve(l).await;
                }
            })
        };
        let run = sandboxio_sandbox::run_streaming(req, tier, &self.sandbox, Some(token), io);
        tokio::pin!(run);
        let mut pending = FuturesUnordered::new();
        let res = loop {
            tokio::select! {
                r = &mut run => break r,
                Some(ask) = asks.recv() => pending.push(self.decide_connection(id, sub, &guard, ask)),
                Some(()) = pending.next(), if !pending.is_empty() => {}
            }
        };
        // Decisions still waiting end with the run: their replies are dropped (a denial).
        drop(pending);
        server.abort();
        let summary = proxy.summary();
        Ok(res.map(|mut r| {
            r.network_denials = summary.denials;
            r.denied_hosts = summary.denied_hosts.into_iter().collect();
            r
        }))
    }

    /// One connection: a `net_connect` operation through the whole chain.
    async fn decide_connection(
        &self,
        parent: &str,
        sub: &Submission,
        guard: &Arc<Guard>,
        ask: Ask,
    ) {
        let t = ask.target.clone();
        let mut op = Operation::new(
            sub.op.principal.clone(),
            OperationArgs::NetConnect {
                host: t.host.clone(),
                port: t.port,
            },
        );
        op.tier = sub.op.tier;
        op.rationale = Some(format!(
            "opened by the sandboxed program of operation {parent}"
        ));
        let mut s = Submission::new(op);
        s.labels = sub.labels.clone();
        s.labels.insert(LABEL_PARENT.into(), parent.to_string());
        s.labels
            .insert(LABEL_SCHEME.into(), t.scheme.as_str().to_string());
        if let Some(m) = &t.method {
            s.labels.insert(LABEL_METHOD.into(), m.clone());
        }
        if let Some(p) = &t.path {
            let mut end = p.len().min(PATH_LABEL_MAX);
            while !p.is_char_boundary(end) {
                end -= 1;
            }
            s.labels.insert(LABEL_PATH.into(), p[..end].to_string());
        }
        if !t.secrets.is_empty() {
            s.labels.insert(LABEL_SECRETS.into(), t.secrets.join(","));
        }
        s.traceparent = sub.traceparent.clone();
        s.secrets = sub.secrets.clone();
        s.egress = Some(EgressCheck {
            guard: guard.clone(),
            target: t,
            refused: ask.refused,
        });
        let verdict = match Box::pin(self.submit(s)).await {
            Ok(out) if out.allowed() && out.record.status == OperationStatus::Ok => {
                let addrs: Vec<SocketAddr> = out
                    .tool_output
                    .as_ref()
                    .and_then(|v| v.get("addresses"))
                    .and_then(|v| v.as_array())
                    .map(|a| a.iter().filter_map(|x| x.as_str()?.parse().ok()).collect())
                    .unwrap_or_default();
                if addrs.is_empty() {
                    deny_of(&out.record)
                } else {
                    sandboxio_egress::Verdict::Allow(addrs)
                }
            }
            Ok(out) => deny_of(&out.record),
            Err(e) => sandboxio_egress::Verdict::Deny {
                code: e.code().to_string(),
                layer: Layer::Record.to_string(),
                reason: "the connection could not be recorded, so it was not opened".into(),
            },
        };
        let _ = ask.reply.send(verdict);
    }

    /// The side effect of a `net_connect`: the egress guard (rules, lookup, SSRF guard).
    pub(super) async fn egress_connect(
        &self,
        sub: &Submission,
        rec: &mut OperationRecord,
    ) -> Result<serde_json::Value, Stop> {
        let Some(check) = &sub.egress else {
            return Err(Stop::deny(
                Layer::Sandbox,
                "a `net_connect` is decided for a sandbox's egress proxy; submitted on its own it opens nothing",
            )
            .code("SBX_E1513"));
        };
        if let Some(r) = &check.refused {
            return Err(refusal_stop(r));
        }
        let addrs = check
            .guard
            .check(&check.target)
            .await
            .map_err(|r| refusal_stop(&r))?;
        rec.status = OperationStatus::Ok;
        Ok(serde_json::json!({
            "target": check.target.to_string(),
            "addresses": addrs.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
        }))
    }
}

fn deny_of(rec: &OperationRecord) -> sandboxio_egress::Verdict {
    let verdict = if rec.verdict == Verdict::Ask {
        "ask"
    } else {
        "deny"
    };
    let code = rec
        .error_code
        .clone()
        .unwrap_or_else(|| crate::denial::POLICY.to_string());
    // The guard runs as the operation's side effect (layer `sandbox` in the record); the
    // program is told it was the egress guard.
    let layer = if code.starts_with("SBX_E24") {
        "egress".to_string()
    } else {
        rec.layer.to_string()
    };
    sandboxio_egress::Verdict::Deny {
        code,
        layer,
        reason: if rec.reason.is_empty() {
            format!("the connection was not allowed ({verdict})")
        } else {
            rec.reason.clone()
        },
    }
}
