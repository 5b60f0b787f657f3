"""One session on the asyncio event loop's own non-blocking socket, and the
asyncio acquire loop (internal).

No thread is involved: the protocol's ``data_received`` is the permanent
reader, and one loop timer per session is its clock (the next heartbeat,
the overdue reply, the deadline, the hold limit), so thousands of sessions
share one event loop.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import struct
import typing
from typing import Callable, List, Optional, Tuple

from . import wire
from .clock import Clock
from .core import ENDED, HELD, Attempts, SessionBase, tls_failure
from .errors import ConnectionBroken, MaxHoldReached, TLSRefused

__all__ = ["AioSession", "acquire"]


class Dialer(typing.Protocol):
    """What the asyncio acquire loop reads of the Client that calls it (the
    addresses, the dial and session settings), and ``_last``, where it
    notes the address that answered."""

    _addrs: List[str]
    _hosts: List[Tuple[str, int]]
    _lease_ms: int
    _ssl: Optional[ssl.SSLContext]
    _dial_timeout: float
    _normal_close: bool
    _log: logging.Logger
    _last: int
    _clock: Clock

    def _attempts(self, name: str, timeout: Optional[float]) -> Attempts: ...

    def _dial_ssl(self) -> Optional[ssl.SSLContext]: ...


class AioSession(SessionBase, asyncio.Protocol):
    """One session: one connection, one claim, driven by the event loop."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        addr: str,
        name: str,
        lease_ms: int,
        acquire: bytes,
        reset: bool,
        max_hold: Optional[float],
        on_waiting: Optional[Callable[[int], None]],
        log: logging.Logger,
        clock: Clock,
    ) -> None:
        super().__init__(name, addr, lease_ms, max_hold, on_waiting, log, clock)
        self._loop = loop
        self._acquire = acquire
        self._reset = reset
        self.transport: Optional[asyncio.Transport] = None
        self._timer: Optional[asyncio.TimerHandle] = None
        self.settled: "asyncio.Future[None]" = loop.create_future()  # granted or ended
        self.closed: "asyncio.Future[None]" = loop.create_future()  # the socket is closed

    def valid_until(self) -> float:
        return self.monotonic_until(self.core.valid_until())

    def on_loss(self, f: Callable[[], None]) -> None:
        if self.cause is None:
            if self.core.state != ENDED:
                self._on_loss.append(f)
            return
        f()

    def on_end(self, f: Callable[[], None]) -> None:
        if self.core.state != ENDED:
            self._on_end.append(f)
            return
        f()

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.core.sent_acquire(self.clock())
        transport.write(self._acquire)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self.core.state == ENDED:
            return
        events, end = self.core.receive(data, self.clock())
        for kind, value in events:
            if kind == "granted":
                self._settle()
            else:
                self._report_position(value)
        if end is not None:
            self._end(end)
            return
        self._arm()

    def eof_received(self) -> bool:
        return False  # close; connection_lost says the server closed

    def connection_lost(self, exc: Optional[BaseException]) -> None:
        if not self.closed.done():
            self.closed.set_result(None)
        if isinstance(exc, ssl.SSLError) and "CERTIFICATE" in str(exc).upper():
            # The server refused our certificate (or its absence): a
            # configuration error that no retry will fix.
            self._end(TLSRefused(f"TLS: {self.addr} refused this client: {exc.reason or exc}"))
        elif exc is not None:
            self._end(ConnectionBroken(f"connection to {self.addr}: {exc}"))
        else:
            self._end(ConnectionBroken(f"connection to {self.addr} closed by the server"))

    # The clock.

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.core.state == ENDED:
            return
        self._timer = self._loop.call_later(self.core.wait(self.clock()), self._tick)

    def _tick(self) -> None:
        self._timer = None
        core = self.core
        if core.state == ENDED:
            return
        now = self.clock()  # a timer that fired late (a suspend) ends here
        end = core.overdue(now)
        if end is not None:
            self._end(end)
            return
        miss = core.miss_due(now)
        if miss is not None:
            self._log_miss(miss)
        if core.beat_due(now) and self.transport is not None:
            core.sent_beat(now)
            self.transport.write(wire.HEARTBEAT)
        self._arm()

    def expire_if_late(self) -> None:
        """Ends a held lock whose deadline has passed: the clock decides, not
        whether the loop has run the session's timer since."""
        if self.core.state == HELD:
            err = self.core.overdue(self.clock())
            if err is not None:
                self._end(err)

    # Ends.

    def _settle(self) -> None:
        if not self.settled.done():
            self.settled.set_result(None)

    def _end(self, err: BaseException) -> None:
        if self.core.state == ENDED:
            return
        err_out, cause = self.core.finish(err, self._closing)
        self.error, self.cause = err_out, cause
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if cause is not None:
            self.lost.set()
            self._log_loss()
        self._settle()
        # A close the client chose (a release, a wait given up, max_hold)
        # resets by default; ends it did not choose close with a FIN.
        self._close_transport(self._reset and (self._closing or isinstance(err, MaxHoldReached)))
        callbacks = (self._on_loss if cause is not None else []) + self._on_end
        self._on_loss, self._on_end = [], []
        self._run(callbacks)

    def _close_transport(self, reset: bool) -> None:
        t = self.transport
        if t is None:
            return
        if reset:
            sock = t.get_extra_info("socket")
            if sock is not None:
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                except OSError:
                    pass  # closed already, or no SO_LINGER here: a FIN
            t.abort()
        else:
            t.close()

    def abort(self) -> None:
        """Ends the session from the client's side (a release, or a wait given
        up) without waiting for the socket to close."""
        if self.core.state != ENDED:
            self._closing = True
            self._end(ConnectionBroken("closed"))

    async def close(self) -> None:
        """Ends the session from the client's side and waits until its socket
        is closed: the server has been told when this returns."""
        self.abort()
        if self.transport is not None:
            await asyncio.shield(self.closed)


