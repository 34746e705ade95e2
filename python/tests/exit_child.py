"""A whole program for `test_exit.py`: a local sandbox with a Python audit sink and an
approval callback runs code, writes a file, deletes it (an `ask` the callback approves)
and lists the workspace, the last result handed over late (`SlowWakeLoop`); then the
interpreter exits. Prints one JSON line of what it saw.

    python exit_child.py STATE_DIR [--stop-first]
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from sandboxio import (
    ApprovalRequest,
    AuditConfig,
    AuditEvent,
    LocalBackend,
    Sandbox,
    SandboxioError,
    _native,
)

POLICY = """
[settings]
name = "exit-child"

[[rule]]
id = "code"
effect = "allow"
kind = "run_code"
network = "none"
reason = "code without network"

[[rule]]
id = "files"
effect = "allow"
kind = ["file_write", "file_read"]
in_workspace = true
reason = "files in the workspace"

[[rule]]
id = "delete-asks"
effect = "ask"
kind = "file_delete"
in_workspace = true
reason = "deleting needs an approval"
"""


class Sink:
    def __init__(self) -> None:
        self.events: list[str] = []

    async def emit(self, event: AuditEvent) -> None:
        await asyncio.sleep(0)
        self.events.append(event.event)


async def approve(req: ApprovalRequest) -> bool:
    await asyncio.sleep(0)
    return True


async def main(state: Path, loop: SlowWakeLoop) -> dict[str, object]:
    state.mkdir(parents=True, exist_ok=True)
    policy = state.parent / "policy.toml"
    policy.write_text(POLICY)
    sink = Sink()
    backend = LocalBackend(state_dir=state, policy=[policy], audit=AuditConfig(sinks=(sink,)), approval=approve)
    async with await Sandbox.create(backend) as sbx:
        r = await sbx.run_code("print(6 * 7)")
        await sbx.write_file("x.txt", "x")
        rec = await sbx.delete_file("x.txt")
        loop.slow = True
        listed = await sbx.list_files()
    return {
        "stdout": r.stdout.strip(),
        "approver": rec.approver,
        "files": [f.name for f in listed],
        "events": sink.events,
    }


async def after_stop(state: Path) -> dict[str, object]:
    try:
        await LocalBackend(state_dir=state).runtime()
    except SandboxioError as e:
        return {"code": e.code}
    return {"code": None}


class SlowWakeLoop(asyncio.SelectorEventLoop):
    """An event loop whose wake-up from another thread returns late once `slow` is set:
    the native thread that hands a result over stays in Python, with the GIL released,
    after its write to the loop's socket, as a thread preempted right there does (the
    state of the threads in the core dumps of the aborts). The event loop meanwhile
    takes the result and the program goes on to exit. Each late wake-up writes a line
    when it begins and when it returns to Rust; a line missing at the end means a native
    thread was still inside Python when the interpreter exited."""

    slow = False

    def call_soon_threadsafe(self, callback: Any, *args: Any, context: Any = None) -> Any:  # type: ignore[override]
        handle = super().call_soon_threadsafe(callback, *args, context=context)
        if self.slow and threading.current_thread() is not threading.main_thread():
            os.write(2, b"late wake-up began\n")
            time.sleep(0.3)
            os.write(2, b"late wake-up returned\n")
        return handle


if __name__ == "__main__":
    state = Path(sys.argv[1])
    if "--stop-first" in sys.argv[2:]:
        _native.shutdown()
        print(json.dumps(asyncio.run(after_stop(state))))
    else:
        loop = SlowWakeLoop()
        print(json.dumps(loop.run_until_complete(main(state, loop))))
        loop.close()
