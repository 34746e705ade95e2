//! One upstream MCP server: its connection (started on first use), its last listing,
//! restarts with backoff, and calls bounded by its timeout.
//!
//! - A connection that ends (the process crashed or was killed, the HTTP session broke)
//!   fails the calls in flight at once (`SBX_E1909`); the next use starts a new one. The
//!   first restart after a crash is immediate, later ones wait 250 ms doubling up to 30 s
//!   while starting keeps failing (`SBX_E1908` meanwhile). A call that succeeds resets it.
//! - A call that takes longer than `call_timeout` fails (`SBX_E1910`) and the upstream is
//!   told it was cancelled; a start that takes longer than `start_timeout` fails.
//! - Nothing here holds a lock while waiting on the upstream, so one slow or dead
//!   upstream never holds up another, nor a listing.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, GetPromptRequestParams,
    GetPromptResponse, GetPromptResult, PaginatedRequestParams, Prompt, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, Resource, ResourceTemplate, Tool,
};
use rmcp::service::{RunningService, ServiceError};
use rmcp::{RoleClient, ServiceExt as _};
use sandboxio_config::UpstreamSection;
use sandboxio_core::ExecRequest;
use sandboxio_gateway::{CancelToken, Gateway};

use super::client::UpstreamClient;
use super::launch::{self, Launched, Process};
use super::Notifier;

/// Longest wait between two starts of an upstream that keeps failing.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// A stdio upstream is replaced before its output reaches this share of its cap.
const RETIRE_SHARE: u64 = 3;

/// Why a call did not get the upstream's answer.
#[derive(Debug, Clone)]
pub enum CallError {
    /// Not running and not startable now (with why, and when it is tried again).
    Unavailable {
        why: String,
    },
    /// The connection ended while the call was in flight.
    Crashed {
        why: String,
    },
    TimedOut {
        after: Duration,
        /// The upstream was taken for hung (this call was the last of [`HUNG_AFTER`] in a
        /// row without an answer) and is started again on the next call.
        restarted: bool,
    },
    Cancelled,
    /// The upstream does not offer resource subscriptions.
    NoSubscriptions,
    /// The upstream answered with a protocol error, or something else failed.
    Failed {
        why: String,
    },
}

impl CallError {
    pub fn code(&self) -> &'static str {
        match self {
            CallError::Unavailable { .. } => "SBX_E1908",
            CallError::Crashed { .. } => "SBX_E1909",
            CallError::TimedOut { .. } => "SBX_E1910",
            CallError::Cancelled => "SBX_E1914",
            CallError::NoSubscriptions => "SBX_E1917",
            CallError::Failed { .. } => "SBX_E1912",
        }
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Unavailable { why } => write!(f, "the upstream is not available: {why}"),
            CallError::Crashed { why } => write!(
                f,
                "the upstream stopped while the call was in flight ({why}); it is restarted on the next call"
            ),
            CallError::TimedOut { after, restarted } => {
                write!(f, "the upstream did not answer within {}s", after.as_secs_f64())?;
                if *restarted {
                    write!(f, "; it answered none of the last {HUNG_AFTER} calls, so it is stopped and started again on the next call")?;
                }
                Ok(())
            }
            CallError::Cancelled => write!(f, "the call was cancelled by the MCP client"),
            CallError::NoSubscriptions => {
                write!(f, "the upstream does not offer resource subscriptions")
            }
            CallError::Failed { why } => write!(f, "{why}"),
        }
    }
}

/// A live connection.
pub(crate) struct Conn {
    client: RunningService<RoleClient, UpstreamClient>,
    process: Option<Process>,
    started: Instant,
    /// Set once the connection is known to have ended.
    dead: AtomicBool,
    /// Calls in a row that timed out without an answer (any answer resets it).
    unanswered: std::sync::atomic::AtomicU32,
}

/// Calls in a row that time out before an upstream is taken for hung: stopped, and started
/// again on the next call. One slow call is not enough (it may be slow work); a second in
/// a row with nothing answered between them is.
pub const HUNG_AFTER: u32 = 2;

impl Conn {
    /// Why the proxy cut the connection, if it did (a message over `max_message`).
    fn cut(&self) -> Option<String> {
        self.process
            .as_ref()
            .and_then(|p| p.cut.lock().ok().and_then(|c| c.clone()))
    }

