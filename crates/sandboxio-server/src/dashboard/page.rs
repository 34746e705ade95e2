//! `GET /`: the dashboard for a signed-in browser, the sign-in page for any other. The
//! page carries the session's CSRF token in a `<meta>` element; no data is in the page
//! itself (it comes from the data endpoints, which check the session again).

use axum::extract::{Request, State};
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};

use super::assets::{security_headers, DASHBOARD_HTML, SIGNIN_HTML};
use super::operator::signed_in;
use crate::state::AppState;

/// The placeholder in the page replaced by the CSRF token (hex, so nothing to escape).
const CSRF_SLOT: &str = "{{csrf}}";

pub async fn index(State(st): State<AppState>, req: Request) -> Response {
    let (parts, _) = req.into_parts();
    let html = match signed_in(&parts, &st).await {
        Ok(op) => DASHBOARD_HTML.replace(CSRF_SLOT, &op.csrf),
        Err(_) => SIGNIN_HTML.to_string(),
    };
    let mut res = html.into_response();
    let h = res.headers_mut();
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    security_headers(h);
    res
}
