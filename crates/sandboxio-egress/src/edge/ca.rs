//! The per-sandbox CA: generated in memory when the sandbox starts (its key never leaves
//! the supervisor), name-constrained to the hosts the sandbox's secrets are bound to, and
//! issuing a leaf certificate for each of those hosts the program connects to.

use rcgen::{
    BasicConstraints, CertificateParams, CidrSubnet, DnType, ExtendedKeyUsagePurpose,
    GeneralSubtree, IsCa, KeyPair, KeyUsagePurpose, NameConstraints,
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::error::EgressError;
use crate::rules::HostGlob;

/// How long certificates are valid: a sandbox runs at most an hour.
const VALIDITY: time::Duration = time::Duration::days(2);

pub struct EdgeCa {
    cert: rcgen::Certificate,
    key: KeyPair,
    hosts: Vec<HostGlob>,
}

/// A leaf certificate (with the CA after it) and its key.
pub type Leaf = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

fn setup(e: rcgen::Error) -> EgressError {
    EgressError::EdgeSetup { why: e.to_string() }
}

fn validity(p: &mut CertificateParams) {
    let now = time::OffsetDateTime::now_utc();
    p.not_before = now - time::Duration::hours(1);
    p.not_after = now + VALIDITY;
}

/// The name constraints for `hosts`: each name (and its subdomains) permitted; when no
/// IP literal is bound, every IP address excluded, so no certificate this CA signs can
/// name an address.
pub fn constraints(hosts: &[HostGlob]) -> NameConstraints {
    let mut permitted = Vec::new();
    for h in hosts {
        match h {
            HostGlob::Exact(_) if h.ip().is_some() => {
                if let Some(ip) = h.ip() {
                    let bits = if ip.is_ipv4() { 32 } else { 128 };
                    permitted.push(GeneralSubtree::IpAddress(CidrSubnet::from_addr_prefix(
                        ip, bits,
                    )));
                }
            }
            HostGlob::Exact(name) | HostGlob::Subdomains(name) => {
                permitted.push(GeneralSubtree::DnsName(name.clone()))
            }
            HostGlob::Any => {}
        }
    }
    let mut excluded = Vec::new();
    if !hosts.iter().any(|h| h.ip().is_some()) {
        excluded.push(GeneralSubtree::IpAddress(CidrSubnet::V4([0; 4], [0; 4])));
        excluded.push(GeneralSubtree::IpAddress(CidrSubnet::V6([0; 16], [0; 16])));
    }
    NameConstraints {
        permitted_subtrees: permitted,
        excluded_subtrees: excluded,
    }
}

impl EdgeCa {
    /// A fresh CA for `hosts` (never `*`).
    pub fn new(hosts: &[HostGlob]) -> Result<EdgeCa, EgressError> {
        if hosts.is_empty() || hosts.contains(&HostGlob::Any) {
            return Err(EgressError::EdgeSetup {
                why: "a CA for secrets needs named hosts".into(),
            });
        }
        let mut p = CertificateParams::default();
        p.distinguished_name.push(
            DnType::CommonName,
            "sandboxio sandbox CA (secrets at the edge)",
        );
        p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        p.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        p.name_constraints = Some(constraints(hosts));
        validity(&mut p);
        let key = KeyPair::generate().map_err(setup)?;
        let cert = p.self_signed(&key).map_err(setup)?;
        Ok(EdgeCa {
            cert,
            key,
            hosts: hosts.to_vec(),
        })
    }

    /// The CA certificate (PEM), for the sandbox's trust bundle.
    pub fn pem(&self) -> String {
        self.cert.pem()
    }

    pub fn der(&self) -> CertificateDer<'static> {
        self.cert.der().clone()
    }

    /// A leaf for `host`, which must be one of the CA's bound hosts.
    pub fn issue(&self, host: &str) -> Result<Leaf, EgressError> {
        if !self.hosts.iter().any(|g| g.matches(host)) {
            return Err(EgressError::EdgeSetup {
                why: format!("`{host}` is not a host the sandbox's secrets are bound to"),
            });
        }
        self.sign(host)
    }

    /// Signs a leaf for any name (the constraints are what a client checks).
    fn sign(&self, host: &str) -> Result<Leaf, EgressError> {
        let mut p = CertificateParams::new(vec![host.to_string()]).map_err(setup)?;
        p.distinguished_name.push(DnType::CommonName, host);
        p.is_ca = IsCa::ExplicitNoCa;
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        p.use_authority_key_identifier_extension = true;
        validity(&mut p);
        let key = KeyPair::generate().map_err(setup)?;
        let cert = p.signed_by(&key, &self.cert, &self.key).map_err(setup)?;
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        Ok((vec![cert.der().clone(), self.der()], der))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use std::sync::Arc;

    use rustls::client::danger::ServerCertVerifier;
    use rustls_pki_types::{ServerName, UnixTime};

    use super::*;

    fn verify(ca: &EdgeCa, leaf: &Leaf, name: &str) -> Result<(), rustls::Error> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.der()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let v =
            rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .unwrap();
        v.verify_server_cert(
            &leaf.0[0],
            &leaf.0[1..],
            &ServerName::try_from(name.to_string()).unwrap(),
            &[],
            UnixTime::now(),
        )
        .map(|_| ())
    }

    fn ca() -> EdgeCa {
        EdgeCa::new(&[
            HostGlob::parse("api.example.com").unwrap(),
            HostGlob::parse("*.example.org").unwrap(),
        ])
        .unwrap()
    }

    #[test]
    fn leaves_for_bound_hosts_verify() {
        let ca = ca();
        for host in ["api.example.com", "x.example.org"] {
            let leaf = ca.issue(host).unwrap();
            verify(&ca, &leaf, host).unwrap();
        }
    }

    #[test]
    fn the_ca_refuses_to_issue_for_other_hosts() {
        let ca = ca();
        for host in ["evil.test", "example.com", "example.org", "203.0.113.10"] {
            let e = ca.issue(host).unwrap_err();
            assert_eq!(sandboxio_core::ErrorCode::code(&e), "SBX_E2407");
        }
    }

    #[test]
    fn name_constraints_make_a_leaf_for_another_host_fail_verification() {
        // Even a leaf signed with the CA's own key is refused by a client for a name
        // outside the bound hosts: the constraint is in the CA certificate.
        let ca = ca();
        for host in ["evil.test", "api.example.com.evil.test", "203.0.113.10"] {
            let forged = ca.sign(host).unwrap();
            let e = verify(&ca, &forged, host).unwrap_err();
            assert!(
                format!("{e:?}").contains("NameConstraint")
                    || format!("{e:?}").contains("NotValidForName"),
                "{host}: {e:?}"
            );
        }
    }

    #[test]
    fn a_ca_needs_named_hosts() {
        assert!(EdgeCa::new(&[]).is_err());
        assert!(EdgeCa::new(&[HostGlob::Any]).is_err());
    }
}
