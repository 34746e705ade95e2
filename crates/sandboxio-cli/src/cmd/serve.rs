//! `sandboxio serve`: the HTTP API over the same chain as `run`.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use sandboxio_core::{ByteSize, HumanDuration};
use sandboxio_server::{
    app, AppState, Backend, Listen, Listener, ServeOptions, Telemetry, TlsFiles,
};

use crate::args::{Common, ServeArgs};
use crate::exit;
use crate::out::outln;
use crate::setup;

fn duration(v: &Option<String>) -> Result<Option<Duration>> {
    Ok(v.as_deref()
        .map(str::parse::<HumanDuration>)
        .transpose()?
        .map(|d| d.as_duration()))
}

fn size(v: &Option<String>) -> Result<Option<usize>> {
    Ok(v.as_deref()
        .map(str::parse::<ByteSize>)
        .transpose()?
        .map(|b| usize::try_from(b.bytes()).unwrap_or(usize::MAX)))
}

pub async fn serve(common: Common, args: ServeArgs) -> Result<i32> {
    // The handlers first, before anything is written (recovery writes to the trail): a
    // SIGTERM from here on is a graceful stop that closes the trail once serving starts,
    // never the default death (a supervisor may stop us as soon as we start).
    let stop = shutdown_signal();
    let loaded = setup::load(&common)?;
    // Asks wait for a decision in the store, where this API and the CLI write it. The
    // chain's metric observations also feed `/metrics` and the dashboard.
    let telemetry = Arc::new(Telemetry::new());
    let runtime = loaded.runtime_with(
        &common,
        duration(&args.approval_timeout)?,
        sandboxio_gateway::Approver::Store {
            poll: Duration::from_millis(200),
        },
        Some(telemetry.clone()),
    )?;
    runtime.recover(loaded.config.limits.timeout.0).await?;
    // Work that dead replicas (or dead local processes) leave is recovered while serving.
    let sweeper = runtime.start_sweeper();
    let gw = runtime.gateway().clone();
    let listen = match &args.listen {
        Some(a) => Listen::Tcp(
            a.parse()
                .with_context(|| format!("`{a}` is not an address such as 127.0.0.1:8700"))?,
        ),
        None => Listen::Unix(
            args.socket
                .clone()
                .unwrap_or_else(|| loaded.state_dir.join("sandboxio.sock")),
        ),
    };
    // Workspaces are read by sandboxed programs under an unprivileged id: they live in a
    // directory of their own (0711), not in the state directory, named after the state
    // directory so that a restart restores them; their manifests stay in the state dir.
    let base = loaded
        .config
        .sandbox
        .work_root
        .clone()
        .unwrap_or_else(std::env::temp_dir);
    let root = sandboxio_server::options::workspace_root_for(&base, &loaded.state_dir);
    let mut opts = ServeOptions::new(listen, root.clone());
    opts.sessions_dir = Some(loaded.state_dir.join("sessions"));
    // Environment values in the manifests are sealed under the stored secrets' key.
    opts.secrets_key = match runtime.secrets_key() {
        Ok(k) => Some(k),
        Err(e) => {
            tracing::warn!("sandboxes with `env` will be refused: {e}");
            None
        }
    };
    opts.audit_file = Some(loaded.audit_file());
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        opts.tls = Some(TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
        });
    }
    // `[server]` quotas, then the flags over them, then each tenant's own.
    let server = &loaded.config.server;
    let as_usize = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
    if let Some(n) = server.max_sandboxes {
        opts.max_sandboxes_per_tenant = n as usize;
    }
    if let Some(n) = server.max_background {
        opts.max_background_per_tenant = n as usize;
    }
    if let Some(b) = server.json_limit {
        opts.json_limit = as_usize(b.0);
    }
    if let Some(b) = server.upload_limit {
        opts.upload_limit = as_usize(b.0);
    }
    if let Some(n) = server.max_starting {
        opts.max_starting = as_usize(u64::from(n));
    }
    if let Some(d) = &server.start_hold {
        opts.start_hold = d.as_duration();
    }
    if let Some(n) = args.max_starting {
        opts.max_starting = n;
    }
    if let Some(n) = args.max_concurrent {
        opts.max_concurrent = n.max(1);
    }
    if let Some(n) = args.max_connections {
        opts.max_connections = n.max(1);
    }
    if let Some(n) = args.max_sandboxes {
        opts.max_sandboxes_per_tenant = n;
    }
    if let Some(d) = duration(&args.request_timeout)? {
        opts.request_timeout = d;
    }
    if let Some(d) = duration(&args.header_timeout)? {
        if d.is_zero() {
            anyhow::bail!("--header-timeout must be more than 0");
        }
        opts.header_timeout = d;
    }
    if let Some(d) = duration(&args.shutdown_grace)? {
        opts.shutdown_grace = d;
    }
    if let Some(n) = size(&args.json_limit)? {
        opts.json_limit = n;
    }
    if let Some(n) = size(&args.upload_limit)? {
        opts.upload_limit = n;
    }
    for (tenant, q) in &server.tenants {
        let d = opts.quota("");
        opts.tenant_quotas.insert(
            tenant.clone(),
            sandboxio_server::options::Quota {
                max_sandboxes: q.max_sandboxes.map_or(d.max_sandboxes, |n| n as usize),
                json_limit: q.json_limit.map_or(d.json_limit, |b| as_usize(b.0)),
                upload_limit: q.upload_limit.map_or(d.upload_limit, |b| as_usize(b.0)),
                max_background: q.max_background.map_or(d.max_background, |n| n as usize),
            },
        );
    }
    let mut backend = Backend::new(gw);
    if let Some(w) = &server.approval_webhook {
        // The secret comes from the environment only, and is never printed.
        let secret = std::env::var(&w.secret_env).unwrap_or_default();
        if secret.is_empty() {
            return Err(sandboxio_server::ServerError::Webhook {
                why: format!(
                    "the signing secret's environment variable `{}` is unset or empty",
                    w.secret_env
                ),
            }
            .into());
        }
        backend = backend.with_webhook(sandboxio_server::webhook::Webhook::new(
            &w.url,
            w.ca_file.as_deref(),
            secret.into_bytes(),
            w.timeout.as_duration(),
            w.attempts,
        )?);
    }
    let backend = Arc::new(backend);
    let state = AppState::new(backend, opts).with_telemetry(telemetry);
    // MCP over streamable HTTP at /mcp, behind the same credentials and layers.
    let mcp = sandboxio_mcp::http::routes(
        sandboxio_mcp::McpOptions::from_runtime(&runtime)?,
        state.clone(),
    );
    let mut extra = vec![
        sandboxio_server::dashboard::routes(),
        sandboxio_server::metrics::routes(),
        mcp,
    ];
    // The E2B-compatible API on the same listener, when configured (docs/E2B.md).
    if loaded.config.e2b.enabled {
        extra.push(sandboxio_server::e2b::routes(
            loaded.config.e2b.clone(),
            Some(loaded.state_dir.join("e2b")),
        )?);
    }
    let router = app::router(state.clone(), extra);
    let listener = Listener::bind(&state.opts).await?;
    let scheme = if listener.is_tls() { "https" } else { "http" };
    // One line on stdout, for scripts and tests that start the server.
    outln!("sandboxio serving {scheme} on {}", listener.address())?;
    sandboxio_server::serve(listener, router, state, stop).await?;
    sweeper.abort();
    // Sandboxes left open stay for the next start; an empty root goes.
    let _ = std::fs::remove_dir(&root);
    Ok(exit::OK)
}

/// SIGTERM or SIGINT. The handlers are installed when this is called (not when the
/// future is first polled), so a signal from then on is caught.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let handlers = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    async move {
        match handlers {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            _ => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
}
