"""The fencing kits (baton.fence) against real servers: PostgreSQL and
Redis, which `go test ./clients` starts and names in BATON_TEST_POSTGRES
and BATON_TEST_REDIS, and an HTTP service behind the Go middleware
(BATON_FENCEDCOUNTER_BIN). There is no package index here, so the
PostgreSQL and Redis calls go through two small test-only clients of the
DB-API's and redis-py's shapes (minipg.py, miniredis.py): what the kits
are tested with is the real server's answers, not a driver's. And tokens
past 2^53 and 2^63 from the real server are exact in the client, the ops
API's JSON and the kits."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

import fence_kits
import minipg
import miniredis
from support import HERE, Server

import baton
from baton import fence

NAME = "fenced/counter"


def setUpModule() -> None:
    missing = [v for v in ("BATON_TEST_POSTGRES", "BATON_TEST_REDIS", "BATON_FENCEDCOUNTER_BIN") if not os.environ.get(v)]
    if missing:
        msg = f"{', '.join(missing)} unset: run the suite through `go test ./clients`, which starts PostgreSQL, Redis and the fenced HTTP service"
        if os.environ.get("CI") == "true":
            raise RuntimeError(msg)
        raise unittest.SkipTest("SKIPPED: " + msg)


class Slot:
    """A semaphore's slot, as a Held of client.lock(name, limit=3) is."""

    name, token, shared, limit = "pool", 7, True, 3


def reset_postgres() -> minipg.Connection:
    conn = fence_kits.pg_connect()
    cur = conn.cursor()
    fence.install_postgres(cur)
    for q in ("DROP TABLE IF EXISTS counter", "DELETE FROM baton_fence_marks",
              "CREATE TABLE counter (n int NOT NULL, writer text NOT NULL)", "INSERT INTO counter VALUES (0, '')"):
        cur.execute(q)
    conn.commit()
    return conn


def redis() -> miniredis.Redis:
    host, port = os.environ["BATON_TEST_REDIS"].rsplit(":", 1)
    return miniredis.Redis(host, int(port))


class TestPostgresKit(unittest.TestCase):
    def test_exact_and_stale(self) -> None:
        conn = reset_postgres()
        self.addCleanup(conn.close)

        def fenced(name: str, token: int) -> None:
            cur = conn.cursor()
            try:
                fence.postgres(cur, fence.Token(name, token))
                conn.commit()
            except BaseException:
                conn.rollback()
                raise

        for name, token, stale in [("a", 2**53 + 4, False), ("a", 2**53 + 5, False), ("a", 2**53 + 4, True),
                                   ("top", 2**64 - 2, False), ("top", 2**64 - 1, False), ("top", 2**63 + 1, True)]:
            if stale:
                with self.assertRaises(baton.StaleToken) as cm:
                    fenced(name, token)
                self.assertIn("stale fencing token", str(cm.exception))
                self.assertIsInstance(cm.exception.__cause__, minipg.Error)
                self.assertEqual((cm.exception.lock, cm.exception.token), (name, token))
            else:
                fenced(name, token)
        cur = conn.cursor()
        cur.execute("SELECT token::text FROM baton_fence_marks WHERE name = 'top'")
        self.assertEqual(cur.fetchone(), ("18446744073709551615",))
        conn.commit()

    def test_refusals(self) -> None:
        with self.assertRaises(baton.SharedClaim):
            fence.postgres(None, Slot())
        for bad in (0, 2**64, -1, True, "7"):
            with self.assertRaises(ValueError):
                fence.postgres(None, fence.Token("a", bad))  # type: ignore[arg-type]
        with self.assertRaises(ValueError):
            fence.postgres(None, fence.Token("a", 1), paramstyle="dollar")


