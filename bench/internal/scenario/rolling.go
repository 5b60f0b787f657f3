package scenario

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/batonlock/baton/bench/internal/batonsys"
	"github.com/batonlock/baton/bench/internal/stats"
	baton "github.com/batonlock/baton/clients/go"
)

// The kinds of step of the rolling scenario.
const (
	StepFollower = "follower" // SIGTERM of a follower not restarted yet
	StepLeader   = "leader"   // SIGTERM of the leader: a planned handover
	StepCrash    = "crash"    // kill -9 of the leader
)

// RollingConfig sizes the rolling scenario.
type RollingConfig struct {
	Names   int           // names whose holder holds through every step
	Waiters int           // waiters queued on each of those names, in a known order
	Lease   time.Duration // every session's lease
	// Probes names change hands all along, among ProbeContenders clients
	// each, every grant held ProbeHold: their grants tell when the
	// cluster grants again after a step.
	Probes          int
	ProbeContenders int
	ProbeHold       time.Duration
	Hold            time.Duration // each waiter's hold, once granted after the steps
	Steps           []string      // StepFollower, StepLeader, StepCrash, in order
	Logf            func(string, ...any)
}

// RollingStep is one step: a node stopped and started again with its
// data directory. Every time runs from the signal.
type RollingStep struct {
	Kind string `json:"kind"`
	Node string `json:"node"`
	// Stopped: the process exited; Member: its /readyz?member is 200
	// again (it follows a leader); Healthy: every node follows one leader
	// whose grace is over.
	Stopped time.Duration `json:"stopped_ns"`
	Member  time.Duration `json:"member_ns"`
	Healthy time.Duration `json:"healthy_ns"`
	// ClaimsBack: then the new leader's baton_claims_pending is 0 (every
	// claim of a planned handover's list back, or its time up).
	ClaimsBack time.Duration `json:"claims_back_ns"`
	// FirstGrant is the first grant of a probe name after the signal;
	// LongestGap the longest time without any probe grant from the signal
	// until the cluster was healthy again (both 0: no probes).
	FirstGrant time.Duration `json:"first_grant_ns"`
	LongestGap time.Duration `json:"longest_gap_ns"`
	// NameGap is the longest time one probe name went without a grant,
	// from the signal until healthy: a name whose listed claim does not
	// come back waits for that claim's time to run out.
	NameGap time.Duration `json:"longest_name_gap_ns"`
	// Moves of the step's claims: holders (of the held names and the
	// probes') and waiters; LongestMove is the longest Moved.Took of a
	// holder: how long its claim was between two servers.
	HolderMoves int           `json:"holder_moves"`
	WaiterMoves int           `json:"waiter_moves"`
	LongestMove time.Duration `json:"longest_move_ns"`
	// MostUnconfirmed is the longest time any of the held names' holders
	// went without a confirmed frame (0.8 × lease - its time left, sampled
	// every 50 ms): a heartbeat interval when nothing moves.
	MostUnconfirmed time.Duration `json:"most_unconfirmed_ns"`
	Lost            int           `json:"holders_lost"` // of the held names, during the step
	// PlacesLost counts the held names' waiters that lost their place
	// during the step (their session ended, not moved: a reset) and
	// queued again at the end.
	PlacesLost int `json:"places_lost"`
	// The new leader's counters once healthy (since its start).
	Resumes        float64 `json:"leader_resumes"`
	ResumesRefused float64 `json:"leader_resumes_refused"`
	PendingLost    float64 `json:"leader_pending_claims_lost"`
}

