package scenario

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
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
func Rolling(ctx context.Context, cl *batonsys.Cluster, cfg RollingConfig) (res RollingResult, err error) {
	res = RollingResult{Nodes: len(cl.Nodes), Names: cfg.Names, Waiters: cfg.Waiters, Lease: cfg.Lease,
		Probes: cfg.Probes, ProbeContenders: cfg.ProbeContenders, Hold: cfg.Hold}
	logf := cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	problem := func(format string, args ...any) {
		if len(res.Problems) < 40 {
			res.Problems = append(res.Problems, fmt.Sprintf(format, args...))
		}
	}
	leader, err := cl.WaitHealthy(ctx, time.Minute)
	if err != nil {
		return res, err
	}
	addrs := []string{leader.Addr}
	for _, nd := range cl.Nodes {
		if nd != leader {
			addrs = append(addrs, nd.Addr)
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var holders []*participant
	defer func() { // also after a failed step: every claim ends
		cancel()
		for _, h := range holders {
			if h != nil {
				h.release()
			}
		}
		wg.Wait()
	}()

	// The holders, then the waiters of each name one by one: each is
	// queued (its first WAITING) before the next is sent, so the queue's
	// order is known.
	t0 := time.Now()
	holders = make([]*participant, cfg.Names)
	waiters := make([][]*participant, cfg.Names)
	var setupErr error
	var setupMu sync.Mutex
	var swg sync.WaitGroup
	var wwg sync.WaitGroup // the waiters: granted, held, released
	for k := range cfg.Names {
		swg.Add(1)
		go func() {
			defer swg.Done()
			fail := func(err error) {
				setupMu.Lock()
				if setupErr == nil {
					setupErr = err
				}
				setupMu.Unlock()
			}
			name := fmt.Sprintf("rolling-%d", k)
			h, err := newParticipant(addrs, cfg.Lease, name, -1, fmt.Sprintf("holder-%d", k))
			if err != nil {
				fail(err)
				return
			}
			holders[k] = h
			actx, acancel := context.WithTimeout(wctx, 30*time.Second)
			_, err = h.acquire(actx, nil)
			acancel()
			if err != nil {
				fail(fmt.Errorf("holder of %s: %w", name, err))
				return
			}
			for j := range cfg.Waiters {
				w, err := newParticipant(addrs, cfg.Lease, name, j, fmt.Sprintf("waiter-%d-%d", k, j))
				if err != nil {
					fail(err)
					return
				}
				waiters[k] = append(waiters[k], w)
				queued := make(chan struct{})
				done := make(chan struct{})
				wwg.Add(1)
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer wwg.Done()
					defer close(done)
					if _, err := w.acquire(wctx, func() { close(queued) }); err != nil {
						w.mu.Lock()
						w.wasted = true
						w.mu.Unlock()
						if wctx.Err() == nil {
							fail(fmt.Errorf("waiter %d of %s: %w", j, name, err))
						}
						return
					}
					select {
					case <-time.After(cfg.Hold):
					case <-wctx.Done():
					}
					w.release()
				}()
				select {
				case <-queued:
				case <-done:
					return // granted at once, or failed: both show in the checks
				case <-time.After(30 * time.Second):
					fail(fmt.Errorf("waiter %d of %s not queued within 30 s", j, name))
					return
				case <-wctx.Done():
					return
				}
			}
		}()
	}
	swg.Wait()
	res.Setup = time.Since(t0)
	if setupErr != nil {
		return res, fmt.Errorf("setting up: %w", setupErr)
	}
	logf("rolling: %d holders and %d waiters queued in %v", cfg.Names, cfg.Names*cfg.Waiters, res.Setup.Round(time.Millisecond))

	// The probes: every grant of their names, in the order received.
	var probeMu sync.Mutex
	var probeGrants []time.Time
	byName := map[string][]time.Time{} // the probe grants of each name
	probeBeliefs := map[string][]belief{}
	var probes []*participant
	pctx, stopProbes := context.WithCancel(wctx)
	defer stopProbes()
	var pwg sync.WaitGroup
	for k := range cfg.Probes {
		name := fmt.Sprintf("rolling-probe-%d", k)
		for j := range cfg.ProbeContenders {
			p, err := newParticipant(addrs, cfg.Lease, name, -2, fmt.Sprintf("probe-%d-%d", k, j))
			if err != nil {
				return res, err
			}
			probes = append(probes, p)
			pwg.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer pwg.Done()
				for pctx.Err() == nil {
					if _, err := p.acquire(pctx, nil); err != nil {
						if pctx.Err() == nil {
							probeMu.Lock()
							res.ProbeErrors++
							probeMu.Unlock()
							problem("probe %s: %v", name, err)
							pause(pctx, 50*time.Millisecond)
						}
						continue
					}
					g := p.belief().granted
					probeMu.Lock()
					probeGrants = append(probeGrants, g)
					byName[name] = append(byName[name], g)
					probeMu.Unlock()
					pause(pctx, cfg.ProbeHold)
					b := p.release()
					probeMu.Lock()
					probeBeliefs[name] = append(probeBeliefs[name], b)
					probeMu.Unlock()
				}
			}()
		}
	}

	// The sampler: each holder's time left to its deadline.
	type sample struct {
		at          time.Time
		unconfirmed time.Duration
	}
	var sampMu sync.Mutex
	var samples []sample
	lastValid := make([]time.Time, cfg.Names)
	sctx, stopSampler := context.WithCancel(wctx)
	defer stopSampler()
	var sampWG sync.WaitGroup
	sampWG.Add(1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer sampWG.Done()
		deadline := cfg.Lease * 4 / 5
		for sctx.Err() == nil {
			now := time.Now()
			most := time.Duration(0)
			for k, h := range holders {
				h.mu.Lock()
				l := h.lock
				h.mu.Unlock()
				if l == nil || l.Err() != nil {
					continue
				}
				v := l.ValidUntil()
				if v.IsZero() {
					continue
				}
				sampMu.Lock()
				lastValid[k] = v
				sampMu.Unlock()
				most = max(most, deadline-v.Sub(now))
			}
			sampMu.Lock()
			samples = append(samples, sample{now, most})
			sampMu.Unlock()
			pause(sctx, 50*time.Millisecond)
		}
	}()

	// The steps.
	restarted := map[*batonsys.Node]bool{}
	var stoppedLogs []string // each step's stopped node's log, its last life
	var windows [][2]time.Time
	for i, kind := range cfg.Steps {
		leader, err := cl.WaitHealthy(ctx, time.Minute)
		if err != nil {
			return res, fmt.Errorf("before step %d: %w", i+1, err)
		}
		var nd *batonsys.Node
		switch kind {
		case StepFollower:
			for _, n := range cl.Nodes {
				if n != leader && !restarted[n] {
					nd = n
					break
				}
			}
			if nd == nil {
				return res, fmt.Errorf("step %d: every follower was restarted already", i+1)
			}
		case StepLeader, StepCrash:
			nd = leader
		default:
			return res, fmt.Errorf("step %d: unknown kind %q", i+1, kind)
		}
		restarted[nd] = true
		st := RollingStep{Kind: kind, Node: nd.ID}
		start := time.Now()
		if kind == StepCrash {
			err = cl.Kill(nd)
		} else {
			err = cl.Term(nd, 30*time.Second)
		}
		st.Stopped = time.Since(start)
		if err != nil {
			cl.Start(ctx, nd)
			return res, fmt.Errorf("step %d (%s of %s): %w", i+1, kind, nd.ID, err)
		}
		lastWords := nd.Log() // its log goes with the restart
		if err := cl.Start(ctx, nd); err != nil {
			return res, fmt.Errorf("step %d: starting %s again: %w", i+1, nd.ID, err)
		}
		for !cl.Member(ctx, nd) {
			if time.Since(start) > time.Minute {
				return res, fmt.Errorf("step %d: %s not following a leader within a minute of its restart", i+1, nd.ID)
			}
			if !pause(ctx, 10*time.Millisecond) {
				return res, ctx.Err()
			}
		}
		st.Member = time.Since(start)
		newLeader, err := cl.WaitHealthy(ctx, time.Minute)
		if err != nil {
			return res, fmt.Errorf("step %d: %w", i+1, err)
		}
		st.Healthy = time.Since(start)
		// Then until the new leader counts no claim of a planned
		// handover's list as pending (docs/operations.md's rolling upgrade,
		// step 4): every listed claim is back, or its time is up. Waiters
		// spread their return over up to lease / 8.
		for {
			m, err := batonsys.FetchMetrics(ctx, "http://"+newLeader.OpsAddr+"/metrics")
			if err == nil && m["baton_claims_pending"] == 0 {
				break
			}
			if time.Since(start) > 2*cfg.Lease+time.Minute {
				return res, fmt.Errorf("step %d: claims still pending on %s %v after the signal", i+1, newLeader.ID, time.Since(start).Round(time.Millisecond))
			}
			if !pause(ctx, 10*time.Millisecond) {
				return res, ctx.Err()
			}
		}
		st.ClaimsBack = time.Since(start)
		// A probe grant after the signal, if there are probes, before the
		// next step: the cluster grants again.
		for cfg.Probes > 0 {
			probeMu.Lock()
			n := len(probeGrants)
			last := time.Time{}
			if n > 0 {
				last = probeGrants[n-1]
			}
			probeMu.Unlock()
			if last.After(start) {
				break
			}
			if time.Since(start) > 2*time.Minute {
				return res, fmt.Errorf("step %d: no probe grant within 2 minutes of the signal", i+1)
			}
			if !pause(ctx, 10*time.Millisecond) {
				return res, ctx.Err()
			}
		}
		if m, err := batonsys.FetchMetrics(ctx, "http://"+newLeader.OpsAddr+"/metrics"); err == nil {
			st.Resumes, st.ResumesRefused, st.PendingLost = m["baton_resumes_total"], m["baton_resumes_refused_total"], m["baton_pending_claims_lost_total"]
		}
		res.Steps = append(res.Steps, st)
		windows = append(windows, [2]time.Time{start, time.Now()})
		stoppedLogs = append(stoppedLogs, lastWords)
		logf("  step %d: %s %s: stopped in %v, following again after %v, cluster healthy after %v (leader %s), no claim pending after %v",
			i+1, kind, nd.ID, st.Stopped.Round(time.Millisecond), st.Member.Round(time.Millisecond), st.Healthy.Round(time.Millisecond), newLeader.ID,
			st.ClaimsBack.Round(time.Millisecond))
	}
	stopSampler()
	sampWG.Wait()

	// The holders held through every step: now they release, at once,
	// and the waiters drain in their queue order.
	stopProbes()
	pwg.Wait()
	drain := time.Now()
	holderBeliefs := make([]belief, cfg.Names)
	var rwg sync.WaitGroup
	for k, h := range holders {
		rwg.Add(1)
		go func() { defer rwg.Done(); holderBeliefs[k] = h.release() }()
	}
	rwg.Wait()
	drained := make(chan struct{})
	go func() { wwg.Wait(); close(drained) }()
	select {
	case <-drained:
		res.Drain = time.Since(drain)
	case <-time.After(2 * time.Minute):
		problem("waiters not drained within 2 minutes of the holders' release")
	case <-ctx.Done():
		return res, ctx.Err()
	}

	// The checks.
	var next stats.Recorder
	defer func() { res.NextGrant = next.Summary() }()
	for k := range cfg.Names {
		hb := holderBeliefs[k]
		if hb.lost != nil {
			res.HoldersLost++
			early := !lastValid[k].IsZero() && hb.gone.Before(lastValid[k].Add(-100*time.Millisecond))
			if early {
				res.LostEarly++
			}
			problem("holder of rolling-%d lost its claim %v after the start (before its deadline: %v): %v", k, hb.gone.Sub(t0).Round(time.Millisecond), early, hb.lost)
		}
		bs := []belief{hb}
		for _, w := range waiters[k] {
			w.mu.Lock()
			if w.wasted {
				res.WaitersFailed++
			}
			if len(w.placeLost) > 0 {
				res.PlacesLost++
				problem("waiter %d of rolling-%d lost its place %v after the start: %s", w.queue, k, w.placeLost[0].Sub(t0).Round(time.Millisecond), w.lostWhy[0])
			}
			w.mu.Unlock()
			if b := w.belief(); !b.granted.IsZero() {
				bs = append(bs, b)
			}
		}
		slices.SortFunc(bs, func(a, b belief) int { return a.granted.Compare(b.granted) })
		if len(bs) > 1 && bs[0].queue == -1 && bs[1].granted.After(hb.gone) {
			next.Add(bs[1].granted.Sub(hb.gone))
		}
		for i, b := range bs {
			if i > 0 && b.queue < bs[i-1].queue {
				res.OutOfOrder++
				problem("rolling-%d: waiter %d granted after waiter %d", k, b.queue, bs[i-1].queue)
				break
			}
		}
		res.check(fmt.Sprintf("rolling-%d", k), bs, problem)
	}
	for name, bs := range probeBeliefs {
		slices.SortFunc(bs, func(a, b belief) int { return a.granted.Compare(b.granted) })
		res.check(name, bs, problem)
	}

	// What each step saw.
	for _, sm := range samples {
		inStep := false
		for _, w := range windows {
			if !sm.at.Before(w[0]) && sm.at.Before(w[1]) {
				inStep = true
			}
		}
		if !inStep {
			res.SteadyUnconfirmed = max(res.SteadyUnconfirmed, sm.unconfirmed)
		}
	}
	if len(windows) > 0 {
		end := windows[len(windows)-1][1]
		for _, p := range append(append(slices.Clone(holders), probes...), flatten(waiters)...) {
			p.mu.Lock()
			for _, m := range p.moves {
				if m.at.After(end) {
					res.MovesAfter++
				}
			}
			p.mu.Unlock()
		}
	}
	for i := range res.Steps {
		st := &res.Steps[i]
		from, to := windows[i][0], windows[i][1]
		in := func(t time.Time) bool { return !t.Before(from) && t.Before(to) }
		for _, p := range append(append(slices.Clone(holders), probes...), flatten(waiters)...) {
			p.mu.Lock()
			for _, m := range p.moves {
				if !in(m.at) {
					continue
				}
				if m.m.Held {
					st.HolderMoves++
					st.LongestMove = max(st.LongestMove, m.m.Took)
				} else {
					st.WaiterMoves++
				}
			}
			p.mu.Unlock()
		}
		for _, hb := range holderBeliefs {
			if hb.lost != nil && in(hb.gone) {
				st.Lost++
			}
		}
		for _, w := range flatten(waiters) {
			w.mu.Lock()
			for _, at := range w.placeLost {
				if in(at) {
					st.PlacesLost++
					break
				}
			}
			w.mu.Unlock()
		}
		if st.Lost > 0 || st.PlacesLost > 0 {
			logf("  step %d lost %d claims and %d places; the log of %s's life it ended, the end:\n%s", i+1, st.Lost, st.PlacesLost, st.Node, lastLines(stoppedLogs[i], 40))
		}
		for _, s := range samples {
			if in(s.at) {
				st.MostUnconfirmed = max(st.MostUnconfirmed, s.unconfirmed)
			}
		}
		if cfg.Probes > 0 {
			last := from
			for _, g := range probeGrants {
				if g.Before(from) {
					continue
				}
				if st.FirstGrant == 0 {
					st.FirstGrant = g.Sub(from)
				}
				if g.After(to) {
					break
				}
				st.LongestGap = max(st.LongestGap, g.Sub(last))
				last = g
			}
			for _, gs := range byName {
				last := from
				for _, g := range gs {
					if g.Before(from) {
						continue
					}
					if g.After(to) {
						break
					}
					st.NameGap = max(st.NameGap, g.Sub(last))
					last = g
				}
				st.NameGap = max(st.NameGap, to.Sub(last)) // none since
			}
		}
	}
	// Safety fails the run always; a claim or a place lost in a planned
	// step too. A kill -9 resets the connections that had unread bytes,
	// and a reset is a loss by the protocol's rule: counted, not failed.
	planned := func(st RollingStep) bool { return st.Kind != StepCrash }
	lostPlanned, placesPlanned, crashPlaces := 0, 0, 0
	for _, st := range res.Steps {
		if planned(st) {
			lostPlanned += st.Lost
			placesPlanned += st.PlacesLost
		} else {
			crashPlaces += st.PlacesLost
		}
	}
	switch {
	case res.Overlaps > 0 || res.TokensFell > 0 || res.WaitersFailed > 0:
		return res, fmt.Errorf("%d overlaps, %d tokens not rising, %d waiters failed; first: %v", res.Overlaps, res.TokensFell, res.WaitersFailed, res.Problems)
	case lostPlanned > 0 || placesPlanned > 0:
		return res, fmt.Errorf("a planned step lost %d holders' claims and %d waiters' places; first: %v", lostPlanned, placesPlanned, res.Problems)
	case res.OutOfOrder > res.PlacesLost:
		return res, fmt.Errorf("%d names out of queue order, but only %d waiters lost their place; first: %v", res.OutOfOrder, res.PlacesLost, res.Problems)
	case res.Drain == 0:
		return res, errors.New("the waiters did not drain")
	}
	return res, nil
}

// check counts the overlaps and falling tokens of one name's beliefs,
// sorted by grant.
func (res *RollingResult) check(name string, bs []belief, problem func(string, ...any)) {
	res.Grants += len(bs)
	var last belief // the belief that ends last of those before b
	for i, b := range bs {
		if i > 0 && b.granted.Before(last.gone) {
			res.Overlaps++
			problem("%s: token %d granted %v before token %d stopped believing", name, b.token, last.gone.Sub(b.granted), last.token)
		}
		if i == 0 || b.gone.After(last.gone) {
			last = b
		}
		if i == 0 {
			continue
		}
		if prev := bs[i-1]; b.token <= prev.token {
			res.TokensFell++
			problem("%s: token %d granted after token %d", name, b.token, prev.token)
		}
	}
}

func flatten(ps [][]*participant) []*participant {
	var out []*participant
	for _, p := range ps {
		out = append(out, p...)
	}
	return out
}

// pause sleeps d, or less if ctx ends; it reports whether ctx is live.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
