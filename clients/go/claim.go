package baton

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
)

// claim is one ACQUIRE and what came of it: a place in a queue, then a
// lock. Its connections (links) carry it: the claim's connection, on which
// it heartbeats; in protocol version 3, while it moves, the resume
// attempts that may take it over; and the connections it has left, kept
// open until their server ends them (docs/protocol.md, section 14).
//
// Goroutines: run, the claim's clock and only decider, which writes every
// frame, keeps the schedule and the deadline, moves the claim and decides
// why it ended; one reader per link, so that a promotion push or the
// answer to a resume is seen at once; and one per resume attempt's dial.
// All end when the claim ends, and run waits for them.
//
// Every time the deadline and the maximum hold are measured on is a
// reading of now (package clock: it counts a suspend of the machine). The
// timers that wake run count Go's monotonic clock, which does not: after
// a suspend they fire late, so nothing that confirms the lock trusts one.
// A frame, a question and every wake of run read the clock first.
type claim struct {
	name    string
	shared  bool // a shared claim, of limit slots
	limit   int
	lease   time.Duration
	beat    []byte // a HEARTBEAT frame
	waiting func(position int)
	maxHold time.Duration
	log     *slog.Logger
	onLost  func(error)
	onMoved func(Moved)
	now     func() time.Time // the clock of the deadlines (see above)
	// v3 is set when the claim's ACQUIRE was of version 3: its server may
	// give it a credential, and its frames are decoded as version 3's.
	v3 bool
	// resumeAs is the claim as a resume names it (version 3, its kind,
	// limit, lease, name and owner); the resume block is added per attempt.
	resumeAs wire.Acquire
	mv       mover
	first    *link // the ACQUIRE's connection

	// ctx is the Lock's context; cancel is called by record, before the
	// connections are closed, so the work stops first.
	ctx    *lockContext
	cancel context.CancelCauseFunc

	events  chan event      // readers -> run
	dialed  chan dialResult // resume attempts' dials -> run
	granted chan uint64     // -> Acquire: the token, sent once (see grant)
	// grantSent makes the send on granted happen once: by the reader, for a
	// promotion push, so that Acquire returns after one goroutine hand-off
	// instead of two (each one can cost a CPU's wake-up), or by run.
	grantSent atomic.Bool
	// moved is set once the claim has begun to move: from then on a push
	// goes through run, which knows which connection is the claim's.
	moved atomic.Bool
	// movingWhy is what began the move under way (nil when none), as run
	// publishes it, for a loss found by the clock on another goroutine.
	movingWhy atomic.Pointer[error]
	// base and deadline publish run's deadline to the readers and to every
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

	// linksMu guards links and linksShut: close (Release) closes every
	// connection of the claim from the caller's goroutine, at once.
	linksMu   sync.Mutex
	links     []*link
	linksShut bool // every link is closed; one added later is closed at once

	closeOnce sync.Once
	closing   chan struct{} // closed by close: Release, or Acquire gave up
	quit      chan struct{} // closed when run ends: readers and dials stop sending
	dialCtx   context.Context
	stopDials context.CancelFunc
	workers   sync.WaitGroup // the readers and the dials
	done      chan struct{}  // closed when every goroutine of the claim has ended

	// Owned by run; read by others only after done is closed (Acquire has
	// the token from granted, which a reader may send before run sets
	// held).
	held     bool
	token    uint64
	replied  bool      // a server answered at least once
	position uint32    // the last WAITING position
	addr     string    // the address of the claim's connection
	err      error     // why the claim ended; written once, by record
	endedAt  time.Time // when (a reading of now): just before the Lock's context was cancelled

	runState // owned by run alone (run.go, move.go)
}

// claimConfig is what a claim needs besides its first connection.
type claimConfig struct {
	lease   time.Duration
	acquire []byte             // the ACQUIRE frame of version 3, or nil
	legacy  []byte             // the ACQUIRE frame of version 1 or 2
	resume  wire.Acquire       // the claim as a resume names it
	shared  bool               // the claim's kind, as sent in it
	limit   int                // the shared claim's limit
	waiting func(position int) // WithWaitingFunc; nil for none
	maxHold time.Duration      // WithMaxHold; 0 for none
	log     *slog.Logger       // WithLogger; nil for none
	// onLost, if not nil, is called with the error when a granted lock is
	// lost, by whichever goroutine records the loss (a LockSet's cancel).
	onLost  func(error)
	onMoved func(Moved)      // WithMovedFunc; nil for none
	now     func() time.Time // the Client's clock
	mv      mover
}

