package baton

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// runState is what run alone reads and writes: the claim's connection and
// its schedule, the deadline, the credential, and the move (move.go).
type runState struct {
	sched   schedule
	timeout time.Duration // 0.8 × lease

	// cur is the claim's connection: heartbeats go there, and its replies
	// confirm the claim. nil while the claim has none (its server ended it
	// and no resume has been answered yet).
	cur *link
	// curNum is the attempt number of the newest connection the claim was
	// adopted on (0: its ACQUIRE's), whether or not it is still open.
	curNum uint16
	// curStale: a waiter moving after its deadline ignores the frames of
	// the connection it moves from (a push there came too late to believe).
	curStale bool
	pending  bool      // a request is in flight on cur
	sentAt   time.Time // the write of the request in flight on cur, or of the last one
	// deadlineAt is the claim's deadline: 0.8 × lease after the send of
	// the newest frame whose answer arrived (published in deadline).
	deadlineAt time.Time
	missed     bool // the pending request's miss was reported

	// Version 3: the waiter's ticket, and the generation and credential of
	// the newest frame that carried one (generation 0: none, the claim is
	// not resumable).
	ticket     uint64
	generation uint32
	credential wire.Credential

	move moveState

	tDeadline *time.Timer // the deadline
	tAnswer   *time.Timer // the wait for the ACQUIRE's answer (answerBound)
	tHold     *time.Timer // the maximum hold, armed at the grant
	// tBeat times the next heartbeat after a reply; while a request is
	// pending, a look at the clock every lease/4 (the first reports the
	// miss, with a logger), so that run sees a suspend past the deadline a
	// quarter lease after the resume at most.
	tBeat    *time.Timer
	tSilence *time.Timer // a holder's heartbeat unanswered too long: move
	tNext    *time.Timer // the next resume attempt
	tGiveUp  *time.Timer // a waiter's move that no server answers
}

// canResume reports whether the claim can be carried to a new connection:
// a claim of version 3 whose server gave it a credential, with the token
// or ticket the credential is for.
func (s *claim) canResume() bool {
	if !s.v3 || s.generation == 0 {
		return false
	}
	if s.held {
		return s.token != 0
	}
	return s.ticket != 0
}

func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// run is the claim's clock: it writes ACQUIRE, then one heartbeat an
// interval after each reply, so at most one request is ever in flight on
// the claim's connection and a reply always belongs to the one request
// outstanding; and it moves the claim when its connection ends (move.go).
//
// The deadline runs from the write of the last request the server answered,
// not from the answer: the server's lastSeenAt is no earlier than that write,
// so the server cannot end the claim before sentAt + lease, and the client
// gives up at sentAt + 0.8 × lease.
func (s *claim) run(acquire []byte) {
	defer s.finish()
	s.timeout = s.sched.timeout()
	s.cur = s.first
	s.tDeadline = time.NewTimer(s.timeout)
	s.tAnswer = time.NewTimer(answerBound(s.timeout))
	s.tHold, s.tBeat, s.tSilence, s.tNext, s.tGiveUp = stoppedTimer(), stoppedTimer(), stoppedTimer(), stoppedTimer(), stoppedTimer()
	defer func() {
		for _, t := range []*time.Timer{s.tDeadline, s.tAnswer, s.tHold, s.tBeat, s.tSilence, s.tNext, s.tGiveUp} {
			t.Stop()
		}
	}()

	s.sentAt = s.now()
	s.setDeadline(s.sentAt.Add(s.timeout))
	s.pending = true
	if err := s.write(s.cur, acquire, s.deadlineAt); err != nil {
		s.end(s.writeFailed(s.cur, err))
		return
	}
	s.sent()
	for {
		var ended bool
		select {
		case <-s.closing:
			ended = s.end(ErrReleased)
		case <-s.lapsed:
			ended = true // a question about the lock found it past its time
		case <-s.tDeadline.C:
			ended = s.onDeadline()
		case <-s.tAnswer.C:
			if s.unanswered() {
				ended = s.end(s.noAnswer(s.sentAt))
			}
		case <-s.tHold.C:
			ended = s.end(s.maxHoldReached())
		case <-s.tBeat.C:
			ended = s.onBeat()
		case <-s.tSilence.C:
			ended = s.onSilence()
		case <-s.tNext.C:
			ended = s.attemptNow()
		case <-s.tGiveUp.C:
			ended = s.onGiveUp()
		case r := <-s.dialed:
			ended = s.onDialed(r)
		case ev := <-s.events:
			ended = s.onEvent(ev)
		}
		if ended {
			return
		}
	}
}

// setDeadline moves the claim's deadline to t and publishes it.
func (s *claim) setDeadline(t time.Time) {
	s.deadlineAt = t
	s.deadline.Store(int64(t.Sub(s.base)))
	s.tDeadline.Reset(t.Sub(s.now()))
}

