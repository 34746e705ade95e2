//! Files of a sandbox's workspace: upload, download, list, stat, delete. Each is one
//! operation through the chain; the gateway confines it beneath the workspace (a path that
//! climbs out is refused with a code and recorded). The path travels in the query string
//! (`?path=`), byte for byte as the caller wrote it. A download is streamed from the file
//! the gateway opened (never held whole, whatever its size); `mkdir` is a `file_write` of
//! the directory's path with a trailing `/`.

use crate::extract::{Path, Query};
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;
use sandboxio_core::{OperationArgs, OperationStatus};
use sandboxio_gateway::credential::Scope;
use sandboxio_gateway::Outcome;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::answer;
use crate::auth::Caller;
use crate::backend::{session_submission, SubmitExtras, Submitted};
use crate::body::read_limited;
use crate::context::OperationId;
use crate::error::ServerError;
use crate::model::{DirQuery, FileList, FileStat, OutcomeView, PathQuery};
use crate::problem::Problem;
use crate::routes::session_for;
use crate::state::AppState;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(download, upload, remove))
        .routes(routes!(list))
        .routes(routes!(stat))
        .routes(routes!(mkdir))
}

/// Submits a file operation; `Ok(Ok(outcome))` when it ran, `Ok(Err(response))` for an
/// answer that is not a file (a denial, an ask).
async fn file_op(
    st: &AppState,
    caller: &Caller,
    id: &str,
    path: &str,
    args: OperationArgs,
    content: Option<Vec<u8>>,
    slot: Option<sandboxio_gateway::FileSlot>,
) -> Result<Result<Outcome, Response>, ServerError> {
    caller.require(st, Scope::Files).await?;
    let s = session_for(st, caller, id)?;
    if !caller.may_touch_path(path) {
        return Err(ServerError::NotFound {
            what: "file",
            id: path.chars().take(256).collect(),
        });
    }
    let _busy = s.begin();
    let extra = SubmitExtras {
        content,
        ..SubmitExtras::default()
    };
    let mut sub = session_submission(&s, args, &caller.ctx, extra);
    // A caller confined to a directory is confined there by the gateway as well, which
    // resolves beneath it: a link inside it cannot lead elsewhere in the workspace.
    sub.confine = caller.credential.dir.clone();
    sub.file_handle = slot;
    match st.backend.submit(sub, Some(s.run_token()?)).await? {
        // A file operation that failed (a missing file, a directory) did nothing: a problem.
        Submitted::Done(out) if out.record.status == OperationStatus::Ok => Ok(Ok(*out)),
        Submitted::Done(out) => Ok(Err(answer::stopped(&out, &caller.ctx).into_response())),
        asked => Ok(Err(answer::submitted(asked, &caller.ctx))),
    }
}

fn with_op(mut res: Response, out: &Outcome) -> Response {
    res.extensions_mut()
        .insert(OperationId(out.record.operation_id.clone()));
    res
}