    /// Why the connection ended, for the calls it failed and the next start's error.
    fn end_reason(&self) -> String {
        self.cut()
            .unwrap_or_else(|| format!("it stopped{}", tail(&self.stderr_tail())))
    }

    /// Ends the connection (and its process) as hung.
    fn give_up(&self, why: &str) {
        self.dead.store(true, Ordering::SeqCst);
        if let Some(p) = &self.process {
            p.token.cancel(why);
        }
    }

    fn alive(&self) -> bool {
        !self.dead.load(Ordering::SeqCst) && !self.client.is_closed()
    }

    /// Whether the process nears the end of its lifetime or output cap.
    fn retiring(&self, cap: u64, lifetime: Duration) -> bool {
        let Some(p) = &self.process else { return false };
        p.stdout_bytes.load(Ordering::Relaxed) > cap / 4 * RETIRE_SHARE
            || self.started.elapsed() + Duration::from_secs(60) > lifetime
    }

    fn stderr_tail(&self) -> String {
        self.process
            .as_ref()
            .and_then(|p| {
                p.stderr_tail
                    .lock()
                    .ok()
                    .map(|t| String::from_utf8_lossy(&t).into_owned())
            })
            .unwrap_or_default()
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(p) = &self.process {
            p.token.cancel("the MCP upstream's connection was closed");
        }
    }
}

struct State {
    conn: Option<Arc<Conn>>,
    /// Starts that failed (or connections that ended) since the last success.
    failures: u32,
    not_before: Option<Instant>,
    last_error: Option<String>,
    /// The last listing, as the upstream gave it.
    tools: Vec<Tool>,
    listed: bool,
    /// The names of the prompts in the last prompt listing (`None`: never listed).
    prompts: Option<Vec<String>>,
}

pub struct Upstream {
    pub(crate) cfg: UpstreamSection,
    gw: Arc<Gateway>,
    base: ExecRequest,
    state: Mutex<State>,
    /// Serialises starts (held across the start, never across a call).
    starting: tokio::sync::Mutex<()>,
    notifier: Weak<Notifier>,
    me: Weak<Upstream>,
    starts: AtomicU64,
}

fn backoff(failures: u32) -> Duration {
    match failures {
        0 | 1 => Duration::ZERO,
        n => FIRST_BACKOFF
            .saturating_mul(1u32 << (n - 2).min(8))
            .min(MAX_BACKOFF),
    }
}

fn service_error(e: ServiceError) -> CallError {
    match e {
        ServiceError::TransportClosed | ServiceError::TransportSend(_) => CallError::Crashed {
            why: "its connection closed".into(),
        },
        ServiceError::Timeout { timeout } => CallError::TimedOut {
            after: timeout,
            restarted: false,
        },
        ServiceError::Cancelled { .. } => CallError::Cancelled,
        ServiceError::McpError(e) => CallError::Failed {
            why: format!("the upstream refused the call: {}", e.message),
        },
        other => CallError::Failed {
            why: format!("the upstream's answer was unusable: {other}"),
        },
    }
}

impl Upstream {
    pub(crate) fn new(
        cfg: UpstreamSection,
        gw: Arc<Gateway>,
        base: ExecRequest,
        notifier: Weak<Notifier>,
    ) -> Arc<Upstream> {
        Arc::new_cyclic(|me| Upstream {
            cfg,
            gw,
            base,
            state: Mutex::new(State {
                conn: None,
                failures: 0,
                not_before: None,
                last_error: None,
                tools: Vec::new(),
                listed: false,
                prompts: None,
            }),
            starting: tokio::sync::Mutex::new(()),
            notifier,
            me: me.clone(),
            starts: AtomicU64::new(0),
        })
    }

    pub fn name(&self) -> &str {
        &self.cfg.name
    }

    /// How many times a connection was started (restarts included).
    pub fn starts(&self) -> u64 {
        self.starts.load(Ordering::Relaxed)
    }

    /// The last listing (empty until the upstream has been listed once).
    pub(crate) fn tools(&self) -> Vec<Tool> {
        self.state
            .lock()
            .map(|s| s.tools.clone())
            .unwrap_or_default()
    }

