"""Before/after of the answer's form (python/src/answer.rs), interleaved in one process:
"json" = the outcome's JSON text parsed by the package (`_native._bench_json_answer(True)`,
the path before), "values" = the `AuditEvent` and `ExecResult` made from the gateway's
structs. The modes alternate every PER_ROUND calls; each call is paired with its own time
inside Rust (`last_call_us`), as in `run_code.py`. Prints p50/p90 of the paired overhead
of `run_code("1+1")` and of `write_file` per mode, and the event loop thread's CPU per call.

    python bench/answer.py [ROUNDS] [PER_ROUND]
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from typing import Any

from sandboxio import LocalBackend, Sandbox, _native

MODES = ("json", "values")


def _q(xs: list[float]) -> dict[str, float]:
    return {"p50": round(statistics.median(xs), 1), "p90": round(statistics.quantiles(xs, n=10)[8], 1)}


async def main(rounds: int, per_round: int) -> dict[str, Any]:
    state = tempfile.mkdtemp(prefix="sandboxio-bench-")
    data: dict[str, dict[str, list[float]]] = {m: {"run": [], "run_cpu": [], "write": [], "write_cpu": []} for m in MODES}
    async with await Sandbox.create(LocalBackend(state_dir=state)) as sbx:
        native = sbx._s._n  # type: ignore[attr-defined]  # noqa: SLF001
        for m in MODES:
            _native._bench_json_answer(m == "json")
            await sbx.run_code("1+1")
            await sbx.write_file("bench.txt", "w")
        for r in range(rounds):
            order = MODES if r % 2 == 0 else MODES[::-1]
            for m in order:
                _native._bench_json_answer(m == "json")
                d = data[m]
                for _ in range(per_round):
                    c = time.thread_time_ns()
                    t = time.perf_counter_ns()
                    await sbx.run_code("1+1")
                    d["run"].append((time.perf_counter_ns() - t) / 1000 - native.last_call_us)
                    d["run_cpu"].append((time.thread_time_ns() - c) / 1000)
                for i in range(per_round):
                    c = time.thread_time_ns()
                    t = time.perf_counter_ns()
                    await sbx.write_file("bench.txt", str(i))
                    d["write"].append((time.perf_counter_ns() - t) / 1000 - native.last_call_us)
                    d["write_cpu"].append((time.thread_time_ns() - c) / 1000)
        _native._bench_json_answer(False)
    out: dict[str, Any] = {"build_profile": _native.BUILD_PROFILE, "n_each": len(data["json"]["run"])}
    for m in MODES:
        out[m] = {k: _q(v) for k, v in data[m].items()}
    out["ratio_values_over_json_p50"] = {
        k: round(statistics.median(data["values"][k]) / statistics.median(data["json"][k]), 3) for k in data["json"]
    }
    return out


if __name__ == "__main__":
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    per = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    print(json.dumps(asyncio.run(main(rounds, per)), indent=1))
