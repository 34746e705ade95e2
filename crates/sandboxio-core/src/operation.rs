//! Operations: every request an agent makes, whatever it asks for.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::CoreError;
use crate::money::{CostCategory, Money};
use crate::tier::IsolationTier;

/// Unique id of one operation (a UUID-like hex string chosen by the gateway).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct OperationId(pub String);

impl fmt::Display for OperationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A caller-chosen idempotency key, scoped by tenant. 1..=200 printable ASCII characters.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub fn new(s: impl Into<String>) -> Result<Self, CoreError> {
        let s = s.into();
        if s.is_empty() || s.len() > 200 || !s.bytes().all(|b| (0x21..0x7f).contains(&b)) {
            return Err(CoreError::InvalidIdentifier {
                input: s.chars().take(64).collect(),
                why: "an idempotency key is 1 to 200 printable ASCII characters without spaces",
            });
        }
        Ok(IdempotencyKey(s))
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for IdempotencyKey {
    type Error = CoreError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        IdempotencyKey::new(s)
    }
}

impl From<IdempotencyKey> for String {
    fn from(k: IdempotencyKey) -> String {
        k.0
    }
}

/// Who is asking: tenant (mandatory), session and agent (optional).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Principal {
    pub tenant: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
}

impl Principal {
    pub fn tenant(tenant: impl Into<String>) -> Self {
        Principal {
            tenant: tenant.into(),
            session: None,
            agent: None,
        }
    }
}

impl Default for Principal {
    fn default() -> Self {
        Principal::tenant("default")
    }
}

/// Languages `run_code` understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    Python,
    Node,
    Bash,
}

impl Language {
    pub fn as_str(&self) -> &'static str {
        match self {
            Language::Python => "python",
            Language::Node => "node",
            Language::Bash => "bash",
        }
    }
    /// The interpreter argv prefix; the code file path is appended.
    pub fn interpreter(&self) -> &'static [&'static str] {
        match self {
            Language::Python => &["python3", "-I"],
            Language::Node => &["node"],
            Language::Bash => &["bash", "--noprofile", "--norc"],
        }
    }
    pub fn file_name(&self) -> &'static str {
        match self {
            Language::Python => "main.py",
            Language::Node => "main.js",
            Language::Bash => "main.sh",
        }
    }
}

impl FromStr for Language {
    type Err = CoreError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "python" | "python3" | "py" => Ok(Language::Python),
            "node" | "js" | "javascript" => Ok(Language::Node),
            "bash" | "sh" => Ok(Language::Bash),
            _ => Err(CoreError::UnknownLanguage {
                input: s.to_string(),
            }),
        }
    }
}

/// The kind of an operation; derived from its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OperationKind {
    Exec,
    RunCode,
    FileRead,
    FileWrite,
    FileDelete,
    NetConnect,
    ToolCall,
    /// A page loaded by a disposable headless browser inside the namespace tier.
    Browse,
    /// An operator's action: kill, resume, approve, deny, policy reload, key rotation.
    Admin,
}

impl OperationKind {
    pub const ALL: [OperationKind; 9] = [
        OperationKind::Exec,
        OperationKind::RunCode,
        OperationKind::FileRead,
        OperationKind::FileWrite,
        OperationKind::FileDelete,
        OperationKind::NetConnect,
        OperationKind::ToolCall,
        OperationKind::Browse,
        OperationKind::Admin,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            OperationKind::Exec => "exec",
            OperationKind::RunCode => "run_code",
            OperationKind::FileRead => "file_read",
            OperationKind::FileWrite => "file_write",
            OperationKind::FileDelete => "file_delete",
            OperationKind::NetConnect => "net_connect",
            OperationKind::ToolCall => "tool_call",
            OperationKind::Browse => "browse",
            OperationKind::Admin => "admin",
        }
    }

    /// Whether an operation of this kind changes anything (and so takes an idempotency key).
    pub fn is_mutating(&self) -> bool {
        !matches!(self, OperationKind::FileRead)
    }
}

