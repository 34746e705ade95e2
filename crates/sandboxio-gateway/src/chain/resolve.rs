//! Resolving a request: the one place where an operation becomes exactly what will run.
//!
//! Defaults are filled in (tier, limits) before policy sees the request and before it is
//! fingerprinted, so a policy condition never reads a default where the request had a
//! value, and an approval or an idempotency key covers the request as it will run. The
//! `ExecRequest` the sandbox receives is the operation's own, derived here and nowhere
//! else.

use sandboxio_core::fingerprint::sha256_hex;
use sandboxio_core::{ErrorCode, ExecRequest, Layer, Operation, OperationArgs, OperationKind};

use super::mounts;
use super::stop::Stop;
use crate::config::GatewayConfig;

/// A limit above its ceiling.
pub(crate) const LIMIT_ABOVE_CEILING: &str = "SBX_E1517";
/// A sandbox request on an operation that runs nothing.
pub(crate) const EXEC_ON_NON_EXEC: &str = "SBX_E1518";
/// A mount whose host path cannot be resolved or reaches the gateway's own files.
pub(crate) const MOUNT_REFUSED: &str = "SBX_E1520";

/// Fills in what the caller left to the configuration and derives the sandbox request.
/// `content` is the bytes of a `file_write`. Errors are denials at the admit layer.
pub(crate) fn resolve(
    cfg: &GatewayConfig,
    op: &mut Operation,
    content: Option<&[u8]>,
) -> Result<(), Stop> {
    match op.kind() {
        OperationKind::Exec | OperationKind::RunCode => {
            let tier = *op.tier.get_or_insert(cfg.default_tier);
            // A tier this build cannot run is bad input, refused before the policy (whose
            // answer would name a rule that has nothing to do with it).
            if let Err(e) = sandboxio_sandbox::TierRequest::for_host(tier) {
                return Err(Stop::deny(Layer::Admit, e.to_string()).code(e.code()));
            }
            let mut req = op
                .exec
                .take()
                .unwrap_or_else(|| ExecRequest::new(Vec::<String>::new()));
            match &op.args {
                OperationArgs::Exec { argv } => req.argv = argv.clone(),
                OperationArgs::RunCode { language, code } => {
                    let file = language.file_name();
                    req.files
                        .insert(file.to_string(), code.clone().into_bytes());
                    req.argv = language
                        .interpreter()
                        .iter()
                        .map(|s| s.to_string())
                        .chain([file.to_string()])
                        .collect();
                }
                _ => {}
            }
            mounts::resolve(cfg, &mut req)?;
            // A caller's pins are never believed; the gateway pins what needs binding.
            req.pinned.clear();
            inherit_env(&mut req);
            req.limits = req
                .limits
                .resolve(&cfg.limits_default, &cfg.limits_max)
                .map_err(|e| {
                    Stop::deny(Layer::Admit, format!("limit refused: {e}"))
                        .code(LIMIT_ABOVE_CEILING)
                })?;
            op.exec = Some(req);
        }
        OperationKind::Browse => resolve_browse(cfg, op)?,
        _ => {
            if op.exec.is_some() {
                return Err(Stop::deny(
                    Layer::Admit,
                    format!(
                        "a `{}` operation runs no program, so it takes no sandbox request",
                        op.kind()
                    ),
                )
                .code(EXEC_ON_NON_EXEC));
            }
        }
    }
    if let OperationArgs::FileWrite {
        size,
        content_sha256,
        ..
    } = &mut op.args
    {
        let bytes = content.unwrap_or_default();
        *size = bytes.len() as u64;
        *content_sha256 = Some(sha256_hex(bytes));
    }
    Ok(())
}

/// The host variables the request inherits (`env_allowlist`: `PATH`, `LANG`, `TZ`, ...)
/// become part of its `env`, with the values this process has now, which are the ones the
/// sandbox would take from it: the fingerprint, an approval and an idempotency key then
/// bind them like any other variable (`PATH` decides which program `argv[0]` is). A
/// variable the request sets itself keeps its value; one the host lacks stays unset.
fn inherit_env(req: &mut ExecRequest) {
    for name in &req.env_allowlist {
        if req.env.contains_key(name) {
            continue;
        }
        if let Some(v) = std::env::var_os(name).and_then(|v| v.into_string().ok()) {
            if !v.contains('\0') {
                req.env.insert(name.clone(), v);
            }
        }
    }
}

/// A browse becomes the sandbox request of a disposable headless browser (`crate::browse`):
/// namespace tier only, the caller's network (never `none`) and limits, browse defaults
/// where those are unset, then `[limits]` and `[limits.max]` like every request.
fn resolve_browse(cfg: &GatewayConfig, op: &mut Operation) -> Result<(), Stop> {
    use crate::browse::plan;
    let refuse = |(code, why): (&'static str, String)| Stop::deny(Layer::Admit, why).code(code);
    let OperationArgs::Browse { url, screenshot } = &op.args else {
        return Ok(());
    };
    sandboxio_core::check_browse_url(url).map_err(|why| {
        Stop::deny(Layer::Admit, format!("invalid operation: {why}")).code("SBX_E1005")
    })?;
    let tier = *op.tier.get_or_insert(cfg.default_tier);
    plan::check_tier(tier).map_err(refuse)?;
    let asked = op
        .exec
        .take()
        .unwrap_or_else(|| ExecRequest::new(Vec::<String>::new()));
    plan::check_caller_request(&asked).map_err(refuse)?;
    plan::check_network(&asked.network).map_err(refuse)?;
    let limits = plan::browse_limits(&asked.limits)
        .resolve(&cfg.limits_default, &cfg.limits_max)
        .map_err(|e| {
            Stop::deny(Layer::Admit, format!("limit refused: {e}")).code(LIMIT_ABOVE_CEILING)
        })?;
    let chromium = plan::find_chromium(|p| p.is_file()).map_err(refuse)?;
    op.exec = Some(plan::request(
        chromium,
        url,
        *screenshot,
        asked.network,
        limits,
    ));
    Ok(())
}
