"""One claim over blocking sockets, driven by a thread of its own
(internal)."""

from __future__ import annotations

import errno
import logging
import os
import select
import socket
import ssl
import struct
import threading
import time
import typing
from typing import Callable, Dict, List, Optional, Tuple

from .claim import CLOSED, Action, Close, Dial, Leave, Link, Mover, Send, Spec
from .clock import Clock, default
from .core import ENDED, HELD, WAITING, Claim, SessionBase
from .errors import ConnectionBroken, TLSRefused

__all__ = ["Session", "WAITING", "HELD", "ENDED", "Dialer"]


class Dialer(typing.Protocol):
    """What a claim's move reads of the Client that made it: where each
    address is, TLS, and how long a dial may take."""

    _hosts: List[Tuple[str, int]]
    _dial_timeout: float

    def _dial_ssl(self) -> Optional[ssl.SSLContext]: ...


# A connection the claim has left may stay open for long: TCP keepalive
# ends one whose server's host died (no FIN, no reset ever).
LEFT_KEEPALIVE = 15


def keepalive(sock: socket.socket) -> None:
    """Turns TCP keepalive on for sock, probing after LEFT_KEEPALIVE seconds
    of silence (where the platform lets us say so)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for opt, value in (("TCP_KEEPIDLE", LEFT_KEEPALIVE), ("TCP_KEEPINTVL", LEFT_KEEPALIVE), ("TCP_KEEPCNT", 4)):
            if hasattr(socket, opt):
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, opt), value)
    except OSError:
        pass  # closed already: nothing to keep


def linger_zero(sock: socket.socket) -> None:
    """Makes sock's close send a reset (SO_LINGER 0)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass  # closed already, or no SO_LINGER here: a FIN


def refused_certificate(e: ssl.SSLError) -> bool:
    """Whether a TLS error on a read is the server's refusal of our
    certificate (or of its absence)."""
    return "CERTIFICATE" in str(e).upper()


class _Dial:
    """A resume attempt's connection being made without blocking the
    claim's thread: a non-blocking connect, then the TLS handshake, each
    step when select says its socket is ready. Nothing is sent in the SYN,
    nor as TLS early data."""

    def __init__(self, addr: str, host: str, port: int, ctx: Optional[ssl.SSLContext], timeout: float) -> None:
        self.addr, self.host, self.ctx = addr, host, ctx
        self.until = time.monotonic() + timeout
        self.sock: Optional[socket.socket] = None
        self.want_write = True
        self.tls = False
        self.err: Optional[BaseException] = None
        self.infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)

    def start(self) -> bool:
        """Starts connecting to the next address the name resolved to; False
        when none is left (err says why)."""
        while self.infos:
            family, kind, proto, _, sockaddr = self.infos.pop(0)
            s = socket.socket(family, kind, proto)
            s.setblocking(False)
            try:
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
            rc = s.connect_ex(sockaddr)
            if rc in (0, errno.EINPROGRESS, errno.EAGAIN, errno.EWOULDBLOCK):
                self.sock, self.want_write, self.tls = s, True, False
                return True
            s.close()
            self.err = ConnectionRefusedError(rc, os.strerror(rc))
        return False

    def step(self) -> Optional[bool]:
        """One step once the socket is ready: True when connected (and the
        handshake done), False when it failed, None while under way."""
        s = self.sock
        assert s is not None
        if not self.tls:
            rc = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if rc:
                s.close()
                self.sock = None
                self.err = OSError(rc, os.strerror(rc))
                return None if self.start() else False
            if self.ctx is None:
                return True
            try:
                self.sock = s = self.ctx.wrap_socket(s, server_hostname=self.host, do_handshake_on_connect=False)
            except (ssl.SSLError, OSError) as e:
                return self._fail(e)
            self.tls = True
        assert isinstance(s, ssl.SSLSocket)
        try:
            s.do_handshake()
            return True
        except ssl.SSLWantReadError:
            self.want_write = False
        except ssl.SSLWantWriteError:
            self.want_write = True
        except (ssl.SSLError, OSError) as e:
            return self._fail(e)
        return None

    def _fail(self, e: BaseException) -> bool:
        self.err = e
        self.close()
        return False

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