// RollingResult is the rolling scenario.
type RollingResult struct {
	Nodes           int           `json:"nodes"`
	Names           int           `json:"names"`
	Waiters         int           `json:"waiters_per_name"`
	Lease           time.Duration `json:"lease_ns"`
	Probes          int           `json:"probes"`
	ProbeContenders int           `json:"probe_contenders"`
	Hold            time.Duration `json:"waiter_hold_ns"`
	Setup           time.Duration `json:"setup_ns"` // holders granted and every waiter queued
	Steps           []RollingStep `json:"steps"`
	// HoldersLost counts the held names' holders whose claim ended before
	// their release; LostEarly those of them that ended more than 100 ms
	// before their own deadline (not by its passing).
	HoldersLost int `json:"holders_lost"`
	LostEarly   int `json:"holders_lost_before_deadline"`
	// WaitersFailed counts waiters whose Acquire failed; PlacesLost
	// waiters that lost their place and queued again.
	PlacesLost    int `json:"places_lost"`
	WaitersFailed int `json:"waiters_failed"`
	// Checked over every grant (holders, waiters, probes): Overlaps are
	// two beliefs of a name at once, each from its grant's receipt to its
	// release's send or the loss's notice; TokensFell grants whose token
	// is not above the one before on the name; OutOfOrder names whose
	// waiters were not granted in their queue order.
	Grants     int `json:"grants"`
	Overlaps   int `json:"overlaps"`
	TokensFell int `json:"tokens_fell"`
	OutOfOrder int `json:"names_out_of_order"`
	// Drain runs from the holders' release until every waiter had held
	// and released.
	Drain time.Duration `json:"drain_ns"`
	// NextGrant runs, for each held name, from its holder's release to
	// its first waiter's grant.
	NextGrant stats.Summary `json:"next_grant"`
	// MovesAfter counts moves reported after the last step was over (a
	// waiter's move ends when its resume is answered, which may be its
	// grant).
	MovesAfter int `json:"moves_after_steps"`
	// SteadyUnconfirmed is MostUnconfirmed over the samples outside every
	// step: a heartbeat interval (lease / 4) and its round trip.
	SteadyUnconfirmed time.Duration `json:"steady_unconfirmed_ns"`
	ProbeErrors       int           `json:"probe_errors"`
	Problems          []string      `json:"problems,omitempty"` // the first few, for a look
}

// belief is one grant as its client saw it.
type belief struct {
	queue         int // place in the queue at the start; -1 the first holder; -2 a probe
	token         uint64
	granted, gone time.Time
	lost          error // why it ended before its release, or nil
	validUntil    time.Time
}

// participant is one client of the scenario: a Client of its own, every
// node's address, and the moves it reported.
type participant struct {
	c     *baton.Client
	name  string
	queue int

	mu    sync.Mutex
	moves []moveAt
	// placeLost: the times Acquire, while it waited, lost its session
	// and queued again (a new place, at the end).
	placeLost []time.Time
	lostWhy   []string
	lock      *baton.Lock
	b         belief
	wasted    bool // its Acquire failed
}

type moveAt struct {
	at time.Time
	m  baton.Moved
}

func newParticipant(addrs []string, lease time.Duration, name string, queue int, owner string) (*participant, error) {
	p := &participant{name: name, queue: queue}
	opts := []baton.Option{}
	if os.Getenv("BENCH_ROLLING_LOG") != "" { // the clients' own account of their moves
		opts = append(opts, baton.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, nil)).With("who", owner)))
	}
	c, err := baton.New(addrs, append(opts, baton.WithLease(lease), baton.WithOwner(owner),
		baton.WithMovedFunc(func(m baton.Moved) {
			p.mu.Lock()
			p.moves = append(p.moves, moveAt{time.Now(), m})
			p.mu.Unlock()
		}))...)
	if err != nil {
		return nil, err
	}
	p.c = c
	return p, nil
}

// acquire takes the name and records the grant; waiting, if not nil, is
// called once at the first WAITING.
func (p *participant) acquire(ctx context.Context, waiting func()) (*baton.Lock, error) {
	var once sync.Once
	l, err := p.c.Acquire(ctx, p.name, baton.WithRetryFunc(func(err error, _ time.Duration) {
		p.mu.Lock()
		p.placeLost = append(p.placeLost, time.Now())
		p.lostWhy = append(p.lostWhy, err.Error())
		p.mu.Unlock()
	}), baton.WithWaitingFunc(func(pos int) {
		if waiting != nil {
			once.Do(waiting)
		}
	}))
	now := time.Now()
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.lock = l
	p.b = belief{queue: p.queue, token: l.Token(), granted: now}
	p.mu.Unlock()
	context.AfterFunc(l.Context(), func() {
		at := time.Now()
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.lock == l && p.b.gone.IsZero() { // this grant, not released: lost
			p.b.gone = at
			p.b.lost = l.Err()
		}
	})
	return l, nil
}

