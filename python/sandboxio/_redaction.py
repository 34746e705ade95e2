"""Redaction on the Python side, for the package's own texts: exception messages and
notes, warnings, log records and reprs. Records, events and spans are redacted once by
the gateway before any renderer sees them; this covers what Python itself writes. The
values are the ``secrets=`` of every live sandbox and backend of this process."""

from __future__ import annotations

import logging
import threading
from typing import Iterable

PLACEHOLDER = "[REDACTED]"
_lock = threading.Lock()
_secrets: dict[str, int] = {}


def register(values: Iterable[str]) -> None:
    with _lock:
        for v in values:
            if v:
                _secrets[v] = _secrets.get(v, 0) + 1


def unregister(values: Iterable[str]) -> None:
    with _lock:
        for v in values:
            n = _secrets.get(v, 0) - 1
            if n <= 0:
                _secrets.pop(v, None)
            else:
                _secrets[v] = n


def redact(text: str) -> str:
    with _lock:
        values = sorted(_secrets, key=len, reverse=True)
    for v in values:
        if v in text:
            text = text.replace(v, PLACEHOLDER)
    return text


class RedactingFilter(logging.Filter):
    """Rewrites a record's message with every known secret redacted."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:
            return True
        clean = redact(message)
        if clean != message:
            record.msg = clean
            record.args = None
        return True
