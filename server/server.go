// Package server is Baton's network edge: the accept loop, one reader per
// session, deadlines, admin actions, metrics and Shutdown. It turns the
// outcomes of the lock table into frames.
//
// Concurrency: one mutex (Server.mu) guards the lock table and the session
// registry; it is never held across I/O. Each session has one reader at a
// time, which also owns closing the connection: the idle poller's shard
// while the session is parked (session_parked_linux.go), or a reader
// goroutine. The shard reads and writes without waiting, and hands the
// session to a goroutine for anything that could wait. Frames for a
// session are queued under Server.mu, so their order on the wire is the
// order of the table's decisions (no ACQUIRED reply can overtake the
// promotion push), and written by whichever goroutine finds output
// pending: the reader for its replies, the ending holder's reader for the
// handover's push, a short-lived flusher otherwise. A session's slow
// socket can therefore delay only that session.
//
// What a hold of mu owes other sessions (pushes, ERRORs, readers to start,
// sessions to take from the idle poller) is collected in effects and done
// once mu is released (deliver), and work on many sessions is done in
// steps of bulkStep sessions, each one hold of mu: a release of thousands
// of holders, or a writer leaving before thousands of readers, lets every
// other session's frames through between its steps.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonlock/baton/clients/go/clock"
	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/locktable"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// pendingSlack is how many connections beyond MaxSessions may be open
// before their ACQUIRE is read (to be refused with OVERLOADED); past it, new
// connections are closed at once.
const pendingSlack = 1024

// Server serves the Baton protocol. Make one with New.
type Server struct {
	cfg    Config
	log    *slog.Logger
	reg    *prometheus.Registry
	m      *metrics
	linger time.Duration // how long a connection drains after its ERROR
	// now reads the clock of the table, the grace periods and
	// Replica.MayServe (Config.Now). Every instant given to the table is a
	// reading of it; the I/O deadlines of the connections, which guard no
	// lock, are on time.Now's clock, and the two never meet.
	now func() time.Time

	closing atomic.Bool // set at the start of Shutdown
	// serving is false while a replicated node does not lead (term.go);
	// always true in a standalone server. Changed only under mu.
	serving atomic.Bool
	// noted is the longest lease Config.Leases has let through: one no
	// longer than it is noted without a wait (no fsync, no Raft round), so
	// the poller's shard may take its ACQUIRE itself (see answerFirst).
	noted atomic.Int64

	mu        sync.Mutex
	table     *locktable.Table
	sessions  map[locktable.SessionID]*session // those in the table
	conns     map[*session]struct{}            // every open connection
	listeners map[net.Listener]func()          // each with what wakes its accept loop, if ln.Close does not
	// acceptCheck is how often a raw accept loop looks whether its
	// listener was closed by someone else (accept_raw_linux.go).
	acceptCheck time.Duration
	nextID      locktable.SessionID
	// stopped: no goroutine may start any more. Set under mu and startMu
	// both, so that either one guards reading it: deliver starts
	// goroutines under startMu alone.
	stopped  bool
	startMu  sync.Mutex
	armedFor time.Time        // the reaper's wake-up; zero when idle
	exits    []locktable.Exit // scratch for Expire and the admin calls
	// releaseExits is scratch for Release.
	releaseExits []locktable.Exit
	// moving holds, for each lock whose queue the table left moving (see
	// bulkStep), the handover the promotion began with, for the grants the
	// reaper makes in later steps.
	moving map[string]handover

	wg         sync.WaitGroup
	reaperWake chan struct{}
	done       chan struct{}
	// stopCtx is cancelled when done is closed, for what waits with a
	// context (the TLS handshake).
	stopCtx      context.Context
	stopCancel   context.CancelFunc
	reaperOnce   sync.Once
	shutdownOnce sync.Once
	stopping     []*session // the sessions Shutdown ended; guarded by mu
	// poller watches parked sessions; nil when parking is off or not
	// available. Set before the first session exists.
	poller *idlePoller

	sec security // TLS, access rules, per-address cap (security.go)
	// hs bounds the TLS handshakes in progress, and hsTLS is the TLS
	// configuration over it (tlsgate.go); nil without TLS. maxConns is
	// the most connections kept open.
	hs       *HandshakeGate
	hsTLS    *tls.Config
	maxConns int
	// open counts the protocol connections accepted and not yet closed
	// (as baton_connections): a session leaves conns when it ends, and
	// closes its connection, freeing the descriptor, a moment later.
	open atomic.Int64
	// fds holds the protocol listener's spare descriptors (fdreserve.go).
	fds fdReserve

	// Protocol version 3 (resume.go); guarded by mu.
	//
	// epoch is the term's epoch (Carried.Epoch); listEpoch the term of the
	// handover list it started with (0: none), whose unlisted claims are
	// refused; resumesFrom is when resumes may first be answered
	// (Carried.HoldResumes); termWake wakes the resumes held until then.
	epoch, listEpoch uint64
	// resumeBelow is the table's ResumeBelow: claims below it come back
	// in the crash grace.
	resumeBelow uint64
	resumesFrom time.Time
	termWake    chan struct{}
	// handingOver: a planned handover took the list; nothing is confirmed,
	// and operators' actions are refused (ErrHandingOver). successorHint
	// is the client address the NOT_LEADER of a cluster's handover names.
	handingOver   bool
	successorHint atomic.Pointer[string]
	// pendingIDs are the pending claims of a handover's list, each true if
	// resumable (a claim of version 3 with a credential).
	pendingIDs map[locktable.SessionID]bool
	// detached are the holders of version 3 ended for a broken connection
	// and waiting out their leases in the table, with their leases.
	detached map[locktable.SessionID]time.Duration
	// servedTold: Resume.TermServed was told for this term.
	servedTold bool
	// genAt is when the current generation of credentials began (on now's
	// clock), or when the term began serving.
	genAt time.Time
	// list is the handover list Shutdown took, and unclosed the holders it
	// ended that are listed only if they were not seen to close.
	list     *HandoverList
	unclosed []unclosedHolder

	events eventLog // history and subscribers of the event stream (events.go); guarded by mu
	// pipelining is the budget of turns of the readers of sessions that
	// pipeline and cannot park (see session.yield).
	pipelining *rate.Limiter
}

