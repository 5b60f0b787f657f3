"""One session over a blocking socket, driven by a thread of its own
(internal)."""

from __future__ import annotations

import logging
import select
import socket
import ssl
import struct
import threading
from typing import Callable, Optional

from . import wire
from .clock import Clock, default
from .core import ENDED, HELD, WAITING, SessionBase
from .errors import ConnectionBroken, MaxHoldReached, TLSRefused

__all__ = ["Session", "WAITING", "HELD", "ENDED"]


class Session(SessionBase):
    """A session's one thread is both its permanent reader, so a promotion push
    is seen the moment it arrives, and its clock: it sends the heartbeats (at
    most one in flight) and ends the session once the Core's deadline has
    passed. Any other thread may ask the clock too (``expire_if_late``):
    that is what ``held.check()`` does."""

    def __init__(
        self,
        sock: socket.socket,
        addr: str,
        name: str,
        lease_ms: int,
        acquire: bytes,
        reset: bool = True,
        max_hold: Optional[float] = None,
        on_waiting: Optional[Callable[[int], None]] = None,
        log: Optional[logging.Logger] = None,
        clock: Optional[Clock] = None,
    ) -> None:
        super().__init__(name, addr, lease_ms, max_hold, on_waiting, log, clock or default())
        self.sock = sock
        self._reset = reset  # close() resets the connection (see there)
        self._acquire = acquire
        self.cond = threading.Condition()
        self._thread = threading.Thread(target=self._run_thread, name=f"baton session {name}", daemon=True)

    def valid_until(self) -> float:
        with self.cond:
            return self.monotonic_until(self.core.valid_until())

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
            if self.core.state != ENDED:
                self._closing = True
        self._wake(self._reset)
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join()

    def _wake(self, reset: bool) -> None:
        how = socket.SHUT_RDWR
        if reset:
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                how = socket.SHUT_RD
            except OSError:
                pass  # closed already, or no SO_LINGER here: a FIN
        try:
            self.sock.shutdown(how)
        except OSError:
            pass

    def expire_if_late(self) -> None:
        """Ends a held lock whose deadline has passed, from any thread: the
        clock decides, not whether the session's thread has run since."""
        with self.cond:
            if self.core.state != HELD:
                return
            err = self.core.overdue(self.clock())
        if err is not None:
            self._end(err)

    def on_loss(self, f: Callable[[], None]) -> None:
        """Runs f the moment a held lock is lost (in the thread that sees it),
        or at once if it has been already."""
        with self.cond:
            if self.cause is None:
                self._on_loss.append(f)
                return
        f()

    def on_end(self, f: Callable[[], None]) -> None:
        """Runs f once the session has ended, for any reason (at once if it
        has)."""
        with self.cond:
            if self.core.state != ENDED:
                self._on_end.append(f)
                return
        f()

    # The session's thread.

    def _run_thread(self) -> None:
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
            if self.core.state == ENDED:
                return
            err_out, cause = self.core.finish(err, self._closing)
            self.error, self.cause = err_out, cause
            lost = cause is not None
            callbacks = (self._on_loss if lost else []) + self._on_end
            self._on_loss, self._on_end = [], []
            if lost:
                self.lost.set()
            self.cond.notify_all()
        if lost:
            self._log_loss()
        if threading.current_thread() is not self._thread:
            # Ended by the clock or by max_hold from another thread: wake the
            # session's thread, which closes the socket. A claim that the
            # client ends on purpose (max_hold) goes as a release does.
            self._wake(self._reset and isinstance(err, MaxHoldReached))
        elif isinstance(err, MaxHoldReached) and self._reset:
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
        self._run(callbacks)

    def _send(self, b: bytes, deadline: float) -> Optional[BaseException]:
        try:
            self.sock.settimeout(max(deadline - self.clock(), 0.001))
            self.sock.sendall(b)
            return None
        except socket.timeout:
            return self.core.unconfirmed()
        except (OSError, ValueError) as e:
            return ConnectionBroken(f"write to {self.addr}: {e}")

    def _loop(self) -> None:
        core = self.core
        with self.cond:
            core.sent_acquire(self.clock())
        err = self._send(self._acquire, core.deadline)
        if err is not None:
            self._end(err)
            return
        while True:
            with self.cond:
                if core.state == ENDED:
                    return
                now = self.clock()  # a wait that ended late (a suspend) ends here
                end = core.overdue(now)
                miss = core.miss_due(now)
                beat = end is None and core.beat_due(now)
                if beat:
                    core.sent_beat(now)
                wait, deadline = core.wait(now), core.deadline
            if end is not None:
                self._end(end)
                return
            if miss is not None:
                self._log_miss(miss)
            if beat:
                err = self._send(wire.HEARTBEAT, deadline)
                if err is not None:
                    self._end(err)
                    return
                continue
            pending_tls = isinstance(self.sock, ssl.SSLSocket) and self.sock.pending() > 0
            if not pending_tls:
                try:
                    ready, _, _ = select.select([self.sock], [], [], wait)
                except (OSError, ValueError):
                    ready = [self.sock]  # closed under us: recv says how
                if not ready:
                    continue
            try:
                self.sock.settimeout(max(deadline - self.clock(), 0.001))
                data = self.sock.recv(4096)
            except (socket.timeout, ssl.SSLWantReadError):
                continue  # part of a TLS record; the deadline check decides
            except ssl.SSLError as e:
                if "CERTIFICATE" in str(e).upper():
                    # The server refused our certificate (or its absence):
                    # a configuration error that no retry will fix.
                    self._end(TLSRefused(f"TLS: {self.addr} refused this client: {e.reason or e}"))
                else:
                    self._end(ConnectionBroken(f"read from {self.addr}: {e}"))
                return
            except (OSError, ValueError) as e:
                self._end(ConnectionBroken(f"read from {self.addr}: {e}"))
                return
            at = self.clock()
            if not data:
                self._end(ConnectionBroken(f"connection to {self.addr} closed by the server"))
                return
            with self.cond:
                if core.state == ENDED:
                    return
                events, end = core.receive(data, at)
                if any(kind == "granted" for kind, _ in events):
                    self.cond.notify_all()
            for kind, value in events:
                if kind == "waiting":
                    self._report_position(value)
            if end is not None:
                self._end(end)
                return
