//! The request target inside a terminated tunnel (pure). The tunnel was decided for one
//! `host:port` and a secret may be injected for it, so each request inside must name that
//! host and nothing else: an upstream reading an absolute-form target takes its authority
//! over `Host` (RFC 9112, section 3.2.2), and a virtual host behind the same address would
//! otherwise get the secret. Origin-form (`/path`) goes as it is; absolute-form goes only
//! when its authority is exactly the tunnel's (`https`, no userinfo, the host in any case,
//! the port or its default) and is rewritten to origin-form; `*` only for `OPTIONS`;
//! anything else is refused before a byte goes upstream. A `Host` header, when present,
//! names the tunnel's host too.

use hyper::header;
use hyper::http::request::Parts;
use hyper::http::uri::Authority;
use hyper::{Method, Uri};

use crate::target::{normalize_host, Target};

/// Makes `parts` a request for the tunnel's own host: its target origin-form. Returns why
/// not when the request names anything else (nothing changed then).
pub(super) fn to_origin_form(parts: &mut Parts, tunnel: &Target) -> Result<(), String> {
    check_host_headers(&parts.headers, tunnel)?;
    let uri = &parts.uri;
    match (uri.scheme_str(), uri.authority()) {
        (None, None) => {
            let path = uri.path();
            if path == "*" {
                return if parts.method == Method::OPTIONS {
                    Ok(())
                } else {
                    Err("the target `*` is for OPTIONS only".into())
                };
            }
            if !path.starts_with('/') {
                return Err("the request target is not origin-form".into());
            }
            Ok(())
        }
        (None, Some(_)) => Err("an authority-form target is for CONNECT only".into()),
        (Some(scheme), authority) => {
            if !scheme.eq_ignore_ascii_case("https") {
                return Err(format!("the scheme `{scheme}` is not this TLS tunnel's"));
            }
            let Some(authority) = authority else {
                return Err("the absolute-form target names no host".into());
            };
            same_authority(authority, tunnel, 443)?;
            let origin = match uri.path_and_query() {
                Some(pq) if pq.as_str().starts_with('/') => pq.as_str().to_string(),
                Some(pq) if pq.as_str().starts_with('?') => format!("/{}", pq.as_str()),
                _ => "/".to_string(),
            };
            parts.uri = origin
                .parse::<Uri>()
                .map_err(|_| "the request target's path is not valid".to_string())?;
            Ok(())
        }
    }
}

/// Every `Host` header (at most one) names the tunnel's host and port (or no port).
fn check_host_headers(h: &hyper::HeaderMap, tunnel: &Target) -> Result<(), String> {
    let mut hosts = h.get_all(header::HOST).iter();
    let Some(first) = hosts.next() else {
        return Ok(());
    };
    if hosts.next().is_some() {
        return Err("the request has more than one `Host` header".into());
    }
    let authority = Authority::try_from(first.as_bytes())
        .map_err(|_| "its `Host` header is not a host".to_string())?;
    // A `Host` without a port means the scheme's default; clients write the tunnel's port
    // or none at all, so both are taken.
    same_authority(&authority, tunnel, tunnel.port).map_err(|why| format!("`Host`: {why}"))
}

/// `authority` is exactly the tunnel's: no userinfo, the same host (any case, one
/// trailing dot), and the same port (`default` when it names none).
fn same_authority(authority: &Authority, tunnel: &Target, default: u16) -> Result<(), String> {
    let raw = authority.as_str();
    if raw.contains('@') {
        return Err("a target with userinfo (`user@host`) is refused".into());
    }
    if raw.ends_with(':') {
        return Err(format!("`{raw}` has an empty port"));
    }
    let port = authority.port_u16().unwrap_or(default);
    if normalize_host(authority.host()) != tunnel.host || port != tunnel.port {
        return Err(format!("it names `{raw}`, not `{}`", tunnel.authority()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn parts(method: &str, target: &str, host: Option<&str>) -> Parts {
        let mut b = hyper::Request::builder().method(method).uri(target);
        if let Some(h) = host {
            b = b.header("host", h);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn only_the_tunnels_own_host_passes_and_goes_origin_form() {
        let t = Target::tunnel("api.test", 8443);
        for (target, host, origin) in [
            ("/v1/x?q=1", Some("api.test"), "/v1/x?q=1"),
            ("/v1/x", Some("API.test:8443"), "/v1/x"),
            ("/v1/x", None, "/v1/x"),
            (
                "https://api.test:8443/v1/x?q=1",
                Some("api.test"),
                "/v1/x?q=1",
            ),
            ("HTTPS://API.TEST.:8443", None, "/"),
        ] {
            let mut p = parts("GET", target, host);
            to_origin_form(&mut p, &t).unwrap();
            assert_eq!(p.uri.to_string(), origin, "{target}");
        }
        let mut p = parts("OPTIONS", "*", Some("api.test"));
        to_origin_form(&mut p, &t).unwrap();
        assert_eq!(p.uri, "*");
        // The default port of https is 443.
        let t443 = Target::tunnel("api.test", 443);
        let mut p = parts("GET", "https://api.test/x", None);
        to_origin_form(&mut p, &t443).unwrap();
        assert_eq!(p.uri, "/x");
    }

    #[test]
    fn anything_naming_another_authority_is_refused_unchanged() {
        let t = Target::tunnel("api.test", 8443);
        for (method, target, host) in [
            ("GET", "https://evil.test:8443/collect", Some("api.test")),
            ("GET", "https://evil.test/collect", None),
            ("GET", "https://api.test/x", None), // port 443, the tunnel is 8443
            ("GET", "https://user:pw@api.test:8443/x", None),
            ("GET", "https://user:sbx-secret-X-00@evil.test/steal", None),
            ("GET", "http://api.test:8443/x", None),
            ("GET", "https://api.test.evil.test:8443/x", None),
            ("GET", "https://api.test:8443:/x", None),
            ("GET", "*", None),
            ("GET", "api.test:8443", None),
            ("GET", "/x", Some("evil.test")),
            ("GET", "/x", Some("api.test:443")),
            ("GET", "/x", Some("user@api.test")),
        ] {
            let Ok(uri) = target.parse::<Uri>() else {
                continue;
            };
            let mut p = parts(method, "/", host);
            p.uri = uri.clone();
            assert!(
                to_origin_form(&mut p, &t).is_err(),
                "{method} {target} host {host:?}"
            );
            assert_eq!(p.uri, uri);
        }
        // Two Host headers.
        let mut p = parts("GET", "/x", Some("api.test"));
        p.headers.append(header::HOST, "evil.test".parse().unwrap());
        assert!(to_origin_form(&mut p, &t).is_err());
    }
}
