package baton

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// A move carries a claim of protocol version 3 to a new connection when
// its server ended the claim's connection, or went silent
// (docs/protocol.md, section 14, "The client"). In short:
//
//   - Only after an ERROR of a server condition (SHUTDOWN, NOT_LEADER,
//     OVERLOADED...), the end of the stream at a frame boundary with no
//     ERROR, or silence: a holder's heartbeat unanswered for half of the
//     time left to its deadline (with jitter), a waiter's deadline. Never
//     after a reset, an end inside a frame, or the client's own close.
//   - Each attempt is a new connection (never Fast Open) whose ACQUIRE
//     resumes the claim with its token or ticket, its credential and a new,
//     higher attempt number; a holder checks its deadline right before the
//     send. One open attempt per address; another address lease/8 later if
//     none has been answered; a short jittered backoff between attempts
//     that end at once, NOT_LEADER's hint followed while the redirect
//     budget lasts.
//   - The highest-numbered attempt answered before the deadline is
//     adopted: it becomes the claim's connection, confirmed as of its send.
//     Until then the claim's connection (if its server did not end it)
//     still confirms. A connection is closed only when its server ended it
//     or the claim is over, and then every one is.
//   - A holder's deadline stands throughout: past it, the lock is lost.
type moveState struct {
	active   bool      // attempts are being made
	why      error     // what began it
	from     string    // the address the claim moved from
	started  time.Time // a reading of now
	tries    int       // attempts begun (dials)
	last     uint16    // the last attempt number used
	target   int       // the index of the address of the next attempt
	quick    int       // attempts in a row that ended at once
	redirect int       // NOT_LEADER hints followed in a row
	attempts []*link   // open attempts, not answered yet
	left     []*link   // connections the claim has left
	dialing  map[string]bool
	// gone holds, for each address whose connection ended with no ERROR
	// (its server's process or host went away), when (a reading of now):
	// see goneQuiet.
	gone map[string]time.Time
}

// goneQuiet is how long an address whose connection ended with no ERROR
// is not dialed again. A process that is killed closes its sockets one by
// one: a connection to its listener, made between the end of the claim's
// connection and the close of the listener, is accepted by the kernel and
// then reset unread, which an attempt cannot tell from a reset after its
// server took the claim (and which ends the claim). A server that went
// away takes longer than this to come back, and a cluster's next leader
// is elsewhere, so waiting costs no move a moment.
const goneQuiet = 250 * time.Millisecond

// mover is what a claim needs of its Client to move: the addresses, a
// dial without Fast Open, and the memory of which speak version 3.
type mover struct {
	addrs []string
	// index gives the position of an address (a NOT_LEADER hint) in addrs.
	index func(addr string) (int, bool)
	// dial opens a connection for a resume attempt: never in the data of a
	// TCP Fast Open SYN (nor, with TLS, in early data, which crypto/tls does
	// not send): the network may deliver such data twice.
	dial func(ctx context.Context, addr string) (conn, raw net.Conn, err error)
	// answered records that the server at addrs[i] took the claim: new
	// claims start there.
	answered func(i int)
	// noV3 records that addr answered VERSION: it does not speak version 3.
	noV3 func(addr string)
}

// errMovedTooOften: the claim used every attempt number.
var errMovedTooOften = errors.New("the claim has used all 65535 resume attempts")

// indexOf is the position of addr (an address of the list) in the list.
func (s *claim) indexOf(addr string) int {
	if i, ok := s.mv.index(addr); ok {
		return i
	}
	return 0
}

// nextIndex is the position of the address after addr in the list; for a
// standalone server, addr's own.
func (s *claim) nextIndex(addr string) int { return (s.indexOf(addr) + 1) % len(s.mv.addrs) }

// hintIndex is the position of the leader that a NOT_LEADER names, when
// it is on the list: a hint elsewhere is never followed.
func (s *claim) hintIndex(we *wire.Error) (int, bool) {
	if we == nil || we.Code != wire.CodeNotLeader {
		return 0, false
	}
	return s.mv.index(we.Msg)
}

