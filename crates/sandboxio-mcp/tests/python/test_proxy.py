"""The proxy with a real upstream: `upstream_server.py` (the official SDK's MCPServer)
configured as `[[mcp.upstream]]` of `sandboxio mcp`, the official SDK's client on the
other side.

- Confinement: the upstream runs in the namespace tier with its data directory mounted
  read-only; the host asks it (through the proxy) to read a host file outside that
  directory and /etc/shadow, and to connect to a loopback listener the test holds open,
  and sees all three fail, while the same probes succeed from an upstream in the process
  tier (so they can fail). An argument rule denies one read and allows another; each
  tools/call leaves one record. As the test's user and, when that is root, as uid 65534.
- Resources and prompts: listed namespaced, each read or get one operation decided by
  policy and recorded, results redacted, and the upstream's list_changed notifications
  forwarded to the client.
"""

import json
import os
import shutil
import socket
import subprocess
import tempfile
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

from conftest import BIN

HERE = Path(__file__).resolve().parent
NOBODY = 65534
TOKEN = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
SECRET = "host-only-secret-7f3a"
# The upstream's interpreter: a venv on the system's /usr/bin/python3 with the SDK
# (scripts/setup.d/mcp.sh), mounted at its own path; /usr is in every sandbox's root.
VENV = Path(os.environ.get("SBX_MCP_UPSTREAM_VENV", "/nonexistent"))
PYTHON = VENV / "bin" / "python"

POLICY = """[settings]
name = "mcp-proxy-python-tests"
description = "the test upstream; reads of /data/private and one resource and prompt denied"

[[rule]]
id = "start-upstream"
effect = "allow"
kind = "exec"
argv_prefix = ["{python}"]
reason = "the test upstream's interpreter"

[[rule]]
id = "upstream-all"
effect = "allow"
kind = "tool_call"
tool = "up__*"
reason = "the test upstream"

[[rule]]
id = "no-private"
effect = "deny"
kind = "tool_call"
tool = "up__read"
args = [{{ pointer = "/path", glob = "/data/private/**" }}]
reason = "the private directory is not for agents"

[[rule]]
id = "no-private-notes"
effect = "deny"
kind = "tool_call"
tool = "up__resources/read"
args = [{{ pointer = "/uri", equals = "notes://private" }}]
reason = "private notes are not for agents"

[[rule]]
id = "no-mallory"
effect = "deny"
kind = "tool_call"
tool = "up__prompts/get"
args = [{{ pointer = "/arguments/name", equals = "mallory" }}]
reason = "no prompts about mallory"
"""


def is_root() -> bool:
    return os.geteuid() == 0


def runners() -> list:
    """The test's own user, and uid 65534 too when that is root."""
    return [None, NOBODY] if is_root() else [None]


class World:
    """A directory the upstream's user can read: data/ (mounted into the sandbox), a
    host file outside it, the policy and config, the state directory."""

    def __init__(self, root: Path, tier: str, uid):
        self.root = root
        self.uid = uid
        self.state = root / "state"
        data = root / "data"
        (data / "private").mkdir(parents=True)
        (data / "notes.txt").write_text("a note for agents")
        (data / "readme.txt").write_text("readme text")
        (data / "private" / "secret.txt").write_text("private data")
        outside = root / "outside"
        outside.mkdir()
        self.host_file = outside / "host-secret.txt"
        self.host_file.write_text(SECRET)
        (root / "policy.toml").write_text(POLICY.format(python=PYTHON))
        if tier == "namespace":
            # Inside: the data at /data, the server at /upstream, the venv at its own path.
            command = [str(PYTHON), "/upstream/upstream_server.py"]
            mounts = [f"{data}:/data:ro", f"{HERE}:/upstream:ro", f"{VENV}:{VENV}:ro"]
            env = {"UPSTREAM_DATA": "/data"}
            self.data_in = "/data"
        else:
            # The process tier has no mount namespace: the host's paths as they are.
            command = [str(PYTHON), str(HERE / "upstream_server.py")]
            mounts = []
            env = {"UPSTREAM_DATA": str(data)}
            self.data_in = str(data)
        (root / "config.toml").write_text(
            f'[sandbox]\ntier = "{tier}"\n\n[[mcp.upstream]]\nname = "up"\n'
            f"command = {json.dumps(command)}\nmounts = {json.dumps(mounts)}\n"
            f'tier = "{tier}"\nenv = {{ UPSTREAM_DATA = "{env["UPSTREAM_DATA"]}" }}\n'
            'call_timeout = "60s"\nstart_timeout = "120s"\n'
        )
        for p in [root, *root.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
            if uid is not None:
                os.chown(p, uid, uid)

    def command(self) -> tuple[str, list[str], dict]:
        args = ["mcp", "--tenant", "acme", "--state-dir", str(self.state),
                "--policy", str(self.root / "policy.toml"),
                "--config", str(self.root / "config.toml")]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.root)}
        if self.uid is None:
            return BIN, args, env
        return "/usr/bin/setpriv", [f"--reuid={self.uid}", f"--regid={self.uid}",
                                    "--clear-groups", BIN, *args], env

    def events(self) -> list[dict]:
        p = self.state / "audit.jsonl"
        if not p.exists():
            return []
        return [json.loads(l) for l in p.read_text().splitlines() if l.strip()]

    def calls(self) -> list[dict]:
        return [e for e in self.events()
                if e.get("event") == "tool_call" and e.get("tool_name", "").startswith("up__")]


