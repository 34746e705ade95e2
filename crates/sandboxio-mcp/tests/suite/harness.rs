//! A runtime in a temporary state directory, the MCP server on one end of a duplex pipe
//! and an `rmcp` client (with elicitation and progress handlers) on the other.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ElicitRequestParams,
    ElicitResult, ElicitationAction, Implementation, ProgressNotificationParam, ProtocolVersion,
    ResourceUpdatedNotificationParam,
};
use rmcp::service::{NotificationContext, RequestContext, RunningService};
use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceExt};
use sandboxio_core::Principal;
use sandboxio_gateway::{Runtime, RuntimeOptions};
use sandboxio_mcp::{Front, McpOptions, SandboxioMcp};

/// Commands and code run in the process tier (fast, no user namespaces needed); `curl` is
/// denied; `touch` asks a person; files inside the workspace are allowed.
pub const POLICY: &str = r#"[settings]
name = "mcp-tests"
description = "process tier; curl denied; touch needs approval"

[[rule]]
id = "run-in-process"
effect = "allow"
kind = ["exec", "run_code"]
tier = "process"
network = "none"
reason = "tests run commands in the process tier"

[[rule]]
id = "no-curl"
effect = "deny"
kind = "exec"
argv_prefix = ["curl"]
reason = "downloads are not allowed"

[[rule]]
id = "touch-needs-approval"
effect = "ask"
kind = "exec"
argv_prefix = ["touch"]
reason = "creating files from the shell needs a person's approval"

[[rule]]
id = "files-in-workspace"
effect = "allow"
kind = ["file_read", "file_write", "file_delete"]
in_workspace = true
reason = "files inside the workspace are allowed"
"#;

/// The sandbox re-executes a helper binary; a test binary is not one, so point
/// `SBX_HELPER` at the workspace's `sandboxio-helper`, built here so that it is never
/// older than the sandbox crate this test links (a stale helper reads another plan format).
fn helper() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let exe = std::env::current_exe().unwrap();
        let dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
        let helper = dir.join("sandboxio-helper");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.toml");
        let ok = std::process::Command::new(cargo)
            .args([
                "build",
                "-q",
                "-p",
                "sandboxio-sandbox",
                "--bin",
                "sandboxio-helper",
            ])
            .arg("--manifest-path")
            .arg(manifest)
            .status()
            .unwrap();
        assert!(ok.success(), "building sandboxio-helper failed");
        assert!(helper.exists(), "no helper at {}", helper.display());
        std::env::set_var("SBX_HELPER", &helper);
    });
}

pub struct Env {
    pub dir: tempfile::TempDir,
    pub runtime: Runtime,
}

impl Env {
    pub fn new(approval_timeout: Duration) -> Env {
        Env::with(approval_timeout, "", "")
    }

    /// A runtime whose configuration and policy have these additions.
    pub fn with(approval_timeout: Duration, extra_config: &str, extra_policy: &str) -> Env {
        helper();
        let dir = tempfile::Builder::new()
            .prefix("sbx-mcp-")
            .tempdir()
            .unwrap();
        std::fs::write(
            dir.path().join("policy.toml"),
            format!("{POLICY}\n{extra_policy}"),
        )
        .unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        let config = sandboxio_config::Config::parse(
            &format!(
                "[sandbox]\ntier = \"process\"\nwork_root = \"{}\"\n{extra_config}",
                work.display()
            ),
            "test",
        )
        .unwrap();
        let mut opts = RuntimeOptions::new(config, dir.path().join("state"));
        opts.policy_files = vec![dir.path().join("policy.toml")];
        opts.approval_timeout = Some(approval_timeout);
        opts.approver = sandboxio_gateway::Approver::Store {
            poll: Duration::from_millis(50),
        };
        let runtime = Runtime::open(opts).unwrap();
        Env { dir, runtime }
    }

    pub fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    pub fn trail(&self) -> PathBuf {
        self.dir.path().join("state").join("audit.jsonl")
    }

    /// Every audit event of the trail, as JSON.
    pub fn events(&self) -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(self.trail()).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Starts the server on one end of a pipe and connects `client` to the other.
    pub async fn connect(&self, client: TestClient) -> RunningService<RoleClient, TestClient> {
        let opts = McpOptions::from_runtime(&self.runtime).unwrap();
        self.connect_with(opts, client).await
    }

    /// Like `connect`, with options the test keeps (their proxy, to look at its state).
    pub async fn connect_with(
        &self,
        opts: McpOptions,
        client: TestClient,
    ) -> RunningService<RoleClient, TestClient> {
        let (a, b) = tokio::io::duplex(1 << 20);
        let handler = SandboxioMcp::new(opts, Front::Local(Principal::tenant("acme")));
        tokio::spawn(async move {
            if let Ok(running) = handler.serve(a).await {
                let _ = running.waiting().await;
            }
        });
        client.serve(b).await.unwrap()
    }
}

/// What the client's user answers to an elicitation.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum User {
    /// The client does not offer elicitation.
    Absent,
    Approves,
    Declines,
}

#[derive(Clone)]
pub struct TestClient {
    pub user: User,
    pub progress: Arc<Mutex<Vec<ProgressNotificationParam>>>,
    pub elicitations: Arc<Mutex<Vec<String>>>,
    pub list_changed: Arc<std::sync::atomic::AtomicUsize>,
    /// The URIs of `notifications/resources/updated` received, in order.
    pub updated: Arc<Mutex<Vec<String>>>,
}

