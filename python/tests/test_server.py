"""ServerBackend against a real `sandboxio serve` on loopback, with an API key: the same
Sandbox API, results, denials and trace propagation as in-process."""

from __future__ import annotations

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
from sandboxio import CapabilityNotSupported, OperationDenied, Sandbox, ServerBackend


def _cli() -> str | None:
    helper = os.environ.get("SBX_HELPER", "")
    candidates = [os.environ.get("SBX_CLI", ""), str(Path(helper).with_name("sandboxio")) if helper else ""]
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return c
    return shutil.which("sandboxio")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, str]]:
    cli = _cli()
    if cli is None:
        pytest.skip("no `sandboxio` binary found (set SBX_CLI): cannot start `sandboxio serve`")
    state = tmp_path / "server-state"
    key = json.loads(
        subprocess.run(
            [cli, "keys", "create", "--state-dir", str(state), "--json", "--tenant", "acme",
             "--scopes", "exec,run_code,files,read"],
            check=True, capture_output=True, text=True, timeout=60,
        ).stdout
    )["token"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [cli, "serve", "--state-dir", str(state), "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
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
                with pytest.raises(CapabilityNotSupported):
                    async for _ in sbx.stream("print(1)"):
                        pass
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
