package server_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/server"
)

// nextEvent waits for the subscription's next event.
func nextEvent(t *testing.T, sub *server.Subscription) server.Event {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		evs, more, err := sub.Read(nil, 1)
		if err != nil {
			t.Fatalf("read events: %v", err)
		}
		if len(evs) == 1 {
			return evs[0]
		}
		select {
		case <-more:
		case <-deadline:
			t.Fatal("no event within 5s")
		}
	}
}

// readAll reads what the subscription has now.
func readAll(t *testing.T, sub *server.Subscription) []server.Event {
	t.Helper()
	evs, _, err := sub.Read(nil, 1<<30)
	if err != nil {
		t.Fatalf("read events: %v", err)
	}
	return evs
}

func expectEvent(t *testing.T, sub *server.Subscription, typ, lock, owner string) server.Event {
	t.Helper()
	e := nextEvent(t, sub)
	if e.Type != typ || e.Lock != lock || e.Session.Owner != owner {
		t.Fatalf("got event %s %q owner %q, want %s %q owner %q", e.Type, e.Lock, e.Session.Owner, typ, lock, owner)
	}
	return e
}

func TestEventsFollowTheTable(t *testing.T) {
	ts := batontest.StartServer(t)
	res := ts.Srv.Subscribe(server.SubscribeRequest{})
	sub := res.Sub
	defer sub.Close()

	a, tokA := hold(t, ts, "ev", time.Minute)
	b := queue(t, ts, "ev", time.Minute, 1)
	c := queue(t, ts, "ev", time.Minute, 2)
	d := queue(t, ts, "ev", 50*time.Millisecond, 3)

	g := expectEvent(t, sub, server.EventGranted, "ev", "test:ev")
	if g.Session.Token != tokA || g.Seq != res.Seq+1 || g.Session.Remote == "" {
		t.Fatalf("granted event %+v: want token %d, seq %d and a remote", g, tokA, res.Seq+1)
	}
	for range 3 {
		expectEvent(t, sub, server.EventQueued, "ev", "test:ev")
	}
	// d never heartbeats: it expires as a waiter.
	if e := expectEvent(t, sub, server.EventExpired, "ev", "test:ev"); e.Session.Held {
		t.Fatalf("expired waiter shown as holder: %+v", e)
	}
	expectError(t, d, wire.CodeLeaseExpired)

	a.Conn.Close() // the release
	expectEvent(t, sub, server.EventReleased, "ev", "test:ev")
	g = expectEvent(t, sub, server.EventGranted, "ev", "test:ev")
	expectPush(t, b, 5*time.Second)
	if g.Session.Token <= tokA || !g.Session.Held {
		t.Fatalf("promotion event %+v: want a holder with a token above %d", g, tokA)
	}

	if _, err := ts.Srv.Kick(mustWaiterID(t, ts, "ev")); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, sub, server.EventKicked, "ev", "test:ev")
	expectError(t, c, wire.CodeKicked)

	if _, err := ts.Srv.ForceRelease("ev"); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, sub, server.EventForceReleased, "ev", "test:ev")

	e := hold2(t, ts, "other")
	expectEvent(t, sub, server.EventGranted, "other", "test:other")
	e.Conn.Close()
	expectEvent(t, sub, server.EventReleased, "other", "test:other")
}

func hold2(t *testing.T, ts *batontest.Server, name string) *batontest.Conn {
	t.Helper()
	c, _ := hold(t, ts, name, time.Minute)
	return c
}

func mustWaiterID(t *testing.T, ts *batontest.Server, name string) string {
	t.Helper()
	l, ok := ts.Srv.Lock(name)
	if !ok || len(l.Waiters) == 0 {
		t.Fatalf("lock %q has no waiter", name)
	}
	return l.Waiters[0].ID
}

