"""Cancelling a non-streaming operation (its task cancelled, or `asyncio.wait_for` timing
out) kills the program and still ends the operation in the gateway: one record with
status `cancelled`, the journal closed and the budget reservation released, so the next
operation of the tenant is not held against it."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from conftest import make_backend, run
from sandboxio import Sandbox

# Each call reserves its worst case (2 s at 1000 milli-CPU: 1.0 + 0.001), so a single leaked
# reservation leaves too little of the 1.50 for the next call.
TIGHT_BUDGET = """
[limits]
cpu_millis = 1000
timeout = "2s"
[budget]
currency = "USD"
per_tenant = "1.50"
[budget.rate_card]
cpu_second = "0.5"
per_call = "0.001"
"""


def _trail(state_dir: Path) -> list[dict[str, Any]]:
    path = state_dir / "audit.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_cancelled_run_is_recorded_cancelled_and_releases_its_reservation(state_dir: Path) -> None:
    backend = make_backend(state_dir, config_text=TIGHT_BUDGET)

    async def main() -> tuple[float, list[int]]:
        async with await Sandbox.create(backend) as sbx:
            assert (await sbx.run(["true"])).ok
            task = asyncio.create_task(sbx.run(["sleep", "90"]))
            await asyncio.sleep(0.5)
            t0 = time.monotonic()
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            else:
                raise AssertionError("the run was not cancelled")
            waited = time.monotonic() - t0
            # The reservation of the cancelled run is released: these fit in the budget.
            codes = [(await sbx.run(["true"])).exit_code for _ in range(3)]
            return waited, codes

    waited, codes = run(main())
    # Far below the command's 90 s: the cancel did not wait for the command.
    assert waited < 60, f"CancelledError came after {waited:.1f} s"
    assert codes == [0, 0, 0]
    trail = _trail(state_dir)
    sleeps = [r for r in trail if r.get("argv") == ["sleep", "90"]]
    assert len(sleeps) == 1, trail
    assert sleeps[0]["status"] == "cancelled", sleeps[0]
    assert "cancel" in sleeps[0]["reason"]
    # Every operation has its record: the first run, the cancelled one and the three after.
    assert len([r for r in trail if r.get("event") == "exec"]) == 5


def test_run_code_cut_by_wait_for_is_recorded_cancelled(state_dir: Path) -> None:
    backend = make_backend(state_dir, config_text=TIGHT_BUDGET)

    async def main() -> int:
        async with await Sandbox.create(backend) as sbx:
            try:
                await asyncio.wait_for(sbx.run_code("import time; time.sleep(5)"), 0.5)
            except asyncio.TimeoutError:
                pass
            else:
                raise AssertionError("the code was not cut")
            return (await sbx.run_code("print(1)")).exit_code

    assert run(main()) == 0
    trail = [r for r in _trail(state_dir) if r.get("event") == "run_code"]
    assert [r["status"] for r in trail] == ["cancelled", "ok"], trail
