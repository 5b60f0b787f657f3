"""The Python client against the real `baton serve` (BATON_BIN, else built
with `go build`), on loopback ports the kernel picks."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from support import REPO, Server, ServerCase, baton_bin, ended, eventually, tcp_state

import baton
from baton import wire

class TestVectors(unittest.TestCase):
    """The shared wire vectors (clients/go/wire/testdata/vectors.json), both ways."""

    @classmethod
    def setUpClass(cls) -> None:
        with open(os.path.join(REPO, "clients", "go", "wire", "testdata", "vectors.json"), encoding="utf-8") as f:
            cls.v = json.load(f)

    def test_frames(self) -> None:
        for f in self.v["frames"]:
            raw = bytes.fromhex(f["hex"])
            fields = f["fields"]
            with self.subTest(f["what"]):
                if f["type"] == "ACQUIRE":
                    got = wire.encode_acquire(fields["name"], fields["lease_ms"], fields["owner"], fields["nowait"])
                    self.assertEqual(got.hex(), f["hex"])
                    continue
                if f["type"] == "HEARTBEAT":
                    self.assertEqual(wire.HEARTBEAT.hex(), f["hex"])
                    continue
                buf = bytearray(raw)
                frames, err = wire.split(buf)
                self.assertIsNone(err)
                self.assertEqual(len(frames), 1)
                fr = wire.decode(*frames[0])
                if f["type"] == "WAITING":
                    self.assertEqual(fr.position, fields["position"])
                elif f["type"] == "ACQUIRED":
                    self.assertEqual((fr.push, fr.token), (fields["push"], int(fields["token"])))
                elif f["type"] == "ERROR":
                    self.assertEqual((fr.code, fr.message), (fields["code"], fields["message"]))
                    e = baton.errors.error_for_code(fr.code, fr.message)
                    self.assertEqual(e.code, fields["code"])
                    self.assertEqual(baton.errors.code_name(e.code), fields["code_name"])

    def test_refused_headers(self) -> None:
        for r in self.v["refused_headers"]:
            _, err = wire.split(bytearray(bytes.fromhex(r["hex"])))
            self.assertIsNotNone(err, r["what"])

    def test_bad_acquire_refused_before_dialling(self) -> None:
        for b in self.v["bad_acquire"]:
            name = bytes.fromhex(b["name_hex"]).decode("utf-8", "surrogateescape") if "name_hex" in b else b["name"]
            owner = bytes.fromhex(b["owner_hex"]).decode("utf-8", "surrogateescape") if "owner_hex" in b else b["owner"]
            with self.subTest(b["what"]):
                with self.assertRaises(baton.BadRequest):
                    # Port 1: a dial would fail with ConnectionBroken instead.
                    c = baton.Client(["127.0.0.1:1"], lease=max(b["lease_ms"], 0) / 1000.0 or 0.0, owner=owner)
                    c.acquire(name)

    def test_error_codes(self) -> None:
        for c in self.v["error_codes"]:
            e = baton.errors.error_for_code(c["code"])
            self.assertEqual(e.code, c["code"])
            self.assertEqual(e.server_condition, c["class"] == "server")
            self.assertEqual(e.client_error, c["class"] == "client")
            self.assertNotEqual(type(e), baton.ServerError, f"no class for {c['name']}")


class TestLocks(ServerCase):
    def test_grant_and_release(self) -> None:
        c = self.client()
        with c.lock("py/grant") as held:
            self.assertGreater(held.token, 0)
            self.assertFalse(held.lost.is_set())
            held.check()
        with c.lock("py/grant") as again:
            self.assertGreater(again.token, held.token)

    def test_fifo_with_push(self) -> None:
        c = self.client()
        first = c.acquire("py/fifo")
        order = []
        granted_at = {}

        def wait(tag: str) -> None:
            h = c.acquire("py/fifo", timeout=20, queue_behind_self=True)
            granted_at[tag] = time.monotonic()
            order.append((tag, h.token))
            time.sleep(0.05)
            h.release()

        b = threading.Thread(target=wait, args=("b",))
        b.start()
        self.await_waiters("py/fifo", 1)
        w = threading.Thread(target=wait, args=("c",))
        w.start()
        self.await_waiters("py/fifo", 2)
        released_at = time.monotonic()
        first.release()
        b.join(20)
        w.join(20)
        self.assertEqual([t for t, _ in order], ["b", "c"])
        self.assertLess(order[0][1], order[1][1])
        handover = granted_at["b"] - released_at
        print(f"\n  handover, release to the next waiter's grant: {handover * 1000:.2f} ms", file=sys.stderr)
        self.assertLess(handover, 0.5, "the next waiter must be pushed at once, not at its next heartbeat")

    def test_nowait_busy(self) -> None:
        c = self.client()
        with c.lock("py/busy"):
            with self.assertRaises(baton.Busy) as cm:
                with c.lock("py/busy", nowait=True):
                    pass
            self.assertEqual(cm.exception.code, 0x13)

    def test_wait_timeout(self) -> None:
        c = self.client()
        with c.lock("py/timeout"):
            start = time.monotonic()
            with self.assertRaises(TimeoutError):
                self.client().acquire("py/timeout", timeout=0.3)
            self.assertGreaterEqual(time.monotonic() - start, 0.3)
        with c.lock("py/timeout", timeout=5):  # the abandoned place is gone
            pass

    def test_force_release_is_loss(self) -> None:
        c = self.client(lease=10)
        with self.assertRaises(baton.LockLost) as cm:
            with c.lock("py/force") as held:
                start = time.monotonic()
                self.srv.force_release("py/force")
                self.assertTrue(held.lost.wait(5))
                seen = time.monotonic() - start
                print(f"\n  force-release seen as loss after {seen * 1000:.2f} ms", file=sys.stderr)
                self.assertLess(seen, 0.1)
                self.assertIsInstance(held.cause, baton.ForceReleased)
                with self.assertRaises(baton.LockLost):
                    held.check()
        self.assertIsInstance(cm.exception.cause, baton.ForceReleased)

    # The two below are about a claim that ends with its connection
    # (versions 1 and 2): they ask for that (resume=False), so that a server
    # of version 3 does not turn them into moves (TestRestartKeepsClaims).

    def test_server_kill9_is_loss(self) -> None:
        c = self.client(lease=10, resume=False)
        held = c.acquire("py/kill")
        self.srv.stop(signal.SIGKILL)
        self.assertTrue(held.lost.wait(5), "kill -9 of the server not seen as loss")
        self.assertIsInstance(held.cause, baton.ConnectionBroken)
        with self.assertRaises(baton.LockLost):
            held.release()  # a release after a loss reports the loss

    def test_shutdown_while_waiting_requeues(self) -> None:
        c = self.client(resume=False)
        held = c.acquire("py/shut")
        result = {}

        def wait() -> None:
            try:
                result["held"] = self.client(resume=False).acquire("py/shut", timeout=30)
            except BaseException as e:  # reported below
                result["err"] = e

        t = threading.Thread(target=wait)
        t.start()
        self.await_waiters("py/shut", 1)
        addr, ops, data = self.srv.addr, self.srv.ops, self.srv.data_dir
        self.srv.stop(signal.SIGTERM)
        self.assertTrue(held.lost.wait(5))
        self.assertIsInstance(held.cause, baton.Shutdown)
        self.assertRaises(baton.LockLost, held.release)
        self.srv = Server(data_dir=data, addr=addr, ops_addr=ops)
        self.addCleanup(self.srv.stop)
        t.join(30)
        self.assertNotIn("err", result, result.get("err"))
        self.assertGreater(result["held"].token, held.token, "tokens rise across the restart")
        result["held"].release()

    def test_release_reaches_server_at_once_and_is_no_loss(self) -> None:
        c = self.client(lease=30)
        held = c.acquire("py/rel")
        start = time.monotonic()
        held.release()
        # The reset and the next connection's ACQUIRE race to the server
        # (a loaded machine may read the ACQUIRE first): retry BUSY, but
        # the lock must be free long before the 30 s lease.
        while True:
            try:
                with c.lock("py/rel", nowait=True):
                    pass
                break
            except baton.Busy:
                if time.monotonic() - start > 1.0:
                    raise
                time.sleep(0.01)
        self.assertLess(time.monotonic() - start, 1.0)
        self.assertFalse(held.lost.is_set())
        held.check()

    def test_async_loss_cancels_the_block(self) -> None:
        c = self.client(lease=10)

        async def main() -> str:
            try:
                async with c.alock("py/async") as held:
                    self.assertGreater(held.token, 0)
                    loop = asyncio.get_running_loop()
                    await loop.run_in_executor(None, self.srv.force_release, "py/async")
                    await asyncio.sleep(30)  # cancelled at once by the loss
                    return "ran on"
            except baton.LockLost as e:
                self.assertIsInstance(e.cause, baton.ForceReleased)
                return "lost"

        start = time.monotonic()
        self.assertEqual(asyncio.run(main()), "lost")
        self.assertLess(time.monotonic() - start, 5)

    def test_async_grant_and_release(self) -> None:
        c = self.client()

        async def main() -> int:
            async with c.alock("py/async2") as held:
                return held.token

        self.assertGreater(asyncio.run(main()), 0)


@unittest.skipUnless(os.path.exists("/proc/net/tcp"), "SKIPPED: no /proc/net/tcp to see the client's sockets")
class TestRelease(ServerCase):
    """A release resets the connection by default (the server hands over as
    on a close, and counts it as "reset"; no TIME_WAIT here); normal_close
    closes with a FIN and leaves the socket in TIME_WAIT."""

    def _release(self, normal_close: bool, reason: str, time_wait: bool) -> None:
        c = self.client(normal_close=normal_close)
        held = c.acquire("py/rst")
        local = held._s.sock.getsockname()[1]
        remote = int(self.srv.addr.rsplit(":", 1)[1])
        got = {}

        def wait() -> None:
            got["held"] = c.acquire("py/rst", timeout=10, queue_behind_self=True)

        w = threading.Thread(target=wait)
        w.start()
        self.await_waiters("py/rst", 1)
        before = ended(self.srv.ops, reason)
        held.release()
        w.join(10)
        self.assertIn("held", got, "the waiter was not granted after the release")
        self.assertGreater(got["held"].token, held.token)
        got["held"].release()
        eventually(lambda: ended(self.srv.ops, reason) >= before + 1, f"the server did not count the release as {reason!r}")
        if time_wait:
            eventually(lambda: tcp_state(local, remote) == "06", f"the client's socket {local} is not in TIME_WAIT")
        else:
            self.assertEqual(tcp_state(local, remote), "", f"the client's socket {local} is still there after the release")

    def test_release_resets(self) -> None:
        self._release(normal_close=False, reason="reset", time_wait=False)

    def test_normal_close(self) -> None:
        self._release(normal_close=True, reason="closed", time_wait=True)

    def test_wait_given_up_resets(self) -> None:
        c = self.client()
        with c.lock("py/rst-wait"):
            before = ended(self.srv.ops, "reset")
            with self.assertRaises(TimeoutError):
                self.client().acquire("py/rst-wait", timeout=0.3)
            eventually(lambda: ended(self.srv.ops, "reset") >= before + 1, "the server did not see the waiter's reset")


def make_certs(d: str) -> None:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, with
    the openssl command line."""

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    ext = os.path.join(d, "ext.cnf")
    with open(ext, "w") as f:
        f.write("[srv]\nsubjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
                "[cli]\nextendedKeyUsage=clientAuth\n")
    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=baton test CA")
    for who, section in (("server", "srv"), ("client", "cli")):
        run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", f"{who}.key", "-out", f"{who}.csr", "-subj", f"/CN={who}")
        run("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", f"{who}.crt", "-days", "2", "-extfile", ext, "-extensions", section)


