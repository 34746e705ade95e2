"""Seed 002's audit surface: AuditConfig per backend, frozen AuditEvent with as_dict(),
Python sinks awaited for every record, SBX_AUDIT_TIMEOUT under warn and fail, the
shipped sinks, QueueSink overflow, capture_code."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import warnings
from pathlib import Path

import pytest

from conftest import run
from sandboxio import (
    AuditConfig,
    AuditEvent,
    AuditSinkError,
    AuditSinkWarning,
    FileSink,
    InvalidArgument,
    LocalBackend,
    LoggingSink,
    NoopSink,
    QueueSink,
    Sandbox,
)


class ListSink:
    def __init__(self) -> None:
        self.events: list[AuditEvent] = []

    async def emit(self, event: AuditEvent) -> None:
        self.events.append(event)


class SlowSink:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.cancelled = 0

    async def emit(self, event: AuditEvent) -> None:
        try:
            await asyncio.sleep(self.seconds)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise


class BrokenSink:
    async def emit(self, event: AuditEvent) -> None:
        raise RuntimeError("disk on fire")


def test_a_python_sink_gets_one_frozen_event_per_record(state_dir: Path) -> None:
    sink = ListSink()
    b = LocalBackend(state_dir=state_dir, audit=AuditConfig(sinks=(sink,)))

    async def main() -> list[str]:
        async with await Sandbox.create(b) as sbx:
            ids = [(await sbx.run_code("print(1)")).record.operation_id]
            ids.append((await sbx.write_file("f.txt", "x")).operation_id)
            ids.append(((await sbx.run(["true"])).record.operation_id))
        return ids

    ids = run(main())
    assert [e.operation_id for e in sink.events] == ids
    ev = sink.events[0]
    assert ev.event == "run_code" and ev.backend and ev.duration_ms >= 0
    assert isinstance(sink.events[2].argv, tuple)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ev.event = "changed"  # type: ignore[misc]
    d = ev.as_dict()
    assert json.loads(json.dumps(d)) == d
    for key in ("ts", "event", "sandbox_id", "backend", "isolation", "tenant_id", "session_id",
                "code_sha256", "argv", "exit_code", "duration_ms", "bytes_in", "bytes_out", "network_denials"):
        assert key in d, key
    assert "code" not in d


def test_capture_code_adds_the_code_to_the_event(state_dir: Path) -> None:
    sink = ListSink()
    b = LocalBackend(state_dir=state_dir, audit=AuditConfig(sinks=(sink,), capture_code=True))

    async def main() -> None:
        async with await Sandbox.create(b) as sbx:
            r = await sbx.run_code("print('captured')")
            assert r.record.code == "print('captured')"

    run(main())
    assert sink.events[0].code == "print('captured')"
    assert sink.events[0].as_dict()["code"] == "print('captured')"


def test_a_sink_slower_than_the_timeout_warns_and_the_operation_proceeds(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SBX_AUDIT_TIMEOUT", "200ms")
    slow = SlowSink(3.0)
    after = ListSink()
    b = LocalBackend(state_dir=state_dir, audit=AuditConfig(sinks=(slow, after), on_sink_failure="warn"))

    async def main() -> str:
        async with await Sandbox.create(b) as sbx:
            return (await sbx.run_code("print('ran')")).stdout

    with pytest.warns(AuditSinkWarning, match="SlowSink.*timed out"):
        out = run(main())
    assert out.strip() == "ran"
    assert slow.cancelled >= 1, "the slow emit was not cancelled at the timeout"
    assert len(after.events) == 1, "the next sink still got the event"


def test_a_sink_slower_than_the_timeout_fails_the_operation_in_fail_mode(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SBX_AUDIT_TIMEOUT", "200ms")
    b = LocalBackend(state_dir=state_dir, audit=AuditConfig(sinks=(SlowSink(3.0),), on_sink_failure="fail"))
    left: list[str] = []

    async def main() -> None:
        async with await Sandbox.create(b) as sbx:
            try:
                await sbx.run(["sh", "-c", "echo ran > $SANDBOX_OUTPUT/marker"])
            finally:
                left.extend(p.name for p in Path(sbx._s._n.workspace).iterdir())  # noqa: SLF001

    with pytest.raises(AuditSinkError) as e:
        run(main())
    assert e.value.code == "SBX_E1601"
    assert left == [], "the command ran although its intent could not be recorded"


def test_a_failing_sink_in_fail_mode_stops_the_side_effect(state_dir: Path) -> None:
    b = LocalBackend(state_dir=state_dir, audit=AuditConfig(sinks=(BrokenSink(),), on_sink_failure="fail"))

    async def main() -> list[str]:
        async with await Sandbox.create(b) as sbx:
            with pytest.raises(AuditSinkError):
                await sbx.write_file("never.txt", "x")
            return [e.name for e in sbx_files(sbx)]

    def sbx_files(sbx: Sandbox) -> list[Path]:
        return list(Path(sbx._s._n.workspace).iterdir())  # noqa: SLF001 (the workspace on disk)

    assert run(main()) == []


def test_a_failing_sink_in_warn_mode_warns_with_its_error(state_dir: Path) -> None:
    b = LocalBackend(state_dir=state_dir, audit=AuditConfig(sinks=(BrokenSink(),)))

    async def main() -> None:
        async with await Sandbox.create(b) as sbx:
            await sbx.write_file("ok.txt", "x")

    with pytest.warns(AuditSinkWarning, match="disk on fire"):
        run(main())


def test_audit_config_rejects_bad_modes_and_sinks() -> None:
    with pytest.raises(InvalidArgument):
        AuditConfig(on_sink_failure="explode")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        AuditConfig(sinks=(object(),))  # type: ignore[arg-type]
    assert isinstance(AuditConfig().sinks[0], NoopSink)


def test_logging_sink_writes_one_json_line_and_configures_no_handler(
    state_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    before = list(logging.getLogger("sandboxio.audit").handlers)
    b = LocalBackend(state_dir=state_dir, audit=AuditConfig(sinks=(LoggingSink(),)))

    async def main() -> str:
        async with await Sandbox.create(b) as sbx:
            return (await sbx.run_code("print(1)")).record.operation_id

    with caplog.at_level(logging.INFO, logger="sandboxio.audit"):
        op = run(main())
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "sandboxio.audit"]
    assert [line["operation_id"] for line in lines] == [op]
    assert logging.getLogger("sandboxio.audit").handlers == before
    assert all(isinstance(h, logging.NullHandler) for h in logging.getLogger("sandboxio").handlers)


def test_file_sink_appends_the_same_json_line(state_dir: Path, tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    mine = ListSink()
    b = LocalBackend(state_dir=state_dir, audit=AuditConfig(sinks=(FileSink(path), mine)))

    async def main() -> None:
        async with await Sandbox.create(b) as sbx:
            await sbx.run_code("print(1)")
            await sbx.write_file("x", "y")

    run(main())
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines == [e.as_dict() for e in mine.events]
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_queue_sink_never_blocks_drops_oldest_on_overflow_and_drains() -> None:
    target = ListSink()
    q = QueueSink(target, maxsize=3)
    events = [AuditEvent.from_dict({"ts": "2026-01-01T00:00:00Z", "event": f"e{i}", "operation_id": str(i)}) for i in range(5)]

    async def main() -> None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for ev in events:
                await asyncio.wait_for(q.emit(ev), 0.05)  # never blocks
        assert [type(w.message) for w in caught] == [AuditSinkWarning, AuditSinkWarning]
        assert q.dropped == 2 and len(q) == 3
        async with asyncio.timeout(2) if hasattr(asyncio, "timeout") else _nullcontext():
            task = asyncio.create_task(q.drain())
            await asyncio.sleep(0.01)
            q.close()
            await task

    run(main())
    assert [e.event for e in target.events] == ["e2", "e3", "e4"]


class _nullcontext:
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *a: object) -> None:
        return None


def test_sinks_belong_to_their_backend_not_to_the_process(tmp_path: Path) -> None:
    one, two = ListSink(), ListSink()
    b1 = LocalBackend(state_dir=tmp_path / "s1", audit=AuditConfig(sinks=(one,)))
    b2 = LocalBackend(state_dir=tmp_path / "s2", audit=AuditConfig(sinks=(two,)))

    async def main() -> None:
        async with await Sandbox.create(b1) as a:
            await a.write_file("a", "1")
        async with await Sandbox.create(b2) as b:
            await b.write_file("b", "2")
            await b.write_file("c", "3")

    run(main())
    assert len(one.events) == 1 and len(two.events) == 2


def test_record_times_read_the_same_on_every_python() -> None:
    """The gateway writes RFC 3339 with nanoseconds and `Z`; Python 3.11+ reads it
    directly, 3.10 through the rewrite: both give the same aware time, cut to
    microseconds, offsets kept."""
    from sandboxio.events import _ts, _ts_compat

    for text in ("2026-12-01T13:00:00.123456789Z", "2026-12-01T13:00:00Z", "2026-12-01T13:00:00.1+02:00"):
        fast, compat = _ts(text), _ts_compat(text)
        assert fast == compat and fast.utcoffset() == compat.utcoffset(), text
        assert fast.tzinfo is not None
    assert _ts("2026-12-01T13:00:00.123456789Z").microsecond == 123456


def test_an_event_read_from_json_is_the_one_the_constructor_makes() -> None:
    """`AuditEvent.from_dict` fills the frozen instance's fields directly (no
    `__init__`): every field is set, with the types the constructor would be given."""
    from decimal import Decimal

    from sandboxio.events import IsolationTier

    record = {
        "ts": "2026-12-01T13:00:00.5Z", "event": "run_code", "sandbox_id": "s1", "backend": "namespace",
        "isolation": "namespace", "tenant_id": "t", "session_id": "sess", "code_sha256": "ab",
        "argv": ["sh", "-c", "true"], "exit_code": 0, "duration_ms": 12, "bytes_in": 3, "bytes_out": 4,
        "network_denials": 0, "code": "1+1", "operation_id": "op", "tool_name": "run_code",
        "agent_id": "a", "path": None, "signal": None, "status": "ok", "verdict": "allow",
        "layer": "sandbox", "rules": [{"id": "r", "file": "builtin:default.toml", "line": 1}, "plain"],
        "reason": "why", "error_code": None, "cost_reserved": "0", "cost_settled": "0.25",
        "approval_id": None, "approver": None, "trace_id": None, "span_id": None,
        "labels": {"b": "2", "a": "1"}, "enforcement": {"tier": "namespace"},
    }
    event = AuditEvent.from_dict(record)
    names = [f.name for f in dataclasses.fields(AuditEvent)]
    assert list(vars(event)) == names
    made = AuditEvent(**{n: getattr(event, n) for n in names})
    assert event == made and hash(event) == hash(made)
    assert event.isolation is IsolationTier.NAMESPACE and event.decision == "allow"
    assert event.rules == ("builtin:default.toml:r", "plain")
    assert event.cost_reserved == Decimal(0) and event.cost_settled == Decimal("0.25")
    assert event.labels == (("a", "1"), ("b", "2")) and event.argv == ("sh", "-c", "true")
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.status = "error"  # type: ignore[misc]
    assert AuditEvent.from_dict(record, capture_code=False).code is None
