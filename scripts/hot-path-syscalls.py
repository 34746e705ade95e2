#!/usr/bin/env python3
"""Counts the syscalls of every process between HOT-BEGIN/HOT-END markers in an
`strace -f -o TRACE` of examples/pool_hot_path.rs, per kind of run (cold, warm): the
average per run, the processes started, and the mount-family calls."""
import collections
import re
import sys

MOUNTS = {"mount", "umount2", "pivot_root", "mount_setattr", "unshare"}
FORKS = {"clone", "clone3", "fork", "vfork"}
line_re = re.compile(r"^(\d+)\s+(?:\d+:\d+:\d+\.\d+\s+)?(\w+)\(")
runs = collections.defaultdict(list)
current = None
for line in open(sys.argv[1], errors="replace"):
    if 'HOT-BEGIN' in line and line.split()[1].startswith("write"):
        current = (line.split("HOT-BEGIN ")[1].split("\\n")[0], collections.Counter())
        continue
    if 'HOT-END' in line and line.split()[1].startswith("write"):
        if current:
            runs[current[0]].append(current[1])
        current = None
        continue
    m = line_re.match(line)
    if current and m:
        current[1][m.group(2)] += 1
for kind, counters in sorted(runs.items()):
    n = len(counters)
    total = sum(sum(c.values()) for c in counters) / n
    mounts = sum(sum(v for k, v in c.items() if k in MOUNTS) for c in counters) / n
    forks = sum(sum(v for k, v in c.items() if k in FORKS) for c in counters) / n
    top = collections.Counter()
    for c in counters:
        top.update(c)
    common = ", ".join(f"{k} {v / n:.0f}" for k, v in top.most_common(8))
    print(f"{kind}: {n} runs; per run {total:.0f} syscalls, {mounts:.0f} mount-family, "
          f"{forks:.0f} process starts; most: {common}")
