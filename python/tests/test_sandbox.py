"""The Sandbox API: create, run, run_code, stream, files, close, async with, the sync
wrapper, typed results and errors, repr and capabilities. Each call is a real operation
through the gateway (namespace tier) with one record."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import run
from sandboxio import (
    Capability,
    ExecResult,
    InvalidArgument,
    LocalBackend,
    OperationDenied,
    Sandbox,
    SandboxClosed,
    SyncSandbox,
)


def test_run_code_answers_a_typed_result_with_its_record(backend: LocalBackend) -> None:
    async def main() -> ExecResult:
        async with await Sandbox.create(backend) as sbx:
            return await sbx.run_code("import sys; print(6 * 7); print('e', file=sys.stderr); sys.exit(3)")

    r = run(main())
    assert isinstance(r, ExecResult)
    assert r.stdout.strip() == "42"
    assert r.stderr.strip() == "e"
    assert r.exit_code == 3 and not r.ok and not r.timed_out
    assert r.record.event == "run_code"
    assert r.record.decision == "allow"
    assert r.record.isolation is not None and r.record.isolation.value == "namespace"
    assert r.record.code_sha256 and len(r.record.code_sha256) == 64
    assert r.record.code is None  # not captured by default


def test_run_takes_a_shell_string_or_an_argv(backend: LocalBackend) -> None:
    async def main() -> tuple[ExecResult, ExecResult]:
        async with await Sandbox.create(backend) as sbx:
            a = await sbx.run("echo $((2 + 3))")
            b = await sbx.run(["sh", "-c", "echo \"$GREETING\""], env={"GREETING": "hello"})
            return a, b

    a, b = run(main())
    assert a.stdout.strip() == "5" and a.record.argv == ("sh", "-c", "echo $((2 + 3))")
    assert b.stdout.strip() == "hello"


def test_files_round_trip_and_programs_see_the_workspace(backend: LocalBackend) -> None:
    async def main() -> tuple[bytes, list[str], str, bytes]:
        async with await Sandbox.create(backend) as sbx:
            await sbx.write_file("data.csv", "a,b\n1,2\n")
            await sbx.write_file("bin.dat", b"\x00\xff\x01")
            content = await sbx.read_file("data.csv")
            names = [e.name for e in await sbx.list_files()]
            r = await sbx.run_code(
                "import os\n"
                "rows = open(os.path.join(os.environ['SANDBOX_INPUT'], 'data.csv')).read().splitlines()\n"
                "open(os.path.join(os.environ['SANDBOX_OUTPUT'], 'n.txt'), 'w').write(str(len(rows)))\n"
                "print(len(rows))"
            )
            out = await sbx.read_text("n.txt")
            binary = await sbx.read_file("bin.dat")
            await sbx.delete_file("bin.dat")
            assert "bin.dat" not in [e.name for e in await sbx.list_files(".")]
            return content, names, r.stdout.strip() + "/" + out, binary

    content, names, seen, binary = run(main())
    assert content == b"a,b\n1,2\n"
    assert {"data.csv", "bin.dat"} <= set(names)
    assert seen == "2/2"
    assert binary == b"\x00\xff\x01"


def test_a_path_outside_the_workspace_is_denied_with_a_code(backend: LocalBackend) -> None:
    async def main() -> None:
        async with await Sandbox.create(backend) as sbx:
            await sbx.read_file("../../etc/passwd")

    with pytest.raises(OperationDenied) as e:
        run(main())
    assert re.fullmatch(r"SBX_E\d{4}", e.value.code)
    assert e.value.record is not None and e.value.record.decision == "deny"
    assert e.value.layer == "policy"
    assert any("operation" in n for n in getattr(e.value, "__notes__", []))


def test_stream_yields_output_while_it_runs_then_the_exit(backend: LocalBackend) -> None:
    async def main() -> list[tuple[str, str]]:
        async with await Sandbox.create(backend) as sbx:
            return [
                (ev.kind, ev.text)
                async for ev in sbx.stream("import sys, time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.3)\nsys.exit(4)")
            ]

    events = run(main())
    text = "".join(t for k, t in events if k == "stdout")
    assert text.split() == ["0", "1", "2"]
    assert events[-1][0] == "exit"
    assert sum(1 for k, _ in events if k == "stdout") >= 2, "output arrived in one piece, not streamed"


def test_timeouts_are_results_not_exceptions(backend: LocalBackend) -> None:
    async def main() -> ExecResult:
        async with await Sandbox.create(backend) as sbx:
            return await sbx.run_code("import time; time.sleep(30)", timeout=0.5)

    r = run(main())
    assert r.timed_out and r.exit_code != 0


def test_closed_sandboxes_refuse_work_and_close_is_idempotent(backend: LocalBackend) -> None:
    async def main() -> Sandbox:
        sbx = await Sandbox.create(backend)
        await sbx.close()
        await sbx.close()
        with pytest.raises(SandboxClosed) as e:
            await sbx.run_code("print(1)")
        assert e.value.code == "SBX_E2102"
        return sbx

    sbx = run(main())
    assert sbx.closed and " closed " in repr(sbx)


def test_bad_input_is_a_coded_error_that_changes_nothing(backend: LocalBackend) -> None:
    async def main() -> None:
        async with await Sandbox.create(backend) as sbx:
            with pytest.raises(InvalidArgument) as e:
                await sbx.run_code("print(1)", language="cobol")
            assert e.value.code.startswith("SBX_E") and "cobol" in str(e.value)
            with pytest.raises(InvalidArgument):
                await sbx.run_code("print(1)", timeout=-1)
            with pytest.raises(InvalidArgument):
                await sbx.run([])
            assert (await sbx.run_code("print('still fine')")).stdout.strip() == "still fine"

    run(main())
    with pytest.raises(InvalidArgument):
        run(Sandbox.create(backend, tier="warp-drive"))
    # A tier this build has no backend for: refused at create, with the reason.
    with pytest.raises(InvalidArgument) as e:
        run(Sandbox.create(backend, tier="microvm"))
    assert "microvm" in str(e.value)


BINARY_STDIN = bytes(range(256)) + b"\x00\xff\xfe\r\n"


def test_stdin_takes_bytes_and_passes_them_exactly(backend: LocalBackend) -> None:
    async def main() -> tuple[ExecResult, ExecResult, ExecResult]:
        async with await Sandbox.create(backend) as sbx:
            raw = await sbx.run(["cat"], stdin=BINARY_STDIN)
            view = await sbx.run(["cat"], stdin=memoryview(bytearray(b"\x00view")))
            code = await sbx.run_code(
                "import sys; d = sys.stdin.buffer.read(); print(len(d), d[:2].hex(), d[-3:].hex())",
                stdin=BINARY_STDIN,
            )
            with pytest.raises(InvalidArgument):
                await sbx.run(["cat"], stdin=42)  # type: ignore[arg-type]
            return raw, view, code

    raw, view, code = run(main())
    assert raw.ok and raw.stdout_raw == BINARY_STDIN
    assert view.stdout_raw == b"\x00view"
    assert code.stdout.split() == [str(len(BINARY_STDIN)), "0001", "fe0d0a"]


def test_repr_and_capabilities_follow_the_seed_shape(backend: LocalBackend) -> None:
    async def main() -> Sandbox:
        sbx = await Sandbox.create(backend)
        assert Capability.RUN_CODE in sbx.capabilities and Capability.FILESYSTEM in sbx.capabilities
        assert Capability.NETWORK not in sbx.capabilities
        text = repr(sbx)
        assert re.fullmatch(r"<Sandbox local:[0-9a-f]{4}… namespace running caps=[A-Z_|]+>", text), text
        assert "RUN_CODE|FILESYSTEM" in text
        await sbx.close()
        return sbx

    run(main())


def test_the_sync_wrapper_runs_without_an_event_loop(backend: LocalBackend) -> None:
    with SyncSandbox.create(backend) as sbx:
        sbx.write_file("x.txt", "hi")
        assert sbx.read_text("x.txt") == "hi"
        assert sbx.run_code("print(1 + 1)").stdout.strip() == "2"
        assert [e.kind for e in sbx.stream("print('s')")][-1] == "exit"
        assert [e.name for e in sbx.list_files()] == ["x.txt"]


def test_every_operation_leaves_one_record_in_the_trail(backend: LocalBackend, state_dir: Path) -> None:
    async def main() -> list[str]:
        ids = []
        async with await Sandbox.create(backend) as sbx:
            ids.append((await sbx.run_code("print(1)")).record.operation_id)
            ids.append((await sbx.write_file("a.txt", "a")).operation_id)
            ids.append((await sbx.delete_file("a.txt")).operation_id)
        return ids

    ids = run(main())
    trail = [json.loads(line) for line in (state_dir / "audit.jsonl").read_text().splitlines() if line.strip()]
    for op in ids:
        assert sum(1 for e in trail if e.get("operation_id") == op) == 1, op


def test_stream_events_keep_their_stream_and_bytes_and_closing_early_kills_the_program(backend: LocalBackend) -> None:
    import contextlib
    import os
    import time

    from test_server import PIECES, _gone, _running

    marker = str(800000 + os.getpid() % 90000)

    async def main() -> tuple[list[tuple[str, bytes]], list[int]]:
        async with await Sandbox.create(backend) as sbx:
            evs = [(ev.kind, ev.data) async for ev in sbx.stream(PIECES)]
            seen: list[int] = []
            async with contextlib.aclosing(sbx.stream(cmd=f"sleep {marker} & echo started; wait")) as events:
                async for ev in events:
                    assert ev.text == "started\n"
                    seen = _running(marker)
                    break
            t = time.monotonic()
            assert _gone(marker), f"`sleep {marker}` outlived its stream ({time.monotonic() - t:.1f}s)"
            return evs, seen

    evs, seen = run(main())
    assert [k for k, _ in evs] == ["stdout", "stderr", "stdout", "exit"], evs
    assert evs[1][1] == b"two\n" and evs[2][1] == b"\xff\x00\xfe"
    assert seen, "the sleeping grandchild was never seen running"
