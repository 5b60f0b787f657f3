"""The Baton client: a context manager around one claim on one named lock."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Dict, Generator, Iterator, List, Mapping, Optional, Sequence, Tuple

from . import aio, clock, wire
from .aio import Frames
from .claim import Mover, Spec
from .core import DEFAULT_BACKOFF, ENDED, HELD, Attempts, tls_failure
from .election import acampaign, campaign
from .errors import AlreadyHeld, BadRequest, ConnectionBroken, Error, LimitMismatch, VersionError
from .held import EXCLUSIVE, READER_LIMIT, AsyncHeld, CancelOnLoss, Held, Kind, claim_kind, release_leaving
from .many import AsyncHeldMany, HeldMany, aacquire_many, acquire_many, alock_many, lock_many
from .ops import Leader, OpsAPI
from .ops import check_verifies as _check_verifies
from .session import Session

__all__ = ["Client", "Held", "AsyncHeld", "WaitState", "DEFAULT_LEASE", "DEFAULT_DIAL_TIMEOUT", "READER_LIMIT"]

DEFAULT_LEASE = 10.0
DEFAULT_DIAL_TIMEOUT = 5.0

# How long a Client sends an address protocol version 1 or 2 after it
# answered VERSION to version 3, before it tries version 3 there again: a
# server upgraded meanwhile then speaks it.
V3_RETRY = 60.0

# The arguments of one acquire: the name, its frames, timeout, max_hold.
Args = Tuple[str, Frames, Optional[float], Optional[float]]


# A position callback: called with the place in the queue (1 is next).
OnWaiting = Callable[[int], None]


@dataclass(frozen=True)
class WaitState:
    """What a waiter knows of its wait, for ``on_wait_state``: its place in
    the queue (1 is next), and ``grace``, the seconds the server still
    grants nothing (a crash or failover grace) when the server tells. The
    protocol's versions 1 and 2 do not carry it, so it is None today;
    ``baton locks``, ``baton run`` and the dashboard show it from the ops
    API."""

    position: int
    grace: Optional[float] = None


# A wait-state callback: called with the WaitState on every WAITING reply.
OnWaitState = Callable[[WaitState], None]


def _waiting(on_waiting: Optional[OnWaiting], on_wait_state: Optional[OnWaitState]) -> Optional[OnWaiting]:
    """The session's position callback: on_waiting, on_wait_state, both or
    none."""
    if on_wait_state is None:
        return on_waiting
    state = on_wait_state

    def both(position: int) -> None:
        if on_waiting is not None:
            on_waiting(position)
        state(WaitState(position))

    return both


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


def _check_seconds(what: str, value: Optional[float]) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise BadRequest(f"{what} {value!r} is not a number of seconds")
    if value < 0:
        raise BadRequest(f"{what} {value}s must not be negative")


class _LockContext:
    def __init__(self, acquire: Callable[[], Held]) -> None:
        self._acquire = acquire
        self._held: Optional[Held] = None

    def __enter__(self) -> Held:
        self._held = self._acquire()
        return self._held

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        assert self._held is not None
        release_leaving(self._held.release, exc)


class _AsyncLockContext:
    """``async with client.alock(name) as held``: on loss, the task running the
    block is cancelled at once and LockLost comes out of the block."""

    def __init__(self, acquire: Callable[[], Any]) -> None:
        self._acquire = acquire
        self._held: Optional[AsyncHeld] = None
        self._guard = CancelOnLoss()

    async def __aenter__(self) -> AsyncHeld:
        held = await self._acquire()
        self._held = held
        held._s.on_loss(self._guard.watch())
        return held

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        held = self._held
        assert held is not None
        held._s.expire_if_late()
        held._s.abort()  # type: ignore[union-attr]  # no await: a pending cancel must not stop the release
        self._guard.exit(exc, held._loss())


class Client:
    """A Baton client for the servers at ``addrs`` (``host:port`` each).

    ``lease`` (seconds) is the failure detector every lock uses: after a full
    lease of silence the server moves the lock; heartbeats keep it for as long
    as the work runs. ``owner`` tells operators who holds or waits (default
    ``hostname:pid``). ``ssl_context`` turns on TLS (with a client certificate
    if it carries one); it must verify the server's certificate and name
    (``ssl.create_default_context(cafile=...)`` does), or the Client raises
    InsecureTLS, unless ``insecure_tls=True`` accepts a context that does
    not. ``logger`` (default ``logging.getLogger("baton")``)
    is told of connections (DEBUG), redirects and reconnections (INFO),
    heartbeat replies a quarter lease late and losses (WARNING). Inputs the
    server would refuse raise BadRequest here, before any connection. Safe
    to share between threads; the ``a``-prefixed methods run on the asyncio
    event loop's own sockets, with no thread.

    Locks are not re-entrant: asking the same Client for a name it already
    holds or waits for raises AlreadyHeld at once, unless
    ``queue_behind_self=True`` (to hand a lock on between threads or tasks
    of one process).

    Retries while waiting: ``backoff=(base, cap)`` sets the waits between
    attempts (base doubling up to cap, jittered; default 0.05 and 2.0
    seconds), ``retries`` bounds how many failed attempts in a row are
    tried again before the last one's error is raised (default: no bound
    but ``timeout``). A first attempt that reaches no server raises at once
    (a wrong address), unless ``wait_for_server=True`` waits, within
    ``timeout``, for a server that is not up yet. A TLSError is never
    retried. ``baton.is_retryable(err)`` tells whether an error is worth a
    try of your own.

    ``ops_addrs`` (the server's ops API, ``host:port`` or an http(s) URL,
    one per node) and ``admin_token`` let ``leader()`` and ``observe()``
    follow an election without campaigning. Shared claims count slots: a Client may hold several
    slots of one semaphore, fewer than its limit; a claim that its own
    claims alone would keep waiting (a slot beyond the limit, any claim
    beside its own exclusive one, an exclusive claim beside its own shared
    ones) raises AlreadyHeld.

    Claims survive a restart of the server and a change of leader
    (protocol version 3, the default): when the server ends a claim's
    connection itself (SHUTDOWN, NOT_LEADER, the end of the stream with no
    ERROR) or goes silent, the client carries the claim to the next server
    on a new connection, within its own deadline. A holder keeps its token
    and its ``Held`` (``check()``, ``lost``, ``valid_until`` and the
    ``with`` block go on through the move), a waiter its place in the
    queue; the logger says that the claim moved, and how long it took. A
    reset of the connection, or a deadline that passes during the move,
    still loses the lock. ``resume=False`` (here, or per claim) sends
    protocol version 1 (2 for a shared claim), byte for byte as before,
    and a claim then ends with its connection: use it for clients behind a
    TCP proxy that terminates connections on both sides (its own restart
    closes both sides cleanly, which the server takes for a release and
    the client for its server's going away). A server older than version
    3 answers VERSION; the client then sends that address version 1 or 2
    (one more round trip, once per address and Client, for a minute).

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
        logger: Optional[logging.Logger] = None,
        *,
        wait_for_server: bool = False,
        backoff: Tuple[float, float] = DEFAULT_BACKOFF,
        retries: Optional[int] = None,
        ops_addrs: Optional[Sequence[str]] = None,
        admin_token: Optional[str] = None,
        insecure_tls: bool = False,
        resume: bool = True,
    ) -> None:
        self._insecure_tls = insecure_tls
        if not isinstance(resume, bool):
            raise BadRequest(f"resume {resume!r} is not True or False")
        self._resume = resume
        # When each address answered VERSION to protocol version 3 (on the
        # monotonic clock): it is sent versions 1 and 2 for V3_RETRY.
        self._no_v3_at: Dict[str, float] = {}
        self._v3_mu = threading.Lock()
        if ssl_context is not None and not insecure_tls:
            _check_verifies(ssl_context)
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
        self._log = logger if logger is not None else logging.getLogger("baton")
        self._last = 0  # the address that last answered: start there
        self._in_use: Dict[str, List[int]] = {}
        self._in_use_mu = threading.Lock()
        if len(backoff) != 2 or not 0 < backoff[0] <= backoff[1]:
            raise BadRequest(f"backoff {backoff!r}: give (first wait, longest wait) in seconds, 0 < first <= longest")
        if retries is not None and (isinstance(retries, bool) or not isinstance(retries, int) or retries < 0):
            raise BadRequest(f"retries {retries!r} is not a whole number >= 0")
        self._wait_for_server = wait_for_server
        self._backoff = (float(backoff[0]), float(backoff[1]))
        self._retries = retries
        self._ops = OpsAPI(list(ops_addrs or []), admin_token, ssl_context, insecure_tls=insecure_tls)
        # The clock of every lock's deadline (clock.py): it counts a
        # suspend of the machine. Tests replace it.
        self._clock: clock.Clock = clock.default()

    def _speaks_v3(self, addr: str) -> bool:
        """Whether a new claim to addr is sent as protocol version 3."""
        key = addr.strip().lower()
        with self._v3_mu:
            at = self._no_v3_at.get(key)
            if at is None:
                return True
            if time.monotonic() - at >= V3_RETRY:
                del self._no_v3_at[key]
                return True
            return False

    def _no_v3(self, addr: str) -> None:
        """Records that addr answered VERSION to protocol version 3."""
        with self._v3_mu:
            self._no_v3_at[addr.strip().lower()] = time.monotonic()
        self._log.info("baton: %s does not speak protocol version 3: its claims are sent as version 1 or 2, "
                       "and end with their connections (for %.0fs)", addr, V3_RETRY)

    def _mover(self) -> Mover:
        """What a claim needs of this Client to move (see claim.Mover)."""
        return Mover(self._addrs, self._answered, self._no_v3)

    def _answered(self, i: int) -> None:
        self._last = i  # a server took a claim over: new claims start there

    def _attempts(self, name: str, timeout: Optional[float]) -> Attempts:
        return Attempts(self._addrs, self._last, name, timeout, self._log,
                        wait_for_server=self._wait_for_server, backoff=self._backoff, retries=self._retries)

    def leader(self, name: str) -> Optional[Leader]:
        """The leader of election ``name`` now (its value and the token of
        its term), or None if nobody leads: from the ops API
        (``ops_addrs``), since the lock protocol has no such question."""
        return self._ops.leader(name)

    def observe(self, name: str, timeout: Optional[float] = None) -> Iterator[Leader]:
        """Follows election ``name`` without campaigning, as etcd's Observe
        and kazoo's election watch do: yields the leader when it starts (if
        one leads), then each new leader as it is granted the name, each
        once, in order; it reconnects by itself with the client's backoff,
        and stops after ``timeout`` seconds if given (or when the caller
        stops iterating). From the ops API (``ops_addrs``)."""
        return self._ops.observe(name, timeout, self._backoff)

    async def aleader(self, name: str) -> Optional[Leader]:
        """leader() for asyncio programs (in a thread: the ops API is HTTP)."""
        return await asyncio.get_running_loop().run_in_executor(None, self._ops.leader, name)

    @property
    def lease(self) -> float:
        """The lease in seconds, as sent (whole milliseconds)."""
        return self._lease_ms / 1000.0

    # The doors.

    def lock(self, name: str, nowait: bool = False, timeout: Optional[float] = None, *,
             max_hold: Optional[float] = None, on_waiting: Optional[OnWaiting] = None,
             on_wait_state: Optional[OnWaitState] = None,
             owner: Optional[str] = None, queue_behind_self: bool = False,
             shared: bool = False, limit: Optional[int] = None, resume: Optional[bool] = None) -> _LockContext:
        """``with client.lock(name) as held:`` waits for the lock, holds it for
        the block, and releases it on the way out.

        ``nowait`` raises Busy at once if it is held; ``timeout`` (seconds)
        bounds the wait and raises TimeoutError. ``max_hold`` (seconds)
        ends the claim that long after the grant, as a loss whose cause is
        MaxHoldReached: a bound on the hold time, where the lease bounds
        only silence. ``on_waiting`` is called with the place in the queue
        (1 is next) on every WAITING reply, from the session's thread: it
        must return at once. ``owner`` replaces the Client's owner text for
        this claim. Leaving the block raises LockLost if ownership ended
        inside it.

        ``limit=n`` makes the claim a slot of a counting semaphore: at most
        n shared claims hold the name at once (1..65535). ``shared=True``
        makes it a reader of a read/write lock (limit READER_LIMIT unless
        ``limit`` gives one); writers are ordinary claims of the same name.
        Every shared claim of a name must give the same limit while the name
        has shared sessions: another raises LimitMismatch at once, never
        retried. Without either the claim is exclusive.

        ``resume=False`` turns protocol version 3 off for this claim (see
        the Client): it ends with its connection, as in version 2."""
        args, kind = self._prepare(name, nowait, timeout, max_hold, owner, shared, limit, resume)
        waiting = _waiting(on_waiting, on_wait_state)
        return _LockContext(lambda: self._acquire(args, waiting, queue_behind_self or nowait, kind))

    def acquire(self, name: str, nowait: bool = False, timeout: Optional[float] = None, *,
                max_hold: Optional[float] = None, on_waiting: Optional[OnWaiting] = None,
                on_wait_state: Optional[OnWaitState] = None,
                owner: Optional[str] = None, queue_behind_self: bool = False,
                shared: bool = False, limit: Optional[int] = None, resume: Optional[bool] = None) -> Held:
        """Waits for the lock and returns it held (the arguments of lock());
        release it with ``held.release()``, or use it in ``with``, which
        releases on the way out."""
        args, kind = self._prepare(name, nowait, timeout, max_hold, owner, shared, limit, resume)
        return self._acquire(args, _waiting(on_waiting, on_wait_state), queue_behind_self or nowait, kind)

    def alock(self, name: str, nowait: bool = False, timeout: Optional[float] = None, *,
              max_hold: Optional[float] = None, on_waiting: Optional[OnWaiting] = None,
              on_wait_state: Optional[OnWaitState] = None,
              owner: Optional[str] = None, queue_behind_self: bool = False,
              shared: bool = False, limit: Optional[int] = None,
              resume: Optional[bool] = None) -> _AsyncLockContext:
        """``async with client.alock(name) as held:``, the asyncio form of
        lock(). On loss, the task running the block is cancelled at once and
        LockLost comes out of the block. ``on_waiting`` runs on the loop."""
        args, kind = self._prepare(name, nowait, timeout, max_hold, owner, shared, limit, resume)
        waiting = _waiting(on_waiting, on_wait_state)
        return _AsyncLockContext(lambda: self._aacquire(args, waiting, queue_behind_self or nowait, kind))

    async def aacquire(self, name: str, nowait: bool = False, timeout: Optional[float] = None, *,
                       max_hold: Optional[float] = None, on_waiting: Optional[OnWaiting] = None,
                       on_wait_state: Optional[OnWaitState] = None,
                       owner: Optional[str] = None, queue_behind_self: bool = False,
                       shared: bool = False, limit: Optional[int] = None,
                       resume: Optional[bool] = None) -> AsyncHeld:
        """The asyncio form of acquire(): ``held = await client.aacquire(name)``
        then ``await held.release()``, or ``async with await
        client.aacquire(name) as held:``. Cancelling the awaiting task gives
        up the wait."""
        args, kind = self._prepare(name, nowait, timeout, max_hold, owner, shared, limit, resume)
        return await self._aacquire(args, _waiting(on_waiting, on_wait_state), queue_behind_self or nowait, kind)

    def lock_many(self, names: Sequence[str], timeout: Optional[float] = None, *,
                  max_hold: Optional[float] = None, shared: bool = False, limit: Optional[int] = None,
                  per_name: Optional[Mapping[str, Mapping[str, Any]]] = None) -> lock_many:
        """``with client.lock_many(names) as many:`` holds every name or none
        (see baton.many). ``shared`` and ``limit`` make every claim of the
        set shared, as for lock(); ``per_name`` gives names a kind of their
        own, in place of those: ``per_name={"config": {"shared": True}}``
        holds a reader of config beside the set's other claims."""
        return lock_many(self, names, timeout, max_hold, shared=shared, limit=limit, per_name=per_name)

    def acquire_many(self, names: Sequence[str], timeout: Optional[float] = None, *,
                     max_hold: Optional[float] = None, shared: bool = False, limit: Optional[int] = None,
                     per_name: Optional[Mapping[str, Mapping[str, Any]]] = None) -> HeldMany:
        """Holds every name or none, returned as a HeldMany (see baton.many)."""
        return acquire_many(self, names, timeout, max_hold, shared=shared, limit=limit, per_name=per_name)

    async def aacquire_many(self, names: Sequence[str], timeout: Optional[float] = None, *,
                            max_hold: Optional[float] = None, shared: bool = False, limit: Optional[int] = None,
                            per_name: Optional[Mapping[str, Mapping[str, Any]]] = None) -> AsyncHeldMany:
        """The asyncio form of acquire_many (see baton.many)."""
        return await aacquire_many(self, names, timeout, max_hold, shared=shared, limit=limit, per_name=per_name)

    def alock_many(self, names: Sequence[str], timeout: Optional[float] = None, *,
                   max_hold: Optional[float] = None, shared: bool = False, limit: Optional[int] = None,
                   per_name: Optional[Mapping[str, Mapping[str, Any]]] = None) -> alock_many:
        """``async with client.alock_many(names) as many:`` (see baton.many)."""
        return alock_many(self, names, timeout, max_hold, shared=shared, limit=limit, per_name=per_name)

    def campaign(self, name: str, value: str, timeout: Optional[float] = None) -> campaign:
        """``with client.campaign(name, value) as leader:`` waits, then leads
        (see baton.election)."""
        return campaign(self, name, value, timeout)

    def acampaign(self, name: str, value: str, timeout: Optional[float] = None) -> acampaign:
        """``async with client.acampaign(name, value) as leader:`` (see
        baton.election)."""
        return acampaign(self, name, value, timeout)

    # The machinery.

    def _prepare(self, name: str, nowait: bool, timeout: Optional[float], max_hold: Optional[float],
                 owner: Optional[str], shared: bool = False, limit: Optional[int] = None,
                 resume: Optional[bool] = None) -> Tuple[Args, Kind]:
        _check_seconds("timeout", timeout)
        _check_seconds("max_hold", max_hold)
        if max_hold is not None and max_hold <= 0:
            raise BadRequest(f"max_hold {max_hold}s must be positive")
        if resume is not None and not isinstance(resume, bool):
            raise BadRequest(f"resume {resume!r} is not True or False")
        kind = claim_kind(shared, limit)
        who = self.owner if owner is None else owner
        # Without version 3, an exclusive claim stays the version 1 frame
        # that every server speaks; only a shared one needs version 2.
        legacy = wire.encode_acquire(name, self._lease_ms, who, nowait, shared=kind[0], limit=kind[1])
        spec = Spec(name, who, self._lease_ms, kind[0], kind[1] or 1)
        v3 = None
        if self._resume if resume is None else resume:
            v3 = wire.encode_acquire_v3(name, self._lease_ms, who, nowait, shared=spec.shared, limit=spec.limit)
        return (name, Frames(v3, legacy, spec), timeout, max_hold), kind

    def _claim(self, name: str, kind: Kind, queue_behind_self: bool) -> None:
        """Counts one more claim of name, unless this Client's own claims of
        it would keep the new one waiting and queue_behind_self was not
        given: any claim of its own, for an exclusive claim; an exclusive
        one, or as many shared ones as the limit, for a shared claim."""
        shared, limit = kind
        with self._in_use_mu:
            use = self._in_use.get(name) or [0, 0, 0]  # exclusive, shared, the shared ones' limit
            if not queue_behind_self:
                if not shared and use[0] + use[1] > 0:
                    raise AlreadyHeld(f"lock {name!r} is already held or awaited through this client "
                                      "(locks are not re-entrant; queue_behind_self=True queues behind it)")
                if shared and (use[0] > 0 or (use[1] >= (limit or 0) and use[2] == limit)):
                    raise AlreadyHeld(f"lock {name!r}: this client already holds or awaits "
                                      + ("an exclusive claim of it" if use[0] else f"all {limit} slots of it")
                                      + " (queue_behind_self=True queues behind them)")
            if shared:
                if use[1] == 0:
                    use[2] = limit or 0
                use[1] += 1
            else:
                use[0] += 1
            self._in_use[name] = use

    def _unclaim(self, name: str, kind: Kind) -> None:
        with self._in_use_mu:
            use = self._in_use.get(name)
            if use is None:
                return
            use[1 if kind[0] else 0] -= 1
            if use[0] <= 0 and use[1] <= 0:
                del self._in_use[name]

    @contextmanager
    def _counted(self, name: str, kind: Kind, queue_behind_self: bool) -> Generator[None, None, None]:
        """Counts a claim of name (see _claim) for the acquire inside the
        block, and counts it out again if the acquire fails."""
        self._claim(name, kind, queue_behind_self)
        try:
            yield
        except LimitMismatch as e:
            self._unclaim(name, kind)
            e.asked = kind[1]
            raise
        except BaseException:
            self._unclaim(name, kind)
            raise

    def _acquire(self, args: Args,
                 on_waiting: Optional[OnWaiting], queue_behind_self: bool, kind: Kind = EXCLUSIVE) -> Held:
        name = args[0]
        with self._counted(name, kind, queue_behind_self):
            s = self._acquire_session(*args, on_waiting)
        s.on_end(lambda: self._unclaim(name, kind))
        return Held(s, kind)

    async def _aacquire(self, args: Args,
                        on_waiting: Optional[OnWaiting], queue_behind_self: bool, kind: Kind = EXCLUSIVE) -> AsyncHeld:
        name = args[0]
        with self._counted(name, kind, queue_behind_self):
            s = await aio.acquire(self, *args, on_waiting)
        s.on_end(lambda: self._unclaim(name, kind))
        return AsyncHeld(s, kind)

    def _dial_ssl(self) -> Optional[ssl.SSLContext]:
        """The TLS context of a connection, checked again: a context changed
        after the Client was made must verify the server too."""
        if self._ssl is not None and not self._insecure_tls:
            _check_verifies(self._ssl)
        return self._ssl

    def _dial(self, i: int, remaining: Optional[float]) -> socket.socket:
        host, port = self._hosts[i]
        t = self._dial_timeout if remaining is None else min(self._dial_timeout, max(remaining, 0.001))
        ctx = self._dial_ssl()
        sock = socket.create_connection((host, port), timeout=t)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if ctx is not None:
                sock = ctx.wrap_socket(sock, server_hostname=host)
        except BaseException:
            sock.close()
            raise
        return sock

    def _acquire_session(self, name: str, frames: Frames, timeout: Optional[float], max_hold: Optional[float],
                         on_waiting: Optional[OnWaiting]) -> Session:
        at = self._attempts(name, timeout)
        while True:
            at.check_time()
            sock = None
            for i in at.order():
                try:
                    sock = self._dial(i, at.remaining())
                    at.connected(i)
                    break
                except ssl.SSLError as e:
                    tls_failure(self._addrs[i], e, at, i)
                except OSError as e:
                    at.dial_failed(i, ConnectionBroken(f"cannot reach {self._addrs[i]}: {e}"))
            if sock is None:
                time.sleep(at.no_address())
                continue
            addr = self._addrs[at.idx]
            v3 = frames.v3 is not None and self._speaks_v3(addr)
            s = Session(sock, addr, name, self._lease_ms, frames.v3 if v3 and frames.v3 else frames.legacy,
                        reset=not self._normal_close, max_hold=max_hold, on_waiting=on_waiting, log=self._log,
                        clock=self._clock, v3=v3, spec=frames.spec, mover=self._mover(), dialer=self)
            s.start()
            try:
                with s.cond:
                    while s.state not in (HELD, ENDED):
                        r = at.remaining()
                        if r is not None and r <= 0:
                            break
                        s.cond.wait(r)
                    state = s.state
            except BaseException:
                s.close()  # interrupted: give the place up at once
                raise
            if state == HELD:
                if s.addr in self._addrs:
                    self._last = self._addrs.index(s.addr)
                return s
            if state != ENDED:
                s.close()
                raise at.timed_out()
            assert s.error is not None
            if v3 and not s.replied and isinstance(s.error, VersionError):
                # A server older than protocol version 3: the same claim as
                # version 1 or 2 at once, on a new connection to the same
                # address, which is then sent those for a while.
                self._no_v3(addr)
                continue
            at.moved_to(s.addr)
            pause = at.ended(s.error, s.replied)
            if pause > 0:
                time.sleep(pause)
