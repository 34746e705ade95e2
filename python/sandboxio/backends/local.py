"""The in-process backend: the gateway's runtime (policy, rate limits, budgets,
approvals, kill switch, sandbox tiers, audit trail) inside this Python process."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any, Awaitable, Callable, Mapping, Sequence

from sandboxio import _native, _redaction
from sandboxio._log import set_debug
from sandboxio._sinkcall import SinkCall
from sandboxio.approval import ApprovalCallback, Decider
from sandboxio.audit import AuditConfig, NoopSink, audit_timeout
from sandboxio.backends.base import Backend, Session
from sandboxio.capability import Capability
from sandboxio.errors import InvalidArgument, SandboxioError, from_native
from sandboxio.events import CostEntry, _ts

# The gateway's own bound on a Python sink is a backstop: the Python side times out first.
_BACKSTOP_S = 1.0


def default_state_dir() -> Path:
    """``$SBX_STATE_DIR``, else ``/var/lib/sandboxio`` for root, else the XDG state dir."""
    env = os.environ.get("SBX_STATE_DIR")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/lib/sandboxio")
    xdg = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(xdg) / "sandboxio"


def find_helper(explicit: str | os.PathLike[str] | None = None) -> str:
    """The binary the sandbox re-executes to set up isolation (a Python interpreter
    cannot be it): ``helper=``, else ``$SBX_HELPER``, else ``sandboxio-helper`` or the
    ``sandboxio`` CLI on ``PATH``, the first one built from the same sources as this
    package (its build id), else the first one found."""
    if explicit is not None:
        return os.fspath(explicit)
    env = os.environ.get("SBX_HELPER")
    if env:
        return env
    found = [p for p in (shutil.which(n) for n in ("sandboxio-helper", "sandboxio")) if p]
    for path in found:
        if _native.same_build(path):
            return path
    if found:
        return found[0]
    raise InvalidArgument(
        "no sandbox helper found: build it (`cargo build --release -p sandboxio-cli`) and put "
        "`sandboxio` on PATH, or set SBX_HELPER (or `helper=`) to `sandboxio-helper` or `sandboxio`"
    )


def _ms(t: datetime) -> int:
    if t.tzinfo is None:
        raise InvalidArgument("times must be timezone-aware (e.g. `datetime.now(timezone.utc)`)")
    return int(t.timestamp() * 1000)


class LocalBackend(Backend):
    """``LocalBackend(state_dir=..., config=..., policy=[...], audit=AuditConfig(...))``."""

    name = "local"

    def __init__(
        self,
        *,
        state_dir: str | os.PathLike[str] | None = None,
        config: str | os.PathLike[str] | None = None,
        config_text: str | None = None,
        policy: Sequence[str | os.PathLike[str]] = (),
        audit: AuditConfig | None = None,
        approval: ApprovalCallback | None = None,
        approval_timeout: float | None = None,
        tenant: str = "default",
        tools: Sequence[str] = (),
        helper: str | os.PathLike[str] | None = None,
        debug: bool | None = None,
    ) -> None:
        if config is not None and config_text is not None:
            raise InvalidArgument("give either `config` (a file) or `config_text`, not both")
        self.state_dir = Path(state_dir) if state_dir is not None else default_state_dir()
        self._config_text = config_text
        self._config_origin = "config_text"
        if config is not None:
            self._config_text = Path(config).read_text()
            self._config_origin = str(config)
        self._policy = [str(p) for p in policy]
        self.audit = audit if audit is not None else AuditConfig()
        self._approval = Decider(approval) if approval is not None else None
        self._approval_timeout = approval_timeout
        self.tenant = tenant
        self._tools = list(tools)
        self._helper = helper
        self._rt: Any = None
        self._locks: dict[int, asyncio.Lock] = {}
        self.debug = debug
        set_debug(debug)

    @property
    def capabilities(self) -> Capability:
        return (
            Capability.EXEC
            | Capability.RUN_CODE
            | Capability.FILESYSTEM
            | Capability.STREAM
            | Capability.RESOURCE_LIMITS
            | Capability.COST_REPORTING
        )

    async def runtime(self) -> Any:
        """The native runtime, opened on first use (and recovered)."""
        if self._rt is not None:
            return self._rt
        loop = asyncio.get_running_loop()
        lock = self._locks.setdefault(id(loop), asyncio.Lock())
        async with lock:
            if self._rt is None:
                timeout = audit_timeout()
                # A `NoopSink` discards every event: awaiting it would cost each operation
                # two round trips between the runtime's threads and the event loop (its
                # intent and its record) for nothing. A subclass may do something: kept.
                calls = [
                    SinkCall(s, self.audit.on_sink_failure, timeout)
                    for s in self.audit.sinks
                    if type(s) is not NoopSink
                ]
                try:
                    self._rt = await _native.NativeRuntime.open(
                        self.state_dir,
                        self._config_text,
                        self._config_origin,
                        self._policy,
                        calls,
                        self.audit.on_sink_failure,
                        self.audit.capture_code,
                        int((timeout + _BACKSTOP_S) * 1000),
                        self._approval,
                        int(self._approval_timeout * 1000) if self._approval_timeout is not None else None,
                        [(k, v) for k, v in os.environ.items()],
                        self._tools,
                        find_helper(self._helper),
                    )
                except _native.NativeError as e:
                    raise from_native(e) from None
        return self._rt

    async def open_session(
        self,
        *,
        tier: str | None,
        secrets: Sequence[str],
        agent: str | None,
        labels: Mapping[str, str],
    ) -> Session:
        rt = await self.runtime()
        try:
            native = rt.create_sandbox(
                self.tenant, agent, tier, None, list(secrets), list(labels.items()), self.audit.capture_code
            )
        except _native.NativeError as e:
            raise from_native(e) from None
        return _LocalSession(native)

    async def costs(
        self,
        *,
        since: datetime,
        until: datetime | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> list[CostEntry]:
        """Settled charges from the gateway's ledger (resolution: per operation)."""
        self.require(Capability.COST_REPORTING, "cost reporting")
        rt = await self.runtime()
        try:
            text = rt.ledger(_ms(since), _ms(until) if until is not None else None)
        except _native.NativeError as e:
            raise from_native(e) from None
        want = dict(labels or {})
        out: list[CostEntry] = []
        for line in json.loads(text):
            lab = {str(k): str(v) for k, v in (line.get("labels") or {}).items()}
            lab["tenant_id"] = str(line.get("tenant", ""))
            lab["category"] = str(line.get("category", ""))
            if any(lab.get(k) != v for k, v in want.items()):
                continue
            out.append(
                CostEntry(
                    object_id=str(line["operation_id"]),
                    description=str(line.get("description", "")),
                    interval_start=_ts(line["at"]),
                    cost_usd=Decimal(str(line["amount"])),
                    labels=lab,
                )
            )
        return out

    async def admin(self, action: Mapping[str, Any], actor: str = "python") -> None:
        """An operator action (``{"action": "kill", "reason": ...}``), recorded."""
        rt = await self.runtime()
        try:
            text = await rt.admin(self.tenant, actor, json.dumps(dict(action)))
        except _native.NativeError as e:
            raise from_native(e) from None
        rec = json.loads(text)["record"]
        if rec.get("verdict") != "allow":
            raise SandboxioError(
                _redaction.redact(f"admin action refused: {rec.get('reason', '')}"),
                code=str(rec.get("error_code") or "SBX_E1501"),
                error_class="denied",
            )

    async def kill(self, reason: str, actor: str = "python") -> None:
        """Engages the kill switch: everything is denied until ``resume()``."""
        await self.admin({"action": "kill", "reason": reason}, actor)

    async def resume(self, actor: str = "python") -> None:
        await self.admin({"action": "resume"}, actor)

    async def tool_call(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        agent: str | None = None,
        estimate: Decimal | None = None,
        category: str | None = None,
        rationale: str | None = None,
    ) -> str:
        """A named tool call through the chain; the outcome JSON (one record)."""
        rt = await self.runtime()
        try:
            text: str = await rt.tool_call(
                self.tenant,
                agent,
                tool,
                json.dumps(dict(arguments)),
                str(estimate) if estimate is not None else None,
                category,
                rationale,
            )
        except _native.NativeError as e:
            raise from_native(e) from None
        return text

    def redact(self, text: str, secrets: Sequence[str] = ()) -> str:
        if self._rt is None:
            return _redaction.redact(text)
        try:
            return str(self._rt.redact(_redaction.redact(text), list(secrets)))
        except _native.NativeError:
            return _redaction.redact(text)

    def __repr__(self) -> str:
        state = "open" if self._rt is not None else "not opened"
        return f"<LocalBackend state_dir={self.state_dir} tenant={self.tenant} {state} caps={self.capabilities.names()}>"


