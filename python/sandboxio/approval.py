"""Approvals: an ``ask`` decision of the policy waits for a person or a callback. A
backend's ``approval=`` callback gets an ``ApprovalRequest`` and answers ``True``
(approve) or ``False`` (deny); it may be a coroutine function. Any other answer (``"no"``,
``1``, ``None``) denies, with a reason that says so: only ``True`` approves."""

from __future__ import annotations

import inspect
import json
import logging
from dataclasses import dataclass
from typing import Awaitable, Callable, Union

from sandboxio import _redaction

logger = logging.getLogger("sandboxio")


@dataclass(frozen=True)
class ApprovalRequest:
    id: str
    tenant: str
    operation: str
    rationale: str
    reason: str
    fingerprint: str


ApprovalCallback = Callable[[ApprovalRequest], Union[bool, Awaitable[bool]]]


class Decider:
    """Called by the gateway (on the caller's event loop) for each ``ask``."""

    def __init__(self, callback: ApprovalCallback, approver: str = "python-callback") -> None:
        self.callback = callback
        self.approver = approver

    async def decide_json(self, text: str) -> tuple[bool, str, str | None]:
        d = json.loads(text)
        req = ApprovalRequest(
            id=str(d.get("id", "")),
            tenant=str(d.get("tenant", "")),
            operation=str(d.get("operation", "")),
            rationale=str(d.get("rationale", "")),
            reason=str(d.get("reason", "")),
            fingerprint=str(d.get("fingerprint", "")),
        )
        answer = self.callback(req)
        if inspect.isawaitable(answer):
            answer = await answer
        if isinstance(answer, bool):
            return (answer, self.approver, None)
        # Only `True` approves: `"no"`, `"deny"`, `1`, `None` or any other value is not an
        # answer, and judging it by its truth would approve `"no"`.
        why = f"the approval callback answered {type(answer).__name__} `{answer!r}`, not True or False"
        self.report_failure(why)
        return (False, self.approver, why + ": denied")

    def report_failure(self, why: str) -> None:
        logger.warning("approval callback failed, the request is denied: %s", _redaction.redact(why))
