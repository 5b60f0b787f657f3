"""The clock on which a lock's deadline is measured (internal): one that
counts a suspend of the machine.

``time.monotonic()`` stops while the machine is suspended on Linux (a
laptop's lid, a virtual machine paused or restored from a snapshot), while
the server's clock and the other clients' go on: a holder whose host slept
past its deadline would wake up believing it holds a lock that the server
has given to another. CLOCK_BOOTTIME counts the suspend; it is the clock
where the platform has it (Linux). Elsewhere the clock is the monotonic
one plus every jump of the wall clock ahead of it (``WallChecked``), which
is what a suspend looks like from inside the process: a step of the wall
clock forward then counts as a suspend too, which can end a lock early,
never late. Like the Go client's package clock, so that every client
decides alike.

A clock is a function of no arguments that returns seconds from an
arbitrary origin: compare its readings only with each other.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Optional

Clock = Callable[[], float]

# How far the wall clock may move against the monotonic clock before
# WallChecked counts it as a suspend: above the jitter of reading the two
# one after the other. A shorter suspend can go unseen; a step of the wall
# clock forward by more ends deadlines early by as much.
TOLERANCE = 0.002


def boottime() -> float:
    """CLOCK_BOOTTIME: the monotonic clock plus the time the machine slept."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


class WallChecked:
    """The clock of a platform without one that counts a suspend: the
    monotonic clock plus every jump of the wall clock ahead of it by more
    than TOLERANCE since the last jump counted. A fall behind by more (a
    step back) moves the reference back, uncounted, so that a suspend after
    it is still seen whole; changes within TOLERANCE (jitter, a rate drift)
    move nothing, so they do not add up."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # a reading from before a jump, counted after it, would count it twice
        self._ref: Optional[float] = None  # wall - monotonic after the last jump counted
        self._ahead = 0.0  # the jumps counted

    def __call__(self) -> float:
        with self._lock:
            mono = time.monotonic()
            return self.advance(time.time(), mono)

    def advance(self, wall: float, mono: float) -> float:
        """The reading for one pair of readings of the wall and monotonic
        clocks (the lock must be held)."""
        skew = wall - mono
        if self._ref is None:
            self._ref = skew
        elif skew > self._ref + TOLERANCE:
            self._ahead += skew - self._ref
            self._ref = skew
        elif skew < self._ref - TOLERANCE:
            self._ref = skew
        return mono + self._ahead


def default() -> Clock:
    """CLOCK_BOOTTIME where the platform has it, else a WallChecked."""
    if hasattr(time, "CLOCK_BOOTTIME"):
        try:
            boottime()
            return boottime
        except OSError:
            pass  # refused (a sandbox): decided once, never mixed
    return WallChecked()
