"""A paused holder never acts on a lock it lost: the holder's whole process
is stopped (SIGSTOP) past its lease, the waiter (this test) is granted, and
on SIGCONT the holder's first held.check() must report the loss, before any
thread of the client has run. The holder is tests/holder.py, a child
process; BATON_PY_PATH makes it import another copy of the package."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import unittest

from support import HERE, ServerCase

LEASE = 2.0


@unittest.skipUnless(hasattr(signal, "SIGSTOP"), "SKIPPED: no SIGSTOP on this system")
class TestPausedHolder(ServerCase):
    def _paused(self, mode: str) -> None:
        name = f"py/pause-{mode}"
        child = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "holder.py"), self.srv.addr, name, str(LEASE), str(LEASE / 2), mode],
            stdout=subprocess.PIPE, text=True)
        self.addCleanup(lambda: (child.poll() is None and child.kill(), child.wait(10), child.stdout and child.stdout.close()))
        assert child.stdout is not None
        first = child.stdout.readline().split()
        self.assertEqual(first[:1], ["held"], f"the holder did not take the lock: {first}")

        got = {}

        def waiter() -> None:
            got["held"] = self.client(lease=LEASE).acquire(name, timeout=30)
            got["at"] = time.monotonic()

        t = threading.Thread(target=waiter)
        t.start()
        self.await_waiters(name, 1)
        os.kill(child.pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        t.join(30)
        self.assertIn("held", got, "the waiter was not granted while the holder was stopped")
        # Stopped for at least a lease, well past the holder's GAP.
        time.sleep(max(0.0, stopped_at + LEASE - time.monotonic()))
        resumed_at = time.monotonic()
        os.kill(child.pid, signal.SIGCONT)
        said = child.stdout.readline().strip()
        child.wait(10)
        print(f"\n  {mode}: stopped {resumed_at - stopped_at:.2f}s; waiter granted {got['at'] - stopped_at:.2f}s "
              f"after the stop; the holder's first check after SIGCONT: {said!r}", file=sys.stderr)
        self.assertTrue(said.startswith("after a pause"), f"the holder said {said!r}")
        self.assertIn("lost", said, "the holder's first step after the pause ran on a lock the waiter held")
        got["held"].release()

    def test_thread_holder(self) -> None:
        self._paused("thread")

    def test_asyncio_holder(self) -> None:
        self._paused("asyncio")


if __name__ == "__main__":
    unittest.main()
