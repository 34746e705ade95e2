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
    /// who asks and the whole sandbox request (env values, stdin and file contents by
    /// digest). The idempotency key itself is excluded (it names the request).
    pub fn of_operation(op: &Operation) -> Fingerprint {
        let mut view = request_view(op);
        if let Some(o) = view.as_object_mut() {
            o.remove("idempotency_key");
        }
        Fingerprint::of_value("sandboxio.operation.v2", &view)
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

/// The request as approvers, the journal and the fingerprint see it: every field of the
/// operation, with environment values, stdin and file contents replaced by
/// `sha256:<hex>` of their bytes. Values never leave this function; digests do. A field
/// added to [`Operation`] or [`crate::ExecRequest`] appears here without a change.
pub fn request_view(op: &Operation) -> serde_json::Value {
    let mut v = serde_json::to_value(op).unwrap_or(serde_json::Value::Null);
    let digest = |b: &[u8]| serde_json::Value::String(format!("sha256:{}", sha256_hex(b)));
    if let (Some(exec), Some(req)) = (
        v.get_mut("exec").and_then(|e| e.as_object_mut()),
        op.exec.as_ref(),
    ) {
        if let Some(env) = exec.get_mut("env").and_then(|e| e.as_object_mut()) {
            for (k, val) in env.iter_mut() {
                if let Some(s) = req.env.get(k) {
                    *val = digest(s.as_bytes());
                }
            }
        }
        if let Some(stdin) = &req.stdin {
            exec.insert("stdin".into(), digest(stdin));
        }
        if let Some(files) = exec.get_mut("files").and_then(|e| e.as_object_mut()) {
            for (k, val) in files.iter_mut() {
                if let Some(b) = req.files.get(k) {
                    *val = digest(b);
                }
            }
        }
    }
    v
}

/// SHA-256 of bytes, hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::ExecRequest;
    use crate::operation::{IdempotencyKey, OperationArgs, Principal};

    fn exec_op() -> Operation {
        let mut req = ExecRequest::new(["python3", "-c", "print(1)"]);
        req.env.insert("A".into(), "1".into());
        req.stdin = Some(b"in".to_vec());
        req.files.insert("f".into(), b"x".to_vec());
        Operation::new(
            Principal::tenant("t"),
            OperationArgs::Exec {
                argv: req.argv.clone(),
            },
        )
        .with_exec(req)
    }

    /// Changes one JSON value so that it still deserialises but differs.
    fn mutate(v: &serde_json::Value) -> Option<serde_json::Value> {
        use serde_json::Value;
        Some(match v {
            Value::Null => return None,
            Value::Bool(b) => Value::Bool(!b),
            Value::Number(n) => Value::from(n.as_u64().unwrap_or(0) + 7),
            Value::String(s) => Value::String(format!("{s}x")),
            Value::Array(a) => {
                let mut a = a.clone();
                match a.first().cloned() {
                    Some(first) => a.push(first),
                    None => return None,
                }
                Value::Array(a)
            }
            Value::Object(o) => {
                let mut o = o.clone();
                let (k, first) = o.iter().next().map(|(k, v)| (k.clone(), v.clone()))?;
                o.insert(k, mutate(&first)?);
                Value::Object(o)
            }
        })
    }

    /// Every field of the sandbox request is in the fingerprint. The destructuring below
    /// stops compiling when a field is added, so whoever adds one decides here.
    #[test]
    fn every_exec_request_field_is_fingerprinted() {
        let op = exec_op();
        let Some(req) = op.exec.clone() else {
            unreachable!()
        };
        let ExecRequest {
            argv: _,
            env: _,
            env_allowlist: _,
            stdin: _,
            stdin_stream: _,
            tty: _,
            files: _,
            input_dir: _,
            output_dir: _,
            mounts: _,
            workdir: _,
            limits: _,
            network: _,
            keep_workspace: _,
            allow_exec_in_writable: _,
            context: _,
            pinned: _,
        } = req.clone();
        let base = Fingerprint::of_operation(&op);
        let mut full = req.clone();
        full.input_dir = Some("/in".into());
        full.output_dir = Some("/out".into());
        full.mounts =
            vec![
                crate::mount::Mount::parse("/src:/project:rw", std::path::Path::new("/")).unwrap(),
            ];
        full.workdir = Some("/project".into());
        full.context = Some("ctx-1".into());
        full.pinned
            .insert("/in".into(), format!("tree-v1:{}", "0".repeat(64)));
        full.stdin_stream = true;
        full.tty = true;
        full.network = crate::exec::NetworkMode::Allowlist {
            allow: vec!["a:1".into()],
        };
        let full_json = serde_json::to_value(&full).unwrap();
        let mut checked = 0;
        for (key, val) in full_json.as_object().unwrap() {
            let mut j = full_json.clone();
            // Mutate the field and every nested value, one at a time.
            let Some(m) = mutate(val) else { continue };
            j[key] = m;
            let changed: ExecRequest = serde_json::from_value(j).unwrap();
            let mut o = op.clone();
            o.exec = Some(full.clone());
            let before = Fingerprint::of_operation(&o);
            o.exec = Some(changed);
            assert_ne!(before, Fingerprint::of_operation(&o), "field `{key}`");
            checked += 1;
        }
        assert!(checked >= 10, "only {checked} fields checked");
        // Env values, stdin and file contents by value.
        let mut o = op.clone();
        o.exec.as_mut().unwrap().env.insert("A".into(), "2".into());
        assert_ne!(base, Fingerprint::of_operation(&o));
        let mut o = op.clone();
        o.exec.as_mut().unwrap().stdin = Some(b"other".to_vec());
        assert_ne!(base, Fingerprint::of_operation(&o));
        let mut o = op.clone();
        o.exec
            .as_mut()
            .unwrap()
            .files
            .insert("f".into(), b"y".to_vec());
        assert_ne!(base, Fingerprint::of_operation(&o));
        let mut o = op.clone();
        o.exec.as_mut().unwrap().limits.memory = crate::units::ByteSize::mib(1);
        assert_ne!(base, Fingerprint::of_operation(&o));
    }

    /// Every field of the operation is in the fingerprint, but the idempotency key.
    #[test]
    fn every_operation_field_is_fingerprinted() {
        let op = exec_op();
        let Operation {
            principal: _,
            args: _,
            tier: _,
            idempotency_key: _,
            estimated_cost: _,
            cost_category: _,
            idempotent: _,
            rationale: _,
            exec: _,
        } = op.clone();
        let mut o = op.clone();
        o.tier = Some(crate::tier::IsolationTier::Process);
        let mut all = vec![o];
        let mut o = op.clone();
        o.estimated_cost = Some(crate::money::Money::ZERO);
        all.push(o);
        let mut o = op.clone();
        o.cost_category = crate::money::CostCategory::Api;
        all.push(o);
        let mut o = op.clone();
        o.idempotent = true;
        all.push(o);
        let mut o = op.clone();
        o.rationale = Some("why".into());
        all.push(o);
        let mut o = op.clone();
        o.principal.agent = Some("a".into());
        all.push(o);
        let mut o = op.clone();
        o.exec = None;
        all.push(o);
        let base = Fingerprint::of_operation(&op);
        for o in all {
            assert_ne!(base, Fingerprint::of_operation(&o), "{o:?}");
        }
    }

    #[test]
    fn request_view_holds_digests_not_values() {
        let mut op = exec_op();
        op.exec
            .as_mut()
            .unwrap()
            .env
            .insert("TOKEN".into(), "canary-4711".into());
        let text = request_view(&op).to_string();
        assert!(!text.contains("canary-4711"), "{text}");
        assert!(text.contains("TOKEN"), "{text}");
        assert!(text.contains("sha256:"), "{text}");
    }

    #[test]
    fn file_write_content_digest_is_fingerprinted() {
        let w = |d: Option<&str>| {
            Operation::new(
                Principal::tenant("t"),
                OperationArgs::FileWrite {
                    path: "a".into(),
                    size: 1,
                    content_sha256: d.map(str::to_string),
                },
            )
        };
        assert_ne!(
            Fingerprint::of_operation(&w(Some("aa"))),
            Fingerprint::of_operation(&w(Some("bb")))
        );
    }

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
