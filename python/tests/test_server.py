"""ServerBackend against a real `sandboxio serve` on loopback, with an API key: the same
Sandbox API, results, denials and trace propagation as in-process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest

from conftest import run
from sandboxio import Capability, OperationDenied, Sandbox, ServerBackend, StreamEvent


def _cli() -> str | None:
    helper = os.environ.get("SBX_HELPER", "")
    candidates = [os.environ.get("SBX_CLI", ""), str(Path(helper).with_name("sandboxio")) if helper else ""]
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return c
    return shutil.which("sandboxio")


@contextlib.contextmanager
def _serve(tmp_path: Path, *, scopes: str = "exec,run_code,files,read", args: tuple[str, ...] = ()) -> Iterator[tuple[str, str]]:
    cli = _cli()
    if cli is None:
        pytest.skip("no `sandboxio` binary found (set SBX_CLI): cannot start `sandboxio serve`")
    state = tmp_path / "server-state"
    key = json.loads(
        subprocess.run(
            [cli, "keys", "create", "--state-dir", str(state), "--json", "--tenant", "acme", "--scopes", scopes],
            check=True, capture_output=True, text=True, timeout=60,
        ).stdout
    )["token"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [cli, "serve", "--state-dir", str(state), "--listen", f"127.0.0.1:{port}", *args],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        env={**os.environ, "SBX_SECRETS_KEY_FILE": str(tmp_path / "secrets.key")},
    )
    try:
        for _ in range(200):
            try:
                with urllib.request.urlopen(url + "/healthz", timeout=1):
                    break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail(f"sandboxio serve exited: {proc.stderr.read().decode() if proc.stderr else ''}")
                time.sleep(0.1)
        yield url, key
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, str]]:
    with _serve(tmp_path) as s:
        yield s


def test_the_server_backend_runs_the_same_api(server: tuple[str, str], otel_exporter: Any) -> None:
    from opentelemetry import trace

    url, key = server
    b = ServerBackend(url, api_key=key)
    tracer = trace.get_tracer("host.agent")

    async def main() -> None:
        with tracer.start_as_current_span("invoke_agent remote") as agent:
            async with await Sandbox.create(b) as sbx:
                r = await sbx.run_code("print(6 * 7)")
                assert r.stdout.strip() == "42" and r.exit_code == 0
                assert r.record.trace_id == f"{agent.get_span_context().trace_id:032x}"
                await sbx.write_file("notes.txt", "remote")
                assert await sbx.read_text("notes.txt") == "remote"
                assert [e.name for e in await sbx.list_files()] == ["notes.txt"]
                e = await sbx.run(["sh", "-c", "exit 3"])
                assert e.exit_code == 3
                with pytest.raises(OperationDenied) as denied:
                    await sbx.read_file("../../etc/passwd")
                assert denied.value.code.startswith("SBX_E")
                evs = [(ev.kind, ev.text) async for ev in sbx.stream("print(1)")]
                assert evs[0] == ("stdout", "1\n") and evs[-1][0] == "exit"
                assert repr(sbx).startswith("<Sandbox server:")

    run(main())
    spans = [s for s in otel_exporter.get_finished_spans() if s.name == "execute_tool run_code"]
    assert spans and spans[-1].attributes["sandboxio.backend"] == "server"


def test_a_bad_key_is_a_coded_error(server: tuple[str, str]) -> None:
    url, _ = server
    from sandboxio import SandboxioError

    with pytest.raises(SandboxioError) as e:
        run(Sandbox.create(ServerBackend(url, api_key="sbxk_nope_nope")))
    assert e.value.code.startswith("SBX_E")


def test_the_server_backend_passes_bytes_as_stdin_exactly(server: tuple[str, str]) -> None:
    url, key = server
    data = bytes(range(256)) + b"\x00\xff"

    async def main() -> tuple[bytes, str]:
        async with await Sandbox.create(ServerBackend(url, api_key=key)) as sbx:
            raw = await sbx.run(["cat"], stdin=data)
            text = await sbx.run(["cat"], stdin="plain text")
            return raw.stdout_raw, text.stdout

    raw, text = run(main())
    assert raw == data
    assert text == "plain text"


# A program whose output comes in pieces, on both streams, some of it not UTF-8.
PIECES = (
    "import os, sys, time\n"
    "print('one', flush=True)\n"
    "time.sleep(0.4)\n"
    "print('two', file=sys.stderr, flush=True)\n"
    "time.sleep(0.4)\n"
    "os.write(1, bytes([0xff, 0x00, 0xfe]))\n"
    "time.sleep(0.4)\n"
    "sys.exit(4)\n"
)


def test_the_server_backend_streams_ordered_binary_safe_events_then_the_exit(server: tuple[str, str]) -> None:
    url, key = server

    async def main() -> list[StreamEvent]:
        async with await Sandbox.create(ServerBackend(url, api_key=key)) as sbx:
            assert Capability.STREAM in sbx.capabilities
            return [ev async for ev in sbx.stream(PIECES)]

    evs = run(main())
    kinds = [e.kind for e in evs]
    # Each piece is its own event (the program slept between them), in the order written.
    assert kinds == ["stdout", "stderr", "stdout", "exit"], kinds
    assert evs[0].data == b"one\n" and evs[1].data == b"two\n"
    assert evs[2].data == b"\xff\x00\xfe"
    assert evs[3].exit_code == 4
    assert [e.elapsed_us for e in evs] == sorted(e.elapsed_us for e in evs)


def _running(marker: str) -> list[int]:
    """Host pids whose command line holds `marker` (the sandbox's pid namespace is
    visible from the host's)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    out.append(int(d))
        except OSError:
            continue
    return out


def _gone(marker: str, within: float = 30.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not _running(marker):
            return True
        time.sleep(0.1)
    return False


def _records(tmp_path: Path, event: str) -> list[dict[str, Any]]:
    trail = tmp_path / "server-state" / "audit.jsonl"
    return [r for r in map(json.loads, trail.read_text().splitlines()) if r.get("event") == event]


@pytest.mark.parametrize("how", ["aclose", "task_cancel"])
def test_closing_a_server_stream_ends_the_command_on_the_server(server: tuple[str, str], tmp_path: Path, how: str) -> None:
    url, key = server
    # A unique argument names the sleeping grandchild on the host.
    marker = str(900000 + os.getpid() % 90000 + (1 if how == "aclose" else 2))
    cmd = f"sleep {marker} & echo started; wait"
    seen: list[int] = []

    async def main() -> None:
        async with await Sandbox.create(ServerBackend(url, api_key=key)) as sbx:
            if how == "aclose":
                async with contextlib.aclosing(sbx.stream(cmd=cmd)) as events:
                    async for ev in events:
                        assert ev.kind == "stdout" and ev.text == "started\n"
                        seen.extend(_running(marker))
                        break
            else:
                started = asyncio.Event()

                async def reader() -> None:
                    async for ev in sbx.stream(cmd=cmd):
                        if ev.kind == "stdout":
                            seen.extend(_running(marker))
                            started.set()

                task = asyncio.create_task(reader())
                await asyncio.wait_for(started.wait(), 120)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
            assert _gone(marker), f"`sleep {marker}` still runs after the stream was closed"
            # The server lists the process no more once its operation has returned.
            deadline = time.monotonic() + 30
            while True:
                status, _, raw = await sbx.backend.call("GET", f"/v1/sandboxes/{sbx.id}/processes")  # type: ignore[attr-defined]
                assert status == 200
                running = [p for p in json.loads(raw).get("processes", []) if p.get("state") == "running"]
                if not running or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.1)
            assert running == [], running

    run(main())
    assert seen, "the sleeping grandchild was never seen running: the test could not observe it"
    recs = [r for r in _records(tmp_path, "exec") if marker in " ".join(r.get("argv") or [])]
    assert len(recs) == 1 and recs[0]["status"] == "cancelled", recs


def test_the_server_backend_refuses_secrets_and_agent_it_cannot_send(server: tuple[str, str], tmp_path: Path) -> None:
    """The server's API has no field for a caller's secrets or agent: `secrets=` and
    `agent=` are refused with a typed error before anything is created, never dropped (the
    secrets would reach the server's trail and answers unredacted)."""
    from sandboxio import CapabilityNotSupported
    from sandboxio.errors import E_CAPABILITY_NOT_SUPPORTED

    url, key = server
    secret = "zq7-PROBE-SECRET-9x4w"
    b = ServerBackend(url, api_key=key)

    with pytest.raises(CapabilityNotSupported) as refused:
        run(Sandbox.create(b, secrets=[secret]))
    assert refused.value.code == E_CAPABILITY_NOT_SUPPORTED
    assert "secrets=" in str(refused.value) and secret not in str(refused.value)
    with pytest.raises(CapabilityNotSupported) as refused:
        run(b.create(agent="planner"))
    assert refused.value.code == E_CAPABILITY_NOT_SUPPORTED and "agent=" in str(refused.value)

    async def listed() -> list[Any]:
        status, _, raw = await b.call("GET", "/v1/sandboxes")
        assert status == 200
        return list(json.loads(raw)["sandboxes"])

    assert run(listed()) == []
    trail = tmp_path / "server-state" / "audit.jsonl"
    text = trail.read_text() if trail.exists() else ""
    assert secret not in text and "sandbox.create" not in text

    # Without them the same backend works.
    async def plain() -> str:
        async with await Sandbox.create(b) as sbx:
            return (await sbx.run(["echo", "ok"])).stdout

    assert run(plain()) == "ok\n"
