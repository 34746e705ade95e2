"""Seed 000's ``SafetyBoundary`` (action allowlist, rate limits, human approval, kill
switch) on the gateway: ``check(action)`` is a ``tool_call`` operation through the chain
(kill switch, policy, rate limit, approval), so every decision leaves a record; ``kill()``
engages the gateway's persisted kill switch (a recorded admin operation)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from sandboxio._governed import Governed, check_name, toml_str
from sandboxio.approval import ApprovalRequest
from sandboxio.audit import AuditConfig
from sandboxio.events import AuditEvent


def _window(seconds: float) -> str:
    ms = int(round(seconds * 1000))
    if ms < 1:
        raise ValueError(f"a rate-limit window must be at least 1 ms, got `{seconds}` s")
    return f"{ms}ms"


@dataclass
class SafetyBoundary:
    """Enforces action allowlists, rate limits, approvals and a kill switch."""

    allowed_actions: set[str]
    rate_limits: dict[str, tuple[int, float]] = field(default_factory=dict)  # action -> (max_count, window_seconds)
    human_approval_actions: set[str] = field(default_factory=set)
    state_dir: Optional[Path] = None
    audit: Optional[AuditConfig] = None
    agent: Optional[str] = None
    _approval_callback: Optional[Callable[[str, str], bool]] = None
    _gov: Optional[Governed] = field(default=None, repr=False)
    _asking: tuple[str, str] = ("", "")
    last_record: Optional[AuditEvent] = None

    def _governed(self) -> Governed:
        if self._gov is not None:
            return self._gov
        rules = []
        for i, action in enumerate(sorted(self.allowed_actions)):
            check_name("action", action)
            effect = "ask" if action in self.human_approval_actions else "allow"
            why = "needs a person's approval" if effect == "ask" else "is on the allowlist"
            rules.append(
                f"[[rule]]\nid = \"action-{i}\"\neffect = \"{effect}\"\nkind = \"tool_call\"\n"
                f"tool = {toml_str(action)}\nreason = {toml_str(f'action `{action}` {why}')}\n"
            )
        policy = (
            "[settings]\nname = \"safety-boundary\"\n"
            "description = \"the allowlist of a SafetyBoundary; anything else is denied\"\n\n"
            + "\n".join(rules)
        )
        limits = []
        for action, (count, window) in sorted(self.rate_limits.items()):
            check_name("action", action)
            limits.append(
                f"[[rate_limits.limit]]\naction = {toml_str(action)}\n"
                f"limit = \"{int(count)}/{_window(window)}\"\nper = \"action\"\n"
            )
        self._gov = Governed(
            policy_toml=policy,
            config_toml="\n".join(limits),
            tools=sorted(self.allowed_actions),
            state_dir=self.state_dir,
            approval=self._decide,
            audit=self.audit,
        )
        return self._gov

    def _decide(self, req: ApprovalRequest) -> bool:
        action, rationale = self._asking
        if self._approval_callback is None:
            return False  # no callback registered; deny
        return bool(self._approval_callback(action, rationale or req.rationale))

    def set_approval_callback(self, callback: Callable[[str, str], bool]) -> None:
        """Register a function that asks a human for approval.
        Signature: callback(action, rationale) -> bool.
        """
        self._approval_callback = callback

    def kill(self, reason: str = "SafetyBoundary.kill()") -> None:
        """Activate the kill switch. All future checks fail."""
        gov = self._governed()
        gov.run(gov.backend.kill(reason))

    def resume(self) -> None:
        """Release the kill switch (a recorded operator action)."""
        gov = self._governed()
        gov.run(gov.backend.resume())

    def check(self, action: str, rationale: str = "") -> bool:
        """Return True if the action is permitted right now (one recorded operation)."""
        gov = self._governed()
        self._asking = (action, rationale)
        text = gov.run(
            gov.backend.tool_call(
                action, {"rationale": rationale} if rationale else {}, agent=self.agent, rationale=rationale or None
            )
        )
        rec = AuditEvent.from_dict(json.loads(text)["record"])
        self.last_record = rec
        return rec.decision == "allow" and rec.status == "ok"

    def close(self) -> None:
        if self._gov is not None:
            self._gov.close()
            self._gov = None
