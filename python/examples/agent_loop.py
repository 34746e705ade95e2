"""A tool-calling agent loop over sandboxio, with a scripted model standing in for an LLM.

The "model" proposes tool calls; each one is an operation through the gateway: code runs
in the namespace tier, files stay in the workspace, deleting a file needs a person's
approval (an `ask` rule answered by `approve()`), and a tenant budget stops a run that
could cost more than what is left. Every step leaves one record in the audit trail.

    python examples/agent_loop.py [STATE_DIR]
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from sandboxio import (
    ApprovalRequest,
    AuditConfig,
    AuditEvent,
    LocalBackend,
    OperationDenied,
    Sandbox,
)

POLICY = """
[settings]
name = "agent-example"
description = "run code without network; files in the workspace; deletions need approval"

[[rule]]
id = "run-code"
effect = "allow"
kind = "run_code"
network = "none"
reason = "running code without network is allowed"

[[rule]]
id = "files"
effect = "allow"
kind = ["file_read", "file_write"]
in_workspace = true
reason = "files inside the workspace"

[[rule]]
id = "delete-asks"
effect = "ask"
kind = "file_delete"
in_workspace = true
reason = "deleting a file needs a person's approval"
"""

CONFIG = """
[budget]
per_tenant = "0.05"
default_estimate = "0"

[budget.rate_card]
cpu_second = "0.001"
gib_second = "0"
per_call = "0.0001"
"""

# What the scripted model does, one tool call per turn; it reads each observation.
SCRIPT: list[dict[str, Any]] = [
    {"tool": "write_file", "path": "data.csv", "content": "x,y\n1,2\n3,4\n5,6\n"},
    {"tool": "run_code", "code": (
        "import csv, os\n"
        "rows = list(csv.DictReader(open(os.path.join(os.environ['SANDBOX_INPUT'], 'data.csv'))))\n"
        "s = sum(int(r['x']) * int(r['y']) for r in rows)\n"
        "open(os.path.join(os.environ['SANDBOX_OUTPUT'], 'answer.txt'), 'w').write(str(s))\n"
        "print('dot product', s)\n"
    )},
    {"tool": "read_file", "path": "answer.txt"},
    {"tool": "delete_file", "path": "data.csv", "rationale": "the raw data is no longer needed"},
    # A long run: its reservation (timeout x CPU at the rate card) passes the budget.
    {"tool": "run_code", "code": "import time; time.sleep(100)", "timeout": 120},
    {"tool": "finish"},
]


class ScriptedModel:
    def __init__(self, script: list[dict[str, Any]]) -> None:
        self.script = list(script)
        self.observations: list[str] = []

    def next_call(self, observation: str | None) -> dict[str, Any]:
        if observation is not None:
            self.observations.append(observation)
        return self.script.pop(0)


class TrailSink:
    def __init__(self) -> None:
        self.events: list[AuditEvent] = []

    async def emit(self, event: AuditEvent) -> None:
        self.events.append(event)


def approve(req: ApprovalRequest) -> bool:
    # A person would see this request; this one approves deleting the raw data only.
    return "data.csv" in req.operation


async def call_tool(sbx: Sandbox, call: dict[str, Any]) -> str:
    tool = call["tool"]
    try:
        if tool == "write_file":
            await sbx.write_file(call["path"], call["content"])
            return f"wrote {call['path']}"
        if tool == "read_file":
            return (await sbx.read_text(call["path"])).strip()
        if tool == "delete_file":
            rec = await sbx.delete_file(call["path"])
            return f"deleted {call['path']} (approved by {rec.approver})"
        if tool == "run_code":
            r = await sbx.run_code(call["code"], timeout=call.get("timeout"))
            return f"exit {r.exit_code}: {r.stdout.strip()}"
    except OperationDenied as e:
        return f"denied ({e.code}) at {e.layer}"
    return f"unknown tool {tool}"


async def agent(state_dir: Path) -> dict[str, Any]:
    policy = state_dir / "agent-policy.toml"
    state_dir.mkdir(parents=True, exist_ok=True)
    policy.write_text(POLICY)
    sink = TrailSink()
    backend = LocalBackend(
        state_dir=state_dir,
        config_text=CONFIG,
        policy=[policy],
        audit=AuditConfig(sinks=(sink,)),
        approval=approve,
        tenant="example",
    )
    model = ScriptedModel(SCRIPT)
    observation: str | None = None
    transcript = []
    async with await Sandbox.create(backend, agent="scripted-model") as sbx:
        while True:
            call = model.next_call(observation)
            if call["tool"] == "finish":
                break
            observation = await call_tool(sbx, call)
            transcript.append({"tool": call["tool"], "observation": observation})
    return {
        "transcript": transcript,
        "records": [(e.event, e.decision, e.layer) for e in sink.events],
    }


def main() -> None:
    state = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="sandboxio-agent-"))
    print(json.dumps(asyncio.run(agent(state)), indent=2))


if __name__ == "__main__":
    main()
