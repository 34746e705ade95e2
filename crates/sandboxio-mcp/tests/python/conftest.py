"""Fixtures: the sandboxio binary, a state directory with a test policy, and MCP client
sessions of the official Python SDK over both transports (stdio: `sandboxio mcp`;
streamable HTTP: `sandboxio serve` at /mcp with an API key)."""

import json
import os
import subprocess
import tempfile
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

BIN = os.environ.get("SANDBOXIO_BIN", "")

POLICY = """[settings]
name = "mcp-python-tests"
description = "process tier; curl denied; touch needs approval"

[[rule]]
id = "run-in-process"
effect = "allow"
kind = ["exec", "run_code"]
tier = "process"
network = "none"
reason = "tests run commands in the process tier"

[[rule]]
id = "no-curl"
effect = "deny"
kind = "exec"
argv_prefix = ["curl"]
reason = "downloads are not allowed"

[[rule]]
id = "touch-needs-approval"
effect = "ask"
kind = "exec"
argv_prefix = ["touch"]
reason = "creating files from the shell needs a person's approval"

[[rule]]
id = "files-in-workspace"
effect = "allow"
kind = ["file_read", "file_write", "file_delete"]
in_workspace = true
reason = "files inside the workspace are allowed"
"""


class Env:
    def __init__(self, root: Path):
        self.root = root
        self.state = root / "state"
        (root / "policy.toml").write_text(POLICY)
        (root / "config.toml").write_text('[sandbox]\ntier = "process"\n')
        self.common = [
            "--state-dir", str(self.state),
            "--policy", str(root / "policy.toml"),
            "--config", str(root / "config.toml"),
        ]

    def cli(self, *args: str) -> str:
        out = subprocess.run([BIN, *args, "--state-dir", str(self.state), "--config",
                              str(self.root / "config.toml")],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return out.stdout

    def pending(self) -> list[dict]:
        return [a for a in json.loads(self.cli("approvals", "list", "--json") or "[]")
                if a.get("state") == "pending"]

    def events(self) -> list[dict]:
        p = self.state / "audit.jsonl"
        if not p.exists():
            return []
        return [json.loads(l) for l in p.read_text().splitlines() if l.strip()]


@pytest.fixture
def env():
    assert BIN and Path(BIN).exists(), "SANDBOXIO_BIN must name the built sandboxio binary"
    with tempfile.TemporaryDirectory(prefix="sbx-mcp-py-") as d:
        yield Env(Path(d))


@pytest.fixture
def anyio_backend():
    return "asyncio"
