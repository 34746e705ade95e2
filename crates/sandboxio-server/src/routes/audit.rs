//! The caller's tenant's audit events (scope `read`), newest last, from the trail file; for
//! a capability token, those of its own sandbox.

use std::io::{Read, Seek, SeekFrom};

use crate::extract::Query;
use axum::extract::State;
use axum::Json;
use chrono::{DateTime, Utc};
use sandboxio_core::HumanDuration;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::ServerError;
use crate::problem::Problem;
use crate::routes::guard::{ReadScope, Scoped};
use crate::state::AppState;

/// A query reads the trail backwards in blocks of this size, until it has its `limit`
/// of the caller's events or reaches `since`: however much other tenants wrote since, the
/// caller's events are found.
const BLOCK: u64 = 1 << 20;
/// The most one query reads; past it the answer says it is incomplete.
const MAX_SCAN: u64 = 1 << 30;
const MAX_EVENTS: usize = 1000;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(query))
}

#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// How far back, e.g. `1h` (default 24h).
    pub since: Option<String>,
    /// Only this event (e.g. `exec`, `http.forbidden`).
    pub event: Option<String>,
    /// Only this decision: `allow` or `deny`.
    pub decision: Option<String>,
    /// At most this many, the newest (default 100, at most 1000).
    pub limit: Option<usize>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AuditEvents {
    #[schema(value_type = Vec<Object>)]
    pub events: Vec<serde_json::Value>,
    /// False when the query stopped at its read bound (1 GiB of trail) before it found
    /// `limit` events or reached `since`: older matching events may exist.
    pub complete: bool,
}

/// The newest events since `since` (up to `limit`, newest first) that `keep` accepts, read
/// backwards from the end of the trail, and on through its rotated files, until a
/// checkpoint written before `since`; and whether the read got there (false when it
/// stopped at [`MAX_SCAN`]).
fn newest(
    path: &std::path::Path,
    since: DateTime<Utc>,
    limit: usize,
    keep: impl Fn(&serde_json::Value) -> bool,
) -> std::io::Result<(Vec<serde_json::Value>, bool)> {
    let files = sandboxio_gateway::trail_files(path).map_err(std::io::Error::other)?;
    let mut scan = Scan {
        out: Vec::new(),
        scanned: 0,
        since,
        limit,
    };
    for f in files.iter().rev() {
        match scan.file(f, &keep)? {
            Step::Done => return Ok((scan.out, true)),
            Step::Bounded => return Ok((scan.out, false)),
            Step::Older => {}
        }
    }
    Ok((scan.out, true))
}

/// How reading one file ended.
enum Step {
    /// `limit` found, or a checkpoint older than `since`.
    Done,
    /// [`MAX_SCAN`] read.
    Bounded,
    /// The start of the file: go on to the one before it.
    Older,
}

struct Scan {
    out: Vec<serde_json::Value>,
    scanned: u64,
    since: DateTime<Utc>,
    limit: usize,
}

impl Scan {
    /// Reads `path` backwards, block by block.
    fn file(
        &mut self,
        path: &std::path::Path,
        keep: &impl Fn(&serde_json::Value) -> bool,
    ) -> std::io::Result<Step> {
        let mut f = std::fs::File::open(path)?;
        let mut pos = f.metadata()?.len();
        // The start of the line that ends in the block read last.
        let mut carry: Vec<u8> = Vec::new();
        while pos > 0 {
            if self.scanned >= MAX_SCAN {
                return Ok(Step::Bounded);
            }
            let start = pos.saturating_sub(BLOCK);
            let mut buf = vec![0u8; (pos - start) as usize];
            f.seek(SeekFrom::Start(start))?;
            f.read_exact(&mut buf)?;
            self.scanned += pos - start;
            buf.extend_from_slice(&carry);
            // Whole lines only: the first line of a block that does not start the file is
            // finished by the next block read.
            let body = if start == 0 {
                carry = Vec::new();
                &buf[..]
            } else {
                match buf.iter().position(|b| *b == b'\n') {
                    Some(i) => {
                        carry = buf[..i].to_vec();
                        &buf[i + 1..]
                    }
                    None => {
                        carry = std::mem::take(&mut buf);
                        pos = start;
                        continue;
                    }
                }
            };
            for line in body.split(|b| *b == b'\n').rev() {
                if self.line(line, keep) {
                    return Ok(Step::Done);
                }
            }
            pos = start;
        }
        Ok(Step::Older)
    }

    /// Takes one line; true when the read is over.
    fn line(&mut self, line: &[u8], keep: &impl Fn(&serde_json::Value) -> bool) -> bool {
        let Ok(e) = serde_json::from_slice::<serde_json::Value>(line) else {
            return false;
        };
        let at = |v: &serde_json::Value| {
            v["ts"]
                .as_str()
                .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        };
        // A checkpoint's time is when it was written: every line before it was written
        // earlier, so none of them is newer than `since` once it is older. (A record's own
        // time can be older than lines before it: one written late, at recovery.)
        if let Some(ts) = at(&e["checkpoint"]) {
            return ts < self.since;
        }
        if at(&e).is_none_or(|ts| ts < self.since) {
            return false;
        }
        if keep(&e) {
            self.out.push(e);
        }
        self.out.len() >= self.limit
    }
}