// New returns a server with cfg, after checking it.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	now := cfg.Now
	if now == nil {
		now = clock.Now
	}
	var noGrantBefore time.Time
	if cfg.NoGrantFor > 0 {
		noGrantBefore = now().Add(cfg.NoGrantFor)
	}
	reg := prometheus.NewRegistry()
	s := &Server{
		cfg:         cfg,
		log:         log,
		reg:         reg,
		m:           newMetrics(reg, cfg.MetricsLockNames),
		linger:      min(cfg.IOTimeout, time.Second),
		now:         now,
		moving:      make(map[string]handover),
		sessions:    make(map[locktable.SessionID]*session),
		conns:       make(map[*session]struct{}),
		listeners:   make(map[net.Listener]func()),
		acceptCheck: time.Second,
		reaperWake:  make(chan struct{}, 1),
		done:        make(chan struct{}),
		pipelining:  rate.NewLimiter(pipelineTurns, framesPerTurn),
	}
	s.stopCtx, s.stopCancel = context.WithCancel(context.Background())
	s.startTermLocked(now(), noGrantBefore, cfg.Carried)
	s.serving.Store(cfg.Replica == nil)
	s.m.registerGrace(reg, noGrantBefore, now)
	if cfg.MetricsLockNames > 0 {
		reg.MustRegister(newSlotsCollector(s))
	}
	s.sec.init(cfg)
	s.initGate()
	s.fds.init(cfg.ReserveFDs)
	if cfg.NoGrantFor > 0 {
		log.Info("crash recovery: no grants until the grace period ends",
			"until", time.Now().Add(cfg.NoGrantFor).UTC().Format(time.RFC3339Nano),
			"grace", cfg.NoGrantFor.Round(time.Millisecond).String())
	}
	return s, nil
}

// moreTurn is how many of the sessions that pipeline (sh.more) an idle
// poller's shard reads in a turn, and morePace how often it takes such a
// turn (server/internal/idlepoll). A lone heartbeat that comes meanwhile waits for
// at most moreTurn reads; and pipelining sessions, however many, keep a
// shard busy for at most moreTurn reads (of some microseconds each) every
// morePace, so that the process stays idle enough for the system to run
// it at once when a heartbeat comes.
const (
	moreTurn = 16
	morePace = time.Millisecond
)

