//! Fingerprints: a hash of a request's canonical form.
//!
//! Canonical form is the JSON serialisation with object keys sorted (serde_json's
//! `Value` keeps a `BTreeMap` unless `preserve_order` is on, which this workspace never
//! enables). Approvals and idempotency keys are bound to it.

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::operation::Operation;

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Fingerprint(pub String);

impl Fingerprint {
    /// Hash of any serialisable value in canonical form, prefixed with a domain tag.
    pub fn of_value<T: Serialize>(domain: &str, v: &T) -> Fingerprint {
        let canonical = serde_json::to_value(v)
            .and_then(|v| serde_json::to_vec(&v))
            .unwrap_or_default();
        let mut h = Sha256::new();
        h.update(domain.as_bytes());
        h.update([0u8]);
        h.update(&canonical);
        Fingerprint(hex::encode(h.finalize()))
    }

    /// The fingerprint of an operation: everything that changes what runs, including
    /// who asks. The idempotency key itself is excluded (it names the request).
    pub fn of_operation(op: &Operation) -> Fingerprint {
        let mut op = op.clone();
        op.idempotency_key = None;
        Fingerprint::of_value("sandboxio.operation.v1", &op)
    }

    pub fn short(&self) -> &str {
        &self.0[..self.0.len().min(12)]
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// SHA-256 of bytes, hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operation::{IdempotencyKey, OperationArgs, Principal};

    #[test]
    fn key_does_not_change_fingerprint_but_args_do() {
        let a = Operation::new(
            Principal::tenant("t"),
            OperationArgs::Exec {
                argv: vec!["ls".into()],
            },
        );
        let mut b = a.clone();
        b.idempotency_key = Some(IdempotencyKey::new("k1").unwrap());
        assert_eq!(Fingerprint::of_operation(&a), Fingerprint::of_operation(&b));
        let c = Operation::new(
            Principal::tenant("t"),
            OperationArgs::Exec {
                argv: vec!["ls".into(), "-l".into()],
            },
        );
        assert_ne!(Fingerprint::of_operation(&a), Fingerprint::of_operation(&c));
        let d = Operation::new(
            Principal::tenant("u"),
            OperationArgs::Exec {
                argv: vec!["ls".into()],
            },
        );
        assert_ne!(Fingerprint::of_operation(&a), Fingerprint::of_operation(&d));
    }
}
