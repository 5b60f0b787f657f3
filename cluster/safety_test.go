package cluster

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/server"
)

// The regression tests of the grace's safety: each scenario let two
// clients hold one lock at once before the grace became replicated state.

// holdOn takes name on tn with lease and returns the holder's connection.
func holdOn(t *testing.T, tn *testNode, name string, lease time.Duration) *batontest.Conn {
	t.Helper()
	conn, got := acquire(t, tn.addr, name, lease, false)
	for got.Type == wire.TypeWaiting { // the first leader's short grace
		got = conn.ReadFrame(10 * time.Second)
	}
	if got.Type != wire.TypeAcquired {
		t.Fatalf("ACQUIRE %q on %s: got %v, want ACQUIRED", name, tn.id, got)
	}
	return conn
}

// isolate cuts tn's Raft links both ways.
func (c *testCluster) isolate(tn *testNode) {
	tn.trans.DisconnectAll()
	for _, o := range c.nodes {
		o.trans.Disconnect(raft.ServerAddress(tn.id))
	}
}

// leaderExcept waits for a serving leader other than the nodes in not.
func (c *testCluster) leaderExcept(not ...*testNode) *testNode {
	c.t.Helper()
	var l *testNode
	batontest.Eventually(c.t, settle, func() bool {
	next:
		for _, tn := range c.nodes {
			for _, n := range not {
				if tn == n {
					continue next
				}
			}
			if tn.srv != nil && tn.node.Leading() {
				l = tn
				return true
			}
		}
		return false
	}, "no serving leader other than the excluded nodes")
	return l
}

// TestHandoverInsideGraceCarriesIt: a leader still inside the grace it
// inherited from a crashed leader, stopped with a planned handover, hands
// the rest of that grace on: it has no holder of its own, but the crashed
// leader's holder may still believe.
func TestHandoverInsideGraceCarriesIt(t *testing.T) {
	const lease = 30 * time.Second
	c := newTestCluster(t, 3)
	a := c.leader()
	x := holdOn(t, a, "jobs", lease)
	defer x.Conn.Close()
	c.isolate(a) // a's holder keeps believing: a is only cut off from Raft
	b := c.leaderExcept(a)
	if g := b.srv.GraceRemaining(); g < lease-5*time.Second {
		t.Fatalf("leader after the cut: grace %v, want about %v", g, lease)
	}
	time.Sleep(500 * time.Millisecond)
	// A leadership lost during the drain (a loaded machine) fails the
	// commit: the next leader then takes the crash grace, which must
	// cover the holders just the same.
	if err := b.node.Handover(); err != nil && !errors.Is(err, server.ErrNotLeader) {
		t.Fatalf("handover inside the grace: %v", err)
	}
	next := c.leaderExcept(a, b)
	if g := next.srv.GraceRemaining(); g < lease-5*time.Second {
		t.Fatalf("leader after a handover inside the grace: grace %v, want about %v (the crashed leader's holder may believe until then)", g, lease)
	}
	_, got := acquire(t, next.addr, "jobs", time.Second, true)
	wantError(t, got, wire.CodeBusy)
}

// TestBoundNotLoweredInGrace: a new leader whose own table is empty does
// not lower the lease bound while its grace runs: the old leader's
// holders need all of it at the next failover too.
func TestBoundNotLoweredInGrace(t *testing.T) {
	const lease = 30 * time.Second
	c := newTestCluster(t, 3)
	a := c.leader()
	x := holdOn(t, a, "jobs", lease)
	defer x.Conn.Close()
	c.isolate(a)
	b := c.leaderExcept(a)
	// Ten looks at lowering (BoundLowerEvery is 200 ms in tests).
	time.Sleep(10 * testConfig("x").BoundLowerEvery)
	if bound := b.node.bound(); bound != lease {
		t.Fatalf("lease bound %v inside the grace, want %v kept", bound, lease)
	}
	if v := b.node.View(); v.LeaseBound != lease {
		t.Fatalf("view's lease bound %v, want %v", v.LeaseBound, lease)
	}
}

