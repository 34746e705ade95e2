"""``ServerBackend``: an HTTP client of ``sandboxio serve`` (see
crates/sandboxio-server/README.md for the API)."""

from __future__ import annotations

from sandboxio.backends.base import Backend


class ServerBackend(Backend):
    name = "server"
