//! The approval webhook: for every approval that starts waiting, a POST of a JSON body to
//! the configured URL, signed with HMAC-SHA256 under a secret from the environment:
//! `sandboxio-signature: t=<unix seconds>,v1=<hex of HMAC(secret, "<t>.<body>")>` (the
//! timestamp inside the signed text, so a receiver can refuse a replayed delivery).
//! A delivery that does not get a 2xx within its timeout is retried with exponential
//! backoff (0.5 s, 1 s, 2 s, ... at most 8 s, with jitter) up to `attempts` in all; each
//! delivery leaves one record (`approval.webhook`: delivered, or failed with the last
//! error and `SBX_E1854`). The secret is never logged, recorded or shown (`Debug` hides
//! it). The receiver is reached over HTTPS with its certificate verified (a configured CA
//! bundle or the system's roots), or over plain HTTP on loopback only
//! (`crate::outbound`).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use sandboxio_core::{OperationStatus, Verdict};
use sha2::{Digest, Sha256};

use crate::backend::{server_record, Backend};
use crate::context::RequestCtx;
use crate::error::ServerError;
use crate::outbound::Target;

/// The signature header.
pub const SIGNATURE_HEADER: &str = "sandboxio-signature";
/// A delivery's own id (the same on every attempt), for a receiver to de-duplicate.
pub const DELIVERY_HEADER: &str = "sandboxio-delivery";
const BACKOFF_START: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(8);

pub struct Webhook {
    url: hyper::Uri,
    secret: Vec<u8>,
    timeout: Duration,
    attempts: u32,
    target: Target,
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field("url", &self.url)
            .field("secret", &"<hidden>")
            .field("attempts", &self.attempts)
            .finish()
    }
}