impl FromStr for OperationKind {
    type Err = CoreError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        OperationKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| CoreError::InvalidOperation {
                why: format!("unknown operation kind `{s}`"),
            })
    }
}

impl fmt::Display for OperationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the operation asks for. The kind is derived from the variant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum OperationArgs {
    Exec {
        argv: Vec<String>,
    },
    RunCode {
        language: Language,
        code: String,
    },
    FileRead {
        path: String,
    },
    FileWrite {
        path: String,
        #[serde(default)]
        size: u64,
        /// SHA-256 of the bytes written (hex), set by the gateway from the content, so the
        /// fingerprint (and an approval or an idempotency key) covers what is written.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content_sha256: Option<String>,
    },
    FileDelete {
        path: String,
    },
    NetConnect {
        host: String,
        port: u16,
    },
    ToolCall {
        tool: String,
        #[serde(default)]
        arguments: serde_json::Value,
    },
    /// Load `url` (http or https) in a disposable headless browser inside the namespace
    /// tier, reaching the web only through the egress proxy; answers the page's text and,
    /// with `screenshot`, a PNG of it.
    Browse {
        url: String,
        #[serde(default)]
        screenshot: bool,
    },
    /// An operator's action; authorised by the front end, recorded like everything else.
    Admin {
        action: AdminAction,
    },
}

/// Longest URL a `browse` takes.
pub const BROWSE_URL_MAX: usize = 2048;

/// A `browse` URL: `http://` or `https://` followed by a host, at most
/// [`BROWSE_URL_MAX`] bytes, no whitespace or control characters (so it can never be read as
/// a browser flag or split into two arguments).
pub fn check_browse_url(url: &str) -> Result<(), String> {
    let shown: String = url.chars().take(80).collect();
    if url.len() > BROWSE_URL_MAX {
        return Err(format!("the url is longer than {BROWSE_URL_MAX} bytes"));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "the url `{}` contains whitespace or a control character",
            shown.escape_default()
        ));
    }
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    match rest {
        Some(r) if !r.is_empty() && !r.starts_with(['/', '?', '#', '@', ':']) => Ok(()),
        Some(_) => Err(format!("the url `{shown}` names no host")),
        None => Err(format!(
            "the url `{shown}` is not http:// or https:// (a browse loads web pages only)"
        )),
    }
}

/// What an operator does. Each is an operation with its own record and actor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case", deny_unknown_fields)]
pub enum AdminAction {
    /// Engage the kill switch: everything is denied, running work is cancelled, pending
    /// approvals end as denials.
    Kill { reason: String },
    /// Release the kill switch.
    Resume,
    /// Approve a pending approval.
    Approve {
        approval_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Deny a pending approval.
    Deny {
        approval_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// The policy was reloaded (the digest of the new policy set).
    PolicyReload { digest: String },
    /// The audit signing key was rotated (the new public key's id).
    KeyRotate { key_id: String },
    /// Reopen a budget scope closed by an overrun (`tenant:acme`, `global`, ...).
    BudgetReopen { scope: String },
    /// An API key was created for `tenant` with `scopes` (never its secret or hash).
    KeyCreate {
        key_id: String,
        tenant: String,
        scopes: String,
    },
    /// Revoke an API key and every capability token minted from it.
    KeyRevoke { key_id: String },
    /// A stored secret was sealed as `name`, bound to `hosts` (never its value).
    SecretSet { name: String, hosts: Vec<String> },
    /// A stored secret was removed.
    SecretRemove { name: String },
}

impl AdminAction {
    pub fn name(&self) -> &'static str {
        match self {
            AdminAction::Kill { .. } => "kill",
            AdminAction::Resume => "resume",
            AdminAction::Approve { .. } => "approve",
            AdminAction::Deny { .. } => "deny",
            AdminAction::PolicyReload { .. } => "policy_reload",
            AdminAction::KeyRotate { .. } => "key_rotate",
            AdminAction::BudgetReopen { .. } => "budget_reopen",
            AdminAction::KeyCreate { .. } => "key_create",
            AdminAction::KeyRevoke { .. } => "key_revoke",
            AdminAction::SecretSet { .. } => "secret_set",
            AdminAction::SecretRemove { .. } => "secret_remove",
        }
    }
}

impl OperationArgs {
    pub fn kind(&self) -> OperationKind {
        match self {
            OperationArgs::Exec { .. } => OperationKind::Exec,
            OperationArgs::RunCode { .. } => OperationKind::RunCode,
            OperationArgs::FileRead { .. } => OperationKind::FileRead,
            OperationArgs::FileWrite { .. } => OperationKind::FileWrite,
            OperationArgs::FileDelete { .. } => OperationKind::FileDelete,
            OperationArgs::NetConnect { .. } => OperationKind::NetConnect,
            OperationArgs::ToolCall { .. } => OperationKind::ToolCall,
            OperationArgs::Browse { .. } => OperationKind::Browse,
            OperationArgs::Admin { .. } => OperationKind::Admin,
        }
    }

