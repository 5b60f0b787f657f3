package scenario

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/batonlock/baton/bench/internal/batonsys"
	"github.com/batonlock/baton/bench/internal/rawwire"
	"github.com/batonlock/baton/bench/internal/stats"
	"github.com/batonlock/baton/clients/go/wire"
)

// FailoverConfig sizes the failover scenario.
type FailoverConfig struct {
	Faults  int           // faults of each kind (kill -9, SIGTERM), alternating
	Names   int           // names with a holder and waiters at each fault
	Waiters int           // waiters per name
	Lease   time.Duration // every session's lease, so the lease bound B
	// Progress, if not nil, is called after each fault with its number
	// (from 1), its kind and the time to its first grant (0: none).
	Progress func(n int, kind string, firstGrant time.Duration)
}

// FaultResult is one kind of fault, over every time it was injected.
type FaultResult struct {
	Kind string `json:"kind"` // "kill -9" or "SIGTERM"
	// Elected runs from the signal to the first WAITING or ACQUIRED from a
	// node other than the old leader: a new leader serving (queueing).
	Elected stats.Summary `json:"elected"`
	// FirstGrant runs from the signal to the first ACQUIRED from a node
	// other than the old leader, for any name: the figure.
	FirstGrant stats.Summary `json:"first_grant"`
	// AllGranted runs from the signal until every name had a new holder.
	AllGranted stats.Summary `json:"all_granted"`
	// Leaderships counts, per fault, the leaders that committed an epoch
	// from the signal to the first grant (the epoch in the token's high
	// bits, against the old holder's): 1 is the one new leader; more means
	// a new leader lost its leadership during its grace and the next
	// started a grace of its own. MultiLeader is the number of faults
	// with more than one; OneLeader the first-grant times of the others.
	MultiLeader int           `json:"multi_leader"`
	OneLeader   stats.Summary `json:"first_grant_one_leader"`
	// MultiLeaderLog is what the surviving nodes logged about leadership
	// in the last fault with a second new leader: why the first lost it.
	MultiLeaderLog string `json:"multi_leader_log,omitempty"`
	// SlowestLog is the same for the fault with the slowest first grant,
	// the old leader's last words included.
	SlowestLog string `json:"slowest_log,omitempty"`
	// Backwards counts grants whose token was not above the old holder's
	// for the name (fencing tokens going back: must stay 0).
	Backwards int    `json:"backwards"`
	Failed    int    `json:"failed"` // faults after which some name got no holder
	LastError string `json:"last_error,omitempty"`
}

// FailoverResult is the failover scenario on one cluster.
type FailoverResult struct {
	Nodes   int           `json:"nodes"`
	Names   int           `json:"names"`
	Waiters int           `json:"waiters"`
	Lease   time.Duration `json:"lease_ns"`
	Kill    FaultResult   `json:"kill"`
	Term    FaultResult   `json:"term"`
	// SetupRetries counts faults set up again because the leader changed
	// (or refused a session) before the signal, with no fault injected:
	// on a loaded machine, a spurious election.
	SetupRetries   int    `json:"setup_retries"`
	LastSetupError string `json:"last_setup_error,omitempty"`
	// Samples is every fault, in order, for a closer look.
	Samples []FaultSample `json:"samples,omitempty"`
}

// FaultSample is one fault.
type FaultSample struct {
	Kind       string        `json:"kind"`
	Elected    time.Duration `json:"elected_ns"`
	FirstGrant time.Duration `json:"first_grant_ns"` // 0: no grant
	Leaders    int           `json:"leaders"`        // epochs from the old holder's to the first grant's
}

