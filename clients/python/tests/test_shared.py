"""Shared claims (protocol version 2): the vectors, the claim's kind, and
against the real server a semaphore, a read/write lock, LIMIT_MISMATCH,
NOWAIT, several names and the example."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request
from typing import Dict, List, Optional

from support import REPO, ServerCase, ended, eventually

import baton
from baton import wire


def load_v2() -> dict:
    with open(os.path.join(REPO, "clients", "go", "wire", "testdata", "vectors.json"), encoding="utf-8") as f:
        return json.load(f)["version_2"]


class TestVersion2Vectors(unittest.TestCase):
    """The version 2 section of the shared wire vectors."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.v = load_v2()

    def test_frames(self) -> None:
        kinds = set()
        for f in self.v["frames"]:
            fields = f["fields"]
            kinds.add(f["type"])
            with self.subTest(f["what"]):
                if f["type"] == "ACQUIRE":
                    got = wire.encode_acquire(fields["name"], fields["lease_ms"], fields["owner"], fields["nowait"],
                                              shared=fields["shared"], limit=fields["limit"])
                    self.assertEqual(got.hex(), f["hex"])
                    continue
                self.assertEqual(f["type"], "ERROR", "a version 2 vector this test does not know")
                frames, err = wire.split(bytearray(bytes.fromhex(f["hex"])))
                self.assertIsNone(err)
                fr = wire.decode(*frames[0])
                self.assertEqual((fr.code, fr.message), (fields["code"], fields["message"]))
                e = baton.errors.error_for_code(fr.code, fr.message)
                self.assertIsInstance(e, baton.LimitMismatch)
                self.assertEqual(baton.errors.code_name(e.code), fields["code_name"])
                self.assertEqual(e.limit, int(fields["message"]))
                self.assertTrue(e.client_error)
        self.assertEqual(kinds, {"ACQUIRE", "ERROR"})

    def test_claims_send_the_vectors(self) -> None:
        """Without version 3 (resume off, or a server older than it), a
        shared claim of the client sends the vector's bytes; an exclusive one
        stays the version 1 frame."""
        for f in self.v["frames"]:
            if f["type"] != "ACQUIRE":
                continue
            fields = f["fields"]
            with self.subTest(f["what"]):
                c = baton.Client(["127.0.0.1:1"], lease=fields["lease_ms"] / 1000.0, owner=fields["owner"])
                if fields["shared"]:
                    (_, frames, _, _), kind = c._prepare(fields["name"], fields["nowait"], None, None, None,
                                                         limit=fields["limit"])
                    self.assertEqual(frames.legacy.hex(), f["hex"])
                    self.assertEqual(kind, (True, fields["limit"]))
                else:
                    (_, frames, _, _), kind = c._prepare(fields["name"], fields["nowait"], None, None, None)
                    frame = frames.legacy
                    self.assertEqual(frame, wire.encode_acquire(fields["name"], fields["lease_ms"], fields["owner"],
                                                                fields["nowait"]))
                    self.assertEqual(frame[3], wire.VERSION)
                    self.assertEqual(kind, (False, None))

    def test_bad_acquire(self) -> None:
        for b in self.v["bad_acquire"]:
            with self.subTest(b["what"]):
                with self.assertRaises(baton.BadRequest):
                    wire.encode_acquire(b["name"], b["lease_ms"], b["owner"], shared=b["shared"], limit=b["limit"])
                if b["shared"]:
                    # Port 1: a dial would fail with ConnectionBroken instead.
                    c = baton.Client(["127.0.0.1:1"], lease=b["lease_ms"] / 1000.0, owner=b["owner"])
                    with self.assertRaises(baton.BadRequest):
                        c.acquire(b["name"], limit=b["limit"])

    def test_error_codes(self) -> None:
        for c in self.v["error_codes"]:
            e = baton.errors.error_for_code(c["code"])
            self.assertEqual(e.code, c["code"])
            self.assertEqual(e.client_error, c["class"] == "client")
            self.assertNotEqual(type(e), baton.ServerError, f"no class for {c['name']}")