// pipelineTurns is how many turns of framesPerTurn frames the readers of
// pipelining sessions that cannot park (TLS) take in a second, together:
// about what the idle poller's shards give the sessions they read at
// their pace (moreTurn a morePace each), and a small share of a CPU.
const pipelineTurns = rate.Limit(2 * moreTurn * int(time.Second/morePace) / framesPerTurn)

// bulkStep is how many sessions one hold of the server's mutex ends or
// grants at most (a force-release of a name, a queue that moves, the
// listing of a lock's holders and waiters), so that work on thousands of
// sessions of one name never holds up the others' heartbeats and
// handovers: a step takes some hundreds of microseconds.
const bulkStep = 256

// newTable is an empty lock table for cfg that grants nothing before
// noGrantBefore, a reading of the server's clock (zero: no grace), and in
// that grace admits claims of earlier terms below resumeBelow.
func newTable(cfg Config, noGrantBefore time.Time, resumeBelow uint64) *locktable.Table {
	return locktable.New(locktable.Config{
		MaxSessions:       cfg.MaxSessions,
		MaxWaitersPerLock: cfg.MaxWaitersPerLock,
		NextToken:         cfg.NextToken,
		NoGrantBefore:     noGrantBefore,
		GrantStep:         bulkStep,
		NextTicket:        cfg.NextTicket,
		ResumeBelow:       resumeBelow,
	})
}

// leaseNoted raises noted to lease.
func (s *Server) leaseNoted(lease time.Duration) {
	for {
		old := s.noted.Load()
		if int64(lease) <= old || s.noted.CompareAndSwap(old, int64(lease)) {
			return
		}
	}
}

// Registry holds the server's metrics, for /metrics.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Ready reports whether the server accepts new sessions: false from the
// start of Shutdown.
func (s *Server) Ready() bool { return !s.closing.Load() && s.serving.Load() }

// ShuttingDown reports whether Shutdown has begun.
func (s *Server) ShuttingDown() bool { return s.closing.Load() }

