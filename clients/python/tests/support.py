"""Shared helpers of the Python client's tests: the real `baton serve`
(BATON_BIN, else built with `go build`) on loopback ports the kernel
picks, stopped by its PID."""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
PACKAGE_DIR = os.path.abspath(os.path.join(HERE, ".."))
# BATON_PY_PATH runs the tests (and the pause tests' holder) against
# another copy of the package, e.g. an older one.
sys.path.insert(0, os.environ.get("BATON_PY_PATH") or PACKAGE_DIR)

import baton  # noqa: E402

_built: "str | None" = None


def baton_bin() -> str:
    global _built
    if os.environ.get("BATON_BIN"):
        return os.environ["BATON_BIN"]
    if _built is None:
        out = os.path.join(tempfile.mkdtemp(prefix="baton-py-"), "baton")
        subprocess.run(["go", "build", "-o", out, "./cmd/baton"], cwd=REPO, check=True)
        _built = out
    return _built


class Server:
    """A real baton serve, started and stopped by its PID."""

    def __init__(self, data_dir: "str | None" = None, addr: str = "127.0.0.1:0", ops_addr: str = "127.0.0.1:0") -> None:
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="baton-py-data-")
        self.proc = subprocess.Popen(
            [baton_bin(), "serve", "-addr", addr, "-ops-addr", ops_addr, "-data-dir", self.data_dir,
             "-log-format", "json", "-shutdown-linger", "0s"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        self.addr = self.ops = ""
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("msg") == "baton serving":
                self.addr, self.ops = rec["addr"], rec["ops_addr"]
                break
        if not self.addr:
            raise RuntimeError("baton serve did not report its addresses")
        # Keep draining the log so the server never blocks on it.
        self._drainer = threading.Thread(target=self._drain, daemon=True)
        self._drainer.start()

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for _ in self.proc.stderr:
            pass

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(15)
        self._drainer.join(5)
        if self.proc.stderr is not None:
            self.proc.stderr.close()

    def force_release(self, name: str) -> None:
        req = urllib.request.Request(f"http://{self.ops}/v1/locks/{urllib.request.quote(name, safe='')}/release", method="POST")
        with urllib.request.urlopen(req, timeout=5) as resp:
            resp.read()


class ServerCase(unittest.TestCase):
    def setUp(self) -> None:
        self.srv = Server()
        self.addCleanup(self.srv.stop)

    def client(self, lease: float = 2.0, **kw) -> baton.Client:
        return baton.Client([self.srv.addr], lease=lease, **kw)

    def await_waiters(self, name: str, n: int) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://{self.srv.ops}/v1/locks/{urllib.request.quote(name, safe='')}", timeout=5) as r:
                    if len(json.load(r)["waiters"]) >= n:
                        return
            except OSError:
                pass
            time.sleep(0.01)
        self.fail(f"{name}: fewer than {n} waiters after 10 s")


def ended(ops: str, reason: str, context: "ssl.SSLContext | None" = None) -> float:
    """baton_sessions_ended_total{reason=...} from the server's /metrics
    (over https with context)."""
    url = f"{'https' if context else 'http'}://{ops}/metrics"
    with urllib.request.urlopen(url, timeout=5, context=context) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(f'baton_sessions_ended_total{{reason="{reason}"}} '):
                return float(line.split()[-1])
    return 0.0


def tcp_state(local: int, remote: int) -> str:
    """The state of this host's TCP socket local port -> remote port, from
    /proc/net/tcp{,6}: "" if there is none, else the hex state (06 is
    TIME_WAIT)."""
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(f) as fh:
                next(fh)
                for line in fh:
                    fields = line.split()
                    if int(fields[1].rsplit(":", 1)[1], 16) == local and int(fields[2].rsplit(":", 1)[1], 16) == remote:
                        return fields[3]
        except FileNotFoundError:
            pass
    return ""


def eventually(cond, what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"after {timeout}s: {what}")
        time.sleep(0.01)


