"""A claim and its connections, with no I/O and no clock of its own (internal).

A claim is one ACQUIRE and what came of it: a place in a queue, then a
lock. Its connections (links) carry it: the claim's connection, on which
it heartbeats; in protocol version 3, while it moves, the resume attempts
that may take it over; and the connections it has left, kept open until
their server ends them (docs/protocol.md, section 14).

Both drivers, the thread of session.py and the asyncio protocol of aio.py,
feed a Claim what they read and when (a reading of the client's clock,
clock.py, which counts a suspend of the machine), and carry out what it
answers with: send, close, dial, log, report. So the rules of the protocol
and every decision of a move live here once, and both drivers move a claim
alike. The move itself is in move.py.
"""

from __future__ import annotations

import logging
import random
from typing import Callable, Dict, List, NamedTuple, Optional, Set, Tuple, Union

from . import wire
from .errors import (
    ConnectionBroken,
    Error,
    LockLost,
    MaxHoldReached,
    Moved,
    NotLeader,
    ServerError,
    Unconfirmed,
    error_for_code,
)

# The floor of the heartbeat interval: it only stops a slow link from
# driving the interval to zero (see the Go client's heartbeat.go).
MIN_HEARTBEAT_INTERVAL = 0.001

WAITING, HELD, ENDED = "waiting", "held", "ended"

# What a connection is to its claim.
CUR = "cur"  # the claim's connection: heartbeats go there, its replies confirm
ATTEMPT = "attempt"  # a resume attempt not answered yet
LEFT = "left"  # left for a higher-numbered one: nothing on it confirms; open until its server ends it
CLOSED = "closed"  # closed by the claim: what is read on it is of no interest


class Violation(Error):
    """The server sent a frame that no server may send."""


class Silent(Error):
    """A server that did not answer: a holder's heartbeat, for half of the
    time left to its deadline, or a waiter, up to its deadline. What began
    a move; never what ends a claim."""


# How long an address whose connection ended with no ERROR is not dialled
# again (docs/protocol.md, section 14, the client's moves).
QUIET_AFTER_END = 0.25


class Gone(ConnectionBroken):
    """The end of the claim's stream at a frame boundary, with no ERROR
    before it: the server's process or host went away. What began a move;
    never what ends a claim."""


class PlaceLost(ConnectionBroken):
    """A waiter's move that no server answered within a lease: its place is
    given up, and the acquire takes a new one."""


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


class Link:
    """One connection of a claim: the ACQUIRE's (number 0), or a resume
    attempt's (its attempt number, and when the resume was sent). ``buf``
    holds what was read of a frame not whole yet."""

    __slots__ = ("addr", "number", "sent_at", "role", "buf")

    def __init__(self, addr: str, number: int = 0, role: str = CUR) -> None:
        self.addr = addr
        self.number = number
        self.sent_at = 0.0
        self.role = role
        self.buf = bytearray()

    def __repr__(self) -> str:
        return f"Link({self.addr}, attempt {self.number}, {self.role})"


# What a Claim asks its driver to do, in order.


class Send(NamedTuple):
    """Write data on link, giving up at until (a reading of the clock)."""

    link: Link
    data: bytes
    until: float


class Close(NamedTuple):
    """Close link: with a reset (the release) or a FIN."""

    link: Link
    reset: bool


class Dial(NamedTuple):
    """Open a connection to addr for a resume attempt, and tell the claim
    (``Claim.dialed``). Never with data in the SYN, nor TLS early data: the
    network may deliver those twice."""

    addr: str


class Leave(NamedTuple):
    """link is left: it may stay open for long, so turn TCP keepalive on,
    that one whose server's host died still ends."""

    link: Link


class Note(NamedTuple):
    """A line for the client's logger."""

    level: int
    msg: str
    args: Tuple[object, ...]


class Granted(NamedTuple):
    """The lock is granted: start the work (the acquire returns)."""

    token: int


class Position(NamedTuple):
    """The place in the queue (1 is next), for on_waiting."""

    position: int


class Ended(NamedTuple):
    """The claim is over: ``Claim.error`` and ``Claim.cause`` say why."""

    lost: bool


Action = Union[Send, Close, Dial, Leave, Note, Granted, Position, Ended]


class Spec(NamedTuple):
    """The claim as a resume names it: what its ACQUIRE asked for (the
    server checks the lease, kind, limit and name against the credential;
    the owner text may change)."""

    name: str
    owner: str
    lease_ms: int
    shared: bool
    limit: int


