//! One module per command; `dispatch` maps errors to exit codes in one place.

mod audit;
mod doctor;
mod policy;
mod recover;
mod rotate_key;
mod run;
mod state;
mod verify;

use sandboxio_core::ErrorCode;

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
        Command::Init { path } => init(&path),
        Command::Doctor { json } => doctor::doctor(json).await,
        Command::Kill { common, reason } => state::kill(&common, &reason),
        Command::Resume { common } => state::resume(&common),
        Command::Approvals { common, cmd } => state::approvals(&common, cmd),
        Command::Costs {
            common,
            since,
            until,
            labels,
        } => state::costs(&common, &since, until.as_deref(), &labels),
        Command::Budget { common, tenant } => state::budget(&common, &tenant),
        Command::State { common, cmd } => match cmd {
            crate::args::StateCmd::Recover { from_trail } => {
                recover::recover(&common, from_trail).await
            }
        },
        Command::Policy { cmd } => policy::policy(cmd),
        Command::Audit { cmd } => audit::audit(cmd).await,
    };
    match res {
        Ok(code) => code,
        Err(e) => report(&e),
    }
}

/// Prints an error with its stable code and picks the exit status.
pub fn report(e: &anyhow::Error) -> i32 {
    let code = error_code(e);
    // Error messages can quote user input (paths, argv): redacted like every other output.
    let message = crate::telemetry::redact(&format!("{e:#}"));
    match code {
        Some(c) => eprintln!("error[{c}]: {message}"),
        None => eprintln!("error: {message}"),
    }
    match code {
        Some(c)
            if ["SBX_E10", "SBX_E11", "SBX_E12", "SBX_E13"]
                .iter()
                .any(|p| c.starts_with(p)) =>
        {
            exit::USAGE
        }
        Some(c) if c.starts_with("SBX_E14") => exit::INTERNAL,
        _ => exit::FAILURE,
    }
}

fn error_code(e: &anyhow::Error) -> Option<&'static str> {
    for cause in e.chain() {
        if let Some(x) = cause.downcast_ref::<sandboxio_config::ConfigError>() {
            return Some(x.code());
        }
        if let Some(x) = cause.downcast_ref::<sandboxio_core::CoreError>() {
            return Some(x.code());
        }
        if let Some(x) = cause.downcast_ref::<sandboxio_gateway::GatewayError>() {
            return Some(x.code());
        }
        if let Some(x) = cause.downcast_ref::<sandboxio_sandbox::SandboxError>() {
            return Some(x.code());
        }
        if let Some(x) = cause.downcast_ref::<sandboxio_policy::PolicyError>() {
            return Some(x.code());
        }
        if let Some(x) = cause.downcast_ref::<sandboxio_audit::AuditError>() {
            return Some(x.code());
        }
        if let Some(x) = cause.downcast_ref::<sandboxio_budget::BudgetError>() {
            return Some(x.code());
        }
    }
    None
}

fn init(path: &std::path::Path) -> anyhow::Result<i32> {
    sandboxio_config::write_default(path)?;
    println!("wrote {}", path.display());
    Ok(exit::OK)
}
