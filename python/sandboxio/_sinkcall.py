"""How the gateway calls one Python sink: the native side awaits ``emit_json`` on the
caller's event loop for every record. The sink's ``emit`` runs under the timeout; a
failure becomes an ``AuditSinkWarning`` (``warn``) or an error the gateway turns into
``SBX_E1601`` (``fail``)."""

from __future__ import annotations

import asyncio
import warnings

from sandboxio import _redaction
from sandboxio.audit import AuditSink, OnSinkFailure
from sandboxio.errors import AuditSinkError, AuditSinkWarning
from sandboxio.events import AuditEvent


class SinkCall:
    def __init__(self, sink: AuditSink, mode: OnSinkFailure, timeout: float) -> None:
        self.sink = sink
        self.mode = mode
        self.timeout = timeout
        self.name = type(sink).__name__

    async def emit_json(self, line: str) -> None:
        event = AuditEvent.from_json(line)
        try:
            await asyncio.wait_for(self.sink.emit(event), self.timeout)
        except asyncio.TimeoutError:
            self._failed(f"audit sink `{self.name}` timed out after {self.timeout:g}s (SBX_AUDIT_TIMEOUT)")
        except Exception as e:  # a sink's own failure, whatever it is
            self._failed(f"audit sink `{self.name}` failed: {type(e).__name__}: {e}")

    def _failed(self, why: str) -> None:
        why = _redaction.redact(why)
        if self.mode == "fail":
            raise AuditSinkError(why)
        warnings.warn(AuditSinkWarning(why), stacklevel=2)