// sent starts the schedule's wait after a request was written on cur.
func (s *claim) sent() {
	s.missed = false
	s.tBeat.Reset(s.sched.base())
	s.tSilence.Stop()
	if s.held && s.canResume() && s.replied {
		// Silence: the heartbeat sent at s has no answer at s + (D - s) ×
		// (1/2 + r/8), D the deadline, r drawn for each heartbeat. A late
		// answer still confirms, so the move waits for half of the time
		// left, and the jitter spreads the clients of one silent server.
		left := s.deadlineAt.Sub(s.sentAt)
		at := s.sentAt.Add(time.Duration(float64(left) * (0.5 + rand.Float64()/8)))
		s.tSilence.Reset(at.Sub(s.now()))
	}
}

// writeFailed is the end of a claim whose write on l failed with err.
func (s *claim) writeFailed(l *link, err error) error {
	select {
	case <-s.closing:
		return ErrReleased
	default:
	}
	if !s.now().Before(s.deadlineAt) {
		return s.unconfirmed()
	}
	return brokenConn(l.addr, err)
}

// onDeadline is the deadline's timer.
func (s *claim) onDeadline() bool {
	if now := s.now(); now.Before(s.deadlineAt) {
		// Moved on since the timer was armed (it is reset with the
		// deadline, so only a race gets here).
		s.tDeadline.Reset(s.deadlineAt.Sub(now))
		return false
	}
	return s.pastDeadline()
}

// pastDeadline is run's answer to the clock past the deadline. A holder
// has lost the lock; a waiter of version 3 with a ticket moves (its server
// may only be slow, and it believes nothing), keeping its connection.
func (s *claim) pastDeadline() bool {
	if s.unanswered() {
		return s.end(s.noAnswer(s.sentAt))
	}
	if !s.held && s.canResume() {
		if s.cur != nil {
			s.curStale = true
		}
		if !s.move.active {
			return s.beginMove(&silentError{addr: s.addr, waited: s.now().Sub(s.sentAt)}, s.nextIndex(s.addr))
		}
		return false
	}
	return s.end(s.unconfirmed())
}

// onBeat is the heartbeat timer: send the next heartbeat, or look at the
// clock while one is pending.
func (s *claim) onBeat() bool {
	// The timer counts the monotonic clock: after a suspend it fires
	// late, past the deadline that the clock says.
	now := s.now()
	if err := s.overdue(now.Sub(s.base)); err != nil {
		if errors.Is(err, ErrMaxHoldReached) {
			return s.end(err)
		}
		if !s.held && s.canResume() && s.move.active {
			s.tBeat.Reset(s.sched.base()) // a moving waiter has no deadline
			return false
		}
		return s.pastDeadline()
	}
	if s.cur == nil || s.curStale {
		s.tBeat.Reset(s.sched.base()) // nothing to send: keep looking at the clock
		return false
	}
	if s.pending {
		if !s.missed && s.log != nil {
			s.logMiss(now.Sub(s.sentAt), s.deadlineAt.Sub(now))
		}
		s.missed = true
		s.tBeat.Reset(s.sched.base())
		return false
	}
	s.sentAt, s.pending = now, true
	if err := s.write(s.cur, s.beat, s.deadlineAt); err != nil {
		err = s.writeFailed(s.cur, err)
		if s.canResume() && !errors.Is(err, ErrReleased) && !errors.Is(err, ErrUnconfirmed) {
			// Version 3: a failed write decides nothing. The reader meets
			// the ERROR, the end or the reset that explains it, and the
			// deadline stands meanwhile.
			logAt(s.log, levelDebug, "baton: heartbeat write failed; waiting for the reader",
				attrLock(s.name), attrAddr(s.cur.addr), attrErr(err))
		} else {
			return s.end(err)
		}
	}
	s.sent()
	return false
}

// onEvent handles one frame, or the end of one connection.
func (s *claim) onEvent(ev event) bool {
	switch ev.link.role {
	case roleCur:
		return s.onCurEvent(ev)
	case roleAttempt:
		return s.onAttemptEvent(ev)
	case roleLeft:
		if ev.kind >= evError {
			s.dropLeft(ev.link) // its server ended it: the claim is elsewhere
		}
	}
	return false // roleClosed: run closed it; its last read is of no interest
}