class Mover:
    """What a claim needs of its Client to move: the addresses, and where to
    tell what it learnt (the address that took the claim; one that answered
    VERSION)."""

    def __init__(self, addrs: List[str], answered: Optional[Callable[[int], None]] = None,
                 no_v3: Optional[Callable[[str], None]] = None) -> None:
        self.addrs = list(addrs)
        self._answered = answered
        self._no_v3 = no_v3

    def index(self, addr: str) -> Optional[int]:
        """The position of addr (a NOT_LEADER hint) in the list, compared
        without case; None if it is not on it: a hint elsewhere is never
        followed."""
        want = addr.strip().lower()
        if not want:
            return None
        for i, a in enumerate(self.addrs):
            if a.strip().lower() == want:
                return i
        return None

    def next_index(self, addr: str) -> int:
        """The address after addr; for a standalone server, addr's own."""
        return ((self.index(addr) or 0) + 1) % len(self.addrs)

    def answered(self, addr: str) -> None:
        i = self.index(addr)
        if i is not None and self._answered is not None:
            self._answered(i)

    def no_v3(self, addr: str) -> None:
        if self._no_v3 is not None:
            self._no_v3(addr)


class ClaimBase:
    """One claim: its state, its links, and the rules; its move is
    Claim's, in move.py. Every method takes
    the time it is called at (a reading of the client's clock) and appends
    what the driver must do to ``out`` (``take()`` hands them over); none
    does I/O.

    ``deadline`` is the send time of the latest request the server answered
    plus 0.8 x lease: past it the server may already have given the lock to
    another, so from then on nothing may treat the lock as held, whether or
    not any thread has run since (``overdue``). With ``max_hold``, the claim
    also ends that many seconds after the grant.
    """

    def __init__(self, name: str, addr: str, lease_ms: int, *, v3: bool = False, spec: Optional[Spec] = None,
                 mover: Optional[Mover] = None, max_hold: Optional[float] = None, reset: bool = True,
                 rand: Callable[[], float] = random.random) -> None:
        self.name = name
        self.addr = addr  # the address of the claim's connection, or of the last one
        self.sched = Schedule(lease_ms / 1000.0)
        self.lease = self.sched.lease
        self.timeout = self.sched.timeout
        # v3: the claim's ACQUIRE was of version 3, so its server may give it
        # a credential and its frames are decoded as version 3's.
        self.v3 = v3
        self.spec = spec
        self.mover = mover or Mover([addr])
        self.max_hold = max_hold
        self.reset = reset  # a release (and max_hold) resets the connections, else a FIN
        self.rand = rand

        self.state = WAITING
        self.token = 0
        self.ticket = 0
        # The generation and credential of the newest frame that carried one
        # (generation 0: none, the claim cannot move).
        self.generation = 0
        self.credential: Optional[wire.Credential] = None
        self.position = 0
        self.replied = False  # a server answered at least once
        self.closing = False  # the client ends the claim: a release
        self.error: Optional[BaseException] = None  # why it ended; None after a release
        self.cause: Optional[BaseException] = None  # the loss's cause, once held and lost

        self.first = Link(addr)
        self.cur: Optional[Link] = self.first
        # The attempt number of the newest connection the claim was adopted
        # on (0: its ACQUIRE's), whether or not it is still open.
        self.cur_num = 0
        # A waiter moving after its deadline ignores the frames of the
        # connection it moves from: a push there came too late to believe.
        self.cur_stale = False
        self.links: List[Link] = [self.cur]

        self.pending = False  # a request is in flight on cur
        self.sent_at = 0.0  # the send of the request in flight on cur, or of the last one
        self.deadline = float("inf")
        self.next_beat: Optional[float] = None
        self.miss_at: Optional[float] = None  # when the outstanding heartbeat's reply is a quarter lease late
        self.silence_at: Optional[float] = None  # a holder's heartbeat unanswered too long: move
        self.hold_until: Optional[float] = None

        # The move (move.py).
        self.moving = False  # attempts are being made
        self.why: Optional[BaseException] = None  # what began the move
        self.moved_from = ""
        self.move_started = 0.0
        self.tries = 0  # attempts begun (dials)
        self.last = 0  # the last attempt number used
        self.target = 0  # the index of the next attempt's address
        self.quick = 0  # attempts in a row that ended at once
        self.redirects = 0  # NOT_LEADER hints followed in a row
        self.attempts: List[Link] = []  # open attempts, not answered yet
        self.left: List[Link] = []
        self.dialing: Set[str] = set()
        # Addresses not dialled again before the time given: their
        # connection ended with no ERROR (a server that went away).
        self.quiet: Dict[str, float] = {}
        self.next_at: Optional[float] = None  # the next attempt
        self.give_up_at: Optional[float] = None  # a waiter's move that no server answers

        self.out: List[Action] = []

    def __repr__(self) -> str:
        return (f"Claim({self.name!r}, {self.state}, token {self.token}, on {self.addr}, "
                f"{'resumable' if self.can_resume() else 'not resumable'})")

    def take(self) -> List[Action]:
        out, self.out = self.out, []
        return out

    def _note(self, level: int, msg: str, *args: object) -> None:
        self.out.append(Note(level, msg, args))

    # The clock.

    def can_resume(self) -> bool:
        """Whether the claim can be carried to a new connection: a claim of
        version 3 whose server gave it a credential, with the token or ticket
        the credential is for."""
        if not self.v3 or self.generation == 0 or self.state == ENDED:
            return False
        return self.token != 0 if self.state == HELD else self.ticket != 0

    def valid_until(self) -> float:
        """The time on the clock from which the lock must be taken as lost."""
        if self.hold_until is not None:
            return min(self.deadline, self.hold_until)
        return self.deadline

    def unconfirmed(self) -> Unconfirmed:
        s = self.sched
        return Unconfirmed(f"no confirmation from the server for {s.timeout:g}s (0.8 x lease {s.lease:g}s)")

    def overdue(self, now: float) -> Optional[BaseException]:
        """The error that ends a held lock by the clock alone at now: the
        maximum hold or the deadline, whichever came first; None before
        both. A move does not change this: the deadline stands until an
        answer to a resume confirms the claim again."""
        if self.state != HELD:
            return None
        if self.hold_until is not None and now >= self.hold_until and self.hold_until <= self.deadline:
            return MaxHoldReached(f"held for the maximum of {self.max_hold:g}s")
        if now >= self.deadline:
            return self.unconfirmed()
        return None

    def _waiter_past_deadline(self) -> bool:
        """A waiter that moves, or began to after its deadline: it believes
        nothing, so its deadline ends nothing; its move's own bound does."""
        return self.state == WAITING and self.can_resume() and (self.moving or self.cur_stale)

    def wake_at(self) -> float:
        """When the driver must call tick again."""
        times = [] if self._waiter_past_deadline() else [self.deadline]
        for t in (self.next_beat, self.miss_at, self.silence_at, self.next_at, self.give_up_at):
            if t is not None:
                times.append(t)
        if self.state == HELD and self.hold_until is not None:
            times.append(self.hold_until)
        return min(times) if times else float("inf")

    def wait(self, now: float) -> float:
        """How long the driver may wait before it calls tick: until wake_at,
        and never more than a quarter lease, so that a wait that a suspend of
        the machine made late (it counts the monotonic clock) is seen a
        quarter lease after the resume at most."""
        return min(max(self.wake_at() - now, 0.0), self.lease / 4)

    def start(self, acquire: bytes, now: float) -> None:
        """Sends the claim's ACQUIRE on its first connection."""
        self.sent_at, self.pending = now, True
        self.deadline = now + self.timeout
        self.out.append(Send(self.first, acquire, self.deadline))

    def tick(self, now: float) -> None:
        """What the clock says at now: the maximum hold, the deadline, the
        next heartbeat, a heartbeat unanswered for long, the move's timers."""
        if self.state == ENDED:
            return
        err = self.overdue(now)
        if err is not None:
            self.end(err)
            return
        if now >= self.deadline and not self._waiter_past_deadline():
            self._past_deadline(now)
            if self.state == ENDED:
                return
        if self.miss_at is not None and now >= self.miss_at:
            self.miss_at = None
            self._note(logging.WARNING,
                       "baton: lock %r: no reply from %s to the heartbeat sent %.0f ms ago; "
                       "the claim ends at 0.8 x lease (%.0f ms after that send) unless one comes",
                       self.name, self.addr, (now - self.sent_at) * 1000, self.timeout * 1000)
        if self.silence_at is not None and now >= self.silence_at:
            self.silence_at = None
            self.on_silence(now)
        if self.give_up_at is not None and now >= self.give_up_at:
            self.give_up_at = None
            self.on_give_up(now)
            if self.state == ENDED:
                return
        if self.next_at is not None and now >= self.next_at:
            self.next_at = None
            self.attempt_now(now)
        if self.next_beat is not None and now >= self.next_beat:
            self._beat(now)

    def _beat(self, now: float) -> None:
        cur = self.cur
        if cur is None or self.cur_stale or self.pending:
            self.next_beat = None  # nothing to send here; a reply or an adoption sets the next one
            return
        self.sent_at, self.pending, self.next_beat = now, True, None
        self.miss_at = now + self.lease / 4
        self.out.append(Send(cur, wire.HEARTBEAT, self.deadline))
        if self.state == HELD and self.can_resume() and self.replied:
            # Silence: the heartbeat sent at s has no answer at s + (D - s) x
            # (1/2 + r/8), D the deadline, r drawn for each heartbeat. A late
            # answer still confirms, so the move waits for half of the time
            # left, and the jitter spreads the clients of one silent server.
            self.silence_at = now + (self.deadline - now) * (0.5 + self.rand() / 8)

    def _past_deadline(self, now: float) -> None:
        """The clock past the deadline. A holder has lost the lock (overdue
        said so); a claim never answered ends; a waiter of version 3 with a
        ticket moves (its server may only be slow, and it believes nothing),
        keeping its connection."""
        if not self.replied and self.state != HELD:
            self.end(self.unconfirmed())
            return
        if self.state == WAITING and self.can_resume():
            if self.cur is not None:
                self.cur_stale = True
            if not self.moving:
                self.begin_move(Silent(f"no answer from {self.addr} for {(now - self.sent_at) * 1000:.0f} ms"),
                                self.mover.next_index(self.addr), now)
            return
        self.end(self.unconfirmed())

    # What a driver reads.

    def feed(self, link: Link, data: bytes, at: float) -> None:
        """Bytes read on link at ``at``."""
        if self.state == ENDED or link.role == CLOSED:
            return
        link.buf += data
        frames, split_err = wire.split(link.buf)
        for ftype, payload in frames:
            if self.state == ENDED or link.role == CLOSED:
                return
            try:
                f = wire.decode(ftype, payload, self.v3)
            except Error as e:
                self._violation(link, f"server {link.addr} sent a bad frame: {e}", at)
                return
            self._frame(link, f, at)
        if split_err is not None and self.state != ENDED and link.role != CLOSED:
            self._violation(link, f"server {link.addr} sent a bad frame: {split_err}", at)

    def eof(self, link: Link, at: float) -> None:
        """The end of link's stream: clean at a frame boundary (under TLS,
        with or without close_notify), or inside a frame."""
        if self.state == ENDED or link.role == CLOSED:
            return
        if link.buf:
            self.broken(link, ConnectionBroken(f"connection to {link.addr} ended inside a frame"), at, clean=False)
        else:
            self.broken(link, ConnectionBroken(f"connection to {link.addr} closed by the server"), at, clean=True)

    def quiet_after_end(self, addr: str, now: float) -> None:
        """addr's connection ended with no ERROR: it is not dialled again
        for QUIET_AFTER_END (a process that dies closes its connections a
        moment before its listening socket, and a connection made in that
        moment is queued, then reset unread: a reset of an attempt loses
        the claim)."""
        self.quiet[addr] = now + QUIET_AFTER_END

    def broken(self, link: Link, err: BaseException, at: float, clean: bool = False) -> None:
        """A read of link failed (a reset, a TLS error...) or its stream
        ended (``eof``)."""
        if self.state == ENDED or link.role == CLOSED:
            return
        if link.role == CUR:
            if self.cur_stale:
                self._drop(link)  # a waiter moving after its deadline: the move decides
                self.cur = None
                return
            if clean and self.can_resume():
                # The end of the stream with no ERROR: the server's process
                # or host went away. The next address first.
                self._drop(link)
                self.cur = None
                self.quiet_after_end(link.addr, at)
                self.begin_move(Gone(f"server {link.addr} closed the connection without an ERROR "
                                                 "(it went away)"), self.mover.next_index(link.addr), at)
                return
            # A reset, an end inside a frame, a read error: the claim may have
            # been released on the way (a middlebox's reset reaches both ends).
            self.end(err)
        elif link.role == ATTEMPT:
            self._attempt_broken(link, err, clean, at)
        elif link.role == LEFT:
            self._drop_left(link)

    def wrote_failed(self, link: Link, err: BaseException, now: float) -> None:
        """A write on link failed (a reset, a broken pipe, a timeout). For a
        claim that can move it decides nothing: the reader meets the ERROR,
        the end or the reset that explains it, and the deadline stands
        meanwhile. Otherwise the claim ends, as in version 2."""
        if self.state == ENDED or link.role == CLOSED:
            return
        if link.role != CUR or self.can_resume():
            self._note(logging.DEBUG, "baton: lock %r: write to %s failed (%s); waiting for the reader",
                       self.name, link.addr, err)
            return
        self.end(self.unconfirmed() if now >= self.deadline else ConnectionBroken(f"write to {link.addr}: {err}"))

    def _violation(self, link: Link, what: str, at: float) -> None:
        if link.role == CUR and self.cur_stale:
            self._drop(link)
            self.cur = None
            return
        if link.role == LEFT:
            self._drop_left(link)
            return
        if link.role == ATTEMPT:
            self._remove_attempt(link)
            self._refused(logging.ERROR, link, what)
        self.end(Violation(what))

    def _frame(self, link: Link, f: wire.Frame, at: float) -> None:
        if link.role == ATTEMPT:
            self._attempt_frame(link, f, at)
        elif link.role == LEFT:
            if f.type == wire.T_ERROR:
                self._drop_left(link)  # its server ended it: the claim is elsewhere
        elif link.role == CUR:
            self._cur_frame(link, f, at)

    def _cur_frame(self, link: Link, f: wire.Frame, at: float) -> None:
        """A frame of the claim's connection."""
        if f.type == wire.T_ERROR:
            self._cur_error(link, error_for_code(f.code, f.message), at)
            return
        if self.cur_stale:
            return
        # A frame that arrives after the deadline confirms nothing: the
        # server may already have moved the lock.
        if at >= self.deadline:
            if self.state == WAITING and self.can_resume():
                self._past_deadline(at)
                return
            self.end(self.overdue(at) or self.unconfirmed())
            return
        if f.type == wire.T_ACQUIRED and f.push:
            # Promotion. It does not move the deadline: the server's clock
            # still runs from our last frame it has seen.
            if self.state == HELD:
                self.end(Violation(f"server {link.addr} sent a promotion push while the lock was held"))
                return
            self._keep_credential(f)
            self._grant(f.token, at)
            return
        if not self.pending:
            self.end(Violation(f"server {link.addr} sent a reply with no request outstanding"))
            return
        first = not self.replied
        self.pending, self.replied, self.miss_at, self.silence_at = False, True, None, None
        self.sched.observe(at - self.sent_at)
        self.deadline = self.sent_at + self.timeout
        self.next_beat = at + self.sched.interval()
        if self.moving and self.state == HELD:
            # A late answer after silence: the server was only slow. Make no
            # more attempts; those open stay open, and one answered later is
            # adopted all the same.
            self.stop_move("the server answered again")
        if f.type == wire.T_WAITING:
            if self.state == HELD:
                self.end(Violation(f"server {link.addr} sent WAITING (position {f.position}) after the grant"))
                return
            if f.credential is not None:
                if not first and f.ticket != self.ticket:
                    self.end(Violation(f"server {link.addr} sent WAITING with ticket {f.ticket} "
                                       f"while the claim waits with ticket {self.ticket}"))
                    return
                self.ticket = f.ticket
            if f.credential is not None or first:
                self._keep_credential(f)
            self.position = f.position
            self.out.append(Position(f.position))
        elif self.state != HELD:
            if f.credential is not None or first:
                self._keep_credential(f)
            self._grant(f.token, at)
        elif f.token != self.token:
            self.end(Violation(f"server {link.addr} sent ACQUIRED with token {f.token} "
                               f"while the lock is held with token {self.token}"))
        elif f.credential is not None:
            self._keep_credential(f)  # the first reply after a new generation: a fresh credential

    def _cur_error(self, link: Link, err: ServerError, at: float) -> None:
        """An ERROR on the claim's connection: the server ended it."""
        if self.cur_stale:
            self._drop(link)  # a waiter moving after its deadline: the move decides
            self.cur = None
            return
        if self.can_resume() and isinstance(err, Moved):
            if self.attempt_open_to(link.addr):
                # The move is ours: the server took the claim over on our own
                # attempt there, whose answer is on its way. Nothing more
                # confirms here.
                self._note(logging.DEBUG, "baton: lock %r: %s moved the claim to this client's own attempt",
                           self.name, link.addr)
                self._drop(link)
                self.cur = None
                return
            self.end(Moved(f"server {link.addr} moved the claim to a connection that is not this client's: "
                           "its credential was used elsewhere"))
            return
        if self.can_resume() and err.server_condition:
            # SHUTDOWN, NOT_LEADER, OVERLOADED, or a server condition not yet
            # named: its server ended the connection on purpose. NOT_LEADER:
            # to the leader it names if on the list, else the next address
            # (this one does not lead); the others: the same address first.
            self._drop(link)
            self.cur = None
            first = self.mover.index(link.addr) or 0
            if isinstance(err, NotLeader):
                hint = self.mover.index(err.message)
                first = hint if hint is not None else self.mover.next_index(link.addr)
            self.begin_move(err, first, at)
            return
        self.end(err)

    def _keep_credential(self, f: wire.Frame) -> None:
        """Keeps the generation and credential of a frame that carries one;
        a grant or first answer without one leaves the claim without (it
        cannot move: its end is that of version 2)."""
        if not self.v3:
            return
        if f.credential is None:
            self.generation, self.credential = 0, None
            return
        self.generation, self.credential = f.generation, f.credential

    def _grant(self, token: int, at: float) -> None:
        self.state, self.token = HELD, token
        if self.max_hold is not None:
            self.hold_until = at + self.max_hold
        self.out.append(Granted(token))

    # Connections.

    def _drop(self, link: Link, reset: bool = False) -> None:
        """Closes link: its server ended it, or the claim no longer needs it."""
        if link.role == CLOSED:
            return
        link.role = CLOSED
        if link in self.links:
            self.links.remove(link)
        self.out.append(Close(link, reset))

    def _drop_left(self, link: Link) -> None:
        if link in self.left:
            self.left.remove(link)
        self._drop(link)

    def _leave(self, link: Link) -> None:
        """link is a connection the claim has left: nothing on it confirms,
        and it stays open until its server ends it or the claim ends."""
        link.role = LEFT
        self.left.append(link)
        self.out.append(Leave(link))

    # The end.

    def release(self) -> None:
        """The client ends the claim: every connection is closed at once,
        which is the release (or gives the place in the queue up). A server
        that took the claim over sees the close; one that has not answered a
        resume yet finds its connection closed and takes nothing."""
        if self.state == ENDED:
            return
        self.closing = True
        self.end(ConnectionBroken("released"))

    def end(self, err: BaseException) -> None:
        """Ends the claim with err: every connection of it is closed (with a
        reset for a release or the maximum hold, the client's own choices;
        else with a FIN, retransmitted until acknowledged where a reset is
        sent once into a link that may be failing)."""
        if self.state == ENDED:
            return
        held = self.state == HELD
        self.state = ENDED
        if self.closing:
            self.error, self.cause = None, None
        elif held:
            self.error, self.cause = LockLost(self.name, err), err
        else:
            self.error = err
        reset = self.reset and (self.closing or isinstance(err, MaxHoldReached))
        for link in list(self.links):
            self._drop(link, reset)
        self.cur = None
        self.attempts, self.left = [], []
        self.moving = False
        self.next_at = self.give_up_at = self.silence_at = self.next_beat = self.miss_at = None
        self.out.append(Ended(self.cause is not None))

    # The move (move.py's Claim).

    def begin_move(self, why: BaseException, first: int, now: float) -> None:
        raise NotImplementedError

    def stop_move(self, why: str) -> None:
        raise NotImplementedError

    def on_silence(self, now: float) -> None:
        raise NotImplementedError

    def on_give_up(self, now: float) -> None:
        raise NotImplementedError

    def attempt_now(self, now: float) -> None:
        raise NotImplementedError

    def attempt_open_to(self, addr: str) -> bool:
        raise NotImplementedError

    def dialed(self, addr: str, ok: bool, now: float, err: Optional[BaseException] = None) -> Optional[Link]:
        raise NotImplementedError

    def _attempt_frame(self, link: Link, f: wire.Frame, at: float) -> None:
        raise NotImplementedError

    def _attempt_broken(self, link: Link, err: BaseException, clean: bool, at: float) -> None:
        raise NotImplementedError

    def _remove_attempt(self, link: Link) -> None:
        raise NotImplementedError

    def _refused(self, level: int, link: Link, err: object) -> None:
        raise NotImplementedError
