//! Decisions: values, not errors. Every layer of the chain returns one.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::CoreError;

/// What a layer says about an operation. Ordered so that `max` is the strictest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Allow,
    Ask,
    Deny,
}

impl Verdict {
    pub fn as_str(&self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Ask => "ask",
            Verdict::Deny => "deny",
        }
    }
}

impl FromStr for Verdict {
    type Err = CoreError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "allow" => Ok(Verdict::Allow),
            "ask" => Ok(Verdict::Ask),
            "deny" => Ok(Verdict::Deny),
            _ => Err(CoreError::InvalidOperation {
                why: format!("unknown verdict `{s}`"),
            }),
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The layers of the chain, in the order the gateway runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layer {
    Admit,
    KillSwitch,
    Policy,
    RateLimit,
    Budget,
    Approval,
    Idempotency,
    Journal,
    Sandbox,
    Settle,
    Record,
}

impl Layer {
    pub fn as_str(&self) -> &'static str {
        match self {
            Layer::Admit => "admit",
            Layer::KillSwitch => "kill_switch",
            Layer::Policy => "policy",
            Layer::RateLimit => "rate_limit",
            Layer::Budget => "budget",
            Layer::Approval => "approval",
            Layer::Idempotency => "idempotency",
            Layer::Journal => "journal",
            Layer::Sandbox => "sandbox",
            Layer::Settle => "settle",
            Layer::Record => "record",
        }
    }
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a policy rule lives, so an explanation can point at it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RuleRef {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
}

impl fmt::Display for RuleRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.file, self.line) {
            (Some(file), Some(line)) => write!(f, "{} ({}:{})", self.id, file, line),
            (Some(file), None) => write!(f, "{} ({})", self.id, file),
            _ => f.write_str(&self.id),
        }
    }
}

/// One layer's answer, with the words an agent can act on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    pub verdict: Verdict,
    pub layer: Layer,
    /// The rules that decided (for policy), most decisive first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<RuleRef>,
    pub reason: String,
    /// For rate limits: when trying again may succeed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

impl Decision {
    pub fn allow(layer: Layer) -> Self {
        Decision {
            verdict: Verdict::Allow,
            layer,
            rules: Vec::new(),
            reason: String::new(),
            retry_after_ms: None,
        }
    }
    pub fn deny(layer: Layer, reason: impl Into<String>) -> Self {
        Decision {
            verdict: Verdict::Deny,
            layer,
            rules: Vec::new(),
            reason: reason.into(),
            retry_after_ms: None,
        }
    }
    pub fn is_allow(&self) -> bool {
        self.verdict == Verdict::Allow
    }
}
