"""One session's protocol, with no I/O and no clock of its own (internal).

Both drivers, the thread of session.py and the asyncio protocol of aio.py,
feed it the bytes they read and the time on the client's clock (clock.py:
it counts a suspend of the machine), and act on what it answers, so the
rules of docs/protocol.md live in one place. The acquire loop's choices after a
failed attempt (reconnect where, after how long) are here too, for the
same reason.
"""

from __future__ import annotations

import logging
import random
import ssl
import threading
import time
from typing import Callable, List, Optional, Sequence, Tuple

from . import wire
from .clock import Clock
from .errors import (
    ConnectionBroken,
    Error,
    LeaseExpired,
    LockLost,
    MaxHoldReached,
    NotLeader,
    ServerError,
    Shutdown,
    TLSError,
    Unconfirmed,
    error_for_code,
)

# The floor of the heartbeat interval: it only stops a slow link from
# driving the interval to zero (see the Go client's heartbeat.go).
MIN_HEARTBEAT_INTERVAL = 0.001

# Redirects (NOT_LEADER with a hint on the list) followed at once before the
# client backs off: enough to cross one leader change, never a hot loop.
REDIRECT_BUDGET = 3

WAITING, HELD, ENDED = "waiting", "held", "ended"


class Violation(Error):
    """The server sent a frame that no server may send."""


