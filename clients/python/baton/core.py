"""What both drivers of a claim share (internal): the acquire loop's
choices after a failed attempt (reconnect where, after how long), the
loss event, and the base of the thread driver (session.py) and the
asyncio driver (aio.py). The protocol itself, and a claim's move, are the
sans-I/O Claim of claim.py and move.py: the drivers feed it the bytes
they read and the time on the client's clock (clock.py: it counts a
suspend of the machine), and act on what it answers.
"""

from __future__ import annotations

import logging
import random
import ssl
import threading
import time
from typing import Callable, List, Optional, Sequence, Tuple

from .claim import ENDED, HELD, WAITING, Action, Ended, Granted, Note, Position, Violation
from .clock import Clock
from .errors import (
    ConnectionBroken,
    Error,
    LeaseExpired,
    LockLost,
    Moved,
    NotLeader,
    ResumeRefused,
    ServerError,
    Shutdown,
    Superseded,
    TLSError,
    Unconfirmed,
)
from .move import Claim

__all__ = ["Attempts", "SessionBase", "LostEvent", "Claim", "WAITING", "HELD", "ENDED", "Violation", "backoff"]

# Redirects (NOT_LEADER with a hint on the list) followed at once before the
# client backs off: enough to cross one leader change, never a hot loop.
REDIRECT_BUDGET = 3


# The default backoff: 50 ms doubling up to 2 s (Client's ``backoff``).
DEFAULT_BACKOFF = (0.05, 2.0)


def backoff(failures: int, base: float = DEFAULT_BACKOFF[0], cap: float = DEFAULT_BACKOFF[1]) -> float:
    """Jittered exponential backoff: base doubling up to cap, times 0.5-1."""
    d = min(base * (2 ** min(max(failures - 1, 0), 32)), cap)
    return d * (0.5 + random.random() / 2)


def tls_failure(addr: str, e: ssl.SSLError, at: "Attempts", i: int) -> None:
    """A dial whose TLS handshake failed: a TLSError, raised at once (a
    configuration, never retried), unless the network ended it (the server
    went away mid-handshake), which is a failed dial like any other."""
    if isinstance(e, (ssl.SSLEOFError, ssl.SSLZeroReturnError)):
        at.dial_failed(i, ConnectionBroken(f"cannot reach {addr}: {e}"))
        return
    raise TLSError(f"TLS handshake with {addr}: {e.reason or e}") from e


