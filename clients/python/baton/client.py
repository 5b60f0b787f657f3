"""The Baton client: a context manager around one claim on one named lock."""

from __future__ import annotations

import asyncio
import os
import random
import socket
import ssl
import threading
import time
from typing import Any, List, Optional, Sequence, Tuple

from . import wire
from .errors import (
    BadRequest,
    ConnectionBroken,
    Error,
    LeaseExpired,
    LockLost,
    NotLeader,
    ServerError,
    Shutdown,
    Unconfirmed,
)
from .session import ENDED, HELD, Session

__all__ = ["Client", "Held", "DEFAULT_LEASE", "DEFAULT_DIAL_TIMEOUT"]

DEFAULT_LEASE = 10.0
DEFAULT_DIAL_TIMEOUT = 5.0

# Redirects (NOT_LEADER with a hint on the list) followed at once before the
# client backs off: enough to cross one leader change, never a hot loop.
REDIRECT_BUDGET = 3


def _split_addr(addr: str) -> Tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise BadRequest(f"address {addr!r} is not host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def _default_owner() -> str:
    pid = os.getpid()
    try:
        owner = f"{socket.gethostname()}:{pid}"
        wire.check_owner(owner)
        return owner
    except (OSError, Error):
        return f"pid:{pid}"


def _backoff(failures: int) -> float:
    """Jittered exponential backoff: 50 ms doubling up to 2 s, times 0.5-1."""
    base = min(0.05 * (2 ** max(failures - 1, 0)), 2.0)
    return base * (0.5 + random.random() / 2)


class Held:
    """A lock held by this process: the claim is its connection.

    ``token`` is the fencing token of this grant; pass it to the guarded
    resource. ``lost`` is set the moment ownership ends for any reason other
    than release; ``check()`` raises LockLost from then on.
    """

    def __init__(self, session: Session) -> None:
        self._s = session
        self.name: str = session.name
        self.token: int = session.token
        self.lost: threading.Event = session.lost

    @property
    def cause(self) -> Optional[BaseException]:
        """Why ownership ended (None while held, and after a release)."""
        return self._s.cause

    def check(self) -> None:
        """Raises LockLost (its ``.cause`` says why) once ownership has ended."""
        if self.lost.is_set():
            raise LockLost(self.name, self._s.cause or Error("lost"))

    def release(self) -> None:
        """Closes the session: the release. The next waiter is promoted at
        once. Idempotent; a release is never reported as a loss."""
        self._s.close()


class _LockContext:
    def __init__(self, client: "Client", name: str, nowait: bool, timeout: Optional[float]) -> None:
        self._client, self._name, self._nowait, self._timeout = client, name, nowait, timeout
        self._held: Optional[Held] = None

    def __enter__(self) -> Held:
        self._held = self._client.acquire(self._name, nowait=self._nowait, timeout=self._timeout)
        return self._held

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        held = self._held
        assert held is not None
        held.release()
        if held.lost.is_set():
            raise LockLost(held.name, held.cause or Error("lost"))


class _AsyncLockContext:
    """``async with client.alock(name) as held``: on loss, the task running the
    block is cancelled at once and LockLost comes out of the block (the
    cancellation is turned into it on the way out, as asyncio.timeout does)."""

    def __init__(self, client: "Client", name: str, nowait: bool, timeout: Optional[float]) -> None:
        self._client, self._name, self._nowait, self._timeout = client, name, nowait, timeout
        self._held: Optional[Held] = None
        self._task: Optional["asyncio.Task[Any]"] = None
        self._cancelled = False
        self._exited = False

    async def __aenter__(self) -> Held:
        loop = asyncio.get_running_loop()
        give_up = threading.Event()
        fut = loop.run_in_executor(
            None, lambda: self._client._acquire(self._name, self._nowait, self._timeout, give_up)
        )
        try:
            held = await asyncio.shield(fut)
        except asyncio.CancelledError:
            give_up.set()
            try:
                late = await fut  # the thread gives up within ~50 ms
                late.release()
            except BaseException:
                pass
            raise
        self._held = held
        self._task = asyncio.current_task()
        held._s.on_loss(lambda: loop.call_soon_threadsafe(self._cancel_block))
        return held

    def _cancel_block(self) -> None:
        if not self._exited and self._task is not None and not self._cancelled:
            self._cancelled = True
            self._task.cancel()

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._exited = True
        held = self._held
        assert held is not None
        held.release()
        if self._cancelled and self._task is not None and hasattr(self._task, "uncancel"):
            self._task.uncancel()
        if held.lost.is_set():
            raise LockLost(held.name, held.cause or Error("lost")) from None


class Client:
    """A Baton client for the servers at ``addrs`` (``host:port`` each).

    ``lease`` (seconds) is the failure detector every lock uses: after a full
    lease of silence the server moves the lock; heartbeats keep it for as long
    as the work runs. ``owner`` tells operators who holds or waits (default
    ``hostname:pid``). ``ssl_context`` turns on TLS (with a client certificate
    if it carries one). Inputs the server would refuse raise BadRequest here,
    before any connection. Safe to share between threads.

    A release (and a wait given up) resets the connection (RST): the server
    sees it at once, and no socket is left in TIME_WAIT, where a claim storm
    would run out of ports. A reset is sent once, where a FIN is
    retransmitted: on a network that loses it the lock is freed at the end of
    the lease instead, later but never earlier. ``normal_close=True`` closes
    with a FIN instead.
    """

    def __init__(
        self,
        addrs: Sequence[str],
        lease: float = DEFAULT_LEASE,
        owner: Optional[str] = None,
        ssl_context: Optional[ssl.SSLContext] = None,
        dial_timeout: float = DEFAULT_DIAL_TIMEOUT,
        normal_close: bool = False,
    ) -> None:
        if isinstance(addrs, str):
            addrs = [a.strip() for a in addrs.split(",") if a.strip()]
        if not addrs:
            raise BadRequest("no server address")
        self._addrs: List[str] = list(addrs)
        self._hosts = [_split_addr(a) for a in self._addrs]
        self._lease_ms = wire.lease_ms(lease)
        self.owner: str = _default_owner() if owner is None else owner
        wire.check_owner(self.owner)
        self._ssl = ssl_context
        self._dial_timeout = dial_timeout
        self._normal_close = normal_close
        self._last = 0  # the address that last answered: start there

    @property
    def lease(self) -> float:
        """The lease in seconds, as sent (whole milliseconds)."""
        return self._lease_ms / 1000.0

    def lock(self, name: str, nowait: bool = False, timeout: Optional[float] = None) -> _LockContext:
        """``with client.lock(name) as held:`` waits for the lock, holds it for
        the block, and releases it on the way out. ``nowait`` raises Busy at
        once if it is held; ``timeout`` (seconds) bounds the wait and raises
        TimeoutError. Leaving the block raises LockLost if ownership ended
        inside it."""
        wire.check_name(name)
        return _LockContext(self, name, nowait, timeout)

    def alock(self, name: str, nowait: bool = False, timeout: Optional[float] = None) -> _AsyncLockContext:
        """``async with client.alock(name) as held:``, the asyncio form of lock().
        On loss, the task running the block is cancelled at once and LockLost
        comes out of the block."""
        wire.check_name(name)
        return _AsyncLockContext(self, name, nowait, timeout)

    def acquire(self, name: str, nowait: bool = False, timeout: Optional[float] = None) -> Held:
        """Waits for the lock and returns it held; release it with
        ``held.release()``. Prefer ``lock()``, which cannot forget to."""
        return self._acquire(name, nowait, timeout, None)

    def _dial(self, i: int, remaining: Optional[float]) -> socket.socket:
        host, port = self._hosts[i]
        t = self._dial_timeout if remaining is None else min(self._dial_timeout, max(remaining, 0.001))
        sock = socket.create_connection((host, port), timeout=t)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._ssl is not None:
                sock = self._ssl.wrap_socket(sock, server_hostname=host)
        except BaseException:
            sock.close()
            raise
        return sock

    def _acquire(self, name: str, nowait: bool, timeout: Optional[float], give_up: Optional[threading.Event]) -> Held:
        frame = wire.encode_acquire(name, self._lease_ms, self.owner, nowait)
        if timeout is not None and timeout < 0:
            raise BadRequest(f"timeout {timeout}s must not be negative")
        deadline = None if timeout is None else time.monotonic() + timeout
        idx = self._last % len(self._addrs)
        reached = False
        failures = 0
        redirects = 0
        last_err: Optional[BaseException] = None

        def remaining() -> Optional[float]:
            return None if deadline is None else deadline - time.monotonic()

        def timed_out() -> TimeoutError:
            msg = f"acquire {name!r}: no grant within {timeout}s"
            if last_err is not None:
                msg += f" (last error: {last_err})"
            return TimeoutError(msg)

        def pause(d: float) -> None:
            r = remaining()
            if r is not None and r <= d:
                raise timed_out()
            if give_up is not None:
                if give_up.wait(d):
                    raise Error("acquire given up")
            else:
                time.sleep(d)

        while True:
            r = remaining()
            if r is not None and r <= 0:
                raise timed_out()
            # Connect: each address once per round, starting at idx.
            sock = None
            for k in range(len(self._addrs)):
                i = (idx + k) % len(self._addrs)
                try:
                    sock = self._dial(i, remaining())
                    idx = i
                    break
                except (OSError, ssl.SSLError) as e:
                    last_err = ConnectionBroken(f"cannot reach {self._addrs[i]}: {e}")
            if sock is None:
                if not reached:
                    raise last_err  # type: ignore[misc]
                failures += 1
                pause(_backoff(failures))
                continue
            reached = True
            s = Session(sock, self._addrs[idx], name, self._lease_ms, frame, reset=not self._normal_close)
            s.start()
            with s.cond:
                while s.state not in (HELD, ENDED):
                    r = remaining()
                    if r is not None and r <= 0:
                        break
                    if give_up is not None and give_up.is_set():
                        break
                    s.cond.wait(0.05 if give_up is not None else r)
                state = s.state
            if state == HELD:
                self._last = idx
                return Held(s)
            if state != ENDED:
                s.close()
                if give_up is not None and give_up.is_set():
                    raise Error("acquire given up")
                raise timed_out()
            err = s.error
            if isinstance(err, LockLost):
                raise err  # granted and lost before it could be handed over
            last_err = err
            if s.replied:
                failures = 0
            failures += 1
            at_once = False
            if isinstance(err, NotLeader):
                hint = err.message
                if hint in self._addrs and redirects < REDIRECT_BUDGET:
                    idx = self._addrs.index(hint)
                    redirects += 1
                    failures -= 1
                    continue
                idx = (idx + 1) % len(self._addrs)
            elif isinstance(err, Shutdown):
                idx = (idx + 1) % len(self._addrs)  # this one is going away
                at_once = failures <= 1
            elif isinstance(err, LeaseExpired):
                at_once = failures <= 1  # our heartbeats did not get through
            elif isinstance(err, ServerError) and err.server_condition:
                pass  # OVERLOADED, and conditions not yet named: back off
            elif isinstance(err, (Unconfirmed, ConnectionBroken)):
                idx = (idx + 1) % len(self._addrs)
            else:
                raise err  # type: ignore[misc]
            redirects = 0
            if not at_once:
                pause(_backoff(failures))
