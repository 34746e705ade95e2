#!/usr/bin/env python3
"""Time to interactive through the official E2B SDK beside the server's own API, in the
same run against the same `sandboxio serve`: create a sandbox, then `node -v` done, then
delete it (not timed). The two alternate round by round so both see the same load.

Usage: bench-e2b.py BASE_URL API_KEY [ROUNDS]   (run with the venv that has `e2b`)
Prints one JSON object: p50/p95/mean per path (ms) and the ratio of the medians.
"""
import json
import os
import statistics
import sys
import time
import urllib.request

BASE, KEY = sys.argv[1], sys.argv[2]
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 20
os.environ.update(E2B_API_URL=BASE, E2B_SANDBOX_URL=BASE, E2B_API_KEY=KEY)
from e2b import Sandbox  # noqa: E402  (reads the environment above)


def call(method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(BASE + path, data=data, method=method,
                                 headers={"Authorization": f"Bearer {KEY}",
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        raw = r.read()
        return r.status, json.loads(raw) if raw else None


def native():
    t0 = time.perf_counter()
    st, sbx = call("POST", "/v1/sandboxes", {})
    assert st == 201, sbx
    st, out = call("POST", f"/v1/sandboxes/{sbx['id']}/exec", {"argv": ["node", "-v"]})
    assert st == 200 and out["result"]["stdout"].startswith("v"), out
    ms = (time.perf_counter() - t0) * 1000
    call("DELETE", f"/v1/sandboxes/{sbx['id']}")
    return ms


def e2b():
    t0 = time.perf_counter()
    sbx = Sandbox.create()
    r = sbx.commands.run("node -v")
    assert r.stdout.startswith("v"), r
    ms = (time.perf_counter() - t0) * 1000
    sbx.kill()
    return ms


def summary(xs):
    xs = sorted(xs)
    return {"n": len(xs), "p50_ms": round(statistics.median(xs), 1),
            "p95_ms": round(xs[min(len(xs) - 1, int(0.95 * len(xs)))], 1),
            "mean_ms": round(statistics.mean(xs), 1)}


for f in (native, e2b, native, e2b):  # warm-up
    f()
a, b = [], []
for _ in range(ROUNDS):
    a.append(native())
    b.append(e2b())
out = {"rounds": ROUNDS, "native_api": summary(a), "e2b_sdk": summary(b)}
out["ratio_p50_e2b_over_native"] = round(out["e2b_sdk"]["p50_ms"] / out["native_api"]["p50_ms"], 2)
print(json.dumps(out, indent=1))
