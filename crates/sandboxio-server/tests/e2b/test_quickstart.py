"""E2B's documented quick-start flows, written as E2B's docs write them, against
`sandboxio serve`. Nothing here knows it is not talking to E2B's cloud except the
environment set by the `e2b_env` fixture, and the assertions on sandboxio's audit trail."""

import httpx
import pytest
from e2b import AsyncSandbox, CommandExitException, Sandbox, SandboxQuery
from e2b.exceptions import InvalidArgumentException, NotFoundException, SandboxException
from e2b_code_interpreter import Sandbox as CodeSandbox


def test_commands_run_streams_output_and_leaves_one_record_each(server):
    sbx = Sandbox.create()
    try:
        chunks = []
        result = sbx.commands.run(
            "for i in 1 2 3; do echo line $i; sleep 0.2; done; echo oops >&2",
            on_stdout=chunks.append,
        )
        assert result.exit_code == 0
        assert result.stdout == "line 1\nline 2\nline 3\n"
        assert result.stderr == "oops\n"
        # The output came as it was written, in more than one piece, through the callback.
        assert "".join(chunks) == result.stdout
        assert len(chunks) >= 2, chunks
        with pytest.raises(CommandExitException) as e:
            sbx.commands.run("exit 3")
        assert e.value.exit_code == 3
        # envs given at create reach every command; per-command envs too.
        assert sbx.commands.run("echo $GREETING", envs={"GREETING": "hi"}).stdout == "hi\n"
    finally:
        sbx.kill()
    runs = [e for e in server.events() if e.get("event") == "exec"
            and e.get("session_id") == sbx.sandbox_id]
    assert len(runs) == 3, [r.get("status") for r in runs]
    assert all(r["decision"] == "allow" for r in runs)


def test_create_with_envs_and_metadata_and_list(server):
    sbx = Sandbox.create(envs={"FROM_CREATE": "yes"}, metadata={"job": "e2b-suite"},
                         timeout=120)
    try:
        assert sbx.commands.run("echo $FROM_CREATE").stdout == "yes\n"
        found = Sandbox.list(query=SandboxQuery(metadata={"job": "e2b-suite"})).next_items()
        assert [s.sandbox_id for s in found] == [sbx.sandbox_id]
        info = sbx.get_info()
        assert info.metadata == {"job": "e2b-suite"}
        assert info.template_id == "base"
        sbx.set_timeout(600)
        assert (Sandbox.get_info(sbx.sandbox_id).end_at - info.started_at).total_seconds() > 500
        same = Sandbox.connect(sbx.sandbox_id)
        assert same.commands.run("echo again").stdout == "again\n"
    finally:
        assert sbx.kill() is True
    assert sbx.is_running() is False
    assert Sandbox.kill(sbx.sandbox_id) is False
    ids = [s.sandbox_id for s in Sandbox.list().next_items()]
    assert sbx.sandbox_id not in ids


def test_background_command_is_listed_and_killed(server):
    sbx = Sandbox.create()
    try:
        h = sbx.commands.run("sleep 60", background=True)
        assert h.pid in [p.pid for p in sbx.commands.list()]
        assert h.kill() is True
        with pytest.raises(CommandExitException):
            h.wait()
        assert h.pid not in [p.pid for p in sbx.commands.list()]
        assert sbx.commands.kill(424242) is False
    finally:
        sbx.kill()
    killed = [e for e in server.events() if e.get("event") == "exec"
              and e.get("session_id") == sbx.sandbox_id]
    assert len(killed) == 1 and killed[0]["status"] == "cancelled", killed


def test_files_write_read_list_remove(server):
    sbx = Sandbox.create()
    try:
        info = sbx.files.write("/home/user/hello.txt", "hello from e2b\n")
        assert info.path == "/home/user/hello.txt"
        assert sbx.files.read("/home/user/hello.txt") == "hello from e2b\n"
        assert sbx.files.read("hello.txt", format="bytes") == bytearray(b"hello from e2b\n")
        sbx.files.write("/home/user/data/a.csv", b"1,2\n")
        names = sorted(e.name for e in sbx.files.list("/home/user"))
        assert names == ["data", "hello.txt"]
        deep = sorted(e.path for e in sbx.files.list("/home/user", depth=2))
        assert "/home/user/data/a.csv" in deep
        assert sbx.files.exists("/home/user/hello.txt") is True
        st = sbx.files.get_info("/home/user/hello.txt")
        assert st.size == len("hello from e2b\n") and st.type.value == "file"
        sbx.files.remove("/home/user/hello.txt")
        assert sbx.files.exists("/home/user/hello.txt") is False
        with pytest.raises(NotFoundException):
            sbx.files.read("/home/user/hello.txt")
        # A program sees the workspace at $SANDBOX_INPUT.
        assert sbx.commands.run("cat $SANDBOX_INPUT/data/a.csv").stdout == "1,2\n"
        # Outside the home is refused with a code, not silently mapped.
        with pytest.raises(InvalidArgumentException) as e:
            sbx.files.write("/etc/evil", "x")
        assert "SBX_E2505" in str(e.value)
    finally:
        sbx.kill()


