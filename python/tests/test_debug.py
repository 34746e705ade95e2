"""SBX_DEBUG=1 (or debug=True) raises the library logger to DEBUG and changes nothing
else; the library never prints, in either mode."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = """
import asyncio, logging
from sandboxio import LocalBackend, Sandbox

records = []

class Keep(logging.Handler):
    def emit(self, record):
        records.append(record)

logging.getLogger("sandboxio").addHandler(Keep())

async def main():
    async with await Sandbox.create(LocalBackend(state_dir={state!r}{debug})) as sbx:
        await sbx.run_code("print(1)")
        try:
            await sbx.read_file("../nope")
        except Exception:
            pass

asyncio.run(main())
import json, os, sys
sys.stderr.write(json.dumps({{"level": logging.getLogger("sandboxio").level,
                              "debug_records": sum(r.levelno == logging.DEBUG for r in records)}}))
"""


@pytest.mark.parametrize(
    ("env", "flag", "debug"),
    [({}, "", False), ({"SBX_DEBUG": "1"}, "", True), ({}, ", debug=True", True)],
)
def test_debug_raises_verbosity_and_nothing_prints(tmp_path: Path, env: dict[str, str], flag: str, debug: bool) -> None:
    import json
    import os

    code = textwrap.dedent(SCRIPT).format(state=str(tmp_path / "state"), debug=flag)
    full_env = {k: v for k, v in os.environ.items() if k != "SBX_DEBUG"} | env
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=full_env)
    assert p.returncode == 0, p.stderr
    assert p.stdout == "", "the library printed"
    report = json.loads(p.stderr)  # the script's own report is the only thing on stderr
    if debug:
        assert report["level"] == 10 and report["debug_records"] >= 2
    else:
        assert report["level"] == 0 and report["debug_records"] == 0