    /// The tool name used for telemetry (`gen_ai.tool.name`) and policy matching.
    pub fn tool_name(&self) -> &str {
        match self {
            OperationArgs::ToolCall { tool, .. } => tool,
            OperationArgs::Admin { action } => action.name(),
            other => other.kind().as_str(),
        }
    }

    pub fn path(&self) -> Option<&str> {
        match self {
            OperationArgs::FileRead { path }
            | OperationArgs::FileWrite { path, .. }
            | OperationArgs::FileDelete { path } => Some(path),
            _ => None,
        }
    }

    pub fn argv(&self) -> Option<&[String]> {
        match self {
            OperationArgs::Exec { argv } => Some(argv),
            _ => None,
        }
    }
}

/// One request an agent makes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Operation {
    #[serde(default)]
    pub principal: Principal,
    pub args: OperationArgs,
    /// The isolation tier asked for; the policy decides whether it is allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<IsolationTier>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<IdempotencyKey>,
    /// Estimated cost, reserved from the budget before the operation runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_cost: Option<Money>,
    #[serde(default = "default_category")]
    pub cost_category: CostCategory,
    /// Whether running it twice is harmless (so it may be retried without a key).
    #[serde(default)]
    pub idempotent: bool,
    /// Why the agent wants this; shown to approvers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rationale: Option<String>,
    /// For `exec` and `run_code`: everything else that changes what runs (env, stdin,
    /// files, directories, mounts, limits, network). The gateway resolves it (defaults,
    /// ceilings, the argv of `run_code`) before policy sees it and before it is
    /// fingerprinted; the sandbox runs exactly the resolved value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<crate::exec::ExecRequest>,
}

fn default_category() -> CostCategory {
    CostCategory::Compute
}

impl Operation {
    pub fn new(principal: Principal, args: OperationArgs) -> Self {
        Operation {
            principal,
            args,
            tier: None,
            idempotency_key: None,
            estimated_cost: None,
            cost_category: CostCategory::Compute,
            idempotent: false,
            rationale: None,
            exec: None,
        }
    }

    /// The same operation with its sandbox request (for `exec` and `run_code`).
    pub fn with_exec(mut self, exec: crate::exec::ExecRequest) -> Self {
        self.exec = Some(exec);
        self
    }

    pub fn kind(&self) -> OperationKind {
        self.args.kind()
    }

