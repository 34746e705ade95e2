"""What every backend gives a ``Sandbox``: sessions that run one operation per call and
answer the gateway's outcome (its JSON, or the values themselves), plus backend-level calls
(costs, kill switch)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Awaitable, Mapping, Protocol, Sequence, Union

from sandboxio.audit import AuditConfig
from sandboxio.capability import Capability
from sandboxio.errors import CapabilityNotSupported

if TYPE_CHECKING:
    from sandboxio._outcome import Outcome
    from sandboxio.events import CostEntry
    from sandboxio.sandbox import Sandbox

# What a session's operation answers (see ``Session``).
Answer = Union[str, "Outcome"]


class Session(Protocol):
    """One sandbox on a backend. Methods answer the outcome of one operation: its JSON
    (remote backends), or the ``Outcome`` made in process (``LocalBackend``)."""

    @property
    def id(self) -> str: ...
    @property
    def tier(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    def capabilities(self) -> int: ...
    # Awaitables, so that an in-process session can hand over the native call's own
    # (an ``async def`` is one too). ``Answer``: the JSON, or the ``Outcome`` made in
    # process (``python/src/answer.rs``).
    def exec(self, argv: Sequence[str], options: str) -> Awaitable[Answer]: ...
    def run_code(self, language: str, code: str, options: str) -> Awaitable[Answer]: ...
    def read_file(self, path: str, traceparent: str | None) -> Awaitable[Answer]: ...
    def list_files(self, path: str, traceparent: str | None) -> Awaitable[Answer]: ...
    def write_file(self, path: str, content: bytes, traceparent: str | None) -> Awaitable[Answer]: ...
    def delete_file(self, path: str, traceparent: str | None) -> Awaitable[Answer]: ...
    def stream(self, language: str | None, code: str | None, argv: Sequence[str] | None, options: str) -> StreamHandle: ...
    async def aclose(self) -> None: ...


class StreamHandle(Protocol):
    async def start(self) -> None: ...
    async def next(self) -> str | None: ...
    async def outcome(self) -> str: ...
    async def cancel(self) -> None:
        """Ends the program if it still runs (the iterator was closed early)."""
        ...


class Backend:
    """Base of the backends: ``LocalBackend`` (in-process), ``ServerBackend`` (HTTP)."""

    name: str = "backend"
    audit: AuditConfig

    @property
    def capabilities(self) -> Capability:
        return Capability(0)

    def require(self, cap: Capability, what: str) -> None:
        if cap not in self.capabilities:
            raise CapabilityNotSupported(
                f"the `{self.name}` backend does not support {what} (needs Capability.{cap.name})"
            )

    async def open_session(
        self,
        *,
        tier: str | None,
        secrets: Sequence[str],
        agent: str | None,
        labels: Mapping[str, str],
    ) -> Session:
        raise NotImplementedError

    async def create(
        self,
        *,
        tier: str | None = None,
        secrets: Sequence[str] = (),
        agent: str | None = None,
        labels: Mapping[str, str] | None = None,
        debug: bool | None = None,
    ) -> Sandbox:
        from sandboxio.sandbox import Sandbox

        return await Sandbox.create(
            backend=self, tier=tier, secrets=secrets, agent=agent, labels=labels, debug=debug
        )

    async def costs(
        self,
        *,
        since: datetime,
        until: datetime | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> list[CostEntry]:
        self.require(Capability.COST_REPORTING, "cost reporting")
        raise NotImplementedError

    def redact(self, text: str, secrets: Sequence[str] = ()) -> str:
        return text

    async def aclose(self) -> None:
        return None

    def _native_extra(self) -> dict[str, Any]:
        return {}
