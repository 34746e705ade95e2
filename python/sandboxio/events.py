"""The value objects every renderer shares: ``AuditEvent`` (what each audit sink gets,
one per operation record, already redacted) and ``CostEntry`` (post-hoc cost
attribution). Frozen; sequences are tuples; money is ``Decimal``."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any, Mapping


class IsolationTier(str, enum.Enum):
    NAMESPACE = "namespace"
    PROCESS = "process"
    LANDLOCK = "landlock"
    MICROVM = "microvm"


_TIERS = {t.value: t for t in IsolationTier}


def _ts(value: Any) -> datetime:
    text = str(value)
    try:
        # Python 3.11+ reads RFC 3339 as the gateway writes it (`Z`, nanoseconds, cut to
        # microseconds) at a twentieth of the cost of the rewrite below.
        t = datetime.fromisoformat(text)
    except ValueError:
        t = _ts_compat(text)
    return t if t.tzinfo is not None else t.replace(tzinfo=timezone.utc)


def _ts_compat(text: str) -> datetime:
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    # Python 3.10 reads at most microseconds.
    if "." in text:
        head, _, rest = text.partition(".")
        n = len(rest) - len(rest.lstrip("0123456789"))
        text = f"{head}.{rest[:n][:6]}{rest[n:]}"
    return datetime.fromisoformat(text)


_ZERO = Decimal(0)


def _money(value: Any) -> Decimal | None:
    if value is None:
        return None
    # Most records cost nothing: one shared zero (a Decimal is immutable).
    return _ZERO if value == "0" else Decimal(str(value))


def _rule(value: Any) -> str:
    if type(value) is dict or isinstance(value, Mapping):
        policy = value.get("policy") or value.get("file") or ""
        rule = value.get("id") or value.get("rule") or ""
        return f"{policy}:{rule}" if policy else str(rule)
    return str(value)


@dataclass(frozen=True)
class AuditEvent:
    """One operation, as every audit sink sees it (seed 002's fields first)."""

    ts: datetime
    event: str
    sandbox_id: str | None
    backend: str
    isolation: IsolationTier | None
    tenant_id: str | None
    session_id: str | None
    code_sha256: str | None
    argv: tuple[str, ...] | None
    exit_code: int | None
    duration_ms: int
    bytes_in: int
    bytes_out: int
    network_denials: int
    code: str | None = None
    operation_id: str = ""
    tool_name: str = ""
    agent_id: str | None = None
    path: str | None = None
    signal: int | None = None
    status: str = ""
    decision: str = ""
    layer: str = ""
    rules: tuple[str, ...] = ()
    reason: str = ""
    error_code: str | None = None
    cost_reserved: Decimal | None = None
    cost_settled: Decimal | None = None
    approval_id: str | None = None
    approver: str | None = None
    trace_id: str | None = None
    span_id: str | None = None
    labels: tuple[tuple[str, str], ...] = field(default=())

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, capture_code: bool = True) -> AuditEvent:
        """From the gateway's event or record JSON (a record says ``verdict``).

        This runs once per operation, right after the event loop's thread wakes from
        waiting for it, when little of it is in the CPU's caches: it touches as little
        code as it can (no enum call, no ABC check for a plain dict, a shared zero), and
        fills the frozen instance's fields in one step instead of one
        ``object.__setattr__`` each (a test checks that every field is filled)."""
        get = d.get
        tier = get("isolation")
        argv = get("argv")
        labels = get("labels")
        values = {
            "ts": _ts(d["ts"]),
            "event": str(get("event", "")),
            "sandbox_id": get("sandbox_id"),
            "backend": str(get("backend", "")),
            "isolation": (_TIERS.get(tier) or IsolationTier(tier)) if tier else None,
            "tenant_id": get("tenant_id"),
            "session_id": get("session_id"),
            "code_sha256": get("code_sha256"),
            "argv": tuple([str(a) for a in argv]) if argv is not None else None,
            "exit_code": get("exit_code"),
            "duration_ms": int(get("duration_ms") or 0),
            "bytes_in": int(get("bytes_in") or 0),
            "bytes_out": int(get("bytes_out") or 0),
            "network_denials": int(get("network_denials") or 0),
            "code": get("code") if capture_code else None,
            "operation_id": str(get("operation_id", "")),
            "tool_name": str(get("tool_name", "")),
            "agent_id": get("agent_id"),
            "path": get("path"),
            "signal": get("signal"),
            "status": str(get("status", "")),
            "decision": str(get("decision", get("verdict", ""))),
            "layer": str(get("layer", "")),
            "rules": tuple([_rule(r) for r in get("rules") or ()]),
            "reason": str(get("reason", "")),
            "error_code": get("error_code"),
            "cost_reserved": _money(get("cost_reserved")),
            "cost_settled": _money(get("cost_settled")),
            "approval_id": get("approval_id"),
            "approver": get("approver"),
            "trace_id": get("trace_id"),
            "span_id": get("span_id"),
            "labels": tuple(sorted([(str(k), str(v)) for k, v in labels.items()])) if labels else (),
        }
        event = object.__new__(cls)
        event.__dict__.update(values)
        return event

    @classmethod
    def from_json(cls, line: str) -> AuditEvent:
        return cls.from_dict(json.loads(line))

    def as_dict(self) -> dict[str, Any]:
        """The JSON-ready form every shipped sink writes (one line per event)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "code" and v is None:
                continue
            if isinstance(v, datetime):
                v = v.isoformat()
            elif isinstance(v, IsolationTier):
                v = v.value
            elif isinstance(v, Decimal):
                v = str(v)
            elif f.name == "labels":
                v = dict(v)
            elif isinstance(v, tuple):
                v = list(v)
            out[f.name] = v
        return out


@dataclass(frozen=True)
class CostEntry:
    """A settled charge, attributed after the fact (``costs()``). Never a float."""

    object_id: str
    description: str
    interval_start: datetime
    cost_usd: Decimal
    labels: dict[str, str]
