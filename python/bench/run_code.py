"""Benchmark: `await sbx.run_code("1+1")` from Python against the same operation issued
from Rust in the same process (`NativeSandbox.bench_run_code`: the gateway session's
`call`, no Python on the path). Rounds alternate between the two so drift in the host's
load hits both; the overhead is the difference of the medians.

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

from sandboxio import LocalBackend, Sandbox


async def main(rounds: int, per_round: int) -> dict[str, float]:
    state = tempfile.mkdtemp(prefix="sandboxio-bench-")
    async with await Sandbox.create(LocalBackend(state_dir=state)) as sbx:
        native = sbx._s._n  # noqa: SLF001 (the same session, from Rust)
        await sbx.run_code("1+1")  # warm: runtime, helper, caches
        await native.bench_run_code("1+1", 1)
        py: list[float] = []
        rs: list[float] = []
        paired: list[float] = []
        for _ in range(rounds):
            for _ in range(per_round):
                t = time.perf_counter_ns()
                await sbx.run_code("1+1")
                seen = (time.perf_counter_ns() - t) / 1000
                py.append(seen)
                # The same call's time inside Rust: the difference is what Python adds.
                paired.append(seen - native.last_call_us)
            rs.extend(float(u) for u in await native.bench_run_code("1+1", per_round))
        # The same pairing on an operation without a sandbox (a file write): less noise.
        files: list[float] = []
        for i in range(rounds * per_round):
            t = time.perf_counter_ns()
            await sbx.write_file("bench.txt", str(i))
            files.append((time.perf_counter_ns() - t) / 1000 - native.last_call_us)
    p50_py, p50_rs = statistics.median(py), statistics.median(rs)
    return {
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
    }


if __name__ == "__main__":
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    per = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    print(json.dumps(asyncio.run(main(rounds, per)), indent=2))