    /// Whether `tool` (the upstream's own name, exactly) is in its last listing; the
    /// upstream is started and listed first if it never was.
    pub(crate) async fn has_tool(&self, tool: &str) -> Result<bool, CallError> {
        if !self.listed() {
            self.ensure_listed().await?;
        }
        Ok(self.tools().iter().any(|t| t.name == tool))
    }

    /// Whether `prompt` (the upstream's own name, exactly) is in its last prompt listing;
    /// listed now if it never was.
    pub(crate) async fn has_prompt(&self, prompt: &str) -> Result<bool, CallError> {
        let known = self.state.lock().ok().and_then(|s| s.prompts.clone());
        let names = match known {
            Some(n) => n,
            None => {
                self.listing(Listing::Prompts).await?;
                self.state
                    .lock()
                    .ok()
                    .and_then(|s| s.prompts.clone())
                    .unwrap_or_default()
            }
        };
        Ok(names.iter().any(|n| n == prompt))
    }

    /// The upstream said its prompts changed: the next `prompts/get` lists them again.
    pub(crate) fn forget_prompts(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.prompts = None;
        }
    }

    pub(crate) fn listed(&self) -> bool {
        self.state.lock().map(|s| s.listed).unwrap_or(false)
    }

    fn live(&self) -> Option<Arc<Conn>> {
        let mut s = self.state.lock().ok()?;
        let cap = sandboxio_core::Limits::max().stdout_cap.0;
        let lifetime = sandboxio_core::Limits::max().timeout;
        let c = s.conn.clone()?;
        if c.alive() && !c.retiring(cap, lifetime) {
            return Some(c);
        }
        if !c.alive() {
            // It ended: count it, so a crash loop backs off.
            s.failures += 1;
            s.last_error = Some(c.end_reason());
            s.not_before = Some(Instant::now() + backoff(s.failures));
        }
        s.conn = None;
        None
    }

    /// A live connection, starting one when none is (and the backoff allows).
    pub(crate) async fn connection(&self) -> Result<Arc<Conn>, CallError> {
        if let Some(c) = self.live() {
            return Ok(c);
        }
        let _starting = self.starting.lock().await;
        if let Some(c) = self.live() {
            return Ok(c);
        }
        if let Ok(s) = self.state.lock() {
            if let Some(t) = s.not_before {
                if Instant::now() < t {
                    let wait = t - Instant::now();
                    return Err(CallError::Unavailable {
                        why: format!(
                            "{}; started again in {} ms",
                            s.last_error.as_deref().unwrap_or("starting it failed"),
                            wait.as_millis()
                        ),
                    });
                }
            }
        }
        match self.start().await {
            Ok(c) => {
                if let Ok(mut s) = self.state.lock() {
                    s.conn = Some(c.clone());
                    s.not_before = None;
                }
                // A (re)started upstream may offer other tools.
                if let Ok(tools) = self.list(&c, self.cfg.start_timeout.0).await {
                    self.take_listing(tools);
                }
                self.resubscribe().await;
                Ok(c)
            }
            Err(why) => {
                if let Ok(mut s) = self.state.lock() {
                    s.failures += 1;
                    s.last_error = Some(why.clone());
                    s.not_before = Some(Instant::now() + backoff(s.failures + 1));
                }
                Err(CallError::Unavailable { why })
            }
        }
    }

    async fn start(&self) -> Result<Arc<Conn>, String> {
        self.starts.fetch_add(1, Ordering::Relaxed);
        let client = UpstreamClient {
            upstream: self.me.clone(),
        };
        let timeout = self.cfg.start_timeout.0;
        let (served, mut process) = match launch::launch(&self.gw, &self.base, &self.cfg) {
            Launched::Stdio(t, p) => (
                tokio::time::timeout(timeout, client.serve(t)).await,
                Some(p),
            ),
            Launched::Http(t) => (tokio::time::timeout(timeout, client.serve(t)).await, None),
        };
        let fail = |process: &mut Option<Process>, why: String| {
            let mut why = why;
            if let Some(p) = process.as_mut() {
                p.token.cancel("the MCP upstream did not start");
                if let Some(mut ended) = p.ended.take() {
                    if let Ok(end) = ended.try_recv() {
                        why = format!("{why} (its process: {end})");
                    }
                }
                if let Ok(t) = p.stderr_tail.lock() {
                    why.push_str(&tail(&String::from_utf8_lossy(&t)));
                }
            }
            why
        };
        match served {
            Ok(Ok(client)) => {
                let conn = Arc::new(Conn {
                    client,
                    process,
                    started: Instant::now(),
                    dead: AtomicBool::new(false),
                    unanswered: std::sync::atomic::AtomicU32::new(0),
                });
                self.watch(&conn);
                Ok(conn)
            }
            Ok(Err(e)) => {
                // Give the process a moment to say why it ended.
                tokio::time::sleep(Duration::from_millis(20)).await;
                Err(fail(&mut process, format!("initialising it failed: {e}")))
            }
            Err(_) => Err(fail(
                &mut process,
                format!("it did not initialise within {}s", timeout.as_secs_f64()),
            )),
        }
    }

    /// Marks the connection dead as soon as its process ends, so calls in flight fail at
    /// once rather than at their timeout.
    fn watch(&self, conn: &Arc<Conn>) {
        let weak = Arc::downgrade(conn);
        let ended = conn.process.as_ref().map(|p| p.token.clone());
        tokio::spawn(async move {
            match ended {
                Some(token) => {
                    tokio::select! {
                        _ = token.cancelled() => {}
                        _ = wait_closed(&weak) => {}
                    }
                }
                None => wait_closed(&weak).await,
            }
            if let Some(c) = weak.upgrade() {
                c.dead.store(true, Ordering::SeqCst);
            }
        });
    }

    /// Starts the upstream if needed and makes sure it has been listed once.
    pub(crate) async fn ensure_listed(&self) -> Result<(), CallError> {
        let c = self.connection().await?;
        if !self.listed() {
            let tools = self.list(&c, self.cfg.start_timeout.0).await?;
            self.take_listing(tools);
        }
        Ok(())
    }

    /// Lists the upstream's tools now and takes the listing (after a `list_changed`).
    pub(crate) async fn refresh(&self) {
        let Some(c) = self.live() else { return };
        match self.list(&c, self.cfg.call_timeout.0).await {
            Ok(tools) => self.take_listing(tools),
            Err(e) => {
                tracing::warn!(upstream = %self.cfg.name, code = e.code(), "listing the upstream's tools failed: {e}")
            }
        }
    }

    /// Takes a listing: pins descriptions, and tells the downstream clients when what
    /// they see changed.
    fn take_listing(&self, tools: Vec<Tool>) {
        let changed = {
            let Ok(mut s) = self.state.lock() else { return };
            let before = serde_json::to_string(&s.tools).unwrap_or_default();
            let after = serde_json::to_string(&tools).unwrap_or_default();
            let first = !s.listed;
            s.tools = tools;
            s.listed = true;
            before != after && !first
        };
        if let Some(n) = self.notifier.upgrade() {
            n.observe(self);
            if changed {
                n.list_changed();
            }
        }
    }

    /// Passes a `list_changed` of this upstream on to the downstream sessions.
    pub(crate) fn tell(&self, what: super::Changed) {
        if let Some(n) = self.notifier.upgrade() {
            n.tell(what);
        }
    }

    /// Calls `tool` (the upstream's own name) with the upstream's timeout; `cancel` ends
    /// the wait (and tells the upstream).
    pub(crate) async fn call(
        &self,
        tool: &str,
        arguments: Option<rmcp::model::JsonObject>,
        cancel: &CancelToken,
    ) -> Result<CallToolResult, CallError> {
        let conn = self.connection().await?;
        let mut params = CallToolRequestParams::new(tool.to_string());
        params.arguments = arguments;
        let peer = conn.client.peer().clone();
        match self
            .bounded(&conn, cancel, peer.call_tool_once(params))
            .await?
        {
            CallToolResponse::Complete(r) => Ok(r),
            _ => Err(not_forwarded()),
        }
    }

    /// Reads the upstream's resource `uri` (its own URI), bounded like a call.
    pub(crate) async fn read_resource(
        &self,
        uri: &str,
        cancel: &CancelToken,
    ) -> Result<ReadResourceResult, CallError> {
        let conn = self.connection().await?;
        let params = ReadResourceRequestParams::new(uri.to_string());
        let peer = conn.client.peer().clone();
        match self
            .bounded(&conn, cancel, peer.read_resource_once(params))
            .await?
        {
            ReadResourceResponse::Complete(r) => Ok(r),
            _ => Err(not_forwarded()),
        }
    }

    /// Gets the upstream's prompt `name` (its own name) with `arguments`, bounded like a call.
    pub(crate) async fn get_prompt(
        &self,
        name: &str,
        arguments: Option<rmcp::model::JsonObject>,
        cancel: &CancelToken,
    ) -> Result<GetPromptResult, CallError> {
        let conn = self.connection().await?;
        let mut params = GetPromptRequestParams::new(name.to_string());
        params.arguments = arguments;
        let peer = conn.client.peer().clone();
        match self
            .bounded(&conn, cancel, peer.get_prompt_once(params))
            .await?
        {
            GetPromptResponse::Complete(r) => Ok(r),
            _ => Err(not_forwarded()),
        }
    }

    /// Subscribes to (or, with `on` false, unsubscribes from) the upstream's resource
    /// `uri` (its own URI), bounded like a call. An upstream that does not offer
    /// subscriptions is refused here (`SBX_E1917`).
    #[allow(deprecated)] // resources/subscribe is part of the revision spoken (2025-11-25)
    pub(crate) async fn subscription(
        &self,
        uri: &str,
        on: bool,
        cancel: &CancelToken,
    ) -> Result<(), CallError> {
        let conn = self.connection().await?;
        let offers = conn.client.peer_info().is_some_and(|i| {
            i.capabilities
                .resources
                .as_ref()
                .is_some_and(|r| r.subscribe == Some(true))
        });
        if !offers {
            return Err(CallError::NoSubscriptions);
        }
        let peer = conn.client.peer().clone();
        if on {
            let params = rmcp::model::SubscribeRequestParams::new(uri.to_string());
            self.bounded(&conn, cancel, peer.subscribe(params)).await
        } else {
            let params = rmcp::model::UnsubscribeRequestParams::new(uri.to_string());
            self.bounded(&conn, cancel, peer.unsubscribe(params)).await
        }
    }

    /// The upstream said its resource `uri` changed: tells the sessions subscribed to it.
    pub(crate) fn resource_updated(&self, uri: &str) {
        if let Some(n) = self.notifier.upgrade() {
            n.subscriptions.updated(self.name(), uri);
        }
    }

    /// After a restart, subscribes again to what sessions were subscribed to (the decision
    /// was made, and recorded, when they subscribed; the new process knows nothing of it),
    /// before the connection is used: an update the next call causes is not lost.
    async fn resubscribe(&self) {
        let Some(n) = self.notifier.upgrade() else {
            return;
        };
        let never = CancelToken::new();
        for u in n.subscriptions.uris(self.name()) {
            if let Err(e) = Box::pin(self.subscription(&u, true, &never)).await {
                tracing::warn!(upstream = %self.name(), code = e.code(), "subscribing again to `{u}` after a restart failed: {e}");
            }
        }
    }

    /// What the upstream offers besides tools (started if need be), each listing bounded
    /// by `call_timeout`; an upstream without the capability offers nothing.
    pub(crate) async fn listing(&self, what: Listing) -> Result<Listed, CallError> {
        let conn = self.connection().await?;
        let caps = conn.client.peer_info().map(|i| i.capabilities.clone());
        let offers = caps.is_some_and(|c| match what {
            Listing::Resources | Listing::Templates => c.resources.is_some(),
            Listing::Prompts => c.prompts.is_some(),
        });
        if !offers {
            if what == Listing::Prompts {
                if let Ok(mut s) = self.state.lock() {
                    s.prompts = Some(Vec::new());
                }
            }
            return Ok(Listed::Nothing);
        }
        let peer = conn.client.peer().clone();
        let never = CancelToken::new();
        let max = self.listing_bytes();
        // Bounded in size (`pages`), and as a whole like a call.
        Ok(match what {
            Listing::Resources => Listed::Resources(
                self.bounded(
                    &conn,
                    &never,
                    pages(max, |p| {
                        let peer = peer.clone();
                        async move {
                            let r = peer.list_resources(p).await?;
                            Ok((r.resources, r.next_cursor))
                        }
                    }),
                )
                .await??,
            ),
            Listing::Templates => Listed::Templates(
                self.bounded(
                    &conn,
                    &never,
                    pages(max, |p| {
                        let peer = peer.clone();
                        async move {
                            let r = peer.list_resource_templates(p).await?;
                            Ok((r.resource_templates, r.next_cursor))
                        }
                    }),
                )
                .await??,
            ),
            Listing::Prompts => {
                let prompts = self
                    .bounded(
                        &conn,
                        &never,
                        pages(max, |p| {
                            let peer = peer.clone();
                            async move {
                                let r = peer.list_prompts(p).await?;
                                Ok((r.prompts, r.next_cursor))
                            }
                        }),
                    )
                    .await??;
                if let Ok(mut s) = self.state.lock() {
                    s.prompts = Some(prompts.iter().map(|p| p.name.clone()).collect());
                }
                Listed::Prompts(prompts)
            }
        })
    }

    /// Waits for one request to the upstream: its answer, or `call_timeout`, the caller's
    /// cancellation, or the connection's end, whichever comes first. An answer resets the
    /// restart backoff.
    async fn bounded<T>(
        &self,
        conn: &Arc<Conn>,
        cancel: &CancelToken,
        request: impl std::future::Future<Output = Result<T, ServiceError>>,
    ) -> Result<T, CallError> {
        let timeout = self.cfg.call_timeout.0;
        let dead = wait_dead(conn);
        let got = tokio::select! {
            r = tokio::time::timeout(timeout, request) => match r {
                Ok(r) => r.map_err(service_error),
                Err(_) => Err(CallError::TimedOut {
            after: timeout,
            restarted: false,
        }),
            },
            why = cancel.cancelled() => {
                let _ = why;
                Err(CallError::Cancelled)
            }
            _ = dead => Err(CallError::Crashed { why: conn.end_reason() }),
        };
        match got {
            Ok(v) => {
                conn.unanswered.store(0, Ordering::SeqCst);
                if let Ok(mut s) = self.state.lock() {
                    s.failures = 0;
                }
                Ok(v)
            }
            // The proxy cut the connection (an answer over `max_message`): that is the
            // reason, whichever way the call saw the end.
            Err(CallError::Crashed { .. } | CallError::Failed { .. }) if conn.cut().is_some() => {
                conn.dead.store(true, Ordering::SeqCst);
                Err(CallError::Failed {
                    why: format!(
                        "the upstream {}: the proxy closed the connection, and starts it again on the next call",
                        conn.cut().unwrap_or_default()
                    ),
                })
            }
            Err(CallError::Crashed { why }) => {
                conn.dead.store(true, Ordering::SeqCst);
                Err(CallError::Crashed { why })
            }
            Err(CallError::TimedOut { after, .. }) => {
                let n = conn.unanswered.fetch_add(1, Ordering::SeqCst) + 1;
                let restarted = n >= HUNG_AFTER;
                if restarted {
                    tracing::warn!(upstream = %self.name(), code = "SBX_E1910", "the upstream answered none of the last {n} calls: stopped, started again on the next call");
                    conn.give_up("the MCP upstream stopped answering");
                }
                Err(CallError::TimedOut { after, restarted })
            }
            Err(e) => Err(e),
        }
    }

    /// Ends the connection and waits (at most `within`) until its process's operation
    /// has returned, so its record is written before the caller exits.
    pub async fn shutdown(&self, within: Duration) {
        let conn = self.state.lock().ok().and_then(|mut s| s.conn.take());
        let Some(c) = conn else { return };
        c.dead.store(true, Ordering::SeqCst);
        let Some(p) = &c.process else { return };
        let mut finished = p.finished.clone();
        p.token.cancel("the MCP proxy stopped");
        let _ = tokio::time::timeout(within, finished.wait_for(|f| *f)).await;
    }

    /// Ends the connection (its process tree with it).
    pub fn stop(&self) {
        if let Ok(mut s) = self.state.lock() {
            if let Some(c) = s.conn.take() {
                c.dead.store(true, Ordering::SeqCst);
                if let Some(p) = &c.process {
                    p.token.cancel("the MCP proxy stopped");
                }
            }
        }
    }
}