class Schedule:
    """The heartbeat schedule of docs/protocol.md:

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


class Core:
    """The state of one session: what was sent when, what the server said,
    and the deadlines that follow from them.

    ``deadline`` is the send time of the latest request the server answered
    plus 0.8 x lease: past it the server may already have given the lock to
    another, so from then on nothing may treat the lock as held, whether or
    not any thread has run since (``overdue``). With ``max_hold``, the claim
    also ends that many seconds after the grant.
    """

    def __init__(self, name: str, addr: str, lease: float, max_hold: Optional[float] = None) -> None:
        self.name = name
        self.addr = addr
        self.sched = Schedule(lease)
        self.max_hold = max_hold
        self.state = WAITING
        self.token = 0
        self.position = 0
        self.replied = False
        self.sent_at = 0.0
        self.deadline = float("inf")
        self.pending = False
        self.next_beat: Optional[float] = None
        self.miss_at: Optional[float] = None  # when the outstanding heartbeat's reply is overdue
        self.hold_until: Optional[float] = None
        self._buf = bytearray()

    def sent_acquire(self, now: float) -> None:
        self.sent_at, self.pending = now, True
        self.deadline = now + self.sched.timeout

    def sent_beat(self, now: float) -> None:
        self.sent_at, self.pending, self.next_beat = now, True, None
        self.miss_at = now + self.sched.lease / 4

    def valid_until(self) -> float:
        """The time on the clock from which the lock must be taken as lost."""
        if self.hold_until is not None:
            return min(self.deadline, self.hold_until)
        return self.deadline

    def wait(self, now: float) -> float:
        """How long the driver may wait before it looks at the clock again:
        until wake_at, and never more than a quarter lease, so that a wait
        that a suspend of the machine made late (it counts the monotonic
        clock) is seen a quarter lease after the resume at most."""
        return min(max(self.wake_at() - now, 0.0), self.sched.lease / 4)

    def wake_at(self) -> float:
        """When the driver must look at the clock again."""
        times = [self.deadline]
        for t in (self.next_beat, self.miss_at, self.hold_until):
            if t is not None:
                times.append(t)
        return min(times)

    def unconfirmed(self) -> Unconfirmed:
        s = self.sched
        return Unconfirmed(f"no confirmation from the server for {s.timeout:g}s (0.8 x lease {s.lease:g}s)")

    def overdue(self, now: float) -> Optional[BaseException]:
        """The error that ends the session by the clock alone, or None."""
        if now >= self.deadline:
            return self.unconfirmed()
        if self.state == HELD and self.hold_until is not None and now >= self.hold_until:
            return MaxHoldReached(f"held for the maximum of {self.max_hold:g}s")
        return None

    def beat_due(self, now: float) -> bool:
        return self.next_beat is not None and now >= self.next_beat

    def miss_due(self, now: float) -> Optional[float]:
        """Once per heartbeat whose reply is a quarter lease late: how long ago
        it was sent."""
        if self.miss_at is None or now < self.miss_at:
            return None
        self.miss_at = None
        return now - self.sent_at

    def receive(self, data: bytes, at: float) -> Tuple[List[Tuple[str, int]], Optional[BaseException]]:
        """Takes bytes read at ``at``: the events they carry (("granted",
        token), ("waiting", position)) and the error that ends the session,
        if one does."""
        events: List[Tuple[str, int]] = []
        self._buf += data
        frames, split_err = wire.split(self._buf)
        for ftype, payload in frames:
            try:
                f = wire.decode(ftype, payload)
            except Error as e:
                return events, Violation(f"server {self.addr} sent a bad frame: {e}")
            if f.type == wire.T_ERROR:
                return events, error_for_code(f.code, f.message)
            # A frame that arrives after the deadline confirms nothing: the
            # server may already have moved the lock.
            late = self.overdue(at)
            if late is not None:
                return events, late
            if f.type == wire.T_ACQUIRED and f.push:
                # Promotion; it does not move the deadline.
                if self.state == HELD:
                    return events, Violation("promotion push while holding the lock")
                self._grant(f.token, at)
                events.append(("granted", f.token))
                continue
            if not self.pending:
                return events, Violation("reply with no request outstanding")
            self.pending, self.replied, self.miss_at = False, True, None
            self.sched.observe(at - self.sent_at)
            self.deadline = self.sent_at + self.sched.timeout
            self.next_beat = at + self.sched.interval()
            if f.type == wire.T_WAITING:
                if self.state == HELD:
                    return events, Violation(f"WAITING (position {f.position}) after the lock was granted")
                self.position = f.position
                events.append(("waiting", f.position))
            elif self.state != HELD:
                self._grant(f.token, at)
                events.append(("granted", f.token))
            elif f.token != self.token:
                return events, Violation(f"ACQUIRED with token {f.token} while holding token {self.token}")
        if split_err is not None:
            return events, Violation(f"server {self.addr} sent a bad frame: {split_err}")
        return events, None

    def _grant(self, token: int, at: float) -> None:
        self.state, self.token = HELD, token
        if self.max_hold is not None:
            self.hold_until = at + self.max_hold

    def finish(self, err: BaseException, closing: bool) -> Tuple[Optional[BaseException], Optional[BaseException]]:
        """Ends the session: (the error to report, the loss's cause). A close
        the client asked for reports nothing; the end of a held lock is a
        LockLost."""
        held = self.state == HELD
        self.state = ENDED
        if closing:
            return None, None
        if held:
            return LockLost(self.name, err), err
        return err, None


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

    def __init__(self, check: Callable[[], None]) -> None:
        super().__init__()
        self._check = check

    def is_set(self) -> bool:
        if not super().is_set():
            self._check()
        return super().is_set()


class SessionBase:
    """What both drivers of a session share: the Core, its clock, why the
    session ended, the callbacks, and the log lines they write the same way.

    Every time given to the Core is a reading of ``clock``, which counts a
    suspend of the machine. The drivers' waits (select, socket timeouts,
    the event loop's timers) count the monotonic clock, which does not:
    after a suspend they end late, so the drivers read the clock whenever
    they wake and never take a wait's end for the deadline."""

    def __init__(self, name: str, addr: str, lease_ms: int, max_hold: Optional[float],
                 on_waiting: Optional[Callable[[int], None]], log: Optional[logging.Logger],
                 clock: Clock) -> None:
        self.core = Core(name, addr, lease_ms / 1000.0, max_hold)
        self.clock = clock
        self.name = name
        self.addr = addr
        self._on_waiting = on_waiting
        self._log = log or logging.getLogger("baton")
        self.error: Optional[BaseException] = None  # why it ended; None after release
        self.cause: Optional[BaseException] = None  # the loss's cause, once held and lost
        self.lost = LostEvent(self.expire_if_late)
        self._closing = False
        self._on_loss: List[Callable[[], None]] = []
        self._on_end: List[Callable[[], None]] = []

    def expire_if_late(self) -> None:
        raise NotImplementedError

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

    def _report_position(self, position: int) -> None:
        if self._on_waiting is None:
            return
        try:
            self._on_waiting(position)
        except Exception:
            self._log.exception("baton: the on_waiting callback of lock %r failed", self.name)

    def _log_miss(self, age: float) -> None:
        self._log.warning(
            "baton: lock %r: no reply from %s to the heartbeat sent %.0f ms ago; "
            "the claim ends at 0.8 x lease (%.0f ms after that send) unless one comes",
            self.name, self.addr, age * 1000, self.core.sched.timeout * 1000)

    def _log_loss(self) -> None:
        self._log.warning("baton: lock %r lost: %s", self.name, self.cause)

    def _run(self, callbacks: List[Callable[[], None]]) -> None:
        for f in callbacks:
            try:
                f()
            except Exception:
                self._log.exception("baton: a callback of lock %r failed", self.name)