// goLocked starts f in a goroutine that Shutdown waits for. It reports false,
// starting nothing, once Shutdown has stopped new goroutines. mu (or
// startMu, see stopped) must be held.
func (s *Server) goLocked(f func()) bool {
	if s.stopped {
		return false
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
	return true
}

// Serve accepts sessions on ln until Shutdown, and then returns
// ErrServerClosed. Temporary accept errors (such as running out of file
// descriptors) are retried with a backoff of up to one second. If ln is
// closed by its owner instead, Serve returns an error wrapping
// net.ErrClosed: at once, or within a second when it accepts with accept4
// itself (a plain TCP listener with the idle poller on Linux, see
// accept_raw_linux.go), whose wait is not told of another's close.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.stopped || s.closing.Load() {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.listeners[ln] = nil
	s.reaperOnce.Do(func() {
		s.goLocked(s.reap)
		if s.cfg.Resume != nil {
			s.goLocked(s.rotate)
		}
		s.startPollerLocked()
	})
	s.mu.Unlock()
	if s.cfg.TCPFastOpen {
		s.enableFastOpen(ln) // fastopen_linux.go
	}
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
	}()
	if raw, err := s.serveRaw(ln); raw { // accept_raw_linux.go
		return err
	}

	// Options the accepted sockets inherit are set on the listener once.
	preset := s.cfg.SendBuffer == 0 || presetListener(ln, s.cfg)
	var backoff time.Duration
	for {
		conn, err := ln.Accept()
		if err != nil {
			if s.closing.Load() {
				return ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			if s.fds.spend(err) { // out of descriptors: a spare for this one
				continue
			}
			// None left but the server's own: refused at the door, if the
			// listener can be asked without waiting (else, and when none
			// waits, the backoff).
			if tl, ok := ln.(*net.TCPListener); ok && outOfFDs(err) {
				if refused, _ := s.refuseAtDoor(func() bool { return refuseTCP(tl) }); refused {
					continue
				}
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("accept failed; retrying", "err", err, "backoff", backoff)
			select {
			case <-time.After(backoff):
			case <-s.done:
				return ErrServerClosed
			}
			continue
		}
		backoff = 0
		s.fds.topUp()
		if tc, ok := conn.(*net.TCPConn); ok && !preset {
			tc.SetWriteBuffer(s.cfg.SendBuffer) // best effort: the default only costs memory
		}
		if conn = s.admit(conn); conn != nil { // per-address cap, TLS (security.go)
			s.accept(conn)
		}
	}
}

// refuseTCP accepts a connection waiting on tl and closes it at once;
// false if none came within a millisecond.
func refuseTCP(tl *net.TCPListener) bool {
	tl.SetDeadline(time.Now().Add(time.Millisecond))
	c, err := tl.Accept()
	tl.SetDeadline(time.Time{})
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// startPollerLocked starts the idle poller, unless parking is off. Without
// it every session keeps its reader goroutine, which is correct, only
// larger. mu must be held.
func (s *Server) startPollerLocked() {
	if !s.cfg.ParkIdle {
		return
	}
	p, err := newIdlePoller(s)
	if err != nil {
		s.log.Warn("idle sessions keep their goroutines", "err", err)
		return
	}
	if p == nil {
		return // not available on this platform
	}
	s.poller = p
	s.goLocked(p.run)
}

// connsHoldersFirstLocked is every open connection, the holders of
// version 3 first, then the other holders, then the rest: a planned stop
// tells those whose deadlines run first. mu must be held.
func (s *Server) connsHoldersFirstLocked(now time.Time) []*session {
	var first, holders, rest []*session
	for c := range s.conns {
		held := false
		if c.inTable {
			in, ok := s.table.Session(now, c.id)
			held = ok && in.Held
		}
		switch {
		case held && c.v3 != nil:
			first = append(first, c)
		case held:
			holders = append(holders, c)
		default:
			rest = append(rest, c)
		}
	}
	return append(append(first, holders...), rest...)
}

// accept registers conn and gives it to the idle poller, whose shard reads
// its ACQUIRE, or starts its reader; or closes it at once when the server
// is shutting down or flooded far past its session limit.
func (s *Server) accept(conn net.Conn) {
	s.mu.Lock()
	if int(s.open.Load()) >= s.maxConns {
		s.mu.Unlock()
		if !s.roomForOne() { // a TLS handshake in progress cut for it (tlsgate.go)
			s.m.refusedConns.Inc()
			conn.Close() // no ERROR: reading the ACQUIRE would cost a goroutine per flooding connection
			return
		}
		s.mu.Lock()
	}
	s.nextID++
	c := newSession(s, s.nextID, conn)
	if s.stopped {
		s.mu.Unlock()
		conn.Close()
		return
	}
	s.conns[c] = struct{}{}
	s.m.connections.Inc()
	s.open.Add(1)
	if !c.poll.Bound() {
		s.wg.Add(1)
		go s.serveSession(c) // not goLocked: a go statement with arguments allocates no closure
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	if s.poller.adopt(c) { // outside mu: it costs an epoll_ctl
		return
	}
	s.mu.Lock()
	if !s.goLocked(c.serve) { // stopped: its end found it unparked already
		c.conn.Close()
		s.m.connections.Dec()
		s.open.Add(-1)
	}
	s.mu.Unlock()
}

// serveSession is a session's first reader, one of the server's goroutines
// (see goLocked).
func (s *Server) serveSession(c *session) {
	defer s.wg.Done()
	c.serve()
}

// Shutdown stops the server: Ready turns false, the listeners close, every
// session is told ERROR SHUTDOWN and closed, and Shutdown waits under ctx
// for every goroutine of the server to end. If ctx ends first, the
// remaining connections are closed abruptly and ctx's error is returned.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutdownOnce.Do(s.stop)
	idle := make(chan struct{})
	go func() { // ends when the last server goroutine has ended
		s.wg.Wait()
		close(idle)
	}()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		for _, c := range s.stopping {
			if c.version == wire.Version3 {
				resetConn(c.conn) // no clean end: its client must not resume on it
				continue
			}
			c.conn.Close()
		}
		s.mu.Unlock()
		<-idle
		return ctx.Err()
	}
}

// stop is the first part of Shutdown, done once: refuse new work, tell
// every session, and let no new goroutine start.
func (s *Server) stop() {
	s.closing.Store(true)
	s.mu.Lock()
	for ln, wake := range s.listeners {
		ln.Close()
		if wake != nil {
			wake()
		}
	}
	now := s.now()
	// With version 3, a planned handover to the next start: the claims are
	// listed at this instant, when confirmations stop (closing is set, and
	// every session ends below in this hold of mu).
	if s.cfg.Resume != nil && s.serving.Load() {
		s.list = s.takeListLocked(now)
	}
	// closing is set, so no waiter is pushed ACQUIRED on its way out.
	all := s.connsHoldersFirstLocked(now)
	for _, c := range all {
		s.endLocked(now, c, ReasonShutdown, "server shutting down")
	}
	s.startMu.Lock()
	s.stopped = true
	s.startMu.Unlock()
	s.events.wakeLocked() // readers then see ErrSubscriptionClosed
	s.stopping = all
	s.mu.Unlock()
	if s.poller != nil {
		s.poller.stop() // every session was unparked by its end above
	}
	s.reaperOnce.Do(func() {}) // a Serve after this does not start the reaper
	s.fds.close()
	close(s.done)
	s.stopCancel()
}

// timerSlack is how late a Go timer may fire: the runtime sleeps in
// epoll_wait, whose timeout is in whole milliseconds, so a timer lands up to
// a millisecond after its time. The reaper arms its timer this much early
// and sleeps the rest with sleepPrecisely, so that a lease ends within
// microseconds of its deadline, not up to a millisecond after it.
const timerSlack = time.Millisecond

// reap expires silent sessions, and moves on the queues the table left
// moving (see bulkStep), a step per hold of mu. It sleeps until the
// table's next deadline; a new session with an earlier deadline wakes it
// (heartbeats only move deadlines later, so they never need to), and so
// does a queue left moving.
func (s *Server) reap() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var fx effects
		s.mu.Lock()
		now := s.now()
		// Every push checks the leader lease first: an expiry promotes a
		// waiter, a queue moves on, the grace's end grants. A server that
		// may not serve (it just failed closed, or leads no term) has
		// ended every session with its term, and has nothing to wait for
		// until BeginTerm wakes the reaper with a new table.
		var (
			moving, ok bool
			next       time.Time
		)
		if s.mayServeLocked(now) {
			s.settleLocked(now, s.table.Expire(now, s.exits[:0]), &fx)
			if s.table.Moving() {
				s.settleLocked(now, s.table.Promote(now, s.exits[:0]), &fx)
			}
			s.checkServedLocked()
			moving = s.table.Moving()
			next, ok = s.table.NextDeadline()
		}
		if ok {
			s.armedFor = next
		} else {
			s.armedFor = time.Time{}
		}
		s.mu.Unlock()
		s.deliver(&fx)
		if moving {
			continue // the next step, once the others have had mu
		}

		if ok {
			// The timer counts the monotonic clock, which stops during a
			// suspend: it can fire late, never early. What is overdue after
			// a suspend ends at the first look, whoever looks (a frame of
			// the session, an ACQUIRE, this loop).
			wait := next.Sub(s.now())
			if wait <= timerSlack {
				// Closer than a timer's resolution: sleep the rest with a
				// precise clock, then expire.
				sleepPrecisely(wait)
				continue
			}
			timer.Reset(wait - timerSlack)
		} else {
			timer.Stop()
		}
		select {
		case <-timer.C:
		case <-s.reaperWake:
		case <-s.done:
			return
		}
	}
}

