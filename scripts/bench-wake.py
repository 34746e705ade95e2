#!/usr/bin/env python3
"""What one cross-thread wake-up costs on this host, by how long the woken thread slept.

Every hand-off in sandboxio (a task to a worker, store work to the blocking pool, an answer
to Python's event loop) wakes a thread that is parked on a futex. On a virtual machine, a
wake-up of a thread whose vCPU went idle costs far more than one of a busy thread. This
measures it directly: a waiter blocks on a `threading.Event` (a futex); the main thread
sleeps for a while (letting both vCPUs go idle), then sets the event, timing the CPU and
wall time of `set()` itself and the latency until the waiter runs. Python adds a few
microseconds to each figure (the idle-0 row shows them).

    python3 scripts/bench-wake.py [ROUNDS]        (default 200 per row)
"""

import statistics
import sys
import threading
import time


def main(rounds: int) -> None:
    go, back = threading.Event(), threading.Event()
    woke: list[int] = []
    stop = False

    def waiter() -> None:
        while True:
            go.wait()
            woke.append(time.perf_counter_ns())
            go.clear()
            if stop:
                return
            back.set()

    t = threading.Thread(target=waiter)
    t.start()
    print("| idle before the wake | `set()` CPU p50 | `set()` wall p50 | until the waiter runs, p50 / p90 |")
    print("|---:|---:|---:|---:|")
    for idle_ms in (0.0, 0.5, 5.0, 20.0):
        cpu, wall, latency = [], [], []
        for _ in range(rounds):
            time.sleep(idle_ms / 1000)
            c, w = time.thread_time_ns(), time.perf_counter_ns()
            go.set()
            cpu.append((time.thread_time_ns() - c) / 1000)
            wall.append((time.perf_counter_ns() - w) / 1000)
            back.wait()
            back.clear()
            latency.append((woke[-1] - w) / 1000)
        q = statistics.quantiles(latency, n=10)
        print(f"| {idle_ms:g} ms | {statistics.median(cpu):.1f} us | {statistics.median(wall):.1f} us "
              f"| {statistics.median(latency):.1f} / {q[8]:.1f} us |")
    stop = True
    go.set()
    t.join()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
