//! envd's `Move` (`files.rename`). The chain has no move operation, so a rename is the
//! three file operations it is made of, each decided by policy and recorded: the source is
//! read (`file_read`), written at the destination (`file_write`), then deleted
//! (`file_delete`). A rule on either path applies as it would to a copy and a delete, and
//! a refusal stops the rename where it is: a refused read or write leaves the source as it
//! was; a refused delete leaves the copy, and the answer is that refusal. Files only: a
//! directory is refused (`SBX_E2503`), as it would be one operation per file inside it.

use crate::extract::{Path, Query};
use axum::body::Body;
use axum::extract::State;
use axum::http::header;
use serde_json::{json, Value};

use super::auth::InSandbox;
use super::error::E2bError;
use super::filesystem::entry;
use super::native;
use crate::model::PathQuery;
use crate::routes::files;
use crate::state::AppState;

fn query(rel: &str) -> Query<PathQuery> {
    Query(PathQuery {
        path: rel.to_string(),
    })
}

/// Renames the file at `from` to `to` (both workspace-relative); envd's `MoveResponse`.
pub async fn rename(st: &AppState, r: &InSandbox, from: &str, to: &str) -> Result<Value, E2bError> {
    let id = || Path(r.session.id.clone());
    // Both are normalised (`paths::to_workspace`); compared by components once more, so
    // that a second spelling of the source can never be copied onto it and then deleted.
    let same = crate::auth::components(from);
    if same.is_some() && same == crate::auth::components(to) {
        // Nothing moves; the answer still says what is there (one `file_read`).
        let res = files::stat(State(st.clone()), r.caller.clone(), id(), query(from)).await;
        return Ok(json!({"entry": entry(&native::json(res).await?)}));
    }
    let res = native::success(
        files::download(State(st.clone()), r.caller.clone(), id(), query(from)).await,
    )
    .await?;
    let is_dir = res
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if is_dir {
        return Err(E2bError::Unsupported {
            what: "renaming a directory".into(),
            why: "a rename is a copy and a delete through the chain, files only",
        });
    }
    // The source streams into the write, which holds it once (its digest is part of the
    // request the policy decides), within the tenant's upload limit.
    let res = files::upload(
        State(st.clone()),
        r.caller.clone(),
        id(),
        query(to),
        Body::new(res.into_body()),
    )
    .await;
    let written = native::json(res).await?;
    let size = written["record"]["bytes_in"].as_u64().unwrap_or(0);
    let res = files::remove(State(st.clone()), r.caller.clone(), id(), query(from)).await;
    native::body(res).await?;
    let name = to.rsplit('/').next().unwrap_or_default();
    let stat = json!({"path": to, "name": name, "is_dir": false, "size": size});
    Ok(json!({"entry": entry(&stat)}))
}
