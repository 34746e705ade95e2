//! How the proxy verifies an upstream it injects a secret for: the system's CA bundle plus
//! the operator's extra CA file (`[network] upstream_ca`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;

use crate::error::EgressError;

/// Where distributions keep the system CA bundle.
pub const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

/// The trust the proxy uses upstream, and the bundle text the sandbox gets (the system
/// bundle; the sandbox's own CA is appended per sandbox).
pub struct UpstreamTrust {
    pub client: Arc<rustls::ClientConfig>,
    pub system_bundle: String,
}

/// The system bundle: the first of [`SYSTEM_BUNDLES`] that is readable (empty if none).
pub fn system_bundle() -> (Option<PathBuf>, String) {
    for p in SYSTEM_BUNDLES {
        if let Ok(text) = std::fs::read_to_string(p) {
            return (Some(PathBuf::from(p)), text);
        }
    }
    (None, String::new())
}

fn certs(pem: &[u8]) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_slice_iter(pem)
        .filter_map(Result::ok)
        .collect()
}

/// Builds the upstream trust: system roots plus `extra` (which must hold at least one
/// certificate).
pub fn upstream_trust(extra: Option<&Path>) -> Result<UpstreamTrust, EgressError> {
    let (_, system) = system_bundle();
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(certs(system.as_bytes()));
    if let Some(p) = extra {
        let bad = |why: String| EgressError::UpstreamCa {
            path: p.display().to_string(),
            why,
        };
        let text = std::fs::read(p).map_err(|e| bad(format!("cannot read it: {}", e.kind())))?;
        let extra = certs(&text);
        if extra.is_empty() {
            return Err(bad("it holds no PEM certificate".into()));
        }
        let (added, _) = roots.add_parsable_certificates(extra);
        if added == 0 {
            return Err(bad("none of its certificates is a usable CA".into()));
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| EgressError::EdgeSetup { why: e.to_string() })?
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(UpstreamTrust {
        client: Arc::new(client),
        system_bundle: system,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use sandboxio_core::ErrorCode;

    #[test]
    fn an_unusable_extra_ca_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let e = upstream_trust(Some(&missing)).err().unwrap();
        assert_eq!(e.code(), "SBX_E2406");
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a certificate\n").unwrap();
        let e = upstream_trust(Some(&junk)).err().unwrap();
        assert_eq!(e.code(), "SBX_E2406");
        assert!(e.to_string().contains("no PEM certificate"), "{e}");
    }

    #[test]
    fn an_extra_ca_is_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let ca =
            super::super::EdgeCa::new(&[crate::rules::HostGlob::parse("a.test").unwrap()]).unwrap();
        let f = dir.path().join("ca.pem");
        std::fs::write(&f, ca.pem()).unwrap();
        upstream_trust(Some(&f)).unwrap();
    }
}
