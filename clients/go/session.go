package baton

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// session is one connection: one claim on one lock. Two goroutines serve it
// and both end when it ends: read, the permanent reader, so that a promotion
// push is seen at once; and run, which writes ACQUIRE and the heartbeats,
// keeps the schedule and the deadline, and decides why the session ended,
// unless a question about the lock finds the clock past the deadline
// first (checkClock).
//
// Every time the deadline and the maximum hold are measured on is a
// reading of now (package clock: it counts a suspend of the machine). The
// timers that wake run count Go's monotonic clock, which does not: after
// a suspend they fire late, so nothing that confirms the lock trusts one.
// A frame, a question and every wake of run read the clock first.
type session struct {
	conn    net.Conn // the protocol's byte stream (TLS or TCP)
	raw     net.Conn // what to close: the TCP connection under conn
	addr    string
	name    string
	shared  bool // a shared claim, of limit slots
	limit   int
	sched   schedule
	beat    []byte // a HEARTBEAT frame
	waiting func(position int)
	maxHold time.Duration
	log     *slog.Logger
	onLost  func(error)
	now     func() time.Time // the clock of the deadlines (see above)

	// ctx is the Lock's context; cancel is called by record, before the
	// connection is closed, so the work stops first.
	ctx    *lockContext
	cancel context.CancelCauseFunc

	events  chan event  // read -> run
	granted chan uint64 // -> Acquire: the token, sent once (see grant)
	// grantSent makes the send on granted happen once: by the reader, for a
	// promotion push, so that Acquire returns after one goroutine hand-off
	// instead of two (each one can cost a CPU's wake-up), or by run.
	grantSent atomic.Bool
	// base and deadline publish run's deadline to the reader and to every
	// question about the lock: a push read at or after base+deadline
	// confirms nothing (see run), and a Lock asked after it is lost.
	base     time.Time    // a reading of now
	deadline atomic.Int64 // nanoseconds after base
	// holdUntil is the end of the maximum hold (WithMaxHold), in
	// nanoseconds after base; 0 while not granted or without one. Set
	// before the grant is handed to Acquire.
	holdUntil atomic.Int64

	// endOnce makes the first end recorded the only one: run's, or that
	// of a question asked past the deadline (checkClock), which then
	// closes lapsed so that run ends too.
	endOnce sync.Once
	lapsed  chan struct{}

	// endMu guards finished and onEnded (see onEnd).
	endMu    sync.Mutex
	finished bool
	onEnded  func()

	closeOnce sync.Once
	closing   chan struct{} // closed by close: Release, or Acquire gave up
	quit      chan struct{} // closed when run ends: read stops sending
	readDone  chan struct{}
	done      chan struct{} // closed when both goroutines have ended

	// Owned by run; read by others only after done is closed (Acquire has
	// the token from granted, which the reader may send before run sets
	// held).
	held     bool
	token    uint64
	replied  bool      // the server answered at least once
	position uint32    // the last WAITING position
	err      error     // why the session ended; written once, by record
	endedAt  time.Time // when (a reading of now): just before the Lock's context was cancelled
}

// sessionConfig is what a session needs besides its connection.
type sessionConfig struct {
	lease   time.Duration
	acquire []byte             // the ACQUIRE frame
	shared  bool               // the claim's kind, as sent in it
	limit   int                // the shared claim's limit
	waiting func(position int) // WithWaitingFunc; nil for none
	maxHold time.Duration      // WithMaxHold; 0 for none
	log     *slog.Logger       // WithLogger; nil for none
	// onLost, if not nil, is called with the error when a granted lock is
	// lost, by whichever goroutine records the loss (a LockSet's cancel).
	onLost func(error)
	now    func() time.Time // the Client's clock
}

type eventKind uint8

const (
	evWaiting   eventKind = iota + 1 // WAITING reply
	evAcquired                       // ACQUIRED reply (PUSH=0)
	evPush                           // ACQUIRED PUSH=1
	evError                          // ERROR frame; err is its *wire.Error
	evBroken                         // the read failed; err says how
	evViolation                      // a frame no server may send; err says which
)

// event is one frame, or the end of the stream, as read.
type event struct {
	kind     eventKind
	at       time.Time // when it was read (a reading of now): the end of a round trip
	token    uint64
	position uint32
	err      error
}