// attemptOpenTo reports whether an attempt sent to addr is still open,
// not answered.
func (s *claim) attemptOpenTo(addr string) bool {
	for _, a := range s.move.attempts {
		if a.addr == addr {
			return true
		}
	}
	return false
}

// beginMove starts moving the claim, or, when it moves already, takes
// first as where the next attempt goes. why is what ended (or silenced)
// the claim's connection.
func (s *claim) beginMove(why error, first int) bool {
	m := &s.move
	m.target = first
	if m.active {
		return s.attemptNow()
	}
	m.active = true
	s.moved.Store(true)
	m.why, m.from, m.started = why, s.addr, s.now()
	s.movingWhy.Store(&why)
	m.tries, m.quick, m.redirect = 0, 0, 0
	if m.dialing == nil {
		m.dialing = make(map[string]bool)
	}
	attrs := []slog.Attr{attrLock(s.name), attrAddr(s.addr), attrErr(why), slog.Bool("held", s.held)}
	if s.held {
		attrs = append(attrs, slog.Duration("deadline_in", max(s.deadlineAt.Sub(m.started), 0)))
	}
	logAt(s.log, slog.LevelInfo, "baton: moving the claim", attrs...)
	if !s.held {
		// A waiter believes nothing: its place is kept wherever a server
		// counts it. It spreads its first attempt, so that the holders,
		// which race their deadlines, reach a busy server first, and it
		// gives its place up if no server takes it back within a lease.
		s.tGiveUp.Reset(s.lease)
		s.tNext.Reset(rand.N(s.lease/8 + 1))
		return false
	}
	return s.attemptNow()
}

// stopMove makes no more attempts: the claim's connection confirmed the
// claim again. The attempts open stay open.
func (s *claim) stopMove(why string) {
	m := &s.move
	m.active = false
	s.movingWhy.Store(nil)
	s.tNext.Stop()
	s.tGiveUp.Stop()
	logAt(s.log, slog.LevelInfo, "baton: the claim stays where it is",
		attrLock(s.name), attrAddr(s.addr), slog.String("why", why), slog.Int("attempts", m.tries))
}

// onSilence is a holder's heartbeat unanswered for half of the time left
// to its deadline: it moves, keeping the claim's connection, whose late
// answer would still confirm.
func (s *claim) onSilence() bool {
	if !s.pending || !s.held || !s.canResume() || s.move.active || s.cur == nil {
		return false
	}
	now := s.now()
	logAt(s.log, slog.LevelWarn, "baton: no answer from the server; moving the claim",
		attrLock(s.name), attrAddr(s.addr), slog.Duration("waited", now.Sub(s.sentAt)),
		slog.Duration("deadline_in", max(s.deadlineAt.Sub(now), 0)))
	return s.beginMove(&silentError{addr: s.addr, waited: now.Sub(s.sentAt)}, s.nextIndex(s.addr))
}

// onGiveUp is a waiter's move that no server answered within a lease: its
// place is given up, and Acquire takes a new one.
func (s *claim) onGiveUp() bool {
	if !s.move.active || s.held {
		return false
	}
	return s.end(&placeLostError{waited: s.now().Sub(s.move.started)})
}

// wentAway records that the connection to addr ended with no ERROR: its
// server went away (goneQuiet).
func (s *claim) wentAway(addr string) {
	if s.move.gone == nil {
		s.move.gone = make(map[string]time.Time)
	}
	s.move.gone[addr] = s.now()
}

// attemptNow dials the next resume attempt: to the target address, or the
// next one that has no open attempt; none if every address has one.
func (s *claim) attemptNow() bool {
	m := &s.move
	if !m.active {
		return false
	}
	n := len(s.mv.addrs)
	for k := range n {
		i := (m.target + k) % n
		addr := s.mv.addrs[i]
		if m.dialing[addr] || s.attemptOpenTo(addr) {
			continue
		}
		if at, ok := m.gone[addr]; ok && !dialGoneAtOnce() {
			if left := at.Add(goneQuiet).Sub(s.now()); left > 0 {
				m.target = i
				s.tNext.Reset(left) // this address, once it is quiet
				return false
			}
			delete(m.gone, addr)
		}
		m.target = (i + 1) % n
		m.dialing[addr] = true
		m.tries++
		s.workers.Add(1)
		go s.dialAttempt(addr)
		return false
	}
	return false // every address has an open attempt: wait for their answers
}

