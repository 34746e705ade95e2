//! Pre-built namespaces for the warm pool, the helper's side (see [`super::prebuilt`] for
//! what is built ahead and what is left to the request).
//!
//! [`prebuild`] runs in a pooled helper when the pool is filled: the helper's own user
//! namespace (non-root), its private mount namespace and staging tmpfs, the init cloned
//! into its user, pid, mount, net, ipc, uts namespaces (and its cgroups), the base mounts,
//! pivot_root and the read-only root; it returns once the init says the base is built.
//! [`Prebuilt::exec`] serves the one request: resizes the staged tmpfs, copies the
//! workspace in and sends the request to the init, which remounts what the request changes
//! and forks the payload (rlimits, chdir, no_new_privs, Landlock, capabilities, seccomp
//! last, exec: the same `payload_main` as a cold start).

use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use super::apply::{self, Started};
use super::error::NsError;
use super::plan::NamespacePlan;
use super::prebuilt;
use super::report::Report;
use super::NsChild;
use crate::error::SandboxError;
use crate::stage::Stage;

/// A namespace init whose base is built, waiting for its request. Dropping it kills the
/// init (and so its whole pid namespace) and removes the staging mounts.
pub struct Prebuilt {
    started: Option<Started>,
}

/// Builds the base of `plan` (the pool's template: see [`super::prebuilt`]) and waits
/// until the init has finished it. `into_cgroup`, `self_join` and `attach` as for
/// [`super::spawn_plan`].
pub fn prebuild<F>(
    plan: &crate::plan::SandboxPlan,
    into_cgroup: Option<RawFd>,
    self_join: &[(OwnedFd, CString)],
    attach: F,
) -> Result<Prebuilt, SandboxError>
where
    F: FnOnce(libc::pid_t, bool) -> Result<(), SandboxError>,
{
    let ns = apply::namespace_section(plan)?;
    if ns.egress_port.is_some() || ns.tty {
        return Err(NsError::PrebuiltMismatch {
            why: "a pre-built base has no network and no terminal",
        }
        .into());
    }
    let cgroups = apply::CgroupEntry {
        into: into_cgroup,
        self_join,
    };
    let mut started = apply::start(ns, None, cgroups, None, attach)?;
    let ready = started.ready.take();
    let mut byte = [0u8; 1];
    let got = match ready {
        Some(fd) => std::fs::File::from(fd).read(&mut byte).unwrap_or(0),
        None => 0,
    };
    if got == 1 {
        return Ok(Prebuilt {
            started: Some(started),
        });
    }
    // The init failed while building the base: it reported why and exited.
    apply::kill_and_reap(started.pid);
    Err(setup_failure(&started).into())
}

/// The failure the init reported on its report pipe (it has exited).
fn setup_failure(started: &Started) -> NsError {
    let mut buf = Vec::new();
    let mut f = match started.report.try_clone() {
        Ok(fd) => std::fs::File::from(fd),
        Err(source) => return NsError::ReadReport { source },
    };
    if let Err(source) = (&mut f).take(1 << 16).read_to_end(&mut buf) {
        return NsError::ReadReport { source };
    }
    for line in buf.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        if let Ok(Report::Setup {
            stage,
            target,
            errno,
        }) = serde_json::from_slice(line)
        {
            return NsError::ChildSetup {
                stage,
                target,
                errno,
            };
        }
    }
    NsError::ChildSetup {
        stage: Stage::ReadRequest,
        target: "the pre-built init exited without a report".into(),
        errno: libc::ECHILD,
    }
}

impl Prebuilt {
    /// Host pid of the waiting init.
    pub fn pid(&self) -> libc::pid_t {
        self.started.as_ref().map_or(-1, |s| s.pid)
    }

    /// Serves `plan` (the request's own plan, whose shape must match the base's) with
    /// `rlimits`: the init starts the payload. Then supervise the init as for a cold start.
    pub fn exec(
        mut self,
        plan: &crate::plan::SandboxPlan,
        rlimits: apply::Rlimits,
    ) -> Result<NsChild, SandboxError> {
        let Some(mut started) = self.started.take() else {
            return Err(NsError::PrebuiltMismatch {
                why: "the pre-built sandbox was already used",
            }
            .into());
        };
        let Some(real) = plan.tier.namespace() else {
            apply::kill_and_reap(started.pid);
            return Err(NsError::PrebuiltMismatch {
                why: "the plan has no namespace section",
            }
            .into());
        };
        let real: NamespacePlan = match started.unprivileged {
            Some(uid) => real
                .clone()
                .mapped_to_invoking_user(uid, crate::sys::proc::getegid()),
            None => real.clone(),
        };
        let result = serve(&mut started, &real, rlimits);
        match result {
            Ok(()) => Ok(started.into_child(Some(&real))),
            Err(e) => {
                apply::kill_and_reap(started.pid);
                Err(e.into())
            }
        }
    }
}

fn serve(
    started: &mut Started,
    real: &NamespacePlan,
    rlimits: apply::Rlimits,
) -> Result<(), NsError> {
    if let Some(why) = prebuilt::mismatch(&started.plan, real) {
        return Err(NsError::PrebuiltMismatch { why });
    }
    let rt = prebuilt::request_time(&started.plan, real);
    let staging = &started.staging;
    if let Some(size) = rt.workspace_size {
        staging.resize(&staging.workspace, size)?;
    }
    if let Some(size) = rt.output_size {
        staging.resize(&staging.output, size)?;
    }
    apply::copy_workspace(real, staging)?;
    let go = prebuilt::Go {
        plan: real.clone(),
        rlimits,
    };
    let bytes = serde_json::to_vec(&go).map_err(|_| NsError::MalformedReport)?;
    let Some(fd) = started.request.take() else {
        return Err(NsError::PrebuiltMismatch {
            why: "the pre-built sandbox has no request pipe",
        });
    };
    let mut w = std::fs::File::from(fd);
    w.write_all(&bytes)
        .map_err(|source| NsError::Release { source })?;
    drop(w);
    Ok(())
}

impl Drop for Prebuilt {
    fn drop(&mut self) {
        if let Some(s) = self.started.take() {
            apply::kill_and_reap(s.pid);
        }
    }
}

impl AsRawFd for Prebuilt {
    /// The init's report pipe (for poll loops).
    fn as_raw_fd(&self) -> RawFd {
        self.started.as_ref().map_or(-1, |s| s.report.as_raw_fd())
    }
}