// startClaim starts the goroutines of a claim whose first connection is
// conn (raw under it) to addr, sending acquire, of version 3 if v3; parent
// is the parent of the Lock's context.
func startClaim(parent context.Context, conn, raw net.Conn, addr, name string, acquire []byte, v3 bool, cfg claimConfig) *claim {
	lctx, cancel := context.WithCancelCause(parent)
	dctx, stopDials := context.WithCancel(context.Background())
	s := &claim{
		name:      name,
		shared:    cfg.shared,
		limit:     cfg.limit,
		lease:     cfg.lease,
		beat:      wire.AppendHeartbeat(nil),
		waiting:   cfg.waiting,
		maxHold:   cfg.maxHold,
		log:       cfg.log,
		onLost:    cfg.onLost,
		onMoved:   cfg.onMoved,
		now:       cfg.now,
		v3:        v3,
		resumeAs:  cfg.resume,
		mv:        cfg.mv,
		cancel:    cancel,
		events:    make(chan event, 4),
		dialed:    make(chan dialResult),
		granted:   make(chan uint64, 1),
		lapsed:    make(chan struct{}),
		closing:   make(chan struct{}),
		quit:      make(chan struct{}),
		dialCtx:   dctx,
		stopDials: stopDials,
		done:      make(chan struct{}),
		addr:      addr,
		base:      cfg.now(),
	}
	s.sched = schedule{lease: cfg.lease}
	s.ctx = &lockContext{Context: lctx, s: s}
	s.deadline.Store(int64(s.sched.timeout())) // run moves it to its own send
	s.first = &link{conn: conn, raw: raw, addr: addr, role: roleCur}
	s.addLink(s.first)
	s.startReader(s.first)
	go s.run(acquire)
	return s
}

// lockContext is a Lock's context. Its Err and Done read the clock before
// they answer (so does context.Cause, which calls Err): past the lock's
// deadline they end the claim on the spot, so that work waking from a
// pause (GC, SIGSTOP) that asks is told of the loss before its next step,
// whether or not the claim's goroutine has run yet. What is derived
// from it, and a Done channel taken before the pause, are closed by that
// goroutine and can be late.
type lockContext struct {
	context.Context // the cancelCtx that record cancels
	s               *claim
}

func (c *lockContext) Err() error {
	c.s.checkClock()
	return c.Context.Err()
}

func (c *lockContext) Done() <-chan struct{} {
	c.s.checkClock()
	return c.Context.Done()
}

// checkClock ends the claim if the clock is past its deadline or its
// maximum hold, whichever comes first. It reads the clock and needs no
// other goroutine: a process that wakes from a pause or a suspend learns
// of the loss from the first question it asks. A move does not change
// this: the deadline stands until an answer to a resume confirms the
// claim again.
func (s *claim) checkClock() {
	if s.ctx.Context.Err() != nil {
		return // ended already (or the parent of the context did)
	}
	if err := s.overdue(s.since()); err != nil {
		s.lapse(err)
	}
}

// since is the clock's reading as time since base.
func (s *claim) since() time.Duration { return s.now().Sub(s.base) }

