"""The in-process backend answers the package's values made from the gateway's structs
(python/src/answer.rs), not the outcome's JSON: they must be what the JSON path makes
(`AuditEvent.from_dict`, `ExecResult.from_outcome`), which the other backends still use.
A Python sink gets each record through JSON, so it is the reference for the records."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timezone
from pathlib import Path
from typing import Any, Iterator

import pytest

from conftest import run
from sandboxio import (
    AuditConfig,
    AuditEvent,
    ExecResult,
    LocalBackend,
    OperationDenied,
    Sandbox,
    _native,
)
from sandboxio.events import IsolationTier

# Not UTF-8 on stdout, text on stderr, a non-zero exit.
CODE = "import sys; sys.stdout.buffer.write(b'ok \\xff\\xfe end\\n'); print('warn', file=sys.stderr); sys.exit(3)"


class ListSink:
    def __init__(self) -> None:
        self.events: list[AuditEvent] = []

    async def emit(self, event: AuditEvent) -> None:
        self.events.append(event)


@pytest.fixture
def json_answers() -> Iterator[Any]:
    """Switches the native module to the JSON answer (the path before) and back."""
    yield _native._bench_json_answer
    _native._bench_json_answer(False)


def test_records_are_the_ones_parsed_from_json(state_dir: Path) -> None:
    sink = ListSink()
    b = LocalBackend(state_dir=state_dir, audit=AuditConfig(sinks=(sink,), capture_code=True))

    async def main() -> list[AuditEvent]:
        async with await Sandbox.create(b, labels={"team": "a", "b": "2"}) as sbx:
            records = [(await sbx.run_code(CODE)).record]
            records.append((await sbx.run(["sh", "-c", "kill -9 $$"])).record)
            records.append(await sbx.write_file("f.txt", "x"))
            with pytest.raises(OperationDenied) as denied:
                await sbx.run_code("1", network=True)
            assert denied.value.record is not None
            records.append(denied.value.record)
            return records

    records = run(main())
    by_id = {e.operation_id: e for e in sink.events}
    for rec in records:
        parsed = by_id[rec.operation_id]
        for f in dataclasses.fields(AuditEvent):
            mine, theirs = getattr(rec, f.name), getattr(parsed, f.name)
            assert mine == theirs and type(mine) is type(theirs), (f.name, mine, theirs)
        assert rec == parsed
        assert rec.ts.tzinfo is timezone.utc and rec.ts.tzinfo is parsed.ts.tzinfo
        assert rec.as_dict() == parsed.as_dict()
    assert records[0].isolation is IsolationTier.NAMESPACE and records[0].code == CODE
    labels = records[0].labels
    assert ("b", "2") in labels and ("team", "a") in labels and list(labels) == sorted(labels)
    assert records[1].signal == 9 and records[1].argv == ("sh", "-c", "kill -9 $$")
    assert records[3].decision == "deny" and records[0].rules == ("builtin:default.toml:run-in-namespace",)


def test_the_code_stays_out_of_the_record_without_capture_code(state_dir: Path) -> None:
    async def main() -> ExecResult:
        async with await Sandbox.create(LocalBackend(state_dir=state_dir)) as sbx:
            return await sbx.run_code("print(1)")

    r = run(main())
    assert r.record.code is None and r.record.code_sha256


def test_results_are_the_ones_parsed_from_json(state_dir: Path, json_answers: Any) -> None:
    async def main() -> list[ExecResult]:
        async with await Sandbox.create(LocalBackend(state_dir=state_dir)) as sbx:
            results = []
            for as_json in (True, False):
                json_answers(as_json)
                results.append(await sbx.run_code(CODE))
                results.append(await sbx.run(["sh", "-c", "kill -9 $$"]))
                results.append(await sbx.run_code("import time; time.sleep(5)", timeout=0.3))
            await sbx.write_file("g.txt", b"\x00\x01 bytes")
            listed = await sbx.list_files(".")
            read = await sbx.read_file("g.txt")
            json_answers(True)
            assert await sbx.list_files(".") == listed
            assert await sbx.read_file("g.txt") == read == b"\x00\x01 bytes"
            return results

    results = run(main())
    half = len(results) // 2
    for parsed, mine in zip(results[:half], results[half:]):
        assert type(mine) is ExecResult
        for f in dataclasses.fields(ExecResult):
            if f.name in ("duration_ms", "sandbox_id", "record"):
                continue
            a, b = getattr(parsed, f.name), getattr(mine, f.name)
            assert a == b and type(a) is type(b), (f.name, a, b)
        assert type(mine.duration_ms) is int and mine.duration_ms >= 0
        assert mine.sandbox_id == mine.record.sandbox_id
    code, killed, slow = results[half:]
    assert code.stdout_raw == b"ok \xff\xfe end\n" and code.stdout == "ok \ufffd\ufffd end\n"
    assert code.stderr == "warn\n" and code.exit_code == 3 and not code.ok
    assert killed.signal == 9 and killed.exit_code is None
    assert slow.timed_out


def test_a_concurrent_burst_answers_each_call_its_own_values(backend: LocalBackend) -> None:
    async def main() -> None:
        async with await Sandbox.create(backend) as sbx:
            rs = await asyncio.gather(*(sbx.run_code(f"print({i})") for i in range(4)))
            assert [r.stdout for r in rs] == [f"{i}\n" for i in range(4)]
            assert len({r.record.operation_id for r in rs}) == 4

    run(main())


def test_the_record_is_made_on_first_use_and_is_then_an_ordinary_field(state_dir: Path) -> None:
    import copy
    import pickle

    async def main() -> None:
        async with await Sandbox.create(LocalBackend(state_dir=state_dir)) as sbx:
            r, other = await sbx.run_code("print(1)"), await sbx.run_code("print(1)")
        # Checked here: `asyncio.run` reprs its task's result (so, its record) at exit.
        # Not made yet: the instance holds the native record instead of the field.
        assert "record" not in vars(r) and type(vars(r)["_record"]) is _native.LazyRecord
        rec = r.record
        assert type(rec) is AuditEvent and rec.event == "run_code" and rec.decision == "allow"
        assert r.record is rec and vars(r)["record"] is rec and "_record" not in vars(r)
        assert all(f.name in vars(r) for f in dataclasses.fields(ExecResult))
        # Copies and pickles of one not yet made carry the record.
        assert "_record" in vars(other)
        assert copy.copy(other).record == other.record and "_record" not in vars(copy.copy(other))
        assert pickle.loads(pickle.dumps(other)) == other
        assert dataclasses.replace(r, stdout="x").record is rec
        assert r != other and r.record.operation_id != other.record.operation_id
        assert not hasattr(ExecResult, "record")  # no class-level default appeared
        made = ExecResult("", "", 0, None, False, False, 1, "s", rec)
        assert made.record is rec and vars(made)["record"] is rec

    run(main())
