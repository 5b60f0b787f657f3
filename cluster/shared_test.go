package cluster

import (
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
)

// acquireShared opens a shared claim (protocol v2) of name with limit and
// returns it with its first answer.
func acquireShared(t *testing.T, addr, name string, limit uint16, lease time.Duration) (*batontest.Conn, batontest.Frame) {
	t.Helper()
	conn := batontest.Dial(t, addr)
	conn.AcquireV2(name, lease, true, limit, false, "test")
	return conn, conn.ReadFrame(5 * time.Second)
}

// grantedShared opens n shared claims of name on the leader at addr and
// returns their tokens, in order; a claim answered WAITING (a grace) is
// read until its push.
func grantedShared(t *testing.T, addr, name string, n int, limit uint16, leases ...time.Duration) ([]*batontest.Conn, []uint64) {
	t.Helper()
	var conns []*batontest.Conn
	var toks []uint64
	for i := range n {
		lease := 5 * time.Second
		if i < len(leases) {
			lease = leases[i]
		}
		c, f := acquireShared(t, addr, name, limit, lease)
		if f.Type == wire.TypeWaiting {
			f = c.ReadFrame(10 * time.Second)
		}
		if f.Type != wire.TypeAcquired {
			t.Fatalf("shared claim %d of %q: got %v, want ACQUIRED", i, name, f)
		}
		conns = append(conns, c)
		toks = append(toks, f.Token)
	}
	return conns, toks
}

// TestSharedGrantsAcrossFailover: a semaphore's holders on a leader that
// loses its term all hear NOT_LEADER; the next leader's grace covers the
// longest lease of any of them (the lease bound is raised by every
// ACQUIRE, shared or not), and when it ends the shared waiters queued
// meanwhile are granted together, in queue order, with tokens above every
// token of the earlier terms. Twice, so that the rise holds across any
// number of failovers.
func TestSharedGrantsAcrossFailover(t *testing.T) {
	c := newTestCluster(t, 3)
	l := c.leader()
	// Leases the test outlives without heartbeats; the middle one longest.
	const longest = 3 * time.Second
	holders, toks := grantedShared(t, l.addr, "sem", 3, 3, 2*time.Second, longest, 2500*time.Millisecond)
	highest := toks[0]
	for i, tok := range toks {
		if i > 0 && tok <= toks[i-1] {
			t.Fatalf("tokens %v: want them rising in grant order", toks)
		}
		highest = max(highest, tok)
	}
	f := c.other(l)
	batontest.Eventually(t, settle, func() bool { return f.node.bound() >= longest }, "follower's lease bound %v, want the longest holder's lease %v", f.node.bound(), longest)

	for round := range 2 {
		moved := time.Now()
		if err := l.node.r().LeadershipTransfer().Error(); err != nil {
			t.Fatalf("round %d: leadership transfer: %v", round, err)
		}
		for _, h := range holders {
			wantError(t, h.ReadFrame(5*time.Second), wire.CodeNotLeader)
		}
		// Queued during the grace, granted together at its end. A loaded
		// machine may move the leadership again meanwhile: the waiters then
		// hear NOT_LEADER, as the protocol says, and queue anew.
		var waiters []*batontest.Conn
		var pushes []batontest.Frame
		for attempt := 0; ; attempt++ {
			next := c.leader()
			if next == l && attempt == 0 {
				t.Fatalf("round %d: leadership did not move", round)
			}
			l = next
			waiters = waiters[:0]
			for i := range 3 {
				w, got := acquireShared(t, l.addr, "sem", 3, longest)
				if got.Type != wire.TypeWaiting || got.Position != uint32(i+1) {
					t.Fatalf("round %d: shared claim %d during the grace: got %v, want WAITING %d", round, i, got, i+1)
				}
				waiters = append(waiters, w)
			}
			pushes = awaitPushes(t, waiters, 15*time.Second)
			if pushes[0].Type != wire.TypeError || pushes[0].Err.Code != wire.CodeNotLeader || attempt == 2 {
				break
			}
			for _, w := range waiters {
				w.Conn.Close()
			}
		}
		last := highest
		for i, push := range pushes {
			if push.Type != wire.TypeAcquired || !push.Push {
				t.Fatalf("round %d: waiter %d after the grace: got %v, want the push", round, i, push)
			}
			if push.Token <= last {
				t.Fatalf("round %d: waiter %d: token %#x, want above %#x (every earlier grant, rising in queue order)", round, i, push.Token, last)
			}
			last = push.Token
		}
		if waited := time.Since(moved); waited < longest {
			t.Fatalf("round %d: granted %v after the move, within the longest holder's lease %v", round, waited, longest)
		}
		highest, holders = last, waiters
	}
}

// awaitPushes heartbeats each of conns about every half second, as clients
// keep their waiters alive, until each has its push or within passes; the
// WAITING replies are skipped. It returns each one's push (or the first
// frame that was neither), in the order of conns.
func awaitPushes(t *testing.T, conns []*batontest.Conn, within time.Duration) []batontest.Frame {
	t.Helper()
	out := make([]batontest.Frame, len(conns))
	done := make([]bool, len(conns))
	left := len(conns)
	for deadline := time.Now().Add(within); left > 0 && time.Now().Before(deadline); {
		for i, c := range conns {
			if done[i] {
				continue
			}
			f, err := c.TryReadFrame(500 * time.Millisecond / time.Duration(len(conns)))
			if err != nil {
				c.Heartbeat()
				continue
			}
			if f.Type != wire.TypeWaiting {
				out[i], done[i] = f, true
				left--
			}
		}
	}
	if left > 0 {
		t.Fatalf("%d of %d waiters had no push within %v", left, len(conns), within)
	}
	return out
}
