//! One module per command; `dispatch` maps errors to exit codes in one place.

mod anchor;
mod audit;
mod browse;
mod doctor;
mod keys;
mod mcp;
mod policy;
mod recover;
mod rotate_key;
mod run;
mod secrets;
mod serve;
mod state;
mod status;
mod stdin;
mod verify;
mod waiting;

use sandboxio_core::{ErrorClass, ErrorCode};

use crate::out::{errln, outln};

use crate::args::{Cli, Command};
use crate::exit;

pub async fn dispatch(cli: Cli) -> i32 {
    let res = match cli.command {
        Command::Run { common, opts, argv } => run::run(common, opts, run::What::Argv(argv)).await,
        Command::RunCode {
            common,
            opts,
            lang,
            file,
        } => run::run(common, opts, run::What::Code { lang, file }).await,
        Command::Browse { common, opts, url } => browse::browse(common, opts, url).await,
        Command::Init { path } => init(&path),
        Command::Trust { path } => trust(&path),
        Command::Doctor { json } => doctor::doctor(json).await,
        Command::Kill { common, reason } => state::kill(&common, &reason).await,
        Command::Resume { common } => state::resume(&common).await,
        Command::Approvals { common, cmd } => state::approvals(&common, cmd).await,
        Command::Costs {
            common,
            since,
            until,
            labels,
        } => state::costs(&common, &since, until.as_deref(), &labels),
        Command::Budget {
            common,
            reopen: Some(scope),
            ..
        } => state::reopen(&common, &scope).await,
        Command::Budget { common, tenant, .. } => state::budget(&common, &tenant),
        Command::State { common, cmd } => match cmd {
            crate::args::StateCmd::Recover { from_trail } => {
                recover::recover(&common, from_trail).await
            }
        },
        Command::Status { common, tenant } => status::status(&common, &tenant),
        Command::Policy { cmd } => policy::policy(cmd),
        Command::Audit { cmd } => audit::audit(cmd).await,
        Command::Serve { common, opts } => serve::serve(common, opts).await,
        Command::Mcp { common, opts, cmd } => mcp::mcp(common, opts, cmd).await,
        Command::Keys { common, cmd } => keys::keys(&common, cmd).await,
        Command::Secrets { common, cmd } => secrets::secrets(&common, cmd).await,
    };
    match res {
        Ok(code) => code,
        Err(e) => report(&e),
    }
}

/// Prints an error with its stable code and picks the exit status from its class.
pub fn report(e: &anyhow::Error) -> i32 {
    let (code, class) = classify(e);
    // Error messages can quote user input (paths, argv): redacted like every other output.
    let message = crate::telemetry::redact(&format!("{e:#}"));
    errln!("error[{code}]: {message}");
    let status = exit::for_class(class);
    if crate::out::json() {
        // With `--json` the answer on stdout says the CLI chose the status, so a program
        // that exits with the same number is never mistaken for it.
        let v = serde_json::json!({
            "error": { "code": code, "class": class, "message": message },
            "exit_status": status,
        });
        if let Ok(line) = crate::out::compact(&v) {
            let _ = outln!("{line}");
        }
    }
    status
}

/// The code and class of the first typed error in the chain. An error no crate typed is
/// a bug: it still gets a code (`SBX_E1799`) and counts as internal.
pub fn classify(e: &anyhow::Error) -> (&'static str, ErrorClass) {
    fn typed<T: ErrorCode + std::error::Error + 'static>(
        cause: &(dyn std::error::Error + 'static),
    ) -> Option<(&'static str, ErrorClass)> {
        cause.downcast_ref::<T>().map(|x| (x.code(), x.class()))
    }
    for cause in e.chain() {
        let found = typed::<crate::error::CliError>(cause)
            .or_else(|| typed::<sandboxio_config::ConfigError>(cause))
            .or_else(|| typed::<sandboxio_core::CoreError>(cause))
            .or_else(|| typed::<sandboxio_gateway::GatewayError>(cause))
            .or_else(|| typed::<sandboxio_gateway::RuntimeError>(cause))
            .or_else(|| typed::<sandboxio_gateway::egress::secrets::SecretError>(cause))
            .or_else(|| typed::<sandboxio_gateway::layers::sandbox::SandboxError>(cause))
            .or_else(|| typed::<sandboxio_gateway::layers::policy::PolicyError>(cause))
            .or_else(|| typed::<sandboxio_gateway::layers::audit::AuditError>(cause))
            .or_else(|| typed::<sandboxio_gateway::layers::budget::BudgetError>(cause))
            .or_else(|| typed::<sandboxio_server::ServerError>(cause))
            .or_else(|| typed::<sandboxio_mcp::McpError>(cause));
        if let Some(f) = found {
            return f;
        }
    }
    let unexpected = crate::error::CliError::Unexpected {
        message: String::new(),
    };
    (unexpected.code(), unexpected.class())
}

fn init(path: &std::path::Path) -> anyhow::Result<i32> {
    sandboxio_config::write_default(path)?;
    // Written by the operator's own command: trusted as written.
    let (_, bytes) = sandboxio_config::Config::load_bytes(path)?;
    crate::trust::trust(&crate::paths::absolute(path)?, &bytes)?;
    outln!("wrote {}", path.display())?;
    Ok(exit::OK)
}

fn trust(path: &std::path::Path) -> anyhow::Result<i32> {
    // Only a file that parses is trusted (what it says is checked again at every use).
    let (_, bytes) = sandboxio_config::Config::load_bytes(path)?;
    let abs = crate::paths::absolute(path)?;
    crate::trust::trust(&abs, &bytes)?;
    outln!(
        "trusted {} as it is now; a change to it needs `sandboxio trust` again",
        abs.display()
    )?;
    Ok(exit::OK)
}