def namespace_available(uid) -> str | None:
    """Why the namespace tier cannot run here for `uid`, or None when it can."""
    prefix = [] if uid is None else ["/usr/bin/setpriv", f"--reuid={uid}", f"--regid={uid}",
                                     "--clear-groups"]
    out = subprocess.run([*prefix, BIN, "doctor", "--json"], capture_output=True, text=True,
                         timeout=120, cwd="/", env={"PATH": os.environ.get("PATH", ""),
                                                    "HOME": "/tmp"})
    try:
        tiers = dict(json.loads(out.stdout)["tiers"])
    except (ValueError, KeyError):
        return f"doctor gave no report: {out.stderr[-300:]}"
    ns = tiers.get("namespace", {})
    return None if ns.get("available") else ns.get("detail", "namespace tier unavailable")


@pytest.fixture
def world_factory():
    if not PYTHON.exists():
        pytest.skip(f"no upstream interpreter at {PYTHON} (SBX_MCP_UPSTREAM_VENV; "
                    "scripts/setup.d/mcp.sh makes it from /usr/bin/python3)")
    made = []

    def make(tier: str, uid=None) -> World:
        d = Path(tempfile.mkdtemp(prefix="sbx-mcp-proxy-"))
        made.append(d)
        return World(d, tier, uid)

    yield make
    for d in made:
        shutil.rmtree(d, ignore_errors=True)


@asynccontextmanager
async def session(world: World, on_message=None):
    command, args, env = world.command()
    params = StdioServerParameters(command=command, args=args, env=env, cwd=str(world.root))

    async def handler(m):
        if on_message is not None:
            on_message(m)

    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w, message_handler=handler) as s:
            await s.initialize()
            yield s


def text(r) -> str:
    return "".join(getattr(c, "text", "") for c in r.content)


@pytest.fixture
def listener():
    """A loopback listener on the host; nothing else connects to it."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    s.setblocking(False)
    yield s
    s.close()


def accepted(s: socket.socket) -> bool:
    try:
        conn, _ = s.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


@pytest.mark.anyio
async def test_the_probes_succeed_from_an_upstream_in_the_process_tier(world_factory, listener):
    """The control: outside a boundary the same calls read the host file and connect, so
    their failure in the namespace tier is the sandbox's doing."""
    world = world_factory("process")
    port = listener.getsockname()[1]
    async with session(world) as s:
        r = await s.call_tool("up__read", {"path": str(world.host_file)})
        assert SECRET in text(r), r
        r = await s.call_tool("up__connect", {"host": "127.0.0.1", "port": port})
        assert text(r) == "connected", r
    with anyio.fail_after(10):
        while not accepted(listener):
            await anyio.sleep(0.05)