// overdue is the end of the claim by the clock at now (since base): the
// maximum hold or the deadline, whichever came first; nil before both.
func (s *claim) overdue(now time.Duration) error {
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
func (s *claim) validUntil() time.Time {
	until := time.Duration(s.deadline.Load())
	if hold := time.Duration(s.holdUntil.Load()); hold > 0 {
		until = min(until, hold)
	}
	return time.Now().Add(until - s.since())
}

// lapse records the end of the claim's time from outside run, and tells
// run to close its connections. A Release that came first stands.
func (s *claim) lapse(cause error) {
	select {
	case <-s.closing:
		return
	default:
	}
	if s.record(cause) {
		close(s.lapsed)
	}
}

// close ends the claim from outside: every connection of the claim is
// closed at once, which is the release (or gives up the place in the
// queue); with a reset unless WithNormalClose (dialTCP set SO_LINGER 0). A
// server that took the claim over sees the close; one that has not
// answered a resume yet finds its connection closed and takes nothing. It
// does not wait; <-s.done does.
func (s *claim) close() {
	s.closeOnce.Do(func() {
		close(s.closing)
		s.shutLinks(false)
	})
}

// addLink counts l among the claim's connections; if they have all been
// closed already (a Release came first), it closes l instead and reports
// false. Nothing has been sent on l yet.
func (s *claim) addLink(l *link) bool {
	s.linksMu.Lock()
	defer s.linksMu.Unlock()
	if s.linksShut {
		l.raw.Close()
		return false
	}
	s.links = append(s.links, l)
	return true
}

// dropLink closes l, a connection that its server ended or that the claim
// no longer needs, with a FIN (normal) or a reset.
func (s *claim) dropLink(l *link, normal bool) {
	l.role = roleClosed
	s.linksMu.Lock()
	defer s.linksMu.Unlock()
	for i, x := range s.links {
		if x == l {
			s.links = append(s.links[:i], s.links[i+1:]...)
			if normal {
				closeNormally(l.raw)
			}
			l.raw.Close()
			return
		}
	}
}

// shutLinks closes every connection of the claim: with a FIN (normal) or
// a reset.
func (s *claim) shutLinks(normal bool) {
	s.linksMu.Lock()
	defer s.linksMu.Unlock()
	if s.linksShut {
		return
	}
	s.linksShut = true
	for _, l := range s.links {
		if normal {
			closeNormally(l.raw)
		}
		l.raw.Close()
	}
	s.links = nil
}

// grant records the grant read at at, and arms the maximum hold. (It logs
// the grant here, where the claim's address is run's to read.)
func (s *claim) grant(token uint64, at time.Time) {
	s.held, s.token = true, token
	logAt(s.log, levelDebug, "baton: lock acquired", attrLock(s.name), attrAddr(s.addr), attrToken(token))
	s.sendGrant(token, at)
	if until := s.holdUntil.Load(); until > 0 {
		s.tHold.Reset(time.Duration(until) - s.since())
	}
}

// sendGrant hands the token to Acquire, unless it has been already; the
// maximum hold runs from at, the grant's arrival.
func (s *claim) sendGrant(token uint64, at time.Time) {
	if s.grantSent.CompareAndSwap(false, true) {
		if s.maxHold > 0 {
			s.holdUntil.Store(int64(at.Sub(s.base) + s.maxHold))
		}
		s.granted <- token // buffered: never blocks
	}
}

// answerTimeout bounds the wait for the answer to ACQUIRE when 0.8 ×
// lease is longer: a server answers ACQUIRE as soon as it has read it,
// and ends a session any write of which takes longer than its -io-timeout
// (5s by default), so a server silent for longer is stuck, or not one.
const answerTimeout = 5 * time.Second

// answerBound is the wait for the answer to ACQUIRE, for a claim whose
// confirmation times out after timeout (0.8 × lease).
func answerBound(timeout time.Duration) time.Duration { return min(answerTimeout, timeout) }

// unanswered reports whether the server has not answered the ACQUIRE yet
// (no reply, no push). Owned by run.
func (s *claim) unanswered() bool { return !s.replied && !s.grantSent.Load() }

// noAnswer is the end of a claim whose ACQUIRE, written at sentAt, got
// no answer.
func (s *claim) noAnswer(sentAt time.Time) error {
	e := &noAnswerError{addr: s.addr, waited: s.now().Sub(sentAt)}
	if timeout := s.sched.timeout(); answerBound(timeout) == timeout {
		e.unconfirmed = s.unconfirmed()
	}
	return e
}

func (s *claim) unconfirmed() error {
	if why := s.movingWhy.Load(); why != nil && *why != nil {
		// The deadline passed while the claim moved: say what began the
		// move (SHUTDOWN, a server gone), which is why nothing confirmed.
		return fmt.Errorf("%w for %v (0.8 × lease %v): no server took the claim back after %v",
			ErrUnconfirmed, s.lease*4/5, s.lease, *why)
	}
	return fmt.Errorf("%w for %v (0.8 × lease %v)", ErrUnconfirmed, s.lease*4/5, s.lease)
}

func (s *claim) maxHoldReached() error {
	return fmt.Errorf("%w: held for %v", ErrMaxHoldReached, s.maxHold)
}

// end is run's end of the claim: see record. It reports true, for run to
// return.
func (s *claim) end(err error) bool {
	s.record(err)
	return true
}

// record records why the claim ended and cancels the Lock's context at
// once, before the connections are closed. Only the first call counts (it
// reports true): run's, or checkClock's when a question about the lock
// comes first.
//
// A grant already handed to Acquire counts as held even if run has not seen
// it yet (a reader hands a push over directly): Acquire may have returned
// that Lock, so its end must read as a loss.
func (s *claim) record(err error) (first bool) {
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

// finish closes every connection of the claim and waits for its readers
// and dials.
func (s *claim) finish() {
	close(s.quit)
	s.stopDials()
	select {
	case <-s.closing:
		// Release, or Acquire gave up: close has reset the connections
		// (unless WithNormalClose).
	default:
		// The server ended the claim, or the link or the confirmation
		// failed: a FIN, retransmitted until acknowledged, where a reset
		// would be sent once into a link that may be failing. A server
		// that sent an ERROR drains until this close, and in a cluster
		// handover waits for it to know that the holder has gone. The
		// maximum hold is the client's own choice, as a Release: a reset.
		s.shutLinks(!errors.Is(s.err, ErrMaxHoldReached))
	}
	s.workers.Wait()
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

// onEnd runs f once the claim has ended, before done is closed: at once
// if it has ended already, else when it does.
func (s *claim) onEnd(f func()) {
	s.endMu.Lock()
	if s.finished {
		s.endMu.Unlock()
		f()
		return
	}
	s.onEnded = f
	s.endMu.Unlock()
}
