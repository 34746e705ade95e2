//! Command-line arguments (raw); validated into typed values in `setup`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "sandboxio",
    version,
    about = "Run agent code and tools without letting them break things"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args, Clone)]
pub struct Common {
    /// Configuration file (default: ./sandboxio.toml if present, else built-in defaults).
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
    /// Policy file(s), composed in order (default: the config's, else the built-in policy).
    #[arg(long = "policy", global = true)]
    pub policies: Vec<PathBuf>,
    /// State directory (database and audit trail). Overrides config and $SBX_STATE_DIR.
    #[arg(long, global = true)]
    pub state_dir: Option<PathBuf>,
    /// Print machine-readable JSON.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, Args, Clone)]
pub struct RunOpts {
    /// Isolation tier: namespace (default), process or landlock.
    #[arg(long)]
    pub tier: Option<String>,
    /// Wall-clock timeout, e.g. 30s, 5m.
    #[arg(long)]
    pub timeout: Option<String>,
    /// Memory limit, e.g. 512MiB.
    #[arg(long)]
    pub memory: Option<String>,
    /// Process/thread limit.
    #[arg(long)]
    pub pids: Option<u32>,
    /// Environment variable for the program (repeatable).
    #[arg(long = "env", value_name = "K=V")]
    pub env: Vec<String>,
    /// Environment variable whose value is a secret: passed in, never recorded (repeatable).
    #[arg(long = "secret-env", value_name = "K=V")]
    pub secret_env: Vec<String>,
    /// Read-only input directory ($SANDBOX_INPUT inside).
    #[arg(long)]
    pub input: Option<PathBuf>,
    /// Directory that receives the program's output ($SANDBOX_OUTPUT inside).
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// File whose contents are the program's standard input.
    #[arg(long)]
    pub stdin_file: Option<PathBuf>,
    /// Bind a host directory or file into the sandbox, read-only unless `:rw` (repeatable;
    /// a relative HOST is taken from the working directory).
    #[arg(long = "mount", value_name = "HOST:SANDBOX[:ro|rw]")]
    pub mounts: Vec<String>,
    /// Working directory inside the sandbox (default: the workspace).
    #[arg(long, value_name = "SANDBOX_PATH")]
    pub workdir: Option<PathBuf>,
    /// Run the program under a pseudo-terminal (interactive shells, REPLs). On a terminal,
    /// our keys go to the program as typed (Ctrl-C included) and it gets our window size.
    #[arg(long)]
    pub tty: bool,
    /// Keep the temporary workspace.
    #[arg(long)]
    pub keep: bool,
    /// Idempotency key: the same key and request return the recorded outcome.
    #[arg(long)]
    pub idempotency_key: Option<String>,
    /// Declare the operation safe to run twice (may be retried, re-run after a crash).
    #[arg(long)]
    pub idempotent: bool,
    #[arg(long, default_value = "default")]
    pub tenant: String,
    #[arg(long)]
    pub session: Option<String>,
    #[arg(long)]
    pub agent: Option<String>,
    /// Estimated cost to reserve from the budget (decimal, e.g. 0.25).
    #[arg(long)]
    pub estimated_cost: Option<String>,
    /// Why the agent wants this (shown to approvers).
    #[arg(long)]
    pub rationale: Option<String>,
    /// W3C traceparent of the caller's span (also read from $TRACEPARENT).
    #[arg(long)]
    pub traceparent: Option<String>,
    /// Seconds to wait for a person to approve an `ask` (default from config: 300).
    #[arg(long)]
    pub approval_timeout: Option<String>,
}

#[derive(Debug, Args, Clone)]
pub struct BrowseOpts {
    /// Write a PNG screenshot of the page to FILE.
    #[arg(long, value_name = "FILE")]
    pub screenshot: Option<PathBuf>,
    /// Isolation tier: only namespace (the default) may browse; any other is refused.
    #[arg(long)]
    pub tier: Option<String>,
    /// Wall-clock timeout, e.g. 30s (default 60s; the page gets two thirds of it).
    #[arg(long)]
    pub timeout: Option<String>,
    /// Memory limit for the whole browser, e.g. 1GiB (the default).
    #[arg(long)]
    pub memory: Option<String>,
    /// Process/thread limit (default 512).
    #[arg(long)]
    pub pids: Option<u32>,
    /// Idempotency key: the same key and request return the recorded outcome.
    #[arg(long)]
    pub idempotency_key: Option<String>,
    #[arg(long, default_value = "default")]
    pub tenant: String,
    #[arg(long)]
    pub session: Option<String>,
    #[arg(long)]
    pub agent: Option<String>,
    /// Why the agent wants this (shown to approvers).
    #[arg(long)]
    pub rationale: Option<String>,
    /// Seconds to wait for a person to approve an `ask` (default from config: 300).
    #[arg(long)]
    pub approval_timeout: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command in a sandbox, through the gateway.
    Run {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        opts: RunOpts,
        /// The command and its arguments (after `--`).
        #[arg(last = true, required = true)]
        argv: Vec<String>,
    },
    /// Run code (python, node or bash) in a sandbox, through the gateway.
    RunCode {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        opts: RunOpts,
        #[arg(long)]
        lang: String,
        /// File holding the code, or `-` for standard input.
        file: String,
    },
    /// Load a web page in a disposable headless Chromium (namespace tier, the web only
    /// through the egress proxy) and print its text.
    Browse {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        opts: BrowseOpts,
        /// The page: an http:// or https:// URL.
        url: String,
    },
    /// Write a commented default sandboxio.toml (and trust it).
    Init {
        #[arg(default_value = "sandboxio.toml")]
        path: PathBuf,
    },
    /// Trust a sandboxio.toml's current content, so that commands run in its directory
    /// read it without `--config` (review it first: it decides tier, policy and state)
    Trust {
        #[arg(default_value = "sandboxio.toml")]
        path: PathBuf,
    },
    /// What isolation this host can give, and how to fix what is missing.
    Doctor {
        #[arg(long)]
        json: bool,
    },
    /// Check, explain and replay policies.
    Policy {
        #[command(subcommand)]
        cmd: PolicyCmd,
    },
    /// Verify, tail and query the audit trail.
    Audit {
        #[command(subcommand)]
        cmd: AuditCmd,
    },
    /// List and decide pending approvals.
    Approvals {
        #[command(flatten)]
        common: Common,
        #[command(subcommand)]
        cmd: ApprovalsCmd,
    },
    /// Engage the kill switch: deny everything and stop running sandboxes.
    Kill {
        #[command(flatten)]
        common: Common,
        #[arg(long)]
        reason: String,
    },
    /// Release the kill switch.
    Resume {
        #[command(flatten)]
        common: Common,
    },
    /// Settled costs from the ledger, as cost entries.
    Costs {
        #[command(flatten)]
        common: Common,
        /// Start (RFC 3339 or a duration ago such as 24h).
        #[arg(long, default_value = "24h")]
        since: String,
        #[arg(long)]
        until: Option<String>,
        /// Only entries with this label (k=v, repeatable).
        #[arg(long = "label")]
        labels: Vec<String>,
    },
    /// What would stop the next operation: kill switch, pending approvals, budgets with
    /// their windows, rate-limit headroom.
    Status {
        #[command(flatten)]
        common: Common,
        /// The tenant whose budget scopes are shown.
        #[arg(long, default_value = "default")]
        tenant: String,
    },
    /// Budget summary by scope and category.
    Budget {
        #[command(flatten)]
        common: Common,
        #[arg(long, default_value = "default")]
        tenant: String,
        /// Reopen a scope closed by an overrun (`global`, `tenant:ID`, `agent:T/A`, ...).
        #[arg(long, value_name = "SCOPE")]
        reopen: Option<String>,
    },
    /// Repair the state database after it was lost or damaged.
    State {
        #[command(flatten)]
        common: Common,
        #[command(subcommand)]
        cmd: StateCmd,
    },
    /// Serve the HTTP API (a Unix socket in the state directory by default).
    Serve {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        opts: ServeArgs,
    },
    /// Serve MCP over standard input and output (tools: run_code, exec, files, sandboxes).
    Mcp {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        opts: McpArgs,
        #[command(subcommand)]
        cmd: Option<McpCmd>,
    },
    /// Create, list and revoke API keys for the HTTP API.
    Keys {
        #[command(flatten)]
        common: Common,
        #[command(subcommand)]
        cmd: KeysCmd,
    },
    /// Set, list and remove secrets sealed at rest for the egress proxy (the value is read
    /// from standard input and never printed).
    Secrets {
        #[command(flatten)]
        common: Common,
        #[command(subcommand)]
        cmd: SecretsCmd,
    },
}

#[derive(Debug, Subcommand)]
pub enum McpCmd {
    /// Approve the current description of a proxied tool (`<upstream>__<tool>`) whose
    /// description changed since it was approved; its calls are refused until then.
    Trust {
        /// The namespaced tool name.
        tool: String,
        /// Approve only this definition: the `seen` digest `sandboxio mcp pins` showed.
        /// Refused (nothing approved) if the upstream changed it since. Without it, the
        /// newest definition is approved, whatever it is.
        #[arg(long)]
        digest: Option<String>,
    },
    /// List the proxied tools' description pins (approved and latest digests) as JSON.
    Pins,
}

#[derive(Debug, Subcommand)]
pub enum StateCmd {
    /// Rebuild a lost or damaged state database from the audit trail (spend, idempotency
    /// keys); the damaged file is kept and the kill switch stays engaged until `resume`.
    Recover {
        /// Rebuild from the audit trail (the only source there is; required, to be explicit).
        #[arg(long, required = true)]
        from_trail: bool,
    },
}

#[derive(Debug, Args, Clone)]
pub struct McpArgs {
    /// The tenant every call is made as.
    #[arg(long, default_value = "default")]
    pub tenant: String,
    /// The agent named in every record.
    #[arg(long)]
    pub agent: Option<String>,
    /// How long an `ask` waits for an answer (elicitation or a person) before it is denied
    /// (default from config: 300s).
    #[arg(long)]
    pub approval_timeout: Option<String>,
}

#[derive(Debug, Args, Clone)]
pub struct ServeArgs {
    /// Listen on TCP at this address (e.g. 127.0.0.1:8700) instead of the Unix socket.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// Unix socket path (default: sandboxio.sock in the state directory); mode 0600.
    #[arg(long, conflicts_with = "listen")]
    pub socket: Option<PathBuf>,
    /// TLS certificate chain (PEM); with --tls-key, serves HTTPS.
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM).
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Requests handled at once; more are answered 503 with Retry-After.
    #[arg(long)]
    pub max_concurrent: Option<usize>,
    /// Execs and run_code calls starting at once; more wait their turn, first come first
    /// served (0: no bound; default: two per CPU).
    #[arg(long)]
    pub max_starting: Option<usize>,
    /// Open connections at once; more are closed at accept.
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// Longest a request may take, e.g. 5m.
    #[arg(long)]
    pub request_timeout: Option<String>,
    /// On SIGTERM, how long running requests may finish before they are cancelled, e.g. 10s.
    #[arg(long)]
    pub shutdown_grace: Option<String>,
    /// Longest a connection may take to send a request's headers, idle keep-alive
    /// included (slow or idle connections are closed), e.g. 30s.
    #[arg(long)]
    pub header_timeout: Option<String>,
    /// Sandboxes one tenant may hold at once.
    #[arg(long)]
    pub max_sandboxes: Option<usize>,
    /// Largest JSON request body, e.g. 1MiB.
    #[arg(long)]
    pub json_limit: Option<String>,
    /// Largest file upload, e.g. 16MiB.
    #[arg(long)]
    pub upload_limit: Option<String>,
    /// How long an `ask` waits for a person before it is denied (default from config: 300s).
    #[arg(long)]
    pub approval_timeout: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum SecretsCmd {
    /// Seal a secret: its value is read from standard input (one trailing newline dropped),
    /// never from the command line. The key is `SBX_SECRETS_KEY` (64 hex digits), else the
    /// file `SBX_SECRETS_KEY_FILE`, else a 0600 file outside the state directory, created
    /// on first use.
    Set {
        /// The secret's name (an environment variable name).
        name: String,
        /// A host (or `*.domain`) the secret may be sent to; repeat for several.
        #[arg(long = "host", required = true)]
        hosts: Vec<String>,
    },
    /// Names and bound hosts; never values.
    List,
    /// Remove a secret.
    Rm { name: String },
}

#[derive(Debug, Subcommand)]
pub enum KeysCmd {
    /// Create a key; its secret is printed once and only its hash is kept.
    Create {
        #[arg(long)]
        tenant: String,
        /// Comma-separated: exec, run_code, files, approve, admin, read (or `all`).
        #[arg(long)]
        scopes: String,
        #[arg(long, default_value = "")]
        label: String,
    },
    /// Keys (and capability tokens) with their tenant, scopes and state; never secrets.
    List {
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Revoke a key and every capability token minted from it.
    Revoke { id: String },
}

#[derive(Debug, Subcommand)]
pub enum PolicyCmd {
    /// Validate policy files and run their examples.
    Check {
        #[arg(long)]
        json: bool,
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// The decision for one operation and every rule that decided.
    Explain {
        #[arg(long)]
        json: bool,
        /// The operation as JSON (or @FILE).
        #[arg(long)]
        op: String,
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Re-decide recorded operations under candidate policies; list what would change.
    Replay {
        #[arg(long)]
        json: bool,
        #[arg(long)]
        audit: Vec<PathBuf>,
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub enum AuditCmd {
    /// Verify trails (each its hash chain and signed checkpoints, offline), then each
    /// against its signed head in the state store. Several trails: one per replica.
    Verify {
        #[arg(long)]
        json: bool,
        /// Public key file to check signatures (one key per line); repeatable, e.g. one
        /// `audit.pub` per replica.
        #[arg(long)]
        key: Vec<PathBuf>,
        /// State directory holding the trails' signed heads (default: each trail's own
        /// directory when it holds `state.db`).
        #[arg(long, conflicts_with = "config")]
        state_dir: Option<PathBuf>,
        /// Configuration whose `[state] url` names the replicas' shared store (or whose
        /// `[state] dir` holds `state.db`), where the signed heads are kept.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Also fail when the store keeps a head that none of the given trails holds (a
        /// replica's trail left out, deleted or renamed).
        #[arg(long)]
        all: bool,
        /// Check each trail on its own, without its signed head: records cut from its end,
        /// or a whole older copy, then pass unnoticed. Needed for a trail in a state
        /// directory whose database is gone (otherwise refused).
        #[arg(long, conflicts_with_all = ["state_dir", "config", "all"])]
        no_head: bool,
        /// The trails: each the active file of one trail (rotated files beside it are
        /// read with it).
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Start a new audit signing key (after the old one was lost, or to retire it): the
    /// rotation is recorded in the trail and the old public key stays in `audit.pub`.
    RotateKey {
        #[command(flatten)]
        common: Common,
    },
    /// The last events (and, with -f, new ones as they come).
    Tail {
        #[command(flatten)]
        common: Common,
        #[arg(short = 'n', default_value_t = 20)]
        lines: usize,
        #[arg(short = 'f', long)]
        follow: bool,
        file: Option<PathBuf>,
    },
    /// Events filtered by time, tenant, event and decision.
    Query {
        #[command(flatten)]
        common: Common,
        #[arg(long)]
        since: Option<String>,
        #[arg(long)]
        until: Option<String>,
        #[arg(long)]
        tenant: Option<String>,
        #[arg(long)]
        event: Option<String>,
        #[arg(long)]
        decision: Option<String>,
        file: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub enum ApprovalsCmd {
    /// Pending approvals (all with --all).
    List {
        #[arg(long)]
        all: bool,
    },
    Approve {
        id: String,
        #[arg(long, default_value_t = default_user())]
        by: String,
        #[arg(long)]
        reason: Option<String>,
    },
    Deny {
        id: String,
        #[arg(long, default_value_t = default_user())]
        by: String,
        #[arg(long)]
        reason: Option<String>,
    },
}

fn default_user() -> String {
    std::env::var("USER").unwrap_or_else(|_| "operator".into())
}