// dialAttempt connects to addr for a resume attempt and hands the
// connection to run, which sends the resume. A connection run no longer
// wants is closed unused: nothing was sent on it.
func (s *claim) dialAttempt(addr string) {
	defer s.workers.Done()
	conn, raw, err := s.mv.dial(s.dialCtx, addr)
	select {
	case s.dialed <- dialResult{addr: addr, conn: conn, raw: raw, err: err}:
	case <-s.quit:
		if err == nil {
			raw.Close()
		}
	}
}

// onDialed sends the resume on a connection just made, or counts a dial
// that failed as an attempt that ended at once.
func (s *claim) onDialed(r dialResult) bool {
	m := &s.move
	delete(m.dialing, r.addr)
	if r.err != nil {
		logAt(s.log, levelDebug, "baton: resume attempt could not connect",
			attrLock(s.name), attrAddr(r.addr), attrErr(r.err))
		s.attemptEnded(r.addr, nil)
		return false
	}
	if !m.active {
		r.raw.Close() // the claim's connection confirmed again meanwhile: unused
		return false
	}
	if m.last == math.MaxUint16 {
		r.raw.Close()
		return s.end(errMovedTooOften)
	}
	l := &link{conn: r.conn, raw: r.raw, addr: r.addr, number: m.last + 1, role: roleAttempt}
	frame := s.resumeFrame(l.number)
	// The deadline, right before the send: an attempt sent after it could
	// be answered as if the claim still held.
	now := s.now()
	if s.held && !now.Before(s.deadlineAt) {
		r.raw.Close()
		return s.end(s.unconfirmed())
	}
	if !s.addLink(l) {
		return false // a Release came first: it closed the connection
	}
	m.last = l.number
	l.sentAt = now
	m.attempts = append(m.attempts, l)
	s.startReader(l)
	until := s.deadlineAt
	if !s.held {
		until = now.Add(answerTimeout)
	}
	if err := s.write(l, frame, until); err != nil {
		// Nothing to decide here: the reader meets the end or the reset
		// that explains it.
		logAt(s.log, levelDebug, "baton: resume attempt write failed", attrLock(s.name), attrAddr(l.addr), attrErr(err))
	}
	logAt(s.log, levelDebug, "baton: resume attempt sent", attrLock(s.name), attrAddr(l.addr),
		slog.Int("attempt", int(l.number)))
	// Another address if no attempt is answered within lease/8.
	s.tNext.Reset(s.lease / 8)
	return false
}

// resumeFrame is the ACQUIRE that resumes the claim, attempt number n.
func (s *claim) resumeFrame(n uint16) []byte {
	a := s.resumeAs
	a.Flags |= wire.FlagResume
	id := s.ticket
	if s.held {
		a.Flags |= wire.FlagHeld
		id = s.token
	}
	a.Resume = wire.Resume{ID: id, Generation: s.generation, Attempt: n, Credential: s.credential}
	b, err := wire.AppendAcquire(nil, a)
	if err != nil {
		// The claim's fields were checked by its first ACQUIRE, and the
		// resume block is never zero here.
		panic("baton: resume frame: " + err.Error())
	}
	return b
}

// attemptEnded is an attempt that ended at once, before any answer: a
// refused connection, an ERROR of a server condition, VERSION, MOVED, or
// the end of the stream. The next attempt goes to the leader a NOT_LEADER
// named, if on the list and within the redirect budget at once, else to
// the next address after a short jittered wait.
func (s *claim) attemptEnded(addr string, we *wire.Error) {
	m := &s.move
	m.quick++
	if !m.active {
		return
	}
	if i, ok := s.hintIndex(we); ok && s.mv.addrs[i] != addr {
		m.target = i
		m.redirect++
		if m.redirect <= 2*len(s.mv.addrs) {
			s.tNext.Reset(0)
			return
		}
	} else {
		m.target = s.nextIndex(addr)
	}
	// As after NOT_LEADER while waiting: 50 to 100 ms, doubling up to 200
	// to 400 ms. A holder's deadline ends the wait if it comes first.
	s.tNext.Reset(jitter(min(backoffBase<<min(m.quick, 8), electionBackoffCap)))
}

