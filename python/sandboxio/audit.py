"""Audit configuration and the shipped sinks.

Sinks are given to a backend's constructor through ``AuditConfig`` (never global). The
gateway awaits every sink inline for every record, each bounded by ``SBX_AUDIT_TIMEOUT``
(default 5 s). ``emit`` must return promptly; buffering is the sink's job (``QueueSink``).
Every shipped sink writes ``AuditEvent.as_dict()`` as one JSON line.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from sandboxio.errors import AuditSinkWarning, InvalidArgument
from sandboxio.events import AuditEvent

OnSinkFailure = Literal["warn", "fail"]

DEFAULT_AUDIT_TIMEOUT = 5.0


@runtime_checkable
class AuditSink(Protocol):
    async def emit(self, event: AuditEvent) -> None: ...


class NoopSink:
    """Discards every event (the default)."""

    async def emit(self, event: AuditEvent) -> None:
        return None

    def __repr__(self) -> str:
        return "<NoopSink>"


class LoggingSink:
    """One JSON line per event on a stdlib logger (``sandboxio.audit`` by default). It
    configures no handler: the host application decides where records go."""

    def __init__(self, logger: logging.Logger | str = "sandboxio.audit", level: int = logging.INFO) -> None:
        self.logger = logging.getLogger(logger) if isinstance(logger, str) else logger
        self.level = level

    async def emit(self, event: AuditEvent) -> None:
        self.logger.log(self.level, json.dumps(event.as_dict(), sort_keys=True))

    def __repr__(self) -> str:
        return f"<LoggingSink logger={self.logger.name}>"


class FileSink:
    """One JSON line per event, appended to a file (created 0600)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    async def emit(self, event: AuditEvent) -> None:
        line = json.dumps(event.as_dict(), sort_keys=True) + "\n"
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)

    def __repr__(self) -> str:
        return f"<FileSink path={self.path}>"


class QueueSink:
    """A bounded buffer in front of a slower sink. ``emit`` enqueues at once and never
    blocks; when full, the oldest event is dropped and an ``AuditSinkWarning`` is issued.
    The host runs ``drain()`` in its own task group; sandboxio owns no background task."""

    def __init__(self, target: AuditSink, maxsize: int = 1024) -> None:
        if maxsize < 1:
            raise InvalidArgument(f"QueueSink maxsize must be at least 1, got `{maxsize}`")
        self.target = target
        self.maxsize = maxsize
        self.dropped = 0
        self._items: collections.deque[AuditEvent] = collections.deque()
        self._ready: asyncio.Event | None = None
        self._closed = False

    def _event(self) -> asyncio.Event:
        if self._ready is None:
            self._ready = asyncio.Event()
        return self._ready

    def __len__(self) -> int:
        return len(self._items)

    async def emit(self, event: AuditEvent) -> None:
        if len(self._items) >= self.maxsize:
            self._items.popleft()
            self.dropped += 1
            warnings.warn(
                AuditSinkWarning(
                    f"audit queue full ({self.maxsize} events): dropped the oldest event ({self.dropped} dropped so far)"
                ),
                stacklevel=2,
            )
        self._items.append(event)
        self._event().set()

    async def drain(self) -> None:
        """Delivers queued events to the target until ``close()``; run it in a task."""
        ready = self._event()
        while True:
            while self._items:
                await self.target.emit(self._items.popleft())
            if self._closed:
                return
            ready.clear()
            await ready.wait()

    def close(self) -> None:
        """Ends ``drain()`` once the queue is empty."""
        self._closed = True
        self._event().set()

    def __repr__(self) -> str:
        return f"<QueueSink {len(self._items)}/{self.maxsize} dropped={self.dropped} target={self.target!r}>"


def _sinks_default() -> tuple[AuditSink, ...]:
    return (NoopSink(),)


@dataclass(frozen=True)
class AuditConfig:
    """Audit settings of one backend instance."""

    sinks: tuple[AuditSink, ...] = field(default_factory=_sinks_default)
    on_sink_failure: OnSinkFailure = "warn"
    capture_code: bool = False

    def __post_init__(self) -> None:
        if self.on_sink_failure not in ("warn", "fail"):
            raise InvalidArgument(
                f"on_sink_failure `{self.on_sink_failure}` is not one of `warn`, `fail`"
            )
        sinks = tuple(self.sinks)
        for s in sinks:
            if not callable(getattr(s, "emit", None)):
                raise InvalidArgument(f"audit sink `{type(s).__name__}` has no `emit` method")
        object.__setattr__(self, "sinks", sinks)


def audit_timeout() -> float:
    """``SBX_AUDIT_TIMEOUT`` in seconds: ``5s``, ``250ms``, ``1m`` or plain seconds."""
    raw = os.environ.get("SBX_AUDIT_TIMEOUT", "").strip()
    if not raw:
        return DEFAULT_AUDIT_TIMEOUT
    units = (("ms", 0.001), ("s", 1.0), ("m", 60.0))
    for suffix, scale in units:
        if raw.endswith(suffix) and raw[: -len(suffix)].replace(".", "", 1).isdigit():
            return float(raw[: -len(suffix)]) * scale
    if raw.replace(".", "", 1).isdigit():
        return float(raw)
    raise InvalidArgument(f"SBX_AUDIT_TIMEOUT `{raw}` is not a duration (try `5s` or `250ms`)")
