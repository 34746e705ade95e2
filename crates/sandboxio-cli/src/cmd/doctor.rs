//! `sandboxio doctor`: what isolation this host can give, and how to fix what is missing.

use sandboxio_gateway::layers::sandbox::probe::{Check, HostReport};

use crate::exit;
use crate::out::outln;

/// The tiers are judged by real probe sandboxes (the same code path as `run`, with the
/// default sandbox settings), so doctor cannot say ok where `run` fails.
pub async fn doctor(json: bool) -> anyhow::Result<i32> {
    let cfg = sandboxio_gateway::layers::sandbox::SandboxConfig::default();
    let report = sandboxio_gateway::layers::sandbox::probe::probe_with_runs(&cfg).await;
    if json {
        outln!("{}", crate::out::pretty(&report)?)?;
    } else {
        crate::out::stdout_fmt(format_args!("{}", render(&report)))?;
    }
    Ok(exit::OK)
}

fn line(out: &mut String, name: &str, c: &Check) {
    let mark = if c.available { "ok " } else { "NO " };
    out.push_str(&format!("  [{mark}] {name:18} {}\n", c.detail));
    if let Some(fix) = &c.fix {
        if !c.available {
            out.push_str(&format!("        fix: {fix}\n"));
        }
    }
}

fn render(r: &HostReport) -> String {
    let mut out = format!(
        "sandboxio doctor: kernel {}, running as uid {}\n\nmechanisms:\n",
        r.kernel, r.uid
    );
    line(&mut out, "user namespaces", &r.user_namespaces);
    line(&mut out, "landlock", &r.landlock);
    line(&mut out, "seccomp", &r.seccomp);
    line(&mut out, "cgroups", &r.cgroups.check);
    out.push_str(&format!(
        "        mode {}; v1 controllers [{}]; v2 at {} with [{}]; cgroup.kill {}\n",
        r.cgroups.mode,
        r.cgroups.v1_controllers.join(", "),
        r.cgroups
            .v2_mount
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "-".into()),
        r.cgroups.v2_controllers.join(", "),
        if r.cgroups.cgroup_kill { "yes" } else { "no" }
    ));
    line(&mut out, "kvm", &r.kvm);
    line(&mut out, "bwrap (for benches)", &r.bwrap);
    out.push_str("\ntiers:\n");
    for (name, c) in &r.tiers {
        line(&mut out, name, c);
    }
    out
}