// removeAttempt takes l off the open attempts.
func (s *claim) removeAttempt(l *link) {
	m := &s.move
	for i, a := range m.attempts {
		if a == l {
			m.attempts = append(m.attempts[:i], m.attempts[i+1:]...)
			return
		}
	}
}

// onAttemptEvent handles the first frame, or the end, of an open attempt.
func (s *claim) onAttemptEvent(ev event) bool {
	l := ev.link
	s.removeAttempt(l)
	switch ev.kind {
	case evBroken:
		if cleanEnd(ev.err) {
			// Ended before any answer: nothing happened there.
			s.wentAway(l.addr)
			s.dropLink(l, true)
			s.attemptEnded(l.addr, nil)
			return false
		}
		// A reset, or an end inside a frame: the server may have taken the
		// claim over on this connection and then released it.
		s.logRefusal(slog.LevelWarn, l, ev.err)
		return s.end(brokenConn(l.addr, ev.err))
	case evError:
		var we *wire.Error
		if errors.As(ev.err, &we) {
			switch {
			case we.Code == wire.CodeVersion:
				// A node of an older version cannot continue the claim.
				s.mv.noV3(l.addr)
				s.logRefusal(slog.LevelWarn, l, we)
				s.dropLink(l, true)
				s.attemptEnded(l.addr, we)
				return false
			case we.Code.Class() == wire.ClassServer, we.Code == wire.CodeMoved:
				// Not the leader, shutting down, overloaded; or a lower
				// attempt of ours that the claim has passed.
				logAt(s.log, levelDebug, "baton: resume attempt ended", attrLock(s.name), attrAddr(l.addr),
					slog.Int("attempt", int(l.number)), attrErr(we))
				s.dropLink(l, true)
				s.attemptEnded(l.addr, we)
				return false
			}
		}
		s.logRefusal(refusalLevel(ev.err), l, ev.err)
		return s.end(ev.err)
	case evViolation:
		s.logRefusal(slog.LevelError, l, ev.err)
		return s.end(ev.err)
	}
	if err := s.checkResumeAnswer(ev); err != nil {
		s.logRefusal(slog.LevelError, l, err)
		return s.end(err)
	}
	// Counted only if it arrived before the deadline that applies: the
	// claim's for a holder; for a waiter that is granted, the attempt's
	// send plus 0.8 × lease (a waiter's place needs no deadline).
	if s.held && !ev.at.Before(s.deadlineAt) && !adoptAfterDeadline() {
		return s.end(s.unconfirmed())
	}
	if !s.held && ev.kind == evAcquired && !ev.at.Before(l.sentAt.Add(s.timeout)) {
		return s.end(s.unconfirmed())
	}
	if l.number < s.curNum && !adoptLowerAttempt() {
		// Answered late, below the claim's connection: ignored. Its server
		// ends it when the claim moves up there.
		s.leave(l)
		return false
	}
	s.adopt(l, ev)
	return false
}

// checkResumeAnswer checks the first frame of a resume attempt (the table
// "What an answer to a resume must be").
func (s *claim) checkResumeAnswer(ev event) error {
	what := ""
	switch {
	case ev.kind == evPush:
		what = "ACQUIRED with PUSH as the answer to a resume"
	case s.held && ev.kind != evAcquired:
		what = "WAITING as the answer to a holder's resume"
	case !ev.withCred:
		what = ev.kindName() + " without a credential as the answer to a resume"
	case s.held && ev.token != s.token:
		what = "ACQUIRED with another token as the answer to a holder's resume"
	case ev.kind == evWaiting && ev.ticket != s.ticket:
		what = "WAITING with another ticket as the answer to a waiter's resume"
	default:
		return nil
	}
	return &violationError{addr: ev.link.addr, what: what}
}

