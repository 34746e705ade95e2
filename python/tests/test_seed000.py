"""Seed 000's listings with minimal change: run_in_sandbox (SandboxConfig, SandboxResult,
SANDBOX_OUTPUT / SANDBOX_INPUT), SafetyBoundary and BudgetGuard, backed by the gateway so
each decision leaves a record."""

from __future__ import annotations

import json
import logging
import shutil
from decimal import Decimal
from pathlib import Path

import pytest

from sandboxio import (
    BudgetGuard,
    CostCategory,
    InvalidArgument,
    LocalBackend,
    OperationDenied,
    SafetyBoundary,
    SandboxConfig,
    run_in_sandbox,
)


def trail(state_dir: Path) -> list[dict[str, object]]:
    path = state_dir / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_run_in_sandbox_listing(tmp_path: Path, state_dir: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "measurements.csv").write_text("x\n1\n2\n3\n")
    script = tmp_path / "experiment.py"
    script.write_text(
        "import os\n"
        "rows = open(os.path.join(os.environ['SANDBOX_INPUT'], 'measurements.csv')).read().split()[1:]\n"
        "total = sum(int(r) for r in rows)\n"
        "open(os.path.join(os.environ['SANDBOX_OUTPUT'], 'result.txt'), 'w').write(str(total))\n"
        "print('sum', total)\n"
    )
    backend = LocalBackend(state_dir=state_dir)

    result = run_in_sandbox(script, SandboxConfig(timeout_seconds=60), input_dir=data, backend=backend)

    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == "sum 6"
    assert not result.timed_out
    assert (result.output_dir / "result.txt").read_text() == "6"
    assert [e["event"] for e in trail(state_dir) if e.get("event") == "run_code"] == ["run_code"]
    shutil.rmtree(result.output_dir.parent)


def test_run_in_sandbox_times_out_like_the_listing(tmp_path: Path, state_dir: Path) -> None:
    script = tmp_path / "slow.py"
    script.write_text("import time\ntime.sleep(60)\n")
    result = run_in_sandbox(script, SandboxConfig(timeout_seconds=1), backend=LocalBackend(state_dir=state_dir))
    assert result.timed_out and result.exit_code == -1
    assert result.stderr == "Process killed: exceeded timeout"


def test_run_in_sandbox_script_cannot_write_its_input_or_reach_the_network(tmp_path: Path, state_dir: Path) -> None:
    data = tmp_path / "in"
    data.mkdir()
    (data / "keep.txt").write_text("original")
    script = tmp_path / "bad.py"
    script.write_text(
        "import os, socket\n"
        "try:\n"
        "    open(os.path.join(os.environ['SANDBOX_INPUT'], 'keep.txt'), 'w').write('changed')\n"
        "    print('wrote input')\n"
        "except OSError:\n"
        "    print('input read-only')\n"
        "try:\n"
        "    socket.create_connection(('127.0.0.1', 22), timeout=2)\n"
        "    print('network reachable')\n"
        "except OSError:\n"
        "    print('no network')\n"
    )
    result = run_in_sandbox(script, SandboxConfig(timeout_seconds=30), input_dir=data, backend=LocalBackend(state_dir=state_dir))
    assert result.stdout.split("\n")[:2] == ["input read-only", "no network"]
    assert (data / "keep.txt").read_text() == "original"


def test_run_in_sandbox_network_needs_policy(tmp_path: Path, state_dir: Path) -> None:
    script = tmp_path / "net.py"
    script.write_text("print(1)\n")
    with pytest.raises(OperationDenied):
        run_in_sandbox(script, SandboxConfig(allowed_network=True), backend=LocalBackend(state_dir=state_dir))
    with pytest.raises(InvalidArgument):
        run_in_sandbox(script, SandboxConfig(readonly_paths=["/etc"]), backend=LocalBackend(state_dir=state_dir))


def test_safety_boundary_listing(tmp_path: Path) -> None:
    asked: list[tuple[str, str]] = []
    boundary = SafetyBoundary(
        allowed_actions={"run_experiment", "query_database", "submit_for_review"},
        rate_limits={"run_experiment": (2, 60.0)},
        human_approval_actions={"submit_for_review"},
        state_dir=tmp_path / "boundary",
    )
    try:
        assert boundary.check("run_experiment", "first")
        assert boundary.check("run_experiment", "second")
        assert not boundary.check("run_experiment", "third: over the rate limit")
        assert boundary.last_record is not None and boundary.last_record.layer == "rate_limit"
        assert not boundary.check("delete_artifacts", "not on the allowlist")
        assert boundary.last_record.layer == "policy"
        assert not boundary.check("submit_for_review", "no callback registered")

        def approve(action: str, rationale: str) -> bool:
            asked.append((action, rationale))
            return rationale == "results look right"

        boundary.set_approval_callback(approve)
        assert boundary.check("submit_for_review", "results look right")
        assert not boundary.check("submit_for_review", "please")
        assert asked == [("submit_for_review", "results look right"), ("submit_for_review", "please")]

        boundary.kill()
        assert not boundary.check("query_database")
        assert boundary.last_record.layer == "kill_switch"
    finally:
        boundary.close()


def test_safety_boundary_decisions_are_recorded(tmp_path: Path) -> None:
    state = tmp_path / "b"
    boundary = SafetyBoundary(allowed_actions={"a"}, state_dir=state)
    try:
        assert boundary.check("a")
        assert not boundary.check("b")
        boundary.kill("stop everything")
    finally:
        boundary.close()
    events = trail(state)
    assert [(e["tool_name"], e["decision"]) for e in events if e.get("event") == "tool_call"] == [
        ("a", "allow"),
        ("b", "deny"),
    ]
    kills = [e for e in events if e.get("event") == "admin" and "kill" in json.dumps(e)]
    assert len(kills) == 1, [e.get("event") for e in events]


def test_budget_guard_listing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    guard = BudgetGuard(ceiling_usd=100.0, state_dir=tmp_path / "budget")
    try:
        with caplog.at_level(logging.INFO, logger="sandboxio.budget"):
            assert guard.request(CostCategory.COMPUTE, 45.50, "GPU hours for sweep 1")
            assert guard.request(CostCategory.API, 30.25, "LLM planner calls")
            assert not guard.request(CostCategory.COMPUTE, 30.00, "sweep 2 would pass the ceiling")
            assert guard.request(CostCategory.STORAGE, 10.00, "checkpoints")
        assert guard.total_spent == Decimal("85.75")
        assert guard.remaining == Decimal("14.25")
        s = guard.summary()
        assert s == {
            "compute": Decimal("45.5"),
            "api": Decimal("30.25"),
            "storage": Decimal("10"),
            "human": Decimal("0"),
            "total": Decimal("85.75"),
            "remaining": Decimal("14.25"),
        }
        assert all(isinstance(v, Decimal) for v in s.values())
        messages = [r.getMessage() for r in caplog.records]
        assert any(m.startswith("Budget DENIED") for m in messages)
        assert any(m.startswith("Budget WARNING") for m in messages)  # 85.75 >= 80 % of 100
        assert guard.last_record is not None and guard.last_record.decision == "allow"
        with pytest.raises(InvalidArgument):
            guard.request(CostCategory.API, -1)
    finally:
        guard.close()