// startSession starts the goroutines of a session on conn; parent is the
// parent of the Lock's context.
func startSession(parent context.Context, conn, raw net.Conn, addr, name string, cfg sessionConfig) *session {
	lctx, cancel := context.WithCancelCause(parent)
	s := &session{
		conn:     conn,
		raw:      raw,
		addr:     addr,
		name:     name,
		shared:   cfg.shared,
		limit:    cfg.limit,
		sched:    schedule{lease: cfg.lease},
		beat:     wire.AppendHeartbeat(nil),
		waiting:  cfg.waiting,
		maxHold:  cfg.maxHold,
		log:      cfg.log,
		onLost:   cfg.onLost,
		now:      cfg.now,
		cancel:   cancel,
		events:   make(chan event, 4),
		base:     cfg.now(),
		granted:  make(chan uint64, 1),
		lapsed:   make(chan struct{}),
		closing:  make(chan struct{}),
		quit:     make(chan struct{}),
		readDone: make(chan struct{}),
		done:     make(chan struct{}),
	}
	s.ctx = &lockContext{Context: lctx, s: s}
	s.deadline.Store(int64(s.sched.timeout())) // run moves it to its own send
	go s.read()
	go s.run(cfg.acquire)
	return s
}

// lockContext is a Lock's context. Its Err and Done read the clock before
// they answer (so does context.Cause, which calls Err): past the lock's
// deadline they end the session on the spot, so that work waking from a
// pause (GC, SIGSTOP) that asks is told of the loss before its next step,
// whether or not the session's goroutine has run yet. What is derived
// from it, and a Done channel taken before the pause, are closed by that
// goroutine and can be late.
type lockContext struct {
	context.Context // the cancelCtx that record cancels
	s               *session
}

func (c *lockContext) Err() error {
	c.s.checkClock()
	return c.Context.Err()
}

func (c *lockContext) Done() <-chan struct{} {
	c.s.checkClock()
	return c.Context.Done()
}

// checkClock ends the session if the clock is past its deadline or its
// maximum hold, whichever comes first. It reads the clock and needs no
// other goroutine: a process that wakes from a pause or a suspend learns
// of the loss from the first question it asks.
func (s *session) checkClock() {
	if s.ctx.Context.Err() != nil {
		return // ended already (or the parent of the context did)
	}
	if err := s.overdue(s.since()); err != nil {
		s.lapse(err)
	}
}

// since is the clock's reading as time since base.
func (s *session) since() time.Duration { return s.now().Sub(s.base) }

// overdue is the end of the session by the clock at now (since base): the
// maximum hold or the deadline, whichever came first; nil before both.
func (s *session) overdue(now time.Duration) error {
	confirmed := time.Duration(s.deadline.Load())
	hold := time.Duration(s.holdUntil.Load())
	switch {
	case hold > 0 && now >= hold && hold <= confirmed:
		return s.maxHoldReached()
	case now >= confirmed:
		return s.unconfirmed()
	}
	return nil
}

// validUntil is the time up to which the lock is held unless it is taken
// away (force-release, shutdown, a broken connection): the deadline, or
// the end of the maximum hold if that comes first. It is given on the
// caller's clock, time.Now's, as the time left now from time.Now().
func (s *session) validUntil() time.Time {
	until := time.Duration(s.deadline.Load())
	if hold := time.Duration(s.holdUntil.Load()); hold > 0 {
		until = min(until, hold)
	}
	return time.Now().Add(until - s.since())
}

// lapse records the end of the session's time from outside run, and tells
// run to close the connection. A Release that came first stands.
func (s *session) lapse(cause error) {
	select {
	case <-s.closing:
		return
	default:
	}
	if s.record(cause) {
		close(s.lapsed)
	}
}

// close ends the session from outside: the connection is closed at once,
// which is the release (or gives up the place in the queue); with a reset
// unless WithNormalClose (dialTCP set SO_LINGER 0). It does not wait;
// <-s.done does.
func (s *session) close() {
	s.closeOnce.Do(func() {
		close(s.closing)
		s.raw.Close()
	})
}

func (s *session) read() {
	defer close(s.readDone)
	br := bufio.NewReaderSize(s.conn, wire.MaxFrame)
	var buf [wire.MaxFrame]byte
	for first := true; ; first = false {
		ev := s.readFrame(br, &buf, first)
		if ev.kind == evPush && br.Buffered() > 0 {
			// Bytes came in behind the push. If they end the session (the
			// ERROR of a force-release or a shutdown that followed the
			// promotion at once, delivered together by a slow link), the
			// grant is never handed over: it was over before we saw it.
			next := s.readFrame(br, &buf, false)
			if next.kind >= evError {
				ev = next
			} else {
				if !s.emit(ev) {
					return
				}
				ev = next
			}
		}
		if !s.emit(ev) || ev.kind >= evError {
			return
		}
	}
}

