//! Refusals that no handler records: a request without a valid credential (401), one
//! refused for lack of places (503 `SBX_E1808`, 429 `SBX_E1818`, 408 `SBX_E1819`), a
//! sandbox or background quota reached (429 `SBX_E1811`, `SBX_E1852`). Each is one record
//! through the auditor, like `http.forbidden`, but a flood does not flood the trail: per
//! kind and tenant (or, without a known credential, per kind), at most [`PER_WINDOW`]
//! records each [`WINDOW`]; the refusals past it are counted, and one summary record, when
//! the window ends, stands for them (`labels.refusals`: how many). A presented secret is
//! never recorded: at most the credential's public id.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sandboxio_core::{ErrorCode, Verdict};

use crate::backend::server_record;
use crate::context::RequestCtx;
use crate::error::ServerError;
use crate::state::AppState;

/// Records of one kind and tenant written one by one in a window.
pub const PER_WINDOW: u32 = 10;
/// The window.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Kinds and tenants followed at once; past it, refusals of new ones share one bucket.
const MAX_BUCKETS: usize = 1024;
/// The tenant name of refusals whose credential is not known.
const UNKNOWN: &str = "";

/// The record's event for a refusal, if it is one recorded here.
pub fn event_of(code: &str) -> Option<&'static str> {
    match code {
        "SBX_E1801" | "SBX_E1802" | "SBX_E1840" | "SBX_E2501" => Some("http.unauthenticated"),
        "SBX_E1808" | "SBX_E1818" | "SBX_E1819" => Some("http.busy"),
        "SBX_E1811" | "SBX_E1852" => Some("http.quota"),
        _ => None,
    }
}

#[derive(Debug)]
struct Bucket {
    since: Instant,
    recorded: u32,
    counted: u64,
    code: String,
}