// release sends the release; the belief ends at its send.
func (p *participant) release() belief {
	p.mu.Lock()
	if p.b.gone.IsZero() {
		p.b.gone = time.Now()
	}
	l := p.lock
	p.mu.Unlock()
	if l != nil {
		l.Release()
	}
	return p.belief()
}

func (p *participant) belief() belief {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.b
}

// Rolling runs the rolling scenario on the healthy cluster cl: Names
// holders, each with Waiters queued behind it in a known order, all held
// through cfg.Steps (each a node stopped and started again with its data
// directory, the next one only once the cluster is healthy again), while
// the probe names change hands all along. Then the holders release, the
// waiters are granted in turn, and every grant is checked.
func Rolling(ctx context.Context, cl *batonsys.Cluster, cfg RollingConfig) (RollingResult, error) {
	r := &rollingRun{ctx: ctx, cl: cl, cfg: cfg, logf: cfg.Logf,
		res: RollingResult{Nodes: len(cl.Nodes), Names: cfg.Names, Waiters: cfg.Waiters, Lease: cfg.Lease,
			Probes: cfg.Probes, ProbeContenders: cfg.ProbeContenders, Hold: cfg.Hold}}
	if r.logf == nil {
		r.logf = func(string, ...any) {}
	}
	err := r.run()
	return r.res, err
}

// rollingRun is one run of the rolling scenario: the cluster, the
// participants, and what they saw, filled in phase by phase.
type rollingRun struct {
	ctx  context.Context
	cl   *batonsys.Cluster
	cfg  RollingConfig
	logf func(string, ...any)
	res  RollingResult

	addrs []string        // the leader's first, then the others'
	wctx  context.Context // ends every participant's work
	wg    sync.WaitGroup  // every goroutine of the run
	wwg   sync.WaitGroup  // the waiters: granted, held, released
	t0    time.Time       // the setup's start

	holders []*participant
	waiters [][]*participant // of each held name, in queue order

	// The probes: every grant of their names, in the order received.
	problemsMu   sync.Mutex // problem is called from the probes' goroutines too
	probeMu      sync.Mutex
	probeGrants  []time.Time
	byName       map[string][]time.Time // the probe grants of each name
	probeBeliefs map[string][]belief
	probes       []*participant
	pwg          sync.WaitGroup

	// The sampler: each holder's time left to its deadline.
	sampMu    sync.Mutex
	samples   []unconfirmedSample
	lastValid []time.Time // of each holder, its last deadline seen
	sampWG    sync.WaitGroup

	restarted     map[*batonsys.Node]bool
	stoppedLogs   []string // each step's stopped node's log, its last life
	windows       [][2]time.Time
	holderBeliefs []belief // at the holders' release
}

// unconfirmedSample is the longest any holder went unconfirmed, at one
// time.
type unconfirmedSample struct {
	at          time.Time
	unconfirmed time.Duration
}

// problem keeps the first few problems, for a look.
func (r *rollingRun) problem(format string, args ...any) {
	r.problemsMu.Lock()
	defer r.problemsMu.Unlock()
	if len(r.res.Problems) < 40 {
		r.res.Problems = append(r.res.Problems, fmt.Sprintf(format, args...))
	}
}