/// What `Upstream::listing` lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Listing {
    Resources,
    Templates,
    Prompts,
}

/// A listing's items.
pub(crate) enum Listed {
    Nothing,
    Resources(Vec<Resource>),
    Templates(Vec<ResourceTemplate>),
    Prompts(Vec<Prompt>),
}

fn not_forwarded() -> CallError {
    CallError::Failed {
        why: "the upstream answered with a task or an input request, which the proxy does not forward".into(),
    }
}

/// Most pages one listing may have.
pub const MAX_PAGES: usize = 100;
/// Most items one listing may have.
pub const MAX_ITEMS: usize = 10_000;
/// Most bytes one listing may hold, in `max_message`s.
pub const MAX_LISTING_MESSAGES: u64 = 4;

/// Every page of one listing, bounded: past [`MAX_PAGES`] pages, [`MAX_ITEMS`] items or
/// `max_bytes` bytes (items serialised), the listing fails (`SBX_E1912`) rather than
/// holding an endless listing in the proxy's memory. The outer error is the upstream's.
async fn pages<T, F, Fut>(
    max_bytes: u64,
    mut page: F,
) -> Result<Result<Vec<T>, CallError>, ServiceError>
where
    T: serde::Serialize,
    F: FnMut(Option<PaginatedRequestParams>) -> Fut,
    Fut: std::future::Future<Output = Result<(Vec<T>, Option<String>), ServiceError>>,
{
    let too_large = |what: String| CallError::Failed {
        why: format!("the upstream's listing is too large ({what}); it was not taken"),
    };
    let mut out = Vec::new();
    let mut bytes = 0u64;
    let mut cursor = None;
    for _ in 0..MAX_PAGES {
        let params = PaginatedRequestParams::default().with_cursor(cursor.take());
        let (items, next) = page(Some(params)).await?;
        for it in &items {
            let n = serde_json::to_vec(it).map(|v| v.len()).unwrap_or(0);
            bytes = bytes.saturating_add(u64::try_from(n).unwrap_or(u64::MAX));
        }
        out.extend(items);
        if out.len() > MAX_ITEMS {
            return Ok(Err(too_large(format!("more than {MAX_ITEMS} items"))));
        }
        if bytes > max_bytes {
            return Ok(Err(too_large(format!("more than {max_bytes} bytes"))));
        }
        match next {
            Some(c) => cursor = Some(c),
            None => return Ok(Ok(out)),
        }
    }
    Ok(Err(too_large(format!("more than {MAX_PAGES} pages"))))
}

