//! `sandboxio mcp`: the MCP server over standard input and output, as the local user's
//! principal. Standard output carries MCP messages only; logs go to standard error.
//!
//! The transport is line-delimited JSON-RPC of our own, so that every line gets an answer:
//! a line that is not JSON is answered `-32700` (id null), JSON that is not a message
//! `-32600` (with its id when it has one), and a line over `MAX_LINE` bytes `-32600` (id
//! null, code `SBX_E1919`) and skipped, and a request of a method of the protocol whose
//! params do not fit it `-32602`; the client never waits for an answer that will not come.
//! A request whose id is already in flight (not answered yet; when cancelled, until its
//! handler has ended) is answered `-32600` and not run: two runs would have two effects
//! and only one answer. Requests reach the server under ids of the proxy's own
//! (`stdio_ids.rs`), so a reused id can never take another request's answer or
//! cancellation.

use rmcp::model::{
    ClientJsonRpcMessage, ErrorData, JsonRpcMessage, RequestId, ServerJsonRpcMessage,
};
use rmcp::transport::Transport;
use rmcp::{RoleServer, ServiceExt as _};
use sandboxio_core::Principal;
use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncWrite, AsyncWriteExt as _};
use tokio::sync::mpsc;

use crate::error::McpError;
use crate::handler::{Front, McpOptions, SandboxioMcp};
use crate::stdio_ids::{Ended, Ids};

/// How long stopping waits for the upstreams' processes to end and be recorded.
const UPSTREAM_STOP: std::time::Duration = std::time::Duration::from_secs(10);

/// The longest message (one line) read.
pub const MAX_LINE: usize = 16 * 1024 * 1024;

/// Serves until the client closes standard input; the session's sandboxes are closed
/// then, and the upstreams stopped (their records written).
pub async fn serve_stdio(opts: McpOptions, principal: Principal) -> Result<(), McpError> {
    serve_io(opts, principal, tokio::io::stdin(), tokio::io::stdout()).await
}

/// Serves over `reader` and `writer` (one JSON-RPC message per line) until `reader` ends.
pub async fn serve_io<R, W>(
    opts: McpOptions,
    principal: Principal,
    reader: R,
    writer: W,
) -> Result<(), McpError>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let proxy = opts.proxy.clone();
    let ids = Ids::default();
    let handler = Ended {
        inner: SandboxioMcp::new(opts, Front::Local(principal)),
        ids: ids.clone(),
    };
    let running = handler
        .serve(Lines::new(reader, writer, ids))
        .await
        .map_err(|e| McpError::Transport {
            transport: "stdio",
            why: e.to_string(),
        })?;
    let ended = running.waiting().await.map_err(|e| McpError::Transport {
        transport: "stdio",
        why: e.to_string(),
    });
    // The upstreams' processes are operations too: end them and let their records be
    // written before the process exits.
    if let Some(p) = proxy {
        p.shutdown(UPSTREAM_STOP).await;
    }
    ended?;
    Ok(())
}

/// Messages in from a reader task, out through a writer task (which also answers the
/// lines that are not messages).
struct Lines {
    incoming: mpsc::Receiver<ClientJsonRpcMessage>,
    out: mpsc::Sender<ServerJsonRpcMessage>,
    ids: Ids,
}

impl Lines {
    fn new<R, W>(reader: R, writer: W, ids: Ids) -> Lines
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (in_tx, incoming) = mpsc::channel(64);
        let (out, out_rx) = mpsc::channel(64);
        tokio::spawn(write_lines(writer, out_rx));
        tokio::spawn(read_lines(reader, in_tx, out.clone(), ids.clone()));
        Lines { incoming, out, ids }
    }
}

fn closed() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::BrokenPipe, "standard output is closed")
}

impl Transport<RoleServer> for Lines {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        let mut item = Some(item);
        // An answer goes out under the client's id; that of a request the client
        // cancelled, not at all.
        match item.as_mut() {
            Some(JsonRpcMessage::Response(r)) => match self.ids.answered(&r.id) {
                Some(client) => r.id = client,
                None => item = None,
            },
            Some(JsonRpcMessage::Error(e)) => {
                if let Some(own) = &e.id {
                    match self.ids.answered(own) {
                        Some(client) => e.id = Some(client),
                        None => item = None,
                    }
                }
            }
            _ => {}
        }
        let out = self.out.clone();
        async move {
            match item {
                Some(m) => out.send(m).await.map_err(|_| closed()),
                None => Ok(()),
            }
        }
    }

    fn receive(
        &mut self,
    ) -> impl std::future::Future<Output = Option<ClientJsonRpcMessage>> + Send {
        self.incoming.recv()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.incoming.close();
        Ok(())
    }
}

