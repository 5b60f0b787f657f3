"""A semaphore of 2 slots shared by 5 workers, against a running server:

    python3 examples/semaphore.py 127.0.0.1:7070

Each worker takes one slot of "example/gpu" (``limit=2``) for its render:
two render at once, the others wait in the queue, in the order they came,
and each freed slot goes to the next at once. The workers share one
Client, and there are more of them than slots, so they opt in to queueing
behind each other (``queue_behind_self=True``), as threads sharing a
mutex do. Every grant has its own fencing token.
"""

from __future__ import annotations

import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import baton  # noqa: E402

ADDR = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:7070"
SLOTS = 2
client = baton.Client([ADDR], lease=2.0)
count_lock = threading.Lock()
inside = most = rendered = 0


def worker(n: int) -> None:
    global inside, most, rendered
    with client.lock("example/gpu", limit=SLOTS, queue_behind_self=True) as slot:
        with count_lock:  # also keeps the workers' lines whole
            inside += 1
            most = max(most, inside)
            print(f"worker {n} renders in a slot of {slot.limit} (token {slot.token})", flush=True)
        slot.check()  # still holding, by the clock, right before the step
        time.sleep(0.05)  # the render
        with count_lock:
            inside -= 1
            rendered += 1


threads = [threading.Thread(target=worker, args=(n,)) for n in range(1, 6)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(f"{rendered} renders, at most {most} at once (the limit is {SLOTS})")
