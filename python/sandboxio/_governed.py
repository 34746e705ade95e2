"""A private in-process gateway for seed 000's ``SafetyBoundary`` and ``BudgetGuard``:
a state directory of its own, a policy and configuration written from the object's
fields, and a private event loop for their synchronous methods. Every decision is one
operation through the chain and leaves one record in that directory's audit trail."""

from __future__ import annotations

import asyncio
import json
import re
import tempfile
from pathlib import Path
from typing import Any, Coroutine, Sequence, TypeVar

from sandboxio.approval import ApprovalCallback
from sandboxio.audit import AuditConfig
from sandboxio.backends.local import LocalBackend
from sandboxio.errors import InvalidArgument

T = TypeVar("T")

_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")


def check_name(kind: str, name: str) -> str:
    if not _NAME.match(name):
        raise InvalidArgument(
            f"{kind} `{name}` must be 1-128 letters, digits, `_`, `.`, `:` or `-`"
        )
    return name


def toml_str(s: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's for these characters)."""
    return json.dumps(s)


class Governed:
    def __init__(
        self,
        *,
        policy_toml: str,
        config_toml: str,
        tools: Sequence[str],
        state_dir: str | Path | None,
        approval: ApprovalCallback | None = None,
        audit: AuditConfig | None = None,
        tenant: str = "default",
    ) -> None:
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if state_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="sandboxio-governed-")
            state_dir = self._tmp.name
        root = Path(state_dir)
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        policy = root / "policy.toml"
        policy.write_text(policy_toml)
        self.state_dir = root
        self.loop = asyncio.new_event_loop()
        self.backend = LocalBackend(
            state_dir=root,
            config_text=config_toml,
            policy=[policy],
            audit=audit,
            approval=approval,
            tenant=tenant,
            tools=tools,
        )

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        if not self.loop.is_closed():
            self.loop.close()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
