"""Fixtures: one real `sandboxio serve` with `[e2b] enabled = true`, a test policy and a
budget, and the environment the official E2B SDKs read (E2B_API_URL, E2B_SANDBOX_URL,
E2B_API_KEY = a sandboxio API key). The SDK programs under test are unmodified: they are
pointed at the server by those variables only."""

import json
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

BIN = os.environ.get("SANDBOXIO_BIN", "")
TIER = os.environ.get("SBX_E2B_TIER", "namespace")

POLICY = f"""[settings]
name = "e2b-tests"
description = "E2B SDK tests: commands run as /bin/bash -l -c <cmd>"

[[rule]]
id = "no-curl"
effect = "deny"
kind = "exec"
argv_glob = ["/bin/bash", "-l", "-c", "curl*"]
reason = "downloads are not allowed"

[[rule]]
id = "touch-needs-approval"
effect = "ask"
kind = "exec"
argv_glob = ["/bin/bash", "-l", "-c", "touch*"]
reason = "creating files from the shell needs a person's approval"

[[rule]]
id = "run-in-tier"
effect = "allow"
kind = ["exec", "run_code"]
tier = "{TIER}"
network = "none"
reason = "tests run commands in the configured tier"

[[rule]]
id = "kept-files-stay"
effect = "deny"
kind = "file_delete"
path = "kept/**"
reason = "files under kept/ are never deleted"

[[rule]]
id = "files-in-workspace"
effect = "allow"
kind = ["file_read", "file_write", "file_delete"]
in_workspace = true
reason = "files inside the workspace are allowed"
"""

CONFIG = f"""[sandbox]
tier = "{TIER}"

[e2b]
enabled = true

[e2b.templates.small]
memory = "256MiB"
pids = 64

[budget.rate_card]
per_call = "0.001"

[budget.tenants]
broke = "0.0001"
"""


class Server:
    def __init__(self, root: Path):
        self.root = root
        self.state = root / "state"
        (root / "policy.toml").write_text(POLICY)
        (root / "config.toml").write_text(CONFIG)
        self.common = [
            "--state-dir", str(self.state),
            "--policy", str(root / "policy.toml"),
            "--config", str(root / "config.toml"),
        ]
        self.proc = None
        self.url = ""

    def cli(self, *args: str) -> str:
        out = subprocess.run([BIN, *args, *self.common], capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        return out.stdout

    def key(self, tenant: str, scopes: str = "exec,run_code,files,read") -> str:
        return self.cli("keys", "create", "--tenant", tenant, "--scopes", scopes).strip()

    def start(self, listen: str = "127.0.0.1:0") -> None:
        # Sandbox env values are sealed under the secrets key: one of the test's own.
        env = {**os.environ, "SBX_SECRETS_KEY_FILE": str(self.root / "secrets.key")}
        self.proc = subprocess.Popen([BIN, "serve", "--listen", listen, *self.common],
                                     stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                     text=True, env=env)
        line = self.proc.stdout.readline()
        assert line.startswith("sandboxio serving"), line
        self.url = f"http://{line.split()[-1]}"

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=60)

    def events(self) -> list:
        p = self.state / "audit.jsonl"
        if not p.exists():
            return []
        return [json.loads(l) for l in p.read_text().splitlines() if l.strip()]

    def pending(self) -> list:
        return [a for a in json.loads(self.cli("approvals", "list", "--json") or "[]")
                if a.get("state") == "pending"]


@pytest.fixture(scope="session")
def server():
    assert BIN and Path(BIN).exists(), "SANDBOXIO_BIN must name the built sandboxio binary"
    with tempfile.TemporaryDirectory(prefix="sbx-e2b-") as d:
        s = Server(Path(d))
        s.acme = s.key("acme")
        s.broke = s.key("broke")
        s.start()
        try:
            yield s
        finally:
            s.stop()


@pytest.fixture(autouse=True)
def e2b_env(server, monkeypatch):
    """What a user of the SDK sets to use this server instead of E2B's cloud."""
    monkeypatch.setenv("E2B_API_URL", server.url)
    monkeypatch.setenv("E2B_SANDBOX_URL", server.url)
    monkeypatch.setenv("E2B_API_KEY", server.acme)
    monkeypatch.delenv("E2B_DEBUG", raising=False)
    yield
