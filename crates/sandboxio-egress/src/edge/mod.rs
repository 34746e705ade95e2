//! Secrets at the edge. The sandbox sees a placeholder per secret; for a CONNECT to a
//! host a secret is bound to, the proxy terminates TLS with a leaf from a per-sandbox CA
//! (name-constrained to the bound hosts, its key only in the supervisor's memory), puts
//! the value where the placeholder is in the request head, and sends the request over TLS
//! to the upstream, verified against the system roots and `[network] upstream_ca`. A
//! placeholder anywhere else (plain HTTP, a host it is not bound to) is refused.

mod ca;
mod placeholder;
mod spec;
mod upstream;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use hyper::header::HeaderValue;

pub use ca::{constraints, EdgeCa, Leaf};
pub use placeholder::{new_placeholder, PREFIX};
pub use spec::{LoadedSecret, SecretSpec, Source};
pub use upstream::{system_bundle, upstream_trust, UpstreamTrust, SYSTEM_BUNDLES};

use crate::error::{EgressError, Refusal};
use crate::target::Target;

/// Where the sandbox's trust bundle is written, relative to its workspace.
pub const BUNDLE_FILE: &str = ".sandboxio/ca-bundle.pem";

/// The variables that make the usual clients trust the bundle.
pub const CA_VARIABLES: &[&str] = &[
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "PIP_CERT",
    "GIT_SSL_CAINFO",
];

struct Bound {
    placeholder: String,
    secret: Arc<LoadedSecret>,
}

impl Bound {
    fn bound_to(&self, host: &str) -> bool {
        self.secret.hosts.iter().any(|g| g.matches(host))
    }
}

/// One sandbox's edge: its placeholders, its CA and the upstream trust.
pub struct Edge {
    secrets: Vec<Bound>,
    ca: EdgeCa,
    upstream: Arc<rustls::ClientConfig>,
    system_bundle: String,
    leaves: Mutex<HashMap<String, Arc<rustls::ServerConfig>>>,
}