class TestKind(unittest.TestCase):
    """The keyword arguments make the claim's kind, refused before dialling
    when out of range."""

    def test_kinds(self) -> None:
        c = baton.Client(["127.0.0.1:1"], owner="")
        for kw, want in [({}, (False, None)), ({"limit": 3}, (True, 3)), ({"shared": True}, (True, baton.READER_LIMIT)),
                         ({"shared": True, "limit": 4}, (True, 4)), ({"limit": 1}, (True, 1))]:
            with self.subTest(kw):
                (_, frames, _, _), kind = c._prepare("jobs", False, None, None, None, **kw)
                self.assertEqual(kind, want)
                self.assertEqual(frames.legacy[3], wire.VERSION_2 if want[0] else wire.VERSION)
                assert frames.v3 is not None
                self.assertEqual((frames.v3[3], bool(frames.v3[4] & wire.FLAG_SHARED)), (wire.VERSION_3, want[0]))

    def test_refused(self) -> None:
        c = baton.Client(["127.0.0.1:1"])
        for kw in [{"limit": 0}, {"limit": -1}, {"limit": 65536}, {"limit": 2.5}, {"limit": True}, {"limit": "3"},
                   {"shared": "yes"}]:
            with self.subTest(kw):
                with self.assertRaises(baton.BadRequest):
                    c.acquire("jobs", **kw)
                with self.assertRaises(baton.BadRequest):
                    c.lock_many(["a", "b"], **kw)
        with self.assertRaises(baton.BadRequest) as cm:
            c.lock_many(["data", "config"], per_name={"confg": {"shared": True}})
        self.assertIn("'confg'", str(cm.exception))
        with self.assertRaises(baton.BadRequest):
            c.lock_many(["data", "config"], per_name={"config": {"shard": True}})

    def test_limit_mismatch_error(self) -> None:
        e = baton.LimitMismatch("3", asked=5)
        self.assertEqual((e.limit, e.asked, e.code, e.message), (3, 5, 0x24, "3"))
        self.assertEqual(str(e), "LIMIT_MISMATCH: the name's limit in force is 3, this claim's is 5")
        odd = baton.errors.error_for_code(0x24, "three")
        self.assertIsNone(odd.limit)
        self.assertEqual(str(odd), "LIMIT_MISMATCH: three")


# Every wait in the tests against the server is bounded: a client that
# gets a claim's kind wrong would otherwise wait forever, and the test must
# fail instead, naming the claim.
WAIT = 10.0


class SharedCase(ServerCase):
    def view(self, name: str) -> dict:
        try:
            with urllib.request.urlopen(f"http://{self.srv.ops}/v1/locks/{urllib.parse.quote(name, safe='')}", timeout=5) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return {"holders": [], "waiters": [], "limit": None}
            raise

    def later(self, client: baton.Client, name: str, **kw) -> Dict[str, object]:
        """Starts an acquire in a thread and returns once the server has it
        queued; the result dict gets "held" or "error"."""
        out: Dict[str, object] = {}
        before = len(self.view(name)["waiters"])

        def run() -> None:
            try:
                out["held"] = client.acquire(name, timeout=30, **kw)
            except BaseException as e:  # noqa: BLE001 - handed to the test
                out["error"] = e
            out["at"] = time.monotonic()

        t = threading.Thread(target=run, daemon=True)
        t.start()
        out["thread"] = t
        self.await_waiters(name, before + 1)
        self.addCleanup(self._release_later, out)
        return out

    def _release_later(self, out: Dict[str, object]) -> None:
        t = out["thread"]
        assert isinstance(t, threading.Thread)
        t.join(30)
        h = out.get("held")
        if isinstance(h, baton.Held):
            try:
                h.release()
            except baton.LockLost:
                pass

    def granted(self, out: Dict[str, object], what: str) -> baton.Held:
        t = out["thread"]
        assert isinstance(t, threading.Thread)
        t.join(10)
        self.assertIn("held", out, f"{what}: {out.get('error', 'not granted within 10 s')}")
        h = out["held"]
        assert isinstance(h, baton.Held)
        return h

    def waiting(self, out: Dict[str, object], what: str) -> None:
        self.assertNotIn("held", out, f"{what} was granted, want it waiting")
        self.assertNotIn("error", out, f"{what} failed: {out.get('error')}")


