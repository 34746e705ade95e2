"""From the gateway's outcome (JSON, or the in-process backend's values) to a typed value
or a typed, redacted error."""

from __future__ import annotations

import json
from typing import Any

from sandboxio import _redaction
from sandboxio.errors import (
    E_AUDIT_SINK_FAILED,
    E_OPERATION_DENIED,
    AuditSinkError,
    BackendUnavailable,
    OperationDenied,
    OperationFailed,
    add_note,
)
from sandboxio.events import AuditEvent
from sandboxio.results import ExecResult


class Outcome:
    """An operation's record and what it answered. ``result`` is the result's JSON object
    as parsed, or, from the in-process backend, the ``ExecResult`` already made.

    The in-process backend makes it itself (``python/src/answer.rs``, not through
    ``__init__``), with the native ``LazyRecord`` as ``_record``: ``record`` makes the
    ``AuditEvent`` on first use, so an operation nobody asks the record of never makes it.
    ``decision``, ``status`` and ``error_code`` (what ``check`` reads on every operation)
    are the record's."""

    __slots__ = ("_record", "result", "tool_output", "decision", "status", "error_code")

    def __init__(self, record: AuditEvent, result: dict[str, Any] | ExecResult | None, tool_output: Any) -> None:
        self._record: Any = record
        self.result = result
        self.tool_output = tool_output
        self.decision: str = record.decision
        self.status: str = record.status
        self.error_code: str | None = record.error_code

    @property
    def record(self) -> AuditEvent:
        r = self._record
        if not isinstance(r, AuditEvent):
            r = self._record = r.get()
        return r  # type: ignore[no-any-return]


def parse(text: str, *, capture_code: bool) -> Outcome:
    """The outcome JSON a remote backend answered; one it cannot read is
    ``BackendUnavailable`` (``SBX_E2104``) naming what was wrong."""
    try:
        d = json.loads(text)
        record = AuditEvent.from_dict(d["record"], capture_code=capture_code)
        return Outcome(record, d.get("result"), d.get("tool_output"))
    except MALFORMED as e:
        raise malformed("its record", e) from None


# What reading a malformed answer raises (a missing key, a wrong type, a bad value).
MALFORMED = (KeyError, IndexError, TypeError, ValueError, AttributeError, ArithmeticError)


def malformed(what: str, e: BaseException) -> BackendUnavailable:
    text = str(e)
    if len(text) > 200:
        text = text[:200] + "..."
    return BackendUnavailable(
        _redaction.redact(f"the backend's answer is malformed: {what} ({type(e).__name__}: {text})")
    )


def check(out: Outcome) -> Outcome:
    """Raises when a layer stopped the operation or it could not complete."""
    if out.error_code != E_AUDIT_SINK_FAILED and out.decision == "allow":
        if out.status not in ("error", "failed") or out.result is not None:
            return out
    rec = out.record
    if rec.error_code == E_AUDIT_SINK_FAILED:
        raise _noted(AuditSinkError(_redaction.redact(rec.reason)), rec)
    if rec.decision != "allow":
        err: Exception = OperationDenied(
            _redaction.redact(f"denied at {rec.layer}: {rec.reason}"),
            code=rec.error_code or E_OPERATION_DENIED,
            record=rec,
        )
        raise _noted(err, rec)
    if rec.status in ("error", "failed") and out.result is None:
        raise _noted(
            OperationFailed(
                _redaction.redact(f"{rec.event} failed at {rec.layer}: {rec.reason}"),
                code=rec.error_code or E_OPERATION_DENIED,
                record=rec,
            ),
            rec,
        )
    return out


def _noted(err: Exception, rec: AuditEvent) -> Exception:
    note = f"operation {rec.operation_id} ({rec.event}) status={rec.status} layer={rec.layer}"
    if rec.path:
        note += f" path={rec.path}"
    if rec.rules:
        note += f" rules={','.join(rec.rules)}"
    add_note(err, _redaction.redact(note))
    return err
