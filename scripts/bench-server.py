#!/usr/bin/env python3
"""Time to interactive and exec round trip against a running `sandboxio serve` (TCP).

Usage: bench-server.py BASE_URL API_KEY [TIER [SERVER_PID]]
Prints one JSON object: sequential time to interactive (create, then `node -v` done) p50/p95,
a burst of 100 concurrent creates + `node -v` (median, p95), both beside the same
sequence and burst of `bwrap --unshare-all ... node -v` with no server, the exec round trip of `true`
minus the sandbox's own time (what HTTP, the server and the gateway add; see `overhead`), a Python code
context's call round trip beside a fresh `run_code`, and the bounded load test: 100
sandboxes at once, 20 commands each, errors counted, the server's memory (VmRSS before,
VmHWM after) when its pid is given.
"""
import json
import statistics
import sys
import threading
import time
import urllib.error
import urllib.request

BASE, KEY = sys.argv[1], sys.argv[2]
TIER = sys.argv[3] if len(sys.argv) > 3 else "namespace"
PID = sys.argv[4] if len(sys.argv) > 4 else None


def describe(e):
    """An error for the report: an HTTP error with its problem+json body (code, detail)."""
    if isinstance(e, urllib.error.HTTPError):
        return f"HTTP {e.code}: {e.read()[:600].decode(errors='replace')}"
    return str(e)[:300]


def mem_kib(field):
    if PID is None:
        return None
    with open(f"/proc/{PID}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


def load(sandboxes=100, commands=20):
    """100 sandboxes at once, each running 20 commands; every error is counted."""
    errors, done = [], [0]
    lock = threading.Lock()

    def one(i):
        try:
            st, sbx = call("POST", "/v1/sandboxes", {"tier": TIER})
            assert st == 201, sbx
            for j in range(commands):
                st, out = call("POST", f"/v1/sandboxes/{sbx['id']}/exec",
                               {"argv": ["sh", "-c", f"echo {i}-{j}"]})
                ok = st == 200 and out["result"]["stdout"] == f"{i}-{j}\n"
                assert ok, {"status": st, "want": f"{i}-{j}", "stdout": out["result"]["stdout"][:80],
                            "stdout_bytes": out["result"]["stdout_bytes"],
                            "record": out["record"]["status"]}
                with lock:
                    done[0] += 1
            call("DELETE", f"/v1/sandboxes/{sbx['id']}")
        except Exception as e:  # counted, reported
            with lock:
                errors.append(describe(e))

    rss0 = mem_kib("VmRSS")
    t0 = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(sandboxes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"sandboxes": sandboxes, "commands_each": commands, "commands_ok": done[0],
            "errors": len(errors), "first_errors": errors[:3],
            "wall_s": round(time.perf_counter() - t0, 1),
            "server_vmrss_before_kib": rss0, "server_vmhwm_after_kib": mem_kib("VmHWM")}


def contexts(n=30):
    """A Python context's call (kernel already running) beside a fresh run_code."""
    st, sbx = call("POST", "/v1/sandboxes", {"tier": TIER})
    sid = sbx["id"]
    st, ctx = call("POST", f"/v1/sandboxes/{sid}/contexts", {"language": "python"})
    if st != 201:
        return {"error": ctx}
    cid = ctx["id"]
    call("POST", f"/v1/sandboxes/{sid}/contexts/{cid}/run", {"code": "x = 1"})
    ctx_ms, fresh_ms = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        st, out = call("POST", f"/v1/sandboxes/{sid}/contexts/{cid}/run", {"code": "x + 1"})
        ctx_ms.append((time.perf_counter() - t0) * 1000)
        assert out["output"]["value"] == "2", out
        t0 = time.perf_counter()
        st, out = call("POST", f"/v1/sandboxes/{sid}/run_code",
                       {"language": "python", "code": "print(1 + 1)"})
        fresh_ms.append((time.perf_counter() - t0) * 1000)
    call("DELETE", f"/v1/sandboxes/{sid}")
    return {"context_call_p50_ms": round(statistics.median(ctx_ms), 1),
            "fresh_run_code_p50_ms": round(statistics.median(fresh_ms), 1)}


def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(BASE + path, data=data, method=method)
    req.add_header("Authorization", "Bearer " + KEY)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=120) as r:
        raw = r.read()
        return r.status, (json.loads(raw) if raw else None)


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def tti():
    t0 = time.perf_counter()
    st, sbx = call("POST", "/v1/sandboxes", {"tier": TIER})
    assert st == 201, sbx
    st, out = call("POST", f"/v1/sandboxes/{sbx['id']}/exec", {"argv": ["node", "-v"]})
    took = (time.perf_counter() - t0) * 1000
    assert st == 200 and out["result"]["stdout"].startswith("v"), out
    call("DELETE", f"/v1/sandboxes/{sbx['id']}")
    return took


