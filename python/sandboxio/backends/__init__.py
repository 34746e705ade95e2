"""Backends: ``LocalBackend`` (the Rust core in this process) and ``ServerBackend``
(an HTTP client of ``sandboxio serve``) and ``E2BBackend`` (the official E2B SDK, against
E2B or the server's E2B-compatible API)."""
