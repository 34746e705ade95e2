"""What operations answer: typed, frozen, with the operation's (redacted) record."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any, Literal, Mapping

from sandboxio.events import AuditEvent


def _bytes(d: Mapping[str, Any], key: str) -> bytes:
    raw = d.get(key) or ""
    if d.get(f"{key}_encoding") == "base64":
        return base64.b64decode(raw, validate=True)
    return str(raw).encode()


@dataclass(frozen=True)
class ExecResult:
    """A program's outcome. A timeout or a kill is a result (``timed_out``,
    ``oom_killed``, ``signal``), not an exception; a denial raises ``OperationDenied``.

    Each output stream is captured up to the sandbox's cap (1 MiB by default):
    ``stdout_truncated``/``stderr_truncated`` say that the program wrote more than was
    kept, and ``stdout_bytes``/``stderr_bytes`` how much it wrote in all."""

    stdout: str
    stderr: str
    exit_code: int | None
    signal: int | None
    timed_out: bool
    oom_killed: bool
    duration_ms: int
    sandbox_id: str
    record: AuditEvent
    stdout_raw: bytes = b""
    stderr_raw: bytes = b""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    stdout_bytes: int = 0
    stderr_bytes: int = 0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def __getstate__(self) -> dict[str, Any]:
        # One made in process has its record made first: a copy or a pickle holds it.
        _ = self.record
        return dict(self.__dict__)

    @property
    def text(self) -> str:
        return self.stdout

    @classmethod
    def from_outcome(cls, result: Mapping[str, Any], record: AuditEvent) -> ExecResult:
        out, err = _bytes(result, "stdout"), _bytes(result, "stderr")
        return cls(
            stdout=out.decode("utf-8", "replace"),
            stderr=err.decode("utf-8", "replace"),
            exit_code=record.exit_code,
            signal=record.signal,
            timed_out=bool(result.get("timed_out")),
            oom_killed=bool(result.get("oom_killed")),
            duration_ms=int(result.get("duration_ms") or record.duration_ms),
            sandbox_id=str(result.get("sandbox_id") or record.sandbox_id or ""),
            record=record,
            stdout_raw=out,
            stderr_raw=err,
            stdout_truncated=bool(result.get("stdout_truncated")),
            stderr_truncated=bool(result.get("stderr_truncated")),
            stdout_bytes=_count(result, "stdout", out),
            stderr_bytes=_count(result, "stderr", err),
        )


def _count(result: Mapping[str, Any], key: str, kept: bytes) -> int:
    """``stdout_bytes``/``stderr_bytes``: what the program wrote in all (what was kept,
    for an answer that leaves the count out)."""
    n = result.get(f"{key}_bytes")
    return n if isinstance(n, int) else len(kept)


class _RecordOnFirstUse:
    """``ExecResult.record`` of a result the in-process backend made: its ``__dict__``
    holds the native ``LazyRecord`` (``_record``) instead of the field, and the first read
    makes the ``AuditEvent`` (the same object ``Outcome.record`` answers) and puts it in
    place; later reads find the field in ``__dict__`` and never come here. Set on the
    class after ``@dataclass`` (so it is no default), with no ``__set__`` (so ``__init__``
    stores the field as always)."""

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is None:
            raise AttributeError("record")
        d = obj.__dict__
        lazy = d.get("_record")
        if lazy is None:
            raise AttributeError("record")
        rec = d["record"] = lazy.get()
        d.pop("_record", None)
        return rec


setattr(ExecResult, "record", _RecordOnFirstUse())


@dataclass(frozen=True)
class FileEntry:
    name: str
    is_dir: bool
    size: int


@dataclass(frozen=True)
class StreamEvent:
    """One piece of live output (``stdout``/``stderr``, with ``data``) or the ``exit``.

    The ``exit`` event, the last, also says what the output events left out:
    ``stdout_truncated``/``stderr_truncated`` when the program wrote more than the cap (1
    MiB by default; the events stop there), ``stdout_bytes``/``stderr_bytes`` how much it
    wrote in all, and ``timed_out`` when its time limit killed it. On output events they
    keep their defaults."""

    kind: Literal["stdout", "stderr", "exit"]
    data: bytes
    elapsed_us: int
    exit_code: int | None = None
    signal: int | None = None
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    timed_out: bool = False

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", "replace")