/// HMAC-SHA256 (RFC 2104).
pub fn hmac_sha256(key: &[u8], msg: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut k = [0u8; BLOCK];
    if key.len() > BLOCK {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(k.map(|b| b ^ 0x36));
    inner.update(msg);
    let mut outer = Sha256::new();
    outer.update(k.map(|b| b ^ 0x5c));
    outer.update(inner.finalize());
    outer.finalize().into()
}

/// The signature header's value for `body` sent at `t` (unix seconds).
pub fn signature(secret: &[u8], t: i64, body: &[u8]) -> String {
    let mut msg = format!("{t}.").into_bytes();
    msg.extend_from_slice(body);
    format!("t={t},v1={}", hex::encode(hmac_sha256(secret, &msg)))
}

impl Webhook {
    /// `url` must be `https://...` (verified against `ca_file`'s CAs, or the system's
    /// roots) or `http://` to loopback; the secret must not be empty.
    pub fn new(
        url: &str,
        ca_file: Option<&std::path::Path>,
        secret: Vec<u8>,
        timeout: Duration,
        attempts: u32,
    ) -> Result<Webhook, ServerError> {
        let bad = |why: String| ServerError::Webhook { why };
        let uri: hyper::Uri = url
            .parse()
            .map_err(|_| bad(format!("`{url}` is not a URL")))?;
        let target = Target::new(&uri, ca_file).map_err(|why| bad(format!("`{url}`: {why}")))?;
        if secret.is_empty() {
            return Err(bad("the signing secret is empty".into()));
        }
        if timeout.is_zero() || attempts == 0 || attempts > 20 {
            return Err(bad(
                "`timeout` must be more than 0 and `attempts` 1 to 20".into()
            ));
        }
        Ok(Webhook {
            url: uri,
            secret,
            timeout,
            attempts,
            target,
        })
    }

    fn body(a: &sandboxio_gateway::store::Approval) -> Vec<u8> {
        let operation: serde_json::Value =
            serde_json::from_str(&a.operation).unwrap_or(serde_json::Value::Null);
        serde_json::json!({
            "event": "approval.pending",
            "approval": {
                "id": a.id,
                "tenant": a.tenant,
                "reason": a.reason,
                "rationale": a.rationale,
                "operation": operation,
                "created_at": a.created_at,
                "expires_at": a.expires_at,
            },
            "approve": format!("/v1/approvals/{}/approve", a.id),
            "deny": format!("/v1/approvals/{}/deny", a.id),
            "wait": format!("/v1/approvals/{}/wait?timeout=60", a.id),
        })
        .to_string()
        .into_bytes()
    }

    /// One attempt: `Ok` on a 2xx, else what went wrong.
    async fn attempt(&self, body: &[u8], delivery: &str) -> Result<(), String> {
        let t = chrono::Utc::now().timestamp();
        let path = self.url.path_and_query().map(|p| p.as_str()).unwrap_or("/");
        let headers = [
            (
                hyper::header::CONTENT_TYPE.as_str(),
                "application/json".to_string(),
            ),
            (
                hyper::header::USER_AGENT.as_str(),
                "sandboxio-webhook".to_string(),
            ),
            (SIGNATURE_HEADER, signature(&self.secret, t, body)),
            (DELIVERY_HEADER, delivery.to_string()),
        ];
        let sent = tokio::time::timeout(
            self.timeout,
            self.target
                .post(path, &headers, Bytes::copy_from_slice(body)),
        )
        .await;
        match sent {
            Ok(Ok(status)) if status.is_success() => Ok(()),
            Ok(Ok(status)) => Err(format!("answered {status}")),
            Ok(Err(why)) => Err(why),
            Err(_) => Err(format!("no answer within {} ms", self.timeout.as_millis())),
        }
    }

    /// Delivers the news of a pending approval (with retries) and records the delivery.
    pub async fn deliver(&self, a: &sandboxio_gateway::store::Approval, backend: &Backend) {
        let body = Self::body(a);
        let delivery = crate::context::random_hex(16);
        let mut last = String::new();
        let mut tried = 0;
        for n in 0..self.attempts {
            tried = n + 1;
            match self.attempt(&body, &delivery).await {
                Ok(()) => {
                    last.clear();
                    break;
                }
                Err(why) => last = why,
            }
            if n + 1 < self.attempts {
                let exp = BACKOFF_START.saturating_mul(1 << n.min(5)).min(BACKOFF_MAX);
                let jitter = rand::random::<u64>() % (exp.as_millis() as u64 / 4 + 1);
                tokio::time::sleep(exp + Duration::from_millis(jitter)).await;
            }
        }
        let ctx = RequestCtx::from_headers(&axum::http::HeaderMap::new());
        let (verdict, reason) = if last.is_empty() {
            (
                Verdict::Allow,
                format!(
                    "approval {} announced to the webhook (delivery {delivery}, attempt {tried})",
                    a.id
                ),
            )
        } else {
            (
                Verdict::Allow,
                format!(
                    "approval {} could not be announced to the webhook after {tried} attempts (delivery {delivery}): {last}",
                    a.id
                ),
            )
        };
        let mut rec = server_record("approval.webhook", &a.tenant, &ctx, verdict, reason);
        rec.approval_id = Some(a.id.clone());
        if !last.is_empty() {
            rec.status = OperationStatus::Failed;
            rec.error_code = Some(WEBHOOK_FAILED.to_string());
            tracing::warn!(approval = %a.id, "the approval webhook failed: {last}");
        }
        backend.record(rec).await;
    }
}

/// A delivery that failed every attempt (recorded).
pub const WEBHOOK_FAILED: &str = "SBX_E1854";

/// Announces `a` in the background.
pub fn announce(hook: &Arc<Webhook>, a: sandboxio_gateway::store::Approval, backend: Arc<Backend>) {
    let hook = hook.clone();
    tokio::spawn(async move { hook.deliver(&a, &backend).await });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc_4231() {
        // Test case 2 of RFC 4231.
        let mac = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(mac),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // Test case 6: a key longer than the block.
        let mac = hmac_sha256(
            &[0xaa; 131],
            b"Test Using Larger Than Block-Size Key - Hash Key First",
        );
        assert_eq!(
            hex::encode(mac),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn https_or_loopback_http_urls_and_a_secret_are_accepted_and_debug_hides_it() {
        let t = Duration::from_secs(1);
        let new = |url: &str, secret: &[u8], attempts| {
            Webhook::new(url, None, secret.to_vec(), t, attempts)
        };
        assert!(new("http://hooks.example.com/h", b"s", 3).is_err());
        assert!(new("not a url", b"s", 3).is_err());
        assert!(new("http://127.0.0.1:1/h", b"", 3).is_err());
        assert!(new("http://127.0.0.1:1/h", b"s", 0).is_err());
        let w = new("http://127.0.0.1:1/h", b"secret-4471", 3).unwrap();
        assert!(!format!("{w:?}").contains("secret-4471"));
    }
}
