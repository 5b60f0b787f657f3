"""The public surface a redis-py, kazoo or etcd user reaches for: the held
lock as a context manager, a warning for a lock never released, timeouts
that end at the deadline, is_retryable, TLS errors of their own, waiting
for a server that is not up yet, retries and backoff, the wait state, and
observing an election (leader(), observe())."""

from __future__ import annotations

import asyncio
import gc
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import unittest
import warnings
from typing import List

from support import Server, ServerCase, baton, baton_bin, eventually
from test_client import make_certs


def breaking_server() -> "tuple[str, socket.socket]":
    """A listener that accepts every connection and closes it at once: each
    attempt fails with ConnectionBroken, to be retried after a backoff."""
    ln = socket.socket()
    ln.bind(("127.0.0.1", 0))
    ln.listen(64)

    def serve() -> None:
        while True:
            try:
                c, _ = ln.accept()
            except OSError:
                return
            c.close()

    threading.Thread(target=serve, daemon=True).start()
    host, port = ln.getsockname()
    return f"{host}:{port}", ln


def free_addr() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    host, port = s.getsockname()
    s.close()
    return f"{host}:{port}"


class TestHeldIsAContextManager(ServerCase):
    def test_with_acquire(self) -> None:
        c = self.client()
        with c.acquire("py/cm") as held:
            self.assertGreater(held.token, 0)
            with self.assertRaises(baton.Busy):
                self.client().acquire("py/cm", nowait=True)
        with self.client().acquire("py/cm", nowait=True) as again:  # released on the way out
            self.assertGreater(again.token, held.token)

    def test_async_with_aacquire(self) -> None:
        async def main() -> None:
            async with await self.client().aacquire("py/acm") as held:
                self.assertGreater(held.token, 0)
                with self.assertRaises(baton.Busy):
                    await self.client().aacquire("py/acm", nowait=True)
            again = await self.client().aacquire("py/acm", nowait=True)
            await again.release()

        asyncio.run(main())

    def test_garbage_collected_while_held_warns_and_releases(self) -> None:
        c = self.client()
        held = c.acquire("py/gc")
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            del held
            gc.collect()
        self.assertTrue(any(issubclass(w.category, ResourceWarning) and "py/gc" in str(w.message) for w in seen),
                        f"warnings {[str(w.message) for w in seen]}, want a ResourceWarning naming py/gc")
        self.client().acquire("py/gc", nowait=True, timeout=5).release()  # it was released

    def test_leadership_is_not_released_by_the_collector(self) -> None:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            with self.client().campaign("py/gc-elect", "node-a") as leader:
                gc.collect()
                leader.check()
        self.assertFalse([w for w in seen if issubclass(w.category, ResourceWarning)], "a leadership warned while held")


class TestTimeoutEndsAtTheDeadline(unittest.TestCase):
    def test_never_before(self) -> None:
        addr, ln = breaking_server()
        self.addCleanup(ln.close)
        for timeout in (0.5, 1.5):
            start = time.monotonic()
            with self.assertRaises(TimeoutError):
                baton.Client([addr], lease=2).acquire("py/deadline", timeout=timeout)
            took = time.monotonic() - start
            self.assertGreaterEqual(took, timeout, f"timeout={timeout} gave up after {took:.3f}s, before its deadline")
            self.assertLess(took, timeout + 1.0, f"timeout={timeout} gave up after {took:.3f}s")

    def test_async_never_before(self) -> None:
        addr, ln = breaking_server()
        self.addCleanup(ln.close)

        async def main() -> float:
            start = time.monotonic()
            with self.assertRaises(TimeoutError):
                await baton.Client([addr], lease=2).aacquire("py/deadline", timeout=1.0)
            return time.monotonic() - start

        took = asyncio.run(main())
        self.assertGreaterEqual(took, 1.0, f"aacquire timeout=1 gave up after {took:.3f}s")


class TestRetriesAndBackoff(unittest.TestCase):
    def test_retries_bound_the_tries(self) -> None:
        addr, ln = breaking_server()
        self.addCleanup(ln.close)
        start = time.monotonic()
        with self.assertRaises(baton.ConnectionBroken) as e:
            baton.Client([addr], lease=2, backoff=(0.01, 0.02), retries=3).acquire("py/retries", timeout=30)
        self.assertLess(time.monotonic() - start, 5)
        self.assertTrue(baton.is_retryable(e.exception))

    def test_bad_options(self) -> None:
        for kw in ({"backoff": (0, 1)}, {"backoff": (2, 1)}, {"retries": -1}):
            with self.assertRaises(baton.BadRequest):
                baton.Client(["127.0.0.1:1"], **kw)  # type: ignore[arg-type]


