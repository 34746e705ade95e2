"""Before/after of the Python side's per-call cost, interleaved call by call in one process
(so a loaded host's drift hits both alike):

- before: the default `NoopSink` awaited for each record (two round trips between the
  runtime and the event loop per operation), a span made through the OpenTelemetry API
  with no provider configured, and futures handed over by pyo3-async-runtimes' generic
  path (two tasks and a blocking-pool thread per call);
- after: the package as it is (no round trip for a `NoopSink`, no API span without a
  provider, one task and one hand-off per call, `handoff.rs`).

Each call's wall time is measured around the `await`; `write_file` runs no sandbox
process (binding and chain only), `run_code("1+1")` a namespace sandbox. The state
directories are on tmpfs (`/dev/shm`) where there is one.

    python bench/handoff.py [CALLS]
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any, Iterator

from sandboxio import AuditConfig, LocalBackend, NoopSink, Sandbox, _native, otel


# State (store, trail) on tmpfs when the host has one: the disk's fsyncs would otherwise
# be most of a file write's time, and their variance hides what is measured here.
STATE_ROOT = "/dev/shm" if os.path.isdir("/dev/shm") else None


class DispatchedNoop(NoopSink):
    """What the default sink cost before: a sink the runtime awaits for every record."""


_fast_span = otel.operation_span


@contextlib.contextmanager
def _api_span(tool_name: str, backend: str) -> Iterator[Any]:
    """The span as it was made before, through the API even without a provider."""
    trace = otel._api()  # noqa: SLF001
    tracer = trace.get_tracer(otel.TRACER_NAME)
    with tracer.start_as_current_span(f"{otel.SPAN_NAME_PREFIX} {tool_name}", attributes={otel.BACKEND: backend}) as span:
        yield span


def _mode(before: bool) -> None:
    _native._bench_generic_handoff(before)  # noqa: SLF001
    otel.operation_span = _api_span if before else _fast_span


async def main(n: int) -> dict[str, Any]:
    after = await Sandbox.create(LocalBackend(state_dir=tempfile.mkdtemp(prefix="sbx-bench-", dir=STATE_ROOT)))
    before = await Sandbox.create(
        LocalBackend(state_dir=tempfile.mkdtemp(prefix="sbx-bench-", dir=STATE_ROOT), audit=AuditConfig(sinks=(DispatchedNoop(),)))
    )
    out: dict[str, Any] = {"build_profile": _native.BUILD_PROFILE, "calls_each": n}
    for op in ("write_file", "run_code"):
        times: dict[str, list[float]] = {"before": [], "after": []}
        for i in range(n + 5):
            order = ((True, before), (False, after)) if i % 2 else ((False, after), (True, before))
            for is_before, sbx in order:
                _mode(is_before)
                t = time.perf_counter_ns()
                if op == "write_file":
                    await sbx.write_file("w.txt", "x")
                else:
                    await sbx.run_code("1+1")
                if i >= 5:  # the first rounds warm both up
                    times["before" if is_before else "after"].append((time.perf_counter_ns() - t) / 1000)
        b, a = statistics.median(times["before"]), statistics.median(times["after"])
        out[op] = {"before_p50_us": round(b, 1), "after_p50_us": round(a, 1), "saved_p50_us": round(b - a, 1), "ratio_after_before": round(a / b, 3)}
    _mode(False)
    await after.close()
    await before.close()
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)), indent=2))
