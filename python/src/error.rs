//! Errors crossing into Python: one exception type carrying `(code, class, message)`,
//! which the package maps to its typed exceptions. Messages are redacted before they
//! leave Rust. The package's own codes (`SBX_E21xx`) are defined here, once.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use sandboxio_core::{ErrorClass, ErrorCode};

create_exception!(_native, NativeError, PyException);

/// An argument from Python was not valid (a tier, a language, a mode, a path).
pub const INVALID_ARGUMENT: &str = "SBX_E2101";
/// An operation on a sandbox that was closed.
pub const SANDBOX_CLOSED: &str = "SBX_E2102";
/// The backend does not have the capability the call needs.
pub const CAPABILITY_NOT_SUPPORTED: &str = "SBX_E2103";
/// The remote backend (server, E2B) could not be reached or answered something unreadable.
pub const BACKEND_UNAVAILABLE: &str = "SBX_E2104";
/// An operation was stopped by a layer of the chain (the record names layer and code).
pub const OPERATION_DENIED: &str = "SBX_E2105";
/// The Python side of the binding failed (a sink wrapper, an approval callback).
pub const PYTHON_CALLBACK_FAILED: &str = "SBX_E2106";
/// A file read answered binary content holding one of the sandbox's secrets: redaction
/// works on its text form, so the content is not returned (never garbled bytes).
pub const SECRET_IN_BINARY: &str = "SBX_E2107";
/// A call after the native runtime was stopped at interpreter exit (or that could not
/// start it).
pub const RUNTIME_STOPPED: &str = "SBX_E2120";
/// The binding's task for an operation panicked (a bug; the operation's own record, if
/// it got that far, says what happened to it).
pub const TASK_PANICKED: &str = "SBX_E2121";

/// The codes, for the Python package (`sandboxio.errors` reads them from here).
pub fn add_codes(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("E_INVALID_ARGUMENT", INVALID_ARGUMENT)?;
    m.add("E_SANDBOX_CLOSED", SANDBOX_CLOSED)?;
    m.add("E_CAPABILITY_NOT_SUPPORTED", CAPABILITY_NOT_SUPPORTED)?;
    m.add("E_BACKEND_UNAVAILABLE", BACKEND_UNAVAILABLE)?;
    m.add("E_OPERATION_DENIED", OPERATION_DENIED)?;
    m.add("E_PYTHON_CALLBACK_FAILED", PYTHON_CALLBACK_FAILED)?;
    m.add("E_SECRET_IN_BINARY", SECRET_IN_BINARY)?;
    m.add("E_RUNTIME_STOPPED", RUNTIME_STOPPED)?;
    m.add("E_TASK_PANICKED", TASK_PANICKED)?;
    Ok(())
}

fn class_name(c: ErrorClass) -> &'static str {
    match c {
        ErrorClass::Usage => "usage",
        ErrorClass::Denied => "denied",
        ErrorClass::Interrupted => "interrupted",
        ErrorClass::Integrity => "integrity",
        ErrorClass::Internal => "internal",
    }
}

/// A coded error from any crate, its message already redacted by the caller.
pub fn coded<E: ErrorCode + std::fmt::Display>(e: &E, redact: impl Fn(&str) -> String) -> PyErr {
    NativeError::new_err((e.code(), class_name(e.class()), redact(&e.to_string())))
}

/// A bad argument from Python.
pub fn invalid(why: impl Into<String>) -> PyErr {
    NativeError::new_err((INVALID_ARGUMENT, "usage", why.into()))
}

/// One of the binding's own errors.
pub fn own(code: &'static str, class: &'static str, why: impl Into<String>) -> PyErr {
    NativeError::new_err((code, class, why.into()))
}