// settleLocked applies the exits of a table call made for no session's own
// end (an expiry, an operator's action, the overdue sessions an ACQUIRE
// cleared) into fx, which the caller delivers. exits is the s.exits
// scratch; it is cleared and kept for the next call. mu must be held.
func (s *Server) settleLocked(now time.Time, exits []locktable.Exit, fx *effects) {
	s.applyExitsLocked(now, exits, 0, fx)
	clear(exits)
	s.exits = exits[:0]
}

// wakeReaperLocked makes the reaper look again if deadline is earlier than
// the one it sleeps for. mu must be held.
func (s *Server) wakeReaperLocked(deadline time.Time) {
	if s.armedFor.IsZero() || deadline.Before(s.armedFor) {
		s.armedFor = deadline
		select {
		case s.reaperWake <- struct{}{}:
		default:
		}
	}
}

// effects collects what the sessions changed while mu was held are owed,
// so that it is done after mu is released (see deliver).
type effects struct {
	// flush are the promoted sessions whose push is still queued.
	flush []*session
	// ended are the sessions ended, to be taken from the idle poller and
	// given their ERROR.
	ended []*session
	// pushed counts the pushes written under mu (see pushesUnderMu).
	pushed int
	// self is the session whose own reader (or the poller's shard, for it)
	// is ending it: that caller delivers its end itself.
	self *session
}

