"""Seed 000's ``BudgetGuard`` on the gateway's budget layer: ``request(category,
amount)`` is a ``tool_call`` operation with that estimate and category, so the gateway
reserves it against the ceiling in its store (Decimal, never float) and records the
decision; totals come from the gateway's settled ledger."""

from __future__ import annotations

import enum
import json
import logging
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Optional, Union

from sandboxio._governed import Governed
from sandboxio.audit import AuditConfig
from sandboxio.errors import InvalidArgument
from sandboxio.events import AuditEvent

logger = logging.getLogger("sandboxio.budget")

TOOL = "budget.request"
Amount = Union[Decimal, float, int, str]


class CostCategory(enum.Enum):
    COMPUTE = "compute"
    API = "api"
    STORAGE = "storage"
    HUMAN = "human"


def money(value: Amount, what: str = "amount") -> Decimal:
    try:
        d = Decimal(str(value))
    except InvalidOperation:
        raise InvalidArgument(f"{what} `{value}` is not a number") from None
    if not d.is_finite() or d < 0:
        raise InvalidArgument(f"{what} `{value}` must be a finite, non-negative amount")
    return d


@dataclass
class BudgetGuard:
    """Tracks cumulative spending and enforces a hard ceiling (in the gateway)."""

    ceiling_usd: Amount
    warn_fraction: float = 0.8  # warn at 80% of ceiling
    state_dir: Optional[Path] = None
    audit: Optional[AuditConfig] = None
    _gov: Optional[Governed] = field(default=None, repr=False)
    last_record: Optional[AuditEvent] = None

    def __post_init__(self) -> None:
        self.ceiling = money(self.ceiling_usd, "ceiling_usd")
        if not 0 < self.warn_fraction <= 1:
            raise InvalidArgument(f"warn_fraction `{self.warn_fraction}` must be in (0, 1]")

    def _governed(self) -> Governed:
        if self._gov is None:
            config = (
                "[budget]\n"
                f"global = \"{format(self.ceiling, 'f')}\"\n"
                f"warn_fraction = {float(self.warn_fraction)}\n"
                "default_estimate = \"0\"\n\n"
                "[budget.rate_card]\ncpu_second = \"0\"\ngib_second = \"0\"\nper_call = \"0\"\n"
            )
            policy = (
                "[settings]\nname = \"budget-guard\"\n"
                "description = \"budget requests are allowed by policy; the budget layer decides\"\n\n"
                f"[[rule]]\nid = \"budget-requests\"\neffect = \"allow\"\nkind = \"tool_call\"\ntool = \"{TOOL}\"\n"
                "reason = \"a budget request is decided by the budget layer\"\n"
            )
            self._gov = Governed(
                policy_toml=policy, config_toml=config, tools=[TOOL], state_dir=self.state_dir, audit=self.audit
            )
        return self._gov

    def _spent(self) -> dict[CostCategory, Decimal]:
        gov = self._governed()
        entries = gov.run(gov.backend.costs(since=datetime(1970, 1, 1, tzinfo=timezone.utc)))
        out = {c: Decimal(0) for c in CostCategory}
        for e in entries:
            cat = CostCategory(e.labels.get("category", "compute"))
            out[cat] += e.cost_usd
        return out

    @property
    def total_spent(self) -> Decimal:
        return sum(self._spent().values(), Decimal(0))

    @property
    def remaining(self) -> Decimal:
        return max(Decimal(0), self.ceiling - self.total_spent)

    def request(self, category: CostCategory, amount_usd: Amount, description: str = "") -> bool:
        """Attempt to spend. Returns True if within budget (one recorded operation)."""
        amount = money(amount_usd, "amount_usd")
        gov = self._governed()
        text = gov.run(
            gov.backend.tool_call(
                TOOL,
                {"description": description, "category": category.value},
                estimate=amount,
                category=category.value,
                rationale=description or None,
            )
        )
        rec = AuditEvent.from_dict(json.loads(text)["record"])
        self.last_record = rec
        if rec.decision != "allow":
            logger.warning(
                "Budget DENIED: %s (%s USD) would exceed ceiling (%s / %s spent): %s",
                description, amount, self.total_spent, self.ceiling, rec.reason,
            )
            return False
        total = self.total_spent
        if total >= self.ceiling * Decimal(str(self.warn_fraction)):
            logger.warning(
                "Budget WARNING: %.1f%% consumed (%s / %s USD)",
                100 * total / self.ceiling if self.ceiling else 100.0, total, self.ceiling,
            )
        else:
            logger.info(
                "Budget OK: %s charged %s USD (%s). Remaining: %s",
                category.value, amount, description, self.remaining,
            )
        return True

    def summary(self) -> dict[str, Decimal]:
        """Return a breakdown of spending by category."""
        spent = self._spent()
        total = sum(spent.values(), Decimal(0))
        return {c.value: spent[c] for c in CostCategory} | {
            "total": total,
            "remaining": max(Decimal(0), self.ceiling - total),
        }

    def close(self) -> None:
        if self._gov is not None:
            self._gov.close()
            self._gov = None
