"""A claim's move (internal): carrying a claim of protocol version 3 to a new
connection when its server ended the claim's connection, or went silent
(docs/protocol.md, section 14, "The client"). In short:

- Only after an ERROR of a server condition (SHUTDOWN, NOT_LEADER,
  OVERLOADED...), the end of the stream at a frame boundary with no ERROR,
  or silence: a holder's heartbeat unanswered for half of the time left to
  its deadline (with jitter), a waiter's deadline. Never after a reset, an
  end inside a frame, or the client's own close.
- Each attempt is a new connection whose ACQUIRE resumes the claim with its
  token or ticket, its credential and a new, higher attempt number; a
  holder checks its deadline right before the send; an address whose
  connection ended with no ERROR is not dialled again for 250 ms (a dying
  process's listening socket may still queue a connection, then reset
  it). One open attempt per address; another address lease/8 later if
  none has been answered; a
  short jittered wait between attempts that end at once, NOT_LEADER's hint
  followed while the redirect budget lasts.
- The highest-numbered attempt answered before the deadline is adopted: it
  becomes the claim's connection, confirmed as of its send. Until then the
  claim's connection (if its server did not end it) still confirms. A
  connection is closed only when its server ended it or the claim is over,
  and then every one is.
- A holder's deadline stands throughout: past it, the lock is lost.
"""

from __future__ import annotations

import logging
from typing import Optional

from . import wire
from .claim import ATTEMPT, CUR, ENDED, HELD, WAITING, ClaimBase, Dial, Link, PlaceLost, Position, Schedule, Send, Silent, Violation
from .errors import BadCredential, Error, Moved, NotLeader, ServerError, Superseded, VersionError, error_for_code

__all__ = ["Claim"]

# The wait for the answer to a waiter's resume, which has no deadline of
# its own: a server answers an ACQUIRE as soon as it has read it.
ANSWER_TIMEOUT = 5.0

# Waits between attempts that end at once: 50 to 100 ms, doubling up to
# 200 to 400 ms (as after NOT_LEADER while waiting).
QUICK_BASE, QUICK_CAP = 0.05, 0.4


