"""A holder for the fencing kits' stale-holder test, run as a child
process: it takes the lock, says "granted TOKEN", runs the kit's begin
(the fence's check, then the read) and says "holding N", then waits for a
line on stdin; "write" writes N+1 whatever the lock's state (a write
already on its way when the lock was lost) and says "accepted" or
"refused ERROR".

usage: fence_holder.py ADDR NAME LEASE KIT 0|1 WHERE
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.environ.get("BATON_PY_PATH") or os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import baton  # noqa: E402
import fence_kits  # noqa: E402

addr, name, lease, kind, fenced, where = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4], sys.argv[5] == "1", sys.argv[6]
kit = fence_kits.make(kind, fenced, where)
held = baton.Client([addr], lease=lease, owner="A").acquire(name)
print("granted", held.token, flush=True)
n = kit.begin(held)
print("holding", n, flush=True)
if sys.stdin.readline().strip() == "write":
    try:
        kit.write(held, n + 1, "A")
        print("accepted", flush=True)
    except baton.StaleToken as e:
        print("refused", str(e).replace("\n", " "), flush=True)
