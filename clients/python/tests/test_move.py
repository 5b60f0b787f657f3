"""Claims that move (protocol version 3) against a fake cluster of version 3
(fakev3.FakeCluster) on real TCP: through a restart, a handover, a crash
and a silent leader, a holder keeps its token and its Held (check(), lost,
the work), waiters keep their places, and the helpers (lock_many, an
election, max_hold) go on; a reset loses; a server of an older version is
sent version 1 or 2; resume=False sends today's bytes. Each test runs its
claims on threads and on asyncio."""

from __future__ import annotations

import os
import shutil
import ssl
import tempfile
import time
import unittest
from typing import Any, List

from fakev3 import FakeCluster
from movekit import Asyncio, Driver, Threads, capture, check, core_of, until

import baton
from baton import wire


class MoveCase:
    """The tests; the subclasses give the driver."""

    drv: Driver
    assertEqual: Any
    assertIsNone: Any
    assertIsNotNone: Any
    assertIn: Any
    assertNotIn: Any
    assertTrue: Any
    assertFalse: Any
    assertIsInstance: Any
    assertGreater: Any
    assertLess: Any
    assertRaises: Any
    addCleanup: Any
    fail: Any

    def cluster(self, nodes: int = 1, ctx: "ssl.SSLContext | None" = None) -> "tuple[FakeCluster, List[str]]":
        f = FakeCluster()
        self.addCleanup(f.close)
        return f, [f.listen(ctx) for _ in range(nodes)]

    def client(self, addrs: List[str], lease: float = 2.0, **kw: Any) -> baton.Client:
        return baton.Client(addrs, lease=lease, owner="h:1", **kw)

    def hold(self, f: FakeCluster, c: baton.Client, name: str, **kw: Any) -> Any:
        h = self.drv.acquire(c, name, **kw)
        self.assertEqual(f.holders(name), [(h.token, True)])
        return h

    def assert_moved(self, f: FakeCluster, h: Any, name: str, node: str) -> None:
        """The claim is on node again, with its token, and its Held saw
        nothing."""
        until(lambda: f.holders(name) == [(h.token, True)] and core_of(self.drv, h, "addr") == node,
              f"{name} back on {node} with token {h.token}: {f.holders(name)}")
        self.assertIsNone(check(self.drv, h))
        self.assertFalse(self.drv.on(h.lost.is_set))
        self.assertIsNone(self.drv.on(lambda: h.cause))
        self.assertGreater(self.drv.on(lambda: h.valid_until), time.monotonic())

    def test_shutdown(self) -> None:
        """A standalone server's restart: SHUTDOWN, then the same address."""
        f, (a,) = self.cluster()
        log, seen = capture(f"test.move.shutdown.{self.drv.name}")
        h = self.hold(f, self.client([a], logger=log), "py/m-shutdown")
        token = h.token
        f.shutdown()
        self.assert_moved(f, h, "py/m-shutdown", a)
        self.assertEqual(h.token, token)
        self.assertEqual(f.resumes_seen(), [(a, 1, True, "ACQUIRED")])
        # The thread driver logs after the claim's state changed: wait for the line.
        until(lambda: f"INFO baton: lock 'py/m-shutdown' moved from {a} to {a} in " in seen.text(),
              f"the move logged:\n{seen.text()}")
        # The claim goes on: heartbeats on the new connection keep it past
        # several leases, and the release frees the name.
        time.sleep(2.5)
        self.assertIsNone(check(self.drv, h))
        self.drv.release(h)
        until(lambda: f.holders("py/m-shutdown") == [], "released")

    def test_not_leader(self) -> None:
        """A handover: NOT_LEADER naming the successor, which takes the claim."""
        f, (a, b, c) = self.cluster(3)
        h = self.hold(f, self.client([a, b, c]), "py/m-handover")
        f.handover(c)
        self.assert_moved(f, h, "py/m-handover", c)
        self.assertEqual(f.resumes_seen(), [(c, 1, True, "ACQUIRED")])
        self.drv.release(h)

    def test_crash(self) -> None:
        """The leader's process dies: the end of the stream with no ERROR;
        the same address first, then the leader it names."""
        f, (a, b) = self.cluster(2)
        h = self.hold(f, self.client([a, b]), "py/m-crash")
        f.crash(to=b)
        self.assert_moved(f, h, "py/m-crash", b)
        self.drv.release(h)

    def test_silence(self) -> None:
        """A leader that goes silent: the holder moves to the next address
        after half of the time left to its deadline, keeping the silent
        connection, which its server then ends (MOVED)."""
        f, (a, b) = self.cluster(2)
        log, seen = capture(f"test.move.silence.{self.drv.name}")
        h = self.hold(f, self.client([a, b], lease=4.0, logger=log), "py/m-silence")
        f.freeze()
        f.set_leader(b)  # the cluster moved on; a's clients are not told
        self.addCleanup(f.unfreeze)
        self.assert_moved(f, h, "py/m-silence", b)
        self.assertIn("no answer from", seen.text())
        f.unfreeze()
        until(lambda: f.conns_open(a) == 0, "the connection left on a closed once its server ended it")
        self.assertIsNone(check(self.drv, h))
        self.drv.release(h)

    def test_reset_loses(self) -> None:
        """A reset is not a server's end: it may have been a release on the
        server's side (a middlebox's reset reaches both ends). Lost, and no
        resume is tried."""
        f, (a, b) = self.cluster(2)
        h = self.hold(f, self.client([a, b]), "py/m-reset")
        f.reset_holder("py/m-reset")
        until(lambda: self.drv.on(h.lost.is_set), "the loss seen")
        e = check(self.drv, h)
        self.assertIsInstance(e, baton.LockLost)
        self.assertIsInstance(e.cause, baton.ConnectionBroken)
        self.assertTrue(baton.is_retryable(e))
        time.sleep(0.3)
        self.assertEqual(f.resumes_seen(), [])
        self.assertEqual(f.accepted.get(b, 0), 0)
        with self.assertRaises(baton.LockLost):
            self.drv.release(h)

    def test_waiters_keep_their_places(self) -> None:
        """A handover with a holder and two waiters: each waiter resumes with
        its ticket, the queue keeps its order, and the grants follow it."""
        f, (a, b) = self.cluster(2)
        name = "py/m-queue"
        holder = self.hold(f, self.client([a, b]), name)
        w1 = self.drv.start(self.client([a, b]), name, timeout=30)
        until(lambda: len(f.queued(name)) == 1, "the first waiter queued")
        w2 = self.drv.start(self.client([a, b]), name, timeout=30)
        until(lambda: len(f.queued(name)) == 2, "the second waiter queued")
        order = f.queued(name)
        f.handover(b)
        until(lambda: sorted(r[1:] for r in f.resumes_seen()) == [(1, False, "WAITING"), (1, False, "WAITING"),
                                                                (1, True, "ACQUIRED")],
              f"every claim resumed on b: {f.resumes_seen()}")
        self.assertEqual(f.queued(name), order, "the queue kept its order")
        self.drv.release(holder)
        first = w1.result(30)
        self.assertFalse(w2.done(), "the second waiter was granted before the first")
        self.assertGreater(first.token, holder.token)
        self.drv.release(first)
        second = w2.result(30)
        self.assertGreater(second.token, first.token)
        self.drv.release(second)

    def test_helpers_through_a_move(self) -> None:
        """lock_many, an election and max_hold go on through a move."""
        f, (a, b) = self.cluster(2)
        c = self.client([a, b])
        if isinstance(self.drv, Threads):
            many = c.acquire_many(["py/m-x", "py/m-y"])
            leader = c.campaign("py/m-lead", "me:1").__enter__()
        else:
            lt = self.drv.lt
            many = lt.run(c.aacquire_many(["py/m-x", "py/m-y"]))
            leader = lt.run(c.acampaign("py/m-lead", "me:1").__aenter__())
        hold_start = time.monotonic()
        capped = self.drv.acquire(c, "py/m-cap", max_hold=1.5)
        f.handover(b)
        until(lambda: len(f.resumes_seen()) == 4, f"four claims moved: {f.resumes_seen()}")
        self.assertEqual({r[0] for r in f.resumes_seen()}, {b})
        self.drv.on(many.check)
        self.drv.on(leader.check)
        self.assertIsNone(check(self.drv, capped))
        # max_hold still counts from the grant, not from the move.
        until(lambda: self.drv.on(capped.lost.is_set), "max_hold ended the claim", timeout=5)
        took = time.monotonic() - hold_start
        self.assertIsInstance(self.drv.on(lambda: capped.cause), baton.MaxHoldReached)
        self.assertLess(took, 3.0, f"max_hold 1.5s ended the claim after {took:.2f}s")
        self.assertFalse(self.drv.on(many.lost.is_set))
        if isinstance(self.drv, Threads):
            many.release()
            leader.resign()
        else:
            self.drv.lt.run(many.release())
            self.drv.lt.run(leader.resign())
        until(lambda: all(not f.holders(n) for n in ("py/m-x", "py/m-y", "py/m-lead", "py/m-cap")), "all released")

    def test_fresh_credential(self) -> None:
        """After a new generation the first heartbeat reply brings the claim's
        credential of it, and the next move carries that one: two
        generations later the first credential would be refused."""
        f, (a,) = self.cluster()
        h = self.hold(f, self.client([a], lease=1.0), "py/m-gen")
        self.assertEqual(core_of(self.drv, h, "generation"), 1)
        f.new_generation()
        until(lambda: core_of(self.drv, h, "generation") == 2, "the fresh credential kept")
        f.new_generation()  # generation 1 is now too old
        f.shutdown()
        self.assert_moved(f, h, "py/m-gen", a)
        self.assertEqual(f.resumes_seen(), [(a, 1, True, "ACQUIRED")])
        self.drv.release(h)

    def test_version_fallback(self) -> None:
        """A server older than version 3 answers VERSION: the claim goes as
        version 1 (2 when shared) on a new connection at once, and the
        Client remembers the address: its next claim costs no extra round
        trip. Such a claim cannot move: SHUTDOWN ends it."""
        f, (a,) = self.cluster()
        f.set_old(a)
        log, seen = capture(f"test.move.fallback.{self.drv.name}")
        c = self.client([a], logger=log)
        h = self.drv.acquire(c, "py/m-old")
        self.assertEqual(f.accepted[a], 2)
        self.assertEqual([fr[3] for fr in f.firsts[a]], [3, 1])
        self.assertEqual(f.firsts[a][1], wire.encode_acquire("py/m-old", 2000, "h:1"))
        self.assertIn("does not speak protocol version 3", seen.text())
        h2 = self.drv.acquire(c, "py/m-old2", limit=2)
        self.assertEqual(f.accepted[a], 3, "the address answered VERSION before: version 2 at once")
        self.assertEqual(f.firsts[a][2], wire.encode_acquire("py/m-old2", 2000, "h:1", shared=True, limit=2))
        h3 = self.drv.acquire(self.client([a]), "py/m-old3")
        self.assertEqual(f.accepted[a], 5, "a new Client does not know the address yet")
        f.shutdown()
        until(lambda: self.drv.on(h.lost.is_set), "the version 1 claim ended by SHUTDOWN")
        self.assertIsInstance(self.drv.on(lambda: h.cause), baton.Shutdown)
        for x in (h2, h3):
            until(lambda: self.drv.on(x.lost.is_set), "ended")
        self.assertEqual(f.resumes_seen(), [])

    def test_resume_off(self) -> None:
        """resume=False sends the bytes of a client without version 3, for
        the Client or one claim; the claim ends with its connection."""
        f, (a,) = self.cluster()
        h = self.drv.acquire(self.client([a], resume=False), "py/m-off")
        h2 = self.drv.acquire(self.client([a]), "py/m-off2", resume=False, shared=True)
        self.assertEqual(f.firsts[a], [wire.encode_acquire("py/m-off", 2000, "h:1"),
                                       wire.encode_acquire("py/m-off2", 2000, "h:1", shared=True,
                                                           limit=wire.MAX_LIMIT)])
        f.shutdown()
        for x in (h, h2):
            until(lambda: self.drv.on(x.lost.is_set), "a claim without version 3 ended by SHUTDOWN")
            self.assertIsInstance(self.drv.on(lambda: x.cause), baton.Shutdown)
        self.assertEqual(f.resumes_seen(), [])
        with self.assertRaises(baton.BadRequest):
            baton.Client([a], resume="no")  # type: ignore[arg-type]

    @unittest.skipIf(shutil.which("openssl") is None, "SKIPPED: no openssl command to make certificates")
    def test_tls(self) -> None:
        """Over TLS, the end of the stream without close_notify (a process
        that dies) is a server's going away: the claim moves."""
        from test_client import make_certs

        d = tempfile.mkdtemp(prefix="baton-py-v3tls-")
        make_certs(d)
        server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server.load_cert_chain(os.path.join(d, "server.crt"), os.path.join(d, "server.key"))
        f, (a, b) = self.cluster(2, server)
        ctx = ssl.create_default_context(cafile=os.path.join(d, "ca.crt"))
        h = self.hold(f, self.client([a, b], ssl_context=ctx), "py/m-tls")
        f.crash(to=b)
        self.assert_moved(f, h, "py/m-tls", b)
        self.drv.release(h)


class TestMoveThreads(MoveCase, unittest.TestCase):
    def setUp(self) -> None:
        self.drv = Threads()


class TestMoveAsyncio(MoveCase, unittest.TestCase):
    def setUp(self) -> None:
        self.drv = Asyncio()
        self.addCleanup(self.drv.close)


if __name__ == "__main__":
    unittest.main()