// Failover injects cfg.Faults kill -9s and as many SIGTERMs of the leader of
// cl, alternating. Before each, every one of cfg.Names names has a holder
// and cfg.Waiters queued waiters on the leader, every session with lease
// cfg.Lease. The holders close on any ERROR (SHUTDOWN, NOT_LEADER), as
// every Baton client does; the waiters then look for the new leader among
// the nodes' client addresses (following NOT_LEADER's hint, else the next
// address after 1 to 3 ms) and queue again. The time runs from the signal
// to the waiters' receipt of frames from the new leader. After each fault
// the old leader is started again with its data directory, and the next
// fault waits for a healthy cluster (every node following one leader whose
// grace is over).
func Failover(ctx context.Context, cl *batonsys.Cluster, cfg FailoverConfig) (res FailoverResult, err error) {
	res = FailoverResult{Nodes: len(cl.Nodes), Names: cfg.Names, Waiters: cfg.Waiters, Lease: cfg.Lease,
		Kill: FaultResult{Kind: "kill -9"}, Term: FaultResult{Kind: "SIGTERM"}}
	var rec [2]struct{ elected, first, all, one stats.Recorder }
	defer func() { // what was measured, also when a fault stops the run
		for k, fr := range []*FaultResult{&res.Kill, &res.Term} {
			fr.Elected, fr.FirstGrant, fr.AllGranted = rec[k].elected.Summary(), rec[k].first.Summary(), rec[k].all.Summary()
			fr.OneLeader = rec[k].one.Summary()
		}
	}()
	setupFails := 0
	for i := 0; i < 2*cfg.Faults; i++ {
		if ctx.Err() != nil {
			break
		}
		kind := i % 2 // 0: kill -9, 1: SIGTERM
		fr := &res.Kill
		if kind == 1 {
			fr = &res.Term
		}
		o, old, err := oneFault(ctx, cl, cfg, kind == 0, i)
		if errors.Is(err, errSetup) {
			// The leader changed while the holders and waiters were
			// being set up (before any signal): try this fault again.
			res.SetupRetries++
			res.LastSetupError = err.Error()
			if setupFails++; setupFails > 5 {
				return res, fmt.Errorf("fault %d: set-up failed 6 times in a row: %w", i+1, err)
			}
			i--
			continue
		}
		setupFails = 0
		if err != nil {
			fr.Failed++
			fr.LastError = err.Error()
		}
		if o != nil {
			// The logs first: the old leader's last words go when it is
			// started again.
			if o.leaders > 1 {
				fr.MultiLeader++
				fr.MultiLeaderLog = leadershipLog(cl, old, o.since)
			} else if o.first > 0 {
				rec[kind].one.Add(o.first)
			}
			if o.first > 0 && o.first >= rec[kind].first.Summary().Max {
				fr.SlowestLog = leadershipLog(cl, nil, o.since)
			}
			res.Samples = append(res.Samples, FaultSample{Kind: fr.Kind, Elected: o.elected, FirstGrant: o.first, Leaders: o.leaders})
			fr.Backwards += o.backwards
			if o.elected > 0 {
				rec[kind].elected.Add(o.elected)
			}
			if o.first > 0 {
				rec[kind].first.Add(o.first)
			}
			if o.all > 0 {
				rec[kind].all.Add(o.all)
			}
		}
		if old != nil {
			// The old leader comes back with its data directory, as a
			// follower, whatever the fault measured.
			if err := cl.Start(ctx, old); err != nil {
				return res, fmt.Errorf("fault %d (%s): restarting %s: %w", i+1, fr.Kind, old.ID, err)
			}
		}
		if o == nil {
			return res, fmt.Errorf("fault %d (%s): %w", i+1, fr.Kind, err)
		}
		if cfg.Progress != nil {
			cfg.Progress(i+1, fr.Kind, o.first)
		}
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	if rec[0].first.Summary().N == 0 || rec[1].first.Summary().N == 0 {
		return res, fmt.Errorf("no grant after a fault (kill -9: %s; SIGTERM: %s)", res.Kill.LastError, res.Term.LastError)
	}
	return res, nil
}

// awaitNewHolders times the waiters' events (ev) from the signal at t0
// until every name has a new holder or 15 s have passed (why says how
// many names had none); tokens are the old holders'. out is nil when ctx
// ended first.
func awaitNewHolders(ctx context.Context, ev <-chan waiterEvent, tokens []uint64, t0 time.Time) (out *faultOutcome, why error) {
	out = &faultOutcome{since: t0}
	granted := make([]bool, len(tokens))
	left := len(tokens)
	timeout := time.After(15 * time.Second)
	for left > 0 {
		select {
		case e := <-ev:
			d := e.at.Sub(t0)
			if out.elected == 0 {
				out.elected = d
			}
			if !e.granted || granted[e.k] {
				continue
			}
			granted[e.k] = true
			left--
			if out.first == 0 {
				out.first = d
				out.leaders = int(e.token>>epochShift) - int(tokens[e.k]>>epochShift)
			}
			if e.token <= tokens[e.k] {
				out.backwards++
			}
			if left == 0 {
				out.all = d
			}
		case <-timeout:
			return out, fmt.Errorf("%d of %d names without a new holder 15s after the signal", left, len(tokens))
		case <-ctx.Done():
			return nil, nil
		}
	}
	return out, nil
}

// faultOutcome is what one fault measured.
type faultOutcome struct {
	elected, first, all time.Duration
	leaders             int // epochs from the old holder's token to the first grant's
	since               time.Time
	backwards           int
}

// oneFault runs one fault and returns what it measured and the node it
// stopped (nil if none), which the caller starts again. A nil outcome means
// the fault could not be measured at all: the scenario stops.
func oneFault(ctx context.Context, cl *batonsys.Cluster, cfg FailoverConfig, kill bool, seq int) (*faultOutcome, *batonsys.Node, error) {
	leader, err := cl.WaitHealthy(ctx, 30*time.Second)
	if err != nil {
		return nil, nil, err
	}
	var addrs []string
	for _, nd := range cl.Nodes {
		addrs = append(addrs, nd.Addr)
	}
	fctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()

	// The holders, one per name, on the leader.
	tokens := make([]uint64, cfg.Names)
	for k := range cfg.Names {
		name := fmt.Sprintf("failover-%d-%d", seq, k)
		h, tok, err := holdOn(fctx, leader.Addr, name, cfg.Lease)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: holder of %s on leader %s: %w", errSetup, name, leader.ID, err)
		}
		tokens[k] = tok
		wg.Add(1)
		go func() { defer wg.Done(); keepHolding(fctx, h, cfg.Lease) }()
	}
	// The waiters, queued on the leader before the fault.
	ev := make(chan waiterEvent, 4*cfg.Names*cfg.Waiters+16)
	queued := make(chan struct{}, cfg.Names*cfg.Waiters)
	for k := range cfg.Names {
		name := fmt.Sprintf("failover-%d-%d", seq, k)
		for range cfg.Waiters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w := &failoverWaiter{name: name, k: k, lease: cfg.Lease, addrs: addrs, old: leader.Addr, ev: ev, queued: queued}
				w.run(fctx)
			}()
		}
	}
	for range cfg.Names * cfg.Waiters {
		select {
		case <-queued:
		case <-time.After(5 * time.Second):
			return nil, nil, fmt.Errorf("%w: waiters not queued on leader %s within 5s", errSetup, leader.ID)
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}

	t0 := time.Now()
	sigErr := make(chan error, 1)
	go func() { // Term waits for the drain and the exit; the waiters time on
		if kill {
			sigErr <- cl.Kill(leader)
		} else {
			sigErr <- cl.Term(leader, 15*time.Second)
		}
	}()
	out, why := awaitNewHolders(ctx, ev, tokens, t0)
	if out == nil {
		<-sigErr
		return nil, leader, ctx.Err()
	}
	cancel()
	wg.Wait()
	if err := <-sigErr; err != nil {
		return out, leader, errors.Join(why, err)
	}
	return out, leader, why
}

