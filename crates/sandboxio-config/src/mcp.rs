//! `[mcp]`: the MCP servers sandboxio proxies (`[[mcp.upstream]]`). Each is a program
//! started inside a sandbox and spoken to over its standard input and output, or a
//! streamable-HTTP endpoint. Their tools are offered as `<name>__<tool>`.

use std::collections::{BTreeMap, HashSet};

use sandboxio_core::mount::Mount;
use sandboxio_core::{ByteSize, HumanDuration, IsolationTier};
use serde::{Deserialize, Serialize};

/// Longest upstream name.
pub const MAX_UPSTREAM_NAME: usize = 32;
/// Most upstreams one configuration may name.
pub const MAX_UPSTREAMS: usize = 32;
/// Largest message an upstream may send when `max_message` is not set.
pub const DEFAULT_MAX_MESSAGE: u64 = 4 * 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpSection {
    /// The MCP servers whose tools are re-offered, each call through the chain.
    #[serde(default, deserialize_with = "upstreams")]
    pub upstream: Vec<UpstreamSection>,
    /// Whether `sandboxio mcp` (stdio) offers an `ask` to its client through elicitation,
    /// the client's answer approving it. Only for a client a person operates: an agent's
    /// own client would approve its own requests. Off by default (the approval waits for
    /// `sandboxio approvals approve ID`). Over HTTP the key's `approve` scope decides.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub elicitation_approvals: bool,
}

impl McpSection {
    pub fn is_empty(&self) -> bool {
        self.upstream.is_empty() && !self.elicitation_approvals
    }
}

/// One upstream MCP server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "UpstreamRaw", into = "UpstreamRaw")]
pub struct UpstreamSection {
    /// `[a-z0-9_-]`, at most 32 characters, no `__`: the prefix of its tools' names.
    pub name: String,
    pub transport: UpstreamTransport,
    /// The sandbox tier a stdio upstream runs in (default: `[sandbox] tier`).
    pub tier: Option<IsolationTier>,
    /// How long one call may take before it fails (and the upstream is not trusted to
    /// answer it any more).
    pub call_timeout: HumanDuration,
    /// How long starting and initialising the upstream may take.
    pub start_timeout: HumanDuration,
    /// The largest message (one JSON-RPC line, one HTTP body) accepted from it.
    pub max_message: ByteSize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamTransport {
    /// A program (argv) started inside a sandbox, with these environment variables and
    /// host paths bound into its sandbox.
    Stdio {
        command: Vec<String>,
        env: BTreeMap<String, String>,
        mounts: Vec<Mount>,
    },
    /// A streamable-HTTP endpoint (`http://` or `https://`).
    Http { url: String },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct UpstreamRaw {
    name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    command: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    env: BTreeMap<String, String>,
    /// `HOST:SANDBOX[:ro|rw]`, host paths absolute (read-only unless `rw`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    mounts: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tier: Option<IsolationTier>,
    #[serde(default = "d_call_timeout")]
    call_timeout: HumanDuration,
    #[serde(default = "d_start_timeout")]
    start_timeout: HumanDuration,
    #[serde(default = "d_max_message")]
    max_message: ByteSize,
}

fn d_call_timeout() -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(60))
}

fn d_start_timeout() -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(30))
}

fn d_max_message() -> ByteSize {
    ByteSize(DEFAULT_MAX_MESSAGE)
}

/// Whether `name` can prefix tool names.
pub fn check_upstream_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_UPSTREAM_NAME {
        return Err(format!(
            "upstream name `{name}` must be 1 to {MAX_UPSTREAM_NAME} characters"
        ));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
    {
        return Err(format!(
            "upstream name `{name}` may hold only a-z, 0-9, `_` and `-`"
        ));
    }
    if name.contains("__") || name.ends_with('_') {
        return Err(format!(
            "upstream name `{name}` may not contain `__` or end with `_` (`__` separates it from the tool's name)"
        ));
    }
    Ok(())
}

impl TryFrom<UpstreamRaw> for UpstreamSection {
    type Error = String;

    fn try_from(r: UpstreamRaw) -> Result<Self, String> {
        check_upstream_name(&r.name)?;
        let transport = match (r.command.is_empty(), r.url) {
            (false, None) => {
                if r.command[0].is_empty() {
                    return Err(format!(
                        "upstream `{}`: `command` starts with an empty program",
                        r.name
                    ));
                }
                let mut mounts = Vec::with_capacity(r.mounts.len());
                for spec in &r.mounts {
                    if !spec.starts_with('/') {
                        return Err(format!(
                            "upstream `{}`: mount `{spec}`: the host path must be absolute",
                            r.name
                        ));
                    }
                    let m = Mount::parse(spec, std::path::Path::new("/"))
                        .map_err(|e| format!("upstream `{}`: {e}", r.name))?;
                    mounts.push(m);
                }
                UpstreamTransport::Stdio {
                    command: r.command,
                    env: r.env,
                    mounts,
                }
            }
            (true, Some(url)) => {
                if !r.env.is_empty() || !r.mounts.is_empty() {
                    return Err(format!(
                        "upstream `{}`: `env` and `mounts` apply to a `command`, not to a `url`",
                        r.name
                    ));
                }
                if r.tier.is_some() {
                    return Err(format!(
                        "upstream `{}`: `tier` applies to a `command`, not to a `url`",
                        r.name
                    ));
                }
                let rest = url
                    .strip_prefix("http://")
                    .or_else(|| url.strip_prefix("https://"));
                match rest {
                    Some(r) if !r.is_empty() && !r.starts_with('/') => {}
                    _ => {
                        return Err(format!(
                            "upstream `{}`: url `{url}` is not an `http://` or `https://` address",
                            r.name
                        ))
                    }
                }
                UpstreamTransport::Http { url }
            }
            (false, Some(_)) => {
                return Err(format!(
                    "upstream `{}` names both `command` and `url`; name one",
                    r.name
                ))
            }
            (true, None) => {
                return Err(format!(
                    "upstream `{}` names neither `command` (a program run in a sandbox) nor `url`",
                    r.name
                ))
            }
        };
        if r.call_timeout.0.is_zero() || r.start_timeout.0.is_zero() {
            return Err(format!(
                "upstream `{}`: timeouts must be above zero",
                r.name
            ));
        }
        if r.max_message.0 < 1024 || r.max_message.0 > 256 * 1024 * 1024 {
            return Err(format!(
                "upstream `{}`: `max_message` must be between 1KiB and 256MiB",
                r.name
            ));
        }
        Ok(UpstreamSection {
            name: r.name,
            transport,
            tier: r.tier,
            call_timeout: r.call_timeout,
            start_timeout: r.start_timeout,
            max_message: r.max_message,
        })
    }
}

