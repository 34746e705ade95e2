//! The egress guard: rules, then the proxy's own lookup, then the SSRF guard on every
//! address found. What it returns is what the proxy connects to (pinned).

use std::net::SocketAddr;

use crate::error::Refusal;
use crate::resolve::Resolver;
use crate::rules::Rules;
use crate::ssrf::forbidden_class;
use crate::target::Target;

#[derive(Debug, Clone)]
pub struct Guard {
    pub rules: Rules,
    pub resolver: Resolver,
    /// The tenant whose sandbox this is (rules can be per tenant).
    pub tenant: String,
}

impl Guard {
    pub fn new(rules: Rules, resolver: Resolver, tenant: impl Into<String>) -> Guard {
        Guard {
            rules,
            resolver,
            tenant: tenant.into(),
        }
    }

    /// The addresses to connect to, all checked; refused when the rules do not allow the
    /// target, the name does not resolve, or any address it resolves to is one the SSRF
    /// guard refuses and neither `allow_private` nor a rule allowing this target names (a
    /// name mixing public and internal addresses is refused as a whole).
    pub async fn check(&self, t: &Target) -> Result<Vec<SocketAddr>, Refusal> {
        if !self.rules.allows(t, &self.tenant) {
            return Err(Refusal::NotAllowed {
                target: t.to_string(),
            });
        }
        let ips = self
            .resolver
            .lookup(&t.host)
            .await
            .map_err(|why| Refusal::Unresolved {
                host: t.host.clone(),
                why,
            })?;
        for ip in &ips {
            if let Some(class) = forbidden_class(*ip) {
                if !self.rules.exempts(*ip, t, &self.tenant) {
                    return Err(Refusal::ForbiddenAddress {
                        host: t.host.clone(),
                        addr: *ip,
                        class,
                    });
                }
            }
        }
        Ok(ips
            .into_iter()
            .map(|ip| SocketAddr::new(ip, t.port))
            .collect())
    }
}
