//! Secrets at the edge, for the gateway: `[[secrets]]` values loaded once when the
//! runtime opens (each also redacted everywhere), and, for each sandbox with network in the
//! namespace tier, a fresh [`Edge`] (placeholders, CA) and the request the sandbox gets:
//! placeholders instead of values, the trust bundle, the CA variables.

use std::path::Path;
use std::sync::Arc;

use sandboxio_audit::Secret;
use sandboxio_core::ExecRequest;
use sandboxio_egress::edge::{
    upstream_trust, LoadedSecret, SecretSpec, Source, UpstreamTrust, BUNDLE_FILE, CA_VARIABLES,
};
use sandboxio_egress::secrets::{SecretError, SecretStore};
use sandboxio_egress::{Edge, EgressError};

/// The configured secrets with their values (or why a value is not available).
#[derive(Default)]
pub struct EdgeSecrets {
    specs: Vec<SecretSpec>,
    loaded: Vec<Result<Arc<LoadedSecret>, EgressError>>,
    trust: Option<UpstreamTrust>,
}

impl std::fmt::Debug for EdgeSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<EdgeSecrets {}>", self.specs.len())
    }
}

impl EdgeSecrets {
    /// Loads every value. A value that cannot be read is kept as its error: a sandbox
    /// with network then does not start, while the rest of the runtime works (so that
    /// `sandboxio secrets set` can fill the store). An unusable `upstream_ca` is an error.
    pub fn load(
        specs: &[SecretSpec],
        upstream_ca: Option<&Path>,
        env: &dyn Fn(&str) -> Option<String>,
        store: impl FnOnce() -> Result<SecretStore, SecretError>,
    ) -> Result<EdgeSecrets, EgressError> {
        let trust = if specs.is_empty() && upstream_ca.is_none() {
            None
        } else {
            Some(upstream_trust(upstream_ca)?)
        };
        let store = if specs.iter().any(|s| s.source == Source::Stored) {
            Some(store())
        } else {
            None
        };
        let loaded = specs
            .iter()
            .map(|s| {
                let st = match &store {
                    Some(Ok(st)) => Some(st),
                    Some(Err(e)) if s.source == Source::Stored => {
                        return Err(EgressError::SecretUnavailable {
                            name: s.name.clone(),
                            why: e.to_string(),
                        })
                    }
                    _ => None,
                };
                s.load(env, st).map(Arc::new)
            })
            .collect();
        Ok(EdgeSecrets {
            specs: specs.to_vec(),
            loaded,
            trust,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }

    /// The loaded values, for the redaction (they never reach a sink).
    pub fn redaction_secrets(&self) -> Vec<Secret> {
        self.loaded
            .iter()
            .filter_map(|l| l.as_ref().ok())
            .map(|s| Secret::new(String::from_utf8_lossy(s.value.expose()).into_owned()))
            .collect()
    }

    /// A fresh edge for one sandbox; any value missing or a failed CA setup is an error
    /// (the sandbox does not start: never a placeholder passed through silently).
    pub fn edge(&self) -> Result<Edge, EgressError> {
        let mut secrets = Vec::with_capacity(self.loaded.len());
        for l in &self.loaded {
            secrets.push(l.clone()?);
        }
        let trust = self.trust.as_ref().ok_or_else(|| EgressError::EdgeSetup {
            why: "no upstream trust was built".into(),
        })?;
        Edge::new(secrets, trust)
    }

    /// `req` as the sandbox gets it: each secret's variable holds its placeholder, host
    /// variables that hold a value (the name or an `env` source) are not passed through,
    /// and the trust bundle (system CAs plus the sandbox's CA) is in the workspace, named
    /// by the usual CA variables.
    pub fn prepare(&self, edge: &Edge, req: &mut ExecRequest) {
        let sources: Vec<&str> = self
            .specs
            .iter()
            .filter_map(|s| match &s.source {
                Source::Env(v) => Some(v.as_str()),
                _ => None,
            })
            .collect();
        let placeholders = edge.placeholders();
        req.env_allowlist.retain(|n| {
            !sources.contains(&n.as_str()) && !placeholders.iter().any(|(name, _)| name == n)
        });
        for (name, p) in placeholders {
            req.env.insert(name, p);
        }
        req.files
            .insert(BUNDLE_FILE.to_string(), edge.bundle().into_bytes());
        let path = format!("{}/{BUNDLE_FILE}", sandboxio_sandbox::ns::INSIDE_WORKSPACE);
        for v in CA_VARIABLES {
            req.env.insert((*v).to_string(), path.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use sandboxio_config::SecretSection;
    use sandboxio_core::ErrorCode;

    fn specs() -> Vec<SecretSpec> {
        SecretSpec::from_sections(&[SecretSection {
            name: "API_TOKEN".into(),
            env: Some("HOST_TOKEN".into()),
            hosts: vec!["api.example.com".into()],
            ..Default::default()
        }])
        .unwrap()
    }

    fn no_store() -> Result<SecretStore, SecretError> {
        Err(SecretError::Unknown { name: "x".into() })
    }

    #[test]
    fn the_sandbox_gets_placeholders_the_bundle_and_no_value() {
        let env = |k: &str| (k == "HOST_TOKEN").then(|| "tok-canary-31".to_string());
        let e = EdgeSecrets::load(&specs(), None, &env, no_store).unwrap();
        assert_eq!(e.redaction_secrets().len(), 1);
        let edge = e.edge().unwrap();
        let mut req = ExecRequest::new(vec!["true".to_string()]);
        req.env_allowlist = vec!["PATH".into(), "HOST_TOKEN".into(), "API_TOKEN".into()];
        req.env.insert("API_TOKEN".into(), "tok-canary-31".into());
        e.prepare(&edge, &mut req);
        assert_eq!(req.env_allowlist, vec!["PATH".to_string()]);
        assert!(req.env["API_TOKEN"].starts_with("sbx-secret-API_TOKEN-"));
        assert_eq!(
            req.env["SSL_CERT_FILE"],
            "/workspace/.sandboxio/ca-bundle.pem"
        );
        let all = serde_json::to_string(&req).unwrap();
        assert!(
            !all.contains("tok-canary-31"),
            "the value reached the request"
        );
        assert!(String::from_utf8_lossy(&req.files[BUNDLE_FILE]).contains("BEGIN CERTIFICATE"));
    }

    #[test]
    fn bad_entries_fail_configuration_loading_with_a_code() {
        for text in [
            "[[secrets]]\nname = \"T\"\nhosts = [\"a.test\"]\n",
            "[[secrets]]\nname = \"T\"\nenv = \"T\"\nstored = true\nhosts = [\"a.test\"]\n",
            "[[secrets]]\nname = \"T\"\nenv = \"T\"\nhosts = [\"*\"]\n",
            "[[secrets]]\nname = \"T\"\nenv = \"T\"\nhosts = [\"a.test\"]\n[[secrets]]\nname = \"T\"\nenv = \"U\"\nhosts = [\"b.test\"]\n",
        ] {
            let c = sandboxio_config::Config::parse(text, "c.toml").unwrap();
            let e = crate::runtime::gateway_config(&c, None).err().unwrap();
            assert_eq!(e.code(), "SBX_E2405", "{text}: {e}");
        }
        let ok = "[[secrets]]\nname = \"T\"\nfile = \"/run/t\"\nhosts = [\"*.a.test\"]\n";
        let c = sandboxio_config::Config::parse(ok, "c.toml").unwrap();
        assert_eq!(
            crate::runtime::gateway_config(&c, None)
                .unwrap()
                .secrets
                .len(),
            1
        );
        // An unknown key in an entry is refused by the parser.
        let e =
            sandboxio_config::Config::parse("[[secrets]]\nname = \"T\"\nvalue = \"x\"\n", "c.toml")
                .unwrap_err();
        assert_eq!(e.code(), "SBX_E1102");
    }

    #[test]
    fn a_missing_value_stops_the_sandbox_not_the_runtime() {
        let e = EdgeSecrets::load(&specs(), None, &|_: &str| None, no_store).unwrap();
        assert!(e.redaction_secrets().is_empty());
        assert_eq!(e.edge().err().unwrap().code(), "SBX_E2408");
    }
}