async fn write_lines<W: AsyncWrite + Unpin>(
    mut w: W,
    mut rx: mpsc::Receiver<ServerJsonRpcMessage>,
) {
    while let Some(m) = rx.recv().await {
        let Ok(mut v) = serde_json::to_value(&m) else {
            tracing::warn!("an MCP message could not be written as JSON");
            continue;
        };
        // JSON-RPC 2.0 (the revisions served): an error whose request id could not be
        // read says `"id": null`.
        if let Some(o) = v.as_object_mut() {
            if o.contains_key("error") && !o.contains_key("id") {
                o.insert("id".into(), serde_json::Value::Null);
            }
        }
        let Ok(mut line) = serde_json::to_vec(&v) else {
            continue;
        };
        line.push(b'\n');
        if w.write_all(&line).await.is_err() || w.flush().await.is_err() {
            return;
        }
    }
}

/// Reads lines; each one is a message passed on, or answered with an error.
async fn read_lines<R: AsyncRead + Unpin>(
    r: R,
    incoming: mpsc::Sender<ClientJsonRpcMessage>,
    out: mpsc::Sender<ServerJsonRpcMessage>,
    ids: Ids,
) {
    let mut r = tokio::io::BufReader::new(r);
    let mut line = Vec::new();
    let mut over = false;
    loop {
        let buf = match r.fill_buf().await {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!("reading standard input failed: {e}");
                break;
            }
        };
        if buf.is_empty() {
            if !line.is_empty() || over {
                answer(&line, over, &incoming, &out, &ids).await;
            }
            break;
        }
        let (chunk, end) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        if !over {
            if line.len() + chunk.len() > MAX_LINE {
                over = true;
                line = Vec::new();
            } else {
                line.extend_from_slice(chunk);
            }
        }
        let used = end.unwrap_or(buf.len());
        r.consume(used);
        if end.is_some() {
            if !answer(&line, over, &incoming, &out, &ids).await {
                break;
            }
            line.clear();
            over = false;
        }
    }
}

/// Passes a line on as a message, or answers it; `false` once the server is gone.
async fn answer(
    line: &[u8],
    over: bool,
    incoming: &mpsc::Sender<ClientJsonRpcMessage>,
    out: &mpsc::Sender<ServerJsonRpcMessage>,
    ids: &Ids,
) -> bool {
    let error = |id: Option<RequestId>, e: ErrorData| JsonRpcMessage::error(e, id);
    let reply = if over {
        error(
            None,
            ErrorData::invalid_request(
                format!("the message is longer than {MAX_LINE} bytes; it was skipped"),
                Some(serde_json::json!({ "code": "SBX_E1919" })),
            ),
        )
    } else {
        let text = line.strip_suffix(b"\r").unwrap_or(line);
        if text.iter().all(u8::is_ascii_whitespace) {
            return true;
        }
        match serde_json::from_slice::<ClientJsonRpcMessage>(text) {
            Ok(JsonRpcMessage::Request(r)) if standard_method_unread(&r.request) => error(
                Some(r.id.clone()),
                ErrorData::invalid_params(
                    format!(
                        "the params of `{}` do not fit the method",
                        r.request.method()
                    ),
                    None,
                ),
            ),
            Ok(JsonRpcMessage::Request(mut r)) => match ids.admit(&r.id) {
                Some(own) => {
                    r.id = own;
                    return incoming.send(JsonRpcMessage::Request(r)).await.is_ok();
                }
                None => error(
                    Some(r.id.clone()),
                    ErrorData::invalid_request(
                        format!(
                            "a request with id {} is already in flight; it was not run",
                            r.id
                        ),
                        None,
                    ),
                ),
            },
            Ok(m) => {
                let Some(m) = own_cancellation(ids, m) else {
                    return true;
                };
                return incoming.send(m).await.is_ok();
            }
            Err(e) => match serde_json::from_slice::<serde_json::Value>(text) {
                Ok(v) => {
                    let id = v
                        .get("id")
                        .and_then(|id| serde_json::from_value::<RequestId>(id.clone()).ok());
                    error(
                        id,
                        ErrorData::invalid_request(
                            format!("not a JSON-RPC message this server takes: {e}"),
                            None,
                        ),
                    )
                }
                Err(e) => error(None, ErrorData::parse_error(format!("not JSON: {e}"), None)),
            },
        }
    };
    out.send(reply).await.is_ok()
}

/// A client's cancellation names the request by the server's own id; one of no request
/// in flight is dropped (it could otherwise name another request's own id).
fn own_cancellation(ids: &Ids, m: ClientJsonRpcMessage) -> Option<ClientJsonRpcMessage> {
    let JsonRpcMessage::Notification(mut n) = m else {
        return Some(m);
    };
    if let rmcp::model::ClientNotification::CancelledNotification(c) = &mut n.notification {
        if let Some(client) = &c.params.request_id {
            c.params.request_id = Some(ids.cancel(client)?);
        }
    }
    Some(JsonRpcMessage::Notification(n))
}

/// Methods of the protocol served; a request of one of them that was not read as that
/// method had params that do not fit it (`-32602`, not "method not found").
const STANDARD_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "resources/subscribe",
    "resources/unsubscribe",
    "completion/complete",
    "logging/setLevel",
];

fn standard_method_unread(r: &rmcp::model::ClientRequest) -> bool {
    matches!(r, rmcp::model::ClientRequest::CustomRequest(c) if STANDARD_METHODS.contains(&c.method.as_str()))
}
