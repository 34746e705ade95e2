//! Credentials for front ends: tenant API keys and capability tokens.
//!
//! A credential is shown once, when it is minted, as `<prefix>_<id>_<secret>`: the id finds
//! the row, the secret (256 random bits) is checked against its SHA-256, which is all the
//! store keeps. An API key is bound to a tenant and a set of scopes. A capability token is
//! minted from a key for one sandbox (optionally one directory of it and fewer scopes), and
//! expires; both can be revoked. Storage-neutral: the store keeps rows, this module decides.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use sandboxio_core::fingerprint::sha256_hex;
use serde::{Deserialize, Serialize};

/// What a credential may do. `admin` covers the kill switch and credentials of the tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    Exec,
    RunCode,
    Files,
    Approve,
    Admin,
    Read,
    /// Scrape `/metrics`: counts and spend of every tenant, nothing else.
    Metrics,
}

impl Scope {
    pub const ALL: [Scope; 7] = [
        Scope::Exec,
        Scope::RunCode,
        Scope::Files,
        Scope::Approve,
        Scope::Admin,
        Scope::Read,
        Scope::Metrics,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            Scope::Exec => "exec",
            Scope::RunCode => "run_code",
            Scope::Files => "files",
            Scope::Approve => "approve",
            Scope::Admin => "admin",
            Scope::Read => "read",
            Scope::Metrics => "metrics",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Scope {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Scope::ALL
            .into_iter()
            .find(|x| x.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown scope `{s}` (expected exec, run_code, files, approve, admin, read, metrics)"
                )
            })
    }
}

/// A set of scopes, kept sorted and without duplicates.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Scopes(Vec<Scope>);

impl Scopes {
    pub fn new(scopes: impl IntoIterator<Item = Scope>) -> Scopes {
        let mut v: Vec<Scope> = scopes.into_iter().collect();
        v.sort();
        v.dedup();
        Scopes(v)
    }
    pub fn all() -> Scopes {
        Scopes::new(Scope::ALL)
    }
    pub fn contains(&self, s: Scope) -> bool {
        self.0.contains(&s)
    }
    pub fn is_subset_of(&self, other: &Scopes) -> bool {
        self.0.iter().all(|s| other.contains(*s))
    }
    pub fn iter(&self) -> impl Iterator<Item = Scope> + '_ {
        self.0.iter().copied()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for Scopes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.0.iter().map(Scope::as_str).collect();
        f.write_str(&names.join(","))
    }
}

impl FromStr for Scopes {
    type Err = String;
    /// A comma-separated list; `all` is every scope.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.trim() == "all" {
            return Ok(Scopes::all());
        }
        let mut v = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            v.push(part.parse()?);
        }
        if v.is_empty() {
            return Err("a credential needs at least one scope".into());
        }
        Ok(Scopes::new(v))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CredentialKind {
    ApiKey,
    Capability,
}

impl CredentialKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            CredentialKind::ApiKey => "api_key",
            CredentialKind::Capability => "capability",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "api_key" => Some(CredentialKind::ApiKey),
            "capability" => Some(CredentialKind::Capability),
            _ => None,
        }
    }
    fn prefix(&self) -> &'static str {
        match self {
            CredentialKind::ApiKey => "sbxk",
            CredentialKind::Capability => "sbxc",
        }
    }
}

/// A stored credential: never the secret, only its hash.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credential {
    pub id: String,
    pub kind: CredentialKind,
    pub tenant: String,
    pub scopes: Scopes,
    /// SHA-256 of the secret part, hex.
    #[serde(skip_serializing)]
    pub secret_sha256: String,
    pub label: String,
    /// The sandbox a capability token is bound to.
    pub sandbox: Option<String>,
    /// The directory of that sandbox it is confined to (relative to the workspace).
    pub dir: Option<String>,
    /// The credential a capability token was minted from.
    pub parent: Option<String>,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "<Credential {} {} tenant={} scopes={}>",
            self.kind.as_str(),
            self.id,
            self.tenant,
            self.scopes
        )
    }
}

impl Credential {
    /// Usable at `now`: not revoked, not expired.
    pub fn is_live(&self, now: DateTime<Utc>) -> bool {
        self.revoked_at.is_none() && self.expires_at.is_none_or(|t| now < t)
    }
}

/// The secret text of a freshly minted credential. Shown once; `Debug` hides it.
pub struct Minted {
    pub credential: Credential,
    pub token: String,
}

