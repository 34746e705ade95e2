//! URL extractors: a route's path parameters and query string, refused as coded problems
//! (`SBX_E1810`, 422) instead of axum's plain-text rejections, and a query value that is not
//! UTF-8 once percent-decoded is refused instead of read with U+FFFD in place of its bytes
//! (`?path=%ff` named the file `"\u{fffd}"`, which may exist).
//!
//! Same shape as axum's `Path` and `Query`, so a handler imports these instead. A route of
//! the E2B API, which answers in E2B's own error shape, takes `Result<Query<T>, ServerError>`
//! and converts the error itself.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::error::ServerError;

/// A route's path parameters (axum's `Path` with a coded rejection).
#[derive(Debug, Clone)]
pub struct Path<T>(pub T);

/// A request's query string (axum's `Query` with a coded rejection and a UTF-8 check).
#[derive(Debug, Clone)]
pub struct Query<T>(pub T);

impl<T, S> FromRequestParts<S> for Path<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ServerError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| Path(p.0))
            .map_err(|e| ServerError::BadValue {
                field: "path parameters",
                why: e.body_text(),
            })
    }
}

impl<T, S> FromRequestParts<S> for Query<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ServerError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let raw = parts.uri.query().unwrap_or("");
        if let Some(name) = not_utf8(raw) {
            return Err(ServerError::BadValue {
                field: "query string",
                why: format!(
                    "parameter `{name}` is not UTF-8 once percent-decoded (files are named by their UTF-8 names)"
                ),
            });
        }
        axum::extract::Query::<T>::try_from_uri(&parts.uri)
            .map(|q| Query(q.0))
            .map_err(|e| ServerError::BadValue {
                field: "query string",
                why: e.body_text(),
            })
    }
}

/// The name (lossy, for the message) of the first query pair whose name or value does not
/// decode to UTF-8 (`application/x-www-form-urlencoded`: `%XX` escapes, `+` for a space).
fn not_utf8(query: &str) -> Option<String> {
    for pair in query.split('&') {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let name_bytes = percent_decode(name);
        if std::str::from_utf8(&name_bytes).is_err()
            || std::str::from_utf8(&percent_decode(value)).is_err()
        {
            return Some(String::from_utf8_lossy(&name_bytes).into_owned());
        }
    }
    None
}

/// `application/x-www-form-urlencoded` decoding to bytes: `+` is a space, `%XX` a byte (a
/// stray or short escape stays as it is).
fn percent_decode(s: &str) -> Vec<u8> {
    let spaced = s.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding_follows_the_form_encoding() {
        assert_eq!(percent_decode("a%20b+c"), b"a b c");
        assert_eq!(percent_decode("%e2%82%ac"), "\u{20ac}".as_bytes());
        // A stray or short escape stays as it is.
        assert_eq!(percent_decode("100%"), b"100%");
        assert_eq!(percent_decode("%4"), b"%4");
        assert_eq!(percent_decode("%zz"), b"%zz");
    }

    #[test]
    fn a_value_that_is_not_utf8_names_its_parameter() {
        assert_eq!(not_utf8("path=a.txt&user=x"), None);
        assert_eq!(not_utf8("path=%e2%82%ac"), None);
        assert_eq!(not_utf8("user=x&path=%ff").as_deref(), Some("path"));
        assert_eq!(not_utf8("path=%c3").as_deref(), Some("path"));
        assert!(not_utf8("%ff=1").is_some());
        assert_eq!(not_utf8(""), None);
    }
}
