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


def _money(value: Any) -> Decimal | None:
    return None if value is None else Decimal(str(value))


def _rule(value: Any) -> str:
    if isinstance(value, Mapping):
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
        """From the gateway's event or record JSON (a record says ``verdict``)."""
        tier = d.get("isolation")
        argv = d.get("argv")
        labels = d.get("labels") or {}
        return cls(
            ts=_ts(d["ts"]),
            event=str(d.get("event", "")),
            sandbox_id=d.get("sandbox_id"),
            backend=str(d.get("backend", "")),
            isolation=IsolationTier(tier) if tier else None,
            tenant_id=d.get("tenant_id"),
            session_id=d.get("session_id"),
            code_sha256=d.get("code_sha256"),
            argv=tuple(str(a) for a in argv) if argv is not None else None,
            exit_code=d.get("exit_code"),
            duration_ms=int(d.get("duration_ms") or 0),
            bytes_in=int(d.get("bytes_in") or 0),
            bytes_out=int(d.get("bytes_out") or 0),
            network_denials=int(d.get("network_denials") or 0),
            code=d.get("code") if capture_code else None,
            operation_id=str(d.get("operation_id", "")),
            tool_name=str(d.get("tool_name", "")),
            agent_id=d.get("agent_id"),
            path=d.get("path"),
            signal=d.get("signal"),
            status=str(d.get("status", "")),
            decision=str(d.get("decision", d.get("verdict", ""))),
            layer=str(d.get("layer", "")),
            rules=tuple(_rule(r) for r in d.get("rules") or ()),
            reason=str(d.get("reason", "")),
            error_code=d.get("error_code"),
            cost_reserved=_money(d.get("cost_reserved")),
            cost_settled=_money(d.get("cost_settled")),
            approval_id=d.get("approval_id"),
            approver=d.get("approver"),
            trace_id=d.get("trace_id"),
            span_id=d.get("span_id"),
            labels=tuple(sorted((str(k), str(v)) for k, v in labels.items())),
        )

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