/// Pending summary: (event, tenant, code, how many).
type Summary = (&'static str, String, String, u64);

#[derive(Debug, Default)]
pub struct Refusals {
    buckets: Mutex<HashMap<(&'static str, String), Bucket>>,
}

impl Refusals {
    /// Records refusal `e` of the request of `ctx` (its `METHOD path`, from its ticket) for
    /// `tenant` (none: no credential known), within the bounded rate. The message is the
    /// answer's detail, which never holds a presented secret.
    pub async fn refused(
        &self,
        st: &AppState,
        ctx: &RequestCtx,
        tenant: Option<&str>,
        e: &ServerError,
    ) {
        self.refused_as(st, ctx, tenant, e.code(), &e.to_string())
            .await;
    }

    /// As [`Refusals::refused`], for an error of another front end (its code and message).
    pub async fn refused_as(
        &self,
        st: &AppState,
        ctx: &RequestCtx,
        tenant: Option<&str>,
        code: &str,
        why: &str,
    ) {
        let Some(event) = event_of(code) else {
            return;
        };
        let (write, summary) = self.count(event, tenant.unwrap_or(UNKNOWN), code, Instant::now());
        if let Some(s) = summary {
            write_summary(st, s).await;
        }
        if !write {
            return;
        }
        let target = ctx
            .ticket
            .as_ref()
            .map(|t| t.target().to_string())
            .unwrap_or_else(|| "a request".to_string());
        let who = match tenant {
            Some(t) => format!("tenant `{t}`"),
            None => "a caller without a valid credential".to_string(),
        };
        let mut rec = server_record(
            event,
            tenant.unwrap_or(UNKNOWN),
            ctx,
            Verdict::Deny,
            format!("refused `{target}` of {who}: {why}"),
        );
        if tenant.is_none() {
            rec.tenant_id = None;
        }
        rec.error_code = Some(code.to_string());
        st.backend.record(rec).await;
    }

    /// Counts one refusal: whether to write it, and a summary of a window that ended.
    fn count(
        &self,
        event: &'static str,
        tenant: &str,
        code: &str,
        now: Instant,
    ) -> (bool, Option<Summary>) {
        let Ok(mut m) = self.buckets.lock() else {
            return (true, None);
        };
        let mut key = (event, tenant.to_string());
        if !m.contains_key(&key) && m.len() >= MAX_BUCKETS {
            key = (event, "*".to_string());
        }
        let b = m.entry(key.clone()).or_insert_with(|| Bucket {
            since: now,
            recorded: 0,
            counted: 0,
            code: code.to_string(),
        });
        let mut summary = None;
        if now.duration_since(b.since) >= WINDOW {
            if b.counted > 0 {
                summary = Some((event, key.1.clone(), b.code.clone(), b.counted));
            }
            b.since = now;
            b.recorded = 0;
            b.counted = 0;
        }
        if b.recorded < PER_WINDOW {
            b.recorded += 1;
            (true, summary)
        } else {
            b.counted += 1;
            b.code = code.to_string();
            (false, summary)
        }
    }

    /// The summaries of windows that ended by `now` (their buckets are forgotten).
    fn ended(&self, now: Instant, all: bool) -> Vec<Summary> {
        let Ok(mut m) = self.buckets.lock() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        m.retain(|(event, tenant), b| {
            if !all && now.duration_since(b.since) < WINDOW {
                return true;
            }
            if b.counted > 0 {
                out.push((*event, tenant.clone(), b.code.clone(), b.counted));
            }
            false
        });
        out
    }

    /// Writes the summaries of the windows that ended (the reaper calls it every second;
    /// `all` at shutdown, for every window).
    pub async fn flush(&self, st: &AppState, all: bool) {
        for s in self.ended(Instant::now(), all) {
            write_summary(st, s).await;
        }
    }
}

async fn write_summary(st: &AppState, (event, tenant, code, n): Summary) {
    let ctx = RequestCtx::from_headers(&axum::http::HeaderMap::new());
    let who = if tenant.is_empty() {
        "callers without a valid credential".to_string()
    } else {
        format!("tenant `{tenant}`")
    };
    let mut rec = server_record(
        event,
        &tenant,
        &ctx,
        Verdict::Deny,
        format!(
            "{n} more refusals of {who} (the last `{code}`) within {} s, past the {PER_WINDOW} recorded one by one",
            WINDOW.as_secs()
        ),
    );
    if tenant.is_empty() {
        rec.tenant_id = None;
    }
    rec.error_code = Some(code);
    rec.labels.insert("refusals".into(), n.to_string());
    st.backend.record(rec).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_rate_refusals_are_counted_and_summed_up_once_a_window() {
        let r = Refusals::default();
        let t0 = Instant::now();
        let mut written = 0;
        for _ in 0..25 {
            let (w, s) = r.count("http.unauthenticated", "", "SBX_E1802", t0);
            assert!(s.is_none());
            written += usize::from(w);
        }
        assert_eq!(written, PER_WINDOW as usize);
        // Another tenant has its own bucket.
        assert!(r.count("http.busy", "acme", "SBX_E1818", t0).0);
        // The next window: the summary of the last, and this one written.
        let (w, s) = r.count("http.unauthenticated", "", "SBX_E1801", t0 + WINDOW);
        assert!(w);
        assert_eq!(
            s,
            Some((
                "http.unauthenticated",
                String::new(),
                "SBX_E1802".into(),
                15
            ))
        );
        // A flush at the end sums up what is left, once.
        for _ in 0..PER_WINDOW + 3 {
            r.count("http.unauthenticated", "", "SBX_E1801", t0 + WINDOW);
        }
        let later = t0 + WINDOW * 2;
        let ended = r.ended(later, false);
        assert!(ended.contains(&("http.unauthenticated", String::new(), "SBX_E1801".into(), 4)));
        assert!(r.ended(later, true).is_empty());
    }

    #[test]
    fn only_these_refusals_are_recorded_here() {
        for c in [
            "SBX_E1801",
            "SBX_E1802",
            "SBX_E1808",
            "SBX_E1811",
            "SBX_E1818",
        ] {
            assert!(event_of(c).is_some(), "{c}");
        }
        for c in ["SBX_E1803", "SBX_E1841", "SBX_E1804"] {
            assert!(event_of(c).is_none(), "{c}");
        }
    }
}
