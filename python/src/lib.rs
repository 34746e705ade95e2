//! `sandboxio._native`: the gateway's runtime inside a Python process.
//!
//! The binding is thin: it opens one [`sandboxio_gateway::Runtime`] per Python backend,
//! turns each Python call into one operation through the gateway's chain, and answers with
//! the redacted outcome as the package's typed values (`answer.rs`; a stream's outcome is
//! JSON, which the package parses). It wires
//! no layer by hand. Python audit sinks and approval callbacks are awaited on the caller's
//! event loop (`sink.rs`, `approver.rs`); OpenTelemetry spans are the Python package's.
//! Every future runs on the binding's own tokio runtime, stopped at interpreter exit
//! (`rt.rs`).

mod answer;
mod approver;
mod backend;
mod error;
mod handoff;
mod rt;
mod session;
mod sink;
mod stream;
mod tool;

use pyo3::prelude::*;

/// Whether the binary at `path` was built from the same sources as this module (the
/// package prefers such a helper on `PATH`).
#[pyfunction]
fn same_build(path: std::path::PathBuf) -> bool {
    sandboxio_gateway::is_same_build(&path)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<backend::NativeRuntime>()?;
    m.add_class::<session::NativeSandbox>()?;
    m.add_class::<stream::NativeStream>()?;
    m.add_class::<answer::LazyRecord>()?;
    m.add("NativeError", m.py().get_type::<error::NativeError>())?;
    error::add_codes(m)?;
    // What the benchmark reports: a dev build's overhead is not the package's.
    m.add(
        "BUILD_PROFILE",
        if cfg!(debug_assertions) {
            "dev"
        } else {
            "release"
        },
    )?;
    // Stop the runtime in order before the interpreter finalises (see `rt.rs`).
    m.add_function(wrap_pyfunction!(rt::_bench_generic_handoff, m)?)?;
    m.add_function(wrap_pyfunction!(answer::_bench_json_answer, m)?)?;
    m.add_function(wrap_pyfunction!(same_build, m)?)?;
    let shutdown = wrap_pyfunction!(rt::shutdown, m)?;
    m.add_function(shutdown.clone())?;
    m.py()
        .import("atexit")?
        .call_method1("register", (shutdown,))?;
    Ok(())
}
