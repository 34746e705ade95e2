"""The chain as an unmodified E2B SDK program sees it: a denial, an ask (an error that
carries the approval id; a person approves and the command runs), a budget stop. Each is
one record in the audit trail."""

import time

import pytest
from e2b import Sandbox
from e2b.exceptions import SandboxException
from e2b_code_interpreter import Sandbox as CodeSandbox


def test_a_denial_names_the_layer_and_the_rule(server):
    sbx = Sandbox.create()
    try:
        with pytest.raises(SandboxException) as e:
            sbx.commands.run("curl http://example.invalid/")
        msg = str(e.value)
        assert "SBX_E1550" in msg and "denied at policy" in msg, msg
        assert "downloads are not allowed" in msg, msg
    finally:
        sbx.kill()
    denied = [e for e in server.events() if e.get("session_id") == sbx.sandbox_id
              and e.get("decision") == "deny"]
    assert len(denied) == 1 and denied[0]["layer"] == "policy", denied


def test_an_ask_carries_the_approval_id_and_runs_once_approved(server):
    sbx = Sandbox.create()
    try:
        with pytest.raises(SandboxException) as e:
            sbx.commands.run("touch $SANDBOX_OUTPUT/approved.txt")
        msg = str(e.value)
        assert "SBX_E1821" in msg and "approval_id=" in msg, msg
        approval = msg.split("approval_id=")[1].split(";")[0].split(")")[0]
        assert approval in [a["id"] for a in server.pending()]
        server.cli("approvals", "approve", approval)
        # The asked-for command runs once approved; its file lands in the workspace.
        for _ in range(100):
            if sbx.files.exists("/home/user/approved.txt"):
                break
            time.sleep(0.2)
        assert sbx.files.exists("/home/user/approved.txt")
    finally:
        sbx.kill()


def test_a_budget_stop_is_an_error_not_a_rate_limit(server):
    sbx = Sandbox.create(api_key=server.broke)
    try:
        with pytest.raises(SandboxException) as e:
            sbx.commands.run("echo costs money")
        msg = str(e.value)
        assert "denied at budget" in msg, msg
        assert "Rate limit" not in msg, msg
    finally:
        sbx.kill()
    stops = [e for e in server.events() if e.get("session_id") == sbx.sandbox_id
             and e.get("event") == "exec"]
    assert len(stops) == 1 and stops[0]["layer"] == "budget", stops


def test_a_budget_stop_reaches_run_code(server):
    sbx = CodeSandbox.create(api_key=server.broke)
    try:
        with pytest.raises(SandboxException) as e:
            sbx.run_code("1 + 1")
        assert "402" in str(e.value) and "budget" in str(e.value), str(e.value)
    finally:
        sbx.kill()


def test_an_environment_no_program_can_have_is_refused_at_create(server):
    before = len(server.events())
    for envs in ({"A=B": "x"}, {"A": "x\x00y"}, {"": "x"}):
        with pytest.raises(SandboxException) as e:
            Sandbox.create(envs=envs)
        assert "envVars" in str(e.value), str(e.value)
    # Refused before any sandbox was made: no sandbox was created for it.
    created = [e for e in server.events()[before:] if e.get("event") == "sandbox.create"]
    assert created == [], created