// pushesUnderMu is how many promotion pushes one hold of mu writes at once
// (without waiting, when the socket takes them): a handover's push, which
// the new holder waits for, goes out before the rest of the release's
// bookkeeping, and a mass promotion's pushes wait for mu's release.
const pushesUnderMu = 4

// deliver does what fx collected: the pushes first (the handovers), each
// written without waiting, then the ended sessions: a parked one is taken
// from the idle poller and gets a reader, which writes its ERROR and
// closes it; another gets a flusher for its ERROR (its reader is woken by
// it). A push the socket cannot take at once gets a flusher too. Callers
// hold mu only when they end every session (Shutdown, a lost term);
// others call it once mu is released, so that a release of many sessions
// holds up nobody for their system calls.
func (s *Server) deliver(fx *effects) {
	var readers, writers []*session
	for _, p := range fx.flush {
		if !p.poll.Bound() || !p.writeNow() {
			writers = append(writers, p)
		}
	}
	for _, c := range fx.ended {
		switch {
		case s.poller != nil && s.poller.unpark(c):
			readers = append(readers, c)
		case c.reason.code() != 0:
			writers = append(writers, c)
		}
	}
	if len(readers)+len(writers) > 0 {
		s.startMu.Lock()
		for _, c := range readers {
			if !s.goLocked(c.resume) {
				c.conn.Close() // stopped: Shutdown closes what is left
			}
		}
		for _, c := range writers {
			s.goLocked(c.flush)
		}
		s.startMu.Unlock()
	}
	clear(fx.flush)
	clear(fx.ended)
	fx.flush, fx.ended, fx.pushed = fx.flush[:0], fx.ended[:0], 0
}

// endLocked ends session c for reason, for a caller that ends every
// session (Shutdown, a lost term) or cannot block on sockets: c leaves the
// table (promoting the next waiter if it held the lock) and gets an ERROR
// if the reason has a code, and the writes happen in new goroutines. A
// session's own reader ends it with endOneLocked and writes itself (see
// session.end). mu must be held.
func (s *Server) endLocked(now time.Time, c *session, reason EndReason, msg string) {
	var fx effects
	s.endOneLocked(now, c, reason, msg, &fx)
	s.deliver(&fx)
}

func (s *Server) endOneLocked(now time.Time, c *session, reason EndReason, msg string, fx *effects) {
	if c.inTable && !c.ended {
		// Leaving the table may promote a waiter: a leader that may no
		// longer grant ends every session first (c among them).
		s.mayServeLocked(now)
	}
	if c.ended {
		return
	}
	c.ended = true
	c.reason = reason
	c.closing.Store(true)
	delete(s.conns, c)
	s.m.ended[reason].Inc()
	// The release first: a waiter's push is the handover, and goes out
	// before the rest of this bookkeeping (see promoteLocked).
	if c.inTable && c.v3 != nil && reason.broken() && s.detachLocked(now, c) {
		c.inTable = false
	}
	if c.inTable {
		c.inTable = false
		// Only this call releases from the table while its exits are in use
		// (ending an exit's session never releases again), so one scratch
		// slice serves every release.
		exits, _ := s.table.Release(now, c.id, s.releaseExits[:0])
		s.applyExitsLocked(now, exits, reason, fx)
		clear(exits)
		s.releaseExits = exits[:0]
	}
	if c != fx.self {
		fx.ended = append(fx.ended, c) // see deliver
	}
	if code := reason.code(); code != 0 {
		c.queueError(code, msg)
		if code.Class() == wire.ClassClient {
			if ctr := s.m.protocolErrors[code]; ctr != nil {
				ctr.Inc()
			}
		}
	}
	if s.log.Enabled(context.Background(), slog.LevelDebug) {
		s.log.Debug("session ended", "session", uint64(c.id), "remote", c.remote, "reason", reason.String())
	}
}