class Session(SessionBase):
    """A claim's one thread is both the permanent reader of every connection
    of the claim, so a promotion push or the answer to a resume is seen the
    moment it arrives, and its clock: it sends the heartbeats (at most one
    in flight), moves the claim, and ends it once the Claim says so. Any
    other thread may ask the clock too (``expire_if_late``): that is what
    ``held.check()`` does; and may end the claim (``close``, the release),
    which closes every connection at once."""

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
        *,
        v3: bool = False,
        spec: Optional[Spec] = None,
        mover: Optional[Mover] = None,
        dialer: Optional[Dialer] = None,
    ) -> None:
        core = Claim(name, addr, lease_ms, v3=v3, spec=spec, mover=mover, max_hold=max_hold, reset=reset)
        super().__init__(core, on_waiting, log, clock or default())
        self._acquire = acquire
        self._dialer = dialer
        self._socks: Dict[Link, socket.socket] = {core.first: sock}
        self._sock0 = sock
        self._dials: Dict[str, _Dial] = {}
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self.cond = threading.Condition()
        self._thread = threading.Thread(target=self._run_thread, name=f"baton session {name}", daemon=True)

    @property
    def sock(self) -> socket.socket:
        """The socket of the claim's connection (of its first, once it has
        none)."""
        with self.cond:
            s = self._socks.get(self.core.cur or self.core.first)
            return s if s is not None else self._sock0

    def valid_until(self) -> float:
        with self.cond:
            return self.monotonic_until(self.core.valid_until())

    def start(self) -> None:
        self._thread.start()

    def poke(self) -> None:
        """Makes the claim's thread read the clock now (after a change of the
        clock that its waits, counted on the monotonic clock, did not see)."""
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass  # ended, or the pipe is full: it wakes anyway

    def close(self) -> None:
        """Ends the claim from outside: the release, or giving up the place
        in the queue. Every connection of the claim is closed at once.

        By default with a reset: SO_LINGER 0 makes the claim thread's close()
        send a RST, which the server takes as a release at once, and leaves
        no socket in TIME_WAIT here. shutdown(SHUT_RD) only wakes that thread
        (on Linux, close() of a socket that another thread is blocked reading
        sends nothing until the read returns). With normal_close,
        shutdown(SHUT_RDWR) sends the FIN that is the release."""
        with self.cond:
            self.core.release()
            acts, callbacks = self._take()
        self._from_outside(acts)
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join()
        self._report(acts, callbacks)

    def expire_if_late(self) -> None:
        """Ends a held lock whose deadline has passed, from any thread: the
        clock decides, not whether the claim's thread has run since."""
        with self.cond:
            if self.core.state != HELD:
                return
            err = self.core.overdue(self.clock())
            if err is None:
                return
            self.core.end(err)
            acts, callbacks = self._take()
            self.cond.notify_all()
        if threading.current_thread() is self._thread:
            self._apply(acts)
        else:
            self._from_outside(acts)
        self._report(acts, callbacks)

    def on_loss(self, f: Callable[[], None]) -> None:
        """Runs f the moment a held lock is lost (in the thread that sees it),
        or at once if it has been already."""
        with self.cond:
            if self.core.state != ENDED:
                self._on_loss.append(f)
                return
            lost = self.core.cause is not None
        if lost:
            f()

    def on_end(self, f: Callable[[], None]) -> None:
        """Runs f once the claim has ended, for any reason (at once if it
        has)."""
        with self.cond:
            if self.core.state != ENDED:
                self._on_end.append(f)
                return
        f()

    # Carrying out the Claim's actions.

    def _from_outside(self, acts: List[Action]) -> None:
        """The actions of an end decided outside the claim's thread: wake the
        thread, which closes the sockets (a reset is armed here, sent by its
        close)."""
        for a in acts:
            if isinstance(a, Close):
                s = self._socks.get(a.link)
                if s is None:
                    continue
                how = socket.SHUT_RDWR
                if a.reset:
                    linger_zero(s)
                    how = socket.SHUT_RD
                try:
                    s.shutdown(how)
                except OSError:
                    pass
        self.poke()

    def _apply(self, acts: List[Action]) -> None:
        """Carries out the Claim's actions in the claim's thread."""
        for a in acts:
            if isinstance(a, Send):
                self._send(a)
            elif isinstance(a, Close):
                s = self._socks.pop(a.link, None)
                if s is not None:
                    if a.reset:
                        linger_zero(s)
                    s.close()
            elif isinstance(a, Dial):
                self._dial(a.addr)
            elif isinstance(a, Leave):
                s = self._socks.get(a.link)
                if s is not None:
                    keepalive(s)

    def _send(self, a: Send) -> None:
        s = self._socks.get(a.link)
        if s is None:
            return
        try:
            s.settimeout(max(a.until - self.clock(), 0.001))
            s.sendall(a.data)
            s.settimeout(0.0)
            return
        except (OSError, ValueError) as e:
            err: BaseException = e
        # Nothing is decided here but by the Claim: the reader meets the
        # ERROR, the end or the reset that explains it.
        with self.cond:
            self.core.wrote_failed(a.link, err, self.clock())
            acts, callbacks = self._take()
        self._apply(acts)
        self._report(acts, callbacks)

    def _dial(self, addr: str) -> None:
        d: Optional[_Dial] = None
        try:
            assert self._dialer is not None
            i = self.core.mover.index(addr)
            assert i is not None
            host, port = self._dialer._hosts[i]
            d = _Dial(addr, host, port, self._dialer._dial_ssl(), self._dialer._dial_timeout)
            if d.start():
                self._dials[addr] = d
                return
            err: Optional[BaseException] = d.err
        except Exception as e:  # a name that does not resolve, a TLS context refused
            err = e
        self._dialed(addr, d, False, err)

    def _dialed(self, addr: str, d: Optional[_Dial], ok: bool, err: Optional[BaseException]) -> None:
        with self.cond:
            link = self.core.dialed(addr, ok, self.clock(), err)
            if link is not None and d is not None and d.sock is not None:
                self._socks[link] = d.sock
                d.sock = None
            acts, callbacks = self._take()
        if d is not None:
            d.close()  # unused: nothing was sent on it
        self._apply(acts)
        self._report(acts, callbacks)

    # The claim's thread.

    def _run_thread(self) -> None:
        try:
            self._loop()
        except BaseException as e:  # never let the thread die silently
            with self.cond:
                self.core.end(ConnectionBroken(f"session thread failed: {e!r}"))
                acts, callbacks = self._take()
                self.cond.notify_all()
            self._apply(acts)
            self._report(acts, callbacks)
        finally:
            for s in list(self._socks.values()):
                s.close()
            self._socks.clear()
            for d in self._dials.values():
                d.close()
            self._dials.clear()
            self._wake_r.close()
            self._wake_w.close()

    def _step(self, f: Callable[[float], None]) -> bool:
        """Feeds the Claim one thing read (f, given the time), carries out
        what it answers; True once the claim has ended."""
        with self.cond:
            if self.core.state == ENDED:
                return True
            f(self.clock())
            acts, callbacks = self._take()
            if self._granted(acts):
                self.cond.notify_all()
            ended = self.core.state == ENDED
        self._apply(acts)
        self._report(acts, callbacks)
        return ended

    def _loop(self) -> None:
        core = self.core
        if self._step(lambda now: core.start(self._acquire, now)):
            return
        while True:
            if self._step(core.tick):
                return
            with self.cond:
                wait = core.wait(self.clock())
                # Close the sockets of links that another thread ended.
                gone = [link for link in self._socks if link.role == CLOSED]
            for link in gone:
                s = self._socks.pop(link, None)
                if s is not None:
                    s.close()
            rl: List[socket.socket] = [self._wake_r]
            wl: List[socket.socket] = []
            ready: List[Tuple[Link, socket.socket]] = []
            for link, s in self._socks.items():
                rl.append(s)
                if isinstance(s, ssl.SSLSocket) and s.pending() > 0:
                    ready.append((link, s))
            now_mono = time.monotonic()
            for d in self._dials.values():
                if d.sock is not None:
                    (wl if d.want_write else rl).append(d.sock)
                wait = min(wait, max(d.until - now_mono, 0.0))
            if ready:
                wait = 0.0
            try:
                r, w, _ = select.select(rl, wl, [], wait)
            except (OSError, ValueError):
                r, w = list(rl), list(wl)  # a socket closed under us: the reads say how
            if self._wake_r in r:
                try:
                    while self._wake_r.recv(512):
                        pass
                except OSError:
                    pass
            for addr, d in list(self._dials.items()):
                if d.sock in r or d.sock in w:
                    done = d.step()
                elif time.monotonic() >= d.until:
                    done, d.err = False, TimeoutError(f"no connection to {addr} within the dial timeout")
                else:
                    continue
                if done is not None:
                    del self._dials[addr]
                    self._dialed(addr, d, done, d.err)
            for link, s in list(self._socks.items()):
                if (s in r or (link, s) in ready) and self._read(link, s):
                    return

    def _read(self, link: Link, s: socket.socket) -> bool:
        """Reads what link has; True once the claim has ended."""
        try:
            s.settimeout(0.0)
            data = s.recv(65536)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError, InterruptedError):
            return False  # part of a TLS record, or nothing after all
        except ssl.SSLError as e:
            if refused_certificate(e):
                # The server refused our certificate (or its absence): a
                # configuration error that no retry will fix.
                err: BaseException = TLSRefused(f"TLS: {link.addr} refused this client: {e.reason or e}")
            else:
                err = ConnectionBroken(f"read from {link.addr}: {e}")
            return self._step(lambda now: self.core.broken(link, err, now))
        except (OSError, ValueError) as e:
            return self._step(lambda now: self.core.broken(link, ConnectionBroken(f"read from {link.addr}: {e}"), now))
        if not data:
            return self._step(lambda now: self.core.eof(link, now))
        return self._step(lambda now: self.core.feed(link, data, now))
