"""The Python client's helpers against the real server: the clock-true
check, re-entrancy, release reporting a loss, the queue position, logging,
several names at once, leader election and a maximum hold."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import threading
import time
import unittest
import urllib.parse
import urllib.request

from support import ServerCase, ended, eventually
from test_client import Follower, Proxy

import baton
from baton import wire
from baton.core import HELD, Core


# An ACQUIRED reply with token 7.
GRANT_7 = wire.encode_frame(wire.T_ACQUIRED, bytes([0]) + (7).to_bytes(8, "big"))


class TestClockTrueCheck(unittest.TestCase):
    """The Core alone, with a clock the test moves: the deadline counts from
    the send of the latest answered request, whatever the threads did."""

    def test_overdue_from_the_send(self) -> None:
        c = Core("jobs", "a:1", lease=1.0)
        c.sent_acquire(100.0)
        events, err = c.receive(GRANT_7, 100.3)
        self.assertIsNone(err)
        self.assertEqual((c.state, events), (HELD, [("granted", 7)]))
        self.assertEqual(c.valid_until(), 100.8, "0.8 x lease from the ACQUIRE's send, not from the reply")
        self.assertIsNone(c.overdue(100.79))
        self.assertIsInstance(c.overdue(100.8), baton.Unconfirmed)
        # A reply that arrives past the deadline confirms nothing.
        c.sent_beat(100.5)
        _, err = c.receive(GRANT_7, 100.81)
        self.assertIsInstance(err, baton.Unconfirmed)

    def test_max_hold_deadline(self) -> None:
        c = Core("jobs", "a:1", lease=10.0, max_hold=0.5)
        c.sent_acquire(0.0)
        c.receive(GRANT_7, 0.1)
        self.assertEqual(c.valid_until(), 0.6)
        self.assertIsInstance(c.overdue(0.6), baton.MaxHoldReached)


class TestReentrancy(ServerCase):
    def test_same_name_twice_is_refused(self) -> None:
        c = self.client()
        with c.lock("py/re") as held:
            start = time.monotonic()
            with self.assertRaises(baton.AlreadyHeld):
                c.acquire("py/re", timeout=2)
            self.assertLess(time.monotonic() - start, 0.5, "refused at once, not after waiting")

            async def in_loop() -> None:
                with self.assertRaises(baton.AlreadyHeld):
                    await c.aacquire("py/re", timeout=2)

            asyncio.run(in_loop())
            with self.assertRaises(baton.Busy):  # nowait cannot wait on itself: the server answers
                c.acquire("py/re", nowait=True)
            with c.lock("py/re-other"):  # other names are not refused
                pass
            got = {}
            t = threading.Thread(target=lambda: got.setdefault("h", c.acquire("py/re", timeout=10, queue_behind_self=True)))
            t.start()
            self.await_waiters("py/re", 1)
        t.join(10)
        self.assertGreater(got["h"].token, held.token, "the opt-out queues behind the holder")
        got["h"].release()
        with c.lock("py/re", timeout=5):  # free again after the release
            pass

    def test_name_is_free_again_after_a_loss(self) -> None:
        c = self.client(lease=10)
        held = c.acquire("py/re-lost")
        self.srv.force_release("py/re-lost")
        self.assertTrue(held.lost.wait(5))
        with c.lock("py/re-lost", timeout=5):
            pass
        self.assertRaises(baton.LockLost, held.release)


class TestReleaseReportsLoss(ServerCase):
    def test_release_after_force_release(self) -> None:
        c = self.client(lease=10)
        held = c.acquire("py/rl")
        self.srv.force_release("py/rl")
        self.assertTrue(held.lost.wait(5))
        with self.assertRaises(baton.LockLost) as cm:
            held.release()
        self.assertIsInstance(cm.exception.cause, baton.ForceReleased)
        fine = c.acquire("py/rl2")
        fine.release()  # a release of a held lock reports nothing

    def test_the_blocks_own_loss_goes_on(self) -> None:
        """A LockLost the block raised itself (from check()) leaves the block
        as it is, not replaced by the release's."""
        c = self.client(lease=10)
        raised = {}
        with self.assertRaises(baton.LockLost) as cm:
            with c.lock("py/own") as held:
                self.srv.force_release("py/own")
                self.assertTrue(held.lost.wait(5))
                try:
                    held.check()
                except baton.LockLost as e:
                    raised["e"] = e
                    raise
        self.assertIs(cm.exception, raised["e"])

    def test_async_release_after_force_release(self) -> None:
        async def main() -> None:
            held = await self.client(lease=10).aacquire("py/arl")
            await asyncio.get_running_loop().run_in_executor(None, self.srv.force_release, "py/arl")
            for _ in range(500):
                if held.lost.is_set():
                    break
                await asyncio.sleep(0.01)
            with self.assertRaises(baton.LockLost):
                await held.release()

        asyncio.run(main())