// emit hands ev to run, and a confirmed promotion straight to Acquire. It
// reports false once run has ended.
func (s *session) emit(ev event) bool {
	if ev.kind == evPush && ev.at.Sub(s.base) < time.Duration(s.deadline.Load()) {
		// The promotion is confirmed (run checks the same deadline, and
		// ends the session with a violation if a push comes twice).
		s.sendGrant(ev.token, ev.at)
	}
	select {
	case s.events <- ev:
		return true
	case <-s.quit:
		return false
	}
}

// readFrame reads one frame, the connection's first if first. The length
// is checked before the payload is read, so an oversize frame is refused
// unread.
func (s *session) readFrame(r *bufio.Reader, buf *[wire.MaxFrame]byte, first bool) event {
	if _, err := io.ReadFull(r, buf[:wire.HeaderSize]); err != nil {
		return event{kind: evBroken, err: err}
	}
	if first && string(buf[:wire.HeaderSize]) == "HTT" {
		return s.httpAnswer(r)
	}
	h, err := wire.ParseHeader(buf[:wire.HeaderSize])
	if err != nil {
		return s.violation("%v", errText(err))
	}
	p := buf[wire.HeaderSize : wire.HeaderSize+int(h.Length)]
	if _, err := io.ReadFull(r, p); err != nil {
		return event{kind: evBroken, err: err}
	}
	at := s.now()
	switch h.Type {
	case wire.TypeWaiting:
		pos, err := wire.DecodeWaiting(p)
		if err != nil {
			return s.violation("%v", errText(err))
		}
		return event{kind: evWaiting, at: at, position: pos}
	case wire.TypeAcquired:
		push, token, err := wire.DecodeAcquired(p)
		if err != nil {
			return s.violation("%v", errText(err))
		}
		if push {
			return event{kind: evPush, at: at, token: token}
		}
		return event{kind: evAcquired, at: at, token: token}
	case wire.TypeError:
		e, err := wire.DecodeError(p)
		if err != nil {
			return s.violation("%v", errText(err))
		}
		if e.Code == wire.CodeProtocol && strings.HasPrefix(e.Msg, opsPortRefusal) {
			return event{kind: evError, at: at, err: &wrongPortError{addr: s.addr, answer: e.Msg}}
		}
		return event{kind: evError, at: at, err: e}
	}
	return s.violation("unexpected frame %v", h.Type)
}

// httpAnswer is the end of a connection whose answer began "HTT": an HTTP
// server's status line, where a frame should be (a frame of that header
// would claim 21588 bytes, over the limit). Its first line, as far as it
// has come, names it.
func (s *session) httpAnswer(r *bufio.Reader) event {
	line, _ := r.Peek(min(r.Buffered(), maxQuoted))
	if i := bytes.IndexAny(line, "\r\n"); i >= 0 {
		line = line[:i]
	}
	return event{kind: evViolation, err: &wrongPortError{addr: s.addr,
		answer: fmt.Sprintf("it answered in HTTP (%q), as an HTTP port such as Baton's ops port does", "HTT"+string(line))}}
}

// maxQuoted bounds what a message quotes of a server's answer.
const maxQuoted = 80

func (s *session) violation(format string, args ...any) event {
	return event{kind: evViolation, err: &violationError{addr: s.addr, what: fmt.Sprintf(format, args...)}}
}

// errText is a decoder's complaint without the "baton: PROTOCOL" prefix,
// which would read as if the client had sent the bad frame.
func errText(err error) string {
	if we, ok := err.(*wire.Error); ok {
		return we.Msg
	}
	return err.Error()
}