/// Events of the caller's tenant (redacted as they were written).
#[utoipa::path(get, path = "/v1/audit", tag = "admin", params(AuditQuery),
    responses((status = 200, body = AuditEvents), (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn query(
    State(st): State<AppState>,
    Scoped { caller, .. }: Scoped<ReadScope>,
    Query(q): Query<AuditQuery>,
) -> Result<Json<AuditEvents>, ServerError> {
    let Some(path) = st.opts.audit_file.clone() else {
        return Ok(Json(AuditEvents {
            events: Vec::new(),
            complete: true,
        }));
    };
    let back = match q.since.as_deref() {
        None => std::time::Duration::from_secs(24 * 3600),
        Some(s) => s
            .parse::<HumanDuration>()
            .map_err(|e| ServerError::BadValue {
                field: "since",
                why: e.to_string(),
            })?
            .as_duration(),
    };
    if let Some(d) = q.decision.as_deref() {
        if d != "allow" && d != "deny" {
            return Err(ServerError::BadValue {
                field: "decision",
                why: format!("`{d}` is not `allow` or `deny`"),
            });
        }
    }
    // `since` is the caller's: anything before the earliest time there is means all.
    let since: DateTime<Utc> = chrono::Duration::from_std(back)
        .ok()
        .and_then(|d| Utc::now().checked_sub_signed(d))
        .unwrap_or(DateTime::<Utc>::MIN_UTC);
    let limit = q.limit.unwrap_or(100).clamp(1, MAX_EVENTS);
    if caller.credential.dir.is_some() {
        return Err(ServerError::TenantWide {
            what: "a token confined to a directory reaches its files only, not its sandbox's audit events",
        });
    }
    let tenant = caller.tenant().to_string();
    let (capability, sandbox) = (caller.is_capability(), caller.credential.sandbox.clone());
    let keep = move |e: &serde_json::Value| {
        e["tenant_id"].as_str() == Some(tenant.as_str())
            && (!capability || sandbox.is_some() && e["session_id"].as_str() == sandbox.as_deref())
            && q.event.as_deref().is_none_or(|ev| e["event"] == ev)
            && q.decision.as_deref().is_none_or(|d| e["decision"] == d)
    };
    let (mut events, complete) =
        tokio::task::spawn_blocking(move || newest(&path, since, limit, keep))
            .await
            .map_err(|_| ServerError::Internal {
                action: "reading the audit trail",
            })?
            .map_err(|_| ServerError::Internal {
                action: "reading the audit trail",
            })?;
    events.reverse();
    Ok(Json(AuditEvents { events, complete }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::io::Write as _;

    fn line(tenant: &str, ts: DateTime<Utc>, n: usize) -> String {
        serde_json::json!({"tenant_id": tenant, "ts": ts.to_rfc3339(), "n": n, "pad": "x".repeat(200)})
            .to_string()
    }

    #[test]
    fn a_tenants_events_are_found_behind_any_volume_of_others_and_stop_at_an_old_checkpoint() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("audit.jsonl");
        let now = Utc::now();
        let hour = chrono::Duration::hours(1);
        let mut f = std::fs::File::create(&path).unwrap();
        // Before `since`: an alpha event, then a checkpoint written then.
        writeln!(f, "{}", line("alpha", now - hour * 3, 0)).unwrap();
        let cp = serde_json::json!({"checkpoint": {"ts": (now - hour * 2).to_rfc3339()}});
        writeln!(f, "{cp}").unwrap();
        // Since: two alpha events, one written late with an old time of its own, then
        // several blocks of another tenant's.
        writeln!(
            f,
            "{}",
            line("alpha", now - chrono::Duration::minutes(30), 1)
        )
        .unwrap();
        writeln!(f, "{}", line("alpha", now - hour * 5, 2)).unwrap();
        writeln!(
            f,
            "{}",
            line("alpha", now - chrono::Duration::minutes(20), 3)
        )
        .unwrap();
        for i in 0..15_000 {
            writeln!(f, "{}", line("beta", now, i)).unwrap();
        }
        drop(f);
        assert!(std::fs::metadata(&path).unwrap().len() > 3 * BLOCK);
        let alpha = |e: &serde_json::Value| e["tenant_id"] == "alpha";
        let (found, complete) = newest(&path, now - hour, 10, alpha).unwrap();
        let ns: Vec<u64> = found.iter().map(|e| e["n"].as_u64().unwrap()).collect();
        assert_eq!(ns, [3, 1], "newest first, only those since `since`");
        assert!(complete);
        // `limit` stops the read at the newest ones.
        let (found, _) = newest(&path, now - hour, 1, alpha).unwrap();
        assert_eq!(found[0]["n"], 3);
        // Since long ago: the read goes past the checkpoint to the start of the trail.
        let (found, _) = newest(&path, now - hour * 24, 10, alpha).unwrap();
        let ns: Vec<u64> = found.iter().map(|e| e["n"].as_u64().unwrap()).collect();
        assert_eq!(ns, [3, 2, 1, 0]);
    }

    #[test]
    fn the_read_goes_on_into_rotated_files() {
        let d = tempfile::tempdir().unwrap();
        let base = d.path().join("audit.jsonl");
        let now = Utc::now();
        let lines = |tenant: &str, from: usize, n: usize| -> String {
            (from..from + n)
                .map(|i| line(tenant, now, i) + "\n")
                .collect()
        };
        // The oldest rotated file holds alpha's events; the next one and the active file
        // only beta's (another tenant's volume forced the rotations).
        std::fs::write(d.path().join("audit.jsonl.000001"), lines("alpha", 0, 2)).unwrap();
        std::fs::write(d.path().join("audit.jsonl.000002"), lines("beta", 0, 50)).unwrap();
        std::fs::write(&base, lines("beta", 50, 50)).unwrap();
        let alpha = |e: &serde_json::Value| e["tenant_id"] == "alpha";
        let hour = chrono::Duration::hours(1);
        let (found, complete) = newest(&base, now - hour, 10, alpha).unwrap();
        let ns: Vec<u64> = found.iter().map(|e| e["n"].as_u64().unwrap()).collect();
        assert_eq!(ns, [1, 0]);
        assert!(complete);
    }
}
