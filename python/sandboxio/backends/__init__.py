"""Backends: ``LocalBackend`` (the Rust core in this process) and ``ServerBackend``
(an HTTP client of ``sandboxio serve``)."""
