"""One session: one connection, one claim on one lock (internal)."""

from __future__ import annotations

import select
import socket
import ssl
import struct
import threading
import time
from typing import Callable, List, Optional

from . import wire
from .errors import ConnectionBroken, Error, LockLost, Unauthorized, Unconfirmed, error_for_code

# The floor of the heartbeat interval: it only stops a slow link from
# driving the interval to zero (see the Go client's heartbeat.go).
MIN_HEARTBEAT_INTERVAL = 0.001

WAITING, HELD, ENDED = "waiting", "held", "ended"


class Violation(Error):
    """The server sent a frame that no server may send."""


class Schedule:
    """The heartbeat schedule of PROTOCOL.md:

    base = lease/4; timeout = 0.8 x lease; srtt an EWMA (alpha 0.2) of reply
    round trips, the first sample taken whole;
    interval = clamp(base - 2 x srtt, min, base), counted from the reply.
    """

    def __init__(self, lease: float) -> None:
        self.lease = lease
        self.srtt = 0.0
        self.samples = 0

    def observe(self, rtt: float) -> None:
        rtt = max(rtt, 0.0)
        self.srtt = rtt if self.samples == 0 else (4 * self.srtt + rtt) / 5
        self.samples += 1

    @property
    def timeout(self) -> float:
        return self.lease * 0.8

    def interval(self) -> float:
        base = self.lease / 4
        return min(max(base - 2 * self.srtt, min(MIN_HEARTBEAT_INTERVAL, base)), base)