def overhead(n=60, warm=10):
    """The exec round trip of `true` in one sandbox, minus the sandbox's own time.

    Subtracted: the result's `duration_us`, the sandbox crate's own clock for the run, from
    its start (workspace, cgroup, helper started or taken from a pool, plan, payload, helper
    reaped) to the end of its cleanup (output drained, the run's cgroup and scratch
    directories removed). Not subtracted, so counted as overhead: everything outside the
    sandbox crate (HTTP, the server, the gateway's chain with its store and audit writes).
    A server without `duration_us` gives only whole milliseconds (`duration_ms`, a floor),
    which overstates the overhead by up to 1 ms; the answer says which one was used.
    """
    st, sbx = call("POST", "/v1/sandboxes", {"tier": TIER})
    assert st == 201, sbx
    over, rtt, sandbox, source = [], [], [], set()
    for i in range(n + warm):
        t0 = time.perf_counter()
        st, out = call("POST", f"/v1/sandboxes/{sbx['id']}/exec", {"argv": ["true"]})
        took = (time.perf_counter() - t0) * 1000
        assert st == 200, out
        if i < warm:
            continue
        r = out["result"]
        if "duration_us" in r:
            own = r["duration_us"] / 1000
            source.add("duration_us")
        else:
            own = r["duration_ms"]
            source.add("duration_ms (whole ms)")
        rtt.append(took)
        sandbox.append(own)
        over.append(took - own)
    call("DELETE", f"/v1/sandboxes/{sbx['id']}")

    def stats(xs):
        return {"p50": round(statistics.median(xs), 2), "p95": round(pct(xs, 95), 2)}

    return {
        "exec_true_rtt_ms": dict(n=len(rtt), **stats(rtt)),
        "sandbox_own_ms": dict(source=sorted(source), **stats(sandbox)),
        "exec_overhead_ms": dict(
            note="client round trip minus the sandbox's own time (result.duration_us: "
                 "run start to the end of its cleanup; HTTP, server and chain count as overhead)",
            **stats(over)),
    }


BWRAP = ["bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr",
         "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
         "--symlink", "usr/bin", "/bin", "--proc", "/proc", "--dev", "/dev",
         "--tmpfs", "/tmp", "node", "-v"]


def bwrap_reference():
    """The same sequence and burst with no server at all: `bwrap --unshare-all ... node -v`
    started by this script, timed the same way (each thread its own start to its own end).
    What one fresh namespace sandbox per `node -v` costs on this machine, beside the
    server's time to interactive (which also creates a workspace, cgroups and records)."""
    import shutil
    import subprocess
    if shutil.which("bwrap") is None:
        return {"skipped": "bwrap is not installed"}

    def once():
        t0 = time.perf_counter()
        r = subprocess.run(BWRAP, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        took = (time.perf_counter() - t0) * 1000
        assert r.returncode == 0 and r.stdout.startswith(b"v"), r
        return took

    for _ in range(3):
        once()
    seq = [once() for _ in range(30)]
    burst, lock = [], threading.Lock()

    def one():
        t = once()
        with lock:
            burst.append(t)

    threads = [threading.Thread(target=one) for _ in range(100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"sequential_ms": {"p50": round(statistics.median(seq), 1),
                              "p95": round(pct(seq, 95), 1)},
            "burst100_ms": {"p50": round(statistics.median(burst), 1),
                            "p95": round(pct(burst, 95), 1)}}


def main():
    # SBX_BENCH_PHASES: a comma list of tti,overhead,contexts,load (default: all of them).
    import os
    phases = set(os.environ.get("SBX_BENCH_PHASES", "tti,overhead,contexts,load").split(","))
    unknown = phases - {"tti", "overhead", "contexts", "load"}
    assert not unknown, f"unknown phases: {sorted(unknown)}"
    report = {"tier": TIER}
    if "tti" in phases:
        for _ in range(3):  # warm-up
            tti()
        seq = [tti() for _ in range(30)]

        burst, errors = [], []
        lock = threading.Lock()

        def one():
            try:
                t = tti()
                with lock:
                    burst.append(t)
            except Exception as e:  # counted, reported
                with lock:
                    errors.append(describe(e))

        threads = [threading.Thread(target=one) for _ in range(100)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        report["tti_sequential_ms"] = {"n": len(seq), "p50": round(statistics.median(seq), 1),
                                       "p95": round(pct(seq, 95), 1)}
        report["tti_burst100_ms"] = {"ok": len(burst), "errors": len(errors),
                                     "p50": round(statistics.median(burst), 1) if burst else None,
                                     "p95": round(pct(burst, 95), 1) if burst else None}
        report["first_errors"] = errors[:3]
        report["bwrap_node_v_reference"] = bwrap_reference()
    if "overhead" in phases:
        report.update(overhead(int(os.environ.get("SBX_BENCH_EXECS", "60"))))
    if "contexts" in phases:
        report["contexts"] = contexts()
    if "load" in phases:
        report["load_100x20"] = load(int(os.environ.get("SBX_BENCH_SANDBOXES", "100")),
                                     int(os.environ.get("SBX_BENCH_COMMANDS", "20")))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