class TestQueuePosition(ServerCase):
    def test_positions_reach_the_caller(self) -> None:
        c1, c2, c3 = self.client(lease=0.4), self.client(lease=0.4), self.client(lease=0.4)
        holder = c1.acquire("py/pos")
        seen2, seen3 = [], []
        got = {}
        t2 = threading.Thread(target=lambda: got.setdefault("2", c2.acquire("py/pos", timeout=10, on_waiting=seen2.append)))
        t2.start()
        self.await_waiters("py/pos", 1)
        t3 = threading.Thread(target=lambda: got.setdefault("3", c3.acquire("py/pos", timeout=10, on_waiting=seen3.append)))
        t3.start()
        self.await_waiters("py/pos", 2)
        eventually(lambda: len(seen2) >= 3 and len(seen3) >= 3, "positions of the heartbeat replies")
        holder.release()
        t2.join(10)
        eventually(lambda: 1 in seen3, "the second waiter moved up to 1")
        got["2"].release()
        t3.join(10)
        got["3"].release()
        self.assertEqual(set(seen2), {1})
        self.assertEqual(seen3[0], 2)
        self.assertEqual(seen3[-1], 1)

    def test_positions_in_asyncio(self) -> None:
        async def main() -> list:
            holder = await self.client().aacquire("py/apos")
            seen: list = []
            waiter = asyncio.create_task(self.client().aacquire("py/apos", on_waiting=seen.append))
            for _ in range(500):
                if seen:
                    break
                await asyncio.sleep(0.01)
            await holder.release()
            await (await waiter).release()
            return seen

        self.assertEqual(asyncio.run(main())[:1], [1])


class TestLogging(ServerCase):
    def test_connect_miss_and_loss(self) -> None:
        proxy = Proxy(self.srv.addr)
        self.addCleanup(proxy.stop)
        log = logging.getLogger("test.baton.miss")
        with self.assertLogs(log, level="DEBUG") as cm:
            held = baton.Client([proxy.addr], lease=1.0, logger=log).acquire("py/log")
            time.sleep(0.3)
            proxy.command("stall both")
            self.assertTrue(held.lost.wait(5))
        text = "\n".join(cm.output)
        self.assertIn(f"connected to {proxy.addr}", text)
        self.assertIn("no reply from", text)
        self.assertIn("lost: no confirmation", text)
        levels = {r.getMessage().split(":")[1].strip().split(" ")[0]: r.levelname for r in cm.records}
        self.assertTrue(any(r.levelname == "WARNING" and "lost" in r.getMessage() for r in cm.records), levels)
        self.assertRaises(baton.LockLost, held.release)

    def test_redirect(self) -> None:
        f = Follower(self.srv.addr)
        self.addCleanup(f.close)
        log = logging.getLogger("test.baton.redirect")
        with self.assertLogs(log, level="INFO") as cm:
            with baton.Client([f.addr, self.srv.addr], lease=2, logger=log).lock("py/log-redirect", timeout=10):
                pass
        self.assertTrue(any(f"following it to {self.srv.addr}" in line for line in cm.output), cm.output)

    def test_silent_by_default(self) -> None:
        self.assertTrue(any(isinstance(h, logging.NullHandler) for h in logging.getLogger("baton").handlers))


class TestLockMany(ServerCase):
    def test_opposite_orders_never_deadlock(self) -> None:
        """Two threads want the same two names, listed in opposite orders,
        fifty times each: sorted acquisition means neither holds one and waits
        for the other's."""
        done = []

        def worker(names: "list[str]") -> None:
            c = self.client(lease=2)
            for _ in range(50):
                with c.lock_many(names, timeout=10) as many:
                    self.assertEqual(set(many.tokens), set(names))
                    many.check()
            done.append(names)

        ts = [threading.Thread(target=worker, args=(n,)) for n in (["m/a", "m/b"], ["m/b", "m/a"])]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        self.assertEqual(len(done), 2)

    def test_all_or_nothing(self) -> None:
        other = self.client().acquire("m/y")
        c = self.client()
        with self.assertRaises(TimeoutError):
            c.acquire_many(["m/y", "m/x"], timeout=0.3)
        with self.client().lock("m/x", nowait=True):  # the name it got first was given back
            pass
        other.release()
        with self.assertRaises(baton.BadRequest):
            c.acquire_many([])

    def test_one_lost_ends_the_whole(self) -> None:
        c = self.client(lease=10)
        with self.assertRaises(baton.LockLost) as cm:
            with c.lock_many(["m/p", "m/q"]) as many:
                self.assertEqual(sorted(many.tokens), ["m/p", "m/q"])
                self.srv.force_release("m/q")
                self.assertTrue(many.lost.wait(5))
                with self.assertRaises(baton.LockLost):
                    many.check()
        self.assertIsInstance(cm.exception.cause, baton.ForceReleased)
        self.assertEqual(cm.exception.name, "m/q")
        with self.client().lock("m/p", nowait=True):  # released with the rest
            pass

    def test_async_block_is_cancelled_when_one_is_lost(self) -> None:
        c = self.client(lease=10)

        async def main() -> str:
            try:
                async with c.alock_many(["m/ap", "m/aq"]) as many:
                    self.assertEqual(sorted(many.tokens), ["m/ap", "m/aq"])
                    await asyncio.get_running_loop().run_in_executor(None, self.srv.force_release, "m/ap")
                    await asyncio.sleep(30)
                    return "ran on"
            except baton.LockLost as e:
                return f"lost {e.name}"

        self.assertEqual(asyncio.run(main()), "lost m/ap")


