//! The `sandboxio` binary.
//!
//! Exit status: a sandboxed command's own status (128 + N when killed by signal N), or one
//! of the codes in [`exit`], documented in the README.

mod args;
mod cmd;
mod error;
mod exit;
mod files;
mod hostenv;
mod out;
mod output;
mod paths;
mod setup;
mod telemetry;
mod terminal;
mod trust;

use clap::Parser as _;

fn main() {
    // The sandbox helper: re-executed by ourselves, single-threaded, before any runtime.
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(
            sandboxio_gateway::layers::sandbox::helper::HELPER_ARG,
        ))
    {
        sandboxio_gateway::layers::sandbox::helper::main();
    }
    // `--json` anywhere before `--` (after it, the words are the sandboxed command's).
    out::set_json(
        std::env::args_os()
            .skip(1)
            .take_while(|a| a != "--")
            .any(|a| a == "--json"),
    );
    let cli = match args::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => std::process::exit(command_line_error(&e)),
    };
    // Logs and OpenTelemetry export: installed here, by the binary only, before the runtime.
    let telemetry = telemetry::Telemetry::init(debug_requested(&cli), log_secrets(&cli));
    let code = match runtime_for(&cli.command) {
        Ok(rt) => rt.block_on(cmd::dispatch(cli)),
        Err(source) => cmd::report(&error::CliError::Runtime { source }.into()),
    };
    // Spans and metrics are buffered on the exporters' threads: flush them before exiting.
    telemetry.shutdown();
    std::process::exit(code);
}

/// The async runtime a command needs. A run is one operation: its tasks (the output
/// printer, the signal watcher) interleave on the one thread that waits for it, and store
/// calls and the audit trail already run on threads of their own; worker threads would
/// only add start-up and hand-offs. Serving many clients (`serve`, `mcp`) takes workers.
fn runtime_for(cmd: &args::Command) -> std::io::Result<tokio::runtime::Runtime> {
    use args::Command;
    match cmd {
        Command::Run { .. } | Command::RunCode { .. } => {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
        }
        _ => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build(),
    }
}

/// A command line the parser refused: usage error with a code. `--help` and `--version`
/// come here too and print on standard output.
fn command_line_error(e: &clap::Error) -> i32 {
    let text = e.render().to_string();
    if !e.use_stderr() {
        let _ = out::stdout_fmt(format_args!("{text}"));
        return exit::OK;
    }
    if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        out::stderr_fmt(format_args!("{text}\n"));
        return cmd::report(
            &error::CliError::CommandLine {
                message: "a command is required (see above)".into(),
            }
            .into(),
        );
    }
    let message = text
        .trim_end()
        .strip_prefix("error: ")
        .unwrap_or(text.trim_end());
    cmd::report(
        &error::CliError::CommandLine {
            message: message.to_string(),
        }
        .into(),
    )
}

/// `SBX_DEBUG=1`, or `[telemetry] debug = true` in the config the command will load.
fn debug_requested(cli: &args::Cli) -> bool {
    if telemetry::debug_from_env() {
        return true;
    }
    let fallback = args::Common {
        config: None,
        policies: Vec::new(),
        state_dir: None,
        json: false,
    };
    let common = common_of(&cli.command).unwrap_or(&fallback);
    // A config that does not load is reported by the command itself.
    setup::load(common).is_ok_and(|l| l.config.telemetry.debug)
}

fn common_of(cmd: &args::Command) -> Option<&args::Common> {
    use args::{AuditCmd, Command};
    match cmd {
        Command::Run { common, .. }
        | Command::RunCode { common, .. }
        | Command::Browse { common, .. }
        | Command::Approvals { common, .. }
        | Command::Kill { common, .. }
        | Command::Resume { common }
        | Command::Costs { common, .. }
        | Command::Budget { common, .. }
        | Command::State { common, .. }
        | Command::Status { common, .. }
        | Command::Serve { common, .. }
        | Command::Mcp { common, .. }
        | Command::Keys { common, .. }
        | Command::Secrets { common, .. } => Some(common),
        Command::Audit {
            cmd:
                AuditCmd::Tail { common, .. }
                | AuditCmd::Query { common, .. }
                | AuditCmd::RotateKey { common },
        } => Some(common),
        _ => None,
    }
}

/// The `--secret-env` values of a run: redacted from every log line.
fn log_secrets(cli: &args::Cli) -> Vec<sandboxio_gateway::layers::audit::Secret> {
    match &cli.command {
        args::Command::Run { opts, .. } | args::Command::RunCode { opts, .. } => opts
            .secret_env
            .iter()
            .filter_map(|kv| kv.split_once('='))
            // One too short to redact is refused by the run itself (the redactor would
            // refuse it too, and then the refusal could not be printed).
            .filter(|(_, v)| v.chars().count() >= sandboxio_gateway::layers::audit::MIN_SECRET_LEN)
            .map(|(_, v)| sandboxio_gateway::layers::audit::Secret::new(v))
            .collect(),
        _ => Vec::new(),
    }
}
