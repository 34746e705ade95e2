//! What front ends use of the layers directly, re-exported so that a front end depends on
//! the gateway alone (crates/sandboxio/tests/architecture.rs): the audit trail's readers,
//! verifier and keys (`audit verify`, `tail`, `query`, `state recover`, `rotate-key`), the
//! budget's scopes and summaries (`status`), policy files (`policy check`/`explain`/
//! `replay`), and the sandbox's helper entry point, host probe (`doctor`) and terminal.
//! Operations themselves never bypass the chain: these are readers, checkers and the
//! helper, not ways to run anything.

/// The audit trail: reading, verifying, keys, redaction.
pub mod audit {
    pub use sandboxio_audit::{
        check_head, load_public_keys, query, read_events, tail, trail_files, trail_id, verify_keys,
        AuditConfig, AuditError, AuditEvent, AuditKey, Auditor, BadRecord, FileSink,
        FileSinkOptions, Follower, FsyncPolicy, HeadCheck, Query, Redactor, Secret, SignedHead,
        Tamper, TrailEntry, VerifyReport, VerifyingKey, DEFAULT_ORIGIN,
    };

    /// The shortest literal secret the redactor takes.
    pub use sandboxio_audit::redact::MIN_SECRET_LEN;

    /// Signing keys' ids.
    pub mod checkpoint {
        pub use sandboxio_audit::checkpoint::key_id;
    }
}

/// Budgets and rate limits: scopes and the summaries `status` prints.
pub mod budget {
    pub use sandboxio_budget::{
        BudgetConfig, BudgetError, RateLimitRule, ReserveRequest, ScopeKey, Summary,
    };
}

/// Policy files: checking and explaining them.
pub mod policy {
    pub use sandboxio_policy::{check_files, Context, PolicyError, PolicySet};
}

/// The sandbox: the helper a binary re-executes, the host probe, the terminal.
pub mod sandbox {
    pub use sandboxio_sandbox::{helper, probe, terminal, SandboxConfig, SandboxError};
}
