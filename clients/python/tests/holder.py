"""A holder for the pause tests, run as a child process: it takes a lock,
prints "held TOKEN", then works in small CPU-bound steps (ten in a row,
then a turn of the event loop in asyncio mode) and asks held.check()
before each one, as the docs ask. When a step comes more than
GAP seconds after the one before it (the test stopped the process with
SIGSTOP and resumed it), it prints what that first check after the pause
said and exits:

    after a pause of 2.104s: lost Unconfirmed      (what must happen)
    after a pause of 2.104s: ok                    (the step ran on a lost lock)

usage: holder.py ADDR NAME LEASE GAP thread|asyncio
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

sys.path.insert(0, os.environ.get("BATON_PY_PATH") or os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import baton  # noqa: E402

addr, name, lease, gap, mode = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]


def spin(seconds: float) -> float:
    """A step of work that holds the interpreter, as computation does. It
    returns the time of its last clock read, or, when the clock jumped by
    more than GAP between two reads (the process was stopped), the time
    before the jump at once: the next thing after a pause is then the next
    step's check, with nothing in between."""
    before = time.monotonic()
    end = before + seconds
    while True:
        now = time.monotonic()
        if now - before > gap:
            return before
        if now >= end:
            return now
        before = now


def steps(held: "baton.Held", last: float) -> "tuple[float, str | None]":
    """Ten steps in a row, each after its check. Returns the last step's
    time and the line to print, if a step came after a pause or a loss."""
    for _ in range(10):
        now = time.monotonic()
        try:
            held.check()
            said = "ok"
        except baton.LockLost as e:
            said = f"lost {type(e.cause).__name__}"
        if now - last > gap:
            return now, f"after a pause of {now - last:.3f}s: {said}"
        if said != "ok":
            return now, f"lost before any pause: {said}"
        last = spin(0.001)
    return last, None


def threads() -> None:
    held = baton.Client([addr], lease=lease).acquire(name)
    print("held", held.token, flush=True)
    last = time.monotonic()
    while True:
        last, line = steps(held, last)
        if line:
            print(line, flush=True)
            return


async def in_asyncio() -> None:
    client = baton.Client([addr], lease=lease)
    reported = False
    try:
        async with client.alock(name) as held:
            print("held", held.token, flush=True)
            last = time.monotonic()
            while True:
                last, line = steps(held, last)
                if line:
                    print(line, flush=True)
                    reported = True
                    return
                await asyncio.sleep(0)
    except baton.LockLost as e:
        if reported:
            return
        # The loss reached the block as a cancellation before any step ran
        # after the pause: the work did not act on the lost lock either.
        print(f"after a pause: lost {type(e.cause).__name__} (the block was cancelled)", flush=True)


if mode == "thread":
    threads()
else:
    asyncio.run(in_asyncio())