class Attempts:
    """The acquire loop's bookkeeping, shared by the blocking and the asyncio
    loops: which address to dial, and what a failed attempt means (try again
    at once, after a backoff, or give up)."""

    def __init__(self, addrs: Sequence[str], start: int, name: str, timeout: Optional[float], log: logging.Logger,
                 wait_for_server: bool = False, backoff: Tuple[float, float] = DEFAULT_BACKOFF,
                 retries: Optional[int] = None) -> None:
        self.wait_for_server = wait_for_server
        self.backoff = backoff
        self.retries = retries
        self.addrs = list(addrs)
        self.idx = start % len(self.addrs)
        self.name = name
        self.timeout = timeout
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.log = log
        self.reached = False
        self.failures = 0
        self.redirects = 0
        self.last_err: Optional[BaseException] = None

    def remaining(self) -> Optional[float]:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def timed_out(self) -> TimeoutError:
        msg = f"acquire {self.name!r}: no grant within {self.timeout}s"
        if self.last_err is not None:
            msg += f" (last error: {self.last_err})"
        return TimeoutError(msg)

    def check_time(self) -> None:
        r = self.remaining()
        if r is not None and r <= 0:
            raise self.timed_out()

    def order(self) -> List[int]:
        """This round's addresses: each once, from the current one."""
        n = len(self.addrs)
        return [(self.idx + k) % n for k in range(n)]

    def dial_failed(self, i: int, e: BaseException) -> None:
        self.last_err = e if isinstance(e, Error) else ConnectionBroken(f"cannot reach {self.addrs[i]}: {e}")
        self.log.debug("baton: %s", self.last_err)

    def moved_to(self, addr: str) -> None:
        """The claim of the last attempt ended at addr (where it moved, if it
        did): the next attempt counts from there."""
        if addr in self.addrs:
            self.idx = self.addrs.index(addr)

    def connected(self, i: int) -> None:
        self.idx, self.reached = i, True
        self.log.debug("baton: connected to %s for %r", self.addrs[i], self.name)

    def no_address(self) -> float:
        """Every address failed to connect: the pause before the next round,
        or the error at once if none has ever answered (a misconfiguration),
        unless the caller waits for a server to come up (wait_for_server)."""
        assert self.last_err is not None
        if not self.reached and not self.wait_for_server:
            raise self.last_err
        self.failures += 1
        self._count_retry(self.last_err)
        return self._pause(backoff(self.failures, *self.backoff))

    def ended(self, err: BaseException, replied: bool) -> float:
        """A session that ended while waiting: the pause before the next
        attempt (0: at once), or the error raised when no retry can help."""
        if isinstance(err, LockLost):
            raise err  # granted and lost before it could be handed over
        self.last_err = err
        if replied:
            self.failures = 0
        self.failures += 1
        at_once = False
        n = len(self.addrs)
        here = self.addrs[self.idx]
        if isinstance(err, NotLeader):
            hint = err.message
            if hint in self.addrs and self.redirects < REDIRECT_BUDGET:
                self.idx = self.addrs.index(hint)
                self.redirects += 1
                self.failures -= 1
                self.log.info("baton: %s is not the leader; following it to %s", here, hint)
                return 0.0
            self.idx = (self.idx + 1) % n
            self.log.info("baton: %s is not the leader (%s); trying %s", here,
                          f"it names {hint}, not on this client's list" if hint else "no leader known",
                          self.addrs[self.idx])
        elif isinstance(err, Shutdown):
            self.idx = (self.idx + 1) % n  # this one is going away
            at_once = self.failures <= 1
        elif isinstance(err, LeaseExpired):
            at_once = self.failures <= 1  # our heartbeats did not get through
        elif isinstance(err, ResumeRefused):
            at_once = self.failures <= 1  # the waiter's place could not be carried over: a new place
        elif isinstance(err, ServerError) and err.server_condition:
            pass  # OVERLOADED, and conditions not yet named: back off
        elif isinstance(err, (Unconfirmed, ConnectionBroken)):
            self.idx = (self.idx + 1) % n
        else:
            raise err
        self.redirects = 0
        self._count_retry(err)
        pause = 0.0 if at_once else backoff(self.failures, *self.backoff)
        self.log.info("baton: waiting for %r: %s; reconnecting in %.0f ms", self.name, err, pause * 1000)
        return self._pause(pause)

    def _count_retry(self, err: BaseException) -> None:
        """Raises err once the retries in a row pass the caller's bound."""
        if self.retries is not None and self.failures > self.retries:
            raise err

    def _pause(self, d: float) -> float:
        """The pause before the next attempt, cut at the deadline: the wait
        ends at the timeout, never before it (check_time then raises)."""
        r = self.remaining()
        if r is not None:
            return max(min(d, r), 0.0)
        return d


class LostEvent(threading.Event):
    """``held.lost``: a threading.Event that the session sets the moment it
    sees the loss, and whose ``is_set()`` also reads the clock, so that a
    process that wakes past the deadline (a GC pause, SIGSTOP, a blocked
    event loop) is told at once, before any thread of the client has run.
    ``wait()`` is the plain Event's: it returns when the session has ended
    the claim, which after a pause can be late."""

    def __init__(self, check: Callable[[], object]) -> None:
        super().__init__()
        self._check = check  # reads the clock; may say True: lost, whether or not the event is set yet

    def is_set(self) -> bool:
        if super().is_set():
            return True
        return bool(self._check()) or super().is_set()


