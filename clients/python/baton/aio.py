"""One claim on the asyncio event loop's own non-blocking sockets, and the
asyncio acquire loop (internal).

No thread is involved: each connection of a claim is an asyncio.Protocol
whose ``data_received`` is its permanent reader, a resume attempt's
connection is made by a task of the loop, and one loop timer per claim is
its clock (the next heartbeat, the overdue reply, the deadline, the hold
limit, the move's next attempt), so thousands of claims share one event
loop.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import typing
from typing import Callable, Dict, List, Optional, Set, Tuple

from .claim import CLOSED, Action, Close, Dial, Ended, Granted, Leave, Link, Mover, Send, Spec
from .clock import Clock
from .core import ENDED, HELD, Attempts, Claim, SessionBase, tls_failure
from .errors import ConnectionBroken, TLSRefused, VersionError
from .session import keepalive, linger_zero, refused_certificate

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

    def _speaks_v3(self, addr: str) -> bool: ...

    def _no_v3(self, addr: str) -> None: ...

    def _mover(self) -> Mover: ...


class _LinkProtocol(asyncio.Protocol):
    """One connection of a claim. What it reads before the claim has bound
    it to a link (a resume attempt's, between the connection and the send)
    is kept, and handed over when it is."""

    def __init__(self, session: "AioSession", link: Optional[Link] = None) -> None:
        self.session = session
        self.link = link
        self.transport: Optional[asyncio.Transport] = None
        self.early: List[bytes] = []
        self.lost = False
        self.lost_exc: Optional[BaseException] = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.session._made(self)

    def data_received(self, data: bytes) -> None:
        if self.link is None:
            self.early.append(data)
            return
        self.session._data(self, data)

    def eof_received(self) -> bool:
        return False  # close; connection_lost says the server closed

    def connection_lost(self, exc: Optional[BaseException]) -> None:
        self.lost, self.lost_exc = True, exc
        self.session._lost(self, exc)

    def close(self, reset: bool) -> None:
        """Closes the connection: a reset (the release) or a FIN."""
        t = self.transport
        if t is None:
            return
        if reset:
            sock = t.get_extra_info("socket")
            if sock is not None:
                linger_zero(sock)
            t.abort()
        else:
            t.close()


class AioSession(SessionBase):
    """One claim and its connections, driven by the event loop."""

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
        *,
        v3: bool = False,
        spec: Optional[Spec] = None,
        mover: Optional[Mover] = None,
        dialer: Optional[Dialer] = None,
    ) -> None:
        core = Claim(name, addr, lease_ms, v3=v3, spec=spec, mover=mover, max_hold=max_hold, reset=reset)
        super().__init__(core, on_waiting, log, clock)
        self._loop = loop
        self._acquire = acquire
        self._dialer = dialer
        self._protos: Dict[Link, _LinkProtocol] = {}
        self._open: Set[_LinkProtocol] = set()  # connections not yet lost
        self._dials: Dict[str, "asyncio.Task[None]"] = {}
        self._timer: Optional[asyncio.TimerHandle] = None
        self.settled: "asyncio.Future[None]" = loop.create_future()  # granted or ended
        self.closed: "asyncio.Future[None]" = loop.create_future()  # every socket of the claim is closed

    @property
    def transport(self) -> Optional[asyncio.Transport]:
        """The transport of the claim's connection (of its first, once it has
        none)."""
        p = self._protos.get(self.core.cur or self.core.first)
        return p.transport if p is not None else None

    def first_protocol(self) -> _LinkProtocol:
        """The protocol of the claim's first connection: its connection sends
        the ACQUIRE at once."""
        p = _LinkProtocol(self, self.core.first)
        self._protos[self.core.first] = p
        return p

    def valid_until(self) -> float:
        return self.monotonic_until(self.core.valid_until())

    def on_loss(self, f: Callable[[], None]) -> None:
        if self.core.state != ENDED:
            self._on_loss.append(f)
            return
        if self.core.cause is not None:
            f()

    def on_end(self, f: Callable[[], None]) -> None:
        if self.core.state != ENDED:
            self._on_end.append(f)
            return
        f()

    def poke(self) -> None:
        """Makes the claim read the clock now (from any thread)."""
        self._loop.call_soon_threadsafe(self._tick)

    # The connections.

    def _made(self, p: _LinkProtocol) -> None:
        if self.core.state == ENDED:
            p.close(False)  # a dial that finished after the end: unused
            return
        self._open.add(p)
        if p.link is self.core.first:
            self.core.start(self._acquire, self.clock())
            self._run()

    def _data(self, p: _LinkProtocol, data: bytes) -> None:
        if p.link is None or self.core.state == ENDED:
            return
        self.core.feed(p.link, data, self.clock())
        self._run()

    def _lost(self, p: _LinkProtocol, exc: Optional[BaseException]) -> None:
        self._open.discard(p)
        link = p.link
        if link is not None and link.role != CLOSED and self.core.state != ENDED:
            now = self.clock()
            if exc is None:
                self.core.eof(link, now)
            elif isinstance(exc, ssl.SSLError) and refused_certificate(exc):
                # The server refused our certificate (or its absence): a
                # configuration error that no retry will fix.
                self.core.broken(link, TLSRefused(f"TLS: {link.addr} refused this client: {exc.reason or exc}"), now)
            else:
                self.core.broken(link, ConnectionBroken(f"connection to {link.addr}: {exc}"), now)
            self._run()
        self._closed_if_done()

    def _closed_if_done(self) -> None:
        if self.core.state == ENDED and not self._open and not self.closed.done():
            self.closed.set_result(None)

    async def _dial(self, addr: str) -> None:
        """A resume attempt's connection: made by the loop, then handed to
        the Claim, which sends the resume on it or closes it unused."""
        d = self._dialer
        p: Optional[_LinkProtocol] = None
        try:
            assert d is not None
            i = self.core.mover.index(addr)
            assert i is not None
            host, port = d._hosts[i]
            ctx = d._dial_ssl()
            made = _LinkProtocol(self)
            p = made
            await asyncio.wait_for(
                self._loop.create_connection(lambda: made, host, port, ssl=ctx,
                                             server_hostname=host if ctx is not None else None),
                d._dial_timeout)
            ok, err = True, None
        except asyncio.CancelledError:
            if p is not None:
                p.close(False)
            raise
        except Exception as e:  # refused, unreachable, timed out, a TLS handshake that failed
            ok, err = False, e
        self._dials.pop(addr, None)
        link = self.core.dialed(addr, ok, self.clock(), err)
        if link is None or p is None:
            if p is not None:
                p.close(False)  # unused: nothing was sent on it
            self._run()
            return
        p.link = link
        self._protos[link] = p
        self._run()  # sends the resume
        for data in p.early:
            self._data(p, data)
        p.early = []
        if p.lost:
            self._lost(p, p.lost_exc)

    # Carrying out the Claim's actions.

    def _run(self) -> None:
        acts, callbacks = self._take()
        self._apply(acts)
        self._report(acts, callbacks)
        self._arm()

    def _apply(self, acts: List[Action]) -> None:
        for a in acts:
            if isinstance(a, Send):
                p = self._protos.get(a.link)
                if p is not None and p.transport is not None and not p.lost:
                    p.transport.write(a.data)  # a failure comes to connection_lost
            elif isinstance(a, Close):
                p = self._protos.pop(a.link, None)
                if p is not None:
                    p.close(a.reset)
            elif isinstance(a, Dial):
                if a.addr not in self._dials:
                    self._dials[a.addr] = self._loop.create_task(self._dial(a.addr))
            elif isinstance(a, Leave):
                p = self._protos.get(a.link)
                sock = p.transport.get_extra_info("socket") if p is not None and p.transport is not None else None
                if isinstance(sock, socket.socket):
                    keepalive(sock)
            elif isinstance(a, Granted):
                self._settle()
            elif isinstance(a, Ended):
                self._settle()
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
                for task in self._dials.values():
                    task.cancel()
                self._dials.clear()
                self._closed_if_done()

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
        if self.core.state == ENDED:
            return
        self.core.tick(self.clock())  # a timer that fired late (a suspend) ends here
        self._run()

    def expire_if_late(self) -> None:
        """Ends a held lock whose deadline has passed: the clock decides, not
        whether the loop has run the claim's timer since."""
        if self.core.state == HELD:
            err = self.core.overdue(self.clock())
            if err is not None:
                self.core.end(err)
                self._run()

    # Ends.

    def _settle(self) -> None:
        if not self.settled.done():
            self.settled.set_result(None)

    def abort(self) -> None:
        """Ends the claim from the client's side (a release, or a wait given
        up) without waiting for the sockets to close: every connection of
        the claim is closed at once."""
        if self.core.state != ENDED:
            self.core.release()
            self._run()

    async def close(self) -> None:
        """Ends the claim from the client's side and waits until its sockets
        are closed: the server has been told when this returns."""
        self.abort()
        if self._open:
            await asyncio.shield(self.closed)


