"""Each rule of a claim's move (docs/protocol.md, section 14, "The client")
against a scripted server (fakev3.Scripted) on real TCP, on threads and on
asyncio: the test plays every frame, and moves the client's clock forward
(a suspend, as the suspend-aware clock sees it) where a rule is about
time, so that nothing waits for a real lease."""

from __future__ import annotations

import base64
import concurrent.futures
import json
import os
import time
import unittest
from typing import Any, List, Optional, Tuple

from fakev3 import Peer, Scripted, acquired_frame, frame, waiting_frame
from movekit import Asyncio, Driver, JumpClock, Threads, capture, check, core_of, until
from support import REPO

import baton
from baton import wire

CRED = bytes.fromhex("68ed1cf56c6decb4aae3230bcc9f04d5")  # the vectors' holder credential, generation 1
CRED2 = bytes.fromhex("ca583de0b2bcb444b1a44d4ef65a6f64")  # the same claim's, generation 2
WCRED = bytes.fromhex("eba34481e394b269f4606e86f8c5f9dc")  # the vectors' shared waiter's
TOKEN = 0x0000030000000007
TICKET = 0x0000030000000009


class RulesCase:
    drv: Driver
    assertEqual: Any
    assertIsNone: Any
    assertIn: Any
    assertNotIn: Any
    assertTrue: Any
    assertFalse: Any
    assertIsInstance: Any
    assertGreater: Any
    addCleanup: Any
    subTest: Any

    def net(self, n: int = 1) -> Scripted:
        s = Scripted(n)
        self.addCleanup(s.close)
        return s

    def client(self, net: Scripted, lease: float = 2.0, **kw: Any) -> Tuple[baton.Client, JumpClock]:
        c = baton.Client(net.addrs, lease=lease, owner="h:1", **kw)
        clock = JumpClock()
        c._clock = clock
        return c, clock

    def hold(self, net: Scripted, c: baton.Client, token: int = TOKEN, cred: Optional[bytes] = CRED,
             name: str = "jobs", **kw: Any) -> Tuple[Any, Peer]:
        """A claim granted on the first address, with a credential (unless
        cred is None)."""
        fut = self.drv.start(c, name, **kw)
        p = net.accept()
        a = p.acquire()
        self.assertEqual(a.version, 3)
        p.send(acquired_frame(token, 1, cred) if cred else acquired_frame(token))
        return fut.result(10), p

    def wait(self, net: Scripted, c: baton.Client, **kw: Any) -> Tuple["concurrent.futures.Future[Any]", Peer]:
        """A claim queued on the first address with a ticket."""
        fut = self.drv.start(c, "jobs", **kw)
        p = net.accept()
        p.acquire()
        p.send(waiting_frame(2, TICKET, 1, WCRED))
        return fut, p

    def resumed(self, q: Peer, held: bool = True, ident: int = TOKEN, gen: int = 1, cred: bytes = CRED,
                attempt: Optional[int] = None) -> Any:
        """Reads q's first frame: a resume of the claim."""
        a = q.acquire()
        self.assertTrue(a.resuming, "a resume")
        self.assertEqual((a.held, a.resume_id, a.generation, a.credential), (held, ident, gen, cred))
        if attempt is not None:
            self.assertEqual(a.attempt, attempt)
        return a

    def lost(self, h: Any, cause: type) -> BaseException:
        until(lambda: self.drv.on(h.lost.is_set), "the loss seen")
        e = check(self.drv, h)
        self.assertIsInstance(e, baton.LockLost)
        self.assertIsInstance(e.cause, cause, f"the cause {e.cause!r}")
        return e

    def beat(self, h: Any, clock: JumpClock, p: Peer) -> None:
        """Moves the clock to the next heartbeat, and reads it on p."""
        clock.jump(self.drv.on(lambda: h._s.core.lease) / 4)
        h._s.poke()
        p.next(wire.T_HEARTBEAT)

    def silence(self, h: Any, clock: JumpClock) -> None:
        """Moves the clock past the silence trigger of the heartbeat in
        flight: half of the time left to the deadline, and the jitter's
        eighth."""
        core = h._s.core
        clock.jump(self.drv.on(lambda: (core.deadline - core.sent_at) * 0.63 - (clock() - core.sent_at)))
        h._s.poke()

    # The triggers.

    def test_moves_after(self) -> None:
        """A server's end moves a holder at once, where the spec says, with
        its token, generation, credential and attempt 1; the answer confirms
        it as of the resume's send; the Held sees nothing; heartbeats go on
        at the new connection."""
        for what, end, where in [
            ("SHUTDOWN", lambda p: p.fail("SHUTDOWN", "bye"), 0),
            ("NOT_LEADER naming a node of the list", lambda p, n=None: p.fail("NOT_LEADER", self._addrs[2]), 2),
            ("NOT_LEADER naming a node off the list", lambda p: p.fail("NOT_LEADER", "evil:1"), 1),
            ("OVERLOADED", lambda p: p.fail("OVERLOADED"), 0),
            ("a server condition not yet named", lambda p: p.fail(0x0F), 0),
            ("the end of the stream", lambda p: p.eof(), 1),
        ]:
            with self.subTest(what):
                net = self.net(3)
                self._addrs = net.addrs
                c, _ = self.client(net, lease=10.0)
                h, p = self.hold(net, c)
                end(p)
                p.closed()
                q = net.accept()
                self.assertEqual(q.addr, net.addrs[where])
                a = self.resumed(q, attempt=1)
                self.assertEqual((a.shared, a.limit, a.lease_ms, a.name, a.owner, a.nowait),
                                 (False, 1, 10000, b"jobs", b"h:1", False))
                sent = time.monotonic()
                q.send(acquired_frame(TOKEN, 1, CRED))
                until(lambda: core_of(self.drv, h, "cur_num") == 1, "adopted")
                self.assertIsNone(check(self.drv, h))
                self.assertFalse(self.drv.on(h.lost.is_set))
                self.assertEqual(h.token, TOKEN)
                # valid until 0.8 x lease from the resume's send.
                self.assertTrue(sent - 0.5 + 8 < self.drv.on(lambda: h.valid_until) < sent + 8 + 0.5)
                self.drv.release(h)
                q.closed()

    def test_end_of_stream_waits_before_the_same_address(self) -> None:
        """After the end of the stream (its server's process went away) that
        address is not dialled again for 250 ms (here a standalone server,
        the only address): a dying process closes its connections a moment
        before its listening socket, and a connection queued there in that
        moment is reset, which would lose the claim. It then resumes as any
        move."""
        net = self.net()
        c, _ = self.client(net, lease=10.0)
        h, p = self.hold(net, c)
        ended = time.monotonic()
        p.eof()
        q = net.accept()
        self.resumed(q, attempt=1)
        waited = time.monotonic() - ended
        self.assertGreaterEqual(waited, 0.24, f"the same address dialled again {waited * 1000:.0f} ms after the end")
        q.send(acquired_frame(TOKEN, 1, CRED))
        until(lambda: core_of(self.drv, h, "cur_num") == 1, "adopted")
        self.assertIsNone(check(self.drv, h))
        self.drv.release(h)

    def test_loses_after(self) -> None:
        """The ends a claim is not carried across: a reset or an end inside a
        frame may have been a release on the server's side; the codes of the
        lock's rules and client errors end it; a claim without a credential
        ends as in version 2, whatever ended its connection."""
        for what, cred, end, cause in [
            ("a reset", CRED, lambda p: p.reset(), baton.ConnectionBroken),
            ("the end of the stream inside a header", CRED, lambda p: (p.send(b"\x82\x00"), p.eof()), baton.ConnectionBroken),
            ("the end of the stream after a header", CRED, lambda p: (p.send(b"\x82\x00\x09"), p.eof()), baton.ConnectionBroken),
            ("FORCE_RELEASED", CRED, lambda p: p.fail("FORCE_RELEASED"), baton.ForceReleased),
            ("LEASE_EXPIRED", CRED, lambda p: p.fail("LEASE_EXPIRED"), baton.LeaseExpired),
            ("RESUME_REFUSED", CRED, lambda p: p.fail("RESUME_REFUSED"), baton.ResumeRefused),
            ("PROTOCOL", CRED, lambda p: p.fail("PROTOCOL"), baton.ProtocolError),
            ("a code outside the ranges", CRED, lambda p: p.fail(0x30), baton.ServerError),
            ("SHUTDOWN to a claim without a credential", None, lambda p: p.fail("SHUTDOWN"), baton.Shutdown),
            ("the end of the stream of a claim without a credential", None, lambda p: p.eof(), baton.ConnectionBroken),
        ]:
            with self.subTest(what):
                net = self.net(2)
                c, _ = self.client(net)
                h, p = self.hold(net, c, cred=cred)
                end(p)
                self.lost(h, cause)
                self.assertTrue(net.no_accept(0.3), "a resume was tried")

    def test_answer_after_the_deadline_loses(self) -> None:
        """An answer to a resume confirms the claim only if it arrives before
        the claim's deadline. The machine sleeps after the resume was sent,
        past the deadline but not past the resume's own send plus 0.8 x
        lease: the answer that comes then must not be adopted."""
        net = self.net()
        log, seen = capture(f"test.rules.late.{self.drv.name}")
        c, clock = self.client(net, lease=10.0, logger=log)
        h, p = self.hold(net, c)  # deadline: 8 s after the ACQUIRE's send
        clock.jump(1.0)
        p.fail("SHUTDOWN")
        q = net.accept()
        self.resumed(q)  # sent at 1 s: its own bound is 9 s
        bound = clock() - 1.0 + 9.0  # the resume's send plus 0.8 x lease, at the latest
        # Let the driver go back to its wait, so that the answer, not a timer
        # that sees the jump first, is what wakes it (if a timer does, the
        # claim is lost by the clock alone: the test passes without having
        # tried the rule; the other driver's run still tries it).
        time.sleep(0.2)
        clock.jump(7.5)
        q.send(acquired_frame(TOKEN, 1, CRED))  # read at 8.5 s
        # The driver decides alone (a look at the Held would end the claim by
        # the clock before the answer is read): its log says how.
        until(lambda: "lost" in seen.text() or "moved from" in seen.text(), "the answer read")
        self.lost(h, baton.Unconfirmed)
        # Lost at the answer, not at the bound an adopted answer would give.
        self.assertLess(clock(), bound, "the claim was lost only at the resume's own bound: the late answer was adopted")
        self.assertNotIn("moved from", seen.text(), "the late answer was adopted")
        q.closed()

    def test_attempts_out_of_order(self) -> None:
        """The highest-numbered attempt answered is adopted, in whatever
        order the answers come; a lower one answered after a higher one is
        ignored, and left open until its server ends it."""
        for higher_first in (True, False):
            with self.subTest("the higher answered first" if higher_first else "the lower answered first"):
                net = self.net(3)
                c, clock = self.client(net, lease=20.0)
                h, a = self.hold(net, c)
                self.beat(h, clock, a)
                self.silence(h, clock)
                b = net.accept()
                self.assertEqual(b.addr, net.addrs[1])
                self.resumed(b, attempt=1)
                clock.jump(20.0 / 8)  # no answer within lease/8: another address
                h._s.poke()
                c3 = net.accept()
                self.assertEqual(c3.addr, net.addrs[2])
                self.resumed(c3, attempt=2)
                if higher_first:
                    c3.send(acquired_frame(TOKEN, 1, CRED))
                    until(lambda: core_of(self.drv, h, "cur_num") == 2, "attempt 2 adopted")
                    b.send(acquired_frame(TOKEN, 1, CRED))  # attempt 1, later: ignored
                    until(lambda: core_of(self.drv, h, "left"), "attempt 1 left")
                else:
                    b.send(acquired_frame(TOKEN, 1, CRED))
                    until(lambda: core_of(self.drv, h, "cur_num") == 1, "attempt 1 adopted")
                    c3.send(acquired_frame(TOKEN, 1, CRED))
                    until(lambda: core_of(self.drv, h, "cur_num") == 2, "attempt 2 adopted in turn")
                    # Attempt 1's round trip counted the clock's jump, so the
                    # schedule may have sent a heartbeat at once while it was
                    # the claim's connection: allowed then, not after.
                    b.drop(wire.T_HEARTBEAT)
                self.assertTrue(b.quiet(0.2), "attempt 1 was written to or closed: it stays open until its server ends it")
                self.beat(h, clock, c3)  # the schedule is on attempt 2's connection
                self.assertTrue(b.quiet(0.1) and a.quiet(0.1), "a heartbeat went to a connection the claim left")
                b.fail("MOVED")  # its server: the claim is on a higher attempt
                b.closed()
                a.fail("MOVED")
                a.closed()
                self.assertIsNone(check(self.drv, h))
                self.drv.release(h)
                c3.closed()

    def test_moved_on_the_claims_connection(self) -> None:
        """MOVED where the claim is: when the client has its own attempt open
        at that server, it waits for that attempt's answer; when it does
        not, another connection used the credential: lost. MOVED on an
        attempt ends that attempt only."""
        with self.subTest("its own attempt there"):
            net = self.net()
            c, clock = self.client(net, lease=20.0)
            h, p = self.hold(net, c)
            self.beat(h, clock, p)
            self.silence(h, clock)
            q = net.accept()  # an attempt to the only address
            self.resumed(q)
            p.fail("MOVED")  # the server moved the claim to it
            p.closed()
            self.assertIsNone(check(self.drv, h))
            q.send(acquired_frame(TOKEN, 1, CRED))
            until(lambda: core_of(self.drv, h, "cur_num") == 1, "adopted")
            self.beat(h, clock, q)
            self.drv.release(h)
        with self.subTest("another connection"):
            net = self.net(2)
            c, _ = self.client(net)
            h, p = self.hold(net, c)
            p.fail("MOVED")
            e = self.lost(h, baton.Moved)
            self.assertFalse(baton.is_retryable(e))
            self.assertTrue(net.no_accept(0.3), "a resume was tried")
        with self.subTest("an attempt the claim has passed"):
            net = self.net(3)
            c, clock = self.client(net, lease=20.0)
            h, p = self.hold(net, c)
            self.beat(h, clock, p)
            self.silence(h, clock)
            b = net.accept()
            self.resumed(b, attempt=1)
            b.fail("MOVED")  # ends attempt 1 only
            b.closed()
            q = net.accept()  # the move goes on
            self.resumed(q, attempt=2)
            q.send(acquired_frame(TOKEN, 1, CRED))
            until(lambda: core_of(self.drv, h, "cur_num") == 2, "adopted")
            self.assertIsNone(check(self.drv, h))
            self.drv.release(h)

    def test_silence_keeps_the_connection(self) -> None:
        """After silence the claim's connection is kept (its server did not
        end it): a late answer there still confirms and stops the move (no
        more attempts); the attempt open stays open, and its answer, when it
        comes, is adopted."""
        net = self.net(3)
        log, seen = capture(f"test.rules.silence.{self.drv.name}")
        c, clock = self.client(net, lease=20.0, logger=log)
        h, p = self.hold(net, c)
        self.beat(h, clock, p)
        self.silence(h, clock)
        b = net.accept()
        self.resumed(b, attempt=1)
        self.assertTrue(p.quiet(0.1), "the silent connection was closed")
        p.send(acquired_frame(TOKEN))  # the late answer
        until(lambda: not core_of(self.drv, h, "moving"), "the move stopped")
        self.assertIsNone(check(self.drv, h))
        clock.jump(20.0 / 8)
        h._s.poke()
        self.assertTrue(net.no_accept(0.3), "another attempt after the claim's connection confirmed again")
        self.assertTrue(b.quiet(0.1), "the open attempt was closed")
        b.send(acquired_frame(TOKEN, 1, CRED))
        until(lambda: core_of(self.drv, h, "cur_num") == 1, "the attempt adopted")
        # The thread driver logs after the claim's state changed: wait for the lines.
        until(lambda: "the claim stays on" in seen.text(), f"the stop logged:\n{seen.text()}")
        until(lambda: "after the claim's connection answered again" in seen.text(), f"the adoption logged:\n{seen.text()}")
        self.beat(h, clock, b)
        self.drv.release(h)

    def test_fresh_credential(self) -> None:
        """The first heartbeat reply after a new generation carries the
        claim's credential of it, and the next resume carries that one; a
        reply with another token is a violation."""
        net = self.net()
        c, clock = self.client(net, lease=20.0)
        h, p = self.hold(net, c)
        self.beat(h, clock, p)
        p.send(acquired_frame(TOKEN, 2, CRED2))
        self.beat(h, clock, p)
        p.send(acquired_frame(TOKEN))
        until(lambda: core_of(self.drv, h, "generation") == 2, "generation 2 kept")
        p.fail("SHUTDOWN")
        q = net.accept()
        self.resumed(q, gen=2, cred=CRED2)
        q.send(acquired_frame(TOKEN, 2, CRED2))
        until(lambda: core_of(self.drv, h, "cur_num") == 1, "adopted")
        self.beat(h, clock, q)
        q.send(acquired_frame(TOKEN + 1, 3, CRED2))
        self.lost(h, baton.core.Violation)

    # Waiters.

    def test_waiter_moves(self) -> None:
        """A waiter keeps its place: it resumes by its ticket; answered
        WAITING it waits on at the new connection, and is promoted there;
        answered ACQUIRED (granted while it moved) it holds, with the grant's
        token; refused, it takes a new place with a plain ACQUIRE."""
        for answer in ("WAITING", "ACQUIRED", "RESUME_REFUSED"):
            with self.subTest(answer):
                net = self.net()
                c, _ = self.client(net, lease=2.0)
                fut, p = self.wait(net, c, limit=3)
                until(lambda: fut.running() or True, "")
                p.fail("SHUTDOWN")
                q = net.accept()
                a = self.resumed(q, held=False, ident=TICKET, cred=WCRED, attempt=1)
                self.assertEqual((a.shared, a.limit), (True, 3))
                if answer == "WAITING":
                    q.send(waiting_frame(1, TICKET, 1, WCRED))
                    time.sleep(0.1)
                    self.assertFalse(fut.done())
                    q.send(acquired_frame(21, 1, CRED, push=True))
                elif answer == "ACQUIRED":
                    q.send(acquired_frame(21, 1, CRED))
                else:
                    q.fail("RESUME_REFUSED")
                    r = net.accept()
                    a = r.acquire()
                    self.assertFalse(a.resuming, "a plain ACQUIRE: a new place")
                    r.send(acquired_frame(21, 1, CRED))
                h = fut.result(10)
                self.assertEqual(h.token, 21)
                self.assertIsNone(check(self.drv, h))
                self.drv.release(h)

    # Ends.

    def test_release_during_a_move(self) -> None:
        """A release while the claim moves closes every connection of the
        claim: the one it moves from and the open attempts."""
        net = self.net(3)
        c, clock = self.client(net, lease=20.0)
        h, p = self.hold(net, c)
        self.beat(h, clock, p)
        self.silence(h, clock)
        b = net.accept()
        self.resumed(b)
        self.drv.release(h)
        p.closed(2)
        b.closed(2)

    # Versions.

    def test_version_fallback_bytes(self) -> None:
        """VERSION to a plain version 3 ACQUIRE: the same claim at once, as
        today's bytes, on a new connection to the same address; the next
        claim of the Client there is sent those bytes at once. VERSION to a
        resume ends that attempt only."""
        net = self.net(2)
        c, _ = self.client(net)
        fut = self.drv.start(c, "jobs")
        p = net.accept()
        self.assertEqual(p.acquire().version, 3)
        p.fail("VERSION", "protocol version 3 is not supported, want 1 or 2")
        q = net.accept()
        self.assertEqual(q.addr, p.addr)
        self.assertEqual(frame(*q.next(wire.T_ACQUIRE)), wire.encode_acquire("jobs", 2000, "h:1"))
        q.send(acquired_frame(7))
        self.drv.release(fut.result(10))
        fut = self.drv.start(c, "jobs", limit=2)
        r = net.accept()
        self.assertEqual(frame(*r.next(wire.T_ACQUIRE)), wire.encode_acquire("jobs", 2000, "h:1", shared=True, limit=2))
        r.send(acquired_frame(8))
        self.drv.release(fut.result(10))
        # A resume answered VERSION (a node of an older version in a rolling
        # upgrade): that attempt ends; the move goes on elsewhere.
        c2, _ = self.client(net)
        h, p = self.hold(net, c2)
        p.fail("NOT_LEADER", net.addrs[1])
        q = net.accept()
        self.assertEqual(q.addr, net.addrs[1])
        self.resumed(q, attempt=1)
        q.fail("VERSION")
        r = net.accept()
        self.resumed(r, attempt=2)
        r.send(acquired_frame(TOKEN, 1, CRED))
        until(lambda: core_of(self.drv, h, "cur_num") == 2, "adopted")
        self.drv.release(h)

    def test_vectors_from_the_client(self) -> None:
        """The client's resumes are the vectors' bytes: a holder's (after
        SHUTDOWN, with the credential of the grant vector) and a shared
        waiter's second attempt (after NOT_LEADER with no leader known)."""
        with open(os.path.join(REPO, "clients", "go", "wire", "testdata", "vectors.json"), encoding="utf-8") as f:
            frames = json.load(f)["version_3"]["frames"]

        def vector(prefix: str) -> bytes:
            return next(bytes.fromhex(f["hex"]) for f in frames if f["what"].startswith(prefix))

        net = self.net()
        c = baton.Client(net.addrs, lease=10.0, owner="h:1")
        fut = self.drv.start(c, "jobs")
        p = net.accept()
        self.assertEqual(frame(*p.next(wire.T_ACQUIRE)), vector("ACQUIRE v3, exclusive, lease 10000 ms"))
        p.send(vector("ACQUIRED reply with CREDENTIAL"))
        h = fut.result(10)
        p.fail("SHUTDOWN", "bye")
        q = net.accept()
        self.assertEqual(frame(*q.next(wire.T_ACQUIRE)), vector("ACQUIRE v3 resuming a holder"))
        self.drv.release(h)

        c = baton.Client(net.addrs, lease=10.0, owner="")
        fut = self.drv.start(c, "jobs", limit=3)
        p = net.accept()
        p.acquire()
        p.send(waiting_frame(2, TICKET, 1, WCRED))
        p.fail("SHUTDOWN", "bye")
        q = net.accept()
        q.acquire()
        q.fail("NOT_LEADER")  # attempt 1 ends at once
        r = net.accept()
        self.assertEqual(frame(*r.next(wire.T_ACQUIRE)), vector("ACQUIRE v3 resuming a shared waiter"))
        r.fail("KICKED")
        with self.assertRaises(baton.Kicked):
            fut.result(10)

    def test_credential_never_shown(self) -> None:
        """The credential is never in a log line (at DEBUG), an exception, or
        the repr of the Held, its claim or its connections."""
        net = self.net(2)
        log, seen = capture(f"test.rules.redacted.{self.drv.name}")
        c, clock = self.client(net, lease=20.0, logger=log)
        h, p = self.hold(net, c)
        self.beat(h, clock, p)
        p.send(acquired_frame(TOKEN, 2, CRED2))
        until(lambda: core_of(self.drv, h, "generation") == 2, "generation 2 kept")
        p.fail("SHUTDOWN")
        q = net.accept()
        self.resumed(q, gen=2, cred=CRED2)
        q.send(acquired_frame(TOKEN, 2, CRED2))
        until(lambda: core_of(self.drv, h, "cur_num") == 1, "adopted")
        shown = [seen.text(), repr(h), repr(h._s), repr(h._s.core), str(h._s.core.credential),
                 repr(h._s.core.links), repr(vars(h._s.core))]
        q.fail("SHUTDOWN")
        r = net.accept()
        self.resumed(r, gen=2, cred=CRED2, attempt=2)
        r.fail("BAD_CREDENTIAL")
        e = self.lost(h, baton.BadCredential)
        # The thread driver logs after it sets lost: wait for the loss's lines.
        until(lambda: "lost: BAD_CREDENTIAL" in seen.text(), f"the loss logged:\n{seen.text()}")
        shown += [str(e), repr(e), str(e.cause), repr(e.cause), seen.text()]
        text = "\n".join(shown)
        for cred in (CRED, CRED2):
            for form in (cred.hex(), cred.hex(" "), base64.b64encode(cred).decode(), repr(cred)[2:-1]):
                self.assertNotIn(form, text)
        self.assertIn("moved from", seen.text())
        self.assertIn("BAD_CREDENTIAL", seen.text())

    _addrs: List[str] = []


class TestRulesThreads(RulesCase, unittest.TestCase):
    def setUp(self) -> None:
        self.drv = Threads()


class TestRulesAsyncio(RulesCase, unittest.TestCase):
    def setUp(self) -> None:
        self.drv = Asyncio()
        self.addCleanup(self.drv.close)


if __name__ == "__main__":
    unittest.main()
