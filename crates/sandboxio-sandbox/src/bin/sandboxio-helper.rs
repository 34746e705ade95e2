//! The standalone helper binary (used by this crate's tests and by hosts that prefer a
//! separate helper via `SBX_HELPER`). Any binary embedding the sandbox does the same check.

fn main() {
    if sandboxio_sandbox::helper::is_helper_invocation() {
        sandboxio_sandbox::helper::main();
    }
    eprintln!(
        "sandboxio-helper is started by the sandboxio supervisor (argv[1] = {}), not by hand",
        sandboxio_sandbox::HELPER_ARG
    );
    std::process::exit(2);
}
