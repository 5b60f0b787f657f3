package server_test

import (
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
)

// TestLimitSessions: with MaxSessions sessions in the table, the next
// ACQUIRE gets OVERLOADED; the sessions in place are not disturbed, and a
// place freed is usable again. Connections that have not sent ACQUIRE do
// not count.
func TestLimitSessions(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t, maxSessions(2))
	reg := ts.Srv.Registry()
	batontest.Dial(t, ts.Addr) // connected, no ACQUIRE: not a session yet
	a, tokA := hold(t, ts, "a", longLease)
	w := queue(t, ts, "a", longLease, 1) // waiters count too

	for _, name := range []string{"b", "a"} {
		c := batontest.Dial(t, ts.Addr)
		c.Acquire(name, longLease, false, "")
		expectError(t, c, wire.CodeOverloaded)
		c.Conn.Close()
	}
	if got := metric(t, reg, "baton_limit_refusals_total", "limit=sessions"); got != 2 {
		t.Fatalf("limit_refusals{sessions} = %v, want 2", got)
	}
	expectHolds(t, a, tokA)
	expectQueued(t, w, 1)

	// A place freed (by a kick, which takes effect at once) is usable.
	lv, _ := ts.Srv.Lock("a")
	if _, err := ts.Srv.Kick(lv.Waiters[0].ID); err != nil {
		t.Fatal(err)
	}
	expectError(t, w, wire.CodeKicked)
	b, tokB := hold(t, ts, "b", longLease)
	expectHolds(t, b, tokB)
	expectHolds(t, a, tokA)
}

// TestLimitWaiters: a lock's queue takes MaxWaitersPerLock waiters; the
// next is refused with OVERLOADED, and other locks are not affected.
func TestLimitWaiters(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t, maxWaiters(2))
	reg := ts.Srv.Registry()
	h, tok := hold(t, ts, "full", longLease)
	w1 := queue(t, ts, "full", longLease, 1)
	w2 := queue(t, ts, "full", longLease, 2)

	over := batontest.Dial(t, ts.Addr)
	over.Acquire("full", longLease, false, "")
	expectError(t, over, wire.CodeOverloaded)
	if got := metric(t, reg, "baton_limit_refusals_total", "limit=waiters"); got != 1 {
		t.Fatalf("limit_refusals{waiters} = %v, want 1", got)
	}
	if got := metric(t, reg, "baton_limit_refusals_total", "limit=sessions"); got != 0 {
		t.Fatalf("limit_refusals{sessions} = %v, want 0", got)
	}
	expectHolds(t, h, tok)
	expectQueued(t, w1, 1)
	expectQueued(t, w2, 2)

	// NOWAIT on the full lock is BUSY (held), not OVERLOADED.
	nw := batontest.Dial(t, ts.Addr)
	nw.Acquire("full", longLease, true, "")
	expectError(t, nw, wire.CodeBusy)

	// Another lock queues as usual.
	hold(t, ts, "other", longLease)
	queue(t, ts, "other", longLease, 1)
	queue(t, ts, "other", longLease, 2)

	// A promotion frees a place in the queue.
	h.Conn.Close()
	expectPush(t, w1, frameWait)
	queue(t, ts, "full", longLease, 2)
}