    /// Structural validation, independent of any policy.
    pub fn validate(&self) -> Result<(), CoreError> {
        let bad = |why: &str| {
            Err(CoreError::InvalidOperation {
                why: why.to_string(),
            })
        };
        if let Some(why) = tenant_problem(&self.principal.tenant) {
            return bad(why);
        }
        if self.idempotency_key.is_some() && self.exec.as_ref().is_some_and(|e| e.stdin_stream) {
            // The key's claim binds the request, and a stream's bytes are not in it: a
            // replay would answer other input with the first run's outcome.
            return bad(
                "an idempotency key cannot bind a streamed standard input (its bytes are not \
                 known when the key is claimed): send stdin as bytes, or no key",
            );
        }
        match &self.args {
            OperationArgs::Exec { argv } if argv.is_empty() => return bad("argv is empty"),
            OperationArgs::Exec { argv } if argv[0].is_empty() => {
                return bad("the program name (argv[0]) is empty")
            }
            OperationArgs::Exec { argv } if argv.iter().any(|a| a.contains('\0')) => {
                return bad("argv contains a NUL byte")
            }
            OperationArgs::Exec { argv } if argv.iter().any(|a| a.len() > MAX_ARG_BYTES) => {
                return bad(&format!(
                    "an argument is longer than the {MAX_ARG_BYTES} bytes a program can be given \
                     (pass large input on stdin or in a file)"
                ))
            }
            OperationArgs::FileRead { path }
            | OperationArgs::FileWrite { path, .. }
            | OperationArgs::FileDelete { path }
                if path.is_empty() || path.contains('\0') =>
            {
                return bad("path is empty or contains a NUL byte")
            }
            OperationArgs::NetConnect { host, .. } if host.is_empty() => {
                return bad("host is empty")
            }
            OperationArgs::ToolCall { tool, .. } if tool.is_empty() => {
                return bad("tool name is empty")
            }
            OperationArgs::Browse { url, .. } => {
                if let Err(why) = check_browse_url(url) {
                    return bad(&why);
                }
            }
            _ => {}
        }
        if let Some(c) = &self.estimated_cost {
            if c.is_negative() {
                return bad("estimated cost is negative");
            }
        }
        if let Some(req) = &self.exec {
            crate::mount::check_request(&req.mounts, req.workdir.as_deref())?;
            for (name, value) in &req.env {
                if let Some(why) = env_problem(name, value) {
                    return bad(&format!("environment variable {name:?}: {why}"));
                }
                if name.len() + 1 + value.len() > MAX_ARG_BYTES {
                    return bad(&format!(
                        "environment variable {name:?} is longer than the {MAX_ARG_BYTES} bytes \
                         a program can be given"
                    ));
                }
            }
            for name in &req.env_allowlist {
                if let Some(why) = env_name_problem(name) {
                    return bad(&format!("env_allowlist entry {name:?}: {why}"));
                }
            }
        }
        Ok(())
    }
}

/// The longest tenant or agent id.
pub const MAX_ID_LEN: usize = 128;

/// Why `tenant` cannot name a tenant, if it cannot: it is 1 to 128 of the ASCII letters,
/// digits, `.`, `_`, `-`, `@` and `:`, not starting with `.`. A tenant is shown to
/// operators in listings, approvals and trails (a control character there would be an
/// agent writing to their terminal), and it names budget scopes, rate-limit keys and
/// files: a `/`, `..` or a look-alike letter would make two names read as one. Every
/// front end reaches this through [`Operation::validate`].
pub fn tenant_problem(tenant: &str) -> Option<&'static str> {
    id_problem(tenant).map(|why| match why {
        IdProblem::Length => "tenant must be 1 to 128 characters",
        IdProblem::Control => "tenant must not contain control characters",
        IdProblem::Alphabet => {
            "tenant may hold only ASCII letters, digits, `.`, `_`, `-`, `@` and `:`"
        }
        IdProblem::LeadingDot => "tenant must not start with `.`",
    })
}

/// [`tenant_problem`] for an agent id given by a caller (`--agent`): the same alphabet.
pub fn agent_problem(agent: &str) -> Option<&'static str> {
    id_problem(agent).map(|why| match why {
        IdProblem::Length => "agent must be 1 to 128 characters",
        IdProblem::Control => "agent must not contain control characters",
        IdProblem::Alphabet => {
            "agent may hold only ASCII letters, digits, `.`, `_`, `-`, `@` and `:`"
        }
        IdProblem::LeadingDot => "agent must not start with `.`",
    })
}

enum IdProblem {
    Length,
    Control,
    Alphabet,
    LeadingDot,
}

fn id_problem(id: &str) -> Option<IdProblem> {
    if id.is_empty() || id.len() > MAX_ID_LEN {
        Some(IdProblem::Length)
    } else if id.chars().any(char::is_control) {
        Some(IdProblem::Control)
    } else if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'@' | b':'))
    {
        Some(IdProblem::Alphabet)
    } else if id.starts_with('.') {
        Some(IdProblem::LeadingDot)
    } else {
        None
    }
}