class TestElection(ServerCase):
    def ops_owner(self, name: str) -> str:
        with urllib.request.urlopen(f"http://{self.srv.ops}/v1/locks/{urllib.parse.quote(name, safe='')}", timeout=5) as r:
            return json.load(r)["holder"]["owner"]

    def test_two_candidates(self) -> None:
        a, b = self.client(), self.client()
        with a.campaign("svc/leader", "node-a:8080") as leader:
            self.assertEqual(leader.value, "node-a:8080")
            self.assertEqual(self.ops_owner("svc/leader"), "node-a:8080", "the value is the owner operators see")
            got = {}
            t = threading.Thread(target=lambda: got.setdefault("b", b.campaign("svc/leader", "node-b:8080").__enter__()))
            t.start()
            self.await_waiters("svc/leader", 1)
            leader.check()
        t.join(10)  # a resigned on leaving the block: b leads at once
        self.assertGreater(got["b"].token, leader.token)
        self.assertEqual(self.ops_owner("svc/leader"), "node-b:8080")
        got["b"].resign()

    def test_leadership_ends_on_loss(self) -> None:
        async def main() -> str:
            try:
                async with self.client(lease=10).acampaign("svc/aleader", "node-a") as leader:
                    self.assertEqual(leader.value, "node-a")
                    await asyncio.get_running_loop().run_in_executor(None, self.srv.force_release, "svc/aleader")
                    await asyncio.sleep(30)
                    return "still leading"
            except baton.LockLost:
                return "lost"

        self.assertEqual(asyncio.run(main()), "lost")

    def test_example_runs_two_candidates(self) -> None:
        example = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "election.py")
        out = subprocess.run([sys.executable, example, self.srv.addr], capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stdout.splitlines()
        # a starts 0.1 s before b, but a loaded machine may run b first:
        # whichever leads first resigns before the other leads.
        first, second = lines[0].split()[0], lines[5].split()[0]
        self.assertEqual({first, second}, {"candidate-a", "candidate-b"}, out.stdout)
        self.assertEqual([ln for ln in lines if "leads" in ln or "resigns" in ln][:4],
                         [lines[0], f"{first} resigns", lines[5], f"{second} resigns"], out.stdout)
        self.assertTrue(lines[0].startswith(f"{first} leads") and lines[5].startswith(f"{second} leads"), out.stdout)


class TestMaxHold(ServerCase):
    def test_the_claim_ends_and_the_work_is_told(self) -> None:
        c = self.client(lease=10)
        waiter = {}
        with self.assertRaises(baton.LockLost) as cm:
            with c.lock("py/maxhold", max_hold=0.5) as held:
                t = threading.Thread(target=lambda: waiter.setdefault("h", self.client().acquire("py/maxhold", timeout=10)))
                t.start()
                self.await_waiters("py/maxhold", 1)
                before = ended(self.srv.ops, "reset")
                start = time.monotonic()
                self.assertTrue(held.lost.wait(5))
                seen = time.monotonic() - start
                with self.assertRaises(baton.LockLost):
                    held.check()
        self.assertIsInstance(cm.exception.cause, baton.MaxHoldReached)
        t.join(10)
        self.assertIn("h", waiter, "the next waiter was not granted when the hold ended")
        waiter["h"].release()
        self.assertLess(seen, 1.0)
        eventually(lambda: ended(self.srv.ops, "reset") >= before + 1, "the hold's end was not a reset, as a release is")

    def test_max_hold_in_asyncio(self) -> None:
        async def main() -> float:
            start = time.monotonic()
            try:
                async with self.client(lease=10).alock("py/amaxhold", max_hold=0.3):
                    await asyncio.sleep(30)
            except baton.LockLost as e:
                self.assertIsInstance(e.cause, baton.MaxHoldReached)
            return time.monotonic() - start

        self.assertLess(asyncio.run(main()), 2.0)

    def test_bad_max_hold(self) -> None:
        for bad in (0, -1, "1s", float("nan")):
            with self.subTest(bad=bad), self.assertRaises(baton.BadRequest):
                self.client().lock("py/x", max_hold=bad)  # type: ignore[arg-type]


if __name__ == "__main__":
    unittest.main()
