//! The dashboard's files, embedded in the binary (no CDN: it works offline), and the
//! headers every page and asset is answered with (a strict Content-Security-Policy: only
//! this origin's scripts, styles and connections; no framing).

use crate::extract::Path;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};

use crate::error::ServerError;

/// One embedded file.
pub struct Asset {
    pub name: &'static str,
    pub content_type: &'static str,
    pub body: &'static str,
}

macro_rules! asset {
    ($name:literal, $path:literal, $ct:literal) => {
        Asset {
            name: $name,
            content_type: $ct,
            body: include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/assets/", $path)),
        }
    };
}

pub const ASSETS: &[Asset] = &[
    asset!(
        "app.js",
        "dashboard/app.js",
        "text/javascript; charset=utf-8"
    ),
    asset!(
        "charts.js",
        "dashboard/charts.js",
        "text/javascript; charset=utf-8"
    ),
    asset!(
        "signin.js",
        "dashboard/signin.js",
        "text/javascript; charset=utf-8"
    ),
    asset!("app.css", "dashboard/app.css", "text/css; charset=utf-8"),
    asset!(
        "uPlot.iife.min.js",
        "vendor/uplot/uPlot.iife.min.js",
        "text/javascript; charset=utf-8"
    ),
    asset!(
        "uPlot.min.css",
        "vendor/uplot/uPlot.min.css",
        "text/css; charset=utf-8"
    ),
    asset!(
        "uPlot.LICENSE.txt",
        "vendor/uplot/LICENSE",
        "text/plain; charset=utf-8"
    ),
];

pub const DASHBOARD_HTML: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/assets/dashboard/index.html"
));
pub const SIGNIN_HTML: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/assets/dashboard/signin.html"
));

pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// Security headers of every dashboard answer.
pub fn security_headers(h: &mut HeaderMap) {
    let pairs: [(&str, &str); 4] = [
        ("content-security-policy", CSP),
        ("x-content-type-options", "nosniff"),
        ("referrer-policy", "no-referrer"),
        ("x-frame-options", "DENY"),
    ];
    for (k, v) in pairs {
        h.insert(HeaderName::from_static(k), HeaderValue::from_static(v));
    }
}

pub async fn asset(Path(name): Path<String>) -> Result<Response, ServerError> {
    let a = ASSETS
        .iter()
        .find(|a| a.name == name)
        .ok_or_else(|| ServerError::NotFound {
            what: "dashboard file",
            id: name.chars().take(64).collect(),
        })?;
    let mut res = a.body.into_response();
    let h = res.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(a.content_type));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    security_headers(h);
    Ok(res)
}
