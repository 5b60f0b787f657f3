"""A holder whose machine was suspended past its deadline knows the lock
lost at its first look. ``Suspend`` suspends the machine as far as this
process can tell: the clocks that count a suspend (CLOCK_BOOTTIME, and the
wall clock: CLOCK_REALTIME, ``time.time()``) jump ahead by its length,
while ``time.monotonic()``, and every wait and timer that counts it, do
not, as across a real suspend on Linux. The server, another process, sees
nothing: its clock and the other clients' went on."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
import unittest
from unittest import mock

from support import ServerCase

import baton

LEASE = 2.0


class Suspend:
    """Within the block, the machine has slept ``seconds`` (see above)."""

    def __init__(self, seconds: float) -> None:
        self.by = seconds
        self._patches: list = []

    def __enter__(self) -> "Suspend":
        by = self.by
        real_gettime, real_time = time.clock_gettime, time.time
        counting = {getattr(time, n) for n in ("CLOCK_BOOTTIME", "CLOCK_REALTIME") if hasattr(time, n)}

        def clock_gettime(clk: int) -> float:
            return real_gettime(clk) + (by if clk in counting else 0.0)

        self._patches = [mock.patch.object(time, "clock_gettime", clock_gettime),
                         mock.patch.object(time, "time", lambda: real_time() + by)]
        for p in self._patches:
            p.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for p in reversed(self._patches):
            p.stop()


def set_by_session(event: threading.Event) -> bool:
    """Whether the session has set ``held.lost``: the plain Event's answer,
    without the clock reading of LostEvent.is_set."""
    return threading.Event.is_set(event)


class TestSuspendedHolder(ServerCase):
    def _hold(self, name: str, **kw: object) -> baton.Held:
        c = self.client(lease=float(kw.pop("lease", LEASE)))  # type: ignore[arg-type]
        clock = kw.pop("clock", None)
        if clock is not None:
            c._clock = clock  # type: ignore[assignment]
        held = c.acquire(name, **kw)  # type: ignore[arg-type]
        self.addCleanup(_release, held)
        held.check()
        return held

    def test_check_after_suspend(self) -> None:
        """The first check() after a suspend past the deadline raises, and
        valid_until is already behind time.monotonic()."""
        held = self._hold("py/suspend-check")
        with Suspend(LEASE + 1):
            left = held.valid_until - time.monotonic()
            self.assertLess(left, 0, f"valid_until is {left:.2f}s ahead after a suspend of {LEASE + 1}s past a deadline of 0.8 x lease {LEASE}s")
            with self.assertRaises(baton.LockLost, msg="check() after a suspend past the deadline did not raise") as cm:
                held.check()
            self.assertIsInstance(cm.exception.cause, baton.Unconfirmed)

    def test_valid_until_counts_a_short_suspend(self) -> None:
        """A suspend shorter than the time left takes its length off
        valid_until."""
        held = self._hold("py/suspend-short", lease=10)
        before = held.valid_until - time.monotonic()
        with Suspend(3):
            after = held.valid_until - time.monotonic()
            held.check()
        # A heartbeat in between may move the deadline on by up to a
        # quarter lease; the suspend takes 3 s off whatever it is.
        self.assertLess(after, before - 3 + 10 / 4 + 0.5, f"time left {before:.2f}s before a suspend of 3s, {after:.2f}s after")
        self.assertLess(after, 8 - 3 + 0.5, f"time left after a suspend of 3s: {after:.2f}s, want at most 0.8 x lease 10s less 3s")

    def test_max_hold_counts_a_suspend(self) -> None:
        held = self._hold("py/suspend-max-hold", lease=30, max_hold=2)
        with Suspend(3):
            with self.assertRaises(baton.LockLost, msg="check() after a suspend past max_hold did not raise") as cm:
                held.check()
            self.assertIsInstance(cm.exception.cause, baton.MaxHoldReached)

    def test_session_thread_sees_suspend(self) -> None:
        """With nobody asking, the session's thread, whose waits stood
        still through the suspend, ends the claim at its next wake (a
        quarter lease at most): it does not go on confirming it."""
        held = self._hold("py/suspend-thread")
        with Suspend(LEASE + 1):
            woke = time.monotonic()
            if not held.lost.wait(LEASE):  # the plain Event's wait: set by the session
                self.fail(f"held.lost not set {LEASE}s after a suspend of {LEASE + 1}s past the deadline: the session believes it holds")
        print(f"\n  thread: the session saw the suspend {time.monotonic() - woke:.2f}s after the wake", file=sys.stderr)
        with self.assertRaises(baton.LockLost):
            held.check()

    def test_asyncio_check_after_suspend(self) -> None:
        c = self.client(lease=LEASE)

        async def main() -> str:
            try:
                async with c.alock("py/suspend-async") as held:
                    held.check()
                    with Suspend(LEASE + 1):
                        held.check()
                        return "check() passed after a suspend past the deadline"
            except baton.LockLost as e:
                self.assertIsInstance(e.cause, baton.Unconfirmed)
                return "lost"

        self.assertEqual(asyncio.run(main()), "lost")

    def test_asyncio_session_sees_suspend(self) -> None:
        """The event loop's timer, late by the suspend, ends the claim at
        its next run (a quarter lease at most)."""
        c = self.client(lease=LEASE)

        async def main() -> float:
            held = await c.aacquire("py/suspend-async-timer")
            try:
                with Suspend(LEASE + 1):
                    woke = time.monotonic()
                    while not set_by_session(held.lost):
                        if time.monotonic() - woke > LEASE:
                            return -1.0
                        await asyncio.sleep(0.01)
                    return time.monotonic() - woke
            finally:
                try:
                    await held.release()
                except baton.LockLost:
                    pass

        took = asyncio.run(main())
        self.assertGreaterEqual(took, 0, f"held.lost not set {LEASE}s after a suspend of {LEASE + 1}s past the deadline: the session believes it holds")

    def test_fallback_clock_sees_suspend(self) -> None:
        """Without CLOCK_BOOTTIME, the client counts the wall clock's jump
        ahead of the monotonic clock as the suspend."""
        from baton import clock

        held = self._hold("py/suspend-fallback", clock=clock.WallChecked())
        with Suspend(LEASE + 1):
            with self.assertRaises(baton.LockLost, msg="check() on the fallback clock after a suspend past the deadline did not raise"):
                held.check()

    def test_control_clock_that_stops(self) -> None:
        """On a clock that stops during a suspend (time.monotonic), the
        holder believes it holds after one past its deadline: the harm the
        tests above rule out, seen here so that the scenario shows it."""
        held = self._hold("py/suspend-control", clock=time.monotonic)
        with Suspend(LEASE + 1):
            held.check()


def _release(held: baton.Held) -> None:
    try:
        held.release()
    except baton.LockLost:
        pass


class TestWallChecked(unittest.TestCase):
    """The fallback clock counts the wall clock's jumps ahead of the
    monotonic clock and nothing else (as the Go client's package clock)."""

    def test_advance(self) -> None:
        from baton.clock import WallChecked

        ms = 0.001
        cases = [
            ("no suspend", [(10 * ms, 10 * ms), (20 * ms, 20 * ms)], 20 * ms),
            ("suspend of 30s", [(10 * ms, 10 * ms), (30 + 20 * ms, 20 * ms)], 30 + 20 * ms),
            ("two suspends", [(0, 0), (5 + 20 * ms, 20 * ms), (12 + 30 * ms, 30 * ms)], 12 + 30 * ms),
            ("wall clock steps forward: counted", [(10 * ms, 10 * ms), (3600 + 20 * ms, 20 * ms)], 3600 + 20 * ms),
            ("wall clock steps back: not counted", [(10 * ms, 10 * ms), (-3600 + 20 * ms, 20 * ms), (-3600 + 30 * ms, 30 * ms)], 30 * ms),
            ("step back, then a shorter suspend", [(0, 0), (-3600 + 20 * ms, 20 * ms), (-3600 + 10 + 30 * ms, 30 * ms)], 10 + 30 * ms),
            ("jitter within the tolerance", [(0, 0), (11 * ms, 10 * ms), (19 * ms, 20 * ms), (31 * ms, 30 * ms)], 30 * ms),
        ]
        for name, steps, want in cases:
            with self.subTest(name):
                c = WallChecked()
                got = 0.0
                for wall, mono in steps:
                    nxt = c.advance(wall, mono)
                    self.assertGreaterEqual(nxt, got, f"reading went back: {nxt} after {got}")
                    got = nxt
                self.assertAlmostEqual(got, want, places=9)

    def test_jitter_does_not_add_up(self) -> None:
        from baton.clock import TOLERANCE, WallChecked

        c = WallChecked()
        got = 0.0
        for i in range(100_000):
            mono = i * 1e-6
            got = c.advance(mono + (i % 7 - 3) * TOLERANCE / 8, mono)  # a range of 0.75 x TOLERANCE
        self.assertAlmostEqual(got, 99_999 * 1e-6, places=9)

    def test_default_is_boottime_on_linux(self) -> None:
        from baton import clock

        if not hasattr(time, "CLOCK_BOOTTIME"):
            self.skipTest("SKIPPED: no CLOCK_BOOTTIME here: the fallback is the clock")
        self.assertIs(clock.default(), clock.boottime)


if __name__ == "__main__":
    unittest.main()
