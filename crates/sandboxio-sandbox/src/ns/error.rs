//! Errors of the namespace tier. Every syscall that can fail has its own variant, with the
//! path or value it worked on; codes live in the `SBX_E145x`..`SBX_E148x` range.

use std::io;
use std::path::PathBuf;

use sandboxio_core::{ErrorClass, ErrorCode};
use thiserror::Error;

/// A failure while planning or applying the namespace tier.
#[derive(Debug, Error)]
pub enum NsError {
    #[error("network mode `{mode}` needs the egress proxy, which the gateway provides; use `none`, or run the request through the gateway")]
    NetworkUnsupported { mode: &'static str },
    #[error("could not open the sandbox's egress listener: {step}")]
    EgressListener {
        step: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("invalid path `{path}` for the namespace tier: {why}")]
    InvalidPath { path: PathBuf, why: &'static str },
    #[error("the command is empty")]
    EmptyArgv,
    #[error("the mounts or the working directory cannot be used: {why}")]
    InvalidMounts { why: String },
    #[error("the request does not fit the pre-built namespaces of the pooled sandbox: {why}")]
    PrebuiltMismatch { why: &'static str },
    #[error("a command argument or environment entry contains a NUL byte")]
    NulByte,
    #[error("could not enter a private mount namespace for the helper")]
    HelperMountNamespace {
        #[source]
        source: io::Error,
    },
    #[error("could not set up the helper's own user namespace (`{file}`)")]
    HelperUserNamespace {
        file: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("could not prepare the staging directory `{path}`")]
    Staging {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("could not mount the staging tmpfs at `{path}`")]
    StagingMount {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("could not open the bind source `{path}`")]
    OpenBindSource {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("could not copy the workspace entry `{path}` into the sandbox")]
    CopyWorkspace {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// `path` is the entry as seen inside (`/output/...`), shown escaped.
    #[error(
        "could not copy the output entry `{}` out of the sandbox: {source}",
        sandboxio_core::shown::path(path)
    )]
    CopyOutput {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The program's output names an entry the host's output directory already has (a
    /// session's workspace keeps its files between runs). `path` as seen inside.
    #[error(
        "the output entry `{}` already exists in the output directory: nothing was copied (remove it first, or write another name)",
        sandboxio_core::shown::path(path)
    )]
    OutputExists { path: PathBuf },
    #[error("could not create a pipe")]
    Pipe {
        #[source]
        source: io::Error,
    },
    #[error("clone with new namespaces failed")]
    Clone {
        #[source]
        source: io::Error,
    },
    #[error("could not write `{file}` for the sandbox init (pid {pid})")]
    IdMap {
        pid: i32,
        file: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("could not signal the sandbox init to start")]
    Release {
        #[source]
        source: io::Error,
    },
    #[error("could not read the report of the sandbox init")]
    ReadReport {
        #[source]
        source: io::Error,
    },
    #[error("the sandbox init sent a malformed report")]
    MalformedReport,
    #[error("seccomp filter could not be compiled: {why}")]
    SeccompCompile { why: &'static str },
    #[error(
        "sandbox setup failed inside the namespaces at {stage} `{target}`: {}",
        os_error(*errno)
    )]
    ChildSetup {
        stage: crate::stage::Stage,
        target: String,
        errno: i32,
    },
    #[error("could not start `{program}` inside the sandbox: {}", os_error(*errno))]
    Exec { program: String, errno: i32 },
    #[error(
        "landlock is not available on this kernel, and the plan requires it; fix: use Linux \
         5.13+ with CONFIG_SECURITY_LANDLOCK=y and `landlock` in the `lsm=` boot parameter"
    )]
    LandlockRequired,
    /// The host refuses user namespaces (or their use); the message names the fix.
    #[error("{restriction} (errno {errno})")]
    HostRestricted {
        restriction: super::restriction::Restriction,
        step: super::restriction::Step,
        errno: i32,
    },
    /// Copy-out stopped at a cap; nothing of this run's output was left on the host.
    #[error(
        "the sandbox output is larger than its cap ({what} limit {limit}) at `{}`; \
         nothing was copied to the output directory",
        sandboxio_core::shown::path(path)
    )]
    OutputTooLarge {
        path: PathBuf,
        what: &'static str,
        limit: u64,
    },
}

impl NsError {
    /// A copy-out failure as the run's result carries it (code and message).
    pub(crate) fn as_copy_out_error(&self) -> sandboxio_core::CopyOutError {
        sandboxio_core::CopyOutError {
            code: self.code().to_string(),
            message: self.to_string(),
        }
    }
}