// run is the session's clock: it writes ACQUIRE, then one heartbeat an
// interval after each reply, so at most one request is ever in flight and a
// reply always belongs to the one request outstanding.
//
// The deadline runs from the write of the last request the server answered,
// not from the answer: the server's lastSeenAt is no earlier than that write,
// so the server cannot end the session before sentAt + lease, and the client
// gives up at sentAt + 0.8 × lease.
func (s *session) run(acquire []byte) {
	defer s.finish()
	timeout := s.sched.timeout()

	sentAt := s.now() // the write of the request in flight, or of the last one
	deadlineAt := sentAt.Add(timeout)
	s.deadline.Store(int64(deadlineAt.Sub(s.base)))
	pending := true

	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	// answer bounds the wait for the ACQUIRE's answer (see answerBound).
	answer := time.NewTimer(answerBound(timeout))
	defer answer.Stop()
	// beat times the next heartbeat after a reply; while a request is
	// pending, a look at the clock every lease/4 (the first reports the
	// miss, with a logger), so that run sees a suspend past the deadline
	// a quarter lease after the resume at most.
	beat := time.NewTimer(time.Hour)
	beat.Stop()
	defer beat.Stop()
	missed := false                  // the pending request's miss was reported
	hold := time.NewTimer(time.Hour) // armed at the grant, with a maximum hold
	hold.Stop()
	defer hold.Stop()
	sent := func() {
		missed = false
		beat.Reset(s.sched.base())
	}

	if err := s.write(acquire, deadlineAt); err != nil {
		s.end(err)
		return
	}
	sent()
	for {
		select {
		case <-s.closing:
			s.end(ErrReleased)
			return

		case <-s.lapsed:
			return // a question about the lock found it past its time

		case <-deadline.C:
			if s.unanswered() {
				s.end(s.noAnswer(sentAt))
				return
			}
			s.end(s.unconfirmed())
			return

		case <-answer.C:
			if s.unanswered() {
				s.end(s.noAnswer(sentAt))
				return
			}

		case <-hold.C:
			s.end(s.maxHoldReached())
			return

		case <-beat.C:
			// The timer counts the monotonic clock: after a suspend it
			// fires late, past the deadline that the clock says.
			now := s.now()
			if err := s.overdue(now.Sub(s.base)); err != nil {
				if s.unanswered() {
					err = s.noAnswer(sentAt)
				}
				s.end(err)
				return
			}
			if pending {
				if !missed && s.log != nil {
					s.logMiss(now.Sub(sentAt), deadlineAt.Sub(now))
				}
				missed = true
				beat.Reset(s.sched.base())
				continue
			}
			sentAt, pending = now, true
			if err := s.write(s.beat, deadlineAt); err != nil {
				s.end(err)
				return
			}
			sent()

		case ev := <-s.events:
			if ev.kind == evBroken {
				select {
				case <-s.closing:
					s.end(ErrReleased)
				default:
					s.end(brokenConn(s.addr, ev.err))
				}
				return
			}
			if ev.kind >= evError {
				s.end(ev.err)
				return
			}
			// A frame that arrives after the deadline confirms nothing: the
			// server may already have moved the lock.
			if !ev.at.Before(deadlineAt) {
				s.end(s.unconfirmed())
				return
			}
			if ev.kind == evPush {
				// Promotion. It does not move the deadline: the server's
				// clock still runs from our last frame it has seen.
				if s.held {
					s.end(&violationError{addr: s.addr, what: "promotion push while holding the lock"})
					return
				}
				s.grant(ev.token, ev.at, hold)
				continue
			}
			// A reply: WAITING or ACQUIRED PUSH=0.
			if !pending {
				s.end(&violationError{addr: s.addr, what: fmt.Sprintf("reply with no request outstanding (token %d, position %d)", ev.token, ev.position)})
				return
			}
			pending = false
			s.replied = true
			s.sched.observe(ev.at.Sub(sentAt))
			deadlineAt = sentAt.Add(timeout)
			s.deadline.Store(int64(deadlineAt.Sub(s.base)))
			now := s.now()
			deadline.Reset(deadlineAt.Sub(now))
			beat.Reset(ev.at.Add(s.sched.interval()).Sub(now))
			switch {
			case ev.kind == evWaiting && s.held:
				s.end(&violationError{addr: s.addr, what: fmt.Sprintf("WAITING (position %d) after granting the lock", ev.position)})
				return
			case ev.kind == evWaiting:
				s.position = ev.position
				if s.waiting != nil {
					s.waiting(int(ev.position))
				}
			case !s.held:
				s.grant(ev.token, ev.at, hold)
			case ev.token != s.token:
				s.end(&violationError{addr: s.addr, what: fmt.Sprintf("ACQUIRED with token %d while holding token %d", ev.token, s.token)})
				return
			}
		}
	}
}

// grant records the grant read at at, and arms hold for the maximum hold.
func (s *session) grant(token uint64, at time.Time, hold *time.Timer) {
	s.held, s.token = true, token
	s.sendGrant(token, at)
	if until := s.holdUntil.Load(); until > 0 {
		hold.Reset(time.Duration(until) - s.since())
	}
}