// errSetup is a fault that could not be set up: no signal was sent.
var errSetup = errors.New("set-up before the fault")

// epochShift puts a token's epoch in its low bits: tokens are
// epoch<<40 | counter (package cluster).
const epochShift = 40

// holdOn takes name on addr with lease and returns the session and token.
func holdOn(ctx context.Context, addr, name string, lease time.Duration) (*rawwire.Conn, uint64, error) {
	c, err := rawwire.Dial(ctx, addr, nil)
	if err != nil {
		return nil, 0, err
	}
	if err := c.Acquire(name, lease, "bench-failover-holder"); err != nil {
		c.Close()
		return nil, 0, err
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	f, err := c.ReadFrame()
	if err == nil && f.Type != wire.TypeAcquired {
		err = fmt.Errorf("got %v %v, want ACQUIRED", f.Type, f.Err)
	}
	if err != nil {
		c.Close()
		return nil, 0, err
	}
	return c, f.Token, nil
}

// keepHolding heartbeats every lease/4 until ctx ends or the session ends
// (an ERROR: SHUTDOWN or NOT_LEADER; the connection gone), then closes.
func keepHolding(ctx context.Context, c *rawwire.Conn, lease time.Duration) {
	defer c.Close()
	for ctx.Err() == nil {
		c.SetReadDeadline(time.Now().Add(lease / 4))
		f, err := c.ReadFrame()
		if isTimeout(err) {
			if c.Heartbeat() != nil {
				return
			}
			continue
		}
		if err != nil || f.Err != nil {
			return
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// waiterEvent is a frame from a node other than the old leader.
type waiterEvent struct {
	k       int // the name's index
	at      time.Time
	granted bool
	token   uint64
}

// failoverWaiter wants name: it queues on the old leader, and after the
// fault looks for the new one.
type failoverWaiter struct {
	name   string
	k      int
	lease  time.Duration
	addrs  []string
	old    string // the old leader's client address
	ev     chan<- waiterEvent
	queued chan<- struct{}
}

func (w *failoverWaiter) run(ctx context.Context) {
	addr := w.old
	first := true
	for ctx.Err() == nil {
		next, done := w.session(ctx, addr, first)
		if done {
			return
		}
		first = false
		if next == "" || !slices.Contains(w.addrs, next) {
			next = w.addrs[(slices.Index(w.addrs, addr)+1)%len(w.addrs)]
		}
		// A short jittered pause before the next attempt, as docs/protocol.md
		// asks of clients; short, since it is in the figures.
		sleepCtx(ctx, time.Millisecond+rand.N(2*time.Millisecond))
		addr = next
	}
}

// session is one connection to addr: it returns the address to try next
// (a NOT_LEADER hint, or "" for the next one), or done once granted (it
// then holds, heartbeating, until ctx ends).
func (w *failoverWaiter) session(ctx context.Context, addr string, first bool) (next string, done bool) {
	c, err := rawwire.Dial(ctx, addr, nil)
	if err != nil {
		return "", false
	}
	defer c.Close()
	if err := c.Acquire(w.name, w.lease, "bench-failover-waiter"); err != nil {
		return "", false
	}
	fresh := addr != w.old
	for ctx.Err() == nil {
		c.SetReadDeadline(time.Now().Add(w.lease / 4))
		f, err := c.ReadFrame()
		at := time.Now()
		if isTimeout(err) {
			if c.Heartbeat() != nil {
				return "", false
			}
			continue
		}
		if err != nil {
			return "", false
		}
		switch {
		case f.Err != nil:
			if f.Err.Code == wire.CodeNotLeader {
				return f.Err.Msg, false
			}
			return "", false
		case f.Type == wire.TypeWaiting:
			if first {
				first = false
				w.queued <- struct{}{}
			}
			if fresh {
				w.send(ctx, waiterEvent{k: w.k, at: at})
			}
		case f.Type == wire.TypeAcquired:
			if !fresh {
				// Granted by the old leader: only if its holder went
				// before the fault, which the holders do not do. The name
				// then counts as failed (no new holder).
				return "", true
			}
			w.send(ctx, waiterEvent{k: w.k, at: at, granted: true, token: f.Token})
			keepHolding(ctx, c, w.lease)
			return "", true
		}
	}
	return "", true
}

func (w *failoverWaiter) send(ctx context.Context, e waiterEvent) {
	select {
	case w.ev <- e:
	case <-ctx.Done():
	}
}

// leadershipLog is the lines about leadership and Raft's warnings that
// the nodes other than skip logged in their current (or, stopped, last)
// lives since the fault, at most 40. It is read before the old leader is
// started again.
func leadershipLog(cl *batonsys.Cluster, skip *batonsys.Node, since time.Time) string {
	stamp := since.UTC().Add(-time.Millisecond).Format("2006-01-02T15:04:05.000")
	var lines []string
	for _, nd := range cl.Nodes {
		if nd == skip {
			continue
		}
		for _, l := range strings.Split(nd.Log(), "\n") {
			if !strings.Contains(l, "leadership") && !strings.Contains(l, "raft:") {
				continue
			}
			// Both log formats start their time stamp with the date.
			if i := strings.Index(l, "2"); i >= 0 && len(l) >= i+len(stamp) && l[i:i+len(stamp)] < stamp {
				continue
			}
			lines = append(lines, nd.ID+": "+l)
		}
	}
	if len(lines) > 40 {
		lines = lines[:40]
	}
	return strings.Join(lines, "\n")
}