class TestSemaphore(SharedCase):
    def test_three_slots_five_contenders(self) -> None:
        """Three hold at once, two wait in the order they came; each freed
        slot goes to the head at once; all get in, tokens rising."""
        name = "py/sem3"
        cl = [self.client(owner=f"c{i}") for i in range(5)]
        held: List[Optional[baton.Held]] = [cl[i].acquire(name, limit=3, timeout=WAIT) for i in range(3)] + [None, None]
        for h in held[:3]:
            assert h is not None
            self.assertEqual((h.shared, h.limit), (True, 3))
        w3 = self.later(cl[3], name, limit=3)
        w4 = self.later(cl[4], name, limit=3)
        v = self.view(name)
        self.assertEqual((len(v["holders"]), v["limit"], [w["owner"] for w in v["waiters"]]), (3, 3, ["c3", "c4"]))
        self.waiting(w3, "the fourth")
        held[1].release()  # type: ignore[union-attr]
        held[3] = self.granted(w3, "the fourth, after a slot was freed")
        v = self.view(name)
        self.assertEqual((len(v["holders"]), [w["owner"] for w in v["waiters"]]), (3, ["c4"]))
        self.waiting(w4, "the fifth, behind the fourth")
        held[0].release()  # type: ignore[union-attr]
        held[4] = self.granted(w4, "the fifth")
        tokens = [h.token for h in held if h is not None]
        self.assertEqual(tokens, sorted(tokens), "grants out of queue order")
        self.assertEqual(len(set(tokens)), 5)
        for h in held[2:]:
            h.release()  # type: ignore[union-attr]

    def test_never_more_than_the_limit(self) -> None:
        """Five threads take a semaphore of 3 again and again: never more
        than three inside, every one gets in every round."""
        name, rounds = "py/churn", 6
        mu = threading.Lock()
        state = {"inside": 0, "most": 0, "grants": 0}
        errors: List[BaseException] = []

        def contender(i: int) -> None:
            c = self.client(owner=f"c{i}")
            try:
                for _ in range(rounds):
                    with c.lock(name, limit=3, timeout=30) as slot:
                        with mu:
                            state["inside"] += 1
                            state["most"] = max(state["most"], state["inside"])
                            state["grants"] += 1
                        time.sleep(0.002)
                        slot.check()
                        with mu:
                            state["inside"] -= 1
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=contender, args=(i,)) for i in range(5)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual(errors, [])
        self.assertLessEqual(state["most"], 3)
        self.assertEqual(state["grants"], 5 * rounds)

    def test_nowait_on_a_full_semaphore(self) -> None:
        name = "py/nowait"
        a = self.client().acquire(name, limit=2, timeout=WAIT)
        b = self.client().acquire(name, limit=2, nowait=True)  # a slot is free
        with self.assertRaises(baton.Busy) as cm:
            self.client().acquire(name, limit=2, nowait=True)
        self.assertEqual(cm.exception.message, f'lock "{name}" has no free slot: 2 of 2 held')
        a.release()
        b.release()

    def test_limit_mismatch_at_once_not_retried(self) -> None:
        name = "py/mismatch"
        holder = self.client().acquire(name, limit=3, timeout=WAIT)
        for kw, asked in [({"limit": 2}, 2), ({"limit": 2, "nowait": True}, 2), ({"shared": True}, baton.READER_LIMIT)]:
            with self.subTest(kw):
                before = ended(self.srv.ops, "limit_mismatch")
                start = time.monotonic()
                with self.assertRaises(baton.LimitMismatch) as cm:
                    self.client().acquire(name, timeout=30, **kw)
                self.assertLess(time.monotonic() - start, 5, "raised at once")
                e = cm.exception
                self.assertEqual((e.limit, e.asked), (3, asked))
                self.assertTrue(e.client_error)
                self.assertEqual(str(e), f"LIMIT_MISMATCH: the name's limit in force is 3, this claim's is {asked}")
                self.assertEqual(ended(self.srv.ops, "limit_mismatch") - before, 1, "one session: not retried")
        holder.release()
        # The name's last shared session has ended: a new limit holds.
        with self.client().lock(name, limit=2, timeout=WAIT) as slot:
            self.assertEqual((slot.limit, self.view(name)["limit"]), (2, 2))

    def test_slots_of_one_client(self) -> None:
        """One Client may hold several slots, fewer than the limit; a claim
        its own claims alone would keep waiting is refused at once."""
        name = "py/own"
        c = self.client()
        one = c.acquire(name, limit=2, timeout=WAIT)
        two = c.acquire(name, limit=2, timeout=WAIT)
        with self.assertRaises(baton.AlreadyHeld):
            c.acquire(name, limit=2, timeout=WAIT)
        with self.assertRaises(baton.AlreadyHeld):
            c.acquire(name, timeout=WAIT)
        with self.assertRaises(baton.Busy):
            c.acquire(name, limit=2, nowait=True)
        one.release()
        two.release()
        excl = c.acquire(name, timeout=WAIT)
        with self.assertRaises(baton.AlreadyHeld):
            c.acquire(name, shared=True, timeout=WAIT)
        excl.release()

    def test_asyncio_slots(self) -> None:
        name = "py/asem"

        async def main() -> List[int]:
            c = self.client()
            order: List[int] = []
            a = await c.aacquire(name, limit=2, timeout=WAIT)
            b = await c.aacquire(name, limit=2, timeout=WAIT)
            self.assertEqual((a.shared, a.limit, b.limit), (True, 2, 2))
            third = asyncio.ensure_future(self.client().aacquire(name, limit=2, timeout=30))
            await asyncio.get_running_loop().run_in_executor(None, self.await_waiters, name, 1)
            self.assertFalse(third.done())
            await a.release()
            c3 = await asyncio.wait_for(third, 10)
            order += [a.token, b.token, c3.token]
            await b.release()
            await c3.release()
            return order

        tokens = asyncio.run(main())
        self.assertEqual(tokens, sorted(tokens))