/// [`agent_problem`] as an invalid identifier (`SBX_E1006`), for a front end that takes an
/// agent id on its command line.
pub fn check_agent(agent: &str) -> Result<(), CoreError> {
    match agent_problem(agent) {
        None => Ok(()),
        Some(why) => Err(CoreError::InvalidIdentifier {
            input: agent.chars().take(64).collect(),
            why,
        }),
    }
}

/// [`tenant_problem`] as an invalid identifier (`SBX_E1006`), for a front end that takes a
/// tenant before it builds an operation (a command-line flag).
pub fn check_tenant(tenant: &str) -> Result<(), CoreError> {
    match tenant_problem(tenant) {
        None => Ok(()),
        Some(why) => Err(CoreError::InvalidIdentifier {
            input: tenant.chars().take(64).collect(),
            why,
        }),
    }
}

/// The longest single argument or `NAME=value` string `execve` takes (Linux's
/// `MAX_ARG_STRLEN`, 32 pages of 4 KiB, less the terminating NUL). Longer, the program
/// cannot start (`E2BIG`): refused at validation as bad input instead.
pub const MAX_ARG_BYTES: usize = 32 * 4096 - 1;

/// Why `name=value` cannot be in a program's environment, if it cannot. The sandbox checks
/// again where it builds the environment; caught at validation (and by front ends that take
/// an environment ahead of any operation), the request is refused as bad input before any
/// state changes.
pub fn env_problem(name: &str, value: &str) -> Option<&'static str> {
    match env_name_problem(name) {
        Some(why) => Some(why),
        None if value.contains('\0') => Some("value contains a NUL byte"),
        None => None,
    }
}

