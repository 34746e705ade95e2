//! The `sandboxio` binary.
//!
//! Exit status: a sandboxed command's own status (128 + N when killed by signal N), or one
//! of the codes in [`exit`], documented in the README.

mod args;
mod cmd;
mod exit;
mod setup;

use clap::Parser;

fn main() {
    // The sandbox helper: re-executed by ourselves, single-threaded, before any runtime.
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(sandboxio_sandbox::helper::HELPER_ARG))
    {
        sandboxio_sandbox::helper::main();
    }
    let cli = args::Cli::parse();
    let code = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt.block_on(cmd::dispatch(cli)),
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            exit::INTERNAL
        }
    };
    std::process::exit(code);
}
