//! envd's HTTP routes: `GET /health`, and `/files` (`GET` downloads, `POST` uploads an
//! `application/octet-stream` body or `multipart/form-data`) over the native file API, so each is one operation
//! through the chain with its record. Errors are a status with `{"code", "message"}`, as
//! envd answers them.

use crate::error::ServerError;
use crate::extract::{Path, Query};
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use super::auth::{Envd, Sbx};
use super::error::E2bError;
use super::multipart;
use super::native;
use super::paths::{to_e2b, to_workspace};
use crate::model::PathQuery;
use crate::routes::files;
use crate::state::AppState;

#[derive(Debug, Deserialize)]
pub struct FileQuery {
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    username: Option<String>,
}

/// A plain envd error answer.
pub fn plain_err(e: &E2bError) -> Response {
    (e.status(), Json(e.rest_body())).into_response()
}

fn check_user(q: &FileQuery) -> Result<(), E2bError> {
    match q.username.as_deref() {
        None | Some("") | Some("user") => Ok(()),
        Some(other) => Err(E2bError::Unsupported {
            what: format!("user {}", other.chars().take(32).collect::<String>()),
            why: "files belong to the sandbox's one unprivileged user",
        }),
    }
}

fn path_of(q: &FileQuery) -> Result<String, E2bError> {
    let p = q.path.as_deref().ok_or_else(|| E2bError::BadRequest {
        why: "`path` is missing".into(),
    })?;
    to_workspace(p)
}

/// `GET /health`: 204 while the sandbox runs; 502 "not found" once it is gone.
pub async fn health(Sbx(r, _): Sbx<Envd>) -> Response {
    match r {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => plain_err(&e),
    }
}

/// `GET /files?path=`: the file's bytes, streamed from the sandbox's file as the native
/// download streams them (never held whole in memory).
pub async fn download(
    State(st): State<AppState>,
    Sbx(r, _): Sbx<Envd>,
    q: Result<Query<FileQuery>, ServerError>,
) -> Response {
    let go = async {
        let r = r?;
        let Query(q) = q?;
        check_user(&q)?;
        let rel = path_of(&q)?;
        let res = native::success(
            files::download(
                State(st.clone()),
                r.caller.clone(),
                Path(r.session.id.clone()),
                Query(PathQuery { path: rel.clone() }),
            )
            .await,
        )
        .await?;
        let is_listing = res
            .headers()
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
        if is_listing {
            return Err(E2bError::BadRequest {
                why: format!("`{}` is a directory", to_e2b(&rel)),
            });
        }
        Ok::<_, E2bError>(res)
    };
    match go.await {
        Ok(native) => {
            let (parts, body) = native.into_parts();
            let mut res = (StatusCode::OK, Body::new(body)).into_response();
            res.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            if let Some(len) = parts.headers.get(header::CONTENT_LENGTH) {
                res.headers_mut()
                    .insert(header::CONTENT_LENGTH, len.clone());
            }
            res
        }
        Err(e) => plain_err(&e),
    }
}

/// Writes one file through the native upload; its E2B `WriteInfo`.
async fn write_one(
    st: &AppState,
    r: &super::auth::InSandbox,
    path: &str,
    body: Body,
) -> Result<serde_json::Value, E2bError> {
    let rel = to_workspace(path)?;
    let res = files::upload(
        State(st.clone()),
        r.caller.clone(),
        Path(r.session.id.clone()),
        Query(PathQuery { path: rel.clone() }),
        body,
    )
    .await;
    native::body(res).await?;
    let name = rel.rsplit('/').next().unwrap_or_default().to_string();
    Ok(json!({"name": name, "type": "file", "path": to_e2b(&rel)}))
}

/// The error of a multipart upload stopped after `written` files were written: the
/// chain's answer, its message naming them.
fn partly_written(e: E2bError, written: &[serde_json::Value]) -> E2bError {
    let names: Vec<&str> = written.iter().filter_map(|w| w["path"].as_str()).collect();
    let note = format!("; written before it: {}", names.join(", "));
    match e {
        E2bError::Stopped(mut p) => {
            p.detail.push_str(&note);
            E2bError::Stopped(p)
        }
        E2bError::Server(se) => {
            let mut p = se.problem();
            p.detail.push_str(&note);
            E2bError::Stopped(Box::new(p))
        }
        other => {
            use sandboxio_core::ErrorCode as _;
            let mut p = crate::problem::Problem::new(
                other.status(),
                "upload stopped",
                other.code(),
                other.to_string(),
            );
            p.detail.push_str(&note);
            E2bError::Stopped(Box::new(p))
        }
    }
}

/// `POST /files?path=`: an `application/octet-stream` body (one file at `path`), or
/// `multipart/form-data` (what the E2B SDK sends for `str` and `bytes` data: each part a
/// file named by its `filename`, or by `path` when there is one part). Every part's name
/// and path are checked before any is written; each file is then one operation.
pub async fn upload(
    State(st): State<AppState>,
    Sbx(r, _): Sbx<Envd>,
    headers: HeaderMap,
    q: Result<Query<FileQuery>, ServerError>,
    body: Body,
) -> Response {
    let go = async {
        let r = r?;
        let Query(q) = q?;
        check_user(&q)?;
        if headers.get(header::CONTENT_ENCODING).is_some() {
            return Err(E2bError::Unsupported {
                what: "Content-Encoding".into(),
                why: "upload the bytes uncompressed",
            });
        }
        let ct = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("application/octet-stream");
        let Some(boundary) = multipart::boundary(ct) else {
            let path = q.path.clone().ok_or_else(|| E2bError::BadRequest {
                why: "`path` is missing".into(),
            })?;
            return Ok(json!([write_one(&st, &r, &path, body).await?]));
        };
        let bytes = crate::body::read_limited(body, st.opts.upload_limit).await?;
        let parts = multipart::parse(&bytes, &boundary)?;
        let one = parts.len() == 1;
        // Every part is checked (its name, its path in the workspace) before any is
        // written: bad input writes nothing.
        let mut files = Vec::with_capacity(parts.len());
        for p in parts {
            let path = match (&q.path, p.filename) {
                (Some(path), _) if one => path.clone(),
                (_, Some(f)) if !f.is_empty() => f,
                _ => {
                    return Err(E2bError::BadRequest {
                        why: "a part names no file (`filename`)".into(),
                    })
                }
            };
            to_workspace(&path)?;
            files.push((path, p.data));
        }
        let mut out = Vec::new();
        for (path, data) in files {
            match write_one(&st, &r, &path, Body::from(data)).await {
                Ok(v) => out.push(v),
                // Each file is one operation through the chain: one it stops leaves those
                // before it written, and the answer says which.
                Err(e) if !out.is_empty() => return Err(partly_written(e, &out)),
                Err(e) => return Err(e),
            }
        }
        Ok::<_, E2bError>(serde_json::Value::Array(out))
    };
    match go.await {
        Ok(v) => Json(v).into_response(),
        Err(e) => plain_err(&e),
    }
}
