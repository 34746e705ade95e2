"""The example agent loop runs end to end: code, files, an approval and a budget denial,
each step one record."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "agent_loop.py"


def test_agent_loop_example(tmp_path: Path) -> None:
    p = subprocess.run(
        [sys.executable, str(EXAMPLE), str(tmp_path / "state")], capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    obs = [t["observation"] for t in out["transcript"]]
    assert obs[0] == "wrote data.csv"
    assert obs[1] == "exit 0: dot product 44"
    assert obs[2] == "44"
    assert obs[3].startswith("deleted data.csv (approved by ")
    assert obs[4].startswith("denied (SBX_E1553) at budget"), obs[4]
    records = [tuple(r) for r in out["records"]]
    assert ("file_delete", "allow", "sandbox") in records or any(r[0] == "file_delete" and r[1] == "allow" for r in records)
    assert any(r[0] == "run_code" and r[1] == "deny" and r[2] == "budget" for r in records)
    assert len([r for r in records if not r[0].endswith(".intent")]) == 5
