"""A server restart: the server restores its sandboxes, and the E2B access tokens stay
valid (derived from the sandbox id with a key in the state directory), so an SDK program
holding a sandbox, or one connecting to it by id, carries on. A wrong token is still
refused, and a killed sandbox leaves nothing behind."""

import httpx
from e2b import Sandbox, SandboxQuery

from conftest import Server


def _serve(tmp_path, monkeypatch) -> tuple[Server, str, str]:
    """A started server of the test's own, the SDK pointed at it: (server, key, address)."""
    s = Server(tmp_path)
    key = s.key("acme")
    s.start()
    for k in ("E2B_API_URL", "E2B_SANDBOX_URL"):
        monkeypatch.setenv(k, s.url)
    monkeypatch.setenv("E2B_API_KEY", key)
    return s, key, s.url.split("//", 1)[1]


def test_tokens_and_sandboxes_survive_a_restart(tmp_path, monkeypatch):
    s, _, addr = _serve(tmp_path, monkeypatch)
    try:
        sbx = Sandbox.create(metadata={"job": "restart"})
        sbx.files.write("/home/user/keep.txt", "still here")
        s.stop()
        s.start(listen=addr)
        # The same SDK object: its token still opens envd.
        assert sbx.files.read("/home/user/keep.txt") == "still here"
        assert sbx.commands.run("cat $SANDBOX_INPUT/keep.txt").stdout == "still here"
        # Another program connects by id, and lists it by its metadata.
        again = Sandbox.connect(sbx.sandbox_id)
        assert again.commands.run("echo ok").stdout == "ok\n"
        found = Sandbox.list(query=SandboxQuery(metadata={"job": "restart"})).next_items()
        assert [x.sandbox_id for x in found] == [sbx.sandbox_id]
        r = httpx.get(f"{s.url}/files", params={"path": "/home/user/keep.txt"},
                      headers={"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "49983",
                               "X-Access-Token": "sbxe_" + "0" * 64})
        assert r.status_code == 401 and "SBX_E2501" in r.json()["message"]
        assert sbx.kill() is True
        assert sorted(p.name for p in (s.state / "e2b").iterdir()) == ["access.key"]
        s.stop()
        s.start(listen=addr)
        assert sbx.is_running() is False
    finally:
        s.stop()


def test_a_damaged_facts_file_is_an_error_not_a_lost_sandbox(tmp_path, monkeypatch):
    s, key, addr = _serve(tmp_path, monkeypatch)
    try:
        sbx = Sandbox.create(metadata={"job": "damaged"})
        sbx.files.write("/home/user/keep.txt", "still here")
        facts = s.state / "e2b" / f"{sbx.sandbox_id}.json"
        s.stop()
        damaged = facts.read_bytes()[:20] + b"\xff\x00"
        facts.write_bytes(damaged)
        s.start(listen=addr)
        headers = {"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "49983",
                   "X-Access-Token": sbx._envd_access_token}
        r = httpx.get(f"{s.url}/files", params={"path": "/home/user/keep.txt"}, headers=headers)
        # Not "the sandbox is gone" (502 SBX_E2509): the server's own state is damaged.
        assert r.status_code == 500, r.text
        msg = r.json()["message"]
        assert "SBX_E2514" in msg and str(facts) in msg, msg
        # Without the sandbox's token nothing is told about its facts.
        wrong = dict(headers, **{"X-Access-Token": "sbxe_" + "0" * 64})
        r = httpx.get(f"{s.url}/files", params={"path": "/home/user/keep.txt"}, headers=wrong)
        assert r.status_code == 401 and "SBX_E2514" not in r.text, r.text
        # A list leaves it out; the file is left as it was.
        found = Sandbox.list(query=SandboxQuery(metadata={"job": "damaged"})).next_items()
        assert found == []
        assert facts.read_bytes() == damaged
        # The operator removes it: the E2B API forgets the sandbox (gone), the native API
        # still has it.
        facts.unlink()
        r = httpx.get(f"{s.url}/files", params={"path": "/home/user/keep.txt"}, headers=headers)
        assert r.status_code == 502 and "SBX_E2509" in r.json()["message"], r.text
        r = httpx.get(f"{s.url}/v1/sandboxes/{sbx.sandbox_id}",
                      headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 200, r.text
    finally:
        s.stop()