class TestRedisKit(unittest.TestCase):
    def test_exact_stale_and_loading(self) -> None:
        r = redis()
        self.addCleanup(r.close)
        r.execute_command("FLUSHALL")
        r.execute_command("SCRIPT", "FLUSH")
        sent = []

        def do(*args):
            sent.append(args[0])
            return r.execute_command(*args)

        for token, stale in [(2**53 + 4, False), (2**53 + 5, False), (2**53 + 4, True), (2**64 - 1, False), (2**64 - 2, True)]:
            if stale:
                with self.assertRaises(baton.StaleToken) as cm:
                    fence.redis_check(do, "m", fence.Token("jobs", token))
                self.assertTrue(str(cm.exception.__cause__).startswith("STALE"))
            else:
                fence.redis_check(do, "m", fence.Token("jobs", token))
        self.assertEqual(r.execute_command("GET", "m"), "18446744073709551615")
        self.assertEqual(sent[:3], ["EVALSHA", "EVAL", "EVALSHA"])
        fence.redis_set(do, "{s}:m", fence.Token("jobs", 10), "{s}:d", "ten")
        with self.assertRaises(baton.StaleToken):
            fence.redis_set(do, "{s}:m", fence.Token("jobs", 9), "{s}:d", "nine")
        self.assertEqual(r.execute_command("GET", "{s}:d"), "ten")
        with self.assertRaises(baton.SharedClaim):
            fence.redis_check(do, "m", Slot())


class TestFileKit(unittest.TestCase):
    def test_write_and_stale(self) -> None:
        d = tempfile.mkdtemp(prefix="baton-py-fence-")
        path = os.path.join(d, "out")
        fence.write_file(path, b"new", fence.Token("jobs/x", 2**64 - 1), mode=0o640)
        with self.assertRaises(baton.StaleToken):
            fence.write_file(path, b"old", fence.Token("jobs/x", 2**64 - 2))
        with open(path, "rb") as f:
            self.assertEqual(f.read(), b"new")
        self.assertEqual(os.stat(path).st_mode & 0o777, 0o640)
        with open(path + ".fence") as f:
            self.assertEqual(f.read(), "jobs/x=18446744073709551615\n")  # the Go kit's sidecar, byte for byte
        self.assertEqual(sorted(os.listdir(d)), ["out", "out.fence"])
        with self.assertRaisesRegex(ValueError, "fenced by lock 'jobs/x', not 'other'"):
            fence.check_file(path, fence.Token("other", 2**64 - 1))