async def _dial(client: Dialer, i: int, at: Attempts, make: Callable[[], AioSession]) -> AioSession:
    host, port = client._hosts[i]
    r = at.remaining()
    t = client._dial_timeout if r is None else min(client._dial_timeout, max(r, 0.001))
    loop = asyncio.get_running_loop()
    ctx = client._dial_ssl()
    _, proto = await asyncio.wait_for(
        loop.create_connection(make, host, port, ssl=ctx, server_hostname=host if ctx is not None else None), t)
    return proto


async def acquire(
    client: Dialer,
    name: str,
    frame: bytes,
    timeout: Optional[float],
    max_hold: Optional[float],
    on_waiting: Optional[Callable[[int], None]],
) -> AioSession:
    """The asyncio acquire loop: connect, wait for the grant, and after a
    failed attempt reconnect as Attempts says. Cancelling the task gives up
    the wait (the place in the queue goes with a reset)."""
    loop = asyncio.get_running_loop()
    at = client._attempts(name, timeout)

    while True:
        at.check_time()
        s: Optional[AioSession] = None
        for i in at.order():
            def make(i: int = i) -> AioSession:
                return AioSession(loop, client._addrs[i], name, client._lease_ms, frame,
                                  not client._normal_close, max_hold, on_waiting, client._log, client._clock)
            try:
                s = await _dial(client, i, at, make)
                at.connected(i)
                break
            except ssl.SSLError as e:
                tls_failure(client._addrs[i], e, at, i)
            except (OSError, asyncio.TimeoutError) as e:
                at.dial_failed(i, ConnectionBroken(f"cannot reach {client._addrs[i]}: {e or 'timed out'}"))
        if s is None:
            await asyncio.sleep(at.no_address())
            continue
        try:
            await asyncio.wait({s.settled}, timeout=at.remaining())
        except BaseException:
            s.abort()  # cancelled: give the place up at once
            raise
        if s.state == HELD:
            client._last = at.idx
            return s
        if s.state != ENDED:
            s.abort()
            raise at.timed_out()
        assert s.error is not None
        pause = at.ended(s.error, s.replied)
        if pause > 0:
            await asyncio.sleep(pause)
