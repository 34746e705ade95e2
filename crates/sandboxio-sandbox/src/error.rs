//! This crate's one error type. Every variant has a stable code in the `SBX_E14xx` range
//! (table in `docs/ERRORS.md`); every syscall failure is its own variant with context.

use std::io;
use std::path::PathBuf;

use sandboxio_core::{ErrorClass, ErrorCode, IsolationTier};
use thiserror::Error;

/// Everything that can stop a sandbox from doing its job. A program that runs and fails is
/// not an error: it is an `ExecResult` with its exit status.
#[derive(Debug, Error)]
pub enum SandboxError {
    #[error("the request has an empty argv")]
    EmptyArgv,
    #[error("invalid workspace file name `{name}`: {why}")]
    InvalidFileName { name: String, why: &'static str },
    #[error("invalid environment variable `{name}`: {why}")]
    InvalidEnv { name: String, why: &'static str },
    #[error("argument {index} contains a NUL byte")]
    InvalidArgument { index: usize },
    #[error("the sandbox plan is {size} bytes, more than the {max} bytes allowed")]
    PlanTooLarge { size: usize, max: usize },
    #[error("could not create the workspace under `{path}`")]
    WorkspaceCreate {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("could not write `{path}` in the workspace")]
    WorkspaceWrite {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("could not create the output directory `{path}`")]
    OutputDir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("no helper binary: {why}")]
    HelperNotFound { why: String },
    #[error("could not start the helper `{path}`")]
    HelperSpawn {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("pipe() failed while setting up the helper")]
    Pipe {
        #[source]
        source: io::Error,
    },
    #[error("could not encode the sandbox plan")]
    PlanEncode {
        #[source]
        source: serde_json::Error,
    },
    #[error("could not decode the sandbox plan: {why}")]
    PlanDecode { why: String },
    #[error("the helper broke its protocol: {why}")]
    HelperProtocol { why: String },
    /// The helper died without its final report (killed from outside, or crashed): the
    /// program may have run (its tree is killed when the death is seen).
    #[error("the helper died before its final report (status {status}); the program, if it had started, was killed")]
    HelperDied { status: String },
    #[error("the helper was started without its pipes (fd {fd}); it is only run by a supervisor")]
    HelperFds { fd: i32 },
    #[error("{message}")]
    InHelper { code: &'static str, message: String },
    #[error("cgroups are required but not usable: {why}")]
    CgroupUnavailable { why: String },
    #[error("could not create cgroup `{path}`")]
    CgroupCreate {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("could not write `{value}` to `{path}`")]
    CgroupWrite {
        path: PathBuf,
        value: String,
        #[source]
        source: io::Error,
    },
    #[error("could not remove cgroup `{path}`")]
    CgroupRemove {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("command `{program}` not found in the sandbox PATH")]
    CommandNotFound { program: String },
    #[error("could not execute `{program}`")]
    Exec {
        program: String,
        #[source]
        source: io::Error,
    },
    #[error("fork() failed in the helper")]
    Fork {
        #[source]
        source: io::Error,
    },
    #[error("setrlimit({resource}) failed")]
    Setrlimit {
        resource: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("prctl({option}) failed")]
    Prctl {
        option: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("setsid() failed")]
    Setsid {
        #[source]
        source: io::Error,
    },
    #[error("could not set up signal handling ({what})")]
    Signals {
        what: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("could not change directory to `{path}`")]
    Chdir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("isolation tier `{tier}` is not available here: {why}")]
    UnsupportedTier {
        tier: IsolationTier,
        why: &'static str,
    },
    #[error("waiting for the helper failed")]
    Wait {
        #[source]
        source: io::Error,
    },
    #[error("the helper pipe failed ({what})")]
    HelperIo {
        what: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("poll() failed in the helper")]
    Poll {
        #[source]
        source: io::Error,
    },
    #[error("network mode `{mode}` is not supported by the landlock tier; use `none`")]
    FallbackNetwork { mode: &'static str },
    #[error("landlock tier: payload setup failed at {stage}")]
    FallbackSetup {
        stage: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("could not set up a pseudo-terminal ({what})")]
    Pty {
        what: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("standard input given both as bytes and as a stream")]
    StdinConflict,
    #[error("the run was prepared but its caller withdrew it before it started")]
    NotReleased,
    #[error("invalid mount `{sandbox}`: {why}")]
    InvalidMount { sandbox: PathBuf, why: String },
    #[error("invalid working directory `{path}`: {why}")]
    InvalidWorkdir { path: PathBuf, why: &'static str },
    /// The namespace tier (`crate::ns`); its variants carry their own codes (SBX_E1450..).
    #[error(transparent)]
    Namespace(#[from] crate::ns::NsError),
    /// Confined file operations (`crate::files`); codes SBX_E1480..
    #[error(transparent)]
    Files(#[from] crate::files::FileError),
}

/// Every code this crate defines, with a short meaning (the rows of `docs/ERRORS.md`).
pub const CODES: &[(&str, &str)] = &[
    ("SBX_E1401", "sandbox request has an empty argv"),
    ("SBX_E1402", "invalid workspace file name"),
    ("SBX_E1403", "invalid environment variable name or value"),
    ("SBX_E1404", "argument contains a NUL byte"),
    ("SBX_E1405", "sandbox plan larger than the helper accepts"),
    ("SBX_E1406", "could not create the temporary workspace"),
    ("SBX_E1407", "could not write a file into the workspace"),
    ("SBX_E1408", "could not create the output directory"),
    ("SBX_E1409", "no sandbox helper binary found"),
    ("SBX_E1410", "could not start the sandbox helper"),
    ("SBX_E1411", "pipe() failed while setting up the helper"),
    ("SBX_E1412", "could not encode the sandbox plan"),
    ("SBX_E1413", "the helper could not decode the sandbox plan"),
    ("SBX_E1414", "the helper broke its reporting protocol"),
    ("SBX_E1415", "the helper exited without a final report"),
    ("SBX_E1416", "the helper was started without its pipes"),
    ("SBX_E1417", "cgroups required but not usable"),
    ("SBX_E1418", "could not create a cgroup"),
    ("SBX_E1419", "could not write a cgroup control file"),
    ("SBX_E1420", "could not remove a cgroup"),
    ("SBX_E1421", "command not found in the sandbox PATH"),
    ("SBX_E1422", "execve of the program failed"),
    ("SBX_E1423", "fork() failed in the helper"),
    ("SBX_E1424", "setrlimit() failed"),
    ("SBX_E1425", "prctl() failed"),
    ("SBX_E1426", "setsid() failed"),
    ("SBX_E1427", "signal mask / signalfd setup failed"),
    ("SBX_E1428", "could not change to the working directory"),
    ("SBX_E1429", "isolation tier not available"),
    ("SBX_E1430", "waiting for the helper failed"),
    ("SBX_E1431", "I/O on a helper pipe failed"),
    ("SBX_E1432", "poll() failed in the helper"),
    (
        "SBX_E1433",
        "network mode not supported by the landlock tier (only none)",
    ),
    (
        "SBX_E1434",
        "landlock tier: payload setup failed (stage and errno given)",
    ),
    // namespace tier (crate::ns::NsError)
    (
        "SBX_E1450",
        "network mode needs the egress proxy (run through the gateway)",
    ),
    ("SBX_E1451", "invalid host path for the namespace tier"),
    ("SBX_E1452", "namespace tier: empty command"),
    (
        "SBX_E1453",
        "namespace tier: NUL byte in an argument, variable or path",
    ),
    (
        "SBX_E1454",
        "could not enter the helper's private mount namespace",
    ),
    (
        "SBX_E1455",
        "could not prepare the namespace staging directory",
    ),
    (
        "SBX_E1456",
        "could not mount a staging tmpfs (workspace or output)",
    ),
    ("SBX_E1457", "could not open a bind-mount source"),
    ("SBX_E1458", "could not copy the workspace into the sandbox"),
    ("SBX_E1459", "could not copy the output out of the sandbox"),
    ("SBX_E1460", "namespace tier: pipe() failed"),
    ("SBX_E1461", "clone() with new namespaces failed"),
    (
        "SBX_E1462",
        "could not write the sandbox's uid_map or gid_map",
    ),
    ("SBX_E1463", "could not release the sandbox init"),
    ("SBX_E1464", "could not read the sandbox init's report"),
    ("SBX_E1465", "the sandbox init sent a malformed report"),
    ("SBX_E1466", "seccomp filter could not be compiled"),
    (
        "SBX_E1467",
        "setup inside the namespaces failed (stage, target and errno given)",
    ),
    (
        "SBX_E1468",
        "the program could not be executed inside the sandbox",
    ),
    ("SBX_E1469", "Landlock required but unavailable"),
    (
        "SBX_E1470",
        "sandbox output over its cap on copy-out (bytes or entries); nothing copied",
    ),
    (
        "SBX_E1471",
        "could not set up the helper's own user namespace (non-root)",
    ),
    (
        "SBX_E1472",
        "the request's mounts or working directory cannot be used by this tier",
    ),
    (
        "SBX_E1473",
        "the request does not fit the pre-built namespaces of a pooled sandbox",
    ),
    (
        "SBX_E1474",
        "the program's output names an entry the output directory already has; nothing copied",
    ),
    (
        "SBX_E1479",
        "could not open the sandbox's egress listener (loopback, socket, bind, hand-over)",
    ),
    (
        "SBX_E1480",
        "file path is not a relative path inside the workspace",
    ),
    ("SBX_E1481", "file path resolves outside the workspace"),
    ("SBX_E1482", "file not found in the workspace"),
    ("SBX_E1483", "file larger than the read cap"),
    ("SBX_E1484", "file operation failed"),
    ("SBX_E1485", "path is a directory"),
    (
        "SBX_E1490",
        "user namespaces disabled on this host (user.max_user_namespaces = 0)",
    ),
    (
        "SBX_E1491",
        "unprivileged user namespaces disabled (kernel.unprivileged_userns_clone = 0)",
    ),
    (
        "SBX_E1492",
        "AppArmor restricts unprivileged user namespaces",
    ),
    (
        "SBX_E1493",
        "user namespace refused without a sysctl to blame (container seccomp, no CAP_SYS_ADMIN)",
    ),
    (
        "SBX_E1494",
        "a fresh /proc cannot be mounted (masked /proc)",
    ),
    (
        "SBX_E1495",
        "seccomp filters cannot be installed (kernel or container)",
    ),
    ("SBX_E1440", "could not set up a pseudo-terminal"),
    (
        "SBX_E1441",
        "standard input given both as bytes and as a stream",
    ),
    (
        "SBX_E1442",
        "invalid mount (host path missing or unusable, or sandbox path reserved)",
    ),
    ("SBX_E1443", "invalid working directory"),
    (
        "SBX_E1444",
        "the run was withdrawn by its caller before it started (nothing of it ran)",
    ),
];

impl SandboxError {
    /// Whether the program may have run before this error (its supervisor died, and
    /// nothing says whether before or after starting it): such an operation is charged its
    /// reservation, not released, as an interrupted one is.
    pub fn program_may_have_run(&self) -> bool {
        matches!(self, SandboxError::HelperDied { .. })
    }

    /// Map a code received from the helper back to the static code, if it is one of ours.
    pub(crate) fn known_code(code: &str) -> &'static str {
        CODES
            .iter()
            .find(|(c, _)| *c == code)
            .map(|(c, _)| *c)
            .unwrap_or("SBX_E1414")
    }
}

impl ErrorCode for SandboxError {
    fn code(&self) -> &'static str {
        match self {
            SandboxError::EmptyArgv => "SBX_E1401",
            SandboxError::InvalidFileName { .. } => "SBX_E1402",
            SandboxError::InvalidEnv { .. } => "SBX_E1403",
            SandboxError::InvalidArgument { .. } => "SBX_E1404",
            SandboxError::PlanTooLarge { .. } => "SBX_E1405",
            SandboxError::WorkspaceCreate { .. } => "SBX_E1406",
            SandboxError::WorkspaceWrite { .. } => "SBX_E1407",
            SandboxError::OutputDir { .. } => "SBX_E1408",
            SandboxError::HelperNotFound { .. } => "SBX_E1409",
            SandboxError::HelperSpawn { .. } => "SBX_E1410",
            SandboxError::Pipe { .. } => "SBX_E1411",
            SandboxError::PlanEncode { .. } => "SBX_E1412",
            SandboxError::PlanDecode { .. } => "SBX_E1413",
            SandboxError::HelperProtocol { .. } => "SBX_E1414",
            SandboxError::HelperDied { .. } => "SBX_E1415",
            SandboxError::HelperFds { .. } => "SBX_E1416",
            SandboxError::InHelper { code, .. } => code,
            SandboxError::CgroupUnavailable { .. } => "SBX_E1417",
            SandboxError::CgroupCreate { .. } => "SBX_E1418",
            SandboxError::CgroupWrite { .. } => "SBX_E1419",
            SandboxError::CgroupRemove { .. } => "SBX_E1420",
            SandboxError::CommandNotFound { .. } => "SBX_E1421",
            SandboxError::Exec { .. } => "SBX_E1422",
            SandboxError::Fork { .. } => "SBX_E1423",
            SandboxError::Setrlimit { .. } => "SBX_E1424",
            SandboxError::Prctl { .. } => "SBX_E1425",
            SandboxError::Setsid { .. } => "SBX_E1426",
            SandboxError::Signals { .. } => "SBX_E1427",
            SandboxError::Chdir { .. } => "SBX_E1428",
            SandboxError::UnsupportedTier { .. } => "SBX_E1429",
            SandboxError::Wait { .. } => "SBX_E1430",
            SandboxError::HelperIo { .. } => "SBX_E1431",
            SandboxError::Poll { .. } => "SBX_E1432",
            SandboxError::FallbackNetwork { .. } => "SBX_E1433",
            SandboxError::FallbackSetup { .. } => "SBX_E1434",
            SandboxError::Pty { .. } => "SBX_E1440",
            SandboxError::StdinConflict => "SBX_E1441",
            SandboxError::NotReleased => "SBX_E1444",
            SandboxError::InvalidMount { .. } => "SBX_E1442",
            SandboxError::InvalidWorkdir { .. } => "SBX_E1443",
            SandboxError::Namespace(e) => e.code(),
            SandboxError::Files(e) => e.code(),
        }
    }

    /// Requests the sandbox refuses as malformed are usage errors; everything else means
    /// the sandbox could not be set up.
    fn class(&self) -> ErrorClass {
        match self {
            SandboxError::EmptyArgv
            | SandboxError::InvalidFileName { .. }
            | SandboxError::InvalidEnv { .. }
            | SandboxError::InvalidArgument { .. } => ErrorClass::Usage,
            SandboxError::Namespace(e) => e.class(),
            SandboxError::Files(e) => e.class(),
            _ => ErrorClass::Internal,
        }
    }

    /// Resource exhaustion (fork/pipe/spawn failing for lack of pids or fds) and a helper
    /// that died may succeed on retry; bad requests and missing mechanisms never do.
    fn is_transient(&self) -> bool {
        match self {
            SandboxError::Fork { .. }
            | SandboxError::Pipe { .. }
            | SandboxError::HelperSpawn { .. }
            | SandboxError::HelperDied { .. } => true,
            SandboxError::InHelper { code, .. } => matches!(*code, "SBX_E1423" | "SBX_E1411"),
            _ => false,
        }
    }
}

/// The last OS error, for syscall wrappers.
pub(crate) fn last_os_error() -> io::Error {
    io::Error::last_os_error()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_in_range() {
        let mut seen = std::collections::BTreeSet::new();
        for (code, _) in CODES {
            assert!(code.starts_with("SBX_E14"), "{code}");
            assert!(seen.insert(*code), "duplicate {code}");
        }
    }

    #[test]
    fn helper_codes_round_trip() {
        assert_eq!(SandboxError::known_code("SBX_E1421"), "SBX_E1421");
        assert_eq!(SandboxError::known_code("nonsense"), "SBX_E1414");
        let e = SandboxError::InHelper {
            code: SandboxError::known_code("SBX_E1423"),
            message: "fork() failed".into(),
        };
        assert_eq!(e.code(), "SBX_E1423");
        assert!(e.is_transient());
    }
}
