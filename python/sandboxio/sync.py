"""``SyncSandbox``: the same operations without ``await``, for scripts and notebooks
without an event loop. Each call runs the async method on a private event loop (Python
sinks and approval callbacks run there too); do not use it inside a running loop."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Iterator, Mapping, Sequence, TypeVar

from sandboxio.backends.base import Backend
from sandboxio.capability import Capability
from sandboxio.events import AuditEvent
from sandboxio.results import ExecResult, FileEntry, StreamEvent
from sandboxio.sandbox import Sandbox

T = TypeVar("T")


class SyncSandbox:
    def __init__(self, loop: asyncio.AbstractEventLoop, sbx: Sandbox) -> None:
        self._loop = loop
        self._sbx = sbx

    @classmethod
    def create(
        cls,
        backend: Backend | None = None,
        *,
        tier: str | None = None,
        secrets: Sequence[str] = (),
        agent: str | None = None,
        labels: Mapping[str, str] | None = None,
        debug: bool | None = None,
    ) -> SyncSandbox:
        loop = asyncio.new_event_loop()
        try:
            sbx = loop.run_until_complete(
                Sandbox.create(backend, tier=tier, secrets=secrets, agent=agent, labels=labels, debug=debug)
            )
        except BaseException:
            loop.close()
            raise
        return cls(loop, sbx)

    def _run(self, coro: Awaitable[T]) -> T:
        return self._loop.run_until_complete(coro)

    @property
    def sandbox(self) -> Sandbox:
        """The async sandbox underneath (for its loop-free properties)."""
        return self._sbx

    @property
    def id(self) -> str:
        return self._sbx.id

    @property
    def capabilities(self) -> Capability:
        return self._sbx.capabilities

    def run(self, cmd: str | Sequence[str], **kw: Any) -> ExecResult:
        return self._run(self._sbx.run(cmd, **kw))

    def run_code(self, code: str, **kw: Any) -> ExecResult:
        return self._run(self._sbx.run_code(code, **kw))

    def stream(self, code: str | None = None, **kw: Any) -> Iterator[StreamEvent]:
        agen = self._sbx.stream(code, **kw)
        while True:
            try:
                yield self._run(agen.__anext__())
            except StopAsyncIteration:
                return

    def read_file(self, path: str) -> bytes:
        return self._run(self._sbx.read_file(path))

    def read_text(self, path: str) -> str:
        return self._run(self._sbx.read_text(path))

    def write_file(self, path: str, data: str | bytes) -> AuditEvent:
        return self._run(self._sbx.write_file(path, data))

    def list_files(self, path: str = ".") -> list[FileEntry]:
        return self._run(self._sbx.list_files(path))

    def delete_file(self, path: str) -> AuditEvent:
        return self._run(self._sbx.delete_file(path))

    def close(self) -> None:
        if not self._loop.is_closed():
            self._run(self._sbx.close())
            self._loop.close()

    def __enter__(self) -> SyncSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return repr(self._sbx)
