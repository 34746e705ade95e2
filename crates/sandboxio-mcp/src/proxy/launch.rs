//! Starting an upstream's transport. A stdio upstream is one long `exec` operation through
//! the chain (policy decides on its argv; its end leaves that operation's record), run in
//! a sandbox of its own tier with standard input streamed; its standard output is the
//! protocol, read unredacted (`Submission::protocol_output`) because nothing from it
//! reaches a client except through a `tool_call` operation, which the gateway redacts.
//! An HTTP upstream is a streamable-HTTP client with bounded bodies.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::RoleClient;
use sandboxio_config::{UpstreamSection, UpstreamTransport};
use sandboxio_core::{ExecEvent, Limits, Operation, OperationArgs, OutputStream, Principal};
use sandboxio_gateway::{CancelToken, Gateway, Submission};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot, watch};

/// Most stderr bytes of an upstream kept for diagnostics (the tail).
const STDERR_KEPT: usize = 4096;
/// Bytes buffered between the sandbox's output and the MCP client.
const PIPE: usize = 256 * 1024;

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
}

/// A transport to hand to the MCP client.
pub enum Launched {
    Stdio(
        AsyncRwTransport<
            RoleClient,
            tokio::io::ReadHalf<tokio::io::DuplexStream>,
            tokio::io::WriteHalf<tokio::io::DuplexStream>,
        >,
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
    AsyncRwTransport<
        RoleClient,
        tokio::io::ReadHalf<tokio::io::DuplexStream>,
        tokio::io::WriteHalf<tokio::io::DuplexStream>,
    >,
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
    let (ev_tx, mut ev_rx) = mpsc::channel::<ExecEvent>(64);
    sub.stream.stdin = Some(stdin_rx);
    sub.stream.events = Some(ev_tx);

    let (client_end, our_end) = tokio::io::duplex(PIPE);
    let (mut from_client, mut to_client) = tokio::io::split(our_end);
    let stdout_bytes = Arc::new(AtomicU64::new(0));
    let stderr_tail = Arc::new(std::sync::Mutex::new(Vec::new()));
    // Output: stdout is the protocol; stderr is kept (a tail) for diagnostics.
    {
        let (stdout_bytes, stderr_tail) = (stdout_bytes.clone(), stderr_tail.clone());
        tokio::spawn(async move {
            while let Some(ev) = ev_rx.recv().await {
                match ev {
                    ExecEvent::Output {
                        stream: OutputStream::Stdout,
                        data,
                        ..
                    } => {
                        stdout_bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
                        if to_client.write_all(&data).await.is_err() {
                            break;
                        }
                    }
                    ExecEvent::Output { data, .. } => {
                        if let Ok(mut t) = stderr_tail.lock() {
                            t.extend_from_slice(&data);
                            let over = t.len().saturating_sub(STDERR_KEPT);
                            t.drain(..over);
                        }
                    }
                    ExecEvent::Exit { .. } => break,
                }
            }
            // End of the protocol stream: the client sees the upstream gone.
            let _ = to_client.shutdown().await;
        });
    }
    // Input: what the client writes goes to the program's standard input.
    tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from_client.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if stdin_tx.send(buf[..n].to_vec()).await.is_err() {
                        break;
                    }
                }
            }
        }
    });
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
    let (read, write) = tokio::io::split(client_end);
    let max = usize::try_from(up.max_message.0).unwrap_or(usize::MAX);
    let transport = AsyncRwTransport::new_client(read, write).with_max_line_length(max);
    (
        transport,
        Process {
            token,
            ended: Some(ended_rx),
            finished,
            stdout_bytes,
            stderr_tail,
        },
    )
}