func (ev event) kindName() string {
	if ev.kind == evWaiting {
		return "WAITING"
	}
	return "ACQUIRED"
}

// adopt makes the answered attempt l the claim's connection: the claim is
// confirmed as of its send, with what its answer carries.
func (s *claim) adopt(l *link, ev event) {
	m := &s.move
	if s.cur != nil {
		s.leave(s.cur)
	}
	from := m.from
	l.role = roleCur
	s.cur, s.curNum, s.curStale = l, l.number, false
	s.addr = l.addr
	s.replied = true
	s.pending = false
	s.sentAt = l.sentAt
	s.sched = schedule{lease: s.lease}
	s.sched.observe(ev.at.Sub(l.sentAt)) // the attempt's round trip is the first sample
	s.setDeadline(l.sentAt.Add(s.timeout))
	s.tSilence.Stop()
	s.tBeat.Reset(ev.at.Add(s.sched.interval()).Sub(s.now()))
	s.generation, s.credential = ev.generation, ev.credential
	took := s.now().Sub(m.started)
	wasActive := m.active
	m.active = false
	s.movingWhy.Store(nil)
	s.tNext.Stop()
	s.tGiveUp.Stop()
	s.mv.answered(s.indexOf(l.addr))
	switch {
	case ev.kind == evWaiting:
		s.ticket = ev.ticket
		s.position = ev.position
		if s.waiting != nil {
			s.waiting(int(ev.position))
		}
	case !s.held:
		// A waiter granted while it moved (its push may have been lost):
		// it holds from now on, with the grant's token.
		s.grant(ev.token, ev.at)
	}
	attrs := []slog.Attr{attrLock(s.name), slog.String("from", from), slog.String("to", l.addr),
		slog.Int("attempts", m.tries), slog.Int("attempt", int(l.number)), slog.Duration("took", took),
		slog.Bool("held", s.held), attrErr(m.why)}
	if s.held {
		attrs = append(attrs, attrToken(s.token))
	}
	if !wasActive {
		attrs = append(attrs, slog.Bool("after_confirmation", true))
	}
	logAt(s.log, slog.LevelInfo, "baton: claim moved", attrs...)
	if s.onMoved != nil {
		s.onMoved(Moved{Name: s.name, From: from, To: l.addr, Reason: m.why, Held: s.held,
			Attempts: m.tries, Took: took, Token: s.token})
	}
}

// leave makes l a connection the claim has left: nothing on it confirms,
// and it stays open until its server ends it or the claim ends. TCP
// keepalive is turned on for it, so that one whose server's host died
// (no FIN, no reset ever) still ends, rather than stay for the claim's life.
func (s *claim) leave(l *link) {
	l.role = roleLeft
	s.move.left = append(s.move.left, l)
	if tc, ok := l.raw.(*net.TCPConn); ok {
		tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: leftKeepAlive, Interval: leftKeepAlive, Count: 4})
	}
}

// leftKeepAlive is the keepalive idle time and interval of a connection
// the claim has left.
const leftKeepAlive = 15 * time.Second

// dropLeft closes a connection the claim has left, which its server ended.
func (s *claim) dropLeft(l *link) {
	m := &s.move
	for i, x := range m.left {
		if x == l {
			m.left = append(m.left[:i], m.left[i+1:]...)
			break
		}
	}
	s.dropLink(l, true)
}

// logRefusal reports an answer that ends the claim in a move.
func (s *claim) logRefusal(level slog.Level, l *link, err error) {
	logAt(s.log, level, "baton: resume refused", attrLock(s.name), attrAddr(l.addr),
		slog.Int("attempt", int(l.number)), slog.Bool("held", s.held), attrErr(err))
}

// refusalLevel is the level of a refusal: Error for those that say a
// premise broke (the claim had ended unseen, or another connection has its
// credential), Warn otherwise.
func refusalLevel(err error) slog.Level {
	if errors.Is(err, ErrSuperseded) || errors.Is(err, ErrBadCredential) || errors.Is(err, ErrMoved) {
		return slog.LevelError
	}
	return slog.LevelWarn
}