class Session:
    """A session's one thread is both its permanent reader, so a promotion push
    is seen the moment it arrives, and its clock: it sends the heartbeats (at
    most one in flight) and ends the session itself once 0.8 x lease has
    passed since the send of the last request the server answered."""

    def __init__(self, sock: socket.socket, addr: str, name: str, lease_ms: int, acquire: bytes, reset: bool = True) -> None:
        self.sock = sock
        self._reset = reset  # close() resets the connection (see there)
        self.addr = addr
        self.name = name
        self.sched = Schedule(lease_ms / 1000.0)
        self._acquire = acquire
        self.cond = threading.Condition()
        self.state = WAITING
        self.token = 0
        self.position = 0
        self.replied = False
        self.error: Optional[BaseException] = None  # why it ended; None after release
        self.cause: Optional[BaseException] = None  # the loss's cause, once held and lost
        self.lost = threading.Event()
        self._closing = False
        self._on_loss: List[Callable[[], None]] = []
        self._thread = threading.Thread(target=self._run, name=f"baton session {name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        """Ends the session from outside: the release, or giving up the place in
        the queue.

        By default with a reset: SO_LINGER 0 makes the session thread's
        close() send a RST, which the server takes as a release at once, and
        leaves no socket in TIME_WAIT here. shutdown(SHUT_RD) only wakes that
        thread (on Linux, close() of a socket that another thread is blocked
        reading sends nothing until the read returns). With normal_close,
        shutdown(SHUT_RDWR) sends the FIN that is the release."""
        with self.cond:
            if self.state != ENDED:
                self._closing = True
        how = socket.SHUT_RDWR
        if self._reset:
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                how = socket.SHUT_RD
            except OSError:
                pass  # closed already, or no SO_LINGER here: a FIN
        try:
            self.sock.shutdown(how)
        except OSError:
            pass
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join()

    def on_loss(self, f: Callable[[], None]) -> None:
        """Runs f (in the session's thread) the moment a held lock is lost, or at
        once if it has been already."""
        with self.cond:
            if not self.lost.is_set():
                self._on_loss.append(f)
                return
        f()

    # The session's thread.

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as e:  # never let the thread die silently
            self._end(ConnectionBroken(f"session thread failed: {e!r}"))
        finally:
            try:
                self.sock.close()
            except OSError:
                pass

    def _end(self, err: BaseException) -> None:
        with self.cond:
            if self.state == ENDED:
                return
            held = self.state == HELD
            if self._closing:
                err_out: Optional[BaseException] = None
            elif held:
                self.cause = err
                err_out = LockLost(self.name, err)
            else:
                err_out = err
            self.error = err_out
            self.state = ENDED
            lost = held and err_out is not None
            callbacks = self._on_loss if lost else []
            self._on_loss = []
            if lost:
                self.lost.set()
            self.cond.notify_all()
        for f in callbacks:
            try:
                f()
            except Exception:
                pass

    def _send(self, b: bytes, deadline: float) -> Optional[BaseException]:
        try:
            self.sock.settimeout(max(deadline - time.monotonic(), 0.001))
            self.sock.sendall(b)
            return None
        except socket.timeout:
            return Unconfirmed(self._unconfirmed_text())
        except (OSError, ValueError) as e:
            return ConnectionBroken(f"write to {self.addr}: {e}")

    def _unconfirmed_text(self) -> str:
        s = self.sched
        return f"no confirmation from the server for {s.timeout:g}s (0.8 x lease {s.lease:g}s)"

    def _loop(self) -> None:
        sched = self.sched
        sent_at = time.monotonic()
        deadline = sent_at + sched.timeout
        pending = True
        next_beat: Optional[float] = None
        buf = bytearray()
        err = self._send(self._acquire, deadline)
        if err is not None:
            self._end(err)
            return
        while True:
            now = time.monotonic()
            if now >= deadline:
                self._end(Unconfirmed(self._unconfirmed_text()))
                return
            if next_beat is not None and now >= next_beat:
                sent_at, pending, next_beat = now, True, None
                err = self._send(wire.HEARTBEAT, deadline)
                if err is not None:
                    self._end(err)
                    return
                continue
            wake = deadline if next_beat is None else min(deadline, next_beat)
            pending_tls = isinstance(self.sock, ssl.SSLSocket) and self.sock.pending() > 0
            if not pending_tls:
                try:
                    ready, _, _ = select.select([self.sock], [], [], max(wake - now, 0))
                except (OSError, ValueError):
                    ready = [self.sock]  # closed under us: recv says how
                if not ready:
                    continue
            try:
                self.sock.settimeout(max(deadline - time.monotonic(), 0.001))
                data = self.sock.recv(4096)
            except (socket.timeout, ssl.SSLWantReadError):
                continue  # part of a TLS record; the deadline check decides
            except ssl.SSLError as e:
                if "CERTIFICATE" in str(e).upper():
                    # The server refused our certificate (or its absence):
                    # a configuration error that no retry will fix.
                    self._end(Unauthorized(f"TLS: {self.addr} refused this client: {e.reason or e}"))
                else:
                    self._end(ConnectionBroken(f"read from {self.addr}: {e}"))
                return
            except (OSError, ValueError) as e:
                self._end(ConnectionBroken(f"read from {self.addr}: {e}"))
                return
            at = time.monotonic()
            if not data:
                self._end(ConnectionBroken(f"connection to {self.addr} closed by the server"))
                return
            buf += data
            frames, split_err = wire.split(buf)
            for ftype, payload in frames:
                try:
                    f = wire.decode(ftype, payload)
                except Error as e:
                    self._end(Violation(f"server {self.addr} sent a bad frame: {e}"))
                    return
                if f.type == wire.T_ERROR:
                    self._end(error_for_code(f.code, f.message))
                    return
                # A frame that arrives after the deadline confirms nothing:
                # the server may already have moved the lock.
                if at >= deadline:
                    self._end(Unconfirmed(self._unconfirmed_text()))
                    return
                if f.type == wire.T_ACQUIRED and f.push:
                    # Promotion; it does not move the deadline.
                    if self.state == HELD:
                        self._end(Violation("promotion push while holding the lock"))
                        return
                    self._grant(f.token)
                    continue
                if not pending:
                    self._end(Violation("reply with no request outstanding"))
                    return
                pending = False
                self.replied = True
                sched.observe(at - sent_at)
                deadline = sent_at + sched.timeout
                next_beat = at + sched.interval()
                if f.type == wire.T_WAITING:
                    if self.state == HELD:
                        self._end(Violation(f"WAITING (position {f.position}) after the lock was granted"))
                        return
                    with self.cond:
                        self.position = f.position
                elif self.state != HELD:
                    self._grant(f.token)
                elif f.token != self.token:
                    self._end(Violation(f"ACQUIRED with token {f.token} while holding token {self.token}"))
                    return
            if split_err is not None:
                self._end(Violation(f"server {self.addr} sent a bad frame: {split_err}"))
                return

    def _grant(self, token: int) -> None:
        with self.cond:
            if self.state == WAITING:
                self.state, self.token = HELD, token
                self.cond.notify_all()