class TestIsRetryable(unittest.TestCase):
    def test_classes(self) -> None:
        yes = [baton.Shutdown(), baton.Overloaded(), baton.NotLeader(), baton.LeaseExpired(), baton.Unconfirmed("x"),
               baton.ConnectionBroken("x"), baton.LockLost("a", baton.Unconfirmed("x"))]
        no = [baton.Busy(), baton.Kicked(), baton.ForceReleased(), baton.BadRequest("x"), baton.Unauthorized(),
              baton.LimitMismatch("3"), baton.AlreadyHeld("x"), baton.MaxHoldReached("x"), baton.TLSError("x"),
              baton.TLSRefused("x"), baton.LockLost("a", baton.ForceReleased()), ValueError("x")]
        for e in yes:
            self.assertTrue(baton.is_retryable(e), repr(e))
        for e in no:
            self.assertFalse(baton.is_retryable(e), repr(e))
        self.assertFalse(issubclass(baton.TLSError, baton.ConnectionBroken))


class TestWaitForServer(unittest.TestCase):
    def test_waits_within_the_timeout(self) -> None:
        addr = free_addr()
        with self.assertRaises(baton.ConnectionBroken):  # the default: at once, a wrong address looks the same
            baton.Client([addr]).acquire("py/boot", timeout=10)
        servers: List[Server] = []

        def start_later() -> None:
            time.sleep(0.5)
            servers.append(Server(addr=addr))

        t = threading.Thread(target=start_later)
        t.start()
        try:
            with baton.Client([addr], wait_for_server=True).lock("py/boot", timeout=30) as held:
                self.assertGreater(held.token, 0)
        finally:
            t.join()
            for s in servers:
                s.stop()
        start = time.monotonic()
        with self.assertRaises(TimeoutError):
            baton.Client([free_addr()], wait_for_server=True).acquire("py/boot", timeout=0.5)
        self.assertGreaterEqual(time.monotonic() - start, 0.5)


@unittest.skipIf(shutil.which("openssl") is None, "SKIPPED: no openssl command to make certificates")
class TestTLSErrorClass(unittest.TestCase):
    def test_untrusted_certificate(self) -> None:
        d = tempfile.mkdtemp(prefix="baton-py-tls-")
        make_certs(d)
        data = tempfile.mkdtemp(prefix="baton-py-data-")
        addr = free_addr()
        proc = subprocess.Popen(
            [baton_bin(), "serve", "-addr", addr, "-ops-addr", "127.0.0.1:0", "-data-dir", data, "-shutdown-linger", "0s",
             "-tls-cert", os.path.join(d, "server.crt"), "-tls-key", os.path.join(d, "server.key")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(lambda: (proc.terminate(), proc.wait(15)))
        start = time.monotonic()
        # wait_for_server waits for the listener to come up; the TLS
        # failure that follows is raised at once.
        with self.assertRaises(baton.TLSError) as e:  # the system's roots do not trust the test CA
            baton.Client([addr], ssl_context=ssl.create_default_context(), wait_for_server=True).acquire("py/tls", timeout=10)
        self.assertNotIsInstance(e.exception, baton.ConnectionBroken)
        self.assertFalse(baton.is_retryable(e.exception))
        self.assertLess(time.monotonic() - start, 5, "a TLS failure was retried")


class TestObserveElection(ServerCase):
    def test_leader_and_observe(self) -> None:
        watcher = baton.Client([self.srv.addr], ops_addrs=[self.srv.ops])
        self.assertIsNone(watcher.leader("py/elect"))
        seen: List[baton.Leader] = []
        a = self.client().campaign("py/elect", "node-a:8080")
        leader_a = a.__enter__()

        def follow() -> None:
            for leader in watcher.observe("py/elect", timeout=20):
                seen.append(leader)
                if leader.value == "node-b:8080":
                    return

        t = threading.Thread(target=follow)
        t.start()
        eventually(lambda: len(seen) >= 1, "observe() gave the first leader")
        self.assertEqual(seen[0], baton.Leader("node-a:8080", leader_a.token))
        states: List[baton.WaitState] = []
        b_done = threading.Event()

        def b() -> None:
            with self.client().campaign("py/elect", "node-b:8080"):
                b_done.wait(10)

        tb = threading.Thread(target=b)
        tb.start()
        self.await_waiters("py/elect", 1)
        a.__exit__(None, None, None)
        t.join(20)
        self.assertEqual([x.value for x in seen], ["node-a:8080", "node-b:8080"])
        self.assertGreater(seen[1].token, seen[0].token)
        self.assertEqual(watcher.leader("py/elect"), seen[1])
        b_done.set()
        tb.join()
        del states

    def test_wait_state(self) -> None:
        states: List[baton.WaitState] = []
        with self.client().lock("py/ws"):
            t = threading.Thread(target=lambda: self.client().acquire("py/ws", on_wait_state=states.append, timeout=10).release())
            t.start()
            eventually(lambda: bool(states), "on_wait_state called")
        t.join()
        self.assertEqual(states[0], baton.WaitState(position=1, grace=None))

    def test_observe_needs_ops_addrs(self) -> None:
        with self.assertRaises(baton.BadRequest):
            baton.Client([self.srv.addr]).leader("py/x")


if __name__ == "__main__":
    unittest.main()
