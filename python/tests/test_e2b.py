"""E2BBackend over the official E2B SDK, against a real `sandboxio serve` with its
E2B-compatible API: the same Sandbox API, results and denials as the other backends."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

from conftest import run
from sandboxio import Capability, CapabilityNotSupported, InvalidArgument, OperationDenied, Sandbox
from sandboxio.backends.e2b import E2BBackend

POLICY = """[settings]
name = "e2b-backend-tests"
description = "namespace tier; curl denied"

[[rule]]
id = "no-curl"
effect = "deny"
kind = "exec"
argv_glob = ["/bin/bash", "-l", "-c", "curl*"]
reason = "downloads are not allowed"

[[rule]]
id = "run"
effect = "allow"
kind = ["exec", "run_code"]
network = "none"
reason = "tests run commands"

[[rule]]
id = "files-in-workspace"
effect = "allow"
kind = ["file_read", "file_write", "file_delete"]
in_workspace = true
reason = "files inside the workspace are allowed"
"""


def _cli() -> str | None:
    helper = os.environ.get("SBX_HELPER", "")
    candidates = [os.environ.get("SBX_CLI", ""), str(Path(helper).with_name("sandboxio")) if helper else ""]
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return c
    return shutil.which("sandboxio")


@pytest.fixture
def e2b_server(tmp_path: Path) -> Iterator[tuple[str, str, Path]]:
    try:
        import e2b  # noqa: F401
    except ImportError:
        pytest.skip("the E2B SDK is not installed (pip install 'sandboxio[e2b]'): cannot test E2BBackend")
    cli = _cli()
    if cli is None:
        pytest.skip("no `sandboxio` binary found (set SBX_CLI): cannot start `sandboxio serve`")
    (tmp_path / "policy.toml").write_text(POLICY)
    (tmp_path / "config.toml").write_text("[e2b]\nenabled = true\n")
    common = ["--state-dir", str(tmp_path / "state"), "--policy", str(tmp_path / "policy.toml"),
              "--config", str(tmp_path / "config.toml")]
    key = subprocess.run(
        [cli, "keys", "create", "--tenant", "acme", "--scopes", "exec,run_code,files,read", *common],
        check=True, capture_output=True, text=True, timeout=60,
    ).stdout.strip()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([cli, "serve", "--listen", f"127.0.0.1:{port}", *common],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "SBX_SECRETS_KEY_FILE": str(tmp_path / "secrets.key")})
    try:
        for _ in range(200):
            try:
                with urllib.request.urlopen(url + "/healthz", timeout=1):
                    break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail(f"sandboxio serve exited: {proc.stderr.read().decode() if proc.stderr else ''}")
                time.sleep(0.1)
        yield url, key, tmp_path / "state"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _records(state: Path, sandbox_id: str) -> list[dict[str, object]]:
    lines = (state / "audit.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("session_id") == sandbox_id]


def test_the_e2b_backend_runs_the_same_api(e2b_server: tuple[str, str, Path]) -> None:
    url, key, state = e2b_server
    b = E2BBackend(api_key=key, api_url=url, sandbox_url=url)
    ids = []

    async def main() -> None:
        async with await Sandbox.create(b, labels={"job": "e2b-backend"}) as sbx:
            ids.append(sbx.id)
            r = await sbx.run(["echo", "hello"])
            assert r.stdout == "hello\n" and r.exit_code == 0 and r.ok
            r = await sbx.run_code("print(6 * 7)")
            assert r.stdout.strip() == "42"
            e = await sbx.run(["sh", "-c", "exit 3"])
            assert e.exit_code == 3 and not e.ok
            await sbx.write_file("notes.txt", "remote")
            assert await sbx.read_text("notes.txt") == "remote"
            assert [(f.name, f.is_dir) for f in await sbx.list_files()] == [("notes.txt", False)]
            await sbx.delete_file("notes.txt")
            assert await sbx.list_files() == []
            with pytest.raises(OperationDenied) as denied:
                await sbx.run(["curl", "http://example.invalid/"])
            assert denied.value.code == "SBX_E1550"
            with pytest.raises(CapabilityNotSupported):
                async for _ in sbx.stream("print(1)"):
                    pass
            assert repr(sbx).startswith("<Sandbox e2b:")

    run(main())
    # The server's chain decided each call and wrote its record: the denial is there.
    recs = _records(state, ids[0])
    execs = [(r["event"], r["decision"]) for r in recs if r.get("event") in ("exec", "file_write", "file_delete")]
    assert execs.count(("exec", "allow")) == 3 and execs.count(("exec", "deny")) == 1, execs
    assert ("file_write", "allow") in execs and ("file_delete", "allow") in execs, execs


def test_the_e2b_backend_reports_no_costs_and_takes_no_tier(e2b_server: tuple[str, str, Path]) -> None:
    from datetime import datetime, timezone

    url, key, _ = e2b_server
    b = E2BBackend(api_key=key, api_url=url, sandbox_url=url)
    assert Capability.COST_REPORTING not in b.capabilities
    assert Capability.EXEC in b.capabilities and Capability.FILESYSTEM in b.capabilities
    with pytest.raises(CapabilityNotSupported):
        run(b.costs(since=datetime.now(timezone.utc)))
    with pytest.raises(InvalidArgument):
        run(Sandbox.create(b, tier="namespace"))


def test_the_e2b_backend_answers_the_programs_bytes_exactly(e2b_server: tuple[str, str, Path]) -> None:
    """`stdout_raw`/`stderr_raw` are the bytes the program wrote (the server sends them
    exactly), not the SDK's text with replacement characters; `stdout` is their text."""
    url, key, _ = e2b_server
    b = E2BBackend(api_key=key, api_url=url, sandbox_url=url)
    # Every byte value, split across the server's reads at every offset, then a UTF-8
    # character cut in two at the end.
    big = bytes(range(256)) * 400 + b"\xc3"
    program = (
        "import sys; sys.stdout.buffer.write(bytes(range(256)) * 400 + b'\\xc3'); "
        "sys.stderr.buffer.write(b'\\x00\\xfe\\xff err')"
    )

    async def main() -> None:
        async with await Sandbox.create(b) as sbx:
            r = await sbx.run(["sh", "-c", "printf '\\000\\377\\376abc'"])
            assert r.stdout_raw == b"\x00\xff\xfeabc" and r.exit_code == 0
            assert r.stdout == "\x00\ufffd\ufffdabc"
            r = await sbx.run_code(program)
            assert r.exit_code == 0, r.stderr
            assert r.stdout_raw == big and r.stderr_raw == b"\x00\xfe\xff err"
            assert r.stdout_bytes == len(big)
            r = await sbx.run(["sh", "-c", "printf 'h\\303\\251'; printf '\\377' >&2; exit 4"])
            assert (r.stdout_raw, r.stderr_raw, r.exit_code) == ("hé".encode(), b"\xff", 4)
            assert r.stdout == "hé"

    run(main())