// onCurEvent handles a frame, or the end, of the claim's connection.
func (s *claim) onCurEvent(ev event) bool {
	l := ev.link
	if ev.kind >= evError {
		select {
		case <-s.closing:
			return s.end(ErrReleased)
		default:
		}
		if s.curStale {
			// A waiter moving after its deadline: whatever ended this
			// connection, its place is decided by the move.
			s.dropLink(l, true)
			s.cur = nil
			return false
		}
	}
	switch ev.kind {
	case evBroken:
		if cleanEnd(ev.err) && s.canResume() {
			// The end of the stream with no ERROR: the server's process or
			// host went away. The next address first; this one once it has
			// been quiet for goneQuiet (a standalone server's restart).
			s.dropLink(l, true)
			s.cur = nil
			s.wentAway(l.addr)
			return s.beginMove(&serverGoneError{addr: l.addr}, s.nextIndex(l.addr))
		}
		// A reset, an end inside a frame, a read error: the claim may have
		// been released on the way (a middlebox's reset reaches both ends).
		return s.end(brokenConn(l.addr, ev.err))
	case evError:
		var we *wire.Error
		if errors.As(ev.err, &we) && s.canResume() {
			switch {
			case we.Code == wire.CodeMoved:
				if s.attemptOpenTo(l.addr) {
					// The move is ours: the server took the claim over on
					// our own attempt there, whose answer is on its way.
					// Nothing more confirms here.
					logAt(s.log, levelDebug, "baton: the server moved the claim to this client's own attempt",
						attrLock(s.name), attrAddr(l.addr))
					s.dropLink(l, true)
					s.cur = nil
					return false
				}
				return s.end(&takenError{addr: l.addr, err: we})
			case we.Code.Class() == wire.ClassServer:
				// SHUTDOWN, NOT_LEADER, OVERLOADED, or a server condition
				// not yet named: its server ended the connection on purpose.
				s.dropLink(l, true)
				s.cur = nil
				// NOT_LEADER: to the leader it names if on the list, else
				// on to the next address (this one does not lead); the
				// others: the same address first.
				first := s.indexOf(l.addr)
				if i, ok := s.hintIndex(we); ok {
					first = i
				} else if we.Code == wire.CodeNotLeader {
					first = s.nextIndex(l.addr)
				}
				return s.beginMove(we, first)
			}
		}
		return s.end(ev.err)
	case evViolation:
		return s.end(ev.err)
	}
	if s.curStale {
		return false
	}
	// A frame that arrives after the deadline confirms nothing: the server
	// may already have moved the lock.
	if !ev.at.Before(s.deadlineAt) {
		if !s.held && s.canResume() {
			return s.pastDeadline()
		}
		return s.end(s.unconfirmed())
	}
	if ev.kind == evPush {
		// Promotion. It does not move the deadline: the server's clock
		// still runs from our last frame it has seen.
		if s.held {
			return s.end(&violationError{addr: l.addr, what: "promotion push while holding the lock"})
		}
		s.keepCredential(ev.withCred, ev.generation, ev.credential)
		s.grant(ev.token, ev.at)
		return false
	}
	// A reply: WAITING or ACQUIRED PUSH=0.
	if !s.pending {
		return s.end(&violationError{addr: l.addr, what: fmt.Sprintf("reply with no request outstanding (token %d, position %d)", ev.token, ev.position)})
	}
	first := !s.replied
	s.pending = false
	s.replied = true
	s.sched.observe(ev.at.Sub(s.sentAt))
	s.setDeadline(s.sentAt.Add(s.timeout))
	s.tSilence.Stop()
	s.tBeat.Reset(ev.at.Add(s.sched.interval()).Sub(s.now()))
	if s.move.active && s.held {
		// A late answer after silence: the server was only slow. Make no
		// more attempts; those open stay open, and one answered later is
		// adopted all the same.
		s.stopMove("the server answered again")
	}
	switch {
	case ev.kind == evWaiting && s.held:
		return s.end(&violationError{addr: l.addr, what: fmt.Sprintf("WAITING (position %d) after granting the lock", ev.position)})
	case ev.kind == evWaiting:
		if ev.withCred {
			if !first && ev.ticket != s.ticket {
				return s.end(&violationError{addr: l.addr, what: fmt.Sprintf("WAITING with ticket %d while waiting with ticket %d", ev.ticket, s.ticket)})
			}
			s.ticket = ev.ticket
		}
		if ev.withCred || first {
			s.keepCredential(ev.withCred, ev.generation, ev.credential)
		}
		s.position = ev.position
		if s.waiting != nil {
			s.waiting(int(ev.position))
		}
	case !s.held:
		if ev.withCred || first {
			s.keepCredential(ev.withCred, ev.generation, ev.credential)
		}
		s.grant(ev.token, ev.at)
	case ev.token != s.token:
		return s.end(&violationError{addr: l.addr, what: fmt.Sprintf("ACQUIRED with token %d while holding token %d", ev.token, s.token)})
	case ev.withCred:
		// The first reply after a new generation: a fresh credential.
		s.keepCredential(true, ev.generation, ev.credential)
	}
	return false
}

// keepCredential keeps the generation and credential of a frame that
// carries one; a grant or first answer without one leaves the claim
// without (it is not resumable: its end is that of version 2).
func (s *claim) keepCredential(with bool, generation uint32, cred wire.Credential) {
	if !s.v3 {
		return
	}
	if !with {
		s.generation, s.credential = 0, wire.Credential{}
		return
	}
	s.generation, s.credential = generation, cred
}