// TestDrainGivingUpHandsOffTheBound: a holder that neither closes nor
// answers during a planned handover, with a drain longer than the
// server's own linger, leaves the next leader the whole lease bound.
func TestDrainGivingUpHandsOffTheBound(t *testing.T) {
	const lease = 30 * time.Second
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.HandoverDrain = 4 * time.Second })
	a := c.leader()
	x := holdOn(t, a, "jobs", lease) // never reads its SHUTDOWN, never closes
	defer x.Conn.Close()
	// A leadership lost during the drain (a loaded machine) fails the
	// commit: the next leader then takes the crash grace, which must
	// cover the holders just the same.
	if err := a.node.Handover(); err != nil && !errors.Is(err, server.ErrNotLeader) {
		t.Fatalf("handover: %v", err)
	}
	next := c.leaderExcept(a)
	if g := next.srv.GraceRemaining(); g < lease-5*time.Second {
		t.Fatalf("after a handover whose holder stayed open: grace %v, want about the bound %v", g, lease)
	}
}

// TestLoweringRacesFastPath: an ACQUIRE with a long lease that arrives
// while a lower bound is being committed is not admitted on the old
// bound: it waits, and raises the bound again before it is answered.
//
// The ACQUIRE is made to arrive inside the lowering: the hook, which runs
// just before the lower bound is committed, waits until NoteLease has
// noted the ACQUIRE's lease (it has then read the bound it would be
// admitted on). And the cluster's leader lease is long: a loaded machine
// that stalls the leader for a moment must not end its term (NOT_LEADER)
// in the middle of the race.
func TestLoweringRacesFastPath(t *testing.T) {
	const long = 5 * time.Minute
	c := newTestCluster(t, 3, func(cfg *Config) {
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 2*time.Second, 2*time.Second, 2*time.Second
	})
	l := c.leader()
	first := holdOn(t, l, "long", long) // raises the bound to 5 min
	first.Conn.Close()
	admitted := make(chan *batontest.Conn, 1)
	inside := make(chan bool, 1)
	hook := func() {
		go func() {
			conn, got := acquire(t, l.addr, "again", long, false)
			if got.Type != wire.TypeAcquired {
				t.Errorf("ACQUIRE during the lowering: got %v", got)
			}
			admitted <- conn
		}()
		// The ACQUIRE has passed NoteLease's look at the bound once its
		// lease is noted; the lowering then commits.
		deadline := time.Now().Add(settle)
		for time.Duration(l.node.noted.Load()) < long && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		inside <- time.Duration(l.node.noted.Load()) >= long
	}
	l.node.beforeLowerCommit.Store(&hook)
	var conn *batontest.Conn
	select {
	case conn = <-admitted:
	case <-time.After(2 * settle):
		t.Fatal("no lowering was attempted, or the ACQUIRE never got an answer")
	}
	defer conn.Conn.Close()
	if !<-inside {
		t.Fatal("the ACQUIRE did not reach NoteLease while the lowering waited: the race was not run")
	}
	// The lowering commits after the hook; then later looks pass.
	time.Sleep(5 * testConfig("x").BoundLowerEvery)
	if b := l.node.bound(); b < long {
		t.Fatalf("a session holds with a %v lease while the committed bound is %v", long, b)
	}
}

// TestGraceShrinksOnceServed: a leader that has served its whole grace
// records it, and a crash after that leaves the next leader only its own
// clients to cover: the grace it inherited does not pass on for ever.
func TestGraceShrinksOnceServed(t *testing.T) {
	const lease = 3 * time.Second
	c := newTestCluster(t, 3)
	a := c.leader()
	x := holdOn(t, a, "jobs", lease)
	c.isolate(a) // x may believe for its lease: b inherits about 3 s
	b := c.leaderExcept(a)
	if g := b.srv.GraceRemaining(); g < lease-time.Second {
		t.Fatalf("grace after the first cut %v, want about %v", g, lease)
	}
	x.Conn.Close()
	// b serves its grace, then lowers the bound (nobody needs 3 s now).
	batontest.Eventually(t, settle+lease, func() bool { return b.srv.GraceRemaining() == 0 && b.node.bound() == 0 }, "b did not serve its grace and lower the bound (grace %v, bound %v)", b.srv.GraceRemaining(), b.node.bound())
	batontest.Eventually(t, settle, func() bool { return b.node.fsm.get().GraceServed }, "b did not record its grace as served")
	c.connectAll() // a back, as a follower: a quorum without b
	batontest.Eventually(t, settle, func() bool { return a.node.fsm.get().GraceServed }, "a did not catch up")
	c.isolate(b)
	next := c.leaderExcept(b)
	if g := next.srv.GraceRemaining(); g > time.Second {
		t.Fatalf("grace after a crash of a leader that had served its grace: %v, want only its own clients' (bound 0 + 2 x leader lease)", g)
	}
}