@unittest.skipIf(shutil.which("openssl") is None, "SKIPPED: no openssl command to make certificates")
class TestTLS(unittest.TestCase):
    def test_client_certificate(self) -> None:
        d = tempfile.mkdtemp(prefix="baton-py-tls-")
        make_certs(d)
        data = tempfile.mkdtemp(prefix="baton-py-data-")
        proc = subprocess.Popen(
            [baton_bin(), "serve", "-addr", "127.0.0.1:0", "-ops-addr", "127.0.0.1:0", "-data-dir", data,
             "-log-format", "json", "-shutdown-linger", "0s",
             "-tls-cert", os.path.join(d, "server.crt"), "-tls-key", os.path.join(d, "server.key"),
             "-tls-client-ca", os.path.join(d, "ca.crt")],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        self.addCleanup(lambda: (proc.terminate(), proc.wait(15), proc.stderr and proc.stderr.close()))
        addr = ""
        assert proc.stderr is not None
        for line in proc.stderr:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("msg") == "baton serving":
                addr, ops = rec["addr"], rec["ops_addr"]
                break
        self.assertTrue(addr, "baton serve did not start with TLS")
        threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()  # type: ignore[union-attr]

        ctx = ssl.create_default_context(cafile=os.path.join(d, "ca.crt"))
        ctx.load_cert_chain(os.path.join(d, "client.crt"), os.path.join(d, "client.key"))
        with baton.Client([addr], lease=2, ssl_context=ctx).lock("py/tls") as held:
            self.assertGreater(held.token, 0)
            time.sleep(0.8)  # heartbeats over TLS keep it
            held.check()
        # The release over TLS is a reset too (no close_notify first).
        eventually(lambda: ended(ops, "reset", ctx) >= 1, "the server did not see the TLS release as a reset")

        # Without a client certificate the server refuses the handshake: an
        # error at once, not retried until the timeout.
        bare = ssl.create_default_context(cafile=os.path.join(d, "ca.crt"))
        with self.assertRaises(baton.Unauthorized):
            baton.Client([addr], lease=2, ssl_context=bare).acquire("py/tls", timeout=5)

        self.refuses_unverified_contexts(d, addr)

    def refuses_unverified_contexts(self, d: str, addr: str) -> None:
        """A context that would let any server answer (no verification, or
        no check of the name) is refused before any connection, unless the
        caller says insecure_tls=True; a verifying one still connects only
        to the right server."""
        import ssl
        import warnings

        cert, key = os.path.join(d, "client.crt"), os.path.join(d, "client.key")
        other = tempfile.mkdtemp(prefix="baton-py-tls-other-")
        make_certs(other)  # another CA, which the server's certificate does not chain to
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            bare = ssl.SSLContext()  # what the review passed: verifies nothing
        bare.load_cert_chain(cert, key)
        no_name = ssl.create_default_context(cafile=os.path.join(d, "ca.crt"))
        no_name.check_hostname = False
        no_name.load_cert_chain(cert, key)
        port = addr.rpartition(":")[2]
        for what, ctx, at in (
            ("a bare ssl.SSLContext()", bare, addr),
            ("a context with verify_mode CERT_NONE", _unverified(cert, key), addr),
            ("a context without check_hostname, to a server of another name", no_name, "localhost:" + port),
        ):
            with self.subTest(what):
                try:
                    held = baton.Client([at], lease=2, ssl_context=ctx).acquire("py/tls-insecure", timeout=5)
                except (baton.Error, ValueError) as e:
                    self.assertEqual(type(e).__name__, "InsecureTLS", f"{what}: {e!r}")
                    self.assertIsInstance(e, ValueError)
                    self.assertIn("insecure_tls=True", str(e))
                else:
                    held.release()
                    self.fail(f"{what} connected to {at} and was granted token {held.token}; want InsecureTLS")
        # Changed after the Client was made: refused at the connection.
        later = ssl.create_default_context(cafile=os.path.join(d, "ca.crt"))
        later.load_cert_chain(cert, key)
        c = baton.Client([addr], lease=2, ssl_context=later)
        later.check_hostname = False
        with self.assertRaises(baton.InsecureTLS):
            c.acquire("py/tls-insecure", timeout=5)
        # Said explicitly: the caller's choice, and it connects.
        with baton.Client([addr], lease=2, ssl_context=bare, insecure_tls=True).lock("py/tls-insecure") as held:
            self.assertGreater(held.token, 0)
        # Verifying contexts keep refusing the wrong servers: another CA,
        # another name.
        for what, ca, at in (("another CA", os.path.join(other, "ca.crt"), addr),
                             ("another name", os.path.join(d, "ca.crt"), "localhost:" + port)):
            with self.subTest(what):
                ctx = ssl.create_default_context(cafile=ca)
                ctx.load_cert_chain(cert, key)
                with self.assertRaises(baton.Error):
                    baton.Client([at], lease=2, ssl_context=ctx).acquire("py/tls-insecure", timeout=5)


class TestOpsTLS(unittest.TestCase):
    """The ops API gets the same check as the lock dial: the admin token
    never goes to a server the ssl_context does not verify, nor in clear
    beside one. No server is needed: each refusal comes before a dial."""

    def test_weakened_context_refused_at_the_ops_dial(self) -> None:
        import ssl

        ctx = ssl.create_default_context()
        c = baton.Client(["127.0.0.1:1"], ssl_context=ctx, ops_addrs=["127.0.0.1:1"], admin_token="t" * 32)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        with self.assertRaises(baton.InsecureTLS):
            c.leader("jobs/x")

    def test_plain_ops_url_with_token_and_tls_refused(self) -> None:
        import ssl

        ctx = ssl.create_default_context()
        with self.assertRaises(baton.InsecureTLS) as e:
            baton.Client(["127.0.0.1:1"], ssl_context=ctx, ops_addrs=["http://127.0.0.1:1"], admin_token="t" * 32)
        self.assertIn("in clear", str(e.exception))
        # Said explicitly, or without a token: the caller's choice.
        baton.Client(["127.0.0.1:1"], ssl_context=ctx, ops_addrs=["http://127.0.0.1:1"], admin_token="t" * 32,
                     insecure_tls=True)
        baton.Client(["127.0.0.1:1"], ssl_context=ctx, ops_addrs=["http://127.0.0.1:1"])


def _unverified(cert: str, key: str) -> "ssl.SSLContext":
    import ssl

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.load_cert_chain(cert, key)
    return ctx


_proxy_bin: "str | None" = None


def faultproxy_bin() -> str:
    global _proxy_bin
    if os.environ.get("BATON_FAULTPROXY_BIN"):
        return os.environ["BATON_FAULTPROXY_BIN"]
    if _proxy_bin is None:
        out = os.path.join(tempfile.mkdtemp(prefix="baton-py-"), "faultproxy")
        subprocess.run(["go", "build", "-o", out, "./internal/faultproxy/cmd/faultproxy"], cwd=REPO, check=True)
        _proxy_bin = out
    return _proxy_bin


class Proxy:
    """The project's fault proxy, as a process, in front of a server."""

    def __init__(self, target: str, delay: str = "0s") -> None:
        self.log = os.path.join(tempfile.mkdtemp(prefix="baton-py-proxy-"), "frames.jsonl")
        self.proc = subprocess.Popen([faultproxy_bin(), "-target", target, "-delay", delay, "-log", self.log],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        first = self.proc.stdout.readline().split()
        assert first[:1] == ["listening"], first
        self.addr = first[1]

    def command(self, line: str) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().strip()
        if answer != "ok":
            raise RuntimeError(f"faultproxy {line!r}: {answer}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def chunks(self) -> "list[dict]":
        with open(self.log, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]


class TestThroughFaultProxy(ServerCase):
    def test_heartbeat_interval_under_delay(self) -> None:
        """With 20 ms added each way, each heartbeat leaves clamp(lease/4 -
        2 x srtt, 1 ms, lease/4) after the reply to the previous request, as
        the proxy's frame log shows (srtt computed from the same log)."""
        lease = 0.4
        proxy = Proxy(self.srv.addr, "20ms")
        self.addCleanup(proxy.stop)
        held = baton.Client([proxy.addr], lease=lease).acquire("py/beat")
        time.sleep(2.0)
        held.release()
        time.sleep(0.1)
        # The claim's connection: the last (the first was answered VERSION
        # by a server older than protocol version 3).
        link = max(c["link"] for c in proxy.chunks())
        up = [c for c in proxy.chunks() if c["dir"] == "up" and c["link"] == link]
        down = [c for c in proxy.chunks() if c["dir"] == "down" and c["link"] == link]
        # One request, one reply, in order: pair them.
        n = min(len(up), len(down))
        self.assertGreater(n, 8, f"only {n} round trips in 2 s")
        srtt, gaps = 0.0, []
        for i in range(n):
            rtt = (down[i]["sent_ns"] - up[i]["read_ns"]) / 1e9
            srtt = rtt if i == 0 else (4 * srtt + rtt) / 5
            if i + 1 < len(up) and up[i + 1]["hex"] == "020000":
                want = min(max(lease / 4 - 2 * srtt, 0.001), lease / 4)
                got = (up[i + 1]["read_ns"] - down[i]["sent_ns"]) / 1e9
                gaps.append((got, want))
        settled = gaps[3:]
        errs = sorted(abs(g - w) for g, w in settled)
        median_err = errs[len(errs) // 2]
        print(f"\n  heartbeat after reply: got {[round(g * 1000, 1) for g, _ in settled[:5]]} ms, "
              f"formula {[round(w * 1000, 1) for _, w in settled[:5]]} ms; median error {median_err * 1000:.2f} ms",
              file=sys.stderr)
        self.assertLess(median_err, 0.010)

    def test_frozen_link_ends_ownership_before_the_server_moves_the_lock(self) -> None:
        lease = 1.0
        proxy = Proxy(self.srv.addr)
        self.addCleanup(proxy.stop)
        held = baton.Client([proxy.addr], lease=lease).acquire("py/frozen")
        granted = {}

        def next_holder() -> None:
            h = baton.Client([self.srv.addr], lease=lease).acquire("py/frozen", timeout=20)
            granted["at"] = time.monotonic()
            h.release()

        t = threading.Thread(target=next_holder)
        t.start()
        time.sleep(0.3)
        stalled_at = time.monotonic()
        proxy.command("stall both")
        self.assertTrue(held.lost.wait(5))
        lost_at = time.monotonic()
        t.join(20)
        self.assertIsInstance(held.cause, baton.Unconfirmed)
        print(f"\n  frozen link: lost {(lost_at - stalled_at) * 1000:.0f} ms after the stall; "
              f"next holder granted {(granted['at'] - lost_at) * 1000:.0f} ms after that", file=sys.stderr)
        # The last confirmed send came before the stall: 0.8 x lease after it
        # at the latest (plus a loaded machine's timer slack).
        self.assertLess(lost_at - stalled_at, 0.8 * lease + 0.1)
        self.assertLess(lost_at, granted["at"], "the old holder still believed in the lock after the next grant")
        self.assertRaises(baton.LockLost, held.release)


class Follower:
    """A fake follower: answers every connection's first frame with ERROR
    NOT_LEADER carrying hint, and counts the connections."""

    def __init__(self, hint: str) -> None:
        self.hint = hint
        self.accepted = 0
        self.ln = socket.socket()
        self.ln.bind(("127.0.0.1", 0))
        self.ln.listen(16)
        self.addr = "127.0.0.1:%d" % self.ln.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.ln.accept()
            except OSError:
                return
            self.accepted += 1
            with conn:
                conn.recv(1024)
                msg = self.hint.encode()
                conn.sendall(wire.encode_frame(wire.T_ERROR, bytes([0x03]) + msg))

    def close(self) -> None:
        self.ln.close()


class TestNotLeader(ServerCase):
    def test_follows_the_hint_on_the_list(self) -> None:
        f = Follower(self.srv.addr)
        self.addCleanup(f.close)
        c = baton.Client([f.addr, self.srv.addr], lease=2)
        with c.lock("py/leader", timeout=10) as held:
            self.assertGreater(held.token, 0)
        self.assertEqual(f.accepted, 1, "the hint should have been followed at once")

    def test_hint_off_the_list_is_not_followed(self) -> None:
        f = Follower("203.0.113.9:7070")  # not on the list: never dialled
        self.addCleanup(f.close)
        c = baton.Client([f.addr, self.srv.addr], lease=2)
        with c.lock("py/leader2", timeout=10) as held:
            self.assertGreater(held.token, 0)

    def test_only_followers(self) -> None:
        f = Follower("")
        self.addCleanup(f.close)
        c = baton.Client([f.addr], lease=2)
        with self.assertRaises(TimeoutError) as cm:
            c.acquire("py/leader3", timeout=1.0)
        self.assertIn("NOT_LEADER", str(cm.exception))
        self.assertLess(f.accepted, 40, "rotation must back off, not spin")


class TestUnreachable(unittest.TestCase):
    def test_no_server(self) -> None:
        c = baton.Client(["127.0.0.1:1"], lease=1)
        with self.assertRaises(baton.ConnectionBroken):
            c.acquire("x")


if __name__ == "__main__":
    unittest.main()