async def _connect(client: Dialer, i: int, at: Attempts, s: AioSession) -> None:
    host, port = client._hosts[i]
    r = at.remaining()
    t = client._dial_timeout if r is None else min(client._dial_timeout, max(r, 0.001))
    loop = asyncio.get_running_loop()
    ctx = client._dial_ssl()
    await asyncio.wait_for(
        loop.create_connection(s.first_protocol, host, port, ssl=ctx, server_hostname=host if ctx is not None else None), t)


class Frames(typing.NamedTuple):
    """A claim's ACQUIRE frames: of version 3 (None when resume is off), and
    of version 1 or 2, byte for byte as a client without version 3 sends
    them; and the claim as a resume names it."""

    v3: Optional[bytes]
    legacy: bytes
    spec: Spec


async def acquire(
    client: Dialer,
    name: str,
    frames: Frames,
    timeout: Optional[float],
    max_hold: Optional[float],
    on_waiting: Optional[Callable[[int], None]],
) -> AioSession:
    """The asyncio acquire loop: connect, wait for the grant, and after a
    failed attempt reconnect as Attempts says. Cancelling the task gives up
    the wait (the place in the queue goes with a reset). A claim that moves
    (protocol version 3) is still the same claim: the loop sees nothing of
    it."""
    loop = asyncio.get_running_loop()
    at = client._attempts(name, timeout)

    while True:
        at.check_time()
        s: Optional[AioSession] = None
        for i in at.order():
            addr = client._addrs[i]
            v3 = frames.v3 is not None and client._speaks_v3(addr)
            cand = AioSession(loop, addr, name, client._lease_ms, frames.v3 if v3 and frames.v3 else frames.legacy,
                              not client._normal_close, max_hold, on_waiting, client._log, client._clock,
                              v3=v3, spec=frames.spec, mover=client._mover(), dialer=client)
            try:
                await _connect(client, i, at, cand)
                at.connected(i)
                s = cand
                break
            except ssl.SSLError as e:
                tls_failure(addr, e, at, i)
            except (OSError, asyncio.TimeoutError) as e:
                at.dial_failed(i, ConnectionBroken(f"cannot reach {addr}: {e or 'timed out'}"))
        if s is None:
            await asyncio.sleep(at.no_address())
            continue
        try:
            await asyncio.wait({s.settled}, timeout=at.remaining())
        except BaseException:
            s.abort()  # cancelled: give the place up at once
            raise
        if s.state == HELD:
            client._last = client._addrs.index(s.addr) if s.addr in client._addrs else at.idx
            return s
        if s.state != ENDED:
            s.abort()
            raise at.timed_out()
        assert s.error is not None
        if s.core.v3 and not s.replied and isinstance(s.error, VersionError):
            # A server older than protocol version 3: the same claim as
            # version 1 or 2 at once, on a new connection to the same
            # address, which is then sent those for a while.
            client._no_v3(s.addr)
            continue
        at.moved_to(s.addr)
        pause = at.ended(s.error, s.replied)
        if pause > 0:
            await asyncio.sleep(pause)