class TestReadWrite(SharedCase):
    def test_readers_together_writer_alone_nobody_overtakes(self) -> None:
        name = "py/rw"
        r1 = self.client(owner="r1").acquire(name, shared=True, timeout=WAIT)
        r2 = self.client(owner="r2").acquire(name, shared=True, timeout=WAIT)
        self.assertEqual((r1.shared, r1.limit), (True, baton.READER_LIMIT))
        self.assertEqual(len(self.view(name)["holders"]), 2)
        w = self.later(self.client(owner="w"), name)
        r3 = self.later(self.client(owner="r3"), name, shared=True)
        r4 = self.later(self.client(owner="r4"), name, shared=True)
        self.waiting(r3, "a reader behind a waiting writer")
        r1.release()
        eventually(lambda: len(self.view(name)["holders"]) == 1, "the server still lists the reader that left")
        self.assertEqual(self.view(name)["waiters"][0]["owner"], "w")
        self.waiting(w, "the writer while a reader holds")
        r2.release()
        writer = self.granted(w, "the writer")
        self.assertEqual((writer.shared, writer.limit), (False, 1))
        v = self.view(name)
        self.assertEqual(([h["shared"] for h in v["holders"]], len(v["waiters"])), ([False], 2))
        self.waiting(r3, "a reader while the writer holds")
        writer.release()
        h3, h4 = self.granted(r3, "the third reader"), self.granted(r4, "the fourth reader")
        self.assertEqual(len(self.view(name)["holders"]), 2)
        self.assertTrue(r2.token < writer.token < h3.token < h4.token)

    def test_writer_not_starved_by_a_stream_of_readers(self) -> None:
        name = "py/stream"
        stop = threading.Event()
        reads = [0]
        errors: List[BaseException] = []

        def reader(i: int) -> None:
            c = self.client(owner=f"r{i}")
            try:
                while not stop.is_set():
                    with c.lock(name, shared=True, timeout=30):
                        reads[0] += 1
                        time.sleep(0.01 + 0.005 * i)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=reader, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        try:
            eventually(lambda: reads[0] >= 10, "the readers do not get going", 10)
            start = time.monotonic()
            with self.client(owner="writer").lock(name, timeout=10):
                waited = time.monotonic() - start
                holders = self.view(name)["holders"]
                self.assertEqual([h["owner"] for h in holders], ["writer"])
        finally:
            stop.set()
            for t in threads:
                t.join(30)
        self.assertEqual(errors, [])
        print(f"\n  the writer waited {waited * 1000:.1f} ms among readers", file=sys.stderr)


class TestManyShared(SharedCase):
    def test_reader_of_one_writer_of_another(self) -> None:
        c, other = self.client(), self.client()
        with c.lock_many(["data", "config"], WAIT, per_name={"config": {"shared": True}}) as many:
            cfg, data = self.view("config"), self.view("data")
            self.assertEqual(([h["shared"] for h in cfg["holders"]], cfg["limit"]), ([True], baton.READER_LIMIT))
            self.assertEqual([h["shared"] for h in data["holders"]], [False])
            self.assertEqual({h.name: (h.shared, h.limit) for h in many.locks},
                             {"config": (True, baton.READER_LIMIT), "data": (False, 1)})
            other.acquire("config", shared=True, nowait=True).release()
            with self.assertRaises(baton.Busy):
                other.acquire("data", nowait=True)

    def test_every_name_a_slot(self) -> None:
        async def main() -> None:
            async with self.client().alock_many(["s/a", "s/b"], WAIT, limit=2) as many:
                self.assertEqual([(h.shared, h.limit) for h in many.locks], [(True, 2), (True, 2)])

        asyncio.run(main())


class TestSemaphoreExample(ServerCase):
    def test_example_runs(self) -> None:
        example = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "semaphore.py")
        out = subprocess.run([sys.executable, example, self.srv.addr], capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stdout.splitlines()
        self.assertEqual(len([ln for ln in lines if "renders in a slot of 2" in ln]), 5, out.stdout)
        last = lines[-1]
        self.assertTrue(last.startswith("5 renders, at most ") and last.endswith("at once (the limit is 2)"), out.stdout)
        self.assertLessEqual(int(last.split()[4]), 2, out.stdout)


if __name__ == "__main__":
    unittest.main()