func TestEventsResumeFilterAndResync(t *testing.T) {
	ts := batontest.StartServer(t)
	for range 3 {
		c, _ := hold(t, ts, "r1", time.Minute)
		c.Conn.Close()
		batontest.Eventually(t, 5*time.Second, func() bool { _, ok := ts.Srv.Lock("r1"); return !ok }, "r1 still held")
	}
	c, _ := hold(t, ts, "r2", time.Minute)
	defer c.Conn.Close()

	// 3 grants and 3 releases of r1, then a grant of r2: seq 1..7.
	res := ts.Srv.Subscribe(server.SubscribeRequest{Resume: true, After: 2, Lock: "r1"})
	evs := readAll(t, res.Sub)
	res.Sub.Close()
	if res.Resync || res.Seq != 7 || len(evs) != 4 || evs[0].Seq != 3 || evs[3].Seq != 6 {
		t.Fatalf("resume after 2 of r1: resync %v seq %d events %+v, want seq 7 and events 3..6", res.Resync, res.Seq, evs)
	}
	res = ts.Srv.Subscribe(server.SubscribeRequest{Resume: true, After: 7})
	if evs := readAll(t, res.Sub); res.Resync || len(evs) != 0 || res.Locks != nil {
		t.Fatalf("resume at the head: %+v %v, want nothing", res, evs)
	}
	res.Sub.Close()
	if _, _, err := res.Sub.Read(nil, 1); !errors.Is(err, server.ErrSubscriptionClosed) {
		t.Fatalf("read after close: %v, want ErrSubscriptionClosed", err)
	}
	// A seq from the future (another run of the server) needs a resync.
	res = ts.Srv.Subscribe(server.SubscribeRequest{Resume: true, After: 99})
	res.Sub.Close()
	if !res.Resync || len(res.Locks) != 1 || res.Locks[0].Name != "r2" {
		t.Fatalf("resume after 99: resync %v locks %+v, want a resync with r2", res.Resync, res.Locks)
	}
	res = ts.Srv.Subscribe(server.SubscribeRequest{Snapshot: true, Lock: "r2"})
	res.Sub.Close()
	if len(res.Locks) != 1 || res.Locks[0].Holder == nil {
		t.Fatalf("snapshot of r2: %+v", res.Locks)
	}
}

func TestEventsHistoryIsBounded(t *testing.T) {
	ts := batontest.StartServer(t)
	stuck := ts.Srv.Subscribe(server.SubscribeRequest{}).Sub // never reads
	defer stuck.Close()
	// Rounds of 500 sessions on 500 locks, each a grant and a release, past
	// the history's size.
	for round := range server.EventHistory/1000 + 1 {
		conns := make([]*batontest.Conn, 500)
		for i := range conns {
			conns[i] = batontest.Dial(t, ts.Addr)
			conns[i].Acquire(fmt.Sprintf("h-%d", i), time.Minute, false, "")
		}
		for _, c := range conns {
			expectAcquired(t, c)
			c.Conn.Close()
		}
		batontest.Eventually(t, 10*time.Second, func() bool { return len(ts.Srv.Locks()) == 0 }, "locks still held (round %d)", round)
	}
	if _, _, err := stuck.Read(nil, 1); !errors.Is(err, server.ErrFellBehind) {
		t.Fatalf("a subscriber a whole history behind: got %v, want ErrFellBehind", err)
	}
	res := ts.Srv.Subscribe(server.SubscribeRequest{Resume: true, After: 1})
	res.Sub.Close()
	if !res.Resync {
		t.Fatalf("resume after seq 1 of %d events: no resync", res.Seq)
	}
	res = ts.Srv.Subscribe(server.SubscribeRequest{Resume: true, After: res.Seq - server.EventHistory})
	evs := readAll(t, res.Sub)
	res.Sub.Close()
	if res.Resync || len(evs) != server.EventHistory {
		t.Fatalf("resume from the oldest kept event: resync %v, %d events, want %d", res.Resync, len(evs), server.EventHistory)
	}
}

func TestEventsEndAtShutdown(t *testing.T) {
	ts := batontest.StartServer(t)
	sub := ts.Srv.Subscribe(server.SubscribeRequest{}).Sub
	_, more, err := sub.Read(nil, 1)
	if err != nil || more == nil {
		t.Fatalf("read of an empty feed: %v %v", more, err)
	}
	ts.Stop(t)
	select {
	case <-more:
	case <-time.After(5 * time.Second):
		t.Fatal("a waiting subscriber was not woken by Shutdown")
	}
	if _, _, err := sub.Read(nil, 1); !errors.Is(err, server.ErrSubscriptionClosed) {
		t.Fatalf("read after Shutdown: %v, want ErrSubscriptionClosed", err)
	}
}