// applyExitsLocked brings the sessions of the table's exits up to date:
// counts them, ends those the table ended (expiry, force-release, kick),
// and queues the promotion push for each new holder, in queue order. cause
// is the reason of the session the caller itself is ending (0 if none). mu
// must be held.
func (s *Server) applyExitsLocked(now time.Time, exits []locktable.Exit, cause EndReason, fx *effects) {
	for _, e := range exits {
		switch e.Cause {
		case locktable.CauseMoved:
			s.movedLocked(now, e, fx)
			continue
		case locktable.CauseRevoked:
			// A pending claim an operator released: it stays, with its
			// slot, until its time runs out.
			s.eventLocked(EventForceReleased, e.Session)
			continue
		}
		if e.Cause == locktable.CauseGraceEnded || e.Cause == locktable.CauseQueueMoved {
			// Nobody left: the grants go on with the handover that began
			// them (none for the grace's end).
			h, ok := s.moving[e.Lock]
			if !ok {
				h = handover{at: now}
			}
			for _, g := range e.Promoted {
				s.promoteLocked(now, g, h, fx)
			}
			for _, g := range e.Promoted {
				s.grantEventLocked(now, g)
			}
			s.stillMovingLocked(e, h)
			continue
		}
		// Counts before the pushes (the metrics are read without mu: they
		// never show the new holders beside the old one), the events after
		// them (read under mu, so their order is unchanged).
		switch {
		case e.Session.Pending:
			s.m.pending.Dec()
			if s.pendingIDs[e.Session.ID] {
				s.m.pendingLost.Inc() // its client never came back
			}
			delete(s.pendingIDs, e.Session.ID)
		case e.Session.Held:
			s.m.holding.Dec()
			s.m.series(e.Session.Name).hold.Observe(e.Session.Since.Seconds())
		default:
			s.m.waiting.Dec()
		}
		if len(s.detached) > 0 {
			delete(s.detached, e.Session.ID)
		}
		reason := cause
		switch e.Cause {
		case locktable.CauseExpired:
			reason = ReasonLeaseExpired
			if e.Session.Held {
				s.m.expiredHolding.Inc()
			} else {
				s.m.expiredWaiting.Inc()
			}
		case locktable.CauseForceReleased:
			reason = ReasonForceReleased
		case locktable.CauseKicked:
			reason = ReasonKicked
		case locktable.CauseSuperseded:
			reason = ReasonSuperseded
		case locktable.CauseOverloaded, locktable.CauseLimitOverruled:
			reason = ReasonOverloaded
		}
		// Every push of one exit is a grant at now: the caller asked
		// mayServeLocked(now) before the table call that made them.
		h := handover{reason: reason, at: now}
		for _, g := range e.Promoted {
			s.promoteLocked(now, g, h, fx)
		}
		c := s.sessions[e.Session.ID]
		if !s.listedEndLocked(e, c, cause) {
			s.exitEventLocked(e)
		}
		for _, g := range e.Promoted {
			s.grantEventLocked(now, g)
		}
		s.stillMovingLocked(e, h)
		delete(s.sessions, e.Session.ID)
		if c != nil {
			c.inTable = false
			if !c.ended {
				msg := reasonMessage(reason, e.Session)
				s.endOneLocked(now, c, reason, msg, fx)
			}
		}
	}
	s.m.locks.Set(float64(s.table.Locks()))
}

// listedEndLocked reports whether exit e is the end of a claim of version
// 3 that a planned stop or handover listed, on its session c ended by the
// stop (cause): the claim goes on at the next start or leader, so its end
// here is no release, and the event stream must not say it was. mu must
// be held.
func (s *Server) listedEndLocked(e locktable.Exit, c *session, cause EndReason) bool {
	return s.handingOver && e.Cause == locktable.CauseReleased && c != nil && c.v3 != nil &&
		(cause == ReasonShutdown || cause == ReasonNotLeader)
}

