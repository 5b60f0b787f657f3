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
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonlock/baton/clients/go/clock"
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