class FencedCounter:
    """The HTTP counter service behind the Go middleware, stopped by its PID."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([os.environ["BATON_FENCEDCOUNTER_BIN"]], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().split()[1]

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


class TestHeader(unittest.TestCase):
    def test_go_middleware_reads_it(self) -> None:
        svc = FencedCounter()
        self.addCleanup(svc.stop)
        self.assertEqual(fence.header(fence.Token("a=b, c/d", 2**64 - 1)), ("Baton-Fence", "a%3Db%2C%20c/d=18446744073709551615"))
        put = lambda tok: urllib.request.build_opener(fence.FenceHandler(fence.Token("a=b, c/d", tok))).open(
            urllib.request.Request(svc.url, data=b"x", method="PUT"), timeout=10)
        put(2**64 - 1).close()
        with self.assertRaises(urllib.error.HTTPError) as cm:
            put(2**64 - 2)
        self.assertEqual(cm.exception.code, 409)
        body = json.loads(cm.exception.read())
        self.assertEqual((body["lock"], body["token"]), ("a=b, c/d", "18446744073709551614"))
        with self.assertRaises(baton.SharedClaim):
            fence.FenceHandler(Slot())


class TestStaleHolder(unittest.TestCase):
    """Holder A, a real process, reads the counter (0) and is stopped with
    SIGSTOP past its lease; B, granted, reads 0 and writes 1; A is resumed
    and writes 1. Fenced, A is refused and B's write stands; unfenced (the
    control), A's write lands over B's: the lost update."""

    def setUp(self) -> None:
        self.srv = Server()
        self.addCleanup(self.srv.stop)

    def scenario(self, kind: str, fenced: bool) -> None:
        where = ""
        if kind == "postgres":
            reset_postgres().close()
        elif kind == "redis":
            r = redis()
            r.execute_command("FLUSHALL")
            r.close()
        elif kind == "http":
            svc = FencedCounter()
            self.addCleanup(svc.stop)
            where = svc.url
        else:
            where = os.path.join(tempfile.mkdtemp(prefix="baton-py-fence-"), "counter")
        a = subprocess.Popen([sys.executable, os.path.join(HERE, "fence_holder.py"), self.srv.addr, NAME, "1", kind, "1" if fenced else "0", where],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

        def stop_a() -> None:
            a.send_signal(signal.SIGCONT)
            a.kill()
            a.communicate(timeout=10)
        self.addCleanup(stop_a)
        assert a.stdout is not None and a.stdin is not None
        self.assertTrue(a.stdout.readline().startswith("granted "))
        self.assertEqual(a.stdout.readline().strip(), "holding 0")
        a.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 15
        while True:  # until the server has ended A's claim
            try:
                urllib.request.urlopen(f"http://{self.srv.ops}/v1/locks/{urllib.request.quote(NAME, safe='')}", timeout=5).close()
            except urllib.error.HTTPError as e:
                if e.code == 404:
                    break
            self.assertLess(time.monotonic(), deadline, "the stopped holder's lease did not end")
            time.sleep(0.02)
        kit = fence_kits.make(kind, fenced, where)
        self.addCleanup(getattr(kit, "close", lambda: None))
        with baton.Client([self.srv.addr], owner="B").lock(NAME, timeout=20) as held:
            n = kit.begin(held)
            self.assertEqual(n, 0)
            kit.write(held, n + 1, "B")
        a.send_signal(signal.SIGCONT)
        a.stdin.write("write\n")
        a.stdin.flush()
        said = a.stdout.readline().strip()
        value = self.value(kind, where)
        if fenced:
            self.assertTrue(said.startswith("refused"), f"A's late write: {said}")
            self.assertEqual(value, (1, "B"))
        else:
            self.assertEqual(said, "accepted")
            self.assertEqual(value, (1, "A"), "unfenced: want the lost update")

    def value(self, kind: str, where: str):
        if kind == "postgres":
            conn = fence_kits.pg_connect()
            cur = conn.cursor()
            cur.execute("SELECT n, writer FROM counter")
            n, w = cur.fetchone()
            conn.close()
            return int(n), w
        if kind == "redis":
            r = redis()
            v = r.execute_command("GET", fence_kits.DATA)
            r.close()
            return fence_kits.parse(v)
        if kind == "http":
            with urllib.request.urlopen(where, timeout=10) as resp:
                return fence_kits.parse(resp.read().decode())
        with open(where) as f:
            return fence_kits.parse(f.read())


for _kind in ("postgres", "redis", "http", "file"):
    for _fenced in (True, False):
        def _test(self, kind=_kind, fenced=_fenced) -> None:
            self.scenario(kind, fenced)
        setattr(TestStaleHolder, f"test_{_kind}_{'fenced' if _fenced else 'unfenced'}", _test)


class TestTokensPast2To63(unittest.TestCase):
    """At epoch 2^23+1 and 2^24-1 the client's token, the ops API's token
    and token_str, and BATON_TOKEN-style text all agree to the last digit."""

    def test_epochs(self) -> None:
        for epoch in (2**23 + 1, 2**24 - 1):
            with self.subTest(epoch=epoch):
                d = tempfile.mkdtemp(prefix="baton-py-epoch-")
                with open(os.path.join(d, "epoch"), "w") as f:
                    f.write(f"{epoch - 1}\n")
                srv = Server(data_dir=d)
                try:
                    with baton.Client([srv.addr]).lock("tok") as held:
                        self.assertEqual(held.token, epoch << 40 | 1)
                        with urllib.request.urlopen(f"http://{srv.ops}/v1/locks/tok", timeout=5) as r:
                            holder = json.load(r)["holder"]
                        self.assertEqual(holder["token_str"], str(held.token))
                        self.assertEqual(holder["token"], held.token)
                        self.assertEqual(fence.header(held)[1], f"tok={epoch << 40 | 1}")
                finally:
                    srv.stop()


if __name__ == "__main__":
    unittest.main()
