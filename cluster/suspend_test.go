package cluster

import (
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
)

// TestLeaderLeaseAcrossSuspend: the leader lease counts a suspend of the
// leader's machine: valid before, not after one longer than it, and a
// reply to a send from before the suspend, read after it, does not make
// it valid again; a send after the resume that a quorum acknowledges does.
func TestLeaderLeaseAcrossSuspend(t *testing.T) {
	const timeout = 300 * time.Millisecond
	clk := &batontest.SuspendClock{}
	l := newLeaderLease("n1", timeout, clk.Now)
	l.setConfig(voters([]string{"n1", "n2", "n3"}))
	before := l.since(l.now())
	l.ack("n2", before, 0)
	if !l.valid(l.now()) {
		t.Fatal("not valid right after a quorum acknowledged a send")
	}
	clk.Suspend(10 * time.Second)
	if l.valid(l.now()) {
		t.Fatalf("valid after a suspend of 10s, %v past a lease of %v from the last acknowledged send", 10*time.Second, timeout)
	}
	l.ack("n3", before, 0) // a reply to a send from before the suspend
	if l.valid(l.now()) {
		t.Fatal("valid after a suspend: a reply to a send from before it counted")
	}
	l.ack("n3", l.since(l.now()), 0)
	if !l.valid(l.now()) {
		t.Fatal("not valid after a send from after the resume was acknowledged")
	}
}

// TestSuspendedLeaderFailsClosed: a leader whose machine sleeps past its
// leader lease (its clock jumps; nothing reaches it meanwhile: it is cut
// off, and the others may elect a new leader) confirms nothing when it
// wakes: its holder's next heartbeat gets ERROR NOT_LEADER, at once, not
// the ACQUIRED that the lease, counted on the monotonic clock, would still
// allow.
func TestSuspendedLeaderFailsClosed(t *testing.T) {
	clocks := map[string]*batontest.SuspendClock{}
	c := newTestCluster(t, 3, func(cfg *Config) {
		clocks[cfg.NodeID] = &batontest.SuspendClock{}
		cfg.Now = clocks[cfg.NodeID].Now
	})
	a := c.leader()
	x := holdOn(t, a, "jobs", 30*time.Second)
	defer x.Conn.Close()
	x.Heartbeat()
	if f := x.ReadFrame(5 * time.Second); f.Type != wire.TypeAcquired {
		t.Fatalf("heartbeat before the suspend: got %v, want ACQUIRED", f)
	}
	c.isolate(a)
	clocks[a.id].Suspend(10 * time.Second)
	x.Heartbeat()
	f := x.ReadFrame(5 * time.Second)
	wantError(t, f, wire.CodeNotLeader)
}
