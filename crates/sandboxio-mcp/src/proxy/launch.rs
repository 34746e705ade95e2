//! Starting an upstream's transport. A stdio upstream is one long `exec` operation through
//! the chain (policy decides on its argv; its end leaves that operation's record), run in
//! a sandbox of its own tier with standard input streamed; its standard output is the
//! protocol, read unredacted (`Submission::protocol_output`) because nothing from it
//! reaches a client except through a `tool_call` operation, which the gateway redacts.
//! An HTTP upstream is a streamable-HTTP client with bounded bodies.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::RoleClient;
use sandboxio_config::{UpstreamSection, UpstreamTransport};
use sandboxio_core::{ExecEvent, Limits, Operation, OperationArgs, Principal};
use sandboxio_gateway::{CancelToken, Gateway, Submission};
use tokio::sync::{mpsc, oneshot, watch};

use super::channel_io::{ChunkWriter, EventReader};

/// Most stderr bytes of an upstream kept for diagnostics (the tail).
const STDERR_KEPT: usize = 4096;

/// What a started stdio upstream leaves behind: the token that ends its process tree,
/// how the operation ended (when it does), and counters.
pub struct Process {
    pub token: CancelToken,
    /// The end of the upstream's `exec` operation: its status and reason.
    pub ended: Option<oneshot::Receiver<String>>,
    /// Turns true once that operation has returned (its record written).
    pub finished: watch::Receiver<bool>,
    pub stdout_bytes: Arc<AtomicU64>,
    pub stderr_tail: Arc<std::sync::Mutex<Vec<u8>>>,
    /// Why the connection was cut by the proxy (a message over `max_message`), if it was.
    pub cut: Arc<std::sync::Mutex<Option<String>>>,
}

/// A transport to hand to the MCP client.
pub enum Launched {
    Stdio(
        AsyncRwTransport<RoleClient, EventReader, ChunkWriter>,
        Process,
    ),
    Http(StreamableHttpClientTransport<reqwest::Client>),
}

/// The principal an upstream's own process runs as (its `exec` operation's record).
pub fn principal(name: &str) -> Principal {
    Principal {
        tenant: "sandboxio".into(),
        session: None,
        agent: Some(format!("mcp-upstream-{name}")),
    }
}

pub fn launch(
    gw: &Arc<Gateway>,
    base: &sandboxio_core::ExecRequest,
    up: &UpstreamSection,
) -> Launched {
    match &up.transport {
        UpstreamTransport::Http { url } => {
            let mut cfg = StreamableHttpClientTransportConfig::with_uri(url.clone());
            let max = usize::try_from(up.max_message.0).unwrap_or(usize::MAX);
            cfg.max_sse_event_size = max;
            cfg.max_json_response_size = max;
            Launched::Http(StreamableHttpClientTransport::from_config(cfg))
        }
        UpstreamTransport::Stdio {
            command,
            env,
            mounts,
        } => {
            let (transport, process) = stdio(gw, base, up, command, env, mounts);
            Launched::Stdio(transport, process)
        }
    }
}

fn stdio(
    gw: &Arc<Gateway>,
    base: &sandboxio_core::ExecRequest,
    up: &UpstreamSection,
    command: &[String],
    env: &std::collections::BTreeMap<String, String>,
    mounts: &[sandboxio_core::Mount],
) -> (
    AsyncRwTransport<RoleClient, EventReader, ChunkWriter>,
    Process,
) {
    let mut req = base.clone();
    req.argv = command.to_vec();
    req.env.extend(env.clone());
    // Host paths the upstream may see (its allowed directories, its own program); policy
    // sees them (`mount`, `mount_rw`) like any exec's.
    req.mounts.extend(mounts.iter().cloned());
    req.stdin_stream = true;
    // The upstream speaks for every call while it lives: it may live as long as the
    // ceilings allow, and its output caps are the ceilings (it is restarted before then).
    let cfg = gw.config();
    req.limits.timeout = if cfg.limits_max.timeout.is_zero() {
        Limits::max().timeout
    } else {
        cfg.limits_max.timeout
    };
    let cap =
        |v: sandboxio_core::ByteSize, d: sandboxio_core::ByteSize| if v.0 == 0 { d } else { v };
    req.limits.stdout_cap = cap(cfg.limits_max.stdout_cap, Limits::max().stdout_cap);
    req.limits.stderr_cap = cap(cfg.limits_max.stderr_cap, Limits::max().stderr_cap);
    let mut op = Operation::new(
        principal(&up.name),
        OperationArgs::Exec {
            argv: command.to_vec(),
        },
    )
    .with_exec(req);
    op.tier = up.tier;
    op.rationale = Some(format!("start MCP upstream `{}`", up.name));
    let mut sub = Submission::new(op);
    sub.labels.insert("mcp.upstream".into(), up.name.clone());
    sub.protocol_output = true;
    let token = CancelToken::new();
    sub.cancel = Some(token.clone());
    let (stdin_tx, stdin_rx) = mpsc::channel::<Vec<u8>>(16);
    let (ev_tx, ev_rx) = mpsc::channel::<ExecEvent>(64);
    sub.stream.stdin = Some(stdin_rx);
    sub.stream.events = Some(ev_tx);

    let stdout_bytes = Arc::new(AtomicU64::new(0));
    let stderr_tail = Arc::new(std::sync::Mutex::new(Vec::new()));
    // The client's transport reads stdout from the run's events and writes stdin chunks
    // itself (no relay task between them): see `channel_io`.
    let max = usize::try_from(up.max_message.0).unwrap_or(usize::MAX);
    let cut = Arc::new(std::sync::Mutex::new(None));
    let read = EventReader::new(
        ev_rx,
        stdout_bytes.clone(),
        stderr_tail.clone(),
        STDERR_KEPT,
    )
    .with_max_line(max, cut.clone());
    let write = ChunkWriter::new(stdin_tx);
    let (ended_tx, ended_rx) = oneshot::channel();
    let (finished_tx, finished) = watch::channel(false);
    {
        let gw = gw.clone();
        let name = up.name.clone();
        tokio::spawn(async move {
            let why = match gw.submit(sub).await {
                Ok(o) => {
                    let r = &o.record;
                    let code = r
                        .error_code
                        .as_deref()
                        .map(|c| format!(" [{c}]"))
                        .unwrap_or_default();
                    format!(
                        "{} at {}{code}: {}",
                        r.status.as_str(),
                        r.layer.as_str(),
                        r.reason
                    )
                }
                Err(e) => e.to_string(),
            };
            tracing::info!(upstream = %name, "MCP upstream process ended: {why}");
            let _ = ended_tx.send(why);
            let _ = finished_tx.send(true);
        });
    }
    let transport = AsyncRwTransport::new_client(read, write).with_max_line_length(max);
    (
        transport,
        Process {
            token,
            ended: Some(ended_rx),
            finished,
            stdout_bytes,
            stderr_tail,
            cut,
        },
    )
}
