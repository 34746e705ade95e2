"""Benchmark: `await sbx.run_code("1+1")` from Python against the same operation issued
from Rust in the same process (`NativeSandbox.bench_run_code`: the gateway session's
`call`, no Python on the path). Rounds alternate between the two so drift in the host's
load hits both; the overhead is the difference of the medians, and, paired per call, the
time Python saw minus the time the same call spent inside Rust. The CPU time of the
event loop's thread per call is printed too: a loaded host barely moves it.

The extension's build profile is printed (`build_profile`): only a release build says
what the package costs. `scripts/bench-python.sh` builds one and runs this.

    python bench/run_code.py [ROUNDS] [PER_ROUND]
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

from sandboxio import LocalBackend, Sandbox, _native


async def main(rounds: int, per_round: int) -> dict[str, Any]:
    state = tempfile.mkdtemp(prefix="sandboxio-bench-")
    async with await Sandbox.create(LocalBackend(state_dir=state)) as sbx:
        native = sbx._s._n  # type: ignore[attr-defined]  # noqa: SLF001 (the same session, from Rust)
        await sbx.run_code("1+1")  # warm: runtime, helper, caches
        await native.bench_run_code("1+1", 1)
        py: list[float] = []
        rs: list[float] = []
        paired: list[float] = []
        cpu: list[float] = []
        for _ in range(rounds):
            for _ in range(per_round):
                c = time.thread_time_ns()
                t = time.perf_counter_ns()
                await sbx.run_code("1+1")
                seen = (time.perf_counter_ns() - t) / 1000
                cpu.append((time.thread_time_ns() - c) / 1000)
                py.append(seen)
                # The same call's time inside Rust: the difference is what Python adds.
                paired.append(seen - native.last_call_us)
            rs.extend(float(u) for u in await native.bench_run_code("1+1", per_round))
        # The same pairing on an operation without a sandbox (a file write): less noise.
        files: list[float] = []
        files_cpu: list[float] = []
        for i in range(rounds * per_round):
            c = time.thread_time_ns()
            t = time.perf_counter_ns()
            await sbx.write_file("bench.txt", str(i))
            files.append((time.perf_counter_ns() - t) / 1000 - native.last_call_us)
            files_cpu.append((time.thread_time_ns() - c) / 1000)
    p50_py, p50_rs = statistics.median(py), statistics.median(rs)
    return {
        "build_profile": _native.BUILD_PROFILE,
        "n_each": len(py),
        "python_p50_us": round(p50_py, 1),
        "rust_p50_us": round(p50_rs, 1),
        "p50_difference_us": round(p50_py - p50_rs, 1),
        "ratio": round(p50_py / p50_rs, 4),
        "python_p90_us": round(statistics.quantiles(py, n=10)[8], 1),
        "rust_p90_us": round(statistics.quantiles(rs, n=10)[8], 1),
        "paired_overhead_p50_us": round(statistics.median(paired), 1),
        "paired_overhead_p90_us": round(statistics.quantiles(paired, n=10)[8], 1),
        "file_write_paired_overhead_p50_us": round(statistics.median(files), 1),
        "file_write_paired_overhead_p90_us": round(statistics.quantiles(files, n=10)[8], 1),
        "run_code_loop_thread_cpu_p50_us": round(statistics.median(cpu), 1),
        "file_write_loop_thread_cpu_p50_us": round(statistics.median(files_cpu), 1),
    }


if __name__ == "__main__":
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    per = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    print(json.dumps(asyncio.run(main(rounds, per)), indent=2))
