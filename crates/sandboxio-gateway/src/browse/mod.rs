//! `browse`: a page loaded by a disposable headless Chromium inside the namespace tier.
//!
//! A browse is one operation through the whole chain. [`plan`] turns it into the sandbox
//! request that runs (pure: the browser's argv, its environment, limits sized for a
//! browser); the chain runs it like an exec with network, so the egress proxy serves the
//! sandbox's loopback listener and every navigation and subresource the browser opens is a
//! `net_connect` decision with its own record; [`answer`] turns what the browser left (the
//! DOM on standard output, the screenshot in a private scratch directory) into the answer.
//! [`text`] extracts the page's text from its DOM.
//!
//! The browser's profile, cache and home live in the sandbox's private `/tmp`, a tmpfs that
//! disappears with the sandbox; the scratch directory that receives the screenshot is
//! removed when the operation returns.

pub mod answer;
pub mod plan;
pub mod text;

pub use answer::{BrowseAnswer, Screenshot};
pub use plan::{CHROMIUM_CANDIDATES, DEFAULT_LIMITS};

/// A browse asked for a tier other than `namespace`.
pub const BROWSE_TIER: &str = "SBX_E1560";
/// A browse with network `none`: it could reach nothing.
pub const BROWSE_NETWORK: &str = "SBX_E1561";
/// No Chromium binary on this host.
pub const BROWSE_NO_BROWSER: &str = "SBX_E1562";
/// A browse's sandbox request carried something a browse does not take (argv, files, ...).
pub const BROWSE_REQUEST: &str = "SBX_E1563";
/// The scratch directory for the screenshot could not be created.
pub const BROWSE_SCRATCH: &str = "SBX_E1564";
/// The browser failed in a sandbox without a memory cgroup (see [`no_cgroup_failure`]).
pub const BROWSE_NO_CGROUP: &str = "SBX_E1565";

/// Why a browse failed, when it ran without a cgroup: the sandbox then bounds memory per
/// process (RLIMIT_DATA), which a browser with many processes meets sooner than a cgroup
/// limit on the whole tree would. `None` when a cgroup was used or the browser exited
/// successfully.
pub fn no_cgroup_failure(r: &sandboxio_core::ExecResult) -> Option<String> {
    if r.enforcement.cgroup.is_some() || r.exit.success() || r.cancelled.is_some() || r.timed_out {
        return None;
    }
    Some(
        "the browser failed in a sandbox without a memory cgroup, where memory is bounded per process (RLIMIT_DATA) instead of for the whole browser; raise the memory limit, give this user a cgroup (`systemd-run --user --scope -p Delegate=yes`, or `[sandbox] cgroup_root`), or browse as root".into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_without_a_cgroup_is_explained_and_nothing_else_is() {
        let mut r: sandboxio_core::ExecResult = serde_json::from_value(serde_json::json!({
            "sandbox_id": "s", "exit": {"signal": 5}, "stdout": "", "stderr": "",
            "stdout_truncated": false, "stderr_truncated": false, "stdout_bytes": 0,
            "stderr_bytes": 0, "timed_out": false, "oom_killed": false, "duration_ms": 1,
            "usage": {}, "enforcement": {"network": "x"}
        }))
        .unwrap();
        assert!(no_cgroup_failure(&r).unwrap().contains("cgroup_root"));
        r.enforcement.cgroup = Some("v2".into());
        assert!(no_cgroup_failure(&r).is_none());
        r.enforcement.cgroup = None;
        r.exit = sandboxio_core::ExitStatus::Code(0);
        assert!(no_cgroup_failure(&r).is_none());
    }
}