fn env_name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("empty name")
    } else if name.contains('=') {
        Some("name contains `=`")
    } else if name.contains('\0') {
        Some("name contains a NUL byte")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idempotency_key_cannot_bind_a_streamed_stdin() {
        let mut op = Operation::new(
            Principal::default(),
            OperationArgs::Exec {
                argv: vec!["cat".into()],
            },
        );
        let mut req = crate::ExecRequest::new(["cat"]);
        req.stdin_stream = true;
        op.exec = Some(req);
        assert!(op.validate().is_ok(), "a stream without a key");
        op.idempotency_key = Some(IdempotencyKey::new("k").unwrap());
        let e = op.validate().unwrap_err();
        assert_eq!(crate::ErrorCode::code(&e), "SBX_E1005");
        if let Some(r) = op.exec.as_mut() {
            r.stdin_stream = false;
            r.stdin = Some(b"x".to_vec());
        }
        assert!(op.validate().is_ok(), "bytes with a key");
    }

    fn browse(url: &str) -> Operation {
        Operation::new(
            Principal::default(),
            OperationArgs::Browse {
                url: url.into(),
                screenshot: true,
            },
        )
    }

    #[test]
    fn a_tenant_with_a_control_character_is_refused() {
        for bad in ["", "acme\x1b]0;PWNED\x07", "a\nb", "a\u{9b}b", "a\u{7f}"] {
            let op = Operation::new(
                Principal::tenant(bad),
                OperationArgs::Exec {
                    argv: vec!["true".into()],
                },
            );
            let e = op.validate().unwrap_err();
            assert_eq!(crate::ErrorCode::code(&e), "SBX_E1005", "{bad:?}");
            let e = check_tenant(bad).unwrap_err();
            assert_eq!(crate::ErrorCode::code(&e), "SBX_E1006", "{bad:?}");
        }
        let e = check_tenant(&"x".repeat(129)).unwrap_err();
        assert_eq!(crate::ErrorCode::code(&e), "SBX_E1006");
        for bad in [
            "a/b",
            "../t",
            "\u{fc}",
            ".hidden",
            "a b",
            "t\u{e9}nant",
            "a\\b",
            "x%y",
        ] {
            let e = check_tenant(bad).unwrap_err();
            assert_eq!(crate::ErrorCode::code(&e), "SBX_E1006", "{bad:?}");
            assert!(check_agent(bad).is_err(), "{bad:?}");
        }
        for good in [
            "acme",
            "alice@example.com",
            "bob@day:2026-12-06",
            "lab-chem",
            "a.b_c",
            &"x".repeat(128),
        ] {
            assert!(check_tenant(good).is_ok(), "{good:?}");
            assert!(check_agent(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn an_environment_the_sandbox_cannot_build_is_an_invalid_operation() {
        let op = |env: &[(&str, &str)], allow: &[&str]| {
            let mut req = crate::exec::ExecRequest::new(["true"]);
            req.env = env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            req.env_allowlist = allow.iter().map(|s| s.to_string()).collect();
            Operation::new(
                Principal::default(),
                OperationArgs::Exec {
                    argv: vec!["true".into()],
                },
            )
            .with_exec(req)
        };
        assert!(op(&[("GOOD", "v a l u e")], &["HOME"]).validate().is_ok());
        let long = "x".repeat(MAX_ARG_BYTES);
        let e = op(&[("L", &long)], &[]).validate().unwrap_err().to_string();
        assert!(e.contains("longer than"), "{e}");
        for (env, allow, want) in [
            (vec![("", "x")], vec![], "empty name"),
            (vec![("A=B", "x")], vec![], "contains `=`"),
            (vec![("A\0B", "x")], vec![], "NUL"),
            (vec![("A", "x\0y")], vec![], "value contains a NUL"),
            (vec![], vec!["X=1"], "env_allowlist"),
        ] {
            let e = op(&env, &allow).validate().unwrap_err().to_string();
            assert!(e.contains(want), "{env:?} {allow:?}: {e}");
        }
    }

    #[test]
    fn an_argument_execve_cannot_take_is_an_invalid_operation() {
        let exec = |arg: String| {
            Operation::new(
                Principal::default(),
                OperationArgs::Exec {
                    argv: vec!["echo".into(), arg],
                },
            )
            .validate()
        };
        assert!(exec("x".repeat(MAX_ARG_BYTES)).is_ok());
        let e = Operation::new(
            Principal::default(),
            OperationArgs::Exec {
                argv: vec![String::new(), "x".into()],
            },
        )
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("program name"), "{e}");
        let e = exec("x".repeat(MAX_ARG_BYTES + 1)).unwrap_err().to_string();
        assert!(e.contains("longer than") && e.contains("stdin"), "{e}");
    }

    #[test]
    fn browse_takes_http_and_https_urls() {
        for ok in [
            "http://site.test/",
            "https://a.example:8443/p?q=1#f",
            "http://10.0.0.1",
        ] {
            assert!(browse(ok).validate().is_ok(), "{ok}");
        }
        assert_eq!(browse("http://x.test/").kind(), OperationKind::Browse);
        assert_eq!(
            "browse".parse::<OperationKind>().unwrap(),
            OperationKind::Browse
        );
    }

    #[test]
    fn browse_refuses_other_schemes_flags_and_odd_urls() {
        let long = format!("http://x.test/{}", "a".repeat(BROWSE_URL_MAX));
        for bad in [
            "",
            "file:///etc/passwd",
            "javascript:alert(1)",
            "data:text/html,hi",
            "--remote-debugging-port=9222",
            "HTTP://x.test/",
            "http://",
            "http:///path",
            "http://x.test/ --flag",
            "http://x.test/\nsecond",
            long.as_str(),
        ] {
            let e = browse(bad).validate().unwrap_err();
            assert_eq!(crate::ErrorCode::code(&e), "SBX_E1005", "{bad}: {e}");
        }
    }

    #[test]
    fn browse_args_round_trip_and_default_to_no_screenshot() {
        let v: OperationArgs =
            serde_json::from_str(r#"{"kind":"browse","url":"https://x.test/"}"#).unwrap();
        assert_eq!(
            v,
            OperationArgs::Browse {
                url: "https://x.test/".into(),
                screenshot: false
            }
        );
        assert!(serde_json::from_str::<OperationArgs>(
            r#"{"kind":"browse","url":"https://x.test/","extra":1}"#
        )
        .is_err());
    }
}