def test_run_code_keeps_state_across_calls(server):
    sbx = CodeSandbox.create()
    try:
        sbx.run_code("x = 1")
        ex = sbx.run_code("x + 1")
        assert ex.text == "2"
        out = []
        ex = sbx.run_code("print('hello'); x * 10", on_stdout=lambda m: out.append(m.line))
        assert ex.logs.stdout == ["hello\n"] and out == ["hello\n"]
        assert ex.text == "10"
        ex = sbx.run_code("1 / 0")
        assert ex.error is not None and ex.error.name == "ZeroDivisionError"
        assert "division by zero" in ex.error.value
        js = sbx.run_code("let y = 20; y * 2", language="js")
        assert js.text == "40"
        ctx = sbx.create_code_context()
        assert sbx.run_code("z = 5", context=ctx).error is None
        assert sbx.run_code("z", context=ctx).text == "5"
        # The default context does not see another context's variables.
        assert sbx.run_code("z").error.name == "NameError"
        assert ctx.id in [c.id for c in sbx.list_code_contexts()]
        sbx.remove_code_context(ctx)
    finally:
        sbx.kill()
    cells = [e for e in server.events() if e.get("event") == "run_code"
             and e.get("session_id") == sbx.sandbox_id]
    # Each cell is one run_code operation with its own record (kernels are records too).
    assert len(cells) >= 8, len(cells)


@pytest.mark.asyncio
async def test_async_sdk_quickstart(server):
    sbx = await AsyncSandbox.create()
    try:
        r = await sbx.commands.run("echo async")
        assert r.stdout == "async\n"
        await sbx.files.write("/home/user/a.txt", "A")
        assert await sbx.files.read("/home/user/a.txt") == "A"
    finally:
        await sbx.kill()


def test_envd_refuses_a_wrong_access_token(server):
    sbx = Sandbox.create()
    try:
        r = httpx.get(f"{server.url}/files", params={"path": "/home/user/x"},
                      headers={"E2b-Sandbox-Id": sbx.sandbox_id,
                               "E2b-Sandbox-Port": "49983",
                               "X-Access-Token": "sbxe_" + "0" * 64})
        assert r.status_code == 401 and "SBX_E2501" in r.json()["message"]
        r = httpx.post(f"{server.url}/process.Process/List", json={},
                       headers={"E2b-Sandbox-Id": sbx.sandbox_id,
                                "E2b-Sandbox-Port": "49983",
                                "Connect-Protocol-Version": "1"})
        assert r.status_code == 401 and r.json()["code"] == "unauthenticated"
    finally:
        sbx.kill()


def test_another_tenants_sandbox_is_invisible(server):
    sbx = Sandbox.create()
    try:
        other = server.key("other")
        assert Sandbox.kill(sbx.sandbox_id, api_key=other) is False
        ids = [s.sandbox_id for s in Sandbox.list(api_key=other).next_items()]
        assert sbx.sandbox_id not in ids
    finally:
        sbx.kill()


def test_unsupported_options_are_refused_with_a_code(server):
    with pytest.raises(SandboxException) as e:
        Sandbox.create(allow_internet_access=True)
    assert "SBX_E2503" in str(e.value)
    with pytest.raises(SandboxException) as e:
        Sandbox.create(template="no-such-template")
    assert "SBX_E2502" in str(e.value)
    sbx = Sandbox.create(template="small")
    try:
        assert sbx.get_info().memory_mb == 256
    finally:
        sbx.kill()


def test_stdin_and_reconnecting_to_a_command(server):
    sbx = Sandbox.create()
    try:
        h = sbx.commands.run("read line; echo got $line", background=True, stdin=True)
        sbx.commands.send_stdin(h.pid, "hello\n")
        assert h.wait().stdout == "got hello\n"
        h2 = sbx.commands.run("sleep 2; echo later", background=True)
        # The SDK stops reading; the command goes on, and can be followed again.
        h2.disconnect()
        again = sbx.commands.connect(h2.pid)
        assert again.wait().stdout == "later\n"
    finally:
        sbx.kill()


def test_pause_keeps_files_and_connect_resumes(server):
    sbx = Sandbox.create()
    try:
        sbx.files.write("/home/user/keep.txt", "kept")
        h = sbx.commands.run("sleep 60", background=True)
        assert sbx.pause() is True
        assert Sandbox.get_info(sbx.sandbox_id).state.value == "paused"
        # What ran was cancelled; nothing starts in a paused sandbox.
        with pytest.raises(CommandExitException):
            h.wait()
        with pytest.raises(SandboxException) as e:
            sbx.commands.run("echo no")
        assert "SBX_E1850" in str(e.value)
        same = Sandbox.connect(sbx.sandbox_id)
        assert Sandbox.get_info(sbx.sandbox_id).state.value == "running"
        assert same.files.read("/home/user/keep.txt") == "kept"
        assert same.commands.run("echo yes").stdout == "yes\n"
    finally:
        sbx.kill()
