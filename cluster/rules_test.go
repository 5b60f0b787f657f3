package cluster

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
)

// TestLeaderLeaseWithinGrace: the leader's own lease, as a node builds it,
// never outlasts what a crash grace budgets for an old leader: a leader
// cut off keeps confirming for its lease after its last acknowledged
// send, and the next leader's grace counts on nothing longer. Nodes may
// run with different timers; the grace counts the longest recorded.
func TestLeaderLeaseWithinGrace(t *testing.T) {
	short := func(c *Config) { c.LeaderLeaseTimeout = testLeaderLease / 2 }
	c := newTestCluster(t, 3, short)
	l := c.leader()
	for _, tn := range c.nodes {
		llt := tn.node.cfg.LeaderLeaseTimeout
		budget, _ := graceOf(state{GraceServed: true}, llt) // no bound, nothing inherited: the leader lease alone
		if tn.node.lease.timeout != budget {
			t.Errorf("%s: leader lease %v with a leader lease timeout of %v, but a grace budgets %v for it: the lease and the grace must come from one rule",
				tn.id, tn.node.lease.timeout, llt, budget)
		}
	}
	// A grace after a leader with a longer timeout than the new one's
	// budgets the longer.
	st := l.node.fsm.get()
	st.GraceServed = true
	long := 4 * testLeaderLease
	if g, _ := graceOf(st, long); g < st.LeaseBound+newLeaderLease("x", leaderLeaseSpan(long), time.Now).timeout {
		t.Errorf("grace %v after a leader with a %v leader lease timeout, want at least the bound %v plus its lease", g, long, st.LeaseBound)
	}
}

// TestServesAgainOnlyUnderNewEpoch: a leader whose own lease ran out
// fails closed (every session ends with NOT_LEADER) and, while Raft
// still names it leader, serves again only under a new epoch with a
// grace that covers the lease bound: its holders may still believe (they
// were told nothing they must hear), and the tokens of the epoch it
// served must never be handed out again.
func TestServesAgainOnlyUnderNewEpoch(t *testing.T) {
	const lease = 2 * time.Second
	// Timers of a second: a loaded machine's stall must not end the term
	// before the test ends it.
	c := newTestCluster(t, 3, func(cfg *Config) {
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = time.Second, time.Second, time.Second
	})
	l := c.leader()
	// The first leader's own grace (2 x the leader lease) first: the
	// holder waits in it without heartbeats.
	batontest.Eventually(t, settle, func() bool { return l.srv.GraceRemaining() == 0 }, "the first grace does not end")
	h := holdOn(t, l, "jobs", lease)
	defer h.Conn.Close()
	e0 := l.node.epoch.Load()

	// The lease runs out while Raft goes on: the acknowledgements stop
	// counting (a configuration no quorum of which answers), as on a
	// leader stalled past its lease whose Raft has not noticed yet.
	real := l.node.r().GetConfiguration().Configuration()
	l.node.lease.setConfig(func() raft.Configuration {
		conf := real.Clone()
		for _, id := range []raft.ServerID{"ghost-1", "ghost-2", "ghost-3", "ghost-4"} {
			conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: id, Address: raft.ServerAddress(id)})
		}
		return conf
	})
	batontest.Eventually(t, settle, func() bool {
		l.node.lease.until.Store(0)
		return !l.node.MayServe(time.Now())
	}, "the leader lease still holds")
	lapses := l.node.leaseLapses.Load()
	lapsed := time.Now()
	h.Heartbeat()
	if f := h.ReadFrame(5 * time.Second); f.Type != wire.TypeError || f.Err.Code != wire.CodeNotLeader {
		t.Fatalf("holder's heartbeat after the leader lease ran out: got %v, want ERROR NOT_LEADER", f)
	}
	// The holder may read its ERROR before the server has told the node
	// (the ERROR's write runs beside the rest of the failing closed).
	batontest.Eventually(t, settle, func() bool { return l.node.leaseLapses.Load() > lapses }, "the node was not told that its term was lost")
	l.node.lease.setConfig(func() raft.Configuration { return l.node.r().GetConfiguration().Configuration() })

	next := c.leader() // l again, unless Raft moved meanwhile
	e1 := next.node.epoch.Load()
	grace := next.srv.GraceRemaining()
	t.Logf("failed closed in epoch %d; %s serves epoch %d with %v of grace left", e0, next.id, e1, grace.Round(time.Millisecond))
	if e1 <= e0 {
		t.Fatalf("%s serves again in epoch %d after failing closed in epoch %d: the tokens of that epoch would be handed out twice", next.id, e1, e0)
	}
	if min := lease - time.Since(lapsed); grace < min {
		t.Fatalf("%s serves epoch %d with %v of grace left, %v after failing closed, want at least the %v lease bound from then: the holder of epoch %d may still believe",
			next.id, e1, grace, time.Since(lapsed).Round(time.Millisecond), lease, e0)
	}
	_, got := acquire(t, next.addr, "jobs", lease, true)
	wantError(t, got, wire.CodeBusy)
	g := holdOn(t, next, "jobs", 5*lease) // it waits out the grace without a heartbeat
	defer g.Conn.Close()
	if waited := time.Since(lapsed); waited < lease {
		t.Fatalf("granted %v after failing closed, within the %v lease of the holder it ended", waited, lease)
	}
}