impl Edge {
    /// A fresh edge (new placeholders, a new CA) for one sandbox.
    pub fn new(
        secrets: Vec<Arc<LoadedSecret>>,
        trust: &UpstreamTrust,
    ) -> Result<Edge, EgressError> {
        let hosts: Vec<_> = secrets.iter().flat_map(|s| s.hosts.clone()).collect();
        let ca = EdgeCa::new(&hosts)?;
        let secrets = secrets
            .into_iter()
            .map(|secret| Bound {
                placeholder: new_placeholder(&secret.name),
                secret,
            })
            .collect();
        Ok(Edge {
            secrets,
            ca,
            upstream: trust.client.clone(),
            system_bundle: trust.system_bundle.clone(),
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// `(name, placeholder)` of each secret: the sandbox's variables.
    pub fn placeholders(&self) -> Vec<(String, String)> {
        self.secrets
            .iter()
            .map(|b| (b.secret.name.clone(), b.placeholder.clone()))
            .collect()
    }

    /// The CA certificate (PEM).
    pub fn ca_pem(&self) -> String {
        self.ca.pem()
    }

    /// The sandbox's trust bundle: the system bundle, then this sandbox's CA.
    pub fn bundle(&self) -> String {
        let mut b = self.system_bundle.clone();
        if !b.is_empty() && !b.ends_with('\n') {
            b.push('\n');
        }
        b.push_str(&self.ca.pem());
        b
    }

    /// Whether a CONNECT to `host` is terminated here (some secret is bound to it).
    pub fn terminates(&self, host: &str) -> bool {
        self.secrets.iter().any(|b| b.bound_to(host))
    }

    pub fn upstream(&self) -> Arc<rustls::ClientConfig> {
        self.upstream.clone()
    }

    /// The TLS server side for `host`: a leaf signed by the sandbox's CA (made once).
    pub fn server_config(&self, host: &str) -> Result<Arc<rustls::ServerConfig>, EgressError> {
        if let Some(c) = self.leaves.lock().ok().and_then(|l| l.get(host).cloned()) {
            return Ok(c);
        }
        let (chain, key) = self.ca.issue(host)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut c = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .and_then(|b| b.with_no_client_auth().with_single_cert(chain, key))
            .map_err(|e| EgressError::EdgeSetup { why: e.to_string() })?;
        c.alpn_protocols = vec![b"http/1.1".to_vec()];
        let c = Arc::new(c);
        if let Ok(mut l) = self.leaves.lock() {
            l.insert(host.to_string(), c.clone());
        }
        Ok(c)
    }

    /// `(value, placeholder)` of each secret, for scrubbing what comes back: the value as
    /// it is first, then its hex and base64 forms (`scrub::encodings`), each replaced by
    /// the placeholder.
    pub fn pairs(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        for b in &self.secrets {
            let value = b.secret.value.expose();
            let placeholder = b.placeholder.as_bytes().to_vec();
            out.push((value.to_vec(), placeholder.clone()));
            for form in crate::proxy::scrub::encodings(value) {
                out.push((form, placeholder.clone()));
            }
        }
        out
    }

    /// The name of the first secret whose placeholder is in `bytes`.
    pub fn placeholder_in(&self, bytes: &[u8]) -> Option<&str> {
        self.secrets
            .iter()
            .find(|b| placeholder::contains(bytes, b.placeholder.as_bytes()))
            .map(|b| b.secret.name.as_str())
    }

    /// The name of the first secret whose placeholder is in a plain request's head.
    pub fn placeholder_in_head(&self, parts: &hyper::http::request::Parts) -> Option<&str> {
        self.placeholder_in(parts.uri.to_string().as_bytes())
            .or_else(|| {
                parts
                    .headers
                    .iter()
                    .find_map(|(_, v)| self.placeholder_in(v.as_bytes()))
            })
    }

    /// Puts each secret's value where its placeholder is in the head of a request to
    /// `target` (headers and the request line). Returns the names injected; refuses a
    /// placeholder of a secret not bound to the target's host, or a value that would make
    /// the request line invalid. Nothing is sent when this refuses.
    pub fn inject(
        &self,
        target: &Target,
        parts: &mut hyper::http::request::Parts,
    ) -> Result<Vec<String>, Refusal> {
        let mut names = BTreeSet::new();
        for b in &self.secrets {
            let p = b.placeholder.as_bytes();
            let value = b.secret.value.expose();
            let mut found = false;
            for (_, v) in parts.headers.iter_mut() {
                if let Some(new) = placeholder::replace(v.as_bytes(), p, value) {
                    found = true;
                    if !b.bound_to(&target.host) {
                        break;
                    }
                    let mut hv = HeaderValue::from_bytes(&new).map_err(|_| {
                        Refusal::SecretNotInjectable {
                            name: b.secret.name.clone(),
                            target: target.authority(),
                            why: "the header would not be valid",
                        }
                    })?;
                    hv.set_sensitive(true);
                    *v = hv;
                }
            }
            let line = parts.uri.to_string();
            if let Some(new) = placeholder::replace(line.as_bytes(), p, value) {
                found = true;
                // Only into an origin-form target: never into an authority or a userinfo.
                if parts.uri.authority().is_some() {
                    return Err(Refusal::SecretNotInjectable {
                        name: b.secret.name.clone(),
                        target: target.authority(),
                        why: "the request target names a host; a value goes only into a path or query",
                    });
                }
                if b.bound_to(&target.host) {
                    parts.uri =
                        hyper::Uri::try_from(new).map_err(|_| Refusal::SecretNotInjectable {
                            name: b.secret.name.clone(),
                            target: target.authority(),
                            why: "the request line would not be a valid URI",
                        })?;
                }
            }
            if found && !b.bound_to(&target.host) {
                return Err(Refusal::SecretNotBound {
                    name: b.secret.name.clone(),
                    target: target.authority(),
                });
            }
            if found {
                names.insert(b.secret.name.clone());
            }
        }
        Ok(names.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use crate::rules::HostGlob;
    use crate::secrets::SecretValue;
    use sandboxio_core::ErrorCode;

    fn secret(name: &str, value: &str, host: &str) -> Arc<LoadedSecret> {
        Arc::new(LoadedSecret {
            name: name.into(),
            value: SecretValue::new(value.as_bytes().to_vec()).unwrap(),
            hosts: vec![HostGlob::parse(host).unwrap()],
        })
    }

    fn edge() -> Edge {
        let trust = upstream_trust(None).unwrap();
        Edge::new(
            vec![
                secret("GH", "gh-value-1", "api.github.test"),
                secret("OTHER", "other-value-2", "*.other.test"),
            ],
            &trust,
        )
        .unwrap()
    }

    fn head(e: &Edge, uri: &str, auth: &str) -> hyper::http::request::Parts {
        let p: HashMap<_, _> = e.placeholders().into_iter().collect();
        let auth = auth.replace("$GH", &p["GH"]).replace("$OTHER", &p["OTHER"]);
        let uri = uri.replace("$GH", &p["GH"]);
        let (parts, _) = hyper::Request::builder()
            .uri(uri)
            .header("authorization", auth)
            .header("x-other", "plain")
            .body(())
            .unwrap()
            .into_parts();
        parts
    }

    #[test]
    fn the_placeholder_is_replaced_for_the_bound_host() {
        let e = edge();
        let mut parts = head(&e, "/repos?t=$GH", "Bearer $GH");
        let names = e
            .inject(&Target::tunnel("api.github.test", 443), &mut parts)
            .unwrap();
        assert_eq!(names, vec!["GH".to_string()]);
        assert_eq!(parts.headers["authorization"], "Bearer gh-value-1");
        assert!(parts.headers["authorization"].is_sensitive());
        assert_eq!(parts.uri.to_string(), "/repos?t=gh-value-1");
        assert_eq!(parts.headers["x-other"], "plain");
        // A request without placeholders injects nothing.
        let mut parts = head(&e, "/", "Bearer none");
        let none = e
            .inject(&Target::tunnel("api.github.test", 443), &mut parts)
            .unwrap();
        assert!(none.is_empty());
    }

    #[test]
    fn a_placeholder_is_never_put_into_an_authority() {
        let e = edge();
        for uri in [
            "https://user:$GH@api.github.test/x",
            "https://api.github.test/x?t=$GH",
        ] {
            let mut parts = head(&e, uri, "none");
            let r = e
                .inject(&Target::tunnel("api.github.test", 443), &mut parts)
                .unwrap_err();
            assert_eq!(r.code(), "SBX_E2418", "{uri}");
            assert!(!parts.uri.to_string().contains("gh-value-1"), "{uri}");
        }
    }

    #[test]
    fn a_placeholder_headed_elsewhere_is_refused() {
        let e = edge();
        // OTHER is bound to *.other.test, so a.other.test is terminated; GH is not bound there.
        assert!(e.terminates("a.other.test") && !e.terminates("other.test"));
        let mut parts = head(&e, "/", "Bearer $GH");
        let r = e
            .inject(&Target::tunnel("a.other.test", 443), &mut parts)
            .unwrap_err();
        assert_eq!(r.code(), "SBX_E2417");
        assert!(r.to_string().contains("`GH`"), "{r}");
        assert!(!format!("{:?}", parts.headers).contains("gh-value-1"));
        let mut parts = head(&e, "/x/$GH", "Bearer $OTHER");
        let r = e
            .inject(&Target::tunnel("a.other.test", 443), &mut parts)
            .unwrap_err();
        assert_eq!(r.code(), "SBX_E2417");
    }

    #[test]
    fn a_placeholder_in_a_plain_request_is_seen() {
        let e = edge();
        let parts = head(&e, "http://x.test/?k=$GH", "none");
        assert_eq!(e.placeholder_in_head(&parts), Some("GH"));
        let parts = head(&e, "http://x.test/", "token $OTHER");
        assert_eq!(e.placeholder_in_head(&parts), Some("OTHER"));
        let parts = head(&e, "http://x.test/", "sbx-secret-GH-0000");
        assert_eq!(e.placeholder_in_head(&parts), None);
    }

    #[test]
    fn the_bundle_ends_with_the_sandbox_ca_and_holds_no_value() {
        let e = edge();
        let b = e.bundle();
        assert!(b.trim_end().ends_with(e.ca_pem().trim_end()));
        assert!(!b.contains("gh-value-1"));
        for (name, p) in e.placeholders() {
            assert!(p.starts_with(&format!("{PREFIX}{name}-")));
        }
    }
}