fn entries(v: &serde_json::Value, dir: &str) -> Vec<FileStat> {
    let base = dir.trim_end_matches('/');
    v.get("entries")
        .and_then(|e| e.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|e| {
                    let name = e.get("name")?.as_str()?.to_string();
                    let path = if base.is_empty() || base == "." {
                        name.clone()
                    } else {
                        format!("{base}/{name}")
                    };
                    Some(FileStat {
                        path,
                        name,
                        is_dir: e.get("is_dir")?.as_bool()?,
                        size: e.get("size")?.as_u64()?,
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Downloads a file (the bytes; a directory answers its listing as JSON).
#[utoipa::path(get, path = "/v1/sandboxes/{id}/files", tag = "files",
    params(("id" = String, Path), PathQuery),
    responses((status = 200, content_type = "application/octet-stream"),
        (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn download(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<PathQuery>,
) -> Result<Response, ServerError> {
    let args = OperationArgs::FileRead {
        path: q.path.clone(),
    };
    let slot = sandboxio_gateway::FileSlot::default();
    let out = match file_op(&st, &caller, &id, &q.path, args, None, Some(slot.clone())).await? {
        Ok(out) => out,
        Err(res) => return Ok(res),
    };
    let v = out.tool_output.clone().unwrap_or_default();
    let opened = slot.lock().ok().and_then(|mut f| f.take());
    if let Some(file) = opened {
        let size = out.record.bytes_out;
        let stream =
            tokio_util::io::ReaderStream::with_capacity(tokio::fs::File::from_std(file), 64 << 10);
        let mut res = (StatusCode::OK, Body::from_stream(stream)).into_response();
        let h = res.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(size));
        return Ok(with_op(res, &out));
    }
    if v.get("entries").is_some() {
        let list = FileList {
            entries: entries(&v, &q.path),
            path: q.path,
        };
        return Ok(with_op(Json(list).into_response(), &out));
    }
    let bytes = if let Some(t) = v.get("content").and_then(|c| c.as_str()) {
        t.as_bytes().to_vec()
    } else if let Some(b) = v.get("content_base64").and_then(|c| c.as_str()) {
        base64::engine::general_purpose::STANDARD
            .decode(b)
            .map_err(|_| ServerError::Internal {
                action: "decoding a file",
            })?
    } else {
        Vec::new()
    };
    let mut res = (StatusCode::OK, bytes).into_response();
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    Ok(with_op(res, &out))
}

/// Uploads a file (the request body, at most the upload limit), creating directories.
#[utoipa::path(put, path = "/v1/sandboxes/{id}/files", tag = "files",
    params(("id" = String, Path), PathQuery),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses((status = 200, body = OutcomeView), (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn upload(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<PathQuery>,
    body: Body,
) -> Result<Response, ServerError> {
    let limit = st.opts.quota(caller.tenant()).upload_limit;
    let bytes = read_limited(body, limit).await?.to_vec();
    let args = OperationArgs::FileWrite {
        path: q.path.clone(),
        size: bytes.len() as u64,
        content_sha256: None,
    };
    Ok(
        match file_op(&st, &caller, &id, &q.path, args, Some(bytes), None).await? {
            Ok(out) => answer::outcome(out, &caller.ctx),
            Err(res) => res,
        },
    )
}

/// Deletes a file or an empty directory.
#[utoipa::path(delete, path = "/v1/sandboxes/{id}/files", tag = "files",
    params(("id" = String, Path), PathQuery),
    responses((status = 200, body = OutcomeView), (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn remove(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<PathQuery>,
) -> Result<Response, ServerError> {
    let args = OperationArgs::FileDelete {
        path: q.path.clone(),
    };
    Ok(
        match file_op(&st, &caller, &id, &q.path, args, None, None).await? {
            Ok(out) => answer::outcome(out, &caller.ctx),
            Err(res) => res,
        },
    )
}

/// Lists a directory (the workspace's root when `path` is absent).
#[utoipa::path(get, path = "/v1/sandboxes/{id}/files/list", tag = "files",
    params(("id" = String, Path), DirQuery),
    responses((status = 200, body = FileList), (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn list(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<DirQuery>,
) -> Result<Response, ServerError> {
    let path = q.path.unwrap_or_else(|| ".".into());
    let args = OperationArgs::FileRead { path: path.clone() };
    let out = match file_op(&st, &caller, &id, &path, args, None, None).await? {
        Ok(out) => out,
        Err(res) => return Ok(res),
    };
    let v = out.tool_output.clone().unwrap_or_default();
    if v.get("entries").is_none() {
        return Err(ServerError::BadValue {
            field: "path",
            why: format!("`{path}` is a file, not a directory"),
        });
    }
    let list = FileList {
        entries: entries(&v, &path),
        path,
    };
    Ok(with_op(Json(list).into_response(), &out))
}

/// What a path is: a file or a directory, and its size.
#[utoipa::path(get, path = "/v1/sandboxes/{id}/files/stat", tag = "files",
    params(("id" = String, Path), PathQuery),
    responses((status = 200, body = FileStat), (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn stat(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<PathQuery>,
) -> Result<Response, ServerError> {
    let trimmed = q.path.trim_end_matches('/');
    let (parent, name) = match trimmed.rsplit_once('/') {
        Some((p, n)) => (if p.is_empty() { "." } else { p }, n),
        None => (".", trimmed),
    };
    if name.is_empty() || name == "." {
        let s = FileStat {
            path: ".".into(),
            name: ".".into(),
            is_dir: true,
            size: 0,
        };
        // The root is checked like any path (scope, sandbox, directory of a token).
        caller.require(&st, Scope::Files).await?;
        session_for(&st, &caller, &id)?;
        return Ok(Json(s).into_response());
    }
    // The path itself is checked by the chain when it is read as part of its parent.
    let args = OperationArgs::FileRead {
        path: parent.to_string(),
    };
    let out = match file_op(&st, &caller, &id, &q.path, args, None, None).await? {
        Ok(out) => out,
        Err(res) => return Ok(res),
    };
    let v = out.tool_output.clone().unwrap_or_default();
    let found = entries(&v, parent).into_iter().find(|e| e.name == name);
    match found {
        Some(e) => Ok(with_op(Json(e).into_response(), &out)),
        None => Err(ServerError::NotFound {
            what: "file",
            id: q.path.chars().take(256).collect(),
        }),
    }
}

/// Creates a directory and its parents (`mkdir -p`): a `file_write` of `path/`.
#[utoipa::path(post, path = "/v1/sandboxes/{id}/files/mkdir", tag = "files",
    params(("id" = String, Path), PathQuery),
    responses((status = 200, body = OutcomeView), (status = "4XX", body = Problem)),
    security(("bearer" = [])))]
pub async fn mkdir(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<PathQuery>,
) -> Result<Response, ServerError> {
    let trimmed = q.path.trim_end_matches('/');
    if trimmed.is_empty() || trimmed.split('/').all(|c| c.is_empty() || c == ".") {
        return Err(ServerError::BadValue {
            field: "path",
            why: format!("`{}` names no directory to create", q.path),
        });
    }
    let path = format!("{trimmed}/");
    let args = OperationArgs::FileWrite {
        path: path.clone(),
        size: 0,
        content_sha256: None,
    };
    Ok(
        match file_op(&st, &caller, &id, &path, args, None, None).await? {
            Ok(out) => answer::outcome(out, &caller.ctx),
            Err(res) => res,
        },
    )
}
