"""sandboxio's MCP server against the official Python MCP SDK, over stdio
(`sandboxio mcp`) and streamable HTTP (`sandboxio serve`, /mcp, bearer API key): the
tool list, a call, a denial, an ask approved from the CLI, a cancellation."""

import subprocess
from contextlib import asynccontextmanager

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from conftest import BIN

TRANSPORTS = ["stdio", "http"]


@asynccontextmanager
async def session(env, transport):
    if transport == "stdio":
        params = StdioServerParameters(command=BIN, args=["mcp", "--tenant", "acme", *env.common])
        async with stdio_client(params) as (r, w):
            async with ClientSession(r, w) as s:
                await s.initialize()
                yield s
        return
    key = env.cli("keys", "create", "--tenant", "acme", "--scopes", "exec,run_code,files").strip()
    server = subprocess.Popen([BIN, "serve", "--listen", "127.0.0.1:0", *env.common],
                              stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        line = server.stdout.readline()
        assert line.startswith("sandboxio serving"), line
        url = f"http://{line.split()[-1]}/mcp"
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
        async with http:
            async with streamable_http_client(url, http_client=http) as (r, w):
                async with ClientSession(r, w) as s:
                    await s.initialize()
                    yield s
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.anyio
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_tool_list_and_a_call(env, transport):
    async with session(env, transport) as s:
        tools = {t.name: t for t in (await s.list_tools()).tools}
        assert {"run_code", "exec", "read_file", "write_file", "list_files",
                "create_sandbox", "close_sandbox"} <= set(tools)
        assert tools["exec"].annotations.destructive_hint is True
        assert tools["read_file"].annotations.read_only_hint is True
        assert tools["run_code"].output_schema is not None
        r = await s.call_tool("run_code", {"language": "python", "code": "print(6 * 7)"})
        assert not r.is_error, r
        assert r.structured_content["stdout"] == "42\n"
        op = r.structured_content["operation_id"]
    recs = [e for e in env.events() if e.get("operation_id") == op]
    assert len(recs) == 1 and recs[0]["event"] == "run_code"


@pytest.mark.anyio
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_denial_names_layer_and_rule(env, transport):
    async with session(env, transport) as s:
        r = await s.call_tool("exec", {"argv": ["curl", "http://example.invalid/"]})
        assert r.is_error
        d = r.structured_content
        assert d["layer"] == "policy" and d["code"] == "SBX_E1550", d
        assert any("no-curl" in rule for rule in d["rules"]), d


@pytest.mark.anyio
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_ask_approved_from_the_cli_runs(env, transport):
    async with session(env, transport) as s:
        result = {}

        async def call():
            result["r"] = await s.call_tool("exec", {"argv": ["touch", "made"]})

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            approval = None
            with anyio.fail_after(60):
                while approval is None:
                    pending = await anyio.to_thread.run_sync(env.pending)
                    approval = pending[0]["id"] if pending else None
                    await anyio.sleep(0.1)
            await anyio.to_thread.run_sync(lambda: env.cli("approvals", "approve", approval,
                                                           "--by", "pytest"))
        r = result["r"]
        assert not r.is_error, r
        op = r.structured_content["operation_id"]
    recs = [e for e in env.events() if e.get("operation_id") == op]
    assert len(recs) == 1
    assert recs[0]["approval_id"] == approval and recs[0]["approver"] == "pytest"


@pytest.mark.anyio
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_cancelled_call_is_killed_and_recorded(env, transport):
    marker = env.root / "late"
    # A background process would touch the marker 4 s in; the call is cancelled at 1.5 s.
    # The margin is wide so that a slow machine cannot make the kill look late: the test
    # is about whether the tree dies, not how fast.
    started = anyio.current_time()
    async with session(env, transport) as s:
        with anyio.move_on_after(1.5):
            await s.call_tool("exec", {"argv": ["sh", "-c",
                                                f"(sleep 4; touch {marker}) & sleep 60"]})
        # The cancelled run's record arrives once its whole tree is gone.
        with anyio.fail_after(30):
            while not [e for e in env.events() if e.get("event") == "exec"]:
                await anyio.sleep(0.1)
        rec = [e for e in env.events() if e.get("event") == "exec"][0]
        assert rec["status"] == "cancelled", rec
        # Past the moment a survivor would have touched the marker.
        await anyio.sleep(max(0.0, started + 5.0 - anyio.current_time()))
        assert not marker.exists(), "a process of the cancelled call survived"
        # The session is still usable.
        r = await s.call_tool("exec", {"argv": ["echo", "still here"]})
        assert r.structured_content["stdout"] == "still here\n"
