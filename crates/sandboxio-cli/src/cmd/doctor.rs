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
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    if let Some(advice) = dynmods_advice(&r.cgroups.mode, &mountinfo) {
        out.push_str(&advice);
    }
    line(&mut out, "kvm", &r.kvm);
    line(&mut out, "bwrap (for benches)", &r.bwrap);
    out.push_str("\ntiers:\n");
    for (name, c) in &r.tiers {
        line(&mut out, name, c);
    }
    out
}

/// Where a cgroup root is mounted without `favordynmods`, moving a process into a cgroup
/// (each sandbox's attach) waits for an RCU grace period, which on an idle host is
/// milliseconds per run. A host setting: doctor says how, and never changes it (pure).
fn dynmods_advice(mode: &str, mountinfo: &str) -> Option<String> {
    if mode == "none" {
        return None;
    }
    // `... - cgroup2 cgroup2 rw,nsdelegate,favordynmods` (superblock options last).
    let roots: Vec<(&str, bool)> = mountinfo
        .lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let mut post = post.split_whitespace();
            let fstype = post.next()?;
            let opts = post.nth(1).unwrap_or("");
            let point = pre.split_whitespace().nth(4)?;
            (fstype == "cgroup2" || fstype == "cgroup")
                .then_some((point, opts.split(',').any(|o| o == "favordynmods")))
        })
        .collect();
    if roots.is_empty() || roots.iter().any(|(_, fav)| *fav) {
        return None;
    }
    let v2 = mountinfo
        .lines()
        .filter_map(|l| l.split_once(" - "))
        .find(|(_, post)| post.starts_with("cgroup2 "))
        .and_then(|(pre, _)| pre.split_whitespace().nth(4))
        .unwrap_or("/sys/fs/cgroup");
    Some(format!(
        "        note: no cgroup hierarchy is mounted with `favordynmods` ({mode} layout): \
         each sandbox's move into its cgroup waits for an RCU grace period (measured on a \
         2-core VM with a hybrid layout: `sandboxio run -- /bin/true` 49 ms p50 without, \
         35 ms with it)\n        \
         fix (host setting, as root, Linux 6.0+): `mount -o remount,favordynmods {v2}`; \
         to keep it, add `favordynmods` to that mount's options (or build the kernel with \
         CONFIG_CGROUP_FAVOR_DYNMODS=y)\n"
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::dynmods_advice;

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn a_hybrid_layout_without_favordynmods_gets_the_remount_command() {
        let a = dynmods_advice("hybrid", HYBRID).unwrap();
        assert!(
            a.contains("mount -o remount,favordynmods /sys/fs/cgroup/unified"),
            "{a}"
        );
        assert!(a.contains("49 ms") && a.contains("35 ms"), "{a}");
    }

    #[test]
    fn no_advice_once_favordynmods_is_set_or_without_cgroups() {
        let set = HYBRID.replace("cgroup2 cgroup2 rw", "cgroup2 cgroup2 rw,favordynmods");
        assert!(dynmods_advice("hybrid", &set).is_none());
        assert!(dynmods_advice("none", HYBRID).is_none());
        let v2 = "30 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
        assert!(dynmods_advice("v2", v2)
            .unwrap()
            .contains("remount,favordynmods /sys/fs/cgroup`"));
    }
}