class Claim(ClaimBase):
    """A claim that moves (see the module's doc)."""

    def attempt_open_to(self, addr: str) -> bool:
        """Whether an attempt sent to addr is still open, not answered."""
        return any(a.addr == addr for a in self.attempts)

    def begin_move(self, why: BaseException, first: int, now: float) -> None:
        """Starts moving the claim, or, when it moves already, takes first
        as where the next attempt goes. why is what ended (or silenced) the
        claim's connection."""
        self.target = first
        if self.moving:
            self.attempt_now(now)
            return
        self.moving = True
        self.why, self.moved_from, self.move_started = why, self.addr, now
        self.tries = self.quick = self.redirects = 0
        if self.state == HELD:
            self._note(logging.INFO, "baton: lock %r (token %d): moving the claim from %s (%s); %.0f ms to its deadline",
                       self.name, self.token, self.addr, why, max(self.deadline - now, 0.0) * 1000)
            self.attempt_now(now)
            return
        # A waiter believes nothing: its place is kept wherever a server
        # counts it. It spreads its first attempt, so that the holders, which
        # race their deadlines, reach a busy server first, and it gives its
        # place up if no server takes it back within a lease.
        self._note(logging.INFO, "baton: lock %r: moving the waiter's place from %s (%s)", self.name, self.addr, why)
        self.give_up_at = now + self.lease
        self.next_at = now + self.rand() * self.lease / 8

    def stop_move(self, why: str) -> None:
        """Makes no more attempts: the claim's connection confirmed the claim
        again. The attempts open stay open."""
        self.moving = False
        self.next_at = self.give_up_at = None
        self._note(logging.INFO, "baton: lock %r: the claim stays on %s (%s); %d attempt(s) left open",
                   self.name, self.addr, why, len(self.attempts))

    def on_silence(self, now: float) -> None:
        """A holder's heartbeat unanswered for half of the time left to its
        deadline: it moves, keeping the claim's connection, whose late answer
        would still confirm."""
        if not self.pending or self.state != HELD or not self.can_resume() or self.moving or self.cur is None:
            return
        waited = now - self.sent_at
        self._note(logging.WARNING, "baton: lock %r: no answer from %s to the heartbeat sent %.0f ms ago; "
                   "moving the claim", self.name, self.addr, waited * 1000)
        self.begin_move(Silent(f"no answer from {self.addr} for {waited * 1000:.0f} ms"),
                        self.mover.next_index(self.addr), now)

    def on_give_up(self, now: float) -> None:
        """A waiter's move that no server answered within a lease: its place
        is given up, and the acquire takes a new one."""
        if not self.moving or self.state == HELD:
            return
        self.end(PlaceLost(f"no server took the waiter's place back within {self.lease:g}s; taking a new place"))

    def attempt_now(self, now: float) -> None:
        """Dials the next resume attempt: to the target address, or the next
        one that has no open attempt; none if every address has one (then
        their answers, or the deadline, decide)."""
        if not self.moving:
            return
        addrs = self.mover.addrs
        n = len(addrs)
        quiet_until: Optional[float] = None
        for k in range(n):
            i = (self.target + k) % n
            addr = addrs[i]
            if addr in self.dialing or self.attempt_open_to(addr):
                continue
            q = self.quiet.get(addr)
            if q is not None and now < q:
                quiet_until = q if quiet_until is None else min(quiet_until, q)
                continue
            self.target = (i + 1) % n
            self.dialing.add(addr)
            self.tries += 1
            self.out.append(Dial(addr))
            return
        # Every free address is quiet: the first to come out of it.
        if quiet_until is not None and (self.next_at is None or self.next_at > quiet_until):
            self.next_at = quiet_until

    def dialed(self, addr: str, ok: bool, now: float, err: Optional[BaseException] = None) -> Optional[Link]:
        """The end of a Dial: the link to send the resume on (the Send is in
        ``out``), or None: the driver closes the connection unused, nothing
        having been sent on it."""
        self.dialing.discard(addr)
        if self.state == ENDED:
            return None
        if not ok:
            self._note(logging.DEBUG, "baton: lock %r: resume attempt to %s could not connect: %s", self.name, addr, err)
            self._attempt_ended(addr, None, now)
            return None
        if not self.moving:
            return None  # the claim's connection confirmed again meanwhile
        if self.last >= wire.MAX_ATTEMPT:
            self.end(Error(f"the claim has used all {wire.MAX_ATTEMPT} resume attempts"))
            return None
        held = self.state == HELD
        # The deadline, right before the send: an attempt sent after it could
        # be answered as if the claim still held.
        if held and now >= self.deadline:
            self.end(self.unconfirmed())
            return None
        link = Link(addr, self.last + 1, ATTEMPT)
        frame = self._resume_frame(link.number)
        self.last = link.number
        link.sent_at = now
        self.attempts.append(link)
        self.links.append(link)
        self.out.append(Send(link, frame, self.deadline if held else now + ANSWER_TIMEOUT))
        self._note(logging.DEBUG, "baton: lock %r: resume attempt %d sent to %s", self.name, link.number, addr)
        # Another address if no attempt is answered within lease/8.
        self.next_at = now + self.lease / 8
        return link

    def _resume_frame(self, number: int) -> bytes:
        """The ACQUIRE that resumes the claim, attempt number ``number``."""
        spec = self.spec
        assert spec is not None and self.credential is not None
        held = self.state == HELD
        resume = wire.Resume(held, self.token if held else self.ticket, self.generation, number, self.credential)
        return wire.encode_acquire_v3(spec.name, spec.lease_ms, spec.owner, shared=spec.shared, limit=spec.limit,
                                      resume=resume)

    def _attempt_ended(self, addr: str, err: Optional[ServerError], now: float) -> None:
        """An attempt that ended at once, before any answer: a refused
        connection, an ERROR of a server condition, VERSION, MOVED, or the
        end of the stream. The next attempt goes to the leader a NOT_LEADER
        named, if on the list and within the redirect budget at once, else
        to the next address after a short jittered wait."""
        self.quick += 1
        if not self.moving:
            return
        hint = self.mover.index(err.message) if isinstance(err, NotLeader) else None
        if hint is not None and self.mover.addrs[hint] != addr:
            self.target = hint
            self.redirects += 1
            if self.redirects <= 2 * len(self.mover.addrs):
                self.next_at = now
                return
        else:
            self.target = self.mover.next_index(addr)
        # A holder's deadline ends the wait if it comes first.
        d = min(QUICK_BASE * (1 << min(self.quick, 8)), QUICK_CAP)
        self.next_at = now + d / 2 + self.rand() * d / 2

    def _remove_attempt(self, link: Link) -> None:
        if link in self.attempts:
            self.attempts.remove(link)

    def _refused(self, level: int, link: Link, err: object) -> None:
        """Logs an answer that ends the claim in a move."""
        self._note(level, "baton: lock %r: resume attempt %d to %s refused: %s", self.name, link.number, link.addr, err)

    def _attempt_broken(self, link: Link, err: BaseException, clean: bool, at: float) -> None:
        self._remove_attempt(link)
        if clean:
            # Ended before any answer: nothing happened there.
            self._drop(link)
            self.quiet_after_end(link.addr, at)
            self._attempt_ended(link.addr, None, at)
            return
        # A reset, or an end inside a frame: the server may have taken the
        # claim over on this connection and then released it.
        self._refused(logging.WARNING, link, err)
        self.end(err)

    def _attempt_frame(self, link: Link, f: wire.Frame, at: float) -> None:
        """The first frame of an open attempt: its answer."""
        self._remove_attempt(link)
        if f.type == wire.T_ERROR:
            err = error_for_code(f.code, f.message)
            if isinstance(err, VersionError):
                # A node of an older version cannot continue the claim.
                self.mover.no_v3(link.addr)
                self._refused(logging.WARNING, link, err)
                self._drop(link)
                self._attempt_ended(link.addr, err, at)
                return
            if err.server_condition or isinstance(err, Moved):
                # Not the leader, shutting down, overloaded; or a lower
                # attempt of ours that the claim has passed.
                self._note(logging.DEBUG, "baton: lock %r: resume attempt %d to %s ended: %s",
                           self.name, link.number, link.addr, err)
                self._drop(link)
                self._attempt_ended(link.addr, err, at)
                return
            self._refused(logging.ERROR if isinstance(err, (Superseded, BadCredential)) else logging.WARNING, link, err)
            self.end(err)
            return
        what = self._invalid_answer(f)
        if what:
            self._refused(logging.ERROR, link, what)
            self.end(Violation(f"server {link.addr} broke the protocol: {what}"))
            return
        # Counted only if it arrived before the deadline that applies: the
        # claim's for a holder; for a waiter that is granted, the attempt's
        # send plus 0.8 x lease (a waiter's place needs no deadline).
        if self.state == HELD and at >= self.deadline:
            self.end(self.unconfirmed())
            return
        if self.state == WAITING and f.type == wire.T_ACQUIRED and at >= link.sent_at + self.timeout:
            self.end(self.unconfirmed())
            return
        if link.number < self.cur_num:
            # Answered late, below the claim's connection: ignored. Its server
            # ends it when the claim moves up there.
            self._leave(link)
            return
        self._adopt(link, f, at)

    def _invalid_answer(self, f: wire.Frame) -> str:
        """What is wrong with f as the answer to this claim's resume ("" if
        nothing): the table "What an answer to a resume must be"."""
        held = self.state == HELD
        kind = "ACQUIRED" if f.type == wire.T_ACQUIRED else "WAITING"
        if f.type == wire.T_ACQUIRED and f.push:
            return "ACQUIRED with PUSH as the answer to a resume"
        if held and f.type != wire.T_ACQUIRED:
            return "WAITING as the answer to a holder's resume"
        if f.credential is None:
            return f"{kind} without a credential as the answer to a resume"
        if held and f.token != self.token:
            return "ACQUIRED with another token as the answer to a holder's resume"
        if f.type == wire.T_WAITING and f.ticket != self.ticket:
            return "WAITING with another ticket as the answer to a waiter's resume"
        return ""

    def _adopt(self, link: Link, f: wire.Frame, at: float) -> None:
        """Makes the answered attempt link the claim's connection: the claim
        is confirmed as of its send, with what its answer carries."""
        if self.cur is not None:
            self._leave(self.cur)
        link.role = CUR
        self.cur, self.cur_num, self.cur_stale = link, link.number, False
        self.addr = link.addr
        self.replied, self.pending = True, False
        self.sent_at = link.sent_at
        self.sched = Schedule(self.lease)
        self.sched.observe(at - link.sent_at)  # the attempt's round trip is the first sample
        self.deadline = link.sent_at + self.timeout
        self.silence_at = self.miss_at = None
        self.next_beat = at + self.sched.interval()
        self.generation, self.credential = f.generation, f.credential
        was_moving = self.moving
        self.moving = False
        self.next_at = self.give_up_at = None
        self.mover.answered(link.addr)
        if f.type == wire.T_WAITING:
            self.ticket, self.position = f.ticket, f.position
            self.out.append(Position(f.position))
        elif self.state != HELD:
            # A waiter granted while it moved (its push may have been lost):
            # it holds from now on, with the grant's token.
            self._grant(f.token, at)
        what = f"token {self.token}" if self.state == HELD else f"waiting, position {self.position}"
        self._note(logging.INFO, "baton: lock %r moved from %s to %s in %.0f ms (%s; %s; %d attempt(s), attempt %d%s)",
                   self.name, self.moved_from, link.addr, (at - self.move_started) * 1000, what, self.why,
                   self.tries, link.number, "" if was_moving else ", after the claim's connection answered again")