impl From<UpstreamSection> for UpstreamRaw {
    fn from(u: UpstreamSection) -> Self {
        let (command, env, mounts, url) = match u.transport {
            UpstreamTransport::Stdio {
                command,
                env,
                mounts,
            } => (command, env, mounts, None),
            UpstreamTransport::Http { url } => (Vec::new(), BTreeMap::new(), Vec::new(), Some(url)),
        };
        let mounts = mounts.iter().map(mount_spec).collect();
        UpstreamRaw {
            name: u.name,
            command,
            env,
            mounts,
            url,
            tier: u.tier,
            call_timeout: u.call_timeout,
            start_timeout: u.start_timeout,
            max_message: u.max_message,
        }
    }
}

/// The `HOST:SANDBOX:MODE` form of a mount.
fn mount_spec(m: &Mount) -> String {
    format!(
        "{}:{}:{}",
        m.host.display(),
        m.sandbox.display(),
        m.mode.as_str()
    )
}

fn upstreams<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<UpstreamSection>, D::Error> {
    let list = Vec::<UpstreamSection>::deserialize(d)?;
    if list.len() > MAX_UPSTREAMS {
        return Err(serde::de::Error::custom(format!(
            "at most {MAX_UPSTREAMS} upstreams"
        )));
    }
    let mut seen = HashSet::new();
    for u in &list {
        if !seen.insert(u.name.as_str()) {
            return Err(serde::de::Error::custom(format!(
                "two upstreams are named `{}`",
                u.name
            )));
        }
    }
    Ok(list)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::Config;

    #[test]
    fn a_stdio_and_an_http_upstream_load() {
        let c = Config::parse(
            r#"
[[mcp.upstream]]
name = "files"
command = ["python3", "server.py"]
env = { ROOT = "/data" }
mounts = ["/srv/data:/data", "/srv/out:/out:rw"]
tier = "namespace"
call_timeout = "5s"

[[mcp.upstream]]
name = "remote-1"
url = "http://127.0.0.1:8080/mcp"
"#,
            "t",
        )
        .unwrap();
        assert_eq!(c.mcp.upstream.len(), 2);
        assert_eq!(c.mcp.upstream[0].call_timeout.0.as_secs(), 5);
        assert_eq!(c.mcp.upstream[1].max_message.0, super::DEFAULT_MAX_MESSAGE);
        let super::UpstreamTransport::Stdio { mounts, .. } = &c.mcp.upstream[0].transport else {
            panic!("a stdio upstream")
        };
        assert_eq!(mounts.len(), 2);
        assert_eq!(mounts[1].mode, sandboxio_core::mount::MountMode::Rw);
        assert_eq!(super::mount_spec(&mounts[0]), "/srv/data:/data:ro");
    }

    #[test]
    fn bad_upstreams_are_refused_with_a_reason() {
        for (body, needle) in [
            ("name = \"a__b\"\nurl = \"http://x\"", "`__`"),
            ("name = \"A\"\nurl = \"http://x\"", "a-z"),
            ("name = \"a\"", "neither"),
            (
                "name = \"a\"\nurl = \"http://x\"\ncommand = [\"x\"]",
                "both",
            ),
            ("name = \"a\"\nurl = \"file:///etc\"", "not an `http://`"),
            (
                "name = \"a\"\nurl = \"http://x\"\ntier = \"process\"",
                "`tier`",
            ),
            (
                "name = \"a\"\ncommand = [\"x\"]\ncall_timeout = \"0s\"",
                "above zero",
            ),
            (
                "name = \"a\"\ncommand = [\"x\"]\nmounts = [\"data:/data\"]",
                "must be absolute",
            ),
            (
                "name = \"a\"\ncommand = [\"x\"]\nmounts = [\"/d:/data:rx\"]",
                "`ro` or `rw`",
            ),
            (
                "name = \"a\"\nurl = \"http://x\"\nmounts = [\"/d:/d\"]",
                "`mounts`",
            ),
            (
                "name = \"a\"\ncommand = [\"x\"]\nbogus = 1",
                "unknown key `bogus`",
            ),
        ] {
            let text = format!("[[mcp.upstream]]\n{body}\n");
            let e = Config::parse(&text, "t").unwrap_err().to_string();
            assert!(e.contains(needle), "{body}: {e}");
        }
        let twice = "[[mcp.upstream]]\nname = \"a\"\nurl = \"http://x\"\n[[mcp.upstream]]\nname = \"a\"\nurl = \"http://y\"\n";
        let e = Config::parse(twice, "t").unwrap_err().to_string();
        assert!(e.contains("two upstreams"), "{e}");
    }
}