impl fmt::Debug for Minted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<Minted {:?} token=…>", self.credential)
    }
}

/// What a capability token is minted for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapabilitySpec {
    pub sandbox: String,
    pub dir: Option<String>,
    pub scopes: Scopes,
    pub expires_at: DateTime<Utc>,
    pub label: String,
}

fn random_hex(n: usize) -> String {
    let mut b = vec![0u8; n];
    rand::Rng::fill(&mut rand::thread_rng(), b.as_mut_slice());
    hex::encode(b)
}

fn mint(kind: CredentialKind, tenant: &str, scopes: Scopes, label: &str) -> Minted {
    let id = random_hex(8);
    let secret = random_hex(32);
    let credential = Credential {
        id: id.clone(),
        kind,
        tenant: tenant.to_string(),
        scopes,
        secret_sha256: sha256_hex(secret.as_bytes()),
        label: label.to_string(),
        sandbox: None,
        dir: None,
        parent: None,
        created_at: Utc::now(),
        expires_at: None,
        revoked_at: None,
    };
    Minted {
        credential,
        token: format!("{}_{id}_{secret}", kind.prefix()),
    }
}

/// A new API key for `tenant` (store `credential`, show `token` once).
pub fn mint_api_key(tenant: &str, scopes: Scopes, label: &str) -> Minted {
    mint(CredentialKind::ApiKey, tenant, scopes, label)
}

/// A capability token derived from `parent` (same tenant, at most its scopes).
pub fn mint_capability(parent: &Credential, spec: CapabilitySpec) -> Minted {
    let mut m = mint(
        CredentialKind::Capability,
        &parent.tenant,
        spec.scopes,
        &spec.label,
    );
    m.credential.sandbox = Some(spec.sandbox);
    m.credential.dir = spec.dir;
    m.credential.parent = Some(parent.id.clone());
    m.credential.expires_at = Some(spec.expires_at);
    m
}

/// Splits a presented token into (kind, id, secret); `None` when it is not one of ours.
pub fn parse_token(token: &str) -> Option<(CredentialKind, &str, &str)> {
    let mut parts = token.splitn(3, '_');
    let kind = match parts.next()? {
        "sbxk" => CredentialKind::ApiKey,
        "sbxc" => CredentialKind::Capability,
        _ => return None,
    };
    let id = parts.next()?;
    let secret = parts.next()?;
    let hexish = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    (hexish(id, 16) && hexish(secret, 64)).then_some((kind, id, secret))
}

/// Whether `secret` matches the stored credential (constant time in the hash).
pub fn secret_matches(c: &Credential, kind: CredentialKind, secret: &str) -> bool {
    c.kind == kind && same_secret(&sha256_hex(secret.as_bytes()), &c.secret_sha256)
}

/// Whether two secrets (tokens, digests) are equal, compared without stopping at the first
/// difference (the time depends on the length only).
pub fn same_secret(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn secrets_are_the_same_only_when_equal() {
        assert!(
            same_secret("abc", "abc") && !same_secret("abc", "abd") && !same_secret("abc", "ab")
        );
    }

    #[test]
    fn minted_token_parses_and_matches_only_its_own_hash() {
        let m = mint_api_key("acme", Scopes::all(), "ci");
        let (kind, id, secret) = parse_token(&m.token).unwrap();
        assert_eq!(kind, CredentialKind::ApiKey);
        assert_eq!(id, m.credential.id);
        assert!(secret_matches(&m.credential, kind, secret));
        let other = mint_api_key("acme", Scopes::all(), "ci");
        assert!(!secret_matches(&other.credential, kind, secret));
        assert!(!secret_matches(
            &m.credential,
            CredentialKind::Capability,
            secret
        ));
        assert!(!format!("{m:?}").contains(secret));
    }

    #[test]
    fn malformed_tokens_are_not_ours() {
        for t in [
            "",
            "sbxk",
            "sbxk_12_34",
            "Bearer x",
            "sbxq_0011223344556677_00",
        ] {
            assert!(parse_token(t).is_none(), "{t}");
        }
    }

    #[test]
    fn scopes_parse_and_reject_unknown_names() {
        let s: Scopes = "read, exec,read".parse().unwrap();
        assert_eq!(s.to_string(), "exec,read");
        assert!("exec,root".parse::<Scopes>().is_err());
        assert!("".parse::<Scopes>().is_err());
        assert!(s.is_subset_of(&Scopes::all()));
        assert!(!Scopes::all().is_subset_of(&s));
    }
}