impl Upstream {
    /// The most bytes one listing of this upstream may hold.
    fn listing_bytes(&self) -> u64 {
        self.cfg.max_message.0.saturating_mul(MAX_LISTING_MESSAGES)
    }

    /// The upstream's tools, every page, bounded (`pages`) and within `timeout` (a hung
    /// upstream must not hold up a start).
    async fn list(&self, c: &Conn, timeout: Duration) -> Result<Vec<Tool>, CallError> {
        let peer = c.client.peer().clone();
        let all = pages(self.listing_bytes(), |p| {
            let peer = peer.clone();
            async move {
                let r = peer.list_tools(p).await?;
                Ok((r.tools, r.next_cursor))
            }
        });
        match tokio::time::timeout(timeout, all).await {
            Ok(r) => r.map_err(service_error)?,
            Err(_) => Err(CallError::TimedOut {
                after: timeout,
                restarted: false,
            }),
        }
    }
}

async fn wait_closed(weak: &Weak<Conn>) {
    loop {
        match weak.upgrade() {
            Some(c) if c.alive() => {}
            _ => return,
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn wait_dead(conn: &Arc<Conn>) {
    let weak = Arc::downgrade(conn);
    wait_closed(&weak).await
}

/// The end of an upstream's stderr, for an error message.
fn tail(stderr: &str) -> String {
    let t = stderr.trim();
    if t.is_empty() {
        return String::new();
    }
    let start = t.char_indices().rev().nth(300).map(|(i, _)| i).unwrap_or(0);
    format!("; its stderr ends: {}", &t[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_immediate_once_then_doubles_to_a_ceiling() {
        assert_eq!(backoff(1), Duration::ZERO);
        assert_eq!(backoff(2), FIRST_BACKOFF);
        assert_eq!(backoff(3), FIRST_BACKOFF * 2);
        assert_eq!(backoff(40), MAX_BACKOFF);
    }
}
