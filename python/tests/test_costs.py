"""costs(since=, until=, labels=) answers CostEntry with Decimal amounts from the
gateway's settled ledger; a backend without Capability.COST_REPORTING raises
CapabilityNotSupported."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest

from conftest import run
from sandboxio import Backend, Capability, CapabilityNotSupported, CostEntry, InvalidArgument, LocalBackend, Sandbox

RATES = """
[budget]
default_estimate = "0"

[budget.rate_card]
cpu_second = "0.5"
gib_second = "0"
per_call = "0.01"
"""


def test_costs_are_decimal_entries_filtered_by_labels_and_time(state_dir: Path) -> None:
    b = LocalBackend(state_dir=state_dir, config_text=RATES, tenant="acme")
    start = datetime.now(timezone.utc) - timedelta(seconds=1)

    async def main() -> tuple[list[CostEntry], list[CostEntry], list[CostEntry], list[CostEntry]]:
        async with await Sandbox.create(b, labels={"experiment": "e1"}) as sbx:
            await sbx.run_code("x = sum(range(10**6))")
            await sbx.write_file("a.txt", "1")
        async with await Sandbox.create(b, labels={"experiment": "e2"}) as sbx:
            await sbx.write_file("b.txt", "2")
        every = await b.costs(since=start)
        e1 = await b.costs(since=start, labels={"experiment": "e1"})
        tenant = await b.costs(since=start, labels={"tenant_id": "acme"})
        future = await b.costs(since=datetime.now(timezone.utc) + timedelta(hours=1))
        return every, e1, tenant, future

    every, e1, tenant, future = run(main())
    assert len(every) == 3 and len(e1) == 2 and len(tenant) == 3 and future == []
    for e in every:
        assert isinstance(e.cost_usd, Decimal) and e.cost_usd > 0
        assert e.interval_start >= start
        assert e.labels["tenant_id"] == "acme"
    writes = [e for e in every if e.cost_usd == Decimal("0.01")]
    assert len(writes) == 2  # file writes pay the per-call price, exactly
    assert Capability.COST_REPORTING in b.capabilities


def test_costs_need_aware_times(backend: LocalBackend) -> None:
    with pytest.raises(InvalidArgument):
        run(backend.costs(since=datetime(2026, 1, 1)))


def test_a_backend_without_cost_reporting_says_so() -> None:
    class Minimal(Backend):
        name = "minimal"

        @property
        def capabilities(self) -> Capability:
            return Capability.RUN_CODE

    with pytest.raises(CapabilityNotSupported) as e:
        run(Minimal().costs(since=datetime.now(timezone.utc)))
    assert e.value.code == "SBX_E2103"
    assert "COST_REPORTING" in str(e.value)
