"""Two candidates for one leadership, against a running server:

    python3 examples/election.py 127.0.0.1:7070

Each candidate campaigns with its own value (shown to operators as the
lock's owner), leads for a few steps when elected, asking the clock before
each step (leader.check()), then resigns; the other one leads at once.
"""

from __future__ import annotations

import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import baton  # noqa: E402

ADDR = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:7070"
print_lock = threading.Lock()


def say(*args: object) -> None:
    with print_lock:
        print(*args, flush=True)


def candidate(value: str, steps: int) -> None:
    client = baton.Client([ADDR], lease=2.0)
    try:
        with client.campaign("example/leader", value) as leader:
            say(f"{value} leads (token {leader.token})")
            for step in range(steps):
                leader.check()  # still the leader, by the clock, right now
                say(f"{value} step {step + 1}")
                time.sleep(0.05)
            say(f"{value} resigns")
    except baton.LockLost as e:
        say(f"{value} lost the leadership: {e.cause}")


threads = [threading.Thread(target=candidate, args=(v, 3)) for v in ("candidate-a", "candidate-b")]
for t in threads:
    t.start()
    time.sleep(0.1)  # a first, then b, in the queue
for t in threads:
    t.join()
