"""Where the Python side of one call goes: CPU time (this thread's, so a loaded host
barely moves it) of each piece `Sandbox.run_code` adds around the native call, measured
on a real outcome, plus a cProfile of whole `write_file` calls (no sandbox process: the
binding and the chain only).

    python bench/python_side.py [N]
"""

from __future__ import annotations

import asyncio
import cProfile
import io
import json
import pstats
import statistics
import sys
import tempfile
import time
from typing import Any, Callable

from sandboxio import LocalBackend, Sandbox, _native, _outcome, otel
from sandboxio.results import ExecResult


def cpu_us(f: Callable[[], Any], n: int) -> float:
    """Median thread CPU time of `f`, in microseconds, over `n` rounds of 20 calls."""
    samples = []
    for _ in range(n):
        t = time.thread_time_ns()
        for _ in range(20):
            f()
        samples.append((time.thread_time_ns() - t) / 20 / 1000)
    return round(statistics.median(samples), 2)


async def main(n: int) -> dict[str, Any]:
    state = tempfile.mkdtemp(prefix="sandboxio-bench-")
    async with await Sandbox.create(LocalBackend(state_dir=state)) as sbx:
        native = sbx._s._n  # type: ignore[attr-defined]  # noqa: SLF001
        # The outcome's JSON (the other backends' answer), which `parse` below reads.
        _native._bench_json_answer(True)  # noqa: SLF001
        try:
            text = await native.run_code("python", "1+1", "{}")
        finally:
            _native._bench_json_answer(False)  # noqa: SLF001

        def span() -> None:
            with otel.operation_span("run_code", "local") as s:
                otel.traceparent(s)
                otel.finish(s, None, capture_code=False)

        def options() -> None:
            sbx._options(None, env={}, stdin=None, timeout_ms=None, memory_bytes=None, rationale=None)  # noqa: SLF001

        def parse() -> None:
            out = _outcome.check(_outcome.parse(text, capture_code=False))
            assert out.result is not None
            ExecResult.from_outcome(out.result, out.record)

        pieces: dict[str, Any] = {"span_no_provider_us": cpu_us(span, n), "options_json_us": cpu_us(options, n), "outcome_parse_and_result_us": cpu_us(parse, n)}

        # Whole calls: the thread CPU of the Python side (the event loop's thread) per call.
        for _ in range(20):
            await sbx.write_file("w.txt", "x")
        t = time.thread_time_ns()
        for _ in range(n):
            await sbx.write_file("w.txt", "x")
        pieces["write_file_loop_thread_cpu_us"] = round((time.thread_time_ns() - t) / n / 1000, 2)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(n):
            await sbx.write_file("w.txt", "x")
        prof.disable()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(12)
        pieces["profile"] = buf.getvalue()
    return pieces


if __name__ == "__main__":
    res = asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 200))
    prof = res.pop("profile")
    print(json.dumps(res, indent=2))
    print(prof)
