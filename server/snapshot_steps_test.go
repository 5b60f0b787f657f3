package server_test

import (
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
)

// heartbeatP50 is the median round trip of n heartbeats of holder c.
func heartbeatP50(t *testing.T, c *batontest.Conn, n int) time.Duration {
	t.Helper()
	rtts := make([]time.Duration, n)
	for i := range rtts {
		start := time.Now()
		c.Heartbeat()
		if f := c.ReadFrame(frameWait); f.Type != wire.TypeAcquired {
			t.Fatalf("heartbeat %d: got %v, want ACQUIRED", i, f)
		}
		rtts[i] = time.Since(start)
	}
	slices.Sort(rtts)
	return rtts[n/2]
}

// TestLocksDoesNotHoldTheTable: listing the locks (GET /v1/locks) with
// thousands of waiters in the table copies it in steps, between which the mutex
// that grants is free: a holder's heartbeats, answered under that mutex,
// keep their round trip while an operator's tool lists the locks without
// pause. Every waiter is listed once, in queue order.
func TestLocksDoesNotHoldTheTable(t *testing.T) {
	ts := batontest.StartServer(t)
	hb, _ := hold(t, ts, "hb", longLease)
	hold(t, ts, "big", longLease)
	const waiters = 6000 // two descriptors each, in this one process
	for i := range waiters {
		c := batontest.Dial(t, ts.Addr)
		c.Acquire("big", longLease, false, "w"+strconv.Itoa(i))
	}
	batontest.Eventually(t, 60*time.Second, func() bool {
		lv, _ := ts.Srv.Lock("big")
		return len(lv.Waiters) == waiters
	}, "%d waiters not queued", waiters)

	locks := ts.Srv.Locks()
	again, _ := ts.Srv.Lock("big") // the queue did not move: the same, in order
	if len(locks) != 2 || len(locks[0].Waiters) != waiters || len(again.Waiters) != waiters {
		t.Fatalf("listing: %d locks, want big with %d waiters and hb", len(locks), waiters)
	}
	seen := map[string]bool{}
	for i, w := range locks[0].Waiters {
		if seen[w.ID] || again.Waiters[i].ID != w.ID {
			t.Fatalf("waiter %d: session %s listed twice or out of queue order", i, w.ID)
		}
		seen[w.ID] = true
	}

	const beats = 300
	alone := heartbeatP50(t, hb, beats)
	var (
		stop   atomic.Bool
		listed atomic.Int64
	)
	done := make(chan struct{})
	go func() { // one tool polling without pause: one CPU, the other is the server's
		defer close(done)
		for !stop.Load() {
			ts.Srv.Locks()
			listed.Add(1)
		}
	}()
	var rtts []time.Duration
	pollStart := time.Now()
	for len(rtts) < beats || listed.Load() < 20 { // beside 20 listings at least
		rtts = append(rtts, heartbeatP50(t, hb, 1))
	}
	stop.Store(true)
	<-done
	slices.Sort(rtts)
	polled, n := rtts[len(rtts)/2], listed.Load()
	t.Logf("heartbeat p50: %v alone, %v beside %d listings of %d waiters (%v each)", alone, polled, n, waiters, time.Since(pollStart)/time.Duration(n))
	if limit := 4*alone + time.Millisecond; polled > limit {
		t.Fatalf("heartbeat p50 %v beside a polling tool, %v alone: want at most %v (the listing holds the table)", polled, alone, limit)
	}
}