// run runs the phases in order: setup, probes and sampler, the steps,
// the release and drain, the checks. Every claim ends when it returns,
// also after a failed step.
func (r *rollingRun) run() error {
	leader, err := r.cl.WaitHealthy(r.ctx, time.Minute)
	if err != nil {
		return err
	}
	r.addrs = []string{leader.Addr}
	for _, nd := range r.cl.Nodes {
		if nd != leader {
			r.addrs = append(r.addrs, nd.Addr)
		}
	}
	wctx, cancel := context.WithCancel(r.ctx)
	r.wctx = wctx
	defer func() { // also after a failed step: every claim ends
		cancel()
		for _, h := range r.holders {
			if h != nil {
				h.release()
			}
		}
		r.wg.Wait()
	}()

	if err := r.setup(); err != nil {
		return err
	}
	pctx, stopProbes := context.WithCancel(wctx)
	defer stopProbes()
	if err := r.startProbes(pctx); err != nil {
		return err
	}
	sctx, stopSampler := context.WithCancel(wctx)
	defer stopSampler()
	r.startSampler(sctx)

	r.restarted = map[*batonsys.Node]bool{}
	for i, kind := range r.cfg.Steps {
		if err := r.step(i, kind); err != nil {
			return err
		}
	}
	stopSampler()
	r.sampWG.Wait()

	if err := r.releaseAndDrain(stopProbes); err != nil {
		return err
	}
	r.checkGrants()
	r.stepFigures()
	return r.verdict()
}

// setup grants the holders, then queues the waiters of each name one by
// one: each is queued (its first WAITING) before the next is sent, so the
// queue's order is known.
func (r *rollingRun) setup() error {
	r.t0 = time.Now()
	r.holders = make([]*participant, r.cfg.Names)
	r.waiters = make([][]*participant, r.cfg.Names)
	var setupErr error
	var setupMu sync.Mutex
	fail := func(err error) {
		setupMu.Lock()
		if setupErr == nil {
			setupErr = err
		}
		setupMu.Unlock()
	}
	var swg sync.WaitGroup
	for k := range r.cfg.Names {
		swg.Add(1)
		go func() {
			defer swg.Done()
			r.setupName(k, fail)
		}()
	}
	swg.Wait()
	r.res.Setup = time.Since(r.t0)
	if setupErr != nil {
		return fmt.Errorf("setting up: %w", setupErr)
	}
	r.logf("rolling: %d holders and %d waiters queued in %v", r.cfg.Names, r.cfg.Names*r.cfg.Waiters, r.res.Setup.Round(time.Millisecond))
	return nil
}

// setupName grants the holder of the k-th name and queues its waiters.
func (r *rollingRun) setupName(k int, fail func(error)) {
	name := fmt.Sprintf("rolling-%d", k)
	h, err := newParticipant(r.addrs, r.cfg.Lease, name, -1, fmt.Sprintf("holder-%d", k))
	if err != nil {
		fail(err)
		return
	}
	r.holders[k] = h
	actx, acancel := context.WithTimeout(r.wctx, 30*time.Second)
	_, err = h.acquire(actx, nil)
	acancel()
	if err != nil {
		fail(fmt.Errorf("holder of %s: %w", name, err))
		return
	}
	for j := range r.cfg.Waiters {
		if !r.queueWaiter(k, j, name, fail) {
			return
		}
	}
}

// queueWaiter sends the j-th waiter of the k-th name and waits until it
// is queued; its goroutine then holds the name once granted, for
// cfg.Hold, and releases. It reports whether the next waiter may follow.
func (r *rollingRun) queueWaiter(k, j int, name string, fail func(error)) bool {
	w, err := newParticipant(r.addrs, r.cfg.Lease, name, j, fmt.Sprintf("waiter-%d-%d", k, j))
	if err != nil {
		fail(err)
		return false
	}
	r.waiters[k] = append(r.waiters[k], w)
	queued := make(chan struct{})
	done := make(chan struct{})
	r.wwg.Add(1)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer r.wwg.Done()
		defer close(done)
		if _, err := w.acquire(r.wctx, func() { close(queued) }); err != nil {
			w.mu.Lock()
			w.wasted = true
			w.mu.Unlock()
			if r.wctx.Err() == nil {
				fail(fmt.Errorf("waiter %d of %s: %w", j, name, err))
			}
			return
		}
		select {
		case <-time.After(r.cfg.Hold):
		case <-r.wctx.Done():
		}
		w.release()
	}()
	select {
	case <-queued:
		return true
	case <-done:
		return false // granted at once, or failed: both show in the checks
	case <-time.After(30 * time.Second):
		fail(fmt.Errorf("waiter %d of %s not queued within 30 s", j, name))
		return false
	case <-r.wctx.Done():
		return false
	}
}