impl ErrorCode for NsError {
    fn code(&self) -> &'static str {
        match self {
            NsError::NetworkUnsupported { .. } => "SBX_E1450",
            NsError::EgressListener { .. } => "SBX_E1479",
            NsError::InvalidPath { .. } => "SBX_E1451",
            NsError::EmptyArgv => "SBX_E1452",
            NsError::NulByte => "SBX_E1453",
            NsError::HelperMountNamespace { .. } => "SBX_E1454",
            NsError::Staging { .. } => "SBX_E1455",
            NsError::StagingMount { .. } => "SBX_E1456",
            NsError::OpenBindSource { .. } => "SBX_E1457",
            NsError::CopyWorkspace { .. } => "SBX_E1458",
            NsError::CopyOutput { .. } => "SBX_E1459",
            NsError::OutputExists { .. } => "SBX_E1474",
            NsError::Pipe { .. } => "SBX_E1460",
            NsError::Clone { .. } => "SBX_E1461",
            NsError::IdMap { .. } => "SBX_E1462",
            NsError::Release { .. } => "SBX_E1463",
            NsError::ReadReport { .. } => "SBX_E1464",
            NsError::MalformedReport => "SBX_E1465",
            NsError::SeccompCompile { .. } => "SBX_E1466",
            NsError::ChildSetup { .. } => "SBX_E1467",
            NsError::Exec { .. } => "SBX_E1468",
            NsError::LandlockRequired => "SBX_E1469",
            NsError::OutputTooLarge { .. } => "SBX_E1470",
            NsError::HostRestricted { restriction, .. } => restriction.code(),
            NsError::HelperUserNamespace { .. } => "SBX_E1471",
            NsError::InvalidMounts { .. } => "SBX_E1472",
            NsError::PrebuiltMismatch { .. } => "SBX_E1473",
        }
    }

    fn class(&self) -> ErrorClass {
        match self {
            NsError::InvalidPath { .. }
            | NsError::EmptyArgv
            | NsError::NulByte
            | NsError::InvalidMounts { .. } => ErrorClass::Usage,
            _ => ErrorClass::Internal,
        }
    }
}

/// An errno as the system names it, with its number: "Argument list too long (os error 7)".
fn os_error(errno: i32) -> io::Error {
    io::Error::from_raw_os_error(errno)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn every_code_is_in_the_crate_table() {
        let all = [
            NsError::NetworkUnsupported { mode: "full" },
            NsError::EgressListener {
                step: "bind",
                source: io::Error::other("x"),
            },
            NsError::InvalidPath {
                path: PathBuf::new(),
                why: "",
            },
            NsError::EmptyArgv,
            NsError::InvalidMounts { why: "x".into() },
            NsError::PrebuiltMismatch { why: "x" },
            NsError::NulByte,
            NsError::HelperMountNamespace {
                source: io::Error::other("x"),
            },
            NsError::Staging {
                path: PathBuf::new(),
                source: io::Error::other("x"),
            },
            NsError::HelperUserNamespace {
                file: "uid_map",
                source: io::Error::other("x"),
            },
            NsError::StagingMount {
                path: PathBuf::new(),
                source: io::Error::other("x"),
            },
            NsError::OpenBindSource {
                path: PathBuf::new(),
                source: io::Error::other("x"),
            },
            NsError::CopyWorkspace {
                path: PathBuf::new(),
                source: io::Error::other("x"),
            },
            NsError::CopyOutput {
                path: PathBuf::new(),
                source: io::Error::other("x"),
            },
            NsError::Pipe {
                source: io::Error::other("x"),
            },
            NsError::Clone {
                source: io::Error::other("x"),
            },
            NsError::IdMap {
                pid: 1,
                file: "uid_map",
                source: io::Error::other("x"),
            },
            NsError::Release {
                source: io::Error::other("x"),
            },
            NsError::ReadReport {
                source: io::Error::other("x"),
            },
            NsError::MalformedReport,
            NsError::SeccompCompile { why: "" },
            NsError::ChildSetup {
                stage: crate::stage::Stage::Mount,
                target: String::new(),
                errno: 1,
            },
            NsError::Exec {
                program: String::new(),
                errno: 2,
            },
            NsError::LandlockRequired,
            NsError::OutputTooLarge {
                path: PathBuf::new(),
                what: "bytes",
                limit: 1,
            },
        ];
        let restricted = NsError::HostRestricted {
            restriction: super::super::restriction::Restriction::Container,
            step: super::super::restriction::Step::CreateUserNamespace,
            errno: 1,
        };
        assert_eq!(restricted.code(), "SBX_E1493");
        let mut seen = std::collections::BTreeSet::new();
        for e in &all {
            assert!(seen.insert(e.code()), "duplicate {}", e.code());
            assert!(
                crate::error::CODES.iter().any(|(c, _)| *c == e.code()),
                "{} missing",
                e.code()
            );
            let wrapped: crate::error::SandboxError = NsError::EmptyArgv.into();
            assert_eq!(wrapped.code(), "SBX_E1452");
        }
    }
}