impl TestClient {
    pub fn new(user: User) -> TestClient {
        TestClient {
            user,
            progress: Arc::default(),
            elicitations: Arc::default(),
            list_changed: Arc::default(),
            updated: Arc::default(),
        }
    }
}

impl ClientHandler for TestClient {
    fn get_info(&self) -> ClientConfig {
        let caps = if self.user == User::Absent {
            ClientCapabilities::default()
        } else {
            ClientCapabilities::builder().enable_elicitation().build()
        };
        ClientConfig::new(caps, Implementation::new("sandboxio-tests", "1"))
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _cx: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        if let ElicitRequestParams::FormElicitationParams { message, .. } = &request {
            self.elicitations.lock().unwrap().push(message.clone());
        }
        Ok(match self.user {
            User::Approves => ElicitResult::new(ElicitationAction::Accept)
                .with_content(serde_json::json!({"approve": true, "reason": "looks fine"})),
            _ => ElicitResult::new(ElicitationAction::Decline),
        })
    }

    async fn on_tool_list_changed(&self, _cx: NotificationContext<RoleClient>) {
        self.list_changed
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _cx: NotificationContext<RoleClient>,
    ) {
        self.updated.lock().unwrap().push(params.uri);
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _cx: NotificationContext<RoleClient>,
    ) {
        self.progress.lock().unwrap().push(params);
    }
}

pub fn call(name: &str, args: serde_json::Value) -> CallToolRequestParams {
    let serde_json::Value::Object(map) = args else {
        panic!("arguments must be an object")
    };
    CallToolRequestParams::new(name.to_string()).with_arguments(map)
}

pub fn structured(r: &CallToolResult) -> serde_json::Value {
    r.structured_content.clone().unwrap_or_default()
}

/// `sandboxio serve`'s router (the `/v1` API and `/mcp`) for this runtime, in process on a
/// loopback port.
pub struct HttpServer {
    /// `http://127.0.0.1:PORT`
    pub base: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl HttpServer {
    pub fn mcp(&self) -> String {
        format!("{}/mcp", self.base)
    }
}

impl Env {
    /// Serves the HTTP API and `/mcp`; `tune` adjusts the server's options.
    pub async fn serve_http(
        &self,
        tune: impl FnOnce(&mut sandboxio_server::ServeOptions),
    ) -> HttpServer {
        self.serve_http_with(tune, |_| {}).await
    }

    /// As `serve_http`, with `tune_mcp` adjusting the MCP options.
    pub async fn serve_http_with(
        &self,
        tune: impl FnOnce(&mut sandboxio_server::ServeOptions),
        tune_mcp: impl FnOnce(&mut McpOptions),
    ) -> HttpServer {
        let root = self.dir.path().join("sandboxes");
        let mut opts = sandboxio_server::ServeOptions::new(
            sandboxio_server::options::Listen::Tcp("127.0.0.1:0".parse().unwrap()),
            root,
        );
        tune(&mut opts);
        let backend = Arc::new(sandboxio_server::backend::Backend::new(
            self.runtime.gateway().clone(),
        ));
        let state = sandboxio_server::AppState::new(backend, opts);
        let mut mcp_opts = McpOptions::from_runtime(&self.runtime).unwrap();
        tune_mcp(&mut mcp_opts);
        let mcp = sandboxio_mcp::http::routes(mcp_opts, state.clone());
        let router = sandboxio_server::app::router(state.clone(), vec![mcp]);
        let listener = sandboxio_server::serve::Listener::bind(&state.opts)
            .await
            .unwrap();
        let base = format!("http://{}", listener.address());
        let task = tokio::spawn(async move {
            let _ = sandboxio_server::serve(listener, router, state, std::future::pending()).await;
        });
        HttpServer { base, task }
    }

    /// A new API key of `tenant` with `scopes` (the token).
    pub fn key(&self, tenant: &str, scopes: &[sandboxio_gateway::credential::Scope]) -> String {
        let m = sandboxio_gateway::credential::mint_api_key(
            tenant,
            sandboxio_gateway::credential::Scopes::new(scopes.iter().copied()),
            "test",
        );
        self.runtime
            .store()
            .create_credential(&m.credential)
            .unwrap();
        m.token
    }

    /// An `rmcp` client of `/mcp` with the API key `token`.
    pub async fn connect_http(
        &self,
        server: &HttpServer,
        token: &str,
        client: TestClient,
    ) -> RunningService<RoleClient, TestClient> {
        use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
        use rmcp::transport::StreamableHttpClientTransport;
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(server.mcp()).auth_header(token),
        );
        client.serve(transport).await.unwrap()
    }
}

/// The JSON-RPC error code and the `data.code` of a refused request.
pub fn refused(e: rmcp::service::ServiceError) -> (i32, String) {
    match e {
        rmcp::service::ServiceError::McpError(d) => {
            let code = d
                .data
                .as_ref()
                .and_then(|v| v.get("code"))
                .and_then(|c| c.as_str())
                .unwrap_or_default()
                .to_string();
            (d.code.0, code)
        }
        other => panic!("not a refusal: {other:?}"),
    }
}
