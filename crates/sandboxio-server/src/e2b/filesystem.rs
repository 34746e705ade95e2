//! envd's `filesystem.Filesystem` service over the workspace. Each call is the native file
//! API's (the same handler, so the same scope check, the same operation through the chain
//! and the same record); paths are E2B's, under `/home/user` (`paths.rs`). `MakeDir` is
//! the native `mkdir` (a `file_write` of `dir/`; one that existed is Connect
//! `already_exists`), `Move` is in `rename.rs`. The watchers are not implemented: they
//! answer `unimplemented` with the code.

use crate::body::AfterAuth;
use crate::extract::{Path, Query};
use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::{Envd, InSandbox, Sbx};
use super::connect;
use super::error::E2bError;
use super::native;
use super::paths::{to_e2b, to_workspace};
use super::rename;
use crate::model::{DirQuery, PathQuery};
use crate::routes::files;
use crate::state::AppState;

/// Deepest listing `ListDir` walks (each level is one operation per directory).
const MAX_DEPTH: u32 = 4;

#[derive(Debug, Deserialize)]
struct PathRequest {
    #[serde(default)]
    path: String,
    #[serde(default)]
    depth: Option<u32>,
}

#[derive(Debug, Deserialize)]
struct MoveRequest {
    #[serde(default)]
    source: String,
    #[serde(default)]
    destination: String,
}

/// envd's `EntryInfo` for a native `FileStat` (`path` is workspace-relative).
pub(super) fn entry(stat: &Value) -> Value {
    let rel = stat["path"].as_str().unwrap_or(".");
    let is_dir = stat["is_dir"].as_bool().unwrap_or(false);
    let name = if rel == "." {
        "user".to_string()
    } else {
        stat["name"].as_str().unwrap_or_default().to_string()
    };
    json!({
        "name": name,
        "type": if is_dir { "FILE_TYPE_DIRECTORY" } else { "FILE_TYPE_FILE" },
        "path": to_e2b(rel),
        // int64 in proto3 JSON is a string.
        "size": stat["size"].as_u64().unwrap_or(0).to_string(),
    })
}

async fn list_once(st: &AppState, r: &InSandbox, rel: &str) -> Result<Vec<Value>, E2bError> {
    let res = files::list(
        State(st.clone()),
        r.caller.clone(),
        Path(r.session.id.clone()),
        Query(DirQuery {
            path: Some(rel.to_string()),
        }),
    )
    .await;
    let v = native::json(res).await?;
    Ok(v["entries"].as_array().cloned().unwrap_or_default())
}

async fn call(
    st: &AppState,
    r: Result<InSandbox, E2bError>,
    method: &str,
    body: &[u8],
) -> Result<Value, E2bError> {
    let r = r?;
    if method == "Move" {
        let req: MoveRequest = connect::unary_request(body)?;
        let (from, to) = (to_workspace(&req.source)?, to_workspace(&req.destination)?);
        return rename::rename(st, &r, &from, &to).await;
    }
    let req: PathRequest = match method {
        "Stat" | "ListDir" | "Remove" | "MakeDir" => connect::unary_request(body)?,
        other => {
            return Err(E2bError::NotImplemented {
                method: format!(
                    "filesystem.Filesystem/{}",
                    other.chars().take(64).collect::<String>()
                ),
            })
        }
    };
    let rel = to_workspace(&req.path)?;
    let id = r.session.id.clone();
    match method {
        "Stat" => {
            let res = files::stat(
                State(st.clone()),
                r.caller.clone(),
                Path(id),
                Query(PathQuery { path: rel }),
            )
            .await;
            let v = native::json(res).await?;
            Ok(json!({"entry": entry(&v)}))
        }
        "ListDir" => {
            let depth = req.depth.unwrap_or(1).clamp(1, MAX_DEPTH);
            let mut out = Vec::new();
            let mut level = vec![rel];
            for _ in 0..depth {
                let mut next = Vec::new();
                for dir in &level {
                    for e in list_once(st, &r, dir).await? {
                        if e["is_dir"].as_bool() == Some(true) {
                            if let Some(p) = e["path"].as_str() {
                                next.push(p.to_string());
                            }
                        }
                        out.push(entry(&e));
                    }
                }
                level = next;
            }
            Ok(json!({"entries": out}))
        }
        "MakeDir" => {
            let res = files::mkdir(
                State(st.clone()),
                r.caller.clone(),
                Path(id),
                Query(PathQuery { path: rel.clone() }),
            )
            .await;
            let v = native::json(res).await?;
            if v["output"]["created"].as_bool() == Some(false) {
                return Err(E2bError::Exists { path: to_e2b(&rel) });
            }
            let name = rel.rsplit('/').next().unwrap_or_default();
            let stat = json!({"path": rel, "name": name, "is_dir": true, "size": 0});
            Ok(json!({"entry": entry(&stat)}))
        }
        _ => {
            let res = files::remove(
                State(st.clone()),
                r.caller.clone(),
                Path(id),
                Query(PathQuery { path: rel }),
            )
            .await;
            native::body(res).await?;
            Ok(json!({}))
        }
    }
}

/// The unary methods of `filesystem.Filesystem`.
pub async fn unary(
    State(st): State<AppState>,
    Sbx(r, _): Sbx<Envd>,
    Path(method): Path<String>,
    AfterAuth(body): AfterAuth,
) -> Response {
    match call(&st, r, &method, &body).await {
        Ok(v) => connect::unary_ok(&v),
        Err(e) => connect::unary_err(&e),
    }
}

/// `WatchDir` (server streaming): not implemented.
pub async fn watch_dir() -> Response {
    connect::stream_err(&E2bError::NotImplemented {
        method: "filesystem.Filesystem/WatchDir".into(),
    })
}