@pytest.mark.anyio
@pytest.mark.parametrize("uid", runners(), ids=lambda u: "self" if u is None else f"uid{u}")
async def test_an_upstream_in_the_namespace_tier_is_confined_and_decided_per_argument(
        world_factory, listener, uid):
    why = namespace_available(uid)
    if why is not None:
        pytest.skip(f"the namespace tier cannot run as {uid or 'this user'} here: {why}")
    world = world_factory("namespace", uid)
    port = listener.getsockname()[1]
    async with session(world) as s:
        names = {t.name for t in (await s.list_tools()).tools}
        assert {"up__read", "up__connect", "exec"} <= names, names
        # Inside its allowed directory: allowed by policy, readable.
        r = await s.call_tool("up__read", {"path": "/data/notes.txt"})
        assert not r.is_error and text(r) == "a note for agents", r
        # A host file outside its mount (world-readable on the host): not there.
        r = await s.call_tool("up__read", {"path": str(world.host_file)})
        assert SECRET not in text(r) and text(r).startswith("cannot read"), r
        # /etc/shadow: the sandbox's /etc is its own.
        r = await s.call_tool("up__read", {"path": "/etc/shadow"})
        assert "root:" not in text(r) and text(r).startswith("cannot read"), r
        # The network: the host's loopback listener is out of reach.
        r = await s.call_tool("up__connect", {"host": "127.0.0.1", "port": port})
        assert text(r).startswith("cannot connect"), r
        # The argument rule: the private directory is denied before the upstream sees it.
        r = await s.call_tool("up__read", {"path": "/data/private/secret.txt"})
        assert r.is_error, r
        d = r.structured_content
        assert d["layer"] == "policy" and d["code"] == "SBX_E1550", d
        assert any("no-private" in rule for rule in d["rules"]), d
        assert "private data" not in text(r)
        r = await s.call_tool("up__whoami", {})
        assert not r.is_error, r
    assert not accepted(listener), "the sandboxed upstream reached the host's listener"
    calls = world.calls()
    assert len(calls) == 6, [c["tool_name"] for c in calls]
    assert len({c["operation_id"] for c in calls}) == 6
    denied = [c for c in calls if c["decision"] == "deny"]
    assert [c["arguments"]["path"] for c in denied] == ["/data/private/secret.txt"]
    # The upstream's own process: one exec operation, in the namespace tier.
    with anyio.fail_after(60):
        while not [e for e in world.events() if e.get("event") == "exec"]:
            await anyio.sleep(0.1)
    start = [e for e in world.events() if e.get("event") == "exec"]
    assert len(start) == 1 and start[0]["isolation"] == "namespace", start


@pytest.mark.anyio
async def test_resources_and_prompts_pass_through_under_policy(world_factory):
    world = world_factory("process")
    seen = []
    async with session(world, on_message=lambda m: seen.append(getattr(m, "method", None))) as s:
        resources = {r.name: r for r in (await s.list_resources()).resources}
        assert {"up__readme", "up__token", "up__private"} <= set(resources), resources
        readme = str(resources["up__readme"].uri)
        assert readme.startswith("sandboxio://up/"), readme
        r = await s.read_resource(readme)
        assert r.contents[0].text == "readme text", r
        assert str(r.contents[0].uri) == readme, r
        # A credential in a resource is redacted before it reaches the client.
        r = await s.read_resource(str(resources["up__token"].uri))
        assert "the deploy token is" in r.contents[0].text
        assert TOKEN not in r.contents[0].text, r
        # A resource denied by an argument rule: an error naming the layer and rule.
        with pytest.raises(MCPError) as denied:
            await s.read_resource(str(resources["up__private"].uri))
        assert denied.value.error.data["code"] == "SBX_E1550", denied.value.error
        assert any("no-private-notes" in x for x in denied.value.error.data["rules"])
        # A template expands to a URI that reads through the proxy.
        templates = (await s.list_resource_templates()).resource_templates
        t = [x for x in templates if x.name == "up__note"][0]
        assert "{name}" in t.uri_template, t
        r = await s.read_resource(t.uri_template.replace("{name}", "abc"))
        assert r.contents[0].text == "note abc", r
        # Prompts: namespaced, got with arguments, one denied on its argument.
        prompts = {p.name for p in (await s.list_prompts()).prompts}
        assert "up__greet" in prompts, prompts
        p = await s.get_prompt("up__greet", {"name": "Ada"})
        assert "Say hello to Ada." in p.messages[0].content.text, p
        with pytest.raises(MCPError) as denied:
            await s.get_prompt("up__greet", {"name": "mallory"})
        assert denied.value.error.data["layer"] == "policy", denied.value.error
        # Unknown names are refused without reaching an upstream.
        with pytest.raises(MCPError):
            await s.read_resource("notes://readme")
        # The upstream's list_changed notifications reach this client.
        r = await s.call_tool("up__grow", {})
        assert text(r) == "grown", r
        with anyio.fail_after(30):
            while not {"notifications/resources/list_changed",
                       "notifications/prompts/list_changed"} <= set(seen):
                await anyio.sleep(0.05)
        assert "up__later" in {r.name for r in (await s.list_resources()).resources}
        assert "up__later" in {p.name for p in (await s.list_prompts()).prompts}
    calls = world.calls()
    reads = [c for c in calls if c["tool_name"] == "up__resources/read"]
    gets = [c for c in calls if c["tool_name"] == "up__prompts/get"]
    assert [c["arguments"]["uri"] for c in reads] == [
        "notes://readme", "notes://token", "notes://private", "notes://abc"], reads
    assert [c["decision"] for c in reads] == ["allow", "allow", "deny", "allow"], reads
    assert [c["decision"] for c in gets] == ["allow", "deny"], gets
    assert gets[0]["arguments"] == {"name": "greet", "arguments": {"name": "Ada"}}, gets
    assert TOKEN not in (world.state / "audit.jsonl").read_text()