// TestLimitFlood: a connection flood beyond the session limit. With the
// table full, 300 concurrent ACQUIREs are all refused with OVERLOADED, and
// then 1100 connections that send nothing overrun the cap on open
// connections (MaxSessions+1024) and the excess is closed at once. All the
// while the holders and waiters in place keep their locks, places and
// tokens, and every heartbeat of theirs is answered.
//
// Not parallel: the flood would starve the timing tests of the package.
func TestLimitFlood(t *testing.T) {
	const limit = 20
	ts := batontest.StartServer(t, maxSessions(limit), ioTimeout(time.Second))
	reg := ts.Srv.Registry()
	type held struct {
		c   *batontest.Conn
		tok uint64
	}
	var holders []held
	var waiters []*batontest.Conn
	for i := range limit / 2 {
		name := fmt.Sprintf("in-place-%d", i)
		c, tok := hold(t, ts, name, longLease)
		holders = append(holders, held{c, tok})
		waiters = append(waiters, queue(t, ts, name, longLease, 1))
	}
	heartbeatAll := func() {
		t.Helper()
		for _, h := range holders {
			expectHolds(t, h.c, h.tok)
		}
		for _, w := range waiters {
			expectQueued(t, w, 1)
		}
	}

	// flood runs f on n connections at once and heartbeats the sessions in
	// place until every one of them is done.
	flood := func(n int, f func(nc net.Conn) error) []error {
		errs := make(chan error, n)
		for i := range n {
			go func() {
				nc, err := net.DialTimeout("tcp", ts.Addr, frameWait)
				if err != nil {
					errs <- fmt.Errorf("flood connection %d: dial: %v", i, err)
					return
				}
				defer nc.Close()
				nc.SetDeadline(time.Now().Add(2 * frameWait))
				errs <- f(nc)
			}()
		}
		var failed []error
		for done := 0; done < n; {
			select {
			case err := <-errs:
				done++
				if err != nil {
					failed = append(failed, err)
				}
			case <-time.After(10 * time.Millisecond):
				heartbeatAll()
			}
		}
		return failed
	}

	// The ACQUIREs, of locks held and free: every one OVERLOADED.
	errs := flood(300, func(nc net.Conn) error {
		name := []string{"in-place-0", "flood"}[len(nc.LocalAddr().String())%2]
		if _, err := nc.Write(acquireFrame(1, 0, 30000, name, "flood")); err != nil {
			return err
		}
		c := &batontest.Conn{Conn: nc}
		f, err := c.TryReadFrame(2 * frameWait)
		if err != nil {
			return err
		}
		if f.Type != wire.TypeError || f.Err.Code != wire.CodeOverloaded {
			return fmt.Errorf("flood ACQUIRE of %q: got %v, want ERROR OVERLOADED", name, f)
		}
		return nil
	})
	for _, err := range errs {
		t.Error(err)
	}
	if got := metric(t, reg, "baton_limit_refusals_total", "limit=sessions"); got != 300 {
		t.Errorf("limit_refusals{sessions} = %v, want 300", got)
	}
	seenCodes.Store(wire.CodeOverloaded, struct{}{})

	// Silent connections past the cap on open connections: the excess is
	// closed at once, the rest when their first frame is overdue.
	var closedAtOnce atomic.Int64
	errs = flood(limit+1024+80, func(nc net.Conn) error {
		began := time.Now()
		c := &batontest.Conn{Conn: nc}
		f, err := c.TryReadFrame(2 * frameWait)
		if err == nil && f.Type != wire.TypeError {
			return fmt.Errorf("a silent connection got %v, want a close (or an ERROR at io-timeout)", f)
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return fmt.Errorf("a silent connection is still open after %v: want it closed at once or at io-timeout", time.Since(began))
		}
		if time.Since(began) < 500*time.Millisecond {
			closedAtOnce.Add(1)
		}
		return nil
	})
	for _, err := range errs {
		t.Error(err)
	}
	if got := metric(t, reg, "baton_limit_refusals_total", "limit=connections"); got == 0 {
		t.Error("limit_refusals{connections} = 0, want the connections past the cap refused")
	}
	heartbeatAll()
	if got := metric(t, reg, "baton_sessions_ended_total", "reason=lease_expired"); got != 0 {
		t.Errorf("sessions_ended{lease_expired} = %v: a session in place was lost during the flood", got)
	}
	t.Logf("flood: 300 ACQUIREs refused with OVERLOADED; %d silent connections, %v closed at once past the cap, %d within 500ms",
		limit+1024+80, metric(t, reg, "baton_limit_refusals_total", "limit=connections"), closedAtOnce.Load())
}