// sendGrant hands the token to Acquire, unless it has been already; the
// maximum hold runs from at, the grant's arrival.
func (s *session) sendGrant(token uint64, at time.Time) {
	if s.grantSent.CompareAndSwap(false, true) {
		if s.maxHold > 0 {
			s.holdUntil.Store(int64(at.Sub(s.base) + s.maxHold))
		}
		s.granted <- token // buffered: never blocks
	}
}

// write writes one request; the deadline is the session's (a reading of
// now), so a write stuck behind a frozen link ends as a lost confirmation,
// not later.
func (s *session) write(b []byte, deadlineAt time.Time) error {
	// The connection's deadline is on time.Now's clock.
	s.conn.SetWriteDeadline(time.Now().Add(deadlineAt.Sub(s.now())))
	if _, err := s.conn.Write(b); err != nil {
		select {
		case <-s.closing:
			return ErrReleased
		default:
		}
		if !s.now().Before(deadlineAt) {
			return s.unconfirmed()
		}
		return brokenConn(s.addr, err)
	}
	return nil
}

// answerTimeout bounds the wait for the answer to ACQUIRE when 0.8 ×
// lease is longer: a server answers ACQUIRE as soon as it has read it,
// and ends a session any write of which takes longer than its -io-timeout
// (5s by default), so a server silent for longer is stuck, or not one.
const answerTimeout = 5 * time.Second

// answerBound is the wait for the answer to ACQUIRE, for a session whose
// confirmation times out after timeout (0.8 × lease).
func answerBound(timeout time.Duration) time.Duration { return min(answerTimeout, timeout) }

// unanswered reports whether the server has not answered the ACQUIRE yet
// (no reply, no push). Owned by run.
func (s *session) unanswered() bool { return !s.replied && !s.grantSent.Load() }

// noAnswer is the end of a session whose ACQUIRE, written at sentAt, got
// no answer.
func (s *session) noAnswer(sentAt time.Time) error {
	e := &noAnswerError{addr: s.addr, waited: s.now().Sub(sentAt)}
	if timeout := s.sched.timeout(); answerBound(timeout) == timeout {
		e.unconfirmed = s.unconfirmed()
	}
	return e
}

func (s *session) unconfirmed() error {
	return fmt.Errorf("%w for %v (0.8 × lease %v)", ErrUnconfirmed, s.sched.timeout(), s.sched.lease)
}

func (s *session) maxHoldReached() error {
	return fmt.Errorf("%w: held for %v", ErrMaxHoldReached, s.maxHold)
}

// end is run's end of the session: see record.
func (s *session) end(err error) { s.record(err) }

// record records why the session ended and cancels the Lock's context at
// once, before the connection is closed. Only the first call counts (it
// reports true): run's, or checkClock's when a question about the lock
// comes first.
//
// A grant already handed to Acquire counts as held even if run has not seen
// it yet (the reader hands a push over directly): Acquire may have returned
// that Lock, so its end must read as a loss.
func (s *session) record(err error) (first bool) {
	s.endOnce.Do(func() {
		first = true
		lost := s.grantSent.Load() && err != ErrReleased
		if lost {
			err = &lostError{name: s.name, cause: err}
		}
		s.err, s.endedAt = err, s.now()
		s.cancel(err)
		if lost && s.onLost != nil {
			s.onLost(err)
		}
	})
	return first
}

// finish closes the connection and waits for the reader.
func (s *session) finish() {
	close(s.quit)
	select {
	case <-s.closing:
		// Release, or Acquire gave up: close has reset the connection
		// (unless WithNormalClose).
	default:
		if errors.Is(s.err, ErrMaxHoldReached) {
			break // the client's own choice, as a Release
		}
		// The server ended the session, or the link or the confirmation
		// failed: a FIN, retransmitted until acknowledged, where a reset
		// would be sent once into a link that may be failing. A server
		// that sent an ERROR drains until this close, and in a cluster
		// handover waits for it to know that the holder has gone.
		closeNormally(s.raw)
	}
	s.raw.Close()
	<-s.readDone
	s.logEnd() // after the close: a log handler's I/O must not delay the release
	s.endMu.Lock()
	s.finished = true
	f := s.onEnded
	s.endMu.Unlock()
	if f != nil {
		f() // before done is closed: Release returns only after it ran
	}
	close(s.done)
}

// onEnd runs f once the session has ended, before done is closed: at once
// if it has ended already, else when it does.
func (s *session) onEnd(f func()) {
	s.endMu.Lock()
	if s.finished {
		s.endMu.Unlock()
		f()
		return
	}
	s.onEnded = f
	s.endMu.Unlock()
}