// handover is how a promotion began: how the session whose end made room
// ended (0 when there was none: the end of the grace period), and when.
type handover struct {
	reason EndReason
	at     time.Time
}

// stillMovingLocked keeps h for the lock of exit e while the table leaves
// its queue moving, and wakes the reaper to move it on; the first
// handover of a promotion in steps stays its handover. mu must be held.
func (s *Server) stillMovingLocked(e locktable.Exit, h handover) {
	if !e.Moving {
		if len(s.moving) > 0 {
			delete(s.moving, e.Lock)
		}
		return
	}
	if _, ok := s.moving[e.Lock]; !ok {
		s.moving[e.Lock] = h
	}
	select {
	case s.reaperWake <- struct{}{}:
	default:
	}
}

// promoteLocked counts the grant g of a waiter and queues its ACQUIRED
// push; h is the handover that made room. mu must be held.
//
// The push is the handover, so the first few of a hold (pushesUnderMu)
// are written here, under mu and before the caller's events and its
// session's end, when the socket takes them at once (it nearly always
// does): the new holder waits for nothing else. The caller's effects write
// the others once mu is released.
func (s *Server) promoteLocked(now time.Time, g locktable.Grant, h handover, fx *effects) {
	s.m.waiting.Dec()
	s.m.holding.Inc()
	s.m.series(g.Name).wait.Observe(g.Waited.Seconds())
	p := s.sessions[g.ID]
	if p == nil || p.ended || s.closing.Load() || !s.serving.Load() {
		return // ending too (as in shutdown): it must not hear ACQUIRED
	}
	s.m.grantPromotion.Inc()
	s.m.claimGrant(g.Shared)
	if ctr := s.m.handovers[h.reason]; ctr != nil {
		ctr.Inc()
	}
	p.queueAcquired(true, g.Token, h.at)
	if fx.pushed < pushesUnderMu && p.poll.Bound() && p.writeNow() {
		fx.pushed++
		return
	}
	fx.flush = append(fx.flush, p)
}

// movedLocked applies exit e of a claim that went on on another session
// (a resume): its old connection, if it has one, is ended with MOVED and
// releases nothing; a pending claim is counted back. The grants e made (a
// pending waiter at the head that came back may let the queue move) are
// pushed. mu must be held.
func (s *Server) movedLocked(now time.Time, e locktable.Exit, fx *effects) {
	if e.Session.Pending {
		s.m.pending.Dec()
		delete(s.pendingIDs, e.Session.ID)
	}
	h := handover{at: now}
	for _, g := range e.Promoted {
		s.promoteLocked(now, g, h, fx)
	}
	for _, g := range e.Promoted {
		s.grantEventLocked(now, g)
	}
	s.stillMovingLocked(e, h)
	c := s.sessions[e.Session.ID]
	delete(s.sessions, e.Session.ID)
	if c != nil {
		c.inTable = false
		if !c.ended {
			s.endOneLocked(now, c, ReasonMoved, "", fx)
		}
	}
}

// detachLocked keeps holder c of version 3, ended for a broken connection,
// in the table until its lease runs out: frozen (confirmed no more, never
// moved), with no connection, so that nothing is granted over it while
// its client, which may not have learnt of the end, may still believe. It
// reports false for a waiter, which leaves at once. mu must be held.
func (s *Server) detachLocked(now time.Time, c *session) bool {
	in, ok := s.table.Session(now, c.id)
	if !ok || !in.Held || in.Pending {
		return false
	}
	s.table.Freeze(c.id)
	delete(s.sessions, c.id)
	if s.detached == nil {
		s.detached = make(map[locktable.SessionID]time.Duration)
	}
	s.detached[c.id] = in.Lease
	return true
}

func reasonMessage(r EndReason, in locktable.Info) string {
	switch r {
	case ReasonLeaseExpired:
		return "no frame for the lease of " + in.Lease.String()
	case ReasonForceReleased:
		return "lock " + strconv.Quote(in.Name) + " force-released by an operator"
	case ReasonKicked:
		return "removed from the queue of " + strconv.Quote(in.Name) + " by an operator"
	}
	return r.String()
}