class SessionBase:
    """What both drivers of a claim share: the Claim (the protocol and the
    move, with no I/O), its clock, the callbacks, and what they do the same
    way with the Claim's actions: the log lines, the position callback, and
    the end.

    Every time given to the Claim is a reading of ``clock``, which counts a
    suspend of the machine. The drivers' waits (select, the event loop's
    timers) count the monotonic clock, which does not: after a suspend
    they end late, so the drivers read the clock whenever they wake and
    never take a wait's end for the deadline."""

    def __init__(self, core: Claim, on_waiting: Optional[Callable[[int], None]], log: Optional[logging.Logger],
                 clock: Clock) -> None:
        self.core = core
        self.clock = clock
        self.name = core.name
        self._on_waiting = on_waiting
        self._log = log or logging.getLogger("baton")
        self.lost = LostEvent(self._lost_now)
        self._on_loss: List[Callable[[], None]] = []
        self._on_end: List[Callable[[], None]] = []

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.core!r}>"

    def expire_if_late(self) -> None:
        raise NotImplementedError

    def _lost_now(self) -> bool:
        """Whether the lock is lost, by the clock too (for ``lost.is_set()``:
        the event itself is set once the loss is logged)."""
        self.expire_if_late()
        return self.core.cause is not None

    def monotonic_until(self, until: float) -> float:
        """``until``, a reading of the clock, as a ``time.monotonic()``
        time: the time left now, from now."""
        return time.monotonic() + (until - self.clock())

    @property
    def state(self) -> str:
        return self.core.state

    @property
    def token(self) -> int:
        return self.core.token

    @property
    def replied(self) -> bool:
        return self.core.replied

    @property
    def addr(self) -> str:
        """The address of the claim's connection (of the last one, once it
        has none)."""
        return self.core.addr

    @property
    def error(self) -> Optional[BaseException]:
        """Why the claim ended; None while it lives, and after a release."""
        return self.core.error

    @property
    def cause(self) -> Optional[BaseException]:
        """The loss's cause, once held and lost."""
        return self.core.cause

    def _take(self) -> Tuple[List[Action], List[Callable[[], None]]]:
        """The Claim's actions, and, if they end it, the callbacks to run.
        Called where the Claim is guarded."""
        acts = self.core.take()
        callbacks: List[Callable[[], None]] = []
        for a in acts:
            if isinstance(a, Ended):
                if a.lost:
                    callbacks += self._on_loss
                callbacks += self._on_end
                self._on_loss, self._on_end = [], []
        return acts, callbacks

    def _report(self, acts: List[Action], callbacks: List[Callable[[], None]]) -> None:
        """What the actions tell the user: the log lines, the place in the
        queue, the loss (logged, then ``lost`` set, then the callbacks run).
        Called with no lock held: a log handler's I/O or a callback must not
        hold up the claim."""
        for a in acts:
            if isinstance(a, Note):
                self._log.log(a.level, a.msg, *a.args)
            elif isinstance(a, Position):
                self._report_position(a.position)
            elif isinstance(a, Ended) and a.lost:
                # A claim that ended unseen, or whose credential another
                # connection used, says that a premise broke: error level.
                level = logging.ERROR if isinstance(self.cause, (Superseded, Moved)) else logging.WARNING
                self._log.log(level, "baton: lock %r lost: %s", self.name, self.cause)
                self.lost.set()
        for f in callbacks:
            try:
                f()
            except Exception:
                self._log.exception("baton: a callback of lock %r failed", self.name)

    @staticmethod
    def _granted(acts: List[Action]) -> bool:
        return any(isinstance(a, (Granted, Ended)) for a in acts)

    def _report_position(self, position: int) -> None:
        if self._on_waiting is None:
            return
        try:
            self._on_waiting(position)
        except Exception:
            self._log.exception("baton: the on_waiting callback of lock %r failed", self.name)