class _LocalSession:
    """A gateway session in this process."""

    # The native methods themselves, bound per session: `Sandbox` calls them with no
    # Python frame of this class between (one fewer to run, cold, before each call).
    run_code: Callable[[str, str, str], Awaitable[Any]]
    read_file: Callable[[str, str | None], Awaitable[Any]]
    list_files: Callable[[str, str | None], Awaitable[Any]]
    write_file: Callable[[str, bytes, str | None], Awaitable[Any]]
    delete_file: Callable[[str, str | None], Awaitable[Any]]

    def __init__(self, native: Any) -> None:
        self._n = native
        self.run_code = native.run_code
        self.read_file = native.read_file
        # The gateway's file_read of a directory answers its listing.
        self.list_files = native.read_file
        self.write_file = native.write_file
        self.delete_file = native.delete_file

    @property
    def id(self) -> str:
        return str(self._n.id)

    @property
    def tier(self) -> str:
        return str(self._n.tier)

    @property
    def closed(self) -> bool:
        return self._n.closed  # type: ignore[no-any-return]

    def capabilities(self) -> int:
        return int(self._n.capabilities()) | int(Capability.STREAM.value)

    # Each operation answers the native call's awaitable itself (no coroutine of its
    # own): it resolves to the `Outcome` (``python/src/answer.rs``) or, in the
    # benchmark's JSON mode, its JSON. A coroutine here was one more frame to create
    # before the call and to resume, cold, after the event loop's thread woke for the
    # answer.

    def exec(self, argv: Sequence[str], options: str) -> Awaitable[Any]:
        return self._n.exec(list(argv), options)  # type: ignore[no-any-return]

    def stream(self, language: str | None, code: str | None, argv: Sequence[str] | None, options: str) -> Any:
        return self._n.stream(language, code, list(argv) if argv is not None else None, options)

    def settle(self) -> Awaitable[None]:
        """Until every operation whose awaitable was cancelled has ended: its program
        killed, its record (``cancelled``) written and its budget reservation released."""
        return self._n.settle()  # type: ignore[no-any-return]

    async def aclose(self) -> None:
        self._n.close()
